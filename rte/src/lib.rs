//! Runtime environment of rmca: PMI-1/PMI-2/PMIx clients, the modex, job identity.
//!
//! [`Rte::init`] detects how the process was started:
//!
//! | launcher | detected by | wire |
//! |---|---|---|
//! | `rmca-run` | `PMI_FD` or `PMI_PORT` + `RMCA_JOB_ID` | PMI-1 |
//! | MPICH Hydra (`mpiexec.hydra`) | `PMI_FD` or `PMI_PORT`, `PMI_RANK`, `PMI_SIZE` | PMI-1 |
//! | Slurm `srun --mpi=pmi2` | `PMI_FD` + `SLURM_MPI_TYPE=pmi2` (or `PMI_JOBID` + `SLURM_STEP_ID`, or `PMI_VERSION=2`) | PMI-2 |
//! | Slurm `srun --mpi=pmix`, Open MPI's `prterun` | `PMIX_NAMESPACE` + `PMIX_RANK` | PMIx (OpenPMIx's `libpmix.so.2`, loaded at run time) |
//! | nothing | none of the above | singleton: rank 0 of 1 |
//!
//! `rmca-run`'s own variables win over a PMIx server's inherited from an enclosing job; then
//! PMIx wins over PMI-1/PMI-2. `RMCA_PMI=pmi1|pmi2|pmix|singleton` overrides the detection;
//! `RMCA_PMIX_LIBRARY` names another PMIx library. A PMIx environment without a loadable
//! library is an error ([`RteError::PmixUnavailable`]), never a silent singleton. Under PMIx,
//! node identity comes from the server (`pmix.nodeid`, `pmix.hname`), so local ranks and
//! shared-memory segments follow the host's placement.
//!
//! Job identity (id, secret, which ranks share a node) comes from the launcher: `rmca-run` passes
//! it in `RMCA_JOB_ID`, `RMCA_JOB_SECRET` (or, through a launch agent, its KVS key
//! [`SECRET_KEY`]), `RMCA_NODE_MAP` and `RMCA_NODE_NAMES`; under Hydra or Slurm, rank 0 puts a
//! random secret and every rank its host name into the KVS, and `init` fences once. Under Hydra
//! and Slurm nobody removes `/dev/shm/rmca-<job_id>-*` after a crash: only `rmca-run` does.
//! When `rmca-run` itself dies (even of `SIGKILL`), each rank removes the files it registered
//! with [`lifeline::remove_on_launcher_death`] before it dies (see [`lifeline`]).
//!
//! Modex values are binary-safe: hex-encoded and split into chunks of at most the server's
//! `vallen_max` (1024 under Hydra), stored under `rmca-<rank>-<key>` and `rmca-<rank>-<key>#<i>`.
//!
//! Failure semantics: every PMI read has a deadline (`RMCA_MCA_rte_pmi_timeout` seconds,
//! default 600, `0` = none) and EOF from the launcher is an error, so a rank never hangs on a
//! dead launcher. A rank that dies without `finalize` makes `rmca-run` tear the whole job down,
//! which bounds how long its peers can block in a fence.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod client;
pub mod encoding;
mod fd;
pub mod lifeline;
mod pmix;
pub mod server;
pub mod wire;

use std::collections::HashMap;
use std::net::TcpStream;
use std::sync::Mutex;
use std::time::Duration;

pub use client::PmiVersion;
use client::{PmiClient, Transport};
use pmix::PmixClient;
pub use pmix::{DEFAULT_LIBRARY as DEFAULT_PMIX_LIBRARY, ENV_PMIX_LIBRARY};
use wire::OwnedMessage;

/// Environment variable prefix of MCA parameters forwarded by the launcher.
pub const MCA_ENV_PREFIX: &str = "RMCA_MCA_";
/// Job id set by `rmca-run`.
pub const ENV_JOB_ID: &str = "RMCA_JOB_ID";
/// Hex job secret set by `rmca-run`.
pub const ENV_JOB_SECRET: &str = "RMCA_JOB_SECRET";
/// Rank-to-node map set by `rmca-run`: `node*count,node*count,...` in rank order.
pub const ENV_NODE_MAP: &str = "RMCA_NODE_MAP";
/// Node names set by `rmca-run`, comma-separated, indexed by node id.
pub const ENV_NODE_NAMES: &str = "RMCA_NODE_NAMES";
/// Override of launcher detection.
pub const ENV_PMI: &str = "RMCA_PMI";
/// Set to `1` by `rmca-run` when the rank's one-time PMI token (to authenticate on its TCP PMI
/// server) waits as the first line of its standard input. The token never travels in an
/// environment or a command line, which launch agents expose to every user in `/proc`.
pub const ENV_PMI_TOKEN_STDIN: &str = "RMCA_PMI_TOKEN_STDIN";

/// Set by `rmca-run` to the signal number it made the rank's parent-death signal: [`Rte::init`]
/// then handles that signal by removing the rank's registered files before dying (see
/// [`lifeline`]).
pub const ENV_LAUNCHER_DEATH_SIGNAL: &str = "RMCA_LAUNCHER_DEATH_SIGNAL";

/// The longest token line read from standard input.
const MAX_TOKEN_LINE: u64 = 256;

/// The one-time PMI token the launcher left on standard input, if it said it did.
fn pmi_token(lookup: EnvFn<'_>) -> Result<Option<String>, RteError> {
    use std::io::{BufRead, Read};
    if lookup(ENV_PMI_TOKEN_STDIN).as_deref() != Some("1") {
        return Ok(None);
    }
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .take(MAX_TOKEN_LINE)
        .read_line(&mut line)
        .map_err(|e| RteError::Io {
            op: "read the PMI token from standard input".into(),
            source: e,
        })?;
    let token = line.trim();
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(RteError::Env {
            var: ENV_PMI_TOKEN_STDIN.into(),
            value: "1".into(),
            why: "the launcher announced a PMI token on standard input, but none was there (does the launch agent forward stdin?)".into(),
        });
    }
    Ok(Some(token.to_owned()))
}
/// Default PMI reply deadline in seconds.
pub const DEFAULT_PMI_TIMEOUT_SECS: f64 = 600.0;
/// KVS key of the job secret (put by rank 0 under Hydra/Slurm, preloaded by rmca-run when it
/// cannot pass the secret in the environment).
pub const SECRET_KEY: &str = "rmca-job-secret";
/// Minimum secret length in bytes.
pub const SECRET_LEN: usize = 32;

