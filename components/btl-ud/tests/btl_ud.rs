//! btl-ud modules of one process talking over a verbs provider (soft by default; rdma in the
//! Soft-RoCE guest: `RMCA_BTL_UD_TEST_PROVIDER=rdma cargo test -p rmca-btl-ud --features rdma`).
//!
//! Tests named `soft_only_*` need the soft provider (fault injection, an MTU above the
//! device's): the rdma lane of `scripts/vm-tests.sh` filters them out (`--skip soft_only_`)
//! rather than reporting them passed, and run on rdma anyway they skip or fail
//! ([`require_soft`]).

mod common;

use common::*;
use rmca_framework::btl::{tags, BtlFlags, ModexRead, SendError, SendHint};
use rmca_framework::memory::MemoryAccounting;
use rmca_framework::modex::LocalModex;
use rmca_framework::rank::Rank;
use rmca_verbs::{
    AccessFlags, Context, ProviderConfig, ProviderKind, QpCaps, QpInit, QpType, RcParams, SendOp,
    SendWr, UdDest, Wc,
};

fn sorted(mut v: Vec<(Rank, u8, Vec<u8>)>) -> Vec<(Rank, u8, Vec<u8>)> {
    v.sort();
    v
}

#[test]
fn every_size_up_to_the_mtu_between_three_ranks() {
    let s: &[(&str, &str)] = &[("btl_ud_recv_buffers", "128")];
    let mut btls = ranks("job-sizes", &[s, s, s]);
    let a = btls[0].attributes().clone();
    let max = a.max_send_size;
    eprintln!(
        "provider {}: max_send_size {max} (MTU {})",
        provider(),
        max + 4
    );
    assert_eq!(a.eager_limit, max, "eager limit follows the MTU");
    assert!(a
        .flags
        .contains(BtlFlags::SEND | BtlFlags::NEED_ACK | BtlFlags::NEED_CSUM));
    assert!(!a.flags.intersects(BtlFlags::PUT | BtlFlags::GET));
    assert_eq!(
        btls[0].send(
            1,
            tags::USER_BASE,
            &[],
            &vec![0; max + 1],
            SendHint::default()
        ),
        Err(SendError::TooLarge { len: max + 1, max })
    );
    assert_eq!(
        btls[0].send(9, tags::USER_BASE, &[], b"x", SendHint::default()),
        Err(SendError::Unreachable(9))
    );

    let mut sizes: Vec<usize> = (0..=max).step_by(13).collect();
    sizes.extend([1, 2, 3, 4, 5, max - 1, max]);
    let mut sk = sinks(3);
    let mut expected: Vec<Vec<(Rank, u8, Vec<u8>)>> = vec![Vec::new(); 3];
    let mut seq = 0u32;
    for chunk in sizes.chunks(16) {
        for src in 0..3u32 {
            for dst in 0..3u32 {
                if src == dst {
                    continue;
                }
                for &len in chunk {
                    seq += 1;
                    let data = pattern(src, seq, len);
                    let tag = tags::USER_BASE + (seq % 8) as u8;
                    let split = len.min((seq % 5) as usize);
                    btls[src as usize]
                        .send(
                            dst,
                            tag,
                            &data[..split],
                            &data[split..],
                            SendHint::default(),
                        )
                        .expect("send");
                    expected[dst as usize].push((src, tag, data));
                }
            }
        }
        progress_until(&mut btls, &mut sk, |s| {
            (0..3).all(|d| s[d].frags.len() >= expected[d].len())
        });
    }
    // One idle poll each: a poll that delivers leaves a batch of free buffers to it.
    for (b, s) in btls.iter_mut().zip(sk.iter_mut()) {
        b.progress(s);
    }
    for d in 0..3 {
        let got = std::mem::take(&mut sk[d].frags);
        assert_eq!(
            sorted(got),
            sorted(expected[d].clone()),
            "rank {d} received exactly what was sent"
        );
        let c = counters(btls[d].as_ref());
        for k in [
            "drops_truncated",
            "drops_foreign",
            "drops_wrong_job",
            "drops_unknown_source",
            "send_errors",
        ] {
            assert_eq!(c[k], 0, "{k} on rank {d}");
        }
        assert_eq!(c["frags_received"] as usize, expected[d].len());
        assert!(c["inline_sends"] > 0, "small fragments went inline");
        assert!(
            c["recv_buffers_posted"] > 128 - 16,
            "receive pool reposted in batches of 16"
        );
    }
    // Memory of the pools is accounted (receive pool: 128 x (GRH + MTU)).
    assert!(btls[0].memory_usage().current >= 128 * (40 + max + 4));
}

