//! The launcher's I/O: spawning ranks, the PMI server's sockets, output forwarding, teardown.
//!
//! Threads only move bytes and report, each on its own channel (PMI and output, process exits,
//! signals); the main thread waits on all of them and on its next deadline in one `select!`,
//! and all decisions are taken there by [`rmca_rte::server::PmiServer`] and
//! [`crate::monitor::JobMonitor`]. Nothing wakes it but an event or a deadline.

/// Environment variable listing the `--mca` settings (read by `rmca_framework::params`).
pub const MCA_CMDLINE_ENV: &str = "RMCA_MCA_CMDLINE";

use std::collections::HashMap;
use std::io::Write;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crossbeam_channel::{at, never, select, unbounded, Receiver};

use rmca_rte::server::{ConnId, Maxes, PmiServer, ServerConfig, ServerEvent, UntrustedLimit};

use crate::cli::{
    block_map, expand_agent, resolve_binding, Binding, Options, Placement, PlacementContext,
};
use crate::monitor::{Action, Exit, JobMonitor};
use crate::poller::{self, Ev, Poller, Source};
use crate::sys;

enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    fn write_all(&mut self, b: &[u8]) -> std::io::Result<()> {
        match self {
            Stream::Unix(s) => s.write_all(b),
            Stream::Tcp(s) => s.write_all(b),
        }
    }
    fn shutdown(&self) {
        let _ = match self {
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
        };
    }
}

/// Launcher variables never inherited from rmca-run's own environment.
const INHERITED_JOB_VARS: &[&str] = &[
    "PMI_FD",
    "PMI_PORT",
    "PMI_ID",
    "PMI_JOBID",
    "PMI_VERSION",
    "PMI_SUBVERSION",
    "SLURM_MPI_TYPE",
    "SLURM_STEP_ID",
    rmca_rte::ENV_JOB_ID,
    rmca_rte::ENV_JOB_SECRET,
    rmca_rte::ENV_NODE_MAP,
    rmca_rte::ENV_NODE_NAMES,
    ENV_NODE_CPUS,
];

/// Count of CPUs the launcher may use, given to ranks it starts on its own node: the runtime
/// compares it with the node's rank count to tell an oversubscribed node (its wait policy).
pub const ENV_NODE_CPUS: &str = "RMCA_NODE_CPUS";

/// First connection id used for TCP clients (socketpair connections use the rank).
const TCP_CONN_BASE: ConnId = 1 << 32;

/// Remove `/dev/shm/<prefix>*`; returns how many files were removed.
pub fn remove_shm_files(prefix: &str) -> usize {
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return 0;
    };
    let mut n = 0;
    for e in dir.flatten() {
        if e.file_name().to_string_lossy().starts_with(prefix)
            && std::fs::remove_file(e.path()).is_ok()
        {
            n += 1;
        }
    }
    n
}

fn new_job_id() -> std::io::Result<(String, Vec<u8>)> {
    let secret = rmca_rte::random_bytes(rmca_rte::SECRET_LEN)?;
    let id = format!(
        "{:x}_{}",
        std::process::id(),
        rmca_rte::encoding::hex_encode(&secret[..4])
    );
    // The id must not reveal the secret: draw the secret again.
    let secret = rmca_rte::random_bytes(rmca_rte::SECRET_LEN)?;
    Ok((id, secret))
}

/// Node identity is the host name: a name listed twice in `--hosts` is one node. Returns the
/// distinct names (indexed by node id) and each rank's node id.
pub fn node_identity(hosts: &[String], slot_of_rank: &[u32]) -> (Vec<String>, Vec<u32>) {
    let mut names: Vec<String> = Vec::new();
    let ids = slot_of_rank
        .iter()
        .map(|&slot| {
            let h = &hosts[slot as usize];
            match names.iter().position(|n| n == h) {
                Some(i) => i as u32,
                None => {
                    names.push(h.clone());
                    (names.len() - 1) as u32
                }
            }
        })
        .collect();
    (names, ids)
}

/// Run the job described by `o`; returns the launcher's exit status.
pub fn run(o: &Options) -> i32 {
    let (job_id, secret) = match new_job_id() {
        Ok(x) => x,
        Err(e) => {
            eprintln!("rmca-run: cannot read /dev/urandom: {e}");
            return 1;
        }
    };
    let shm_prefix = rmca_rte::shm_prefix(&job_id);
    let signal_pipe = match sys::catch_termination_signals() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("rmca-run: cannot set up signal handling (pipe2): {e}");
            return 1;
        }
    };
    let status = run_job(o, &job_id, &secret, signal_pipe);
    let removed = remove_shm_files(&shm_prefix);
    if removed > 0 {
        tracing::debug!(removed, "removed shared-memory files of the job");
    }
    status
}

