//! In-process tests of the module: two or three "ranks" in one process, each with its own
//! segment, talking through the real /dev/shm files and real CMA (to our own pid).

use std::path::Path;

use rmca_framework::btl::{
    Btl, BtlComponent, BtlError, BtlEvents, BtlFlags, CompletionToken, MemAccess, Placement,
    RemoteSegment, SendError, SendHint,
};
use rmca_framework::buffer::UserBuf;
use rmca_framework::component::{Component, InitContext};
use rmca_framework::job::JobInfo;
use rmca_framework::memory::MemoryAccounting;
use rmca_framework::modex::{LocalModex, ModexWrite};
use rmca_framework::params::{ParamRegistrar, ParamStore};
use rmca_framework::rank::Rank;

use crate::card::CardRepr;
use crate::{ring, tune, ShmBtl, ShmConfig, MODEX_KEY, SHM};

// SAFETY (lend, lend_mut): the memory lent stays borrowed here until the operation using it
// has completed (every caller waits for its operations before its buffers go).
#[allow(unsafe_code)]
fn lend(v: &[u8]) -> UserBuf {
    unsafe { UserBuf::from_slice(v) }
}
#[allow(unsafe_code)]
fn lend_mut(v: &mut [u8]) -> UserBuf {
    unsafe { UserBuf::from_mut_slice(v) }
}

pub(crate) fn params(settings: &[(&str, &str)]) -> ParamStore {
    let mut specs = Vec::new();
    SHM.register_params(&mut ParamRegistrar::new("btl", "shm", &mut specs));
    ParamStore::with_settings(specs, settings).unwrap()
}

fn job(rank: Rank, node_of: &[u32], id: &str) -> JobInfo {
    JobInfo {
        rank,
        size: node_of.len() as u32,
        job_id: id.to_owned(),
        secret: id.as_bytes().to_vec(),
        node_of: node_of.to_vec(),
        node_names: vec!["a".into(), "b".into()],
    }
}

fn job_id(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("ut{}x{nanos}{tag}", std::process::id())
}

fn init(
    job: &JobInfo,
    modex: &LocalModex,
    mem: &MemoryAccounting,
    settings: &[(&str, &str)],
) -> Result<Vec<Box<dyn Btl>>, BtlError> {
    let p = params(settings);
    let mut w = modex.writer(job.rank);
    let mut ctx = InitContext::new(job, &p, mem, &mut w as &mut dyn ModexWrite);
    SHM.init(&mut ctx)
}

fn leftover_files(prefix: &str) -> Vec<String> {
    std::fs::read_dir(Path::new(crate::sys::SHM_DIR))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(prefix))
        .collect()
}

#[derive(Default)]
struct Sink {
    frags: Vec<(Rank, u8, Vec<u8>)>,
    rdma: Vec<(CompletionToken, Result<(), SendError>)>,
    failed: Vec<(Rank, String)>,
    /// Answer "no more" to `wants_more` once this many fragments arrived.
    enough: Option<usize>,
}

impl BtlEvents for Sink {
    fn recv(&mut self, peer: Rank, tag: u8, data: &[u8]) {
        self.frags.push((peer, tag, data.to_vec()));
    }
    fn wants_more(&self) -> bool {
        self.enough.is_none_or(|n| self.frags.len() < n)
    }
    fn rdma_complete(&mut self, token: CompletionToken, result: Result<(), SendError>) {
        self.rdma.push((token, result));
    }
    fn peer_failed(&mut self, peer: Rank, reason: &str) {
        self.failed.push((peer, reason.to_owned()));
    }
}

/// Progress until a pass delivers nothing (a pass delivers at most one record per ring).
fn progress_until_idle(b: &mut dyn Btl, sink: &mut Sink) -> usize {
    let mut n = 0;
    loop {
        match b.progress(sink) {
            0 => return n,
            k => n += k,
        }
    }
}

/// Three ranks, two on node 0 and one on node 1.
fn pair(settings: &[(&str, &str)]) -> (String, ShmBtl, ShmBtl, MemoryAccounting) {
    let id = job_id("p");
    let nodes = [0, 0, 1];
    let modex = LocalModex::new();
    let mem = MemoryAccounting::new();
    let j0 = job(0, &nodes, &id);
    let j1 = job(1, &nodes, &id);
    let new = |j: &JobInfo| {
        let p = params(settings);
        let mut w = modex.writer(j.rank);
        let mut ctx = InitContext::new(j, &p, &mem, &mut w as &mut dyn ModexWrite);
        let cfg = ShmConfig::from_params(&p).unwrap();
        ShmBtl::new(&mut ctx, cfg).unwrap().unwrap()
    };
    let mut a = new(&j0);
    let mut b = new(&j1);
    assert!(
        init(&job(2, &nodes, &id), &modex, &mem, settings)
            .unwrap()
            .is_empty(),
        "alone on node 1"
    );
    assert_eq!(
        a.add_procs(&j0.procs(), &modex).unwrap(),
        vec![false, true, false]
    );
    assert_eq!(
        b.add_procs(&j1.procs(), &modex).unwrap(),
        vec![true, false, false]
    );
    (id, a, b, mem)
}

#[test]
fn send_receive_in_order_and_clean_up() {
    let (id, mut a, mut b, mem) = pair(&[]);
    let prefix = format!("rmca-{id}-");
    // Each peer mapped the other's segment: both names are gone already (early unlink).
    let mut sink = Sink::default();
    a.progress(&mut sink);
    b.progress(&mut sink);
    assert!(
        leftover_files(&prefix).is_empty(),
        "segments should be unlinked once every peer mapped them"
    );
    assert!(mem.counter("btl.shm").current() > 0);

    let max = a.attributes().max_send_size;
    let sizes = [0usize, 1, 8, 55, 56, 57, 200, 4096, max - 16];
    for (i, &n) in sizes.iter().enumerate() {
        let payload: Vec<u8> = (0..n).map(|k| (k + i) as u8).collect();
        a.send(
            1,
            0x40 + i as u8,
            &[i as u8; 16],
            &payload,
            SendHint::default(),
        )
        .unwrap();
    }
    let mut sink = Sink::default();
    while sink.frags.len() < sizes.len() {
        b.progress(&mut sink);
    }
    for (i, (peer, tag, data)) in sink.frags.iter().enumerate() {
        assert_eq!((*peer, *tag), (0, 0x40 + i as u8));
        assert_eq!(&data[..16], &[i as u8; 16]);
        assert!(data[16..]
            .iter()
            .enumerate()
            .all(|(k, &v)| v == (k + i) as u8));
    }
    assert_eq!(
        a.send(1, 1, &[], &vec![0; max + 1], SendHint::default()),
        Err(SendError::TooLarge { len: max + 1, max })
    );
    assert_eq!(
        a.send(2, 1, &[], &[1], SendHint::default()),
        Err(SendError::Unreachable(2))
    );
    assert_eq!(
        a.send(0, 1, &[], &[1], SendHint::default()),
        Err(SendError::Unreachable(0))
    );
    let counters: std::collections::HashMap<_, _> = b.counters().into_iter().collect();
    assert_eq!(counters["frags_recv"], sizes.len() as u64);
    a.finalize();
    b.finalize();
    assert_eq!(mem.counter("btl.shm").current(), 0);
    assert!(leftover_files(&prefix).is_empty());
}

