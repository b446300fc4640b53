//! The DR PML end to end inside one process: two `Dr` instances (ranks 0 and 1) joined by
//! in-memory BTLs that drop, duplicate, reorder and corrupt (flagged NEED_ACK | NEED_CSUM, like
//! UD), plus btl-self. The PML runs on the real clock, so the loops are bounded by a deadline
//! (they never assert a duration).

use rmca_framework::rng::SplitMix64;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmca_btl_self::{BtlSelf, SelfConfig};
use rmca_framework::bml::Bml;
use rmca_framework::btl::{
    exclusivity, Btl, BtlAttributes, BtlError, BtlEvents, BtlFlags, BtlTag, ModexRead, SendError,
    SendHint,
};
use rmca_framework::buffer::UserBuf;
use rmca_framework::modex::LocalModex;
use rmca_framework::pml::{
    Pml, PmlError, RecvArgs, RequestId, SendArgs, SendMode, Source, Status, StatusError, TagSel,
};
use rmca_framework::rank::{ProcInfo, Rank};
use rmca_pml_dr::proto::{AckPolicy, Csum, RtoPolicy};
use rmca_pml_dr::{Dr, DrConfig};

// SAFETY (lend, lend_mut): the memory lent stays borrowed here until the operation using it
// has completed (every caller waits for its operations before its buffers go).
fn lend(v: &[u8]) -> UserBuf {
    unsafe { UserBuf::from_slice(v) }
}
fn lend_mut(v: &mut [u8]) -> UserBuf {
    unsafe { UserBuf::from_mut_slice(v) }
}

#[derive(Clone, Debug)]
struct Faults {
    drop: f64,
    dup: f64,
    corrupt: f64,
    reorder: bool,
}

#[derive(Default)]
struct Wire {
    inbound: [VecDeque<(BtlTag, Vec<u8>)>; 2],
    rng: SplitMix64,
}

impl Wire {
    fn next(&mut self) -> u64 {
        self.rng.next_u64()
    }
    fn chance(&mut self, p: f64) -> bool {
        self.rng.chance(p)
    }
}

#[derive(Clone)]
struct Rail {
    wire: Arc<Mutex<Wire>>,
    /// Silently loses everything (a dead cable: no error anywhere).
    blackhole: Arc<AtomicBool>,
    /// Refuses sends (`WouldBlock`) while this many packets wait for the peer (0: no limit),
    /// like a full shared-memory ring.
    capacity: Arc<AtomicUsize>,
    faults: Faults,
}

impl Rail {
    fn new(seed: u64, faults: Faults) -> Self {
        let wire = Wire {
            rng: SplitMix64::new(seed),
            ..Wire::default()
        };
        Self {
            wire: Arc::new(Mutex::new(wire)),
            blackhole: Arc::default(),
            capacity: Arc::default(),
            faults,
        }
    }
}

struct LossyBtl {
    me: Rank,
    attrs: BtlAttributes,
    rail: Rail,
}

impl Btl for LossyBtl {
    fn component_name(&self) -> &str {
        "lossy"
    }
    fn attributes(&self) -> &BtlAttributes {
        &self.attrs
    }
    fn add_procs(&mut self, procs: &[ProcInfo], _m: &dyn ModexRead) -> Result<Vec<bool>, BtlError> {
        Ok(procs.iter().map(|p| p.rank != self.me).collect())
    }
    fn send(
        &mut self,
        peer: Rank,
        tag: BtlTag,
        header: &[u8],
        payload: &[u8],
        _hint: SendHint,
    ) -> Result<(), SendError> {
        let len = header.len() + payload.len();
        if len > self.attrs.max_send_size {
            return Err(SendError::TooLarge {
                len,
                max: self.attrs.max_send_size,
            });
        }
        if self.rail.blackhole.load(Ordering::Relaxed) {
            return Ok(());
        }
        let f = &self.rail.faults;
        let mut w = self.rail.wire.lock().unwrap();
        let cap = self.rail.capacity.load(Ordering::Relaxed);
        if cap != 0 && w.inbound[peer as usize].len() >= cap {
            return Err(SendError::WouldBlock);
        }
        if w.chance(f.drop) {
            return Ok(());
        }
        let mut v = Vec::with_capacity(len);
        v.extend_from_slice(header);
        v.extend_from_slice(payload);
        if w.chance(f.corrupt) {
            let bit = (w.next() % (v.len() as u64 * 8)) as usize;
            v[bit / 8] ^= 1 << (bit % 8);
        }
        let copies = if w.chance(f.dup) { 2 } else { 1 };
        for _ in 0..copies {
            w.inbound[peer as usize].push_back((tag, v.clone()));
        }
        Ok(())
    }
    fn progress(&mut self, events: &mut dyn BtlEvents) -> usize {
        let mut batch: Vec<(BtlTag, Vec<u8>)> = {
            let mut w = self.rail.wire.lock().unwrap();
            let mut b: Vec<_> = w.inbound[self.me as usize].drain(..).collect();
            if self.rail.faults.reorder && b.len() > 1 {
                for i in (1..b.len()).rev() {
                    let j = (w.next() % (i as u64 + 1)) as usize;
                    b.swap(i, j);
                }
            }
            b
        };
        if self.rail.blackhole.load(Ordering::Relaxed) {
            batch.clear();
        }
        let n = batch.len();
        for (tag, data) in batch {
            events.recv(1 - self.me, tag, &data);
        }
        n
    }
}

