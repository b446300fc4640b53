//! Runtime init of rmca: bringing a process into its job: the MCA base opens, components are selected and
//! initialised, business cards are exchanged, the BML is built and the PML starts.
//!
//! The sequence (every rank runs it; the fences are job-wide):
//! 1. runtime environment (PMI) → rank, size, node map, job id and secret;
//! 2. parameters from every source, checked against every registered component (plugins too);
//! 3. every allowed BTL component initialises and publishes its card; the PML is chosen and
//!    its name published;
//! 4. fence; every rank checks that all chose the same PML;
//! 5. the BML asks each BTL which peers it reaches and plans routes; the PML starts;
//! 6. fence, so that no rank sends before every peer's receive resources exist.
//!
//! This crate is the only one that ties the framework to the launcher's interface (rte): the
//! framework is what a component or plugin author compiles against, and knows nothing of PMI.
//! It links no component itself: it selects among those the program links (the `rmca` facade
//! links the built-in ones) and the plugins on `component_path`.
#![deny(unsafe_code)]
#![warn(missing_docs)]
// Errors here carry the culprit's source (file path and line) by value; they occur at
// configuration time, never on a message path, so their size costs nothing that matters.
#![allow(clippy::result_large_err)]

pub mod profile;

use std::time::Instant;

use rmca_rte::{Rte, RteError};
use thiserror::Error;

use rmca_framework::bml::{Bml, BmlError};
use rmca_framework::btl::{Btl, ModexRead};
use rmca_framework::component::{Framework, InitContext};
use rmca_framework::job::JobInfo;
use rmca_framework::memory::MemoryAccounting;
use rmca_framework::modex::{ModexError, ModexWrite};
use rmca_framework::params::{ParamStore, RawSetting, RawSources};
use rmca_framework::pml::{Pml, PmlError};
use rmca_framework::registry::{McaError, Registry};

/// Why a process could not join its job.
#[derive(Debug, Error)]
pub enum InitError {
    /// The launcher interface failed.
    #[error("runtime environment: {0}")]
    Rte(#[from] RteError),
    /// Parameters or component selection are wrong.
    #[error("{0}")]
    Mca(#[from] McaError),
    /// A component asked for explicitly failed to initialise.
    #[error("{framework} component '{name}' was requested but failed to initialise: {reason}")]
    ComponentFailed {
        /// Framework.
        framework: Framework,
        /// Component.
        name: String,
        /// Why.
        reason: String,
    },
    /// Ranks run with different values of a parameter every rank must share.
    #[error("ranks disagree on job-wide MCA parameters: {0}; set them the same for every rank")]
    ParamDisagreement(String),
    /// Ranks selected different PMLs.
    #[error("ranks disagree on the PML: {0}; set the same 'pml' parameter for every rank")]
    PmlMismatch(String),
    /// Wiring up peers failed.
    #[error("{0}")]
    Bml(#[from] BmlError),
    /// The PML failed to start.
    #[error("{0}")]
    Pml(#[from] PmlError),
    /// `mpi_wait_mode` names no wait mode.
    #[error(transparent)]
    WaitMode(#[from] rmca_framework::progress::BadWaitMode),
}

/// The modex as seen through the runtime environment.
pub struct RteModex<'a>(pub &'a Rte);

impl ModexWrite for RteModex<'_> {
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), ModexError> {
        self.0
            .modex_put(key, value)
            .map_err(|e| ModexError::Rte(e.to_string()))
    }
}

impl ModexRead for RteModex<'_> {
    fn get(&self, rank: u32, key: &str) -> Result<Option<Vec<u8>>, ModexError> {
        self.0
            .modex_get(rank, key)
            .map_err(|e| ModexError::Rte(e.to_string()))
    }
}

/// A process that joined its job.
pub struct Runtime {
    /// This process and its job.
    pub job: JobInfo,
    /// Resolved parameters.
    pub params: ParamStore,
    /// Known components.
    pub registry: Registry,
    /// Memory held per component.
    pub memory: MemoryAccounting,
    /// Event counts of the components outside the PML (windows' modules), for the profile.
    pub counters: rmca_framework::counters::CounterRegistry,
    /// The PML carrying this process's messages.
    pub pml: Box<dyn Pml>,
    /// Names of the BTL modules in use.
    pub btl_names: Vec<String>,
    /// Progress functions registered beside the PML.
    pub progress_engine: rmca_framework::progress::ProgressEngine,
    rte: Rte,
    init_time: std::time::Duration,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("job", &self.job)
            .field("pml", &self.pml.component_name())
            .field("btls", &self.btl_names)
            .finish_non_exhaustive()
    }
}

