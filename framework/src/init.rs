//! What a component gets when it is initialised: [`InitContext`].

use std::fmt;

use crate::job::JobInfo;
use crate::memory::MemoryAccounting;
use crate::modex::{ModexError, ModexWrite};
use crate::params::ParamStore;
use crate::rcache::{Rcache, RcacheComponent};

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