fn procs(me: Rank) -> Vec<ProcInfo> {
    (0..2)
        .map(|r| ProcInfo {
            rank: r,
            node: r,
            is_self: r == me,
        })
        .collect()
}

fn cfg() -> DrConfig {
    DrConfig {
        rto_initial: Duration::from_millis(10),
        rto_min: Duration::from_millis(2),
        rto_max: Duration::from_millis(200),
        ack_delay: Duration::from_micros(300),
        // Generous: a CI machine may stall this thread; only the dead-peer test wants it short.
        peer_timeout: Duration::from_secs(20),
        eager_limit: 8 * 1024,
        ..DrConfig::default()
    }
}

fn pair(rails: &[Rail], max_send: &[usize], cfg: DrConfig) -> (Dr, Dr) {
    let make = |me: Rank| {
        let mut btls: Vec<Box<dyn Btl>> = vec![Box::new(BtlSelf::new(SelfConfig::default()))];
        for (i, r) in rails.iter().enumerate() {
            let attrs = BtlAttributes {
                max_send_size: max_send[i],
                eager_limit: max_send[i],
                exclusivity: exclusivity::HIGH_SPEED_NETWORK,
                latency_ns: 1000 * (i as u32 + 1),
                flags: BtlFlags::SEND | BtlFlags::NEED_ACK | BtlFlags::NEED_CSUM,
                ..BtlAttributes::default()
            };
            btls.push(Box::new(LossyBtl {
                me,
                attrs,
                rail: r.clone(),
            }));
        }
        Dr::new(
            Bml::build(btls, &procs(me), &LocalModex::new()).unwrap(),
            cfg.clone(),
        )
        .unwrap()
    };
    (make(0), make(1))
}

/// Progress both until every request completed; panics past a generous deadline (a hang).
fn wait_all(a: &mut Dr, b: &mut Dr, reqs: &[(usize, RequestId)]) -> Vec<Status> {
    let mut out: Vec<Option<Status>> = vec![None; reqs.len()];
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let mut left = 0;
        for (i, &(side, id)) in reqs.iter().enumerate() {
            if out[i].is_none() {
                let p = if side == 0 { &mut *a } else { &mut *b };
                out[i] = p.test(id).unwrap();
                left += usize::from(out[i].is_none());
            }
        }
        if left == 0 {
            return out.into_iter().map(Option::unwrap).collect();
        }
        assert!(Instant::now() < deadline, "{left} requests never completed");
        a.progress();
        b.progress();
    }
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(0x9e37)) as u8)
        .collect()
}

fn isend(p: &mut Dr, buf: &[u8], dest: Rank, tag: i32, mode: SendMode) -> RequestId {
    p.isend(SendArgs {
        buf: lend(buf),
        dest,
        tag,
        context: 3,
        mode,
        pattern: Default::default(),
    })
    .unwrap()
}

fn irecv(p: &mut Dr, buf: &mut [u8], source: Source, tag: TagSel) -> RequestId {
    p.irecv(RecvArgs {
        buf: lend_mut(buf),
        source,
        tag,
        context: 3,
        pattern: Default::default(),
    })
    .unwrap()
}

fn counter(p: &Dr, name: &str) -> u64 {
    p.counters()
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
        .unwrap()
}

