//! Shared helpers: several btl-rc modules ("ranks") in one process, wired by a LocalModex.
//!
//! The provider comes from `RMCA_BTL_RC_TEST_PROVIDER` (`soft`, the default, or `rdma` inside
//! the Soft-RoCE guest, with the crate built with `--features rdma`).
#![allow(dead_code)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rmca_btl_rc::RC;
use rmca_framework::btl::{Btl, BtlComponent, BtlError, BtlEvents, CompletionToken, SendError};
use rmca_framework::component::{component_params, Framework, InitContext};
use rmca_framework::job::JobInfo;
use rmca_framework::memory::MemoryAccounting;
use rmca_framework::modex::{LocalModex, ModexWrite};
use rmca_framework::params::ParamStore;
use rmca_framework::rank::Rank;

/// The provider the tests run on.
pub fn provider() -> String {
    std::env::var("RMCA_BTL_RC_TEST_PROVIDER").unwrap_or_else(|_| "soft".into())
}

/// Resolve btl-rc's parameters with `settings` applied.
pub fn params(settings: &[(&str, &str)]) -> ParamStore {
    let provider = provider();
    let mut all = vec![("btl_rc_provider", provider.as_str())];
    all.extend_from_slice(settings);
    component_params(Framework::Btl, &RC, &all).unwrap()
}

/// A job description.
pub fn job(rank: Rank, size: u32, secret: &str) -> JobInfo {
    JobInfo::single_node(rank, size, secret)
}

/// Initialise one module.
pub fn init(
    job: &JobInfo,
    modex: &LocalModex,
    mem: &MemoryAccounting,
    settings: &[(&str, &str)],
) -> Result<Box<dyn Btl>, BtlError> {
    let p = params(settings);
    let mut w = modex.writer(job.rank);
    let mut ctx = InitContext::new(job, &p, mem, &mut w as &mut dyn ModexWrite);
    let mut v = RC.init(&mut ctx)?;
    assert_eq!(v.len(), 1);
    Ok(v.remove(0))
}

/// Log to stderr with the filter in `RMCA_LOG` (as the MPI library does), when it is set
/// (scripts/vm-tests.sh passes `RMCA_VM_TEST_LOG` there).
pub fn init_logging() {
    if std::env::var("RMCA_LOG").map_or(true, |v| v.is_empty()) {
        return;
    }
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_env("RMCA_LOG") {
        // An earlier test of this binary may have installed it already.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(std::io::stderr)
            .try_init();
    }
}

/// `n` ranks with the same settings, peers added. Each gets its own memory accounting.
pub fn ranks(
    secret: &str,
    n: u32,
    settings: &[(&str, &str)],
) -> (Vec<Box<dyn Btl>>, Vec<MemoryAccounting>) {
    init_logging();
    let modex = LocalModex::new();
    let mems: Vec<MemoryAccounting> = (0..n).map(|_| MemoryAccounting::new()).collect();
    let mut v: Vec<Box<dyn Btl>> = (0..n)
        .map(|r| init(&job(r, n, secret), &modex, &mems[r as usize], settings).expect("init"))
        .collect();
    for (r, b) in v.iter_mut().enumerate() {
        let procs = job(r as Rank, n, secret).procs();
        let reach = b.add_procs(&procs, &modex).expect("add_procs");
        for (i, ok) in reach.iter().enumerate() {
            assert_eq!(*ok, i != r, "rank {r} reaches {i}");
        }
    }
    (v, mems)
}

/// Everything a module reported.
#[derive(Default, Debug)]
pub struct Sink {
    /// Fragments per source: (tag, bytes).
    pub got: HashMap<Rank, Vec<(u8, Vec<u8>)>>,
    /// RDMA completions.
    pub rdma: Vec<(CompletionToken, Result<(), SendError>)>,
    /// Failures.
    pub failed: Vec<(Rank, String)>,
}

impl BtlEvents for Sink {
    fn recv(&mut self, peer: Rank, tag: u8, data: &[u8]) {
        self.got.entry(peer).or_default().push((tag, data.to_vec()));
    }
    fn rdma_complete(&mut self, token: CompletionToken, result: Result<(), SendError>) {
        self.rdma.push((token, result));
    }
    fn peer_failed(&mut self, peer: Rank, reason: &str) {
        self.failed.push((peer, reason.to_owned()));
    }
}

/// Progress every module until `done`; panics with `what` when a module reports a lost peer
/// (at once, with the reason: nothing more would arrive) or at the deadline (with every
/// module's nonzero counters).
pub fn run_until(
    btls: &mut [Box<dyn Btl>],
    sinks: &mut [Sink],
    what: &str,
    done: impl FnMut(&[Sink]) -> bool,
) {
    progress_until(btls, sinks, what, done, true);
}

/// [`run_until`] for tests that wait for failures: lost peers are no reason to stop.
pub fn run_until_failures(
    btls: &mut [Box<dyn Btl>],
    sinks: &mut [Sink],
    what: &str,
    done: impl FnMut(&[Sink]) -> bool,
) {
    progress_until(btls, sinks, what, done, false);
}

fn progress_until(
    btls: &mut [Box<dyn Btl>],
    sinks: &mut [Sink],
    what: &str,
    mut done: impl FnMut(&[Sink]) -> bool,
    stop_on_failure: bool,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done(sinks) {
        for (r, s) in sinks.iter().enumerate() {
            assert!(
                !stop_on_failure || s.failed.is_empty(),
                "waiting for {what}: rank {r} lost peers {:?}",
                s.failed
            );
        }
        if Instant::now() >= deadline {
            let counters: Vec<Vec<(String, u64)>> = btls
                .iter()
                .map(|b| b.counters().into_iter().filter(|(_, v)| *v > 0).collect())
                .collect();
            panic!("timed out waiting for {what}; counters per rank {counters:?}");
        }
        for (b, s) in btls.iter_mut().zip(sinks.iter_mut()) {
            b.progress(s);
        }
    }
}

/// Send, progressing `btls` while the BTL says WouldBlock.
#[allow(clippy::too_many_arguments)]
pub fn send_retry(
    btls: &mut [Box<dyn Btl>],
    sinks: &mut [Sink],
    from: usize,
    to: Rank,
    tag: u8,
    hdr: &[u8],
    pay: &[u8],
    hint: rmca_framework::btl::SendHint,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match btls[from].send(to, tag, hdr, pay, hint) {
            Ok(()) => return,
            Err(SendError::WouldBlock) => {
                assert!(Instant::now() < deadline, "send stuck");
                for (b, s) in btls.iter_mut().zip(sinks.iter_mut()) {
                    b.progress(s);
                }
            }
            Err(e) => panic!("send failed: {e}"),
        }
    }
}

/// A counter's value.
pub fn counter(b: &dyn Btl, name: &str) -> u64 {
    b.counters()
        .into_iter()
        .find(|(k, _)| k == name)
        .unwrap_or_else(|| panic!("no counter {name}"))
        .1
}

/// Deterministic payload of message `i` from `src`.
pub fn payload(src: Rank, i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (k as u32 ^ (i as u32).wrapping_mul(31) ^ (src * 7)) as u8)
        .collect()
}
