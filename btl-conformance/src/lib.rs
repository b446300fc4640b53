//! The BTL conformance suite: what every [`Btl`] must do, checked against any
//! [`BtlComponent`], whether it is built into rmca or loaded as an out-of-tree plugin.
//!
//! The suite opens two ranks of one job on one node in this process, through the component as
//! the framework does (parameters, [`BtlComponent::init`], the modex, [`Btl::add_procs`]), and
//! drives both modules' [`Btl::progress`] from one thread. Each check is a plain function that
//! panics with what was wrong; [`btl_conformance_tests!`] turns them into `#[test]`s:
//!
//! ```ignore
//! // tests/conformance.rs of a BTL crate
//! fn subject() -> rmca_btl_conformance::Subject {
//!     rmca_btl_conformance::Subject::new(&my_btl::COMPONENT).setting("btl_mine_if", "lo")
//! }
//! rmca_btl_conformance::btl_conformance_tests!(subject());
//! ```
//!
//! What is checked (the contract in [`rmca_framework::btl`]):
//! - init gives at least one module named after the component, whose attributes hold together
//!   (SEND offered, eager limit within the largest fragment);
//! - `add_procs` answers once per process and reaches the other rank of the node;
//! - fragments of every size from 0 to `max_send_size`, split anywhere between header and
//!   payload, arrive once each with their tag, sender and bytes, both ways; the sender's
//!   buffers are overwritten as soon as `send` returns (sends copy or refuse);
//! - back-pressure: sending without the receiver progressing either takes a fragment or says
//!   `WouldBlock` having taken nothing, and everything taken arrives;
//! - an oversized fragment is `TooLarge` and a rank outside the job `Unreachable`, and
//!   neither sends anything;
//! - counters have distinct names, memory usage never exceeds its peak, and `finalize`
//!   returns after traffic without reporting a failed peer.
//!
//! BTLs that advertise [`BtlFlags::NEED_ACK`] (unreliable delivery) are only held to
//! delivering intact, never duplicated fragments: losses are the PML's to repair.
//! Put/get are not exercised yet.
#![deny(unsafe_code)]
#![warn(missing_docs)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rmca_framework::btl::{
    tags, Btl, BtlComponent, BtlEvents, BtlFlags, BtlTag, CompletionToken, SendError, SendHint,
};
use rmca_framework::component::InitContext;
use rmca_framework::job::JobInfo;
use rmca_framework::memory::MemoryAccounting;
use rmca_framework::modex::LocalModex;
use rmca_framework::params::{ParamRegistrar, ParamStore, RawSetting, RawSources, Source};
use rmca_framework::rank::Rank;

/// Bound on any wait: only reached when the BTL under test is stuck, never a timing check.
pub const WAIT: Duration = Duration::from_secs(30);

/// The BTL under test and the parameters its modules are opened with.
#[derive(Clone)]
pub struct Subject {
    component: &'static dyn BtlComponent,
    settings: Vec<(String, String)>,
}

impl Subject {
    /// Test `component` with its parameters' defaults.
    pub fn new(component: &'static dyn BtlComponent) -> Self {
        Self {
            component,
            settings: Vec::new(),
        }
    }

    /// Set MCA parameter `name` (full name, e.g. `btl_tcp_if_addr`) to `value`.
    pub fn setting(mut self, name: &str, value: &str) -> Self {
        self.settings.push((name.to_owned(), value.to_owned()));
        self
    }

    fn name(&self) -> &'static str {
        self.component.meta().name
    }

    fn params(&self) -> ParamStore {
        let meta = self.component.meta();
        let mut specs = Vec::new();
        self.component
            .register_params(&mut ParamRegistrar::new("btl", meta.name, &mut specs));
        let raw = RawSources {
            settings: self
                .settings
                .iter()
                .map(|(n, v)| RawSetting {
                    name: n.clone(),
                    value: v.clone(),
                    source: Source::CommandLine,
                })
                .collect(),
        };
        ParamStore::resolve(specs, &raw).unwrap_or_else(|errs| {
            let errs: Vec<String> = errs.iter().map(ToString::to_string).collect();
            panic!("btl {}: parameters refused: {}", meta.name, errs.join("; "))
        })
    }
}

/// Two ranks of one job on one node, each with the component's modules, wired by `add_procs`.
pub struct Pair {
    /// Rank 0's modules, then rank 1's, in the order `init` returned them.
    pub modules: [Vec<Box<dyn Btl>>; 2],
    /// What each rank's modules reported.
    pub sinks: [Sink; 2],
    /// Whether delivery is unreliable ([`BtlFlags::NEED_ACK`] on rank 0's first module).
    pub lossy: bool,
}

