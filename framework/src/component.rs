//! Components: how they describe themselves, register, and get initialised.
//!
//! Built-in components register a [`BuiltinComponent`] with `inventory::submit!`; plugins hand
//! the same [`ComponentRef`] to the host through their descriptor (see [`crate::plugin`]).

use std::fmt;
use std::path::PathBuf;

use crate::btl::BtlComponent;
use crate::job::JobInfo;
use crate::memory::MemoryAccounting;
use crate::modex::{ModexError, ModexWrite};
use crate::mpool::MpoolComponent;
use crate::params::{ParamError, ParamRegistrar, ParamStore, RawSources};
use crate::pml::PmlComponent;
use crate::rcache::{Rcache, RcacheComponent};

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
}

impl Framework {
    /// Every framework, in listing order.
    pub const ALL: [Framework; 4] = [
        Framework::Pml,
        Framework::Btl,
        Framework::Mpool,
        Framework::Rcache,
    ];

    /// The framework's name, also its selector parameter's name.
    pub fn name(self) -> &'static str {
        match self {
            Framework::Pml => "pml",
            Framework::Btl => "btl",
            Framework::Mpool => "mpool",
            Framework::Rcache => "rcache",
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
}

impl ComponentRef {
    /// Its framework.
    pub fn framework(&self) -> Framework {
        match self {
            ComponentRef::Pml(_) => Framework::Pml,
            ComponentRef::Btl(_) => Framework::Btl,
            ComponentRef::Mpool(_) => Framework::Mpool,
            ComponentRef::Rcache(_) => Framework::Rcache,
        }
    }

    /// The generic component interface.
    pub fn component(&self) -> &'static dyn Component {
        match *self {
            ComponentRef::Pml(c) => c,
            ComponentRef::Btl(c) => c,
            ComponentRef::Mpool(c) => c,
            ComponentRef::Rcache(c) => c,
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
    /// Wrap a component for `inventory::submit!`.
    pub const fn new(component: ComponentRef) -> Self {
        Self { component }
    }
}

inventory::collect!(BuiltinComponent);

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

/// What a component gets at init: the job, the parameters, the modex, the memory accounting.
pub struct InitContext<'a> {
    /// This process and its job.
    pub job: &'a JobInfo,
    /// Resolved parameters.
    pub params: &'a ParamStore,
    /// Where components record the memory they hold.
    pub memory: &'a MemoryAccounting,
    modex: &'a mut dyn ModexWrite,
    rcache: Option<&'static dyn RcacheComponent>,
}

impl<'a> InitContext<'a> {
    /// Build a context.
    pub fn new(
        job: &'a JobInfo,
        params: &'a ParamStore,
        memory: &'a MemoryAccounting,
        modex: &'a mut dyn ModexWrite,
    ) -> Self {
        Self {
            job,
            params,
            memory,
            modex,
            rcache: None,
        }
    }

    /// The same context with `component` as the selected registration cache (the runtime
    /// passes the one the `rcache` selector chose).
    pub fn with_rcache(mut self, component: &'static dyn RcacheComponent) -> Self {
        self.rcache = Some(component);
        self
    }

    /// Name of the registration cache component [`InitContext::create_rcache`] uses.
    pub fn rcache_name(&self) -> &'static str {
        self.rcache
            .unwrap_or(&crate::rcache::LRU_RCACHE as &dyn RcacheComponent)
            .meta()
            .name
    }

    /// A new registration cache for one BTL module, from the selected `rcache` component
    /// (the built-in `lru` when the context was built without one, e.g. in unit tests).
    pub fn create_rcache(&self) -> Box<dyn Rcache> {
        self.rcache
            .unwrap_or(&crate::rcache::LRU_RCACHE as &dyn RcacheComponent)
            .create(self.params)
    }

    /// Publish this process's business card under `key` (namespace it: `"btl.shm"`).
    pub fn modex_put(&mut self, key: &str, value: &[u8]) -> Result<(), ModexError> {
        self.modex.put(key, value)
    }
}

impl fmt::Debug for InitContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InitContext")
            .field("job", &self.job)
            .field("rcache", &self.rcache.map(|c| c.meta().name))
            .finish_non_exhaustive()
    }
}
