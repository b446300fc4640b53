//! Components of any framework: [`ComponentRef`], how built-in components register
//! ([`BuiltinComponent`]) and where a registered one came from ([`Origin`]).
//!
//! Built-in components register with [`builtin_component!`](crate::builtin_component) (a
//! [`BuiltinComponent`] collected by `inventory`); plugins hand the same [`ComponentRef`] to the
//! host through their descriptor (see [`crate::plugin`]).
//!
//! This module sits above the framework traits (it names each of them); the items every
//! component author needs from below ([`Component`], [`ComponentMeta`], [`Framework`],
//! [`InitContext`]) are re-exported here so that one `use` line serves a component crate.

use std::fmt;
use std::path::PathBuf;

pub use crate::base::{component_params, Component, ComponentMeta, Framework};
use crate::btl::BtlComponent;
pub use crate::init::InitContext;
use crate::mpool::{MpoolComponent, DEFAULT_MPOOL};
use crate::pml::PmlComponent;
use crate::rcache::{RcacheComponent, LRU_RCACHE};

/// A component of any framework.
#[derive(Clone, Copy)]
pub enum ComponentRef {
    /// A PML.
    Pml(&'static dyn PmlComponent),
    /// A BTL.
    Btl(&'static dyn BtlComponent),
    /// A memory pool.
    Mpool(&'static dyn MpoolComponent),
    /// A registration cache.
    Rcache(&'static dyn RcacheComponent),
    /// A one-sided communication component.
    Osc(&'static dyn crate::osc::OscComponent),
    /// A collective-operations component.
    Coll(&'static dyn crate::coll::CollComponent),
}

impl ComponentRef {
    /// Its framework.
    pub fn framework(&self) -> Framework {
        match self {
            ComponentRef::Pml(_) => Framework::Pml,
            ComponentRef::Btl(_) => Framework::Btl,
            ComponentRef::Mpool(_) => Framework::Mpool,
            ComponentRef::Rcache(_) => Framework::Rcache,
            ComponentRef::Osc(_) => Framework::Osc,
            ComponentRef::Coll(_) => Framework::Coll,
        }
    }

    /// The generic component interface.
    pub fn component(&self) -> &'static dyn Component {
        match *self {
            ComponentRef::Pml(c) => c,
            ComponentRef::Btl(c) => c,
            ComponentRef::Mpool(c) => c,
            ComponentRef::Rcache(c) => c,
            ComponentRef::Osc(c) => c,
            ComponentRef::Coll(c) => c,
        }
    }
}

impl fmt::Debug for ComponentRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.framework(), self.component().meta().name)
    }
}

/// A statically linked component, collected with `inventory`.
pub struct BuiltinComponent {
    /// The component.
    pub component: ComponentRef,
}

impl BuiltinComponent {
    /// Wrap a component for `inventory::submit!` (what [`builtin_component!`](crate::builtin_component) expands to).
    pub const fn new(component: ComponentRef) -> Self {
        Self { component }
    }
}

inventory::collect!(BuiltinComponent);

/// Register a statically linked component of a framework: `builtin_component!(Btl, MY_BTL)`
/// where the first word is the [`ComponentRef`] variant (Pml, Btl, Mpool, Rcache) and the second
/// a `static` implementing that framework's component trait. The registry finds it at start-up
/// (no list to edit); a component crate needs no dependency on `inventory` itself.
#[macro_export]
macro_rules! builtin_component {
    ($framework:ident, $component:path) => {
        $crate::inventory::submit! {
            $crate::component::BuiltinComponent::new(
                $crate::component::ComponentRef::$framework(&$component),
            )
        }
    };
}

// The framework's own defaults, registered like any built-in component.
crate::builtin_component!(Mpool, DEFAULT_MPOOL);
crate::builtin_component!(Rcache, LRU_RCACHE);

/// Where a component in the registry came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Linked into the program.
    Builtin,
    /// Loaded from a plugin file.
    Plugin(PathBuf),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Builtin => f.write_str("built-in"),
            Origin::Plugin(p) => write!(f, "plugin {}", p.display()),
        }
    }
}

/// A component known to this process.
#[derive(Clone, Debug)]
pub struct RegisteredComponent {
    /// The component.
    pub component: ComponentRef,
    /// Where it came from.
    pub origin: Origin,
}

impl RegisteredComponent {
    /// Its metadata.
    pub fn meta(&self) -> ComponentMeta {
        self.component.component().meta()
    }
}