/// Count of CPUs the launcher may use, given by rmca-run to the ranks it starts on its node.
const ENV_NODE_CPUS: &str = "RMCA_NODE_CPUS";
/// Slurm's count of the job's CPUs on this node: what a rank that srun bound to one core
/// cannot see in its own affinity mask.
const ENV_SLURM_NODE_CPUS: &str = "SLURM_CPUS_ON_NODE";

/// The node's CPU count as the launcher knows it: rmca-run's, else Slurm's.
fn launcher_node_cpus() -> Option<String> {
    std::env::var(ENV_NODE_CPUS)
        .or_else(|_| std::env::var(ENV_SLURM_NODE_CPUS))
        .ok()
}

/// Whether this node's ranks outnumber its CPUs. The launcher's count of CPUs wins: a rank
/// that rmca-run bound to one core sees a single CPU in its own affinity mask
/// ([`JobInfo::oversubscribed`] would call every bound job oversubscribed).
fn node_oversubscribed(job: &JobInfo, launcher_cpus: Option<&str>) -> bool {
    match launcher_cpus.and_then(|v| v.trim().parse::<usize>().ok()) {
        Some(cpus) if cpus > 0 => job.local_ranks().len() > cpus,
        _ => job.oversubscribed(),
    }
}

/// `mpi_wait_mode`, with `auto` resolved for this node.
fn resolve_wait_mode(
    params: &rmca_framework::params::ParamStore,
    job: &JobInfo,
) -> Result<rmca_framework::progress::WaitMode, InitError> {
    use rmca_framework::progress::WaitMode;
    // The parameter is an enumeration: the store already refused other names, naming the
    // valid ones; this parse cannot fail for a value it let through.
    let mode: WaitMode = params.get_str("mpi_wait_mode").unwrap_or("auto").parse()?;
    let cpus = launcher_node_cpus();
    Ok(mode.resolve(node_oversubscribed(job, cpus.as_deref())))
}

/// Block mode sleeps on a doorbell only shm's senders ring. On one node shm (and self)
/// reach every peer, outranking the network BTLs by exclusivity; in a job that spans nodes
/// a network BTL carries messages that would wait out a sleep's timeout, so waits yield
/// instead.
fn blocking_needs_doorbells(
    mode: rmca_framework::progress::WaitMode,
    btls: &[Box<dyn Btl>],
    spans_nodes: bool,
) {
    use rmca_framework::progress::{self, WaitMode};
    if mode != WaitMode::Block || !spans_nodes {
        return;
    }
    if let Some(other) = btls
        .iter()
        .map(|b| b.component_name())
        .find(|n| !matches!(*n, "shm" | "self"))
    {
        tracing::info!(
            btl = other,
            "mpi_wait_mode block: btl {other} cannot wake a sleeping rank, waits yield instead"
        );
        progress::set_wait_mode(WaitMode::Yield);
        progress::set_idle_waiter(None);
    }
}