#[test]
fn full_send_queues_queue_fragments_instead_of_dropping_them() {
    let tiny: &[(&str, &str)] = &[
        ("btl_ud_send_qps", "1"),
        ("btl_ud_send_queue_depth", "2"),
        ("btl_ud_pending_max", "1000"),
        ("btl_ud_recv_buffers", "256"),
    ];
    let mut btls = ranks("job-queue", &[tiny, tiny]);
    let n = 100u32;
    for i in 0..n {
        btls[0]
            .send(
                1,
                tags::USER_BASE,
                &i.to_be_bytes(),
                &pattern(0, i, 300),
                SendHint::default(),
            )
            .expect("queued, not refused");
    }
    let c = counters(btls[0].as_ref());
    assert_eq!(c["sends_outstanding"], 2, "the send queue holds its depth");
    assert_eq!(
        c["pending_now"],
        u64::from(n) - 2,
        "the rest waits in the FIFO"
    );
    let mut sk = sinks(2);
    progress_until(&mut btls, &mut sk, |s| s[1].frags.len() >= n as usize);
    let mut seqs: Vec<u32> = sk[1]
        .frags
        .iter()
        .map(|(_, _, d)| u32::from_be_bytes(d[..4].try_into().unwrap()))
        .collect();
    for (_, _, d) in &sk[1].frags {
        let i = u32::from_be_bytes(d[..4].try_into().unwrap());
        assert_eq!(&d[4..], &pattern(0, i, 300)[..]);
    }
    seqs.sort_unstable();
    assert_eq!(
        seqs,
        (0..n).collect::<Vec<_>>(),
        "every queued fragment was sent once"
    );
    let c = counters(btls[0].as_ref());
    assert_eq!(c["pending_now"], 0);
    assert_eq!(c["pending_max_depth"], u64::from(n) - 2);
    assert_eq!(c["sends_refused"], 0);
}