fn sizes(n: usize) -> Vec<usize> {
    let menu = [
        0, 1, 13, 100, 1000, 1400, 5000, 8192, 8193, 20_000, 70_000, 300_000,
    ];
    (0..n).map(|i| menu[(i * 7 + i / 3) % menu.len()]).collect()
}

/// Messages both ways under drop, duplication, reordering and corruption: every receive gets
/// exactly its message, intact, in MPI order (same tag → FIFO), including synchronous sends,
/// wildcard receives posted before and after the data arrived, and a send to self.
#[test]
fn exactly_once_intact_over_a_lossy_rail() {
    exactly_once_intact_over_a_lossy_rail_with(cfg());
}

/// Every acknowledgement policy, with the timeout and checksum variants (end-to-end checks
/// the unexpected half of the messages again after their copy into the receive buffer).
#[test]
fn every_protocol_variant_is_exactly_once_intact_over_a_lossy_rail() {
    for (policy, csum, rto) in [
        (AckPolicy::Vfrag, Csum::EndToEnd, RtoPolicy::Fixed),
        (AckPolicy::Cumulative, Csum::Crc32c, RtoPolicy::Rtt),
        (AckPolicy::Immediate, Csum::EndToEnd, RtoPolicy::Rtt),
        (AckPolicy::Selective, Csum::EndToEnd, RtoPolicy::Fixed),
    ] {
        let (a, b) = exactly_once_intact_over_a_lossy_rail_with(DrConfig {
            ack_policy: policy,
            csum,
            rto_policy: rto,
            rto_fixed: Duration::from_millis(5),
            ..cfg()
        });
        for p in [&a, &b] {
            assert_eq!(counter(p, "pml.dr.e2e_failures"), 0, "{policy:?}");
        }
    }
}

fn exactly_once_intact_over_a_lossy_rail_with(cfg: DrConfig) -> (Dr, Dr) {
    let faults = Faults {
        drop: 0.03,
        dup: 0.01,
        corrupt: 0.003,
        reorder: true,
    };
    let rails = [Rail::new(11, faults)];
    let (mut a, mut b) = pair(&rails, &[2048], cfg);
    let lens = sizes(60);
    let data: Vec<Vec<u8>> = lens
        .iter()
        .enumerate()
        .map(|(i, &l)| pattern(l, i as u64))
        .collect();
    let mut bufs_a: Vec<Vec<u8>> = lens.iter().map(|&l| vec![0u8; l]).collect();
    let mut bufs_b: Vec<Vec<u8>> = lens.iter().map(|&l| vec![0u8; l]).collect();
    let mut reqs = Vec::new();
    // Half the receives are posted before the sends (expected), half after (unexpected).
    let half = lens.len() / 2;
    let (early_b, late_b) = bufs_b.split_at_mut(half);
    for (i, buf) in early_b.iter_mut().enumerate() {
        reqs.push((
            1,
            irecv(&mut b, buf, Source::Rank(0), TagSel::Tag((i % 4) as i32)),
        ));
    }
    for (i, d) in data.iter().enumerate() {
        let mode = if i % 5 == 0 {
            SendMode::Synchronous
        } else {
            SendMode::Standard
        };
        reqs.push((0, isend(&mut a, d, 1, (i % 4) as i32, mode)));
        reqs.push((1, isend(&mut b, d, 0, (i % 4) as i32, mode)));
    }
    for _ in 0..200 {
        a.progress();
        b.progress();
    }
    for (j, buf) in late_b.iter_mut().enumerate() {
        let i = half + j;
        reqs.push((
            1,
            irecv(&mut b, buf, Source::Any, TagSel::Tag((i % 4) as i32)),
        ));
    }
    for (i, buf) in bufs_a.iter_mut().enumerate() {
        reqs.push((
            0,
            irecv(&mut a, buf, Source::Rank(1), TagSel::Tag((i % 4) as i32)),
        ));
    }
    // And one to self, through btl-self and the same protocol.
    let me_data = pattern(30_000, 99);
    let mut me_buf = vec![0u8; 30_000];
    reqs.push((0, isend(&mut a, &me_data, 0, 77, SendMode::Standard)));
    reqs.push((
        0,
        irecv(&mut a, &mut me_buf, Source::Rank(0), TagSel::Tag(77)),
    ));
    let st = wait_all(&mut a, &mut b, &reqs);
    for s in &st {
        assert_eq!(s.error, None, "{s:?}");
    }
    for (i, d) in data.iter().enumerate() {
        assert_eq!(&bufs_b[i], d, "message {i} to rank 1");
        assert_eq!(&bufs_a[i], d, "message {i} to rank 0");
    }
    assert_eq!(me_buf, me_data);
    let lost = counter(&a, "pml.dr.retransmissions") + counter(&b, "pml.dr.retransmissions");
    assert!(lost > 0, "the rail did lose packets");
    assert!(counter(&a, "pml.dr.duplicates") + counter(&b, "pml.dr.duplicates") > 0);
    (a, b)
}

