//! Shared helpers: several btl-ud modules ("ranks") in one process, wired by a LocalModex.
//!
//! The provider comes from `RMCA_BTL_UD_TEST_PROVIDER` (`soft`, the default, or `rdma` inside
//! the Soft-RoCE guest, with the crate built with `--features rdma`).
#![allow(dead_code)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rmca_btl_ud::{MODEX_KEY, UD};
use rmca_framework::btl::{Btl, BtlComponent, BtlError, BtlEvents, CompletionToken, SendError};
use rmca_framework::component::{component_params, Framework, InitContext};
use rmca_framework::job::JobInfo;
use rmca_framework::memory::MemoryAccounting;
use rmca_framework::modex::{LocalModex, ModexWrite};
use rmca_framework::params::ParamStore;
use rmca_framework::rank::Rank;

/// The provider the tests run on.
pub fn provider() -> String {
    std::env::var("RMCA_BTL_UD_TEST_PROVIDER").unwrap_or_else(|_| "soft".into())
}

/// True on the soft provider (fault injection, socket-level checks and provider counters).
pub fn soft() -> bool {
    provider() == "soft"
}

/// For a `soft_only_*` test, which needs the soft provider for `what`: true on it; on another
/// provider [`rmca_test_support::skip_or_fail`] (the rdma lane filters these tests out, so
/// getting here there means the filter missed one) and false.
pub fn require_soft(what: &str) -> bool {
    if soft() {
        return true;
    }
    rmca_test_support::skip_or_fail(format!(
        "{what} needs the soft provider, not {}: a soft_only_ test (run it with \
         RMCA_BTL_UD_TEST_PROVIDER unset; the rdma lane passes --skip soft_only_)",
        provider()
    ));
    false
}

/// Resolve btl-ud's parameters with `settings` applied (as environment settings).
pub fn params(settings: &[(&str, &str)]) -> ParamStore {
    let provider = provider();
    let mut all = vec![("btl_ud_provider", provider.as_str())];
    all.extend_from_slice(settings);
    component_params(Framework::Btl, &UD, &all).unwrap()
}

/// A job description for `rank` of `size` with `secret`.
pub fn job(rank: Rank, size: u32, secret: &str) -> JobInfo {
    JobInfo::single_node(rank, size, secret)
}

/// Initialise one module of `job`, publishing into `modex`.
pub fn init(
    job: &JobInfo,
    modex: &LocalModex,
    mem: &MemoryAccounting,
    settings: &[(&str, &str)],
) -> Result<Box<dyn Btl>, BtlError> {
    let p = params(settings);
    let mut w = modex.writer(job.rank);
    let mut ctx = InitContext::new(job, &p, mem, &mut w as &mut dyn ModexWrite);
    let mut v = UD.init(&mut ctx)?;
    assert_eq!(v.len(), 1, "one module per device");
    Ok(v.remove(0))
}

/// `n` ranks of one job, each with its own settings, all peers added.
pub fn ranks(secret: &str, settings: &[&[(&str, &str)]]) -> Vec<Box<dyn Btl>> {
    let modex = LocalModex::new();
    let mem = MemoryAccounting::new();
    let n = settings.len() as u32;
    let mut v: Vec<Box<dyn Btl>> = (0..n)
        .map(|r| init(&job(r, n, secret), &modex, &mem, settings[r as usize]).expect("init"))
        .collect();
    for (r, b) in v.iter_mut().enumerate() {
        let reach = b
            .add_procs(&job(r as u32, n, secret).procs(), &modex)
            .expect("add_procs");
        assert!(reach.iter().all(|&x| x), "every rank reachable: {reach:?}");
        // As the BML does once it routes the peers over ud: the pools take their full size.
        b.peers_routed(&(0..n).collect::<Vec<_>>());
    }
    v
}

/// The card a module published (re-read from a modex), for raw peers.
pub fn card_of(modex: &LocalModex, rank: Rank) -> rmca_btl_ud::card::CardRepr {
    use rmca_framework::btl::ModexRead;
    let b = modex.get(rank, MODEX_KEY).unwrap().expect("card published");
    rmca_btl_ud::card::CardRepr::from_bytes(&b).unwrap()
}

/// Collects what a module delivers.
#[derive(Default, Debug)]
pub struct Sink {
    /// (peer, tag, bytes).
    pub frags: Vec<(Rank, u8, Vec<u8>)>,
    /// Failures reported.
    pub failed: Vec<(Rank, String)>,
}

impl BtlEvents for Sink {
    fn recv(&mut self, peer: Rank, tag: u8, data: &[u8]) {
        self.frags.push((peer, tag, data.to_vec()));
    }
    fn rdma_complete(&mut self, _token: CompletionToken, _result: Result<(), SendError>) {}
    fn peer_failed(&mut self, peer: Rank, reason: &str) {
        self.failed.push((peer, reason.to_owned()));
    }
}

/// `n` empty sinks.
pub fn sinks(n: usize) -> Vec<Sink> {
    (0..n).map(|_| Sink::default()).collect()
}

/// A module's counters as a map.
pub fn counters(b: &dyn Btl) -> HashMap<String, u64> {
    b.counters().into_iter().collect()
}

/// Progress every module until `done` holds; panics (with the counters) if nothing satisfies
/// it within a generous bound. The bound only keeps a broken build from hanging CI.
pub fn progress_until(
    btls: &mut [Box<dyn Btl>],
    sinks: &mut [Sink],
    mut done: impl FnMut(&[Sink]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done(sinks) {
        for (b, s) in btls.iter_mut().zip(sinks.iter_mut()) {
            b.progress(s);
        }
        if Instant::now() > deadline {
            let c: Vec<_> = btls.iter().map(|b| counters(b.as_ref())).collect();
            panic!("no progress; counters: {c:#?}");
        }
    }
}

/// Progress every module for `rounds` rounds (to let stray traffic arrive).
pub fn progress_rounds(btls: &mut [Box<dyn Btl>], sinks: &mut [Sink], rounds: usize) {
    for _ in 0..rounds {
        for (b, s) in btls.iter_mut().zip(sinks.iter_mut()) {
            b.progress(s);
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Deterministic payload of fragment `seq` from `src`, `len` bytes.
pub fn pattern(src: Rank, seq: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(31)
                .wrapping_add(seq * 7 + src * 101) as u8
        })
        .collect()
}