/// Errors of the runtime environment.
#[derive(Debug, thiserror::Error)]
pub enum RteError {
    /// A launcher environment variable is malformed.
    #[error("environment variable {var}={value:?} is invalid: {why}")]
    Env {
        /// Variable name.
        var: String,
        /// Its value.
        value: String,
        /// What is wrong and what is expected.
        why: String,
    },
    /// Socket error talking to the PMI server.
    #[error("PMI {op}: {source}")]
    Io {
        /// The operation.
        op: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The PMI server closed the connection (the launcher died or killed the job).
    #[error("PMI server closed the connection during {0} (launcher gone?)")]
    ServerClosed(String),
    /// No reply within the deadline.
    #[error("PMI {op}: no reply within {secs} s (parameter rte_pmi_timeout)")]
    Timeout {
        /// The operation.
        op: String,
        /// The deadline in seconds.
        secs: f64,
    },
    /// The server sent something unexpected.
    #[error("PMI protocol error: {0}")]
    Protocol(String),
    /// A modex key is not acceptable.
    #[error("invalid modex key {key:?}: {why}")]
    BadKey {
        /// The key.
        key: String,
        /// What is wrong and what is valid.
        why: String,
    },
    /// A rank number outside `0..size`.
    #[error("rank {rank} out of range (job size {size})")]
    BadRank {
        /// The rank asked for.
        rank: u32,
        /// Job size.
        size: u32,
    },
    /// A published value could not be decoded (corrupt or foreign KVS entry).
    #[error("modex value {key:?} of rank {rank} is corrupt: {source}")]
    Corrupt {
        /// The key.
        key: String,
        /// The publishing rank.
        rank: u32,
        /// The cause.
        #[source]
        source: encoding::DecodeError,
    },
    /// The environment was already finalized.
    #[error("runtime environment already finalized")]
    Finalized,
    /// The process was started by a PMIx server but the PMIx library cannot be used.
    #[error("PMIx chosen (PMIX_NAMESPACE from the launcher, or RMCA_PMI=pmix) but {library} cannot be loaded: {why}; install OpenPMIx (Debian package libpmix2), name the library in RMCA_PMIX_LIBRARY, or start the job with --mpi=pmi2")]
    PmixUnavailable {
        /// The library asked for.
        library: String,
        /// What went wrong.
        why: String,
    },
    /// A PMIx call failed.
    #[error("{op} failed: {text} (PMIx status {status})")]
    Pmix {
        /// The call.
        op: String,
        /// PMIx status code.
        status: i32,
        /// `PMIx_Error_string` of the status.
        text: String,
    },
    /// A path cannot be registered for removal when the launcher dies.
    #[error("cannot register {path} for removal at launcher death: {why}")]
    Cleanup {
        /// The path.
        path: String,
        /// What is wrong and what is valid.
        why: String,
    },
}

/// Which launcher started this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// `rmca-run`.
    RmcaRun,
    /// A PMI-1 launcher that is not rmca-run (MPICH Hydra and compatibles).
    Pmi1,
    /// A PMI-2 launcher (Slurm).
    Pmi2,
    /// A PMIx server (Slurm's `mpi_pmix`, Open MPI's PRRTE).
    Pmix,
    /// No launcher.
    Singleton,
}

enum Backend {
    Singleton(HashMap<String, String>),
    Pmi(PmiClient),
    // Boxed: the client holds a 260-byte pmix_proc_t.
    Pmix(Box<PmixClient>),
}

struct Inner {
    backend: Backend,
    kvsname: String,
    vallen_max: usize,
    keylen_max: usize,
    cache: HashMap<(u32, String), Option<Vec<u8>>>,
    finalized: bool,
}

/// The process's view of its job. `Send + Sync`: share it behind an `Arc`.
pub struct Rte {
    rank: u32,
    size: u32,
    launcher: Launcher,
    job_id: String,
    secret: Vec<u8>,
    node_of_rank: Vec<u32>,
    node_names: Vec<String>,
    local_ranks: Vec<u32>,
    mca: Vec<(String, String)>,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for Rte {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The secret is deliberately not printed.
        f.debug_struct("Rte")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("launcher", &self.launcher)
            .field("job_id", &self.job_id)
            .field("local_ranks", &self.local_ranks)
            .finish_non_exhaustive()
    }
}

/// `rmca-<job_id>-`: every shared-memory file of a job lives at `/dev/shm/<prefix>*`, and
/// `rmca-run` removes them all when the job ends.
pub fn shm_prefix(job_id: &str) -> String {
    format!("rmca-{job_id}-")
}

/// `n` random bytes from the kernel (getrandom(2): no file to open, works in a chroot or
/// under a descriptor limit).
pub fn random_bytes(n: usize) -> std::io::Result<Vec<u8>> {
    let mut v = vec![0u8; n];
    getrandom::getrandom(&mut v).map_err(std::io::Error::from)?;
    Ok(v)
}