#[test]
fn a_full_pending_queue_refuses_without_taking_the_fragment() {
    let capped: &[(&str, &str)] = &[
        ("btl_ud_send_qps", "1"),
        ("btl_ud_send_queue_depth", "2"),
        ("btl_ud_pending_max", "3"),
    ];
    let mut btls = ranks("job-cap", &[capped, capped]);
    for i in 0..5u8 {
        btls[0]
            .send(1, tags::USER_BASE, &[i], &[], SendHint::default())
            .unwrap();
    }
    assert_eq!(
        btls[0].send(1, tags::USER_BASE, &[5], &[], SendHint::default()),
        Err(SendError::WouldBlock)
    );
    let mut sk = sinks(2);
    progress_until(&mut btls, &mut sk, |s| s[1].frags.len() >= 5);
    // After progress the refused fragment is accepted on retry.
    btls[0]
        .send(1, tags::USER_BASE, &[5], &[], SendHint::default())
        .unwrap();
    progress_until(&mut btls, &mut sk, |s| s[1].frags.len() >= 6);
    let mut got: Vec<u8> = sk[1].frags.iter().map(|(_, _, d)| d[0]).collect();
    got.sort_unstable();
    assert_eq!(got, vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(counters(btls[0].as_ref())["sends_refused"], 1);
}

#[test]
fn the_pending_queue_is_bounded_in_bytes() {
    // Two send credits, then queued copies: 1000-byte fragments against a 2500-byte budget
    // fit two (the third would exceed it), though the fragment cap (100) is far away.
    let capped: &[(&str, &str)] = &[
        ("btl_ud_send_qps", "1"),
        ("btl_ud_send_queue_depth", "2"),
        ("btl_ud_pending_max", "100"),
        ("btl_ud_pending_bytes_max", "2500"),
    ];
    let mut btls = ranks("job-bytes", &[capped, capped]);
    let payload = [7u8; 996]; // + the 4-byte header: 1000 bytes queued per fragment
    for _ in 0..4 {
        btls[0]
            .send(1, tags::USER_BASE, &payload, &[], SendHint::default())
            .unwrap();
    }
    assert_eq!(
        btls[0].send(1, tags::USER_BASE, &payload, &[], SendHint::default()),
        Err(SendError::WouldBlock),
        "a third queued copy would exceed btl_ud_pending_bytes_max"
    );
    let mut sk = sinks(2);
    progress_until(&mut btls, &mut sk, |s| s[1].frags.len() >= 4);
    assert_eq!(counters(btls[0].as_ref())["sends_refused"], 1);
    assert!(sk[1].frags.iter().all(|(_, _, d)| d[..] == payload[..]));
}

/// A raw verbs UD endpoint that may claim to be anyone.
struct RawPeer {
    _ctx: Context,
    pd: rmca_verbs::Pd,
    qp: rmca_verbs::Qp,
    cq: rmca_verbs::Cq,
    mr: rmca_verbs::Mr,
}

impl RawPeer {
    fn new(secret: &[u8]) -> Self {
        let kind = ProviderKind::parse(&provider()).unwrap();
        let ctx = Context::open(&ProviderConfig {
            kind,
            job_secret: secret.to_vec(),
            ..Default::default()
        })
        .unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(64).unwrap();
        let qp = pd
            .create_qp(QpInit {
                qp_type: QpType::Ud,
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                caps: QpCaps {
                    max_inline_data: 0,
                    ..QpCaps::default()
                },
                qkey: 0,
            })
            .unwrap();
        qp.connect(None, &RcParams::default()).unwrap();
        let mr = pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
        Self {
            _ctx: ctx,
            pd,
            qp,
            cq,
            mr,
        }
    }

    fn send(&self, card: &rmca_btl_ud::card::CardRepr, bytes: &[u8], imm: Option<u32>) {
        let ah = self.pd.create_ah(&card.addr).unwrap();
        self.mr.write_at(0, bytes).unwrap();
        let sge = [self.mr.sge(0, bytes.len() as u32).unwrap()];
        let wr = SendWr {
            wr_id: 1,
            op: imm.map_or(SendOp::Send, SendOp::SendWithImm),
            sges: &sge,
            signaled: true,
            inline: false,
            ud: Some(UdDest {
                ah: &ah,
                remote_qpn: ah.remote_qpn(),
                remote_qkey: card.qkey,
            }),
        };
        self.qp.post_send(&wr).unwrap();
        let mut wc = [Wc::EMPTY; 4];
        // Reap the send completion so the queue never fills.
        let _ = self.cq.poll(&mut wc);
    }
}

fn header(tag: u8, job: u16, version: u8) -> Vec<u8> {
    let mut h = vec![tag, version << 4];
    h.extend_from_slice(&job.to_le_bytes());
    h
}

#[test]
fn foreign_truncated_wrong_job_and_unknown_source_datagrams_are_dropped_and_counted() {
    let secret = "job-foreign";
    let modex = LocalModex::new();
    let mem = MemoryAccounting::new();
    let s: &[(&str, &str)] = &[];
    let mut btls: Vec<_> = (0..2)
        .map(|r| init(&job(r, 2, secret), &modex, &mem, s).unwrap())
        .collect();
    for (r, b) in btls.iter_mut().enumerate() {
        b.add_procs(&job(r as u32, 2, secret).procs(), &modex)
            .unwrap();
    }
    let card1 = card_of(&modex, 1);
    let job_tag = rmca_btl_ud::header::job_tag16(secret.as_bytes());

    // Same job secret (passes any provider filter), but lying about the rest.
    let raw = RawPeer::new(secret.as_bytes());
    raw.send(&card1, &[0x40, 0x10], Some(0)); // truncated header
    raw.send(&card1, b"abc", Some(0)); // 3 B: truncated
    let mut v = header(0x40, job_tag, 7); // another version
    v.extend_from_slice(b"payload");
    raw.send(&card1, &v, Some(0));
    let mut w = header(0x40, job_tag ^ 0x5a5a, rmca_btl_ud::header::VERSION); // another job
    w.extend_from_slice(b"payload");
    raw.send(&card1, &w, Some(0));
    let mut u = header(0x40, job_tag, rmca_btl_ud::header::VERSION); // valid header, but a rank that is not in the job...
    u.extend_from_slice(b"payload");
    raw.send(&card1, &u, Some(77));
    raw.send(&card1, &u, None); // ...or no rank at all
    let expected_drops = [
        ("drops_truncated", 2),
        ("drops_foreign", 1),
        ("drops_wrong_job", 1),
        ("drops_unknown_source", 2),
    ];

    let mut provider_level = 0;
    if soft() {
        // A module of another job and raw UDP garbage: the soft provider filters both.
        let other_modex = LocalModex::new();
        let mut other = init(&job(0, 2, "another-job"), &other_modex, &mem, s).unwrap();
        struct Fake(Vec<u8>);
        impl ModexRead for Fake {
            fn get(
                &self,
                rank: Rank,
                _key: &str,
            ) -> Result<Option<Vec<u8>>, rmca_framework::modex::ModexError> {
                Ok((rank == 1).then(|| self.0.clone()))
            }
        }
        let fake = Fake(modex.get(1, rmca_btl_ud::MODEX_KEY).unwrap().unwrap());
        other
            .add_procs(&job(0, 2, "another-job").procs(), &fake)
            .unwrap();
        other
            .send(1, tags::USER_BASE, b"not for you", &[], SendHint::default())
            .unwrap();
        let a = rmca_verbs::soft::wire::SoftAddr::parse(&card1.addr).unwrap();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        udp.send_to(b"garbage that is not a verbs datagram", a.sock)
            .unwrap();
        udp.send_to(&[0u8; 2], a.sock).unwrap();
        provider_level = 3;
        let mut osk = Sink::default();
        other.progress(&mut osk);
    }

    let mut sk = sinks(2);
    let mut total;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        progress_rounds(&mut btls, &mut sk, 5);
        let c = counters(btls[1].as_ref());
        total = expected_drops.iter().map(|(k, _)| c[*k]).sum::<u64>()
            + if soft() {
                c["drops_provider_foreign"] + c["drops_provider_malformed"]
            } else {
                0
            };
        if total >= 6 + provider_level || std::time::Instant::now() > deadline {
            break;
        }
    }
    let c = counters(btls[1].as_ref());
    for (k, n) in expected_drops {
        assert_eq!(c[k], n, "{k}: {c:#?}");
    }
    if soft() {
        assert_eq!(c["drops_provider_foreign"], 1, "the other job's datagram");
        assert_eq!(c["drops_provider_malformed"], 2, "the raw UDP garbage");
    }
    assert_eq!(total, 6 + provider_level);
    assert!(
        sk[1].frags.is_empty(),
        "nothing foreign was delivered: {:?}",
        sk[1].frags
    );
    // The module still works for its real peer.
    btls[0]
        .send(1, tags::USER_BASE, b"hello", &[], SendHint::default())
        .unwrap();
    progress_until(&mut btls, &mut sk, |s| !s[1].frags.is_empty());
    assert_eq!(sk[1].frags, vec![(0, tags::USER_BASE, b"hello".to_vec())]);
}