/// Streamed fragments of every size arrive intact whether the sender writes them through its
/// cache or with non-temporal stores, and the module says which it uses.
#[test]
fn streamed_fragments_arrive_intact_with_either_stores() {
    for stores in ["cached", "nontemporal", "auto"] {
        let (_id, mut a, mut b, _mem) = pair(&[("btl_shm_stream_stores", stores)]);
        if stores != "auto" {
            assert_eq!(
                counter(&a, "nontemporal_at_start"),
                u64::from(stores == "nontemporal")
            );
        }
        let max = a.attributes().max_send_size;
        let sizes = [4096usize, 4097, 5000, 16 * 1024 + 48, 40_000, max - 16];
        for round in 0..3 {
            for (i, &n) in sizes.iter().enumerate() {
                let payload: Vec<u8> = (0..n).map(|k| (k * 3 + i + round) as u8).collect();
                a.send(1, 0x40, &[i as u8; 16], &payload, SendHint::default())
                    .unwrap();
                let mut sink = Sink::default();
                while sink.frags.is_empty() {
                    b.progress(&mut sink);
                }
                let (_, _, data) = &sink.frags[0];
                assert_eq!(&data[..16], &[i as u8; 16]);
                assert!(
                    data[16..]
                        .iter()
                        .enumerate()
                        .all(|(k, &v)| v == (k * 3 + i + round) as u8),
                    "{stores}: {n} bytes damaged"
                );
            }
        }
        let (records, nt) = (3 * sizes.len() as u64, counter(&a, "nontemporal_records"));
        match stores {
            "cached" => assert_eq!(nt, 0),
            "nontemporal" => assert_eq!(nt, records),
            _ => assert!(nt <= records),
        }
        a.finalize();
        b.finalize();
    }
}

#[test]
fn delivery_stops_when_the_pml_has_what_it_waits_for() {
    let (_id, mut a, mut b, _mem) = pair(&[]);
    for i in 0..5u8 {
        a.send(1, 0x40, &[i], &[], SendHint::default()).unwrap();
    }
    let mut sink = Sink {
        enough: Some(2),
        ..Sink::default()
    };
    assert_eq!(b.progress(&mut sink), 2, "stops after the second record");
    sink.enough = None;
    assert_eq!(b.progress(&mut sink), 3, "the rest on the next pass");
    let order: Vec<u8> = sink.frags.iter().map(|f| f.2[0]).collect();
    assert_eq!(order, [0, 1, 2, 3, 4]);
}