/// Under end-to-end checksums a small standard send is not copied (its checksum is computed
/// over the user's buffer): it completes on acknowledgement, not at once.
#[test]
fn end_to_end_checksums_send_from_the_user_buffer() {
    let rails = [Rail::new(
        23,
        Faults {
            drop: 0.0,
            dup: 0.0,
            corrupt: 0.0,
            reorder: false,
        },
    )];
    let (mut a, mut b) = pair(
        &rails,
        &[2048],
        DrConfig {
            csum: Csum::EndToEnd,
            ..cfg()
        },
    );
    let small = pattern(100, 9);
    let s = isend(&mut a, &small, 1, 1, SendMode::Standard);
    assert!(
        a.test(s).unwrap().is_none(),
        "not copied: waits for its ack"
    );
    let mut got = vec![0u8; 100];
    let r = irecv(&mut b, &mut got, Source::Rank(0), TagSel::Tag(1));
    let st = wait_all(&mut a, &mut b, &[(0, s), (1, r)]);
    assert!(st.iter().all(|s| s.error.is_none()), "{st:?}");
    assert_eq!(got, small);
}

/// A receive buffer shorter than the message: truncated status, nothing written past it.
#[test]
fn truncated_receive_reports_and_stays_in_bounds() {
    let rails = [Rail::new(
        12,
        Faults {
            drop: 0.02,
            dup: 0.0,
            corrupt: 0.0,
            reorder: false,
        },
    )];
    let (mut a, mut b) = pair(&rails, &[1500], cfg());
    let msg = pattern(50_000, 5);
    let mut buf = vec![0xEEu8; 20_000];
    let reqs = [
        (0, isend(&mut a, &msg, 1, 1, SendMode::Standard)),
        (
            1,
            irecv(&mut b, &mut buf[..10_000], Source::Rank(0), TagSel::Any),
        ),
    ];
    let st = wait_all(&mut a, &mut b, &reqs);
    assert_eq!(st[0].error, None);
    assert_eq!(
        st[1].error(),
        Some(&StatusError::Truncated {
            message_len: 50_000,
            received: 10_000
        })
    );
    assert_eq!(&buf[..10_000], &msg[..10_000]);
    assert!(buf[10_000..].iter().all(|&x| x == 0xEE));
}

/// Rail 0 dies silently between two batches (deterministically: the first batch completed on
/// it, the second starts on it): traffic moves to rail 1 and everything completes.
#[test]
fn failover_to_the_second_rail() {
    let f = Faults {
        drop: 0.01,
        dup: 0.0,
        corrupt: 0.0,
        reorder: false,
    };
    let rails = [Rail::new(13, f.clone()), Rail::new(14, f)];
    let (mut a, mut b) = pair(&rails, &[4096, 1024], cfg());
    let lens = sizes(40);
    let data: Vec<Vec<u8>> = lens
        .iter()
        .enumerate()
        .map(|(i, &l)| pattern(l, i as u64))
        .collect();
    let mut bufs: Vec<Vec<u8>> = lens.iter().map(|&l| vec![0u8; l]).collect();
    let (first, second) = bufs.split_at_mut(20);
    for (half, bufs) in [(0usize, first), (1, second)] {
        if half == 1 {
            rails[0].blackhole.store(true, Ordering::Relaxed);
        }
        let mut reqs = Vec::new();
        for (j, buf) in bufs.iter_mut().enumerate() {
            let i = half * 20 + j;
            reqs.push((
                1,
                irecv(&mut b, buf, Source::Rank(0), TagSel::Tag(i as i32)),
            ));
            reqs.push((0, isend(&mut a, &data[i], 1, i as i32, SendMode::Standard)));
        }
        let st = wait_all(&mut a, &mut b, &reqs);
        assert!(st.iter().all(|s| s.error.is_none()), "{st:?}");
        let expect = if half == 0 { 0 } else { 1 };
        assert_eq!(
            counter(&a, "pml.dr.failovers"),
            expect,
            "after batch {half}"
        );
    }
    for (i, d) in data.iter().enumerate() {
        assert_eq!(&bufs[i], d, "message {i}");
    }
}