#[test]
fn receive_pool_exhaustion_drops_are_counted_and_the_pool_refills() {
    let small: &[(&str, &str)] = &[
        ("btl_ud_recv_buffers", "8"),
        ("btl_ud_send_queue_depth", "64"),
    ];
    let mut btls = ranks("job-pool", &[small, small]);
    assert_eq!(counters(btls[1].as_ref())["recv_buffers_posted"], 8);
    let n = 40u32;
    // Rank 1 does not progress while rank 0 sends more than its pool holds.
    for i in 0..n {
        btls[0]
            .send(
                1,
                tags::USER_BASE,
                &i.to_be_bytes(),
                &[0; 64],
                SendHint::default(),
            )
            .unwrap();
    }
    let mut s0 = Sink::default();
    btls[0].progress(&mut s0);
    std::thread::sleep(std::time::Duration::from_millis(50));
    let mut sk = sinks(2);
    progress_until(&mut btls, &mut sk, |s| s[1].frags.len() >= 8);
    progress_rounds(&mut btls, &mut sk, 20);
    let c = counters(btls[1].as_ref());
    assert_eq!(
        sk[1].frags.len(),
        8,
        "exactly the posted buffers were filled"
    );
    if soft() {
        assert_eq!(
            c["drops_no_recv_posted"],
            u64::from(n) - 8,
            "every other datagram was dropped and counted"
        );
    }
    assert_eq!(c["recv_buffers_posted"], 8, "the pool was reposted");
    // The refilled pool receives again.
    for i in 0..5u32 {
        btls[0]
            .send(
                1,
                tags::USER_BASE,
                &(100 + i).to_be_bytes(),
                &[],
                SendHint::default(),
            )
            .unwrap();
    }
    progress_until(&mut btls, &mut sk, |s| s[1].frags.len() >= 13);
    let mut late: Vec<u32> = sk[1].frags[8..]
        .iter()
        .map(|(_, _, d)| u32::from_be_bytes(d[..4].try_into().unwrap()))
        .collect();
    late.sort_unstable();
    assert_eq!(late, vec![100, 101, 102, 103, 104]);
}