/// Everything a rank's modules reported during progress.
#[derive(Debug, Default)]
pub struct Sink {
    /// `(sender, tag, bytes)` of every fragment received, in arrival order.
    pub got: Vec<(Rank, BtlTag, Vec<u8>)>,
    /// `(peer, reason)` of every `peer_failed`.
    pub failed: Vec<(Rank, String)>,
}

impl BtlEvents for Sink {
    fn recv(&mut self, peer: Rank, tag: BtlTag, data: &[u8]) {
        self.got.push((peer, tag, data.to_vec()));
    }
    fn rdma_complete(&mut self, _token: CompletionToken, _result: Result<(), SendError>) {}
    fn peer_failed(&mut self, peer: Rank, reason: &str) {
        self.failed.push((peer, reason.to_owned()));
    }
}

fn job(rank: Rank, run: u32) -> JobInfo {
    JobInfo {
        rank,
        size: 2,
        // Unique per pair so that BTLs naming files or sockets after the job never collide.
        job_id: format!("conformance-{}-{run}", std::process::id()),
        secret: format!("conformance-secret-{}-{run}", std::process::id()).into_bytes(),
        node_of: vec![0, 0],
        node_names: vec!["localhost".into()],
    }
}

impl Pair {
    /// Open both ranks through the component and connect them.
    pub fn open(subject: &Subject) -> Self {
        static RUN: AtomicU32 = AtomicU32::new(0);
        let run = RUN.fetch_add(1, Ordering::Relaxed);
        let name = subject.name();
        let params = subject.params();
        let modex = LocalModex::new();
        let jobs = [job(0, run), job(1, run)];
        let memory = MemoryAccounting::new();
        let mut modules: [Vec<Box<dyn Btl>>; 2] = [Vec::new(), Vec::new()];
        for (r, j) in jobs.iter().enumerate() {
            let mut w = modex.writer(j.rank);
            let mut ctx = InitContext::new(j, &params, &memory, &mut w);
            modules[r] = subject
                .component
                .init(&mut ctx)
                .unwrap_or_else(|e| panic!("btl {name}: init of rank {r} failed: {e}"));
            assert!(
                !modules[r].is_empty(),
                "btl {name}: init of rank {r} gave no module (the suite needs one to test)"
            );
        }
        assert_eq!(
            modules[0].len(),
            modules[1].len(),
            "btl {name}: the two ranks of one node opened different numbers of modules"
        );
        for (r, j) in jobs.iter().enumerate() {
            for (i, m) in modules[r].iter_mut().enumerate() {
                let reach = m
                    .add_procs(&j.procs(), &modex)
                    .unwrap_or_else(|e| panic!("btl {name}: add_procs of rank {r} failed: {e}"));
                assert_eq!(
                    reach.len(),
                    2,
                    "btl {name}: add_procs must answer once per process"
                );
                assert!(
                    reach[1 - r],
                    "btl {name}: module {i} of rank {r} does not reach rank {} on the same node",
                    1 - r
                );
                // As the BML does once it routes the reached peers over the module.
                let routed: Vec<Rank> = (0..2).filter(|&p| reach[p as usize]).collect();
                m.peers_routed(&routed);
            }
        }
        let lossy = modules[0][0]
            .attributes()
            .flags
            .contains(BtlFlags::NEED_ACK);
        Self {
            modules,
            sinks: [Sink::default(), Sink::default()],
            lossy,
        }
    }

    /// Progress every module once; the number of events they reported.
    pub fn progress(&mut self) -> usize {
        let mut n = 0;
        for (mods, sink) in self.modules.iter_mut().zip(self.sinks.iter_mut()) {
            for m in mods.iter_mut() {
                n += m.progress(sink);
            }
        }
        n
    }

    /// Progress until `done` holds, panicking after [`WAIT`] with `what`.
    pub fn pump_until(&mut self, what: &str, done: impl Fn(&[Sink; 2]) -> bool) {
        let start = Instant::now();
        while !done(&self.sinks) {
            if self.progress() == 0 {
                std::thread::yield_now();
            }
            assert!(
                start.elapsed() < WAIT,
                "no progress for {WAIT:?} waiting for {what}: rank 0 got {} fragments, rank 1 {}",
                self.sinks[0].got.len(),
                self.sinks[1].got.len()
            );
        }
    }

    /// Send one fragment from `from`'s module `m` to the other rank, retrying through
    /// `WouldBlock` while progressing everything.
    pub fn send(&mut self, from: usize, m: usize, tag: BtlTag, header: &[u8], payload: &[u8]) {
        let start = Instant::now();
        loop {
            match self.modules[from][m].send(
                (1 - from) as Rank,
                tag,
                header,
                payload,
                SendHint::default(),
            ) {
                Ok(()) => return,
                Err(SendError::WouldBlock) => {
                    self.progress();
                    assert!(
                        start.elapsed() < WAIT,
                        "send stayed WouldBlock for {WAIT:?}"
                    );
                }
                Err(e) => panic!(
                    "send of {} bytes from rank {from}: {e}",
                    header.len() + payload.len()
                ),
            }
        }
    }