/// Every rail dies: sends and posted receives complete with an error; the job never hangs.
#[test]
fn dead_peer_fails_requests_instead_of_hanging() {
    let f = Faults {
        drop: 0.0,
        dup: 0.0,
        corrupt: 0.0,
        reorder: false,
    };
    let rails = [Rail::new(15, f)];
    let cfg = DrConfig {
        peer_timeout: Duration::from_millis(500),
        btl_retries: 3,
        ..cfg()
    };
    let (mut a, mut b) = pair(&rails, &[2048], cfg);
    let big = pattern(2_000_000, 1);
    let mut buf = vec![0u8; 64];
    rails[0].blackhole.store(true, Ordering::Relaxed);
    let reqs = [
        (0, isend(&mut a, &big, 1, 0, SendMode::Standard)),
        (0, irecv(&mut a, &mut buf, Source::Rank(1), TagSel::Any)),
    ];
    let st = wait_all(&mut a, &mut b, &reqs);
    for s in &st {
        assert!(
            matches!(s.error(), Some(StatusError::PeerFailed { peer: 1, .. })),
            "{s:?}"
        );
    }
    // Later operations towards the dead peer fail at once rather than hang.
    let mut buf2 = vec![0u8; 8];
    let reqs = [
        (0, isend(&mut a, &big[..10], 1, 0, SendMode::Standard)),
        (0, irecv(&mut a, &mut buf2, Source::Rank(1), TagSel::Any)),
    ];
    let st = wait_all(&mut a, &mut b, &reqs);
    assert!(st.iter().all(|s| s.error.is_some()), "{st:?}");
}

/// A receive posted for a peer that dies without ever sending completes with an error (the
/// keepalives go unanswered); a quiet but live peer is not declared dead.
#[test]
fn posted_receive_from_a_killed_peer_fails() {
    let f = Faults {
        drop: 0.0,
        dup: 0.0,
        corrupt: 0.0,
        reorder: false,
    };
    let rails = [Rail::new(16, f)];
    let cfg = DrConfig {
        peer_timeout: Duration::from_millis(300),
        ..cfg()
    };
    let (mut a, mut b) = pair(&rails, &[2048], cfg);
    let mut buf = vec![0u8; 16];
    let r = irecv(&mut a, &mut buf, Source::Rank(1), TagSel::Any);
    // Quiet but alive for longer than the peer timeout: keepalives are answered.
    let until = Instant::now() + Duration::from_millis(700);
    while Instant::now() < until {
        a.progress();
        b.progress();
    }
    assert_eq!(
        a.test(r).unwrap(),
        None,
        "a live, quiet peer must not be declared dead"
    );
    assert!(counter(&a, "pml.dr.pings_sent") > 0);
    // Now rank 1 "dies": nothing of it gets through any more, and it never progresses.
    rails[0].blackhole.store(true, Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(60);
    let st = loop {
        a.progress();
        if let Some(st) = a.test(r).unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "receive never failed");
    };
    assert!(
        matches!(st.error(), Some(StatusError::PeerFailed { peer: 1, .. })),
        "{st:?}"
    );
}

/// Connections are created on first use, not for every rank of the job at init: an idle PML
/// holds none and its progress loop walks none; a send creates the sender's, the first packet
/// the receiver's, a receive posted for a specific peer its own.
#[test]
fn connections_are_created_on_first_use() {
    let rails = [Rail::new(
        21,
        Faults {
            drop: 0.0,
            dup: 0.0,
            corrupt: 0.0,
            reorder: false,
        },
    )];
    let (mut a, mut b) = pair(&rails, &[2048], cfg());
    for _ in 0..10 {
        a.progress();
        b.progress();
    }
    assert_eq!((a.connected_peers(), b.connected_peers()), (0, 0));
    assert!(a.peer_counters(1).is_none());
    let mut buf = [0u8; 5];
    let r = irecv(&mut b, &mut buf, Source::Any, TagSel::Any);
    assert_eq!(
        b.connected_peers(),
        0,
        "a wildcard receive awaits no one in particular"
    );
    let s = isend(&mut a, b"hello", 1, 4, SendMode::Standard);
    assert_eq!(a.connected_peers(), 1);
    let st = wait_all(&mut a, &mut b, &[(0, s), (1, r)]);
    assert!(st.iter().all(|s| s.error.is_none()), "{st:?}");
    assert_eq!(&buf, b"hello");
    assert_eq!(b.connected_peers(), 1, "created by the first packet");
    assert!(a.peer_counters(1).is_some_and(|c| c.frags_sent > 0));
    // A receive posted for rank 0 on rank 0 itself (self) creates that connection too.
    let mut one = [0u8; 1];
    let _ = irecv(&mut a, &mut one, Source::Rank(0), TagSel::Tag(1));
    assert_eq!(a.connected_peers(), 2);
}