#[test]
fn soft_only_with_fault_drop_half_the_fragments_are_lost_because_ud_is_unreliable() {
    if !require_soft("fault injection") {
        return;
    }
    let lossy: &[(&str, &str)] = &[("btl_ud_fault_drop", "0.5"), ("btl_ud_fault_seed", "42")];
    let clean: &[(&str, &str)] = &[];
    let mut btls = ranks("job-lossy", &[lossy, clean]);
    let n = 200u32;
    let mut sk = sinks(2);
    for chunk in (0..n).collect::<Vec<_>>().chunks(32) {
        for &i in chunk {
            btls[0]
                .send(
                    1,
                    tags::USER_BASE,
                    &i.to_be_bytes(),
                    &[],
                    SendHint::default(),
                )
                .unwrap();
        }
        progress_rounds(&mut btls, &mut sk, 2);
    }
    let dropped = counters(btls[0].as_ref())["faults_dropped"];
    assert!(
        dropped > 0 && dropped < u64::from(n),
        "some but not all were dropped: {dropped}"
    );
    progress_until(&mut btls, &mut sk, |s| {
        s[1].frags.len() as u64 >= u64::from(n) - dropped
    });
    progress_rounds(&mut btls, &mut sk, 10);
    assert_eq!(
        sk[1].frags.len() as u64,
        u64::from(n) - dropped,
        "delivered = sent - injected drops"
    );
    assert_eq!(
        counters(btls[0].as_ref())["frags_sent"],
        u64::from(n),
        "the BTL itself sent everything"
    );
}

#[test]
fn soft_only_with_fault_duplicate_every_fragment_arrives_twice() {
    if !require_soft("fault injection") {
        return;
    }
    let dup: &[(&str, &str)] = &[
        ("btl_ud_fault_duplicate", "1.0"),
        ("btl_ud_recv_buffers", "64"),
    ];
    let mut btls = ranks("job-dup", &[dup, &[]]);
    for i in 0..10u8 {
        btls[0]
            .send(1, tags::USER_BASE, &[i], &[], SendHint::default())
            .unwrap();
    }
    let mut sk = sinks(2);
    progress_until(&mut btls, &mut sk, |s| s[1].frags.len() >= 20);
    let mut got: Vec<u8> = sk[1].frags.iter().map(|(_, _, d)| d[0]).collect();
    got.sort_unstable();
    assert_eq!(got, (0..10u8).flat_map(|i| [i, i]).collect::<Vec<_>>());
}

