//! The PML glue in one process: two `Sw` instances (ranks 0 and 1) over an in-memory BTL that
//! drops, duplicates, reorders and corrupts fragments (and reaches the rank itself too). The PML
//! reads the real clock, so loops are bounded by a deadline; nothing asserts a duration.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmca_framework::bml::Bml;
use rmca_framework::btl::{
    Btl, BtlAttributes, BtlError, BtlEvents, BtlFlags, BtlTag, ModexRead, SendError, SendHint,
};
use rmca_framework::buffer::UserBuf;
use rmca_framework::modex::LocalModex;
use rmca_framework::pml::{
    Pml, RecvArgs, RequestId, SendArgs, SendMode, Source, Status, StatusError, TagSel,
};
use rmca_framework::rank::{ProcInfo, Rank};
use rmca_framework::rng::SplitMix64;
use rmca_pml_sw::pml::Sw;
use rmca_pml_sw::Config;

/// Frames in flight to each rank, and the fault dice.
struct Wire {
    inbound: [VecDeque<(Rank, BtlTag, Vec<u8>)>; 2],
    rng: SplitMix64,
    faults: f64,
}

struct LossyBtl {
    me: Rank,
    attrs: BtlAttributes,
    wire: Arc<Mutex<Wire>>,
}

impl Btl for LossyBtl {
    fn component_name(&self) -> &str {
        "lossy"
    }
    fn attributes(&self) -> &BtlAttributes {
        &self.attrs
    }
    fn add_procs(&mut self, procs: &[ProcInfo], _: &dyn ModexRead) -> Result<Vec<bool>, BtlError> {
        Ok(vec![true; procs.len()])
    }
    fn send(
        &mut self,
        peer: Rank,
        tag: BtlTag,
        header: &[u8],
        payload: &[u8],
        _: SendHint,
    ) -> Result<(), SendError> {
        let mut w = self.wire.lock().unwrap();
        let p = w.faults;
        if w.rng.chance(p) {
            return Ok(()); // lost
        }
        let mut f = [header, payload].concat();
        if w.rng.chance(p / 4.0) {
            let bit = w.rng.below(8 * f.len() as u64) as usize;
            f[bit / 8] ^= 1 << (bit % 8);
        }
        let q = &mut w.inbound[peer as usize];
        q.push_back((self.me, tag, f.clone()));
        if w.rng.chance(p / 2.0) {
            w.inbound[peer as usize].push_back((self.me, tag, f)); // duplicated
        }
        let n = w.inbound[peer as usize].len();
        if n > 1 && w.rng.chance(p) {
            w.inbound[peer as usize].swap(n - 1, n - 2); // reordered
        }
        Ok(())
    }
    fn progress(&mut self, events: &mut dyn BtlEvents) -> usize {
        let batch: Vec<_> = self.wire.lock().unwrap().inbound[self.me as usize]
            .drain(..)
            .collect();
        for (from, tag, data) in &batch {
            events.recv(*from, *tag, data);
        }
        batch.len()
    }
}

/// Ranks 0 and 1 over one lossy wire (`faults`: loss probability; duplication, reordering and
/// corruption follow it) with fragments of at most `max_send` bytes.
fn pair(faults: f64, max_send: usize) -> [Sw; 2] {
    let wire = Arc::new(Mutex::new(Wire {
        inbound: Default::default(),
        rng: SplitMix64::new(3),
        faults,
    }));
    let cfg = Config {
        rto: Duration::from_millis(2),
        ..Config::default()
    };
    [0, 1].map(|me: Rank| {
        let attrs = BtlAttributes {
            max_send_size: max_send,
            flags: BtlFlags::SEND | BtlFlags::NEED_ACK | BtlFlags::NEED_CSUM,
            ..BtlAttributes::default()
        };
        let btl: Box<dyn Btl> = Box::new(LossyBtl {
            me,
            attrs,
            wire: wire.clone(),
        });
        let procs: Vec<ProcInfo> = (0..2)
            .map(|r| ProcInfo {
                rank: r,
                node: 0,
                is_self: r == me,
            })
            .collect();
        let bml = Bml::build(vec![btl], &procs, &LocalModex::new()).unwrap();
        Sw::new(bml, cfg.clone()).unwrap()
    })
}

// SAFETY (lend, lend_mut): every buffer lent stays alive and untouched until the requests
// using it completed (each test waits for all of them before its buffers go).
fn lend(v: &[u8]) -> UserBuf {
    unsafe { UserBuf::from_slice(v) }
}
fn lend_mut(v: &mut [u8]) -> UserBuf {
    unsafe { UserBuf::from_mut_slice(v) }
}

fn send(sw: &mut Sw, buf: &[u8], dest: Rank, tag: i32, mode: SendMode) -> RequestId {
    sw.isend(SendArgs {
        buf: lend(buf),
        dest,
        tag,
        context: 0,
        mode,
        pattern: Default::default(),
    })
    .unwrap()
}

fn recv(sw: &mut Sw, buf: &mut [u8], source: Source, tag: TagSel) -> RequestId {
    sw.irecv(RecvArgs {
        buf: lend_mut(buf),
        source,
        tag,
        context: 0,
        pattern: Default::default(),
    })
    .unwrap()
}