impl Runtime {
    /// Join the job. `cmdline` holds settings from the program's own `--mca` flags, if it parses
    /// any (the launcher's flags arrive through the environment).
    pub fn init(cmdline: Vec<RawSetting>) -> Result<Self, InitError> {
        let started = Instant::now();
        rmca_framework::job::set_closing(false);
        let rte = Rte::init()?;
        let raw = RawSources::gather(cmdline).map_err(McaError::from)?;
        let registry = Registry::discover(&raw);
        let params = registry.resolve(&raw)?;
        registry.check_selectors(&params)?;
        let node_of: Vec<u32> = (0..rte.size())
            .map(|r| rte.node_id(r))
            .collect::<Result<_, _>>()?;
        let nodes = node_of.iter().copied().max().map_or(1, |m| m + 1);
        let job = JobInfo {
            rank: rte.rank(),
            size: rte.size(),
            job_id: rte.job_id().to_owned(),
            secret: rte.job_secret().to_vec(),
            node_of,
            node_names: (0..nodes)
                .map(|n| {
                    rte.node_name(n)
                        .map_or_else(|| format!("node{n}"), str::to_owned)
                })
                .collect(),
        };
        // Every PML busy-polls its BTLs: spin when each local rank has a core; when the node
        // is oversubscribed (`auto`), spin, yield, then sleep until a sender rings (see
        // rmca_framework::progress). Set before the BTLs start: they install the doorbell.
        let wait_mode = resolve_wait_mode(&params, &job)?;
        rmca_framework::progress::set_wait_mode(wait_mode);
        // Read by the bindings that run a progress thread (the C library's MPI_Init).
        rmca_framework::progress::set_async_progress(
            rmca_framework::progress::AsyncProgress::from_params(&params),
        );
        let threshold = |name| {
            params
                .get_int(name)
                .map(|v| v.clamp(0, u32::MAX.into()) as u32)
                .map_err(McaError::from)
        };
        rmca_framework::progress::set_wait_thresholds(
            threshold("mpi_wait_spin_passes")?,
            threshold("mpi_wait_yield_us")?,
        );
        tracing::debug!(mode = wait_mode.name(), "idle policy");
        let memory = MemoryAccounting::new();
        let btl_sel = registry.selector(&params, Framework::Btl)?;
        let mut btls: Vec<Box<dyn Btl>> = Vec::new();
        let mut writer = RteModex(&rte);
        // The registration cache BTLs get (`--mca rcache <name>`); an unknown name already
        // failed check_selectors above with the list of valid ones.
        let rcache = match registry.select_one(&params, Framework::Rcache)? {
            rmca_framework::component::ComponentRef::Rcache(c) => c,
            _ => unreachable!("select_one(Rcache) yields an rcache component"),
        };
        for comp in registry.select_btls(&params)? {
            let name = comp.meta().name;
            let mut ctx = InitContext::new(&job, &params, &memory, &mut writer).with_rcache(rcache);
            match comp.init(&mut ctx) {
                Ok(mut modules) => {
                    tracing::debug!(btl = name, modules = modules.len(), "btl initialised");
                    btls.append(&mut modules);
                }
                Err(e) if btl_sel.explicitly_includes(name) => {
                    return Err(InitError::ComponentFailed {
                        framework: Framework::Btl,
                        name: name.to_owned(),
                        reason: e.to_string(),
                    })
                }
                Err(e) => tracing::warn!(btl = name, "btl not used: {e}"),
            }
        }
        blocking_needs_doorbells(wait_mode, &btls, job.node_names.len() > 1);
        let mut pml_comp = registry.select_pml(&params)?;
        let pml_name = pml_comp.meta().name;
        writer
            .put("mca.pml", pml_name.as_bytes())
            .map_err(|e| RteError::Protocol(e.to_string()))?;
        // What this rank can use between nodes without acknowledgements from the PML, for the
        // automatic PML choice of a job that spans nodes (read by every rank after the fence).
        let spans_nodes = job.node_names.len() > 1;
        if spans_nodes {
            writer
                .put(
                    "mca.net_reliable",
                    reliable_network_btls(&btls).join(",").as_bytes(),
                )
                .map_err(|e| RteError::Protocol(e.to_string()))?;
        }
        let job_wide = params.job_wide_settings();
        writer
            .put("mca.job_wide", job_wide.as_bytes())
            .map_err(|e| RteError::Protocol(e.to_string()))?;
        rte.fence()?;
        let reader = RteModex(&rte);
        let mut others = Vec::new();
        for r in 0..job.size {
            let theirs = reader
                .get(r, "mca.pml")
                .map_err(|e| RteError::Protocol(e.to_string()))?;
            let theirs = theirs
                .map(|v| String::from_utf8_lossy(&v).into_owned())
                .unwrap_or_else(|| "<none>".into());
            if theirs != pml_name {
                others.push(format!("rank {r} chose '{theirs}'"));
            }
        }
        // Every rank compares with rank 0 only: if all agree with it they all agree, and the
        // check costs one modex read per rank rather than one per pair. Rank 0 itself does not
        // fail: the ranks that disagree do, and the launcher ends the job.
        let mut theirs = Vec::new();
        if job.rank != 0 {
            let v = reader
                .get(0, "mca.job_wide")
                .map_err(|e| RteError::Protocol(e.to_string()))?
                .unwrap_or_default();
            theirs.push((0, String::from_utf8_lossy(&v).into_owned()));
        }
        let disagree = rmca_framework::params::job_wide_disagreements(job.rank, &job_wide, &theirs);
        if !disagree.is_empty() {
            return Err(InitError::ParamDisagreement(disagree.join("; ")));
        }
        if !others.is_empty() {
            return Err(InitError::PmlMismatch(format!(
                "rank {} chose '{pml_name}', {}",
                job.rank,
                others.join(", ")
            )));
        }
        // The automatic PML choice ('pml' unset) across nodes: ob1 while every pair of ranks on
        // different nodes shares a BTL that delivers reliably (ob1 then leaves unreliable ones
        // unused), dr as soon as one pair can only talk over a BTL that needs acknowledgements.
        // Every rank reads the same cards, so every rank decides the same.
        if spans_nodes && params.get_str("pml").unwrap_or("").trim().is_empty() {
            let sets = (0..job.size)
                .map(|r| {
                    let v = reader
                        .get(r, "mca.net_reliable")
                        .map_err(|e| RteError::Protocol(e.to_string()))?
                        .unwrap_or_default();
                    Ok((
                        job.node_of[r as usize],
                        String::from_utf8_lossy(&v).into_owned(),
                    ))
                })
                .collect::<Result<Vec<_>, RteError>>()?;
            if let Some((a, b)) = pair_without_reliable_btl(&sets) {
                let dr = registry.of(Framework::Pml).find_map(|c| match c.component {
                    rmca_framework::component::ComponentRef::Pml(p) if c.meta().name == "dr" => {
                        Some(p)
                    }
                    _ => None,
                });
                match dr {
                    Some(dr) if pml_name != "dr" => {
                        tracing::info!(
                            rank_a = a,
                            rank_b = b,
                            "pml: dr, since ranks {a} and {b} (on different nodes) share no BTL \
                             that delivers reliably (set --mca pml to choose)"
                        );
                        pml_comp = dr;
                    }
                    _ => {}
                }
            }
        }
        let pml_name = pml_comp.meta().name;
        let btl_names: Vec<String> = btls.iter().map(|b| b.component_name().to_owned()).collect();
        let exclusivity: Vec<Option<u32>> = btl_names
            .iter()
            .map(|name| rmca_framework::registry::btl_exclusivity_override(&params, name))
            .collect();
        let bml = Bml::build_with_exclusivity(btls, &job.procs(), &reader, &exclusivity)?;
        let mut writer = RteModex(&rte);
        let mut ctx = InitContext::new(&job, &params, &memory, &mut writer).with_rcache(rcache);
        let pml = pml_comp.init(&mut ctx, bml)?;
        rte.fence()?;
        let init_time = started.elapsed();
        tracing::debug!(rank = job.rank, ?init_time, pml = pml_name, btls = ?btl_names, "joined the job");
        Ok(Self {
            job,
            params,
            registry,
            memory,
            counters: Default::default(),
            pml,
            btl_names,
            progress_engine: Default::default(),
            rte,
            init_time,
        })
    }