/// Whether this launcher can hold a job of `np` ranks: descriptors for each rank's PMI
/// connection and output pipes, and processes under the user's limit. Checked before anything
/// proportional to `np` is allocated or started.
fn check_capacity(np: u32, tcp: bool) -> Result<(), String> {
    let per_rank: u64 = if tcp { 5 } else { 3 };
    let needed = u64::from(np) * per_rank + 64;
    let (files, procs) = sys::fd_and_process_limits();
    if files.is_some_and(|f| f < needed) {
        if let Some(f) = sys::raise_fd_limit().filter(|&f| f < needed) {
            return Err(format!(
                "-n {np} needs about {needed} open files in the launcher, but its limit is {f} (raise it with ulimit -n, or run fewer ranks)"
            ));
        }
    }
    if let Some(p) = procs.filter(|&p| p < u64::from(np)) {
        return Err(format!(
            "-n {np} exceeds the limit of {p} processes for this user (ulimit -u)"
        ));
    }
    Ok(())
}

/// What woke the main loop.
enum Wake {
    /// The poller reported PMI traffic or output.
    Io(Ev),
    /// A rank exited.
    Exited(u32, Exit),
    /// The launcher received a termination signal.
    Signal(i32),
    /// The next deadline passed.
    Timer,
    /// A reporting thread ended; its channel is replaced by one that never fires (a
    /// disconnected channel would be ready forever and make `select!` spin).
    Closed(Reporter),
}

/// The threads reporting to the main loop.
#[derive(Clone, Copy)]
enum Reporter {
    Io,
    Reaper,
    Signals,
}

/// Block until an event arrives on any channel or `deadline` (if any) passes.
fn wait_for_event(
    io: &Receiver<Ev>,
    exits: &Receiver<(u32, Exit)>,
    signals: &Receiver<i32>,
    deadline: Option<Instant>,
) -> Wake {
    let timer = deadline.map_or_else(never, at);
    select! {
        recv(signals) -> m => m.map_or(Wake::Closed(Reporter::Signals), Wake::Signal),
        recv(exits) -> m => m.map_or(Wake::Closed(Reporter::Reaper), |(r, e)| Wake::Exited(r, e)),
        recv(io) -> m => m.map_or(Wake::Closed(Reporter::Io), Wake::Io),
        recv(timer) -> _ => Wake::Timer,
    }
}

/// The binding of this job's ranks ([`resolve_binding`] on this launcher's CPUs and
/// surroundings).
fn place_ranks(o: &Options) -> Result<Placement, String> {
    let cpus = match sys::allowed_cpus() {
        Ok(c) => c,
        Err(e) if o.bind == Binding::Core => {
            return Err(format!(
                "--bind-to core: cannot read this launcher's CPUs: {e}"
            ))
        }
        // The default never fails a job: without the mask, ranks run unbound.
        Err(_) => return Ok(Placement::Unbound("this launcher's CPUs could not be read")),
    };
    let ctx = PlacementContext {
        cpus: &cpus,
        launch_agent: o.launch_agent.is_some(),
        under_slurm: std::env::var_os("SLURM_JOB_ID").is_some(),
    };
    resolve_binding(o.bind, o.np, ctx)
}