/// Progress both ranks until every `(rank, request)` completed; their statuses in order.
fn wait(sw: &mut [Sw; 2], reqs: &[(usize, RequestId)]) -> Vec<Status> {
    let mut out: Vec<Option<Status>> = vec![None; reqs.len()];
    let deadline = Instant::now() + Duration::from_secs(60);
    while out.iter().any(Option::is_none) {
        assert!(
            Instant::now() < deadline,
            "requests never completed: {out:?}"
        );
        for s in sw.iter_mut() {
            s.progress();
        }
        for (i, &(rank, id)) in reqs.iter().enumerate() {
            if out[i].is_none() {
                out[i] = sw[rank].test(id).unwrap();
            }
        }
    }
    out.into_iter().map(Option::unwrap).collect()
}

fn bytes(seed: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

#[test]
fn messages_of_every_shape_arrive_once_intact_over_a_faulty_wire() {
    let mut sw = pair(0.1, 300);
    // Empty, one fragment, many fragments, synchronous, to itself.
    let sizes = [0usize, 1, 200, 5000, 20_000];
    let msgs: Vec<Vec<u8>> = sizes.iter().map(|&n| bytes(n as u8, n)).collect();
    let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0; n]).collect();
    let mut reqs = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        let mode = if i % 2 == 0 {
            SendMode::Standard
        } else {
            SendMode::Synchronous
        };
        reqs.push((0, send(&mut sw[0], m, 1, i as i32, mode)));
    }
    let self_msg = bytes(9, 700);
    let mut self_buf = vec![0; 700];
    reqs.push((0, send(&mut sw[0], &self_msg, 0, 99, SendMode::Standard)));
    // Posted late (the messages arrive unexpected), in reverse tag order: matching by tag.
    wait(&mut sw, &[]);
    for (i, b) in bufs.iter_mut().enumerate().rev() {
        reqs.push((
            1,
            recv(&mut sw[1], b, Source::Rank(0), TagSel::Tag(i as i32)),
        ));
    }
    reqs.push((0, recv(&mut sw[0], &mut self_buf, Source::Any, TagSel::Any)));
    let statuses = wait(&mut sw, &reqs);
    assert!(statuses.iter().all(|s| s.error.is_none()), "{statuses:?}");
    assert_eq!(bufs, msgs);
    assert_eq!(self_buf, self_msg);
    let counters: std::collections::HashMap<String, u64> = sw
        .iter()
        .flat_map(|s| s.counters())
        .fold(Default::default(), |mut m, (k, v)| {
            *m.entry(k).or_default() += v;
            m
        });
    for c in [
        "pml.sw.retransmissions",
        "pml.sw.duplicates",
        "pml.sw.crc_failures",
    ] {
        assert!(counters[c] > 0, "{c} = 0: {counters:?}");
    }
}

#[test]
fn truncation_probes_and_cancel() {
    let mut sw = pair(0.05, 100);
    let long = bytes(1, 1000);
    let s = send(&mut sw[0], &long, 1, 7, SendMode::Standard);
    let mut short = vec![0u8; 10];
    let deadline = Instant::now() + Duration::from_secs(60);
    // A probe sees the whole message's length before it is received.
    let probed = loop {
        assert!(Instant::now() < deadline, "probe never saw the message");
        sw[0].progress();
        if let Some(st) = sw[1].iprobe(0, Source::Any, TagSel::Tag(7)).unwrap() {
            break st;
        }
    };
    assert_eq!((probed.source, probed.tag, probed.len), (0, 7, 1000));
    let r = recv(&mut sw[1], &mut short, Source::Rank(0), TagSel::Any);
    let st = wait(&mut sw, &[(0, s), (1, r)]);
    assert_eq!(
        st[1].error(),
        Some(&StatusError::Truncated {
            message_len: 1000,
            received: 10
        })
    );
    assert_eq!(short, long[..10]);
    // A receive nobody sends to is cancelled; a matched probe then takes the next message.
    let mut none = [0u8; 4];
    let c = recv(&mut sw[1], &mut none, Source::Rank(0), TagSel::Tag(1));
    assert!(sw[1].cancel(c).unwrap());
    assert_eq!(
        wait(&mut sw, &[(1, c)])[0].error(),
        Some(&StatusError::Cancelled)
    );
    let m = bytes(2, 50);
    let s = send(&mut sw[0], &m, 1, 3, SendMode::Synchronous);
    let (id, st) = loop {
        assert!(Instant::now() < deadline, "improbe never saw the message");
        sw[0].progress();
        if let Some(x) = sw[1].improbe(0, Source::Any, TagSel::Any).unwrap() {
            break x;
        }
    };
    assert_eq!((st.tag, st.len), (3, 50));
    assert!(sw[1].iprobe(0, Source::Any, TagSel::Any).unwrap().is_none());
    let mut got = vec![0u8; 50];
    let r = sw[1]
        .imrecv(id, lend_mut(&mut got), Default::default())
        .unwrap();
    wait(&mut sw, &[(0, s), (1, r)]);
    assert_eq!(got, m);
    assert!(sw[1]
        .imrecv(id, lend_mut(&mut got), Default::default())
        .is_err());
}

#[test]
fn bad_ranks_and_tags_are_refused() {
    let mut sw = pair(0.0, 100);
    let e = sw[0]
        .isend(SendArgs {
            buf: UserBuf::empty(),
            dest: 2,
            tag: 0,
            context: 0,
            mode: SendMode::Standard,
            pattern: Default::default(),
        })
        .unwrap_err();
    assert!(e.to_string().contains("rank 2 is out of range"), "{e}");
    let mut b = [0u8; 1];
    let e = sw[0]
        .irecv(RecvArgs {
            buf: lend_mut(&mut b),
            source: Source::Rank(0),
            tag: TagSel::Tag(-3),
            context: 0,
            pattern: Default::default(),
        })
        .unwrap_err();
    assert!(e.to_string().contains("tag -3 is invalid"), "{e}");
}