#[test]
fn soft_only_mtu_override_sets_the_limits_and_peers_use_the_smaller_mtu() {
    if !require_soft("an MTU override above the device's MTU") {
        return;
    }
    let modex = LocalModex::new();
    let mem = MemoryAccounting::new();
    let mut big = init(
        &job(0, 2, "job-mtu"),
        &modex,
        &mem,
        &[("btl_ud_mtu", "4096")],
    )
    .unwrap();
    let mut small = init(
        &job(1, 2, "job-mtu"),
        &modex,
        &mem,
        &[("btl_ud_mtu", "1024")],
    )
    .unwrap();
    assert_eq!(big.attributes().max_send_size, 4092);
    assert_eq!(small.attributes().eager_limit, 1020);
    assert_eq!(card_of(&modex, 0).mtu, 4096, "the card carries the MTU");
    // As a HCA's path MTU is the smaller of both ports', the big module sends at most what
    // the small one's buffers hold: both reach each other with 1 KiB datagrams.
    let reach_big = big
        .add_procs(&job(0, 2, "job-mtu").procs(), &modex)
        .unwrap();
    assert_eq!(reach_big, vec![true, true]);
    let a = big.attributes();
    assert_eq!(
        (a.max_send_size, a.eager_limit, a.rndv_eager_limit),
        (1020, 1020, 1020)
    );
    let reach_small = small
        .add_procs(&job(1, 2, "job-mtu").procs(), &modex)
        .unwrap();
    assert_eq!(reach_small, vec![true, true]);
    assert_eq!(small.attributes().max_send_size, 1020);
    let mut btls = vec![big, small];
    let mut sk = sinks(2);
    assert!(matches!(
        btls[0].send(1, tags::USER_BASE, &[], &vec![1; 1021], SendHint::default()),
        Err(SendError::TooLarge {
            len: 1021,
            max: 1020
        })
    ));
    btls[0]
        .send(1, tags::USER_BASE, &[], &vec![9; 1020], SendHint::default())
        .unwrap();
    btls[1]
        .send(0, tags::USER_BASE, &[], &vec![7; 1020], SendHint::default())
        .unwrap();
    progress_until(&mut btls, &mut sk, |s| {
        !s[0].frags.is_empty() && !s[1].frags.is_empty()
    });
    assert_eq!(sk[0].frags[0].2, vec![7; 1020]);
    assert_eq!(sk[1].frags[0].2, vec![9; 1020]);
}

#[test]
fn bad_parameters_are_errors_naming_the_parameter() {
    let modex = LocalModex::new();
    let mem = MemoryAccounting::new();
    let e = init(
        &job(0, 1, "job-bad"),
        &modex,
        &mem,
        &[("btl_ud_fault_drop", "1.5")],
    )
    .err()
    .expect("init must fail")
    .to_string();
    assert!(
        e.contains("btl_ud_fault_drop") && e.contains("0 to 1"),
        "{e}"
    );
    let e = init(
        &job(0, 1, "job-bad"),
        &modex,
        &mem,
        &[("btl_ud_if_addr", "not-an-ip")],
    )
    .err()
    .expect("init must fail")
    .to_string();
    assert!(e.contains("btl_ud_if_addr"), "{e}");
    if soft() {
        let e = init(
            &job(0, 1, "job-bad"),
            &modex,
            &mem,
            &[("btl_ud_mtu", "100")],
        )
        .err()
        .expect("init must fail")
        .to_string();
        assert!(e.contains("btl_ud_mtu"), "{e}");
    }
}

#[test]
fn the_component_is_registered_with_its_parameters() {
    use rmca_framework::component::Framework;
    use rmca_framework::registry::Registry;
    // Naming the crate links it, so its inventory entry is present.
    let _ = &rmca_btl_ud::UD;
    let reg = Registry::builtin();
    assert!(
        reg.find(Framework::Btl, "ud").is_some(),
        "btl ud registered"
    );
    let names: Vec<String> = reg.param_specs().into_iter().map(|s| s.name).collect();
    for p in [
        "btl_ud_send_qps",
        "btl_ud_recv_buffers",
        "btl_ud_provider",
        "btl_ud_mtu",
        "btl_ud_if_addr",
        "btl_ud_fault_drop",
        "btl_ud_fault_duplicate",
        "btl_ud_fault_reorder",
        "btl_ud_fault_delay",
        "btl_ud_fault_corrupt",
        "btl_ud_fault_seed",
        "btl_ud_fault_blackhole_after",
    ] {
        assert!(names.iter().any(|n| n == p), "{p} registered");
    }
}

#[test]
fn soft_only_reorder_and_delay_faults_still_deliver_everything_once() {
    if !require_soft("fault injection") {
        return;
    }
    let f: &[(&str, &str)] = &[
        ("btl_ud_fault_reorder", "0.3"),
        ("btl_ud_fault_delay_rate", "0.2"),
        ("btl_ud_fault_delay", "500"),
        ("btl_ud_fault_seed", "7"),
    ];
    let mut btls = ranks("job-reorder", &[f, &[]]);
    let n = 64u32;
    for i in 0..n {
        btls[0]
            .send(
                1,
                tags::USER_BASE,
                &i.to_be_bytes(),
                &[],
                SendHint::default(),
            )
            .unwrap();
    }
    let mut sk = sinks(2);
    progress_until(&mut btls, &mut sk, |s| s[1].frags.len() >= n as usize);
    let seqs: Vec<u32> = sk[1]
        .frags
        .iter()
        .map(|(_, _, d)| u32::from_be_bytes(d[..4].try_into().unwrap()))
        .collect();
    let mut sorted_seqs = seqs.clone();
    sorted_seqs.sort_unstable();
    assert_eq!(sorted_seqs, (0..n).collect::<Vec<_>>());
    let c = counters(btls[0].as_ref());
    assert!(
        c["faults_reordered"] > 0 && c["faults_delayed"] > 0,
        "{c:?}"
    );
    assert_ne!(
        seqs, sorted_seqs,
        "UD does not keep order under reordering faults"
    );
}