/// Encode a rank-to-node map as `RMCA_NODE_MAP` (`node*count,...`, run-length in rank order).
pub fn encode_node_map(node_of_rank: &[u32]) -> String {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &n in node_of_rank {
        match runs.last_mut() {
            Some((ln, c)) if *ln == n => *c += 1,
            _ => runs.push((n, 1)),
        }
    }
    runs.iter()
        .map(|(n, c)| format!("{n}*{c}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Parse `RMCA_NODE_MAP`; the map must cover exactly `size` ranks.
pub fn decode_node_map(s: &str, size: u32) -> Result<Vec<u32>, String> {
    let mut out = Vec::with_capacity(size as usize);
    for run in s.split(',').filter(|r| !r.is_empty()) {
        let (n, c) = run
            .split_once('*')
            .ok_or_else(|| format!("run {run:?} is not node*count"))?;
        let n: u32 = n.parse().map_err(|_| format!("bad node {n:?}"))?;
        let c: u32 = c.parse().map_err(|_| format!("bad count {c:?}"))?;
        if out.len() as u64 + c as u64 > size as u64 {
            return Err(format!("map covers more than {size} ranks"));
        }
        out.extend(std::iter::repeat_n(n, c as usize));
    }
    if out.len() != size as usize {
        return Err(format!("map covers {} ranks, job has {size}", out.len()));
    }
    Ok(out)
}

/// Dense node ids (from 0, in order of first appearance) from any ids a server gave.
fn nodes_from_ids(ids: &[u32]) -> Vec<u32> {
    let mut seen: Vec<u32> = Vec::new();
    ids.iter()
        .map(|id| match seen.iter().position(|s| s == id) {
            Some(i) => i as u32,
            None => {
                seen.push(*id);
                (seen.len() - 1) as u32
            }
        })
        .collect()
}

/// Node ids from host names: ranks with the same name share the id of the first such rank's
/// name, numbered in order of first appearance.
fn nodes_from_hostnames(names: &[String]) -> Vec<u32> {
    let mut seen: Vec<&str> = Vec::new();
    names
        .iter()
        .map(|n| match seen.iter().position(|s| *s == n) {
            Some(i) => i as u32,
            None => {
                seen.push(n);
                (seen.len() - 1) as u32
            }
        })
        .collect()
}

fn sanitize_id(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// Check a modex key: 1..=48 characters of `[A-Za-z0-9._/-]`.
fn check_key(key: &str) -> Result<(), RteError> {
    let bad = |why: &str| RteError::BadKey {
        key: key.to_string(),
        why: why.to_string(),
    };
    if key.is_empty() || key.len() > 48 {
        return Err(bad("length must be 1..=48 characters"));
    }
    if let Some(c) = key
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/')))
    {
        return Err(bad(&format!(
            "character {c:?} not allowed (valid: A-Z a-z 0-9 . _ - /)"
        )));
    }
    Ok(())
}

/// How the environment is read; tests substitute a map for the process environment.
type EnvFn<'a> = &'a dyn Fn(&str) -> Option<String>;

fn env_parse<T: std::str::FromStr>(env: EnvFn<'_>, var: &str) -> Result<Option<T>, RteError> {
    match env(var) {
        None => Ok(None),
        Some(v) => v.trim().parse().map(Some).map_err(|_| RteError::Env {
            var: var.into(),
            value: v.clone(),
            why: "expected a non-negative integer".into(),
        }),
    }
}

impl Rte {
    /// Detect the launcher from the process environment and initialise.
    pub fn init() -> Result<Rte, RteError> {
        let vars: Vec<(String, String)> = std::env::vars().collect();
        let lookup = |k: &str| std::env::var(k).ok();
        Self::init_from(&lookup, &vars)
    }

    /// Initialise from an explicit environment (`lookup` for single variables, `vars` for the
    /// `RMCA_MCA_*` scan). Used by [`Rte::init`] and by tests.
    pub fn init_from(
        lookup: &dyn Fn(&str) -> Option<String>,
        vars: &[(String, String)],
    ) -> Result<Rte, RteError> {
        let mca: Vec<(String, String)> = vars
            .iter()
            .filter_map(|(k, v)| {
                k.strip_prefix(MCA_ENV_PREFIX)
                    .map(|n| (n.to_string(), v.clone()))
            })
            .collect();
        let timeout_secs: f64 = match lookup("RMCA_MCA_rte_pmi_timeout") {
            None => DEFAULT_PMI_TIMEOUT_SECS,
            Some(v) => v.trim().parse().map_err(|_| RteError::Env {
                var: "RMCA_MCA_rte_pmi_timeout".into(),
                value: v.clone(),
                why: "expected seconds (a number >= 0; 0 waits forever)".into(),
            })?,
        };
        let timeout = if timeout_secs > 0.0 {
            Some(Duration::from_secs_f64(timeout_secs))
        } else {
            None
        };
        let has_pmi = lookup("PMI_FD").is_some() || lookup("PMI_PORT").is_some();
        // rmca-run inside a PMIx job: its ranks may still see the enclosing server's variables.
        let has_pmix = lookup("PMIX_NAMESPACE").is_some()
            && lookup("PMIX_RANK").is_some()
            && !(has_pmi && lookup(ENV_JOB_ID).is_some());
        let mode = match lookup(ENV_PMI).as_deref() {
            Some("pmix") => return Self::with_pmix(lookup, timeout, mca),
            None if has_pmix => return Self::with_pmix(lookup, timeout, mca),
            Some("singleton") => None,
            Some("pmi1") | Some("1") => Some(PmiVersion::V1),
            Some("pmi2") | Some("2") => Some(PmiVersion::V2),
            Some(other) => {
                return Err(RteError::Env {
                    var: ENV_PMI.into(),
                    value: other.into(),
                    why: "valid values: pmi1, pmi2, pmix, singleton".into(),
                })
            }
            None if !has_pmi => None,
            None => {
                let slurm_pmi2 = lookup("SLURM_MPI_TYPE").as_deref() == Some("pmi2")
                    || (lookup("PMI_JOBID").is_some() && lookup("SLURM_STEP_ID").is_some());
                if lookup("PMI_VERSION").as_deref() == Some("2") || slurm_pmi2 {
                    Some(PmiVersion::V2)
                } else {
                    Some(PmiVersion::V1)
                }
            }
        };
        match mode {
            None => Self::singleton(mca),
            Some(v) => Self::with_pmi(lookup, v, timeout, mca),
        }
    }

    fn singleton(mca: Vec<(String, String)>) -> Result<Rte, RteError> {
        let secret = random_bytes(SECRET_LEN).map_err(|e| RteError::Io {
            op: "reading /dev/urandom".into(),
            source: e,
        })?;
        let job_id = format!(
            "s{}x{}",
            std::process::id(),
            encoding::hex_encode(&secret[..4])
        );
        tracing::debug!(%job_id, "no launcher detected: singleton");
        Ok(Rte {
            rank: 0,
            size: 1,
            launcher: Launcher::Singleton,
            job_id,
            secret,
            node_of_rank: vec![0],
            node_names: vec![hostname()],
            local_ranks: vec![0],
            mca,
            inner: Mutex::new(Inner {
                backend: Backend::Singleton(HashMap::new()),
                kvsname: "singleton".into(),
                vallen_max: usize::MAX,
                keylen_max: usize::MAX,
                cache: HashMap::new(),
                finalized: false,
            }),
        })
    }

    /// Join through the PMIx server named by the environment: rank and size from it, the
    /// secret drawn by rank 0 and host names exchanged in one fence, node identity from the
    /// server's `pmix.nodeid` (host names when it gives none).
    fn with_pmix(
        lookup: EnvFn<'_>,
        timeout: Option<Duration>,
        mca: Vec<(String, String)>,
    ) -> Result<Rte, RteError> {
        let library = lookup(ENV_PMIX_LIBRARY).unwrap_or_else(|| pmix::DEFAULT_LIBRARY.to_string());
        let mut c = PmixClient::init(&library, timeout)?;
        let rank = c.rank();
        let size = c.get_u32(None, pmix::KEY_JOB_SIZE)?.ok_or_else(|| {
            RteError::Protocol("the PMIx server gave no job size (pmix.job.size)".into())
        })?;
        if size == 0 || rank >= size {
            return Err(RteError::BadRank { rank, size });
        }
        if rank == 0 {
            let s = random_bytes(SECRET_LEN).map_err(|e| RteError::Io {
                op: "reading /dev/urandom".into(),
                source: e,
            })?;
            c.put(SECRET_KEY, &s)?;
        }
        let host_key = |r: u32| format!("rmca-host-{r}");
        c.put(&host_key(rank), hostname().as_bytes())?;
        c.fence()?;
        let secret = c
            .get_bytes(0, SECRET_KEY)?
            .filter(|s| s.len() >= 16)
            .ok_or_else(|| RteError::Protocol("rank 0's job secret missing from PMIx".into()))?;
        let mut server_nodes = Vec::with_capacity(size as usize);
        for r in 0..size {
            match c.get_u32(Some(r), pmix::KEY_NODEID) {
                Ok(Some(n)) => server_nodes.push(n),
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "unusable pmix.nodeid");
                    break;
                }
            }
        }
        let (node_of_rank, names) = if server_nodes.len() == size as usize {
            // Dense ids in order of first appearance, each named after the server's host name
            // of its first rank.
            let node_of_rank = nodes_from_ids(&server_nodes);
            let mut names: Vec<String> = Vec::new();
            for (r, &n) in node_of_rank.iter().enumerate() {
                if n as usize == names.len() {
                    let r = r as u32;
                    let name = match c.get_string(r, pmix::KEY_HOSTNAME)? {
                        Some(h) => h,
                        None => c
                            .get_bytes(r, &host_key(r))?
                            .map(|h| String::from_utf8_lossy(&h).into_owned())
                            .unwrap_or_else(|| format!("node{n}")),
                    };
                    names.push(name);
                }
            }
            (node_of_rank, names)
        } else {
            tracing::debug!("the PMIx server gives no pmix.nodeid: nodes from host names");
            let mut hosts = Vec::with_capacity(size as usize);
            for r in 0..size {
                let h = c.get_bytes(r, &host_key(r))?.ok_or_else(|| {
                    RteError::Protocol(format!("rank {r}'s host name missing from PMIx"))
                })?;
                hosts.push(String::from_utf8_lossy(&h).into_owned());
            }
            let map = nodes_from_hostnames(&hosts);
            let mut distinct: Vec<String> = Vec::new();
            for h in hosts {
                if !distinct.contains(&h) {
                    distinct.push(h);
                }
            }
            (map, distinct)
        };
        let me = node_of_rank[rank as usize];
        let local_ranks: Vec<u32> = (0..size)
            .filter(|r| node_of_rank[*r as usize] == me)
            .collect();
        // The server's own view of this node, when it gives one, should agree with ours; a
        // difference is reported, not fatal (the node ids above are what rmca places by).
        let my_index = local_ranks.iter().position(|&r| r == rank).unwrap_or(0) as u32;
        if let Ok(Some(lr)) = c.get_u32(Some(rank), pmix::KEY_LOCAL_RANK) {
            if lr != my_index {
                tracing::warn!(
                    rank,
                    server = lr,
                    ours = my_index,
                    "PMIx local rank differs"
                );
            }
        }
        if let Ok(Some(ls)) = c.get_u32(None, pmix::KEY_LOCAL_SIZE) {
            if ls as usize != local_ranks.len() {
                tracing::warn!(
                    rank,
                    server = ls,
                    ours = local_ranks.len(),
                    "PMIx local size differs"
                );
            }
        }
        let nspace = c.nspace();
        let job_id = format!(
            "{}_{}",
            sanitize_id(&nspace),
            encoding::hex_encode(&secret[..4])
        );
        tracing::debug!(rank, size, %nspace, %job_id, "runtime environment initialised (PMIx)");
        Ok(Rte {
            rank,
            size,
            launcher: Launcher::Pmix,
            job_id,
            secret,
            node_of_rank,
            node_names: names,
            local_ranks,
            mca,
            inner: Mutex::new(Inner {
                backend: Backend::Pmix(Box::new(c)),
                kvsname: nspace,
                vallen_max: usize::MAX,
                keylen_max: pmix::KEY_LEN - 1,
                cache: HashMap::new(),
                finalized: false,
            }),
        })
    }

    fn with_pmi(
        lookup: EnvFn<'_>,
        version: PmiVersion,
        timeout: Option<Duration>,
        mca: Vec<(String, String)>,
    ) -> Result<Rte, RteError> {
        if lookup(ENV_JOB_ID).is_some() {
            // First of all: from here on a dying launcher gets our registered files removed.
            if let Some(v) = lookup(ENV_LAUNCHER_DEATH_SIGNAL) {
                let sig = v.trim().parse().map_err(|_| RteError::Env {
                    var: ENV_LAUNCHER_DEATH_SIGNAL.into(),
                    value: v.clone(),
                    why: "expected a signal number".into(),
                })?;
                match lifeline::expect_launcher_death_signal(sig) {
                    Ok(()) => {}
                    // The signal cannot be handled here: a tool the rank runs under (valgrind
                    // reserves the last real-time signals) owns it. The rank still runs; only
                    // the cleanup of its files if rmca-run dies is lost.
                    Err(RteError::Io { op, source }) => tracing::warn!(
                        signal = sig,
                        "cannot {op}: {source}; this rank's shared-memory files are not \
                         removed if rmca-run dies"
                    ),
                    Err(e) => return Err(e),
                }
            }
        }
        let env_rank: Option<u32> = env_parse(lookup, "PMI_RANK")?;
        let env_size: Option<u32> = env_parse(lookup, "PMI_SIZE")?;
        let (transport, via_port) = if let Some(fd) = lookup("PMI_FD") {
            let n: i32 = fd.trim().parse().map_err(|_| RteError::Env {
                var: "PMI_FD".into(),
                value: fd.clone(),
                why: "expected a file descriptor number".into(),
            })?;
            (Transport::Fd(fd::adopt_pmi_fd(n)?), false)
        } else if let Some(port) = lookup("PMI_PORT") {
            let s = TcpStream::connect(port.as_str()).map_err(|e| RteError::Io {
                op: format!("connect to PMI_PORT={port}"),
                source: e,
            })?;
            let _ = s.set_nodelay(true);
            (Transport::Tcp(s), true)
        } else {
            return Err(RteError::Env {
                var: "PMI_FD".into(),
                value: String::new(),
                why: "PMI requested but neither PMI_FD nor PMI_PORT is set".into(),
            });
        };
        let token = if via_port { pmi_token(lookup)? } else { None };
        let mut c = PmiClient::new(transport, version, timeout);
        let (mut rank, mut size) = (env_rank, env_size);
        if via_port && version == PmiVersion::V1 {
            let id: u32 = env_parse(lookup, "PMI_ID")?
                .or(env_rank)
                .ok_or(RteError::Env {
                    var: "PMI_ID".into(),
                    value: String::new(),
                    why: "PMI_PORT needs PMI_ID (or PMI_RANK) to identify this process".into(),
                })?;
            let (r, s) = c.initack(id, token.as_deref())?;
            rank = Some(r);
            size = Some(s);
        }
        c.init()?;
        let (kvsname, keylen_max, vallen_max) = match version {
            PmiVersion::V1 => {
                let mx = c.request(OwnedMessage::new("get_maxes"), "maxes")?;
                let num = |k: &str, d: usize| {
                    mx.get(k).and_then(|v| v.parse::<usize>().ok()).unwrap_or(d)
                };
                let keylen = num("keylen_max", 64);
                let vallen = num("vallen_max", 1024);
                let kv = c.request(OwnedMessage::new("get_my_kvsname"), "my_kvsname")?;
                let name = kv
                    .get("kvsname")
                    .ok_or_else(|| RteError::Protocol("my_kvsname without kvsname".into()))?
                    .to_string();
                (name, keylen, vallen)
            }
            PmiVersion::V2 => {
                let r = rank.ok_or(RteError::Env {
                    var: "PMI_RANK".into(),
                    value: String::new(),
                    why: "PMI-2 fullinit needs PMI_RANK".into(),
                })?;
                let mut full = OwnedMessage::new("fullinit");
                // Slurm's pmi2 plugin expects the job id it gave us back.
                if let Some(j) = lookup("PMI_JOBID") {
                    full = full.with("pmijobid", j);
                }
                if let Some(t) = &token {
                    full = full.with("token", t);
                }
                let fi = c.request(
                    full.with("pmirank", r).with("threaded", "FALSE"),
                    "fullinit-response",
                )?;
                if let Some(v) = fi.get("rank").and_then(|v| v.parse().ok()) {
                    rank = Some(v);
                }
                if let Some(v) = fi.get("size").and_then(|v| v.parse().ok()) {
                    size = Some(v);
                }
                let j = c.request(OwnedMessage::new("job-getid"), "job-getid-response")?;
                let name = j
                    .get("jobid")
                    .ok_or_else(|| RteError::Protocol("job-getid without jobid".into()))?
                    .to_string();
                // PMI2_MAX_KEYLEN / PMI2_MAX_VALLEN.
                (name, 64, 1024)
            }
        };
        let rank = rank.ok_or(RteError::Env {
            var: "PMI_RANK".into(),
            value: String::new(),
            why: "not set and not learned from the server".into(),
        })?;
        let size = size.ok_or(RteError::Env {
            var: "PMI_SIZE".into(),
            value: String::new(),
            why: "not set and not learned from the server".into(),
        })?;
        if size == 0 || rank >= size {
            return Err(RteError::BadRank { rank, size });
        }
        debug_assert!(c.version() == version);

        let mut inner = Inner {
            backend: Backend::Pmi(c),
            kvsname,
            vallen_max,
            keylen_max,
            cache: HashMap::new(),
            finalized: false,
        };

        let (launcher, job_id, secret, node_of_rank, names) = if let Some(job) = lookup(ENV_JOB_ID)
        {
            // rmca-run: identity passed explicitly, no extra fence.
            // The secret comes in the environment or, when the launch agent's command line
            // would expose it, from the launcher's KVS (the key ranks use under Hydra).
            let secret = match lookup(ENV_JOB_SECRET) {
                Some(sec) => encoding::hex_decode(&sec),
                None => get_raw(&mut inner, SECRET_KEY, 0)?,
            };
            let secret = secret.filter(|s| s.len() >= 16).ok_or(RteError::Env {
                var: ENV_JOB_SECRET.into(),
                value: "<hidden>".into(),
                why: "expected at least 16 bytes in hex (or the launcher's KVS secret)".into(),
            })?;
            if job.is_empty() || sanitize_id(&job) != job {
                return Err(RteError::Env {
                    var: ENV_JOB_ID.into(),
                    value: job,
                    why: "expected [A-Za-z0-9_]+".into(),
                });
            }
            let map_s = lookup(ENV_NODE_MAP).unwrap_or_else(|| format!("0*{size}"));
            let map = decode_node_map(&map_s, size).map_err(|why| RteError::Env {
                var: ENV_NODE_MAP.into(),
                value: map_s.clone(),
                why,
            })?;
            let names: Vec<String> = lookup(ENV_NODE_NAMES)
                .map(|s| s.split(',').map(String::from).collect())
                .unwrap_or_default();
            (Launcher::RmcaRun, job, secret, map, names)
        } else {
            // Hydra / Slurm: rank 0 draws the secret, everyone publishes its host name, fence.
            let launcher = match version {
                PmiVersion::V1 => Launcher::Pmi1,
                PmiVersion::V2 => Launcher::Pmi2,
            };
            let secret_key = SECRET_KEY;
            if rank == 0 {
                let s = random_bytes(SECRET_LEN).map_err(|e| RteError::Io {
                    op: "reading /dev/urandom".into(),
                    source: e,
                })?;
                put_raw(&mut inner, secret_key, &s)?;
            }
            put_raw(
                &mut inner,
                &format!("rmca-host-{rank}"),
                hostname().as_bytes(),
            )?;
            pmi(&mut inner)?.barrier()?;
            let secret = get_raw(&mut inner, secret_key, 0)?
                .filter(|s| s.len() >= 16)
                .ok_or_else(|| RteError::Protocol("rank 0's job secret missing from KVS".into()))?;
            let mut names = Vec::with_capacity(size as usize);
            for r in 0..size {
                let h = get_raw(&mut inner, &format!("rmca-host-{r}"), r)?
                    .ok_or_else(|| RteError::Protocol(format!("rank {r}'s host name missing")))?;
                names.push(String::from_utf8_lossy(&h).into_owned());
            }
            let job = format!(
                "{}_{}",
                sanitize_id(&inner.kvsname),
                encoding::hex_encode(&secret[..4])
            );
            let map = nodes_from_hostnames(&names);
            let mut distinct: Vec<String> = Vec::new();
            for n in names {
                if !distinct.contains(&n) {
                    distinct.push(n);
                }
            }
            (launcher, job, secret, map, distinct)
        };
        let nodes = node_of_rank
            .iter()
            .copied()
            .max()
            .map_or(1, |m| m as usize + 1);
        // Names must cover every node id; otherwise fall back to neutral names.
        let node_names = if names.len() == nodes {
            names
        } else {
            (0..nodes).map(|n| format!("node{n}")).collect()
        };
        let me = node_of_rank[rank as usize];
        let local_ranks = (0..size)
            .filter(|r| node_of_rank[*r as usize] == me)
            .collect();
        tracing::debug!(rank, size, ?launcher, %job_id, "runtime environment initialised");
        Ok(Rte {
            rank,
            size,
            launcher,
            job_id,
            secret,
            node_of_rank,
            node_names,
            local_ranks,
            mca,
            inner: Mutex::new(inner),
        })
    }

    /// This process's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of ranks in the job.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Which launcher started us.
    pub fn launcher(&self) -> Launcher {
        self.launcher
    }

    /// A string unique to this job, made of `[A-Za-z0-9_]` (safe in file names).
    pub fn job_id(&self) -> &str {
        &self.job_id
    }

    /// At least 16 random bytes shared by all ranks of this job and nobody else: components
    /// tag their traffic with it (or a hash of it) to reject packets from other jobs.
    pub fn job_secret(&self) -> &[u8] {
        &self.secret
    }

    /// `rmca-<job_id>-`, the required prefix of this job's files in `/dev/shm`.
    pub fn shm_prefix(&self) -> String {
        shm_prefix(&self.job_id)
    }

    /// The node `rank` runs on (node ids are dense from 0, as given by the launcher).
    pub fn node_id(&self, rank: u32) -> Result<u32, RteError> {
        self.node_of_rank
            .get(rank as usize)
            .copied()
            .ok_or(RteError::BadRank {
                rank,
                size: self.size,
            })
    }

    /// Name of node `node` (a host name, or the name given to `rmca-run --hosts`), for messages.
    pub fn node_name(&self, node: u32) -> Option<&str> {
        self.node_names.get(node as usize).map(String::as_str)
    }

    /// Number of distinct nodes in the job.
    pub fn node_count(&self) -> u32 {
        self.node_names.len() as u32
    }

    /// Ranks on this process's node, ascending, including itself.
    pub fn local_ranks(&self) -> &[u32] {
        &self.local_ranks
    }

    /// MCA parameters forwarded by the launcher (`RMCA_MCA_<name>=<value>`), as `(name, value)`.
    pub fn mca_params(&self) -> &[(String, String)] {
        &self.mca
    }

    /// Publish this rank's `value` under `key` (namespace it by component: `btl.shm.addr`).
    /// Visible to other ranks after the next [`Rte::fence`]. Any bytes; any length (chunked).
    pub fn modex_put(&self, key: &str, value: &[u8]) -> Result<(), RteError> {
        check_key(key)?;
        let mut inner = self.lock()?;
        let wire_key = modex_wire_key(self.rank, key);
        match &mut inner.backend {
            Backend::Singleton(map) => {
                map.insert(wire_key, encoding::hex_encode(value));
                Ok(())
            }
            // Binary-safe and unlimited in length: no chunks.
            Backend::Pmix(c) => c.put(&wire_key, value),
            Backend::Pmi(_) => put_raw(&mut inner, &wire_key, value),
        }
    }

    /// Wait until every rank reached the same fence; afterwards all earlier puts are visible.
    pub fn fence(&self) -> Result<(), RteError> {
        let mut inner = self.lock()?;
        // Values may change across fences; drop what we cached.
        inner.cache.clear();
        match &mut inner.backend {
            Backend::Singleton(_) => Ok(()),
            Backend::Pmi(c) => c.barrier(),
            Backend::Pmix(c) => c.fence(),
        }
    }

    /// `rank`'s value for `key`, `None` if it published none.
    pub fn modex_get(&self, rank: u32, key: &str) -> Result<Option<Vec<u8>>, RteError> {
        check_key(key)?;
        if rank >= self.size {
            return Err(RteError::BadRank {
                rank,
                size: self.size,
            });
        }
        let mut inner = self.lock()?;
        if let Some(v) = inner.cache.get(&(rank, key.to_string())) {
            return Ok(v.clone());
        }
        let wire_key = modex_wire_key(rank, key);
        let v = match &mut inner.backend {
            Backend::Singleton(map) => map.get(&wire_key).and_then(|h| encoding::hex_decode(h)),
            Backend::Pmix(c) => c.get_bytes(rank, &wire_key)?,
            Backend::Pmi(_) => get_raw(&mut inner, &wire_key, rank)?,
        };
        inner.cache.insert((rank, key.to_string()), v.clone());
        Ok(v)
    }

    /// Abort the whole job with `code`. Under a launcher this asks it to kill every rank and
    /// waits (at most 10 s) to be killed; then, or without a launcher, or when another thread
    /// is inside a PMI call, exits the process with `code` (1 if `code` is 0).
    pub fn abort(&self, code: i32, msg: &str) -> ! {
        tracing::error!(rank = self.rank, code, msg, "aborting the job");
        // try_lock: another thread may be blocked in a fence holding the client. Then we cannot
        // speak PMI, and exiting non-zero is itself what makes the launcher end the job.
        if let Ok(mut inner) = self.inner.try_lock() {
            if let Backend::Pmi(c) = &mut inner.backend {
                if c.abort(code, msg).is_ok() {
                    // The launcher kills us; EOF or the deadline ends the wait otherwise.
                    c.set_timeout(Some(Duration::from_secs(10)));
                    let _ = c.recv("abort");
                }
            } else if let Backend::Pmix(c) = &mut inner.backend {
                // Returns once the host has been told (it then kills the job's processes).
                if let Err(e) = c.abort(code, msg) {
                    tracing::error!(error = %e, "PMIx abort failed; exiting");
                }
            } else {
                use std::io::Write;
                // The user's abort message must be seen even without a tracing subscriber.
                let _ = writeln!(std::io::stderr(), "rmca: abort (code {code}): {msg}");
            }
        }
        std::process::exit(if code == 0 { 1 } else { code })
    }

    /// Leave the job cleanly. Further calls fail with [`RteError::Finalized`].
    pub fn finalize(&self) -> Result<(), RteError> {
        let mut inner = self.lock()?;
        inner.finalized = true;
        match &mut inner.backend {
            Backend::Singleton(_) => Ok(()),
            Backend::Pmi(c) => c.finalize(),
            Backend::Pmix(c) => c.finalize(),
        }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Inner>, RteError> {
        // A panic while holding the lock leaves a client mid-request; treat as finalized.
        let g = self.inner.lock().map_err(|_| RteError::Finalized)?;
        if g.finalized {
            return Err(RteError::Finalized);
        }
        Ok(g)
    }
}

fn modex_wire_key(rank: u32, key: &str) -> String {
    format!("rmca-{rank}-{key}")
}

fn pmi(inner: &mut Inner) -> Result<&mut PmiClient, RteError> {
    match &mut inner.backend {
        Backend::Pmi(c) => Ok(c),
        Backend::Singleton(_) => Err(RteError::Protocol("no PMI server in a singleton".into())),
        Backend::Pmix(_) => Err(RteError::Protocol(
            "a PMIx job has no PMI-1/PMI-2 server".into(),
        )),
    }
}

fn put_raw(inner: &mut Inner, wire_key: &str, value: &[u8]) -> Result<(), RteError> {
    // Chunk keys add "#<n>"; keep room for it.
    if wire_key.len() + 6 > inner.keylen_max {
        return Err(RteError::BadKey {
            key: wire_key.to_string(),
            why: format!(
                "too long for the PMI server's keylen_max {} (with rank prefix and chunk suffix)",
                inner.keylen_max
            ),
        });
    }
    let kvsname = inner.kvsname.clone();
    let limit = inner.vallen_max.min(1024);
    let c = pmi(inner)?;
    for (k, v) in encoding::encode_chunks(wire_key, value, limit) {
        c.put(&kvsname, &k, &v)?;
    }
    Ok(())
}

fn get_raw(inner: &mut Inner, wire_key: &str, rank: u32) -> Result<Option<Vec<u8>>, RteError> {
    let kvsname = inner.kvsname.clone();
    let c = pmi(inner)?;
    let Some(head) = c.get(&kvsname, wire_key, Some(rank))? else {
        return Ok(None);
    };
    let corrupt = |e| RteError::Corrupt {
        key: wire_key.to_string(),
        rank,
        source: e,
    };
    let (n, first) = encoding::parse_head(&head).map_err(corrupt)?;
    let mut parts = vec![first.to_string()];
    for i in 1..n {
        let k = encoding::chunk_key(wire_key, i);
        let p = c
            .get(&kvsname, &k, Some(rank))?
            .ok_or_else(|| RteError::Protocol(format!("chunk {k:?} missing from KVS")))?;
        parts.push(p);
    }
    encoding::decode_chunks(&parts).map(Some).map_err(corrupt)
}

/// `Rte` is shared between the framework's components and threads.
#[allow(dead_code)]
fn _assert_send_sync() {
    fn check<T: Send + Sync>() {}
    check::<Rte>();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_map_round_trip_and_errors() {
        let m = [0, 0, 0, 1, 1, 2];
        let s = encode_node_map(&m);
        assert_eq!(s, "0*3,1*2,2*1");
        assert_eq!(decode_node_map(&s, 6).unwrap(), m);
        assert!(decode_node_map(&s, 5).is_err());
        assert!(decode_node_map("0*3,x", 3).is_err());
        assert!(decode_node_map("0*4000000000", 3).is_err());
    }

    #[test]
    fn hostnames_give_dense_node_ids() {
        let n: Vec<String> = ["b", "a", "b", "c"].iter().map(|s| s.to_string()).collect();
        assert_eq!(nodes_from_hostnames(&n), vec![0, 1, 0, 2]);
    }

    #[test]
    fn keys_are_validated() {
        assert!(check_key("btl.shm").is_ok());
        assert!(check_key("").is_err());
        assert!(check_key("a b").is_err());
        assert!(check_key(&"k".repeat(49)).is_err());
    }

    #[test]
    fn singleton_modex_works_locally() {
        let env = |_: &str| None;
        let rte = Rte::init_from(&env, &[("RMCA_MCA_btl".into(), "self".into())]).unwrap();
        assert_eq!((rte.rank(), rte.size()), (0, 1));
        assert_eq!(rte.launcher(), Launcher::Singleton);
        assert!(rte.job_secret().len() >= 16);
        assert!(rte.shm_prefix().starts_with("rmca-s"));
        assert_eq!(rte.mca_params(), &[("btl".to_string(), "self".to_string())]);
        rte.modex_put("btl.self", b"\x00card\xff").unwrap();
        rte.fence().unwrap();
        assert_eq!(
            rte.modex_get(0, "btl.self").unwrap().as_deref(),
            Some(&b"\x00card\xff"[..])
        );
        assert_eq!(rte.modex_get(0, "btl.none").unwrap(), None);
        assert!(matches!(
            rte.modex_get(1, "btl.self"),
            Err(RteError::BadRank { .. })
        ));
        rte.finalize().unwrap();
        assert!(matches!(rte.fence(), Err(RteError::Finalized)));
    }

    #[test]
    fn bad_override_is_an_error_naming_valid_values() {
        let env = |k: &str| (k == ENV_PMI).then(|| "pmi3".to_string());
        let e = Rte::init_from(&env, &[]).unwrap_err().to_string();
        assert!(e.contains("pmi1, pmi2, pmix, singleton"), "{e}");
    }

    fn env_of(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn a_pmix_environment_without_its_library_is_a_clear_error() {
        // Started by a PMIx server: PMIx is chosen, and a missing library says what to do
        // instead of falling back to a singleton.
        let env = env_of(&[
            ("PMIX_NAMESPACE", "slurm.pmix.7.0"),
            ("PMIX_RANK", "0"),
            (ENV_PMIX_LIBRARY, "/nonexistent/libpmix.so.2"),
        ]);
        let e = Rte::init_from(&env, &[]).unwrap_err();
        assert!(matches!(e, RteError::PmixUnavailable { .. }), "{e:?}");
        let e = e.to_string();
        assert!(
            e.contains("/nonexistent/libpmix.so.2")
                && e.contains("libpmix2")
                && e.contains("RMCA_PMIX_LIBRARY"),
            "{e}"
        );
        // The override chooses PMIx too.
        let env = env_of(&[
            (ENV_PMI, "pmix"),
            (ENV_PMIX_LIBRARY, "/nonexistent/libpmix.so.2"),
        ]);
        assert!(matches!(
            Rte::init_from(&env, &[]),
            Err(RteError::PmixUnavailable { .. })
        ));
    }

    #[test]
    fn rmca_run_variables_win_over_an_enclosing_pmix_job() {
        // A rank of rmca-run started inside a `srun --mpi=pmix` step: it speaks PMI-1 to
        // rmca-run (here: the descriptor is bad, so init fails on PMI_FD, not on PMIx).
        let env = env_of(&[
            ("PMIX_NAMESPACE", "slurm.pmix.7.0"),
            ("PMIX_RANK", "0"),
            (ENV_PMIX_LIBRARY, "/nonexistent/libpmix.so.2"),
            ("PMI_FD", "-5"),
            (ENV_JOB_ID, "job1"),
        ]);
        let e = Rte::init_from(&env, &[]).unwrap_err();
        assert!(
            matches!(&e, RteError::Env { var, .. } if var == "PMI_FD"),
            "{e:?}"
        );
        // Without rmca-run's job id, the PMIx server wins over a stray PMI_FD.
        let env = env_of(&[
            ("PMIX_NAMESPACE", "slurm.pmix.7.0"),
            ("PMIX_RANK", "0"),
            (ENV_PMIX_LIBRARY, "/nonexistent/libpmix.so.2"),
            ("PMI_FD", "-5"),
        ]);
        assert!(matches!(
            Rte::init_from(&env, &[]),
            Err(RteError::PmixUnavailable { .. })
        ));
    }

    #[test]
    fn server_node_ids_become_dense_in_order_of_appearance() {
        assert_eq!(nodes_from_ids(&[7, 7, 3, 9, 3]), vec![0, 0, 1, 2, 1]);
    }
}