    /// Finalize every module.
    pub fn finalize(&mut self) {
        for m in self.modules.iter_mut().flatten() {
            m.finalize();
        }
    }
}

/// Check that what `sink` got is `sent` (exactly, for a reliable BTL; an intact subset without
/// duplicates for an unreliable one).
fn check_delivery(
    name: &str,
    lossy: bool,
    sent: &[(Rank, BtlTag, Vec<u8>)],
    got: &[(Rank, BtlTag, Vec<u8>)],
) {
    let mut want: HashMap<&(Rank, BtlTag, Vec<u8>), usize> = HashMap::new();
    for s in sent {
        *want.entry(s).or_default() += 1;
    }
    for g in got {
        match want.get_mut(g) {
            Some(n) if *n > 0 => *n -= 1,
            _ => panic!(
                "btl {name}: delivered a fragment never sent, or twice: from rank {} tag {:#x}, {} bytes",
                g.0,
                g.1,
                g.2.len()
            ),
        }
    }
    if !lossy {
        assert_eq!(
            got.len(),
            sent.len(),
            "btl {name}: {} fragments sent, {} delivered",
            sent.len(),
            got.len()
        );
    }
}

/// The bytes of test fragment `i` of `len` bytes (distinct per fragment, so a mix-up shows).
fn pattern(i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (k.wrapping_mul(31) ^ i.wrapping_mul(131) ^ (k >> 8)) as u8)
        .collect()
}

/// Init, attributes and `add_procs` hold together.
pub fn init_and_attributes(subject: &Subject) {
    let name = subject.name();
    let mut pair = Pair::open(subject);
    for m in pair.modules.iter().flatten() {
        assert_eq!(
            m.component_name(),
            name,
            "btl {name}: a module must answer its component's name"
        );
        let a = m.attributes();
        assert!(
            a.flags.contains(BtlFlags::SEND),
            "btl {name}: every BTL must offer SEND"
        );
        assert!(
            a.max_send_size > 0 && a.eager_limit <= a.max_send_size,
            "btl {name}: eager_limit {} must be within max_send_size {} (> 0)",
            a.eager_limit,
            a.max_send_size
        );
        let usage = m.memory_usage();
        assert!(
            usage.current <= usage.peak,
            "btl {name}: memory usage {} above its peak {}",
            usage.current,
            usage.peak
        );
        let counters = m.counters();
        let mut names: Vec<&str> = counters.iter().map(|(n, _)| n.as_str()).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(
            names.len(),
            before,
            "btl {name}: counter names must be distinct"
        );
    }
    pair.finalize();
}

/// Fragments of every size arrive intact, once, with their tag and sender, both ways; the
/// sender may reuse its buffers as soon as `send` returns.
pub fn fragments_of_every_size(subject: &Subject) {
    let name = subject.name();
    let mut pair = Pair::open(subject);
    let mut sent: [Vec<(Rank, BtlTag, Vec<u8>)>; 2] = [Vec::new(), Vec::new()];
    for m in 0..pair.modules[0].len() {
        let max = pair.modules[0][m].attributes().max_send_size;
        let eager = pair.modules[0][m].attributes().eager_limit;
        let mut sizes = vec![0, 1, 2, 7, 63, 64, 65, 1000, 4095, 4096, 4097];
        sizes.extend([eager.saturating_sub(1), eager, eager + 1, max - 1, max]);
        sizes.retain(|&s| s <= max);
        let tag_span = tags::BTL_INTERNAL_BASE - tags::USER_BASE;
        let mut buf = Vec::new();
        for (i, &len) in sizes.iter().enumerate() {
            for from in 0..2 {
                let tag = tags::USER_BASE + ((i * 2 + from) % tag_span as usize) as u8;
                let bytes = pattern(i * 2 + from, len);
                // Split the fragment between header and payload at several places.
                let split = [0, len / 3, len.min(40), len][i % 4];
                buf.clear();
                buf.extend_from_slice(&bytes);
                pair.send(from, m, tag, &buf[..split], &buf[split..]);
                // Copy-or-refuse: what `send` took must not change with the caller's buffer.
                buf.iter_mut().for_each(|b| *b = !*b);
                sent[1 - from].push((from as Rank, tag, bytes));
            }
        }
    }
    let lossy = pair.lossy;
    let want = [sent[0].len(), sent[1].len()];
    if lossy {
        // Unreliable: wait for a final marker each way instead of every fragment.
        for from in 0..2 {
            let marker = pattern(usize::MAX, 16);
            let start = Instant::now();
            loop {
                assert!(
                    start.elapsed() < WAIT,
                    "btl {name}: no marker from rank {from} arrived in {WAIT:?}"
                );
                pair.send(from, 0, tags::USER_BASE, &[], &marker);
                let sent_at = Instant::now();
                while sent_at.elapsed() < Duration::from_millis(200) {
                    pair.progress();
                }
                if pair.sinks[1 - from].got.iter().any(|g| g.2 == marker) {
                    break;
                }
            }
            pair.sinks[1 - from].got.retain(|g| g.2 != marker);
        }
    } else {
        pair.pump_until("every fragment", |s| {
            s[0].got.len() >= want[0] && s[1].got.len() >= want[1]
        });
    }
    for (r, (sent, sink)) in sent.iter().zip(&pair.sinks).enumerate() {
        check_delivery(name, lossy, sent, &sink.got);
        assert!(
            sink.failed.is_empty(),
            "btl {name}: rank {r} reported failed peers during normal traffic: {:?}",
            sink.failed
        );
    }
    pair.finalize();
}