    /// One progress pass: the PML (and its BTLs), then the registered functions.
    pub fn progress(&mut self) -> usize {
        self.pml.progress() + self.progress_engine.run()
    }

    /// Drive progress until `request` completes (the PML's wait tests it first).
    #[inline]
    pub fn wait(
        &mut self,
        request: rmca_framework::pml::RequestId,
    ) -> Result<rmca_framework::pml::Status, PmlError> {
        if self.progress_engine.is_empty() {
            return self.pml.wait(request, None);
        }
        let engine = &mut self.progress_engine;
        let mut between = || engine.run();
        self.pml.wait(request, Some(&mut between))
    }

    /// Drive progress until every request of `requests` completed (see [`Pml::wait_all`]):
    /// the statuses of those that failed are appended to `failed` with their index.
    #[inline]
    pub fn wait_all(
        &mut self,
        requests: &[rmca_framework::pml::RequestId],
        failed: &mut Vec<(usize, rmca_framework::pml::Status)>,
    ) -> Result<(), PmlError> {
        if self.progress_engine.is_empty() {
            return self.pml.wait_all(requests, None, failed);
        }
        let engine = &mut self.progress_engine;
        let mut between = || engine.run();
        self.pml.wait_all(requests, Some(&mut between), failed)
    }

    /// [`Runtime::wait_all`] reporting every request's status, with its index, into
    /// `statuses` (see [`Pml::wait_all_statuses`]).
    #[inline]
    pub fn wait_all_statuses(
        &mut self,
        requests: &[rmca_framework::pml::RequestId],
        statuses: &mut Vec<(usize, rmca_framework::pml::Status)>,
    ) -> Result<(), PmlError> {
        if self.progress_engine.is_empty() {
            return self.pml.wait_all_statuses(requests, None, statuses);
        }
        let engine = &mut self.progress_engine;
        let mut between = || engine.run();
        self.pml
            .wait_all_statuses(requests, Some(&mut between), statuses)
    }