fn run_job(o: &Options, job_id: &str, secret: &[u8], signal_pipe: std::fs::File) -> i32 {
    let np = o.np;
    if let Err(e) = check_capacity(np, o.force_tcp || o.launch_agent.is_some()) {
        eprintln!("rmca-run: {e}");
        return 2;
    }
    let nodes: Vec<String> = if o.hosts.is_empty() {
        vec![std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "localhost".into())]
    } else {
        o.hosts.clone()
    };
    let (nodes, node_of_rank) = node_identity(&nodes, &block_map(np, nodes.len() as u32));
    let cpu_of_rank = match place_ranks(o) {
        Ok(Placement::Bound(m)) => {
            tracing::info!(cpus = ?m, "ranks bound to cores (rank r on the r-th allowed CPU)");
            Some(m)
        }
        Ok(Placement::Unbound(why)) => {
            tracing::info!("ranks not bound: {why}");
            None
        }
        Err(e) => {
            eprintln!("rmca-run: {e}");
            return 2;
        }
    };
    // How many CPUs this node's ranks share, for their wait policy (a bound rank's own
    // affinity mask shows one CPU, not how many ranks compete for the node's). Unknown
    // through a launch agent: the agent's node is not this one.
    let node_cpus = match &o.launch_agent {
        Some(_) => None,
        None => sys::allowed_cpus().ok().map(|c| c.len()),
    };
    let kvsname = format!("kvs_{job_id}");
    let mut preload = Vec::new();
    if let Some(m) = rmca_rte::server::process_mapping(&node_of_rank) {
        preload.push(("PMI_process_mapping".to_string(), m));
    }
    // Through a launch agent the environment travels on a command line (visible in /proc to
    // every user): then the secret is served from the KVS instead.
    let secret_in_env = o.launch_agent.is_none();
    if !secret_in_env {
        preload.extend(rmca_rte::encoding::encode_chunks(
            rmca_rte::SECRET_KEY,
            secret,
            Maxes::default().vallen,
        ));
    }
    let use_tcp = o.force_tcp || o.launch_agent.is_some();
    // A TCP PMI port can be reached by anyone on the network: each rank gets a one-time token
    // to identify itself with (a token copied from a command line opens nothing once used).
    let tokens: Option<Vec<String>> = if use_tcp {
        let mut t = Vec::with_capacity(np as usize);
        for _ in 0..np {
            match rmca_rte::random_bytes(16) {
                Ok(b) => t.push(rmca_rte::encoding::hex_encode(&b)),
                Err(e) => {
                    eprintln!("rmca-run: cannot read /dev/urandom: {e}");
                    return 1;
                }
            }
        }
        Some(t)
    } else {
        None
    };
    let mut server = PmiServer::new(ServerConfig {
        size: np,
        kvsname,
        maxes: Maxes::default(),
        preload,
        tokens: tokens.clone(),
        untrusted_limit: UntrustedLimit::for_job(np),
    });
    let (io_tx, mut io_rx) = unbounded::<Ev>();
    let (exit_tx, mut exit_rx) = unbounded::<(u32, Exit)>();
    let (signal_tx, mut signal_rx) = unbounded::<i32>();
    let mut pmi_port = None;
    let mut listener = None;
    if use_tcp {
        let l = match TcpListener::bind((o.pmi_addr.as_str(), 0)) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("rmca-run: cannot listen on {}: {e}", o.pmi_addr);
                return 1;
            }
        };
        pmi_port = l.local_addr().ok().map(|a| a.to_string());
        listener = Some(l);
    }
    let mut poller = Poller::new(listener, TCP_CONN_BASE, o.tag_output);

    let secret_hex = rmca_rte::encoding::hex_encode(secret);
    let node_map = rmca_rte::encode_node_map(&node_of_rank);
    let me = std::process::id();
    let death_signal = rmca_rte::lifeline::launcher_death_signal();
    let mut writers: HashMap<ConnId, Stream> = HashMap::new();
    let mut pids: Vec<u32> = Vec::new();
    let mut spawn_errors = Vec::new();
    let mut outputs = 0usize;

    // An enclosing PMIx job's variables (srun --mpi=pmix: PMIX_NAMESPACE, PMIX_RANK,
    // PMIX_SERVER_URI*, ...) would point a PMIx-aware library in a rank at that job's server.
    let enclosing_pmix_vars: Vec<std::ffi::OsString> = std::env::vars_os()
        .map(|(k, _)| k)
        .filter(|k| k.as_encoded_bytes().starts_with(b"PMIX_"))
        .collect();
    for rank in 0..np {
        let mut env: Vec<(String, String)> = vec![
            ("PMI_RANK".into(), rank.to_string()),
            ("PMI_SIZE".into(), np.to_string()),
            (rmca_rte::ENV_JOB_ID.into(), job_id.to_string()),
            (rmca_rte::ENV_NODE_MAP.into(), node_map.clone()),
            (rmca_rte::ENV_NODE_NAMES.into(), nodes.join(",")),
            // The rank's parent-death signal (set below): its runtime removes its files on it.
            (
                rmca_rte::ENV_LAUNCHER_DEATH_SIGNAL.into(),
                death_signal.to_string(),
            ),
        ];
        if secret_in_env {
            env.push((rmca_rte::ENV_JOB_SECRET.into(), secret_hex.clone()));
        }
        if let Some(n) = node_cpus {
            env.push((ENV_NODE_CPUS.into(), n.to_string()));
        }
        for (k, v) in &o.mca {
            env.push((format!("{}{k}", rmca_rte::MCA_ENV_PREFIX), v.clone()));
        }
        if !o.mca.is_empty() {
            // Also say which of those came from `--mca`, so the ranks report them (and rank them)
            // as command-line settings rather than environment ones: one `name=value` per line.
            let listed: String = o.mca.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
            env.push((MCA_CMDLINE_ENV.into(), listed));
        }
        let mut child_end = None;
        if let Some(port) = &pmi_port {
            env.push(("PMI_PORT".into(), port.clone()));
            env.push(("PMI_ID".into(), rank.to_string()));
            if tokens.is_some() {
                // The token itself goes through the rank's stdin (below): an environment
                // crosses a launch agent on its command line, readable by every user.
                env.push((rmca_rte::ENV_PMI_TOKEN_STDIN.into(), "1".into()));
            }
        } else {
            match UnixStream::pair() {
                Ok((ours, theirs)) => {
                    env.push(("PMI_FD".into(), theirs.as_raw_fd().to_string()));
                    if let Ok(r) = ours.try_clone() {
                        poller.watch(r, Source::Pmi(rank as ConnId));
                    }
                    server.connect(rank as ConnId, Some(rank));
                    writers.insert(rank as ConnId, Stream::Unix(ours));
                    child_end = Some(theirs);
                }
                Err(e) => {
                    spawn_errors.push((rank, format!("socketpair: {e}")));
                    pids.push(0);
                    continue;
                }
            }
        }
        let node = &nodes[node_of_rank[rank as usize] as usize];
        let argv: Vec<String> = match &o.launch_agent {
            Some(t) => {
                // Environment crosses the agent on its command line (ssh does not forward it).
                let mut c = vec!["env".to_string()];
                c.extend(env.iter().map(|(k, v)| format!("{k}={v}")));
                c.extend(o.program.iter().cloned());
                expand_agent(t, node, &c)
            }
            None => o.program.clone(),
        };
        let mut cmd = Command::new(&argv[0]);
        // Variables of an enclosing job (rmca-run under Hydra, Slurm or rmca-run) would make
        // the rank talk to the wrong server.
        for k in INHERITED_JOB_VARS {
            cmd.env_remove(k);
        }
        for k in &enclosing_pmix_vars {
            cmd.env_remove(k);
        }
        cmd.args(&argv[1..])
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(if tokens.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        sys::configure_child(
            &mut cmd,
            me,
            death_signal,
            child_end.as_ref().map(|s| s.as_raw_fd()),
            cpu_of_rank.as_ref().map(|m| m[rank as usize]),
        );
        match cmd.spawn() {
            Ok(mut c) => {
                pids.push(c.id());
                if let (Some(t), Some(mut stdin)) = (&tokens, c.stdin.take()) {
                    // One short line fits any pipe buffer: this never blocks. A rank that
                    // exits without reading it is no error of ours (EPIPE is ignored).
                    let _ = stdin.write_all(format!("{}\n", t[rank as usize]).as_bytes());
                }
                if let Some(out) = c.stdout.take() {
                    let source = Source::Output {
                        rank,
                        to_stderr: false,
                    };
                    poller.watch(out, source);
                    outputs += 1;
                }
                if let Some(err) = c.stderr.take() {
                    let source = Source::Output {
                        rank,
                        to_stderr: true,
                    };
                    poller.watch(err, source);
                    outputs += 1;
                }
                // The reaper waits for and reaps the process; the handle is not needed.
                drop(c);
            }
            Err(e) => {
                spawn_errors.push((rank, format!("{}: {e}", argv[0])));
                pids.push(0);
            }
        }
        // Our copy of the child's end must close so that its exit shows as EOF.
        drop(child_end);
    }
    let rank_of_pid = pids
        .iter()
        .enumerate()
        .filter(|(_, &pid)| pid != 0)
        .map(|(rank, &pid)| (pid, rank as u32))
        .collect();
    let io = poller
        .spawn(io_tx)
        .and_then(|()| poller::spawn_reaper(rank_of_pid, exit_tx))
        .and_then(|()| poller::spawn_signal_reader(signal_pipe, signal_tx));
    if let Err(e) = io {
        // Without its I/O threads the launcher cannot watch the job: end it now.
        eprintln!("rmca-run: cannot start the launcher's I/O threads: {e}; terminating the job");
        for &pid in pids.iter().filter(|&&p| p != 0) {
            sys::kill_group(pid, libc::SIGKILL);
        }
        return 1;
    }

    let now = Instant::now();
    let mut mon = JobMonitor::new(&pids, o.timeout, o.term_grace, now).keep_going(o.keep_going);
    for (rank, e) in &spawn_errors {
        mon.handle_spawn_failure(*rank, e, now);
    }

    loop {
        // Carry out decisions.
        while let Some(a) = mon.poll_action() {
            match a {
                Action::Message(m) => eprintln!("{m}"),
                Action::RankLost(r) => {
                    server.rank_departed(r);
                    while let Some((conn, bytes)) = server.poll_transmit() {
                        if let Some(w) = writers.get_mut(&conn) {
                            if w.write_all(&bytes).is_err() {
                                w.shutdown();
                            }
                        }
                    }
                }
                Action::Terminate | Action::Kill => {
                    let sig = if a == Action::Kill {
                        libc::SIGKILL
                    } else {
                        libc::SIGTERM
                    };
                    for r in mon.live_ranks() {
                        sys::kill_group(pids[r as usize], sig);
                    }
                }
            }
        }
        if mon.is_done() {
            break;
        }
        let deadline = [mon.poll_timeout(), server.untrusted_deadline()]
            .into_iter()
            .flatten()
            .min();
        let wake = wait_for_event(&io_rx, &exit_rx, &signal_rx, deadline);
        let now = Instant::now();
        match wake {
            Wake::Timer => {}
            Wake::Closed(Reporter::Io) => io_rx = never(),
            Wake::Closed(Reporter::Reaper) => exit_rx = never(),
            Wake::Closed(Reporter::Signals) => signal_rx = never(),
            Wake::Signal(sig) => mon.handle_signal(sig, now),
            Wake::Exited(rank, exit) => mon.handle_exit(rank, exit, now),
            Wake::Io(Ev::OutputDone) => outputs = outputs.saturating_sub(1),
            Wake::Io(Ev::Accepted(conn, s)) => {
                writers.insert(conn, Stream::Tcp(s));
                for gone in server.connect_untrusted(conn, now) {
                    if let Some(w) = writers.remove(&gone) {
                        w.shutdown();
                    }
                }
            }
            Wake::Io(Ev::PmiData(conn, data)) => server.handle_input(conn, &data),
            Wake::Io(Ev::PmiEof(conn)) => {
                if let Some((Some(r), _finalized)) = server.disconnect(conn) {
                    mon.handle_pmi_closed(r, now);
                }
                writers.remove(&conn);
            }
        }
        for gone in server.evict_untrusted(now) {
            if let Some(w) = writers.remove(&gone) {
                w.shutdown();
            }
        }
        // PMI server output and events.
        while let Some((conn, bytes)) = server.poll_transmit() {
            if let Some(w) = writers.get_mut(&conn) {
                if w.write_all(&bytes).is_err() {
                    w.shutdown();
                }
            }
        }
        while let Some(e) = server.poll_event() {
            match e {
                ServerEvent::Initialized { rank } => mon.handle_initialized(rank),
                ServerEvent::Finalized { rank } => mon.handle_finalized(rank),
                ServerEvent::Abort {
                    rank,
                    code,
                    message,
                } => mon.handle_abort(rank, code, &message, now),
                ServerEvent::BarrierComplete { .. } => {}
                ServerEvent::Close { conn, rank, reason } => {
                    eprintln!(
                        "rmca-run: PMI protocol error from {}: {reason}",
                        rank.map(|r| format!("rank {r}"))
                            .unwrap_or_else(|| "an unidentified client".into())
                    );
                    if let Some(w) = writers.get(&conn) {
                        w.shutdown();
                    }
                }
            }
        }
        let waiting = server.ranks_in_barrier();
        if !waiting.is_empty() {
            let w: Vec<String> = waiting.iter().map(u32::to_string).collect();
            mon.timeout_detail = format!(" (ranks waiting in a fence: {})", w.join(","));
        } else {
            mon.timeout_detail.clear();
        }
        mon.handle_timeout(now);
    }
    // Drain the ranks' remaining output, bounded: a stray descendant that escaped its process
    // group could hold a pipe open forever.
    let deadline = Instant::now() + Duration::from_secs(2);
    while outputs > 0 {
        match io_rx.recv_deadline(deadline) {
            Ok(Ev::OutputDone) => outputs -= 1,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let _ = std::io::stdout().flush();
    mon.exit_status()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_host_names_are_one_node() {
        let hosts: Vec<String> = ["a", "b", "a"].iter().map(|s| s.to_string()).collect();
        let (names, ids) = node_identity(&hosts, &block_map(6, 3));
        assert_eq!(names, vec!["a".to_string(), "b".to_string()]);
        assert_eq!(ids, vec![0, 0, 1, 1, 0, 0]);
    }
}
