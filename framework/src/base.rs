//! What every component is, whatever its framework: the [`Framework`] it belongs to, its
//! [`ComponentMeta`], and the [`Component`] trait that declares its parameters.
//!
//! The bottom of the component modules: the framework traits ([`crate::btl`], [`crate::pml`],
//! [`crate::mpool`], [`crate::rcache`]) extend [`Component`]; [`crate::component`] gathers them
//! into one reference type above.

use std::fmt;

use crate::params::{ParamError, ParamRegistrar, ParamStore, RawSources};

/// The frameworks of rmca.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Framework {
    /// Point-to-point messaging layer.
    Pml,
    /// Byte transfer layer.
    Btl,
    /// Memory pools.
    Mpool,
    /// Registration caches.
    Rcache,
    /// One-sided communication (windows).
    Osc,
    /// Collective operations.
    Coll,
}

impl Framework {
    /// Every framework, in listing order.
    pub const ALL: [Framework; 6] = [
        Framework::Pml,
        Framework::Btl,
        Framework::Mpool,
        Framework::Rcache,
        Framework::Osc,
        Framework::Coll,
    ];

    /// The framework's name, also its selector parameter's name.
    pub fn name(self) -> &'static str {
        match self {
            Framework::Pml => "pml",
            Framework::Btl => "btl",
            Framework::Mpool => "mpool",
            Framework::Rcache => "rcache",
            Framework::Osc => "osc",
            Framework::Coll => "coll",
        }
    }

    /// Parse a framework name.
    pub fn parse(s: &str) -> Option<Framework> {
        Framework::ALL.into_iter().find(|f| f.name() == s)
    }
}

impl fmt::Display for Framework {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Static description of a component.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComponentMeta {
    /// Short name (`"shm"`), unique within its framework.
    pub name: &'static str,
    /// The component's own version (usually its crate version).
    pub version: &'static str,
    /// One line saying what it is.
    pub description: &'static str,
}

/// What every component implements, whatever its framework.
pub trait Component: Send + Sync {
    /// Name, version, description.
    fn meta(&self) -> ComponentMeta;

    /// Declare the component's MCA parameters. Called once per process, before any value is read.
    fn register_params(&self, params: &mut ParamRegistrar<'_>);
}

/// The parameters `component` (of `framework`) declares, resolved with `settings` applied as
/// `(name, value)` environment settings: what in-process tests, examples and benchmarks of one
/// component run with, without a registry or a launcher.
pub fn component_params(
    framework: Framework,
    component: &dyn Component,
    settings: &[(&str, &str)],
) -> Result<ParamStore, Vec<ParamError>> {
    let mut specs = Vec::new();
    component.register_params(&mut ParamRegistrar::new(
        framework.name(),
        component.meta().name,
        &mut specs,
    ));
    let env = settings
        .iter()
        .map(|(k, v)| (format!("{}{k}", crate::params::ENV_PREFIX), (*v).to_owned()))
        .collect();
    let raw = RawSources::from_parts(None, None, false, env, vec![]).map_err(|e| vec![e])?;
    ParamStore::resolve(specs, &raw)
}