#[test]
fn small_standard_sends_complete_at_once_and_are_still_retransmitted() {
    // Every packet of the first exchange is lost: the small standard send completed at once
    // (its payload was copied), yet it still arrives intact, from the copy; a large send and a
    // synchronous one complete only once acknowledged.
    let rails = [Rail::new(
        22,
        Faults {
            drop: 0.0,
            dup: 0.0,
            corrupt: 0.0,
            reorder: false,
        },
    )];
    let (mut a, mut b) = pair(&rails, &[2048], cfg());
    rails[0].blackhole.store(true, Ordering::SeqCst);
    let mut small = pattern(100, 7);
    let s = isend(&mut a, &small, 1, 1, SendMode::Standard);
    let st = a.test(s).unwrap().expect("copied: complete at once");
    assert_eq!((st.len, st.error), (100, None));
    // The user may reuse the buffer at once: the copy is what goes on the wire.
    let sent = small.clone();
    small.fill(0);
    let big = pattern(20_000, 8);
    let l = isend(&mut a, &big, 1, 2, SendMode::Standard);
    let y = isend(&mut a, &sent[..10], 1, 3, SendMode::Synchronous);
    for _ in 0..50 {
        a.progress();
        b.progress();
    }
    assert!(
        a.test(l).unwrap().is_none(),
        "a large send waits for its acks"
    );
    assert!(
        a.test(y).unwrap().is_none(),
        "a synchronous send waits for the match"
    );
    rails[0].blackhole.store(false, Ordering::SeqCst);
    let mut got = vec![0u8; 100];
    let mut got_big = vec![0u8; 20_000];
    let mut got_sync = vec![0u8; 10];
    let r1 = irecv(&mut b, &mut got, Source::Rank(0), TagSel::Tag(1));
    let r2 = irecv(&mut b, &mut got_big, Source::Rank(0), TagSel::Tag(2));
    let r3 = irecv(&mut b, &mut got_sync, Source::Rank(0), TagSel::Tag(3));
    let st = wait_all(&mut a, &mut b, &[(0, l), (0, y), (1, r1), (1, r2), (1, r3)]);
    assert!(st.iter().all(|s| s.error.is_none()), "{st:?}");
    assert_eq!(got, sent);
    assert_eq!(got_big, big);
    assert_eq!(got_sync, sent[..10]);
    assert!(
        counter(&a, "pml.dr.retransmissions") > 0,
        "the copy was retransmitted"
    );
}