#[test]
fn soft_only_with_fault_corrupt_damaged_fragments_reach_the_pml_or_are_dropped_so_it_must_checksum()
{
    if !require_soft("fault injection") {
        return;
    }
    // Corruption is injected on the receiving side (host-bus errors after the wire check).
    let corrupting: &[(&str, &str)] =
        &[("btl_ud_fault_corrupt", "1.0"), ("btl_ud_fault_seed", "3")];
    let mut btls = ranks("job-corrupt", &[&[], corrupting]);
    let n = 50u32;
    let sent: Vec<Vec<u8>> = (0..n).map(|i| pattern(0, i, 64)).collect();
    for d in &sent {
        btls[0]
            .send(1, tags::USER_BASE, d, &[], SendHint::default())
            .unwrap();
    }
    let mut sk = sinks(2);
    let dropped = |b: &dyn rmca_framework::btl::Btl| {
        let c = counters(b);
        c["drops_foreign"] + c["drops_wrong_job"] + c["drops_truncated"] + c["drops_unknown_source"]
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while (sk[1].frags.len() as u64) + dropped(btls[1].as_ref()) < u64::from(n) {
        progress_rounds(&mut btls, &mut sk, 1);
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            counters(btls[1].as_ref())
        );
    }
    assert_eq!(counters(btls[1].as_ref())["faults_corrupted"], u64::from(n));
    for (_, tag, data) in &sk[1].frags {
        assert!(
            *tag != tags::USER_BASE || !sent.contains(data),
            "every delivered fragment carries the flipped bit: the PML must checksum (NEED_CSUM)"
        );
    }
    assert!(
        !sk[1].frags.is_empty(),
        "most corruption hits the data, which only the PML can detect"
    );
}

#[test]
fn blackhole_after_n_kills_this_processs_path_silently_on_any_provider() {
    // Rank 0's sends die after 3 fragments: later sends are accepted (no error anywhere, as
    // with a dead network) and counted, never delivered; rank 1's direction keeps working.
    // The knob sits above the provider, so this holds on rdma (Soft-RoCE) as on soft.
    let cut: &[(&str, &str)] = &[("btl_ud_fault_blackhole_after", "3")];
    let mut btls = ranks("job-blackhole", &[cut, &[]]);
    for i in 0..8u8 {
        btls[0]
            .send(1, tags::USER_BASE, &[i], &[], SendHint::default())
            .expect("a black-holed send still succeeds locally");
    }
    let mut sk = sinks(2);
    progress_until(&mut btls, &mut sk, |s| s[1].frags.len() >= 3);
    btls[1]
        .send(0, tags::USER_BASE, b"back", &[], SendHint::default())
        .unwrap();
    progress_until(&mut btls, &mut sk, |s| !s[0].frags.is_empty());
    assert_eq!(sk[0].frags, vec![(1, tags::USER_BASE, b"back".to_vec())]);
    // The round trip above outlasts the first fragments' flight: later ones would be here too.
    progress_rounds(&mut btls, &mut sk, 20);
    let got: Vec<u8> = sk[1].frags.iter().map(|(_, _, d)| d[0]).collect();
    assert_eq!(
        got,
        vec![0, 1, 2],
        "only the fragments before the cut arrive"
    );
    let c0 = counters(btls[0].as_ref());
    assert_eq!((c0["frags_sent"], c0["faults_blackholed"]), (3, 5));
    assert_eq!(counters(btls[1].as_ref())["faults_blackholed"], 0);
    assert!(
        sk.iter().all(|s| s.failed.is_empty()),
        "nothing reports the death"
    );
}