    /// Time spent in [`Runtime::init`].
    pub fn init_time(&self) -> std::time::Duration {
        self.init_time
    }

    /// The runtime environment (for job-wide fences and aborts).
    pub fn rte(&self) -> &Rte {
        &self.rte
    }

    /// Abort the whole job.
    pub fn abort(&self, code: i32, msg: &str) -> ! {
        self.rte.abort(code, msg)
    }

    /// This process's profile: PML/BTL counters, those the windows' modules reported when
    /// freed, and per-component memory.
    pub fn profile(&self) -> crate::profile::RankProfile {
        crate::profile::RankProfile {
            rank: self.job.rank,
            pml: self.pml.component_name().to_owned(),
            btls: self.btl_names.clone(),
            init_us: self.init_time.as_micros() as u64,
            counters: self
                .pml
                .counters()
                .into_iter()
                .chain(self.counters.snapshot())
                .collect(),
            peer_btls: self
                .pml
                .peer_btls()
                .into_iter()
                .map(|names| names.join("+"))
                .collect(),
            memory: self
                .memory
                .snapshot()
                .into_iter()
                .map(|m| {
                    let usage = crate::profile::MemoryUse {
                        current: m.current as u64,
                        peak: m.peak as u64,
                        allocations: m.allocations,
                    };
                    (m.owner, usage)
                })
                .collect(),
        }
    }

    /// A job-wide fence that keeps this process's PML progressing while it waits: peers may
    /// still need us (a reliability protocol re-acknowledging a lost ack, a rendezvous
    /// finishing), and a PMI barrier alone would leave them stuck.
    pub fn fence_progressing(&mut self) -> Result<(), InitError> {
        let rte = &self.rte;
        let pml = &mut self.pml;
        let engine = &mut self.progress_engine;
        std::thread::scope(|scope| {
            let fence = scope.spawn(|| rte.fence());
            let mut backoff = rmca_framework::progress::Backoff::default();
            while !fence.is_finished() {
                let n = pml.progress() + engine.run();
                backoff.pass(n);
            }
            fence
                .join()
                .unwrap_or_else(|_| Err(RteError::Protocol("fence thread panicked".into())))
        })?;
        Ok(())
    }