#[test]
fn full_ring_would_block_then_recovers() {
    let (_id, mut a, mut b, _mem) = pair(&[
        ("btl_shm_fifo_size", "8K"),
        ("btl_shm_max_send_size", "2K"),
        ("btl_shm_eager_limit", "1K"),
    ]);
    let mut sent = 0u32;
    loop {
        match a.send(
            1,
            0x41,
            &sent.to_le_bytes(),
            &[7; 1000],
            SendHint::default(),
        ) {
            Ok(()) => sent += 1,
            Err(SendError::WouldBlock) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(sent > 2);
    let mut sink = Sink::default();
    progress_until_idle(&mut b, &mut sink);
    assert_eq!(sink.frags.len(), sent as usize);
    a.send(
        1,
        0x41,
        &sent.to_le_bytes(),
        &[7; 1000],
        SendHint::default(),
    )
    .expect("space after the receiver progressed");
    progress_until_idle(&mut b, &mut sink);
    let seqs: Vec<u32> = sink
        .frags
        .iter()
        .map(|f| u32::from_le_bytes(f.2[..4].try_into().unwrap()))
        .collect();
    assert_eq!(seqs, (0..=sent).collect::<Vec<_>>());
    assert_eq!(
        a.counters()
            .iter()
            .find(|c| c.0 == "would_block")
            .unwrap()
            .1,
        1
    );
}

#[test]
fn cma_get_and_put_single_copy() {
    let (_id, mut a, mut b, _mem) = pair(&[]);
    if !a.attributes().flags.contains(BtlFlags::GET) {
        // The kernel forbids CMA here: the flag must be absent and get refused.
        let mut dst = vec![0u8; 8];
        let seg = RemoteSegment {
            addr: 0,
            len: 8,
            remote_key: vec![],
        };
        assert!(matches!(
            a.get(1, lend_mut(&mut dst), &seg, CompletionToken(1)),
            Err(SendError::Unsupported(_))
        ));
        return;
    }
    let (src, seg) = exposed(&mut b, 1_000_000, 0);
    let mut dst = vec![0u8; src.len()];
    a.get(1, lend_mut(&mut dst), &seg, CompletionToken(9))
        .unwrap();
    let mut sink = Sink::default();
    a.progress(&mut sink);
    assert_eq!(sink.rdma, vec![(CompletionToken(9), Ok(()))]);
    assert!(dst == src);

    let mut target = vec![0u8; 4096];
    let tseg = RemoteSegment {
        addr: target.as_mut_ptr() as u64,
        len: target.len(),
        remote_key: vec![],
    };
    let data = vec![0x5au8; 4096];
    a.put(1, lend(&data), &tseg, CompletionToken(10)).unwrap();
    a.progress(&mut sink);
    assert_eq!(sink.rdma[1], (CompletionToken(10), Ok(())));
    assert!(target.iter().all(|&v| v == 0x5a));

    // A bad remote address completes with an error, it does not crash.
    let bad = RemoteSegment {
        addr: 8,
        len: 64,
        remote_key: vec![],
    };
    let mut small = vec![0u8; 64];
    a.get(1, lend_mut(&mut small), &bad, CompletionToken(11))
        .unwrap();
    a.progress(&mut sink);
    assert!(matches!(
        sink.rdma[2],
        (CompletionToken(11), Err(SendError::PeerFailed { .. }))
    ));
    // A key naming another process is refused.
    let foreign = RemoteSegment {
        addr: src.as_ptr() as u64,
        len: 64,
        remote_key: vec![1, 0, 0, 0, 0, 0, 0, 0],
    };
    assert!(matches!(
        a.get(1, lend_mut(&mut small), &foreign, CompletionToken(12)),
        Err(SendError::PeerFailed { .. })
    ));
    assert_eq!(counter(&a, "cma_gets"), 1);
}

#[test]
fn attributes_follow_the_parameters() {
    let (_id, a, _b, _mem) = pair(&[]);
    let at = a.attributes();
    assert_eq!(
        at.exclusivity,
        rmca_framework::btl::exclusivity::SHARED_MEMORY
    );
    assert_eq!(
        (at.eager_limit, at.max_send_size, at.min_rdma_pipeline_size),
        (128 * 1024 + 64, 128 * 1024 + 64, 0)
    );
    assert_eq!(
        (at.rndv_eager_limit, at.pipeline_frag_size),
        (4 * 1024 + 64, 16 * 1024 + 64)
    );
    assert!(at.flags.contains(BtlFlags::SEND));
    let (_id, a, _b, _mem) = pair(&[
        ("btl_shm_single_copy_min", "2M"),
        ("btl_shm_eager_limit", "2K"),
        ("btl_shm_rndv_eager_limit", "1K"),
        ("btl_shm_pipeline_frag_size", "8K"),
    ]);
    let at = a.attributes();
    assert_eq!(
        (
            at.eager_limit,
            at.min_rdma_pipeline_size,
            at.rndv_eager_limit,
            at.pipeline_frag_size
        ),
        (2048, 2 << 20, 1024, 8192)
    );
    // A lowered max_send_size bounds the rendezvous sizes left at their defaults.
    let (_id, a, _b, _mem) = pair(&[
        ("btl_shm_max_send_size", "2K"),
        ("btl_shm_eager_limit", "1K"),
    ]);
    let at = a.attributes();
    assert_eq!((at.rndv_eager_limit, at.pipeline_frag_size), (2048, 2048));
}

#[test]
fn single_copy_off_means_no_get() {
    let (_id, mut a, _b, _mem) = pair(&[("btl_shm_single_copy", "off")]);
    assert!(!a
        .attributes()
        .flags
        .intersects(BtlFlags::GET | BtlFlags::PUT));
    let mut dst = vec![0u8; 8];
    let seg = RemoteSegment {
        addr: dst.as_ptr() as u64,
        len: 8,
        remote_key: vec![],
    };
    let dst2 = lend_mut(&mut dst);
    assert!(matches!(
        a.get(1, dst2, &seg, CompletionToken(1)),
        Err(SendError::Unsupported(_))
    ));
}

#[test]
fn bad_cards_are_errors_not_panics() {
    let id = job_id("c");
    let nodes = [0, 0];
    let mem = MemoryAccounting::new();
    let good_modex = LocalModex::new();
    let j0 = job(0, &nodes, &id);
    let _b = init(&job(1, &nodes, &id), &good_modex, &mem, &[]).unwrap();
    let good = rmca_framework::btl::ModexRead::get(&good_modex, 1, MODEX_KEY)
        .unwrap()
        .unwrap();
    let repr =
        CardRepr::parse(&crate::card::Card::new_checked(&good[..]).unwrap(), "rmca-").unwrap();
    let mut variants: Vec<Vec<u8>> = vec![
        vec![],
        good[..20].to_vec(),
        b"garbage garbage garbage garbage garbage garbage!!".to_vec(),
    ];
    for f in [
        |r: &mut CardRepr| r.name = "rmca-otherjob-shm-1".into(),
        |r: &mut CardRepr| r.rank = 0,
        |r: &mut CardRepr| r.nrings = 5,
        |r: &mut CardRepr| r.ring_lines = 1000,
        |r: &mut CardRepr| r.seg_len += 4096,
        |r: &mut CardRepr| r.pid = 1,
    ] {
        let mut r = repr.clone();
        f(&mut r);
        variants.push(r.emit());
    }
    let mut a = init(&j0, &LocalModex::new(), &mem, &[])
        .unwrap()
        .pop()
        .unwrap();
    for (i, bytes) in variants.into_iter().enumerate() {
        let modex = LocalModex::new();
        modex.writer(1).put(MODEX_KEY, &bytes).unwrap();
        let err = a
            .add_procs(&j0.procs(), &modex)
            .expect_err(&format!("variant {i} accepted"));
        assert!(
            matches!(err, BtlError::BadCard { rank: 1, .. }),
            "variant {i}: {err}"
        );
    }
    // A peer without a card is simply unreachable.
    assert_eq!(
        a.add_procs(&j0.procs(), &LocalModex::new()).unwrap(),
        vec![false, false]
    );
}

#[test]
fn bad_parameters_name_the_culprit() {
    let id = job_id("b");
    let mem = MemoryAccounting::new();
    for (settings, needle) in [
        (vec![("btl_shm_fifo_size", "12K")], "btl_shm_fifo_size"),
        (
            vec![
                ("btl_shm_fifo_size", "8K"),
                ("btl_shm_max_send_size", "32K"),
            ],
            "btl_shm_max_send_size",
        ),
        (vec![("btl_shm_eager_limit", "256K")], "btl_shm_eager_limit"),
    ] {
        let Err(err) = init(&job(0, &[0, 0], &id), &LocalModex::new(), &mem, &settings) else {
            panic!("{settings:?} accepted");
        };
        assert!(err.to_string().contains(needle), "{err}");
    }
    assert!(leftover_files(&format!("rmca-{id}-")).is_empty());
}

#[test]
fn corrupt_ring_reports_peer_failure() {
    let (_id, mut a, mut b, _mem) = pair(&[]);
    a.send(1, 0x40, b"first", &[], SendHint::default()).unwrap();
    a.send(1, 0x40, b"second", &[], SendHint::default())
        .unwrap();
    let mut sink = Sink::default();
    // Damage the second record (slot 1 of b's only ring) as a misbehaving peer could.
    b.scribble_inbox_for_test(0, crate::ring::SLOT, &[0xff; 8]);
    progress_until_idle(&mut b, &mut sink);
    assert_eq!(sink.frags.len(), 1, "the intact record is delivered");
    assert_eq!(sink.failed.len(), 1);
    assert_eq!(sink.failed[0].0, 0);
    a.send(1, 0x40, b"third", &[], SendHint::default()).unwrap();
    progress_until_idle(&mut b, &mut sink);
    assert_eq!(sink.frags.len(), 1, "an abandoned ring is not read again");
    assert_eq!(
        b.counters()
            .iter()
            .find(|c| c.0 == "corrupt_rings")
            .unwrap()
            .1,
        1
    );
}

/// Four ranks on one node: every ordered pair uses its own ring (ring indices skip the owner).
#[test]
fn four_local_ranks_all_pairs() {
    let id = job_id("q");
    let nodes = [0, 0, 0, 0];
    let modex = LocalModex::new();
    let mem = MemoryAccounting::new();
    let jobs: Vec<JobInfo> = (0..4).map(|r| job(r, &nodes, &id)).collect();
    let mut btls: Vec<Box<dyn Btl>> = jobs
        .iter()
        .map(|j| init(j, &modex, &mem, &[]).unwrap().pop().unwrap())
        .collect();
    for (j, b) in jobs.iter().zip(btls.iter_mut()) {
        let reach = b.add_procs(&j.procs(), &modex).unwrap();
        assert_eq!(reach, (0..4).map(|r| r != j.rank).collect::<Vec<_>>());
    }
    for round in 0..3u8 {
        for src in 0..4u32 {
            for dst in (0..4u32).filter(|&d| d != src) {
                let msg = [src as u8, dst as u8, round];
                btls[src as usize]
                    .send(dst, 0x40, &msg, &[], SendHint::default())
                    .unwrap();
            }
        }
    }
    for (dst, b) in btls.iter_mut().enumerate() {
        let mut sink = Sink::default();
        assert_eq!(
            b.progress(&mut sink),
            9,
            "rank {dst}: every waiting record in one pass"
        );
        assert_eq!(sink.frags.len(), 9, "rank {dst}");
        for src in (0..4u32).filter(|&s| s as usize != dst) {
            let from: Vec<&Vec<u8>> = sink
                .frags
                .iter()
                .filter(|f| f.0 == src)
                .map(|f| &f.2)
                .collect();
            let expect: Vec<Vec<u8>> = (0..3)
                .map(|round| vec![src as u8, dst as u8, round])
                .collect();
            assert_eq!(
                from,
                expect.iter().collect::<Vec<_>>(),
                "rank {dst} from {src}"
            );
        }
    }
    assert!(leftover_files(&format!("rmca-{id}-")).is_empty());
    assert_eq!(
        mem.counter("btl.shm").current(),
        4 * (8192 + 3 * 512 * 1024),
        "a header (heads and cooperative-copy slots) and three rings each"
    );
    for b in &mut btls {
        b.finalize();
    }
    assert_eq!(mem.counter("btl.shm").current(), 0);
}

#[test]
fn single_copy_is_offered_for_every_rendezvous_by_default() {
    // Through the component's init (as the runtime does): unset, CMA is offered for every
    // rendezvous (the BTL's min_rdma_pipeline_size is 0; ob1's receiver chooses by
    // measurement); a value the user sets stands.
    let id = job_id("sc");
    let nodes = [0, 0];
    let modex = LocalModex::new();
    let mem = MemoryAccounting::new();
    let j = job(0, &nodes, &id);
    let default = init(&j, &modex, &mem, &[]).unwrap();
    assert_eq!(default[0].attributes().min_rdma_pipeline_size, 0);
    let id = job_id("sd");
    let j = job(0, &nodes, &id);
    let set = init(
        &j,
        &LocalModex::new(),
        &mem,
        &[("btl_shm_single_copy_min", "2M")],
    )
    .unwrap();
    assert_eq!(set[0].attributes().min_rdma_pipeline_size, 2 << 20);
}

fn counter(b: &ShmBtl, name: &str) -> u64 {
    b.counters()
        .into_iter()
        .find(|c| c.0 == name)
        .unwrap_or_else(|| panic!("no counter {name}"))
        .1
}

/// `len` bytes of a recognisable pattern, registered with `owner` for remote reads.
fn exposed(owner: &mut ShmBtl, len: usize, seed: u32) -> (Vec<u8>, RemoteSegment) {
    let src: Vec<u8> = (0..len as u32).map(|i| (i * 7 + seed) as u8).collect();
    let reg = owner
        .register_mem(
            lend(&src),
            MemAccess {
                remote_read: true,
                remote_write: false,
            },
        )
        .unwrap();
    let seg = RemoteSegment {
        addr: src.as_ptr() as u64,
        len,
        remote_key: reg.remote_key,
    };
    (src, seg)
}

/// A pair whose processes may use CMA with each other, or `None` where the kernel forbids it
/// (`cma_get_and_put_single_copy` checks that case).
fn cma_pair(settings: &[(&str, &str)]) -> Option<(String, ShmBtl, ShmBtl, MemoryAccounting)> {
    let pair = pair(settings);
    pair.1
        .attributes()
        .flags
        .contains(BtlFlags::GET)
        .then_some(pair)
}

/// Start `a`'s get of `seg` (from rank 1) into a new zeroed buffer, returned: moving the `Vec`
/// leaves its bytes where the get writes them.
fn start_get(a: &mut ShmBtl, seg: &RemoteSegment, token: u64) -> Vec<u8> {
    let mut dst = vec![0u8; seg.len];
    a.get(1, lend_mut(&mut dst), seg, CompletionToken(token))
        .unwrap();
    dst
}

#[test]
fn a_large_get_is_copied_by_both_processes() {
    let Some((_id, mut a, mut b, _mem)) = cma_pair(&[]) else {
        return;
    };
    let (src, seg) = exposed(&mut b, 1 << 20, 1);
    let dst = start_get(&mut a, &seg, 3);
    assert_eq!(counter(&a, "shared_gets"), 1);
    // The receiver copied its half at once; the sender, polling, takes pieces of the rest.
    let mut sender_sink = Sink::default();
    b.progress(&mut sender_sink);
    assert!(
        sender_sink.frags.is_empty(),
        "the help message is not the PML's"
    );
    assert_eq!(counter(&b, "shared_bytes_helped"), 512 << 10);
    let mut sink = Sink::default();
    a.progress(&mut sink);
    assert_eq!(sink.rdma, vec![(CompletionToken(3), Ok(()))]);
    assert!(dst == src);
    assert_eq!(counter(&a, "cma_get_bytes"), 1 << 20);
}

#[test]
fn a_shared_get_completes_when_the_sender_never_polls() {
    let Some((_id, mut a, mut b, _mem)) = cma_pair(&[]) else {
        return;
    };
    let (src, seg) = exposed(&mut b, 3 << 20, 2);
    let mut dst = start_get(&mut a, &seg, 4);
    let mut sink = Sink::default();
    a.progress(&mut sink);
    assert_eq!(sink.rdma, vec![(CompletionToken(4), Ok(()))]);
    assert!(dst == src);
    // The help message read late finds its transfer finished: nothing is written any more.
    dst.fill(0xee);
    b.progress(&mut Sink::default());
    assert_eq!(counter(&b, "shared_bytes_helped"), 0);
    assert!(
        dst.iter().all(|&v| v == 0xee),
        "a late helper wrote into a completed receive"
    );
}

#[test]
fn a_helper_that_dies_mid_copy_fails_the_get_instead_of_hanging() {
    let Some((_id, mut a, mut b, _mem)) = cma_pair(&[]) else {
        return;
    };
    let (_src, seg) = exposed(&mut b, 1 << 20, 5);
    let _dst = start_get(&mut a, &seg, 8);
    assert_eq!(b.stall_helping_for_test(&mut Sink::default()), 1);
    // While the helper lives, its piece is awaited: the receive is not complete without it.
    let mut sink = Sink::default();
    for _ in 0..3 * 4096 {
        a.progress(&mut sink);
    }
    assert!(
        sink.rdma.is_empty(),
        "completed with a piece still being copied"
    );
    // The helper goes away: the get fails with the peer named, instead of waiting forever.
    a.del_procs(&[1]);
    for _ in 0..4096 {
        if a.progress(&mut sink) > 0 {
            break;
        }
    }
    assert!(
        matches!(
            &sink.rdma[..],
            [(
                CompletionToken(8),
                Err(SendError::PeerFailed { peer: 1, .. })
            )]
        ),
        "{:?}",
        sink.rdma
    );
}

#[test]
fn gets_beyond_the_slots_are_copied_by_the_receiver_alone() {
    let Some((_id, mut a, mut b, _mem)) = cma_pair(&[]) else {
        return;
    };
    let n = crate::coop::SLOTS + 3;
    let (src, seg) = exposed(&mut b, 256 << 10, 3);
    let dsts: Vec<Vec<u8>> = (0..n)
        .map(|i| start_get(&mut a, &seg, 100 + i as u64))
        .collect();
    assert_eq!(counter(&a, "shared_gets"), crate::coop::SLOTS as u64);
    let mut sink = Sink::default();
    b.progress(&mut Sink::default());
    a.progress(&mut sink);
    let mut tokens: Vec<u64> = sink
        .rdma
        .iter()
        .map(|(t, r)| {
            assert!(r.is_ok());
            t.0
        })
        .collect();
    tokens.sort_unstable();
    assert_eq!(tokens, (100..100 + n as u64).collect::<Vec<_>>());
    assert!(dsts.iter().all(|d| *d == src));
    // Every slot is free again: the next round shares them all.
    let again: Vec<Vec<u8>> = (0..n).map(|i| start_get(&mut a, &seg, i as u64)).collect();
    assert_eq!(counter(&a, "shared_gets"), 2 * crate::coop::SLOTS as u64);
    a.progress(&mut Sink::default());
    assert!(again.iter().all(|d| *d == src));
}

#[test]
fn a_shared_get_from_a_bad_address_fails_cleanly() {
    let Some((_id, mut a, mut b, _mem)) = cma_pair(&[]) else {
        return;
    };
    let bad = RemoteSegment {
        addr: 4096,
        len: 1 << 20,
        remote_key: vec![],
    };
    let _dst = start_get(&mut a, &bad, 5);
    b.progress(&mut Sink::default());
    let mut sink = Sink::default();
    a.progress(&mut sink);
    assert!(
        matches!(
            &sink.rdma[..],
            [(CompletionToken(5), Err(SendError::PeerFailed { .. }))]
        ),
        "{:?}",
        sink.rdma
    );
    assert_eq!(counter(&b, "shared_bytes_helped"), 0);
}

#[test]
fn the_receiver_copies_alone_below_the_threshold_or_when_disabled() {
    for (settings, len, shared) in [
        (&[][..], (64 << 10) - 1, 0),
        (&[][..], 64 << 10, 1),
        (&[("btl_shm_shared_copy_min", "0")][..], 4 << 20, 0),
    ] {
        let Some((_id, mut a, mut b, _mem)) = cma_pair(settings) else {
            return;
        };
        let (src, seg) = exposed(&mut b, len, 4);
        let dst = start_get(&mut a, &seg, 6);
        b.progress(&mut Sink::default());
        a.progress(&mut Sink::default());
        assert!(dst == src);
        assert_eq!(counter(&a, "shared_gets"), shared, "{settings:?} {len}");
    }
}

#[test]
fn foreign_control_records_are_dropped_and_counted() {
    let (_id, mut a, mut b, _mem) = pair(&[]);
    // An unknown btl-internal tag, a help message of the wrong size, one naming a slot that
    // does not exist, and one for a transfer that never was: none reaches the PML, none copies.
    b.send(0, 0xF7, &[1, 2, 3], &[], SendHint::default())
        .unwrap();
    b.send(0, 0xF0, &[0; 5], &[], SendHint::default()).unwrap();
    b.send(
        0,
        0xF0,
        &[200, 0, 0, 0, 1, 0, 0, 0],
        &[],
        SendHint::default(),
    )
    .unwrap();
    b.send(0, 0xF0, &[2, 0, 0, 0, 9, 0, 0, 0], &[], SendHint::default())
        .unwrap();
    b.send(0, 0x40, b"pml", &[], SendHint::default()).unwrap();
    let mut sink = Sink::default();
    progress_until_idle(&mut a, &mut sink);
    assert_eq!(sink.frags, vec![(1, 0x40, b"pml".to_vec())]);
    assert!(
        sink.failed.is_empty(),
        "a bad control record is not a dead peer"
    );
    assert_eq!(counter(&a, "bad_control"), 3);
    assert_eq!(counter(&a, "shared_bytes_helped"), 0);
}

/// Takes every streamed fragment offered while it is still being written, into its own buffer.
struct PlacingSink {
    take: bool,
    buf: Vec<u8>,
    heads: Vec<(u8, Vec<u8>, usize)>,
    placed: Vec<(CompletionToken, Result<usize, SendError>)>,
    whole: Sink,
}

impl PlacingSink {
    fn new(take: bool, room: usize) -> Self {
        Self {
            take,
            buf: vec![0; room],
            heads: Vec::new(),
            placed: Vec::new(),
            whole: Sink::default(),
        }
    }
}

impl BtlEvents for PlacingSink {
    fn recv(&mut self, peer: Rank, tag: u8, data: &[u8]) {
        self.whole.recv(peer, tag, data);
    }
    fn recv_begin(&mut self, _peer: Rank, tag: u8, head: &[u8], len: usize) -> Option<Placement> {
        self.heads.push((tag, head.to_vec(), len));
        self.take.then(|| Placement {
            dst: lend_mut(&mut self.buf),
            token: CompletionToken(77),
        })
    }
    fn recv_placed(&mut self, token: CompletionToken, result: Result<usize, SendError>) {
        self.placed.push((token, result));
    }
    fn rdma_complete(&mut self, token: CompletionToken, result: Result<(), SendError>) {
        self.whole.rdma_complete(token, result);
    }
    fn peer_failed(&mut self, peer: Rank, reason: &str) {
        self.whole.peer_failed(peer, reason);
    }
}

/// Roll the progress word of the streamed record at the start of `b`'s ring from rank 0 to
/// `written`, as if the sender were still writing it.
fn set_progress(b: &mut ShmBtl, written: u64) {
    b.scribble_inbox_for_test(0, crate::ring::CTRL, &written.to_le_bytes());
}

/// A streamed fragment the PML takes while it arrives is written into the PML's buffer piece
/// by piece (the head goes to `recv_begin`, the rest to the placement, as far as it fits) and
/// ends with one `recv_placed`; one it declines arrives whole through `recv`.
#[test]
fn streamed_fragments_are_placed_as_they_arrive_or_delivered_whole() {
    let payload: Vec<u8> = (0..10_000u32).map(|i| (i * 13 + 5) as u8).collect();
    let header = *b"0123456789abcdef";
    let mut whole = header.to_vec();
    whole.extend_from_slice(&payload);
    for take in [true, false] {
        let (_id, mut a, mut b, _mem) = pair(&[]);
        // Room for less than the rest: what does not fit is dropped.
        let mut sink = PlacingSink::new(take, 9_000);
        a.send(1, 0x40, &header, &payload, SendHint::default())
            .unwrap();
        set_progress(&mut b, 64);
        assert_eq!(b.progress(&mut sink), 0);
        assert_eq!(
            sink.heads.len(),
            1,
            "offered once the first bytes are there"
        );
        assert_eq!(sink.heads[0], (0x40, whole[..64].to_vec(), whole.len()));
        set_progress(&mut b, 5000);
        assert_eq!(b.progress(&mut sink), 0);
        assert_eq!(sink.heads.len(), 1, "offered only once");
        if take {
            assert_eq!(
                &sink.buf[..5000 - 64],
                &whole[64..5000],
                "placed as it arrives"
            );
        }
        set_progress(&mut b, whole.len() as u64);
        assert_eq!(b.progress(&mut sink), 1);
        if take {
            assert_eq!(sink.placed.len(), 1);
            assert_eq!(sink.placed[0].0, CompletionToken(77));
            assert_eq!(sink.placed[0].1.as_ref().ok(), Some(&9_000));
            assert_eq!(&sink.buf[..], &whole[64..64 + 9_000]);
            assert!(sink.whole.frags.is_empty(), "not delivered twice");
        } else {
            assert!(sink.placed.is_empty());
            assert_eq!(sink.whole.frags.len(), 1);
            assert_eq!(sink.whole.frags[0].2, whole);
        }
        // The ring goes on after it.
        a.send(1, 0x40, b"next", &[], SendHint::default()).unwrap();
        progress_until_idle(&mut b, &mut sink.whole);
        assert_eq!(sink.whole.frags.last().unwrap().2, b"next");
    }
}

/// A ring that goes bad while a fragment is being placed ends the placement with an error
/// before the peer is reported failed: the PML's buffer is never written again.
#[test]
fn a_corrupt_ring_ends_a_placement_with_an_error() {
    let (_id, mut a, mut b, _mem) = pair(&[]);
    let mut sink = PlacingSink::new(true, 20_000);
    a.send(1, 0x40, b"hdr", &[3; 10_000], SendHint::default())
        .unwrap();
    set_progress(&mut b, 128);
    b.progress(&mut sink);
    assert_eq!(sink.heads.len(), 1);
    set_progress(&mut b, 20_000); // more than the record holds
    b.progress(&mut sink);
    assert_eq!(sink.placed.len(), 1);
    assert!(matches!(
        sink.placed[0].1,
        Err(SendError::PeerFailed { peer: 0, .. })
    ));
    assert_eq!(sink.whole.failed.len(), 1);
    let before = sink.buf.clone();
    b.progress(&mut sink);
    assert_eq!(sink.buf, before);
    assert_eq!(sink.placed.len(), 1);
}

/// Receives whole records and, at each one, tries to send another large record back into the
/// same ring (it owns the sending module): that succeeds only if the receiver has given back
/// the space of the records it already consumed in this pass.
struct RefillSink {
    sender: ShmBtl,
    whole: Sink,
    refills: usize,
    max_refills: usize,
    /// Payload bytes of each refill.
    len: usize,
    /// At which received records (counting from 1) a refill found room.
    room_at: Vec<usize>,
    /// Send until the ring is full at each record (else one record).
    fill: bool,
}

impl BtlEvents for RefillSink {
    fn recv(&mut self, peer: Rank, tag: u8, data: &[u8]) {
        self.whole.recv(peer, tag, data);
        if self.refills < self.max_refills
            && self
                .sender
                .send(1, 0x40, b"hdr", &vec![9; self.len], SendHint::default())
                .is_ok()
        {
            self.refills += 1;
            self.room_at.push(self.whole.frags.len());
            while self.fill
                && self
                    .sender
                    .send(1, 0x40, b"hdr", &vec![9; self.len], SendHint::default())
                    .is_ok()
            {}
        }
    }
    fn rdma_complete(&mut self, token: CompletionToken, result: Result<(), SendError>) {
        self.whole.rdma_complete(token, result);
    }
    fn peer_failed(&mut self, peer: Rank, reason: &str) {
        self.whole.peer_failed(peer, reason);
    }
}

/// Long records that were written whole before the receiver looked (a sender ahead of its
/// receiver, as in a bandwidth window) free their space as they are read (by default each
/// one), so that the sender writes the next while the receiver copies the others out: one pass
/// over a full ring lets the sender refill it. They are counted as streamed records found whole.
#[test]
fn long_records_give_their_space_back_while_the_pass_goes_on() {
    let (_id, mut a, mut b, _mem) = pair(&[]);
    let mut sent = 0;
    while a
        .send(1, 0x40, b"hdr", &[9; 30_000], SendHint::default())
        .is_ok()
    {
        sent += 1;
    }
    assert!(sent >= 3, "the default ring holds several 30 KB records");
    let mut sink = RefillSink {
        sender: a,
        whole: Sink::default(),
        refills: 0,
        max_refills: sent,
        len: 30_000,
        room_at: vec![],
        fill: false,
    };
    // The refills arrive whole too, and the same pass takes them.
    assert_eq!(b.progress(&mut sink), 2 * sent, "one pass takes them all");
    assert_eq!(
        sink.refills, sent,
        "the sender refilled the ring as it emptied"
    );
    assert_eq!(counter(&b, "streamed_whole"), 2 * sent as u64);
    assert_eq!(counter(&b, "offers"), 0);
    assert_eq!(progress_until_idle(&mut b, &mut sink.whole), 0);
}

/// A pass that stops early (the PML had what it waited for) may keep read space back; the
/// next pass that finds the ring empty gives it back, so a sender waiting for space is never
/// left waiting on a receiver that has nothing more to read.
#[test]
fn space_kept_by_an_early_stop_comes_back_when_the_ring_is_empty() {
    let (_id, mut a, mut b, _mem) = pair(&[
        ("btl_shm_fifo_size", "8K"),
        ("btl_shm_max_send_size", "2K"),
        ("btl_shm_eager_limit", "1K"),
    ]);
    let send = |a: &mut ShmBtl| a.send(1, 0x41, b"h", &[7; 1000], SendHint::default());
    let mut sent = 0;
    while send(&mut a).is_ok() {
        sent += 1;
    }
    let mut sink = Sink {
        enough: Some(sent),
        ..Sink::default()
    };
    assert_eq!(
        b.progress(&mut sink),
        sent,
        "the pass stops at the last one"
    );
    sink.enough = None;
    // The ring is empty now: an idle pass gives back whatever the last one kept.
    assert_eq!(b.progress(&mut sink), 0);
    let mut again = 0;
    while send(&mut a).is_ok() {
        again += 1;
    }
    assert!(
        again >= sent - 1,
        "an emptied ring takes {again} records, a fresh one {sent}"
    );
}

/// While records wait, the receiver gives their space back a quarter ring at a time: a sender
/// polling a full ring gets room for several records at once, and the head's cache line moves
/// once per batch instead of once per record (a handoff per 4-8 KiB record, the slow mood's
/// bandwidth collapse at those sizes).
#[test]
fn a_full_ring_is_given_back_in_batches_not_per_record() {
    let (_id, mut a, mut b, _mem) = pair(&[
        ("btl_shm_fifo_size", "64K"),
        ("btl_shm_max_send_size", "20K"),
        ("btl_shm_eager_limit", "20K"),
        ("btl_shm_publish_batch", "1M"),
    ]);
    let send = |a: &mut ShmBtl| a.send(1, 0x40, b"hdr", &[9; 4000], SendHint::default());
    let mut sent = 0;
    while send(&mut a).is_ok() {
        sent += 1;
    }
    assert!(sent >= 12, "{sent}");
    // One pass; at each record the sender fills the ring up again if it can.
    let mut sink = RefillSink {
        sender: a,
        whole: Sink::default(),
        refills: 0,
        max_refills: usize::MAX,
        len: 4000,
        room_at: vec![],
        fill: true,
    };
    b.progress(&mut sink);
    // A quarter of 64 KiB holds four 4 KiB records: room comes every 4 records, not every one.
    let at = &sink.room_at;
    assert!(
        !at.is_empty() && at.windows(2).all(|w| w[1] - w[0] >= 3),
        "room at records {at:?} of {sent}"
    );
}

/// By default the costs the stream chunk and the stores are chosen from are measured
/// (reported as counters, or as a failed measurement on a node too busy to measure); a size
/// in btl_shm_stream_chunk and a mode in btl_shm_stream_stores fix both and measure nothing.
#[test]
fn the_costs_are_measured_unless_both_choices_are_fixed() {
    let (_id, a, _b, _mem) = pair(&[]);
    let handoff = counter(&a, "measured_handoff_ns");
    let failed = counter(&a, "cost_measurement_failed");
    let one_cpu = std::thread::available_parallelism().is_ok_and(|n| n.get() < 2);
    if failed == 1 {
        assert_eq!(handoff, 0);
        if one_cpu {
            rmca_test_support::skip_or_fail("the cost measurement needs two CPUs");
        }
    } else {
        assert_eq!(failed, 0);
        assert!(handoff > 0 && handoff < 100_000, "{handoff} ns");
        assert!(counter(&a, "measured_copy_mbps") > 100);
        if ring::NONTEMPORAL_STORES {
            let (cached, nt) = (
                counter(&a, "measured_cached_mbps"),
                counter(&a, "measured_nontemporal_mbps"),
            );
            assert!(cached > 100 && nt > 100, "{cached} {nt} MB/s");
            // The choice follows the figures.
            let chose = counter(&a, "nontemporal_at_start");
            assert_eq!(
                chose == 1,
                nt as f64 >= cached as f64 * tune::NONTEMPORAL_GAIN
            );
        }
    }
    // A fixed chunk alone still measures, for the stores.
    let (_id, a, _b, _mem) = pair(&[("btl_shm_stream_chunk", "16K")]);
    assert!(counter(&a, "measured_handoff_ns") > 0 || counter(&a, "cost_measurement_failed") == 1);
    for stores in ["cached", "nontemporal"] {
        let (_id, a, _b, _mem) = pair(&[
            ("btl_shm_stream_chunk", "16K"),
            ("btl_shm_stream_stores", stores),
        ]);
        assert_eq!(counter(&a, "measured_handoff_ns"), 0);
        assert_eq!(counter(&a, "measured_copy_mbps"), 0);
        assert_eq!(counter(&a, "measured_cached_mbps"), 0);
        assert_eq!(counter(&a, "cost_measurement_failed"), 0);
        assert_eq!(
            counter(&a, "nontemporal_at_start"),
            u64::from(stores == "nontemporal")
        );
    }
}

#[test]
fn ring_memory_is_faulted_in_before_the_first_messages() {
    let (_id, mut a, mut b, _mem) = pair(&[]);
    let prefaulted = |m: &ShmBtl| {
        m.counters()
            .into_iter()
            .find(|(k, _)| k == "prefaulted_bytes")
            .map(|(_, v)| v)
            .unwrap()
    };
    // Each side: the head line and first short_span bytes of the ring it writes (in the
    // peer's segment) and of the ring it reads (in its own).
    let span = ShmConfig::DEFAULT.short_span as u64;
    for m in [&a, &b] {
        assert!(prefaulted(m) >= 2 * span, "{}", prefaulted(m));
    }
    // Ten 8-byte round trips, as an application's first messages: no page fault on the way
    // (without the prefault, the first record written to each page of a ring faults, in
    // both the sender's and the receiver's mapping).
    let mut sink = Sink::default();
    sink.frags.reserve(64);
    let before = crate::sys::thread_minor_faults();
    for i in 0..10u8 {
        a.send(1, 0x41, &[i; 16], &[i; 8], SendHint::default())
            .unwrap();
        while b.progress(&mut sink) == 0 {}
        b.send(0, 0x42, &[i; 16], &[i; 8], SendHint::default())
            .unwrap();
        while a.progress(&mut sink) == 0 {}
    }
    let faults = crate::sys::thread_minor_faults() - before;
    assert_eq!(sink.frags.len(), 20);
    assert_eq!(faults, 0, "the first round trips took page faults");
}

/// Counts what it is given and allocates nothing (so that a page-fault count is the rings').
#[derive(Default)]
struct CountSink {
    frags: usize,
    bytes: usize,
}

impl BtlEvents for CountSink {
    fn recv(&mut self, _peer: Rank, _tag: u8, data: &[u8]) {
        self.frags += 1;
        self.bytes += data.len();
    }
    fn rdma_complete(&mut self, _token: CompletionToken, _result: Result<(), SendError>) {}
    fn peer_failed(&mut self, _peer: Rank, _reason: &str) {}
}

/// Page faults taken by sending windows of 64 records of a 16-byte header and a 64-byte
/// payload (OSU's 64 B osu_bw) from `a` to `b` until they went round the whole ring once.
fn faults_of_a_lap(a: &mut ShmBtl, b: &mut ShmBtl) -> u64 {
    let payload = [7u8; 64];
    // Each record takes two lines (three slots, then a skip marker to the next line).
    let records = ShmConfig::DEFAULT.fifo_size / (2 * ring::LINE) + 64;
    let mut sink = CountSink::default();
    let before = crate::sys::thread_minor_faults();
    for _ in 0..records.div_ceil(64) {
        for _ in 0..64 {
            a.send(1, 0x41, &[1; 16], &payload, SendHint::default())
                .unwrap();
        }
        let want = sink.frags + 64;
        while sink.frags < want {
            b.progress(&mut sink);
        }
    }
    let faults = crate::sys::thread_minor_faults() - before;
    assert_eq!(sink.bytes, sink.frags * 80);
    faults
}

#[test]
fn a_lap_of_multi_line_records_takes_no_page_fault() {
    // Without the whole ring faulted in at connection, the first records to reach each of
    // its pages fault in both mappings (the producer's and the consumer's) while the peer
    // waits: the first lap of 64 B messages ran at 0.6x the later ones (OSU's 64 B dip).
    let (_id, mut a, mut b, _mem) = pair(&[]);
    let ring = ShmConfig::DEFAULT.fifo_size as u64;
    for m in [&a, &b] {
        assert!(counter(m, "prefaulted_bytes") >= 2 * ring);
    }
    assert_eq!(
        faults_of_a_lap(&mut a, &mut b),
        0,
        "the first lap took page faults"
    );
    // The budget bounds it: with none, only the short span is faulted in, and the same lap
    // faults (which shows the count above can see them).
    let (_id, mut a, mut b, _mem) = pair(&[("btl_shm_prefault", "0")]);
    let span = ShmConfig::DEFAULT.short_span as u64;
    for m in [&a, &b] {
        let p = counter(m, "prefaulted_bytes");
        assert!(p >= 2 * span && p < ring, "{p}");
    }
    assert!(faults_of_a_lap(&mut a, &mut b) > 0);
}

#[test]
fn the_prefault_budget_is_shared_between_the_rings() {
    use crate::module::prefault_share;
    let (mib, kib) = (1usize << 20, 1usize << 10);
    // 2 local ranks: both rings whole.
    assert_eq!(prefault_share(16 * mib, 2, 16 * kib, 512 * kib), 512 * kib);
    // 64 local ranks (126 rings): a share each, above the short span.
    assert_eq!(
        prefault_share(16 * mib, 126, 16 * kib, 512 * kib),
        16 * mib / 126
    );
    // Never below the short span or a line, never above the ring, no division by zero.
    assert_eq!(prefault_share(0, 2, 16 * kib, 512 * kib), 16 * kib);
    assert_eq!(prefault_share(0, 2, 0, 512 * kib), ring::LINE);
    assert_eq!(prefault_share(usize::MAX, 0, 16 * kib, 4 * kib), 4 * kib);
}