/// Sending without the receiver progressing: each send takes its fragment or refuses it with
/// `WouldBlock` having taken nothing; whatever was taken arrives.
pub fn back_pressure_loses_nothing(subject: &Subject) {
    let name = subject.name();
    let mut pair = Pair::open(subject);
    let len = pair.modules[0][0].attributes().max_send_size.min(32 * 1024);
    let mut sent = Vec::new();
    let mut refused = 0;
    for i in 0..512 {
        let bytes = pattern(i, len);
        match pair.modules[0][0].send(1, tags::USER_BASE + 1, &[], &bytes, SendHint::default()) {
            Ok(()) => sent.push((0, tags::USER_BASE + 1, bytes)),
            Err(SendError::WouldBlock) => {
                refused += 1;
                if refused > 8 {
                    break;
                }
            }
            Err(e) => panic!("btl {name}: send {i} without receiver progress: {e}"),
        }
        // Only the sender progresses (connections may need it); the receiver stays idle.
        for m in pair.modules[0].iter_mut() {
            m.progress(&mut pair.sinks[0]);
        }
    }
    assert!(!sent.is_empty(), "btl {name}: not one send was taken");
    let want = sent.len();
    if pair.lossy {
        // Delivered fragments are checked below; losses are allowed.
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(500) {
            pair.progress();
        }
    } else {
        pair.pump_until("every fragment taken", |s| s[1].got.len() >= want);
    }
    check_delivery(name, pair.lossy, &sent, &pair.sinks[1].got);
    pair.finalize();
}

/// An oversized fragment is `TooLarge`, a rank outside the job `Unreachable`; neither sends
/// anything (a later fragment arrives alone).
pub fn refusals_send_nothing(subject: &Subject) {
    let name = subject.name();
    let mut pair = Pair::open(subject);
    let max = pair.modules[0][0].attributes().max_send_size;
    let big = vec![0x5a; max + 1];
    let m = &mut pair.modules[0][0];
    match m.send(
        1,
        tags::USER_BASE,
        &big[..1],
        &big[1..],
        SendHint::default(),
    ) {
        Err(SendError::TooLarge { len, max: limit }) => assert_eq!(
            (len, limit),
            (max + 1, max),
            "btl {name}: TooLarge must name the length and the limit"
        ),
        other => {
            panic!("btl {name}: a fragment of max_send_size + 1 bytes gave {other:?}, not TooLarge")
        }
    }
    match m.send(7, tags::USER_BASE, &[], b"x", SendHint::default()) {
        Err(SendError::Unreachable(7)) => {}
        other => panic!(
            "btl {name}: a send to rank 7 of a 2-rank job gave {other:?}, not Unreachable(7)"
        ),
    }
    let marker = pattern(42, 100);
    pair.send(0, 0, tags::USER_BASE + 2, &[], &marker);
    let expected = vec![(0, tags::USER_BASE + 2, marker)];
    if pair.lossy {
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(500) {
            pair.progress();
        }
    } else {
        pair.pump_until("the fragment after the refusals", |s| !s[1].got.is_empty());
    }
    check_delivery(name, pair.lossy, &expected, &pair.sinks[1].got);
    pair.finalize();
}

/// Every check, as `#[test]` functions, for the [`Subject`] that `$subject` evaluates to
/// (evaluated afresh in each test).
#[macro_export]
macro_rules! btl_conformance_tests {
    ($subject:expr) => {
        #[test]
        fn conformance_init_and_attributes() {
            $crate::init_and_attributes(&$subject);
        }
        #[test]
        fn conformance_fragments_of_every_size() {
            $crate::fragments_of_every_size(&$subject);
        }
        #[test]
        fn conformance_back_pressure_loses_nothing() {
            $crate::back_pressure_loses_nothing(&$subject);
        }
        #[test]
        fn conformance_refusals_send_nothing() {
            $crate::refusals_send_nothing(&$subject);
        }
    };
}