    /// Leave the job: exchange the profile if asked, fence (progressing) so that nobody tears
    /// down transports a peer still uses, finalize the PML and its BTLs, tell the launcher.
    pub fn finalize(mut self) -> Result<Option<crate::profile::JobProfile>, InitError> {
        // The caller (the facade) quiesces traffic with a barrier over the PML first: from here
        // on a peer's connections may close under us, which is not a fault.
        rmca_framework::job::set_closing(true);
        let profile = self.params.get_bool("profile").unwrap_or(false);
        let mut merged = None;
        if profile {
            let mine = serde_json::to_vec(&self.profile()).map_err(|e| {
                RteError::Protocol(format!("cannot encode this rank's profile: {e}"))
            })?;
            let writer = &mut RteModex(&self.rte);
            writer
                .put("mca.profile", &mine)
                .map_err(|e| RteError::Protocol(e.to_string()))?;
        }
        self.fence_progressing()?;
        if profile && self.job.rank == 0 {
            let reader = RteModex(&self.rte);
            let mut ranks = Vec::new();
            for r in 0..self.job.size {
                if let Some(v) = reader
                    .get(r, "mca.profile")
                    .map_err(|e| RteError::Protocol(e.to_string()))?
                {
                    // A peer's malformed profile is left out of the summary, not fatal.
                    match serde_json::from_slice::<crate::profile::RankProfile>(&v) {
                        Ok(p) => ranks.push(p),
                        Err(e) => tracing::warn!(rank = r, "profile of rank {r} ignored: {e}"),
                    }
                }
            }
            let summary = crate::profile::JobProfile::merge(ranks);
            eprint!("{}", summary.render());
            if let Ok(path) = self.params.get_str("profile_json") {
                if !path.is_empty() {
                    if let Err(e) = std::fs::write(
                        path,
                        serde_json::to_string_pretty(&summary).unwrap_or_default(),
                    ) {
                        tracing::warn!("cannot write profile to {path}: {e}");
                    }
                }
            }
            merged = Some(summary);
        }
        self.pml.finalize()?;
        self.rte.finalize()?;
        Ok(merged)
    }
}

/// The component names of this rank's BTL modules that reach other nodes (below shared-memory
/// exclusivity) and deliver reliably (neither NEED_ACK nor NEED_CSUM), sorted.
fn reliable_network_btls(btls: &[Box<dyn Btl>]) -> Vec<String> {
    use rmca_framework::btl::{exclusivity, BtlFlags};
    let mut v: Vec<String> = btls
        .iter()
        .filter(|b| {
            let a = b.attributes();
            a.exclusivity < exclusivity::SHARED_MEMORY
                && !a.flags.intersects(BtlFlags::NEED_ACK | BtlFlags::NEED_CSUM)
        })
        .map(|b| b.component_name().to_owned())
        .collect();
    v.sort();
    v.dedup();
    v
}

/// Two ranks on different nodes whose reliable network BTLs (`(node, "rc,tcp")` per rank, as
/// published) have none in common, if any. Compares each distinct (node, set) once.
fn pair_without_reliable_btl(sets: &[(u32, String)]) -> Option<(u32, u32)> {
    let mut distinct: Vec<(u32, &str, u32)> = Vec::new();
    for (rank, (node, set)) in sets.iter().enumerate() {
        if !distinct
            .iter()
            .any(|(n, s, _)| n == node && *s == set.as_str())
        {
            distinct.push((*node, set.as_str(), rank as u32));
        }
    }
    for (i, (na, sa, ra)) in distinct.iter().enumerate() {
        for (nb, sb, rb) in &distinct[i + 1..] {
            if na == nb {
                continue;
            }
            let shared = sa
                .split(',')
                .filter(|x| !x.is_empty())
                .any(|x| sb.split(',').any(|y| y == x));
            if !shared {
                return Some((*ra, *rb));
            }
        }
    }
    None
}