/// A probe refused by a full BTL (`WouldBlock`) is held by the PML and sent when the BTL has
/// room. If the acknowledgements of the original fragments complete the message meanwhile, the
/// held probe has nothing left to send: it must be let go without leaving a local completion
/// that the watchdog waits for. (Over shared memory, the tail of a large message fills the
/// ring exactly like this, and the watchdog then failed the only path to a live peer.)
#[test]
fn a_refused_probe_of_a_completed_message_leaves_no_watchdog_behind() {
    let faults = Faults {
        drop: 0.0,
        dup: 0.0,
        corrupt: 0.0,
        reorder: false,
    };
    let rails = [Rail::new(5, faults)];
    let watchdog = Duration::from_millis(150);
    let cfg = DrConfig { watchdog, ..cfg() };
    let (mut a, mut b) = pair(&rails, &[2048], cfg);
    // Warm up (connection and RTT) with a word each way.
    let mut word = [0u8; 8];
    let reqs = [
        (1, irecv(&mut b, &mut word, Source::Rank(0), TagSel::Tag(2))),
        (0, isend(&mut a, &[7u8; 8], 1, 2, SendMode::Standard)),
    ];
    wait_all(&mut a, &mut b, &reqs);

    // An eager message of four fragments fills a ring of four packets.
    let msg = pattern(4 * 1900, 1);
    let mut got = vec![0u8; msg.len()];
    rails[0].capacity.store(4, Ordering::Relaxed);
    let send = isend(&mut a, &msg, 1, 1, SendMode::Standard);
    // The receiver stays away past the probe timeout: the sender's probe finds the ring full.
    let away = Instant::now() + Duration::from_millis(100);
    while Instant::now() < away {
        a.progress();
    }
    assert!(
        counter(&a, "pml.dr.frags_sent") >= 4,
        "the message did not go out"
    );
    // The receiver drains and acknowledges: the message completes while the probe is held.
    let reqs = [
        (1, irecv(&mut b, &mut got, Source::Rank(0), TagSel::Tag(1))),
        (0, send),
    ];
    for st in wait_all(&mut a, &mut b, &reqs) {
        assert!(st.error.is_none(), "{st:?}");
    }
    assert!(got == msg, "payload differs");
    rails[0].capacity.store(0, Ordering::Relaxed);
    // Keep the pair talking, a small exchange at a time, for several watchdog periods.
    let until = Instant::now() + watchdog * 4;
    while Instant::now() < until {
        let reqs = [
            (1, irecv(&mut b, &mut word, Source::Rank(0), TagSel::Tag(2))),
            (0, isend(&mut a, &[7u8; 8], 1, 2, SendMode::Standard)),
        ];
        for st in wait_all(&mut a, &mut b, &reqs) {
            assert!(st.error.is_none(), "a live peer was failed: {st:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(counter(&a, "pml.dr.watchdog_expirations"), 0);
    assert_eq!(counter(&b, "pml.dr.watchdog_expirations"), 0);
}

/// A released request's id stays unknown once a later request took its place in the table: it
/// never answers for that request (test and cancel both refuse it).
#[test]
fn a_released_id_never_names_the_request_that_reuses_its_slot() {
    let rails = [Rail::new(
        23,
        Faults {
            drop: 0.0,
            dup: 0.0,
            corrupt: 0.0,
            reorder: false,
        },
    )];
    let (mut a, mut b) = pair(&rails, &[2048], cfg());
    let s = isend(&mut a, b"first", 1, 4, SendMode::Standard);
    let st = a
        .test(s)
        .unwrap()
        .expect("a small standard send completes at once");
    assert!(st.error.is_none(), "{st:?}");
    assert!(matches!(a.test(s), Err(PmlError::UnknownRequest(id)) if id == s));
    // A pending receive now holds the slot the send released.
    let mut buf = [0u8; 6];
    let r = irecv(&mut a, &mut buf, Source::Rank(1), TagSel::Tag(9));
    assert_ne!(r, s);
    assert!(matches!(a.test(s), Err(PmlError::UnknownRequest(id)) if id == s));
    assert!(matches!(a.cancel(s), Err(PmlError::UnknownRequest(id)) if id == s));
    assert!(a.test(r).unwrap().is_none(), "the receive is still pending");
    let s2 = isend(&mut b, b"second", 0, 9, SendMode::Standard);
    let st = wait_all(&mut a, &mut b, &[(1, s2), (0, r)]);
    assert!(st.iter().all(|s| s.error.is_none()), "{st:?}");
    assert_eq!(&buf, b"second");
    for bogus in [RequestId(0), RequestId(u64::MAX)] {
        assert!(matches!(a.test(bogus), Err(PmlError::UnknownRequest(id)) if id == bogus));
    }
}

/// Cancel withdraws a receive that has not matched (it completes at once with `Cancelled`, and
/// a later message goes to a later receive); a receive that matched, and sends (eager and
/// rendezvous), are not cancelled and complete normally.
#[test]
fn cancel_withdraws_only_unmatched_receives() {
    let rails = [Rail::new(
        31,
        Faults {
            drop: 0.0,
            dup: 0.0,
            corrupt: 0.0,
            reorder: false,
        },
    )];
    let (mut a, mut b) = pair(&rails, &[2048], cfg());
    let mut never = [0u8; 4];
    let r = irecv(&mut b, &mut never, Source::Any, TagSel::Tag(1));
    assert!(b.cancel(r).unwrap(), "an unmatched receive is cancelled");
    let st = b
        .test(r)
        .unwrap()
        .expect("a cancelled receive completes at once");
    assert_eq!(st.error(), Some(&StatusError::Cancelled));
    assert!(
        !b.cancel(r).is_ok_and(|c| c),
        "a released id cannot be cancelled"
    );

    // The next tag-1 message is not swallowed by the cancelled receive.
    let mut next = [0u8; 4];
    let s = isend(&mut a, b"next", 1, 1, SendMode::Standard);
    assert!(
        !a.cancel(s).unwrap_or(false),
        "an eager send is not cancelled"
    );
    let r2 = irecv(&mut b, &mut next, Source::Rank(0), TagSel::Tag(1));
    let st = wait_all(&mut a, &mut b, &[(0, s), (1, r2)]);
    assert!(st.iter().all(|s| s.error.is_none()), "{st:?}");
    assert_eq!((&next, never), (b"next", [0; 4]));

    // A rendezvous send the receiver has not matched yet is not cancelled either.
    let big = pattern(50_000, 3);
    let s = isend(&mut a, &big, 1, 2, SendMode::Standard);
    a.progress();
    assert!(!a.cancel(s).unwrap(), "a rendezvous send is not cancelled");
    // Matched on arrival (probed first): the receive is no longer cancellable.
    let deadline = Instant::now() + Duration::from_secs(120);
    while b
        .iprobe(3, Source::Rank(0), TagSel::Tag(2))
        .unwrap()
        .is_none()
    {
        assert!(Instant::now() < deadline, "the rendezvous never arrived");
        a.progress();
        b.progress();
    }
    let mut got = vec![0u8; big.len()];
    let r = irecv(&mut b, &mut got, Source::Rank(0), TagSel::Tag(2));
    assert!(!b.cancel(r).unwrap(), "a matched receive is not cancelled");
    let st = wait_all(&mut a, &mut b, &[(0, s), (1, r)]);
    assert!(st.iter().all(|s| s.error.is_none()), "{st:?}");
    assert_eq!(got, big);
}

/// A ping-pong step over a BTL that needs acks: the reply carries the ack of the ping in front
/// of its data. The progress pass that delivers the reply leaves that ack to the next pass (the
/// application sees its data without waiting for the ack's bookkeeping), which handles it.
#[test]
fn a_bundled_ack_is_handled_by_the_pass_after_the_one_delivering_its_data() {
    let clean = Faults {
        drop: 0.0,
        dup: 0.0,
        corrupt: 0.0,
        reorder: false,
    };
    // Long enough that the ack of the ping is still held when the reply leaves, however slow
    // this thread is (this test asserts no duration).
    let slow = DrConfig {
        ack_hold: Duration::from_secs(2),
        rto_min: Duration::from_secs(5),
        rto_initial: Duration::from_secs(5),
        rto_max: Duration::from_secs(10),
        ..cfg()
    };
    let (mut a, mut b) = pair(&[Rail::new(21, clean)], &[4096], slow);
    let ping = pattern(8, 1);
    let pong = pattern(8, 2);
    let mut got_ping = vec![0u8; 8];
    let mut got_pong = vec![0u8; 8];
    let r = irecv(&mut b, &mut got_ping, Source::Rank(0), TagSel::Tag(1));
    let s = isend(&mut a, &ping, 1, 1, SendMode::Standard);
    wait_all(&mut a, &mut b, &[(0, s), (1, r)]);
    let r = irecv(&mut a, &mut got_pong, Source::Rank(1), TagSel::Tag(2));
    let s = isend(&mut b, &pong, 0, 2, SendMode::Standard);
    assert_eq!(
        counter(&b, "pml.dr.acks_bundled"),
        1,
        "the reply carries the ack"
    );
    assert_eq!(counter(&a, "pml.dr.acks_received"), 0);
    a.progress();
    assert!(
        a.test(r).unwrap().is_some(),
        "the reply is delivered by one pass"
    );
    assert_eq!(
        counter(&a, "pml.dr.acks_received"),
        0,
        "the ack it carried waits for the next pass"
    );
    a.progress();
    assert_eq!(counter(&a, "pml.dr.acks_received"), 1);
    wait_all(&mut a, &mut b, &[(1, s)]);
    assert_eq!(got_ping, ping);
    assert_eq!(got_pong, pong);
}