// A universe may be handed to another thread (rmca's `SendUniverse`): everything the runtime
// holds must be able to move with it.
const _: fn() = || {
    fn movable<T: Send>() {}
    movable::<Runtime>();
};

#[cfg(test)]
mod pml_choice_tests {
    use super::pair_without_reliable_btl;

    fn sets(v: &[(u32, &str)]) -> Vec<(u32, String)> {
        v.iter().map(|(n, s)| (*n, (*s).to_owned())).collect()
    }

    #[test]
    fn ranks_on_different_nodes_need_a_common_reliable_btl() {
        // rc everywhere: ob1 stays.
        assert_eq!(
            pair_without_reliable_btl(&sets(&[(0, "rc"), (0, "rc"), (1, "rc,tcp")])),
            None
        );
        // Nothing reliable between nodes (ud only): the first such pair is named.
        assert_eq!(
            pair_without_reliable_btl(&sets(&[(0, ""), (0, ""), (1, "")])),
            Some((0, 2))
        );
        // Different reliable BTLs on the two nodes: no common one.
        assert_eq!(
            pair_without_reliable_btl(&sets(&[(0, "rc"), (1, "tcp")])),
            Some((0, 1))
        );
        // One rank of node 1 lacks rc (its device failed): that rank's pairs fail.
        assert_eq!(
            pair_without_reliable_btl(&sets(&[(0, "rc"), (1, "rc"), (1, "")])),
            Some((0, 2))
        );
        // Ranks of one node never need a network BTL between them.
        assert_eq!(
            pair_without_reliable_btl(&sets(&[(0, ""), (0, "rc")])),
            None
        );
        assert_eq!(pair_without_reliable_btl(&[]), None);
    }
}

#[cfg(test)]
mod oversubscription_tests {
    use super::{launcher_node_cpus, node_oversubscribed, JobInfo};

    #[test]
    fn under_slurm_the_allocations_cpus_count() {
        // No other test of this binary reads these two variables.
        let saved = (
            std::env::var_os("RMCA_NODE_CPUS"),
            std::env::var_os("SLURM_CPUS_ON_NODE"),
        );
        std::env::remove_var("RMCA_NODE_CPUS");
        std::env::set_var("SLURM_CPUS_ON_NODE", "16");
        assert_eq!(launcher_node_cpus().as_deref(), Some("16"));
        std::env::set_var("RMCA_NODE_CPUS", "2");
        assert_eq!(
            launcher_node_cpus().as_deref(),
            Some("2"),
            "rmca-run's count first"
        );
        std::env::remove_var("RMCA_NODE_CPUS");
        std::env::remove_var("SLURM_CPUS_ON_NODE");
        assert_eq!(launcher_node_cpus(), None);
        for (name, value) in [("RMCA_NODE_CPUS", saved.0), ("SLURM_CPUS_ON_NODE", saved.1)] {
            if let Some(v) = value {
                std::env::set_var(name, v);
            }
        }
    }

    /// A job of `local` ranks on this node and one on another.
    fn job(local: u32) -> JobInfo {
        let mut j = JobInfo::singleton();
        j.size = local + 1;
        j.node_of = (0..=local).map(|r| u32::from(r == local)).collect();
        j.node_names = vec!["a".into(), "b".into()];
        j
    }

    #[test]
    fn the_launchers_cpu_count_decides_over_the_ranks_own_mask() {
        // Four ranks, each bound to one core by its launcher, on an 8-CPU allocation.
        assert!(!node_oversubscribed(&job(4), Some("8")));
        assert!(!node_oversubscribed(&job(8), Some(" 8\n")));
        assert!(node_oversubscribed(&job(9), Some("8")));
        // No count (or nonsense): the process's own affinity mask, which cannot hold more
        // CPUs than a large count of ranks.
        assert!(node_oversubscribed(&job(100_000), None));
        assert!(node_oversubscribed(&job(100_000), Some("0")));
        assert!(node_oversubscribed(&job(100_000), Some("many")));
    }
}
