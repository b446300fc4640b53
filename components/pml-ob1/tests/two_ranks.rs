//! Two ob1 instances in one process over in-memory BTLs: matching, protocols, scheduling.

mod common;

use common::*;
use rmca_framework::btl::BtlFlags;
use rmca_framework::pml::{Pml, PmlError, RequestId, Source, StatusError, TagSel};
use rmca_pml_ob1::{Ob1Config, Scheduling};

fn one_rail(c: MemConfig) -> Vec<MemConfig> {
    vec![c]
}

#[test]
fn eager_messages_match_in_send_order_with_wildcards() {
    let (mut a, mut b, _) = pair(&one_rail(MemConfig::default()), Ob1Config::default());
    let m1 = pattern(10, 1);
    let m2 = pattern(20, 2);
    let m3 = pattern(30, 3);
    let s = [
        send(&mut a, &m1, 1, 5, 0),
        send(&mut a, &m2, 1, 6, 0),
        send(&mut a, &m3, 1, 5, 0),
    ];
    let (mut r1, mut r2, mut r3) = (vec![0u8; 64], vec![0u8; 64], vec![0u8; 64]);
    // Tag 6 first: skips the earlier tag-5 message; then wildcards take the rest in order.
    let r = [
        recv(&mut b, &mut r1, Source::Rank(0), TagSel::Tag(6), 0),
        recv(&mut b, &mut r2, Source::Any, TagSel::Any, 0),
        recv(&mut b, &mut r3, Source::Rank(0), TagSel::Any, 0),
    ];
    let st = wait_all(
        &mut a,
        &mut b,
        &[
            (Side::A, s[0]),
            (Side::A, s[1]),
            (Side::A, s[2]),
            (Side::B, r[0]),
            (Side::B, r[1]),
            (Side::B, r[2]),
        ],
    );
    assert_eq!((st[3].tag, st[3].len), (6, 20));
    assert_eq!((st[4].tag, st[4].len, st[4].source), (5, 10, 0));
    assert_eq!((st[5].tag, st[5].len), (5, 30));
    assert_eq!(&r1[..20], &m2[..]);
    assert_eq!(&r2[..10], &m1[..]);
    assert_eq!(&r3[..30], &m3[..]);
    assert!(st.iter().all(|s| s.error.is_none()));
}

#[test]
fn posted_receives_match_in_posting_order() {
    let (mut a, mut b, _) = pair(&one_rail(MemConfig::default()), Ob1Config::default());
    let mut bufs = vec![vec![0u8; 8]; 4];
    let mut reqs = Vec::new();
    let (x, rest) = bufs.split_at_mut(1);
    reqs.push((
        Side::B,
        recv(&mut b, &mut x[0], Source::Any, TagSel::Tag(1), 0),
    ));
    let (y, rest) = rest.split_at_mut(1);
    reqs.push((
        Side::B,
        recv(&mut b, &mut y[0], Source::Rank(0), TagSel::Tag(1), 0),
    ));
    let (z, w) = rest.split_at_mut(1);
    reqs.push((
        Side::B,
        recv(&mut b, &mut z[0], Source::Rank(0), TagSel::Any, 0),
    ));
    reqs.push((
        Side::B,
        recv(&mut b, &mut w[0], Source::Any, TagSel::Any, 0),
    ));
    for i in 0..4u8 {
        reqs.push((Side::A, send(&mut a, &[i; 8], 1, 1, 0)));
    }
    wait_all(&mut a, &mut b, &reqs);
    for (i, buf) in bufs.iter().enumerate() {
        assert_eq!(buf, &vec![i as u8; 8], "receive {i} got the wrong message");
    }
}

#[test]
fn any_source_takes_the_earliest_arrival_from_self_or_peer() {
    let (mut a, mut b, _) = pair(&one_rail(MemConfig::default()), Ob1Config::default());
    let s0 = send(&mut a, b"from zero", 1, 3, 0);
    drive(&mut a, &mut b, |_, b| {
        b.iprobe(0, Source::Any, TagSel::Any).unwrap().is_some()
    });
    let s1 = send(&mut b, b"from one!", 1, 3, 0);
    b.progress();
    let mut x = [0u8; 9];
    let mut y = [0u8; 9];
    let rx = recv(&mut b, &mut x, Source::Any, TagSel::Tag(3), 0);
    let ry = recv(&mut b, &mut y, Source::Any, TagSel::Tag(3), 0);
    let st = wait_all(
        &mut a,
        &mut b,
        &[(Side::A, s0), (Side::B, s1), (Side::B, rx), (Side::B, ry)],
    );
    assert_eq!((&x, st[2].source), (b"from zero", 0));
    assert_eq!((&y, st[3].source), (b"from one!", 1));
}

#[test]
fn contexts_are_isolated() {
    let (mut a, mut b, _) = pair(&one_rail(MemConfig::default()), Ob1Config::default());
    let s1 = send(&mut a, b"ctx1", 1, 0, 1);
    let s2 = send(&mut a, b"ctx2", 1, 0, 2);
    let mut x = [0u8; 4];
    let rx = recv(&mut b, &mut x, Source::Any, TagSel::Any, 2);
    wait_all(
        &mut a,
        &mut b,
        &[(Side::A, s1), (Side::A, s2), (Side::B, rx)],
    );
    assert_eq!(&x, b"ctx2");
    assert!(b.iprobe(3, Source::Any, TagSel::Any).unwrap().is_none());
    assert_eq!(
        b.iprobe(1, Source::Any, TagSel::Any)
            .unwrap()
            .map(|s| s.len),
        Some(4)
    );
}

#[test]
fn truncation_is_reported_and_never_writes_past_the_buffer() {
    // Copied, read (GET), and written in place as fragments arrive; the receive posted after
    // the send (unexpected) and before it (matched on arrival, the case placed in advance).
    for (flags, place_from) in [
        (BtlFlags::SEND, 0),
        (BtlFlags::SEND | BtlFlags::GET, 0),
        (BtlFlags::SEND, 64),
    ] {
        let (mut a, mut b, _) = pair(
            &one_rail(MemConfig {
                flags,
                place_from,
                ..MemConfig::default()
            }),
            Ob1Config::default(),
        );
        for (len, posted_first) in [
            (100usize, false),
            (3000, true),
            (300_000, false),
            (300_000, true),
        ] {
            let m = pattern(len, 9);
            let mut big = vec![0xEEu8; len / 2 + 8];
            let (s, r) = if posted_first {
                let r = recv(&mut b, &mut big[..len / 2], Source::Rank(0), TagSel::Any, 0);
                (send(&mut a, &m, 1, 0, 0), r)
            } else {
                let s = send(&mut a, &m, 1, 0, 0);
                (
                    s,
                    recv(&mut b, &mut big[..len / 2], Source::Rank(0), TagSel::Any, 0),
                )
            };
            let st = wait_all(&mut a, &mut b, &[(Side::A, s), (Side::B, r)]);
            assert_eq!(
                st[1].error(),
                Some(&StatusError::Truncated {
                    message_len: len,
                    received: len / 2
                })
            );
            assert_eq!(st[1].len, len / 2);
            assert_eq!(&big[..len / 2], &m[..len / 2]);
            assert!(
                big[len / 2..].iter().all(|&x| x == 0xEE),
                "wrote past the receive buffer"
            );
            assert!(st[0].error.is_none());
        }
    }
}

#[test]
fn zero_byte_messages_standard_and_synchronous() {
    let (mut a, mut b, _) = pair(&one_rail(MemConfig::default()), Ob1Config::default());
    let s = send(&mut a, &[], 1, 1, 0);
    let ss = ssend(&mut a, &[], 1, 2, 0);
    let mut empty: [u8; 0] = [];
    let mut e2: [u8; 0] = [];
    let r = recv(&mut b, &mut empty, Source::Rank(0), TagSel::Tag(1), 0);
    let r2 = recv(&mut b, &mut e2, Source::Rank(0), TagSel::Tag(2), 0);
    let st = wait_all(
        &mut a,
        &mut b,
        &[(Side::A, s), (Side::A, ss), (Side::B, r), (Side::B, r2)],
    );
    assert!(st.iter().all(|s| s.error.is_none() && s.len == 0));
}

#[test]
fn synchronous_send_completes_only_after_the_match() {
    let (mut a, mut b, _) = pair(&one_rail(MemConfig::default()), Ob1Config::default());
    let s = ssend(&mut a, b"sync", 1, 4, 0);
    for _ in 0..100 {
        a.progress();
        b.progress();
    }
    assert!(
        a.test(s).unwrap().is_none(),
        "ssend completed before any receive was posted"
    );
    let mut x = [0u8; 4];
    let r = recv(&mut b, &mut x, Source::Rank(0), TagSel::Tag(4), 0);
    wait_all(&mut a, &mut b, &[(Side::A, s), (Side::B, r)]);
    assert_eq!(&x, b"sync");
}

fn roundtrip_sizes(
    rails: Vec<MemConfig>,
    cfg: Ob1Config,
    sizes: &[usize],
) -> (rmca_pml_ob1::Ob1, rmca_pml_ob1::Ob1, Vec<LinkHandle>) {
    let (mut a, mut b, h) = pair(&rails, cfg);
    let msgs: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| pattern(n, i as u8))
        .collect();
    let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
    let mut reqs = Vec::new();
    // Half the receives are posted before the sends (expected path), half after (unexpected).
    let half = sizes.len() / 2;
    let (early, late) = bufs.split_at_mut(half);
    for (i, buf) in early.iter_mut().enumerate() {
        reqs.push((
            Side::B,
            recv(&mut b, buf, Source::Rank(0), TagSel::Tag(i as i32), 0),
        ));
    }
    for (i, m) in msgs.iter().enumerate() {
        reqs.push((Side::A, send(&mut a, m, 1, i as i32, 0)));
    }
    for _ in 0..3 {
        a.progress();
        b.progress();
    }
    for (j, buf) in late.iter_mut().enumerate() {
        reqs.push((
            Side::B,
            recv(
                &mut b,
                buf,
                Source::Rank(0),
                TagSel::Tag((half + j) as i32),
                0,
            ),
        ));
    }
    let st = wait_all(&mut a, &mut b, &reqs);
    assert!(st.iter().all(|s| s.error.is_none()), "{st:?}");
    for (i, (m, buf)) in msgs.iter().zip(&bufs).enumerate() {
        assert!(m == buf, "message {i} ({} bytes) corrupted", m.len());
    }
    (a, b, h)
}

const SIZES: &[usize] = &[
    0, 1, 4000, 4076, 4077, 5000, 65_535, 65_536, 300_000, 1_000_003,
];

#[test]
fn rendezvous_copy_pipeline() {
    let (a, b, _) = roundtrip_sizes(one_rail(MemConfig::default()), Ob1Config::default(), SIZES);
    assert!(counter(&a, "pml.ob1.rndv") > 0);
    assert!(counter(&b, "pml.ob1.frags_recv") > 0);
    assert_eq!(counter(&a, "pml.ob1.rget"), 0);
}

/// With a BTL whose limits are not multiples of 64, the rendezvous still cuts a message at
/// multiples of 64 bytes: every FRAG starts at the same offset within a cache line in the send
/// and the receive buffer, so that its copies run at full speed. FRAGs are no larger than the
/// BTL's pipeline_frag_size.
#[test]
fn copied_fragments_start_on_cache_line_offsets_of_the_message() {
    for (max_send_size, pipeline_frag, payload) in
        [(10_000, usize::MAX, 9920), (64 << 10, 5000, 4928)]
    {
        let rail = MemConfig {
            eager_limit: 4000,
            max_send_size,
            pipeline_frag,
            ..MemConfig::default()
        };
        let (_a, _b, h) = roundtrip_sizes(one_rail(rail), Ob1Config::default(), &[200_000]);
        let link = h[0].link.lock().unwrap();
        let mut offsets = Vec::new();
        for head in &link.sent[1] {
            if let Ok((rmca_pml_ob1::hdr::Repr::Frag { offset, .. }, _)) =
                rmca_pml_ob1::hdr::parse_any(head)
            {
                assert_eq!(offset % 64, 0, "FRAG at offset {offset}");
                offsets.push(offset as usize);
            }
        }
        assert!(offsets.len() > 10, "{} FRAGs", offsets.len());
        // Every FRAG but the last carries `payload` bytes.
        for w in offsets.windows(2) {
            assert_eq!(
                w[1] - w[0],
                payload,
                "limits {max_send_size}/{pipeline_frag}"
            );
        }
    }
}

/// A BTL that writes fragments in place as they arrive (btl-shm's streamed records): eager
/// messages for posted receives and FRAGs are taken early, the rest (unexpected messages,
/// RNDV) arrive whole; everything lands intact and in order (truncation: see
/// `truncation_is_reported_and_never_writes_past_the_buffer`).
#[test]
fn fragments_placed_as_they_arrive() {
    let rail = MemConfig {
        place_from: 200,
        ..MemConfig::default()
    };
    let (a, b, _) = roundtrip_sizes(one_rail(rail), Ob1Config::default(), SIZES);
    assert!(counter(&b, "pml.ob1.placed") > 0);
    assert!(counter(&a, "pml.ob1.placed") == 0);
}

/// A path that fails while a fragment is being placed: the receive completes with the error
/// only once the BTL reported the end of the placement (it still owns the buffer until then).
#[test]
fn a_path_failing_during_a_placement_fails_the_receive_after_it() {
    let rail = MemConfig {
        place_from: 200,
        ..MemConfig::default()
    };
    let (mut a, mut b, h) = pair(&one_rail(rail), Ob1Config::default());
    let m = pattern(3000, 2);
    let mut buf = vec![0u8; 3000];
    let r = recv(&mut b, &mut buf, Source::Rank(0), TagSel::Any, 0);
    let _s = send(&mut a, &m, 1, 0, 0);
    a.progress();
    b.progress(); // the placement starts: 64 bytes in, the rest pending
    assert!(
        b.test(r).unwrap().is_none(),
        "complete before the rest arrived"
    );
    assert_eq!(counter(&b, "pml.ob1.placed"), 1);
    h[0].broken
        .store(true, std::sync::atomic::Ordering::Relaxed);
    b.progress(); // the peer is reported failed, the placement not ended yet
    assert!(
        b.test(r).unwrap().is_none(),
        "completed while the BTL still writes"
    );
    b.progress();
    let st = b.test(r).unwrap().expect("failed");
    assert!(matches!(
        st.error(),
        Some(StatusError::PeerFailed { peer: 0, .. })
    ));
}

#[test]
fn rendezvous_rget() {
    let rail = MemConfig {
        flags: BtlFlags::SEND | BtlFlags::GET,
        rdma_frag: 100_000,
        ..MemConfig::default()
    };
    // Not measured: the receiver reads whatever is offered.
    let cfg = Ob1Config {
        adaptive_bulk: false,
        ..Ob1Config::default()
    };
    let (a, b, h) = roundtrip_sizes(one_rail(rail), cfg, SIZES);
    assert!(counter(&a, "pml.ob1.rget") > 0);
    assert!(h[0].gets() > 0);
    assert_eq!(counter(&b, "pml.ob1.frags_recv"), 0);
    assert_eq!(counter(&b, "pml.ob1.bulk_copy"), 0);
}

/// With `adaptive_bulk` (the default) the receiver of an offered read measures both ways:
/// while a size class warms up it reads a run of messages and has the next run sent through
/// the copy pipeline (declining the read with an ACK), and every message arrives intact.
#[test]
fn offered_reads_are_measured_against_the_copy_pipeline() {
    let rail = MemConfig {
        flags: BtlFlags::SEND | BtlFlags::GET,
        rdma_frag: 100_000,
        ..MemConfig::default()
    };
    let n = rmca_pml_ob1::bulk::RUN_LEN as u64;
    let sizes = vec![300_000; 2 * n as usize + 4];
    let (a, b, h) = roundtrip_sizes(one_rail(rail), Ob1Config::default(), &sizes);
    assert_eq!(
        counter(&a, "pml.ob1.rget"),
        2 * n + 4,
        "every send offers a read"
    );
    assert!(counter(&b, "pml.ob1.bulk_get") >= n);
    assert!(counter(&b, "pml.ob1.bulk_copy") >= n);
    assert_eq!(
        counter(&b, "pml.ob1.bulk_get") + counter(&b, "pml.ob1.bulk_copy"),
        2 * n + 4
    );
    assert!(h[0].gets() > 0);
    assert!(
        counter(&b, "pml.ob1.frags_recv") > 0,
        "declined reads were copied"
    );
}

#[test]
fn rget_disabled_by_parameter_uses_the_copy_pipeline() {
    let rail = MemConfig {
        flags: BtlFlags::SEND | BtlFlags::GET,
        ..MemConfig::default()
    };
    let (a, _, h) = roundtrip_sizes(
        one_rail(rail),
        Ob1Config {
            use_rget: false,
            ..Ob1Config::default()
        },
        &[300_000],
    );
    assert_eq!(counter(&a, "pml.ob1.rget"), 0);
    assert_eq!(h[0].gets(), 0);
}

#[test]
fn back_pressure_and_reordering_lose_nothing() {
    for flags in [BtlFlags::SEND, BtlFlags::SEND | BtlFlags::GET] {
        let rail = MemConfig {
            flags,
            would_block_every: 3,
            reorder: true,
            rdma_frag: 50_000,
            ..MemConfig::default()
        };
        let (a, b, _) = roundtrip_sizes(one_rail(rail), Ob1Config::default(), SIZES);
        assert!(counter(&a, "pml.ob1.would_block") > 0);
        assert!(
            counter(&b, "pml.ob1.out_of_order") > 0,
            "the reordering rail exercised the holding area"
        );
    }
}

fn two_rails(flags: BtlFlags) -> Vec<MemConfig> {
    vec![
        MemConfig {
            flags,
            bandwidth_mbps: 30_000,
            latency_ns: 500,
            reorder: true,
            rdma_frag: 64 * 1024,
            ..MemConfig::default()
        },
        MemConfig {
            flags,
            bandwidth_mbps: 10_000,
            latency_ns: 900,
            max_send_size: 32 * 1024,
            reorder: true,
            rdma_frag: 64 * 1024,
            ..MemConfig::default()
        },
    ]
}

#[test]
fn striping_splits_large_messages_by_bandwidth_weight() {
    for flags in [BtlFlags::SEND, BtlFlags::SEND | BtlFlags::GET] {
        let (_, _, h) = roundtrip_sizes(
            two_rails(flags),
            Ob1Config::default(),
            &[2_000_000, 3_000_001],
        );
        let (f0, f1) = (
            h[0].frags_to(1) + h[0].gets(),
            h[1].frags_to(1) + h[1].gets(),
        );
        assert!(f0 > 0 && f1 > 0, "both rails must carry data ({f0}, {f1})");
        let bytes = |i: usize| h[i].link.lock().unwrap().bytes[1];
        if flags == BtlFlags::SEND {
            let (b0, b1) = (bytes(0) as f64, bytes(1) as f64);
            let share = b0 / (b0 + b1);
            assert!(
                (0.65..0.85).contains(&share),
                "rail 0 carried {share:.2} of the bytes, weight is 0.75"
            );
        }
    }
}

#[test]
fn every_scheduling_policy_delivers_in_order() {
    for policy in [
        Scheduling::Binding,
        Scheduling::RoundRobin,
        Scheduling::Striping,
        Scheduling::Epc,
    ] {
        let cfg = Ob1Config {
            scheduling: policy,
            ..Ob1Config::default()
        };
        let sizes: Vec<usize> = (0..40)
            .map(|i| [8usize, 3000, 20_000, 200_000][i % 4])
            .collect();
        let (_, _, h) = roundtrip_sizes(two_rails(BtlFlags::SEND), cfg, &sizes);
        let used = (h[0].frags_to(1) > 0, h[1].frags_to(1) > 0);
        match policy {
            Scheduling::Binding => assert_eq!(used, (true, false), "binding uses one rail"),
            _ => assert_eq!(used, (true, true), "{policy} uses both rails"),
        }
    }
}

fn big_transfer(n: usize) {
    for flags in [BtlFlags::SEND | BtlFlags::GET, BtlFlags::SEND] {
        let rail = MemConfig {
            flags,
            max_send_size: 4 << 20,
            rdma_frag: 1 << 30,
            ..MemConfig::default()
        };
        let cfg = Ob1Config {
            send_pipeline_depth: 64,
            ..Ob1Config::default()
        };
        let (mut a, mut b, _) = pair(&[rail], cfg);
        let mut src = vec![0x5Au8; n];
        for (i, chunk) in src.chunks_mut(1 << 16).enumerate() {
            chunk[..8].copy_from_slice(&(i as u64).to_le_bytes());
        }
        let mut dst = vec![0u8; n];
        let s = send(&mut a, &src, 1, 0, 0);
        let r = recv(&mut b, &mut dst, Source::Rank(0), TagSel::Any, 0);
        let st = wait_all(&mut a, &mut b, &[(Side::A, s), (Side::B, r)]);
        assert_eq!((st[0].len, st[1].len), (n, n));
        assert!(src == dst, "{n}-byte message corrupted ({flags:?})");
    }
}

#[test]
fn one_gib_transfer() {
    big_transfer(1 << 30);
}

/// Lengths and offsets past 4 GiB (run by hand: needs about 11 GiB of memory).
#[test]
#[ignore = "needs ~11 GiB of RAM; run with --ignored"]
fn five_gib_transfer() {
    big_transfer(5 << 30);
}

#[test]
fn hundred_thousand_outstanding_requests() {
    const N: usize = 100_000;
    // Back-pressure too, so that queued work must not be retried quadratically.
    let rail = MemConfig {
        would_block_every: 50,
        ..MemConfig::default()
    };
    let (mut a, mut b, _) = pair(&one_rail(rail), Ob1Config::default());
    let payloads: Vec<[u8; 8]> = (0..N as u64).map(|i| i.to_le_bytes()).collect();
    let mut bufs = vec![[0u8; 8]; N];
    let mut reqs = Vec::with_capacity(2 * N);
    // Synchronous sends stay outstanding until matched; half the receives are posted first.
    for (i, buf) in bufs.iter_mut().enumerate().take(N / 2) {
        reqs.push((
            Side::B,
            recv(&mut b, buf, Source::Rank(0), TagSel::Tag((i % 5) as i32), 0),
        ));
    }
    for (i, p) in payloads.iter().enumerate() {
        reqs.push((Side::A, ssend(&mut a, p, 1, (i % 5) as i32, 0)));
    }
    for (i, buf) in bufs.iter_mut().enumerate().skip(N / 2) {
        reqs.push((
            Side::B,
            recv(&mut b, buf, Source::Rank(0), TagSel::Tag((i % 5) as i32), 0),
        ));
    }
    assert!(a.live_requests() >= N && b.live_requests() >= N);
    let st = wait_all(&mut a, &mut b, &reqs);
    assert!(st.iter().all(|s| s.error.is_none()));
    for (i, buf) in bufs.iter().enumerate() {
        assert_eq!(u64::from_le_bytes(*buf), i as u64);
    }
    assert_eq!(a.live_requests() + b.live_requests(), 0);
}

#[test]
fn foreign_and_malformed_fragments_are_dropped_and_counted() {
    let (mut a, mut b, h) = pair(&one_rail(MemConfig::default()), Ob1Config::default());
    h[0].inject(1, 0x99, b"not ours");
    h[0].inject(1, rmca_pml_ob1::engine::TAG, &[]);
    h[0].inject(1, rmca_pml_ob1::engine::TAG, &[1, 0, 0]);
    h[0].inject(1, rmca_pml_ob1::engine::TAG, &[42; 64]);
    // A FRAG and a FIN for requests that do not exist.
    let mut frag = [0u8; rmca_pml_ob1::hdr::FRAG_LEN + 4];
    rmca_pml_ob1::hdr::Repr::Frag {
        dst_req: 12345,
        offset: 0,
    }
    .emit(&mut frag)
    .unwrap();
    h[0].inject(1, rmca_pml_ob1::engine::TAG, &frag);
    let mut fin = [0u8; rmca_pml_ob1::hdr::FIN_LEN];
    rmca_pml_ob1::hdr::Repr::Fin {
        src_req: 1 << 32,
        failed: false,
    }
    .emit(&mut fin)
    .unwrap();
    h[0].inject(1, rmca_pml_ob1::engine::TAG, &fin);
    // A MATCH with a negative (reserved) tag.
    let mut m = [0u8; rmca_pml_ob1::hdr::MATCH_LEN];
    rmca_pml_ob1::hdr::Repr::Match(rmca_pml_ob1::hdr::MatchRepr {
        ctx: 0,
        tag: -1,
        seq: 0,
    })
    .emit(&mut m)
    .unwrap();
    h[0].inject(1, rmca_pml_ob1::engine::TAG, &m);
    // Headers name no source rank (a MATCH that once claimed another sender is now just a
    // MATCH): a well-formed one is a message from the peer the BTL delivered it from. Context
    // 5 keeps it apart from the real traffic below.
    let mut m = rmca_pml_ob1::hdr::emit_match(&rmca_pml_ob1::hdr::MatchRepr {
        ctx: 5,
        tag: 3,
        seq: 0,
    })
    .to_vec();
    m.extend_from_slice(b"hi");
    h[0].inject(1, rmca_pml_ob1::engine::TAG, &m);
    b.progress();
    assert_eq!(counter(&b, "pml.ob1.dropped_foreign"), 1);
    assert_eq!(counter(&b, "pml.ob1.dropped_malformed"), 4);
    assert_eq!(counter(&b, "pml.ob1.dropped_stray"), 2);
    let mut y = [0u8; 2];
    let r = recv(&mut b, &mut y, Source::Any, TagSel::Any, 5);
    let st = wait_all(&mut a, &mut b, &[(Side::B, r)]);
    assert_eq!((st[0].source, st[0].tag, &y), (0, 3, b"hi"));
    // The real traffic is unaffected.
    let s = send(&mut a, b"ok", 1, 0, 0);
    let mut x = [0u8; 2];
    let r = recv(&mut b, &mut x, Source::Rank(0), TagSel::Any, 0);
    wait_all(&mut a, &mut b, &[(Side::A, s), (Side::B, r)]);
    assert_eq!(&x, b"ok");
}

#[test]
fn a_failed_peer_completes_its_requests_with_an_error() {
    let (mut a, mut b, h) = pair(&one_rail(MemConfig::default()), Ob1Config::default());
    let big = pattern(100_000, 1);
    let s = send(&mut a, &big, 1, 0, 0); // rendezvous, waits for an ACK that never comes
    let mut x = [0u8; 8];
    let r = recv(&mut b, &mut x, Source::Rank(0), TagSel::Tag(77), 0);
    let mut y = [0u8; 8];
    let r_any = recv(&mut b, &mut y, Source::Any, TagSel::Tag(78), 0);
    h[0].broken
        .store(true, std::sync::atomic::Ordering::Relaxed);
    for _ in 0..3 {
        a.progress();
        b.progress();
    }
    let sa = a.test(s).unwrap().expect("send completed");
    assert!(matches!(
        sa.error(),
        Some(StatusError::PeerFailed { peer: 1, .. })
    ));
    let sb = b.test(r).unwrap().expect("receive completed");
    assert!(matches!(
        sb.error(),
        Some(StatusError::PeerFailed { peer: 0, .. })
    ));
    // New operations towards the dead peer fail at once instead of hanging.
    let s2 = send(&mut a, b"late", 1, 0, 0);
    assert!(a.test(s2).unwrap().unwrap().error.is_some());
    // ANY_SOURCE receives still work (self is alive).
    let s3 = send(&mut b, b"selfmsg!", 1, 78, 0);
    wait_all(&mut a, &mut b, &[(Side::B, s3), (Side::B, r_any)]);
    assert_eq!(&y, b"selfmsg!");
}

#[test]
fn cancel_a_posted_receive() {
    let (mut a, mut b, _) = pair(&one_rail(MemConfig::default()), Ob1Config::default());
    let mut x = [0u8; 4];
    let r = recv(&mut b, &mut x, Source::Rank(0), TagSel::Tag(1), 0);
    assert!(b.cancel(r).unwrap());
    assert_eq!(
        b.test(r).unwrap().unwrap().error(),
        Some(&StatusError::Cancelled)
    );
    assert!(b.test(r).is_err(), "a tested request id is released");
    let s = send(&mut a, b"next", 1, 1, 0);
    let mut y = [0u8; 4];
    let r2 = recv(&mut b, &mut y, Source::Rank(0), TagSel::Tag(1), 0);
    wait_all(&mut a, &mut b, &[(Side::A, s), (Side::B, r2)]);
    assert_eq!(&y, b"next");
}

/// Sends are not cancellable (an eager message went to a BTL at the start, a rendezvous or
/// synchronous send announced itself), nor is a receive that matched: each completes normally.
#[test]
fn sends_and_matched_receives_are_not_cancelled() {
    let (mut a, mut b, _) = pair(&one_rail(MemConfig::default()), Ob1Config::default());
    let big = pattern(300_000, 5);
    let sync = ssend(&mut a, b"sync", 1, 3, 0);
    let rndv = send(&mut a, &big, 1, 4, 0);
    for _ in 0..50 {
        a.progress();
        b.progress();
    }
    assert!(
        !a.cancel(sync).unwrap(),
        "a synchronous send is not cancelled"
    );
    assert!(
        !a.cancel(rndv).unwrap(),
        "a rendezvous send is not cancelled"
    );
    // Both have arrived (probed): the receives match when posted.
    assert!(b
        .iprobe(0, Source::Rank(0), TagSel::Tag(4))
        .unwrap()
        .is_some());
    let (mut x, mut y) = ([0u8; 4], vec![0u8; big.len()]);
    let r1 = recv(&mut b, &mut x, Source::Rank(0), TagSel::Tag(3), 0);
    let r2 = recv(&mut b, &mut y, Source::Any, TagSel::Any, 0);
    assert!(
        !b.cancel(r1).unwrap() && !b.cancel(r2).unwrap(),
        "matched receives"
    );
    let st = wait_all(
        &mut a,
        &mut b,
        &[
            (Side::A, sync),
            (Side::A, rndv),
            (Side::B, r1),
            (Side::B, r2),
        ],
    );
    assert!(st.iter().all(|s| s.error.is_none()), "{st:?}");
    assert_eq!((&x, &y), (b"sync", &big));
}

#[test]
fn bad_arguments_are_errors() {
    let (mut a, _, _) = pair(&one_rail(MemConfig::default()), Ob1Config::default());
    use rmca_framework::buffer::UserBuf;
    use rmca_framework::pml::{PmlError, RecvArgs, SendArgs};
    let e = a.isend(SendArgs {
        buf: UserBuf::empty(),
        dest: 5,
        tag: 0,
        context: 0,
        mode: Default::default(),
        pattern: Default::default(),
    });
    assert!(matches!(e, Err(PmlError::BadRank { rank: 5, size: 2 })));
    let e = a.isend(SendArgs {
        buf: UserBuf::empty(),
        dest: 1,
        tag: -3,
        context: 0,
        mode: Default::default(),
        pattern: Default::default(),
    });
    assert!(matches!(e, Err(PmlError::BadTag(-3))));
    let ro = [0u8; 4];
    let e = a.irecv(RecvArgs {
        buf: lend(&ro),
        source: Source::Any,
        tag: TagSel::Any,
        context: 0,
        pattern: Default::default(),
    });
    assert!(e.unwrap_err().to_string().contains("read-only"));
}

#[test]
fn eager_uses_the_lowest_latency_rail_and_bulk_the_highest_bandwidth() {
    let rails = vec![
        MemConfig {
            bandwidth_mbps: 40_000,
            latency_ns: 2000,
            ..MemConfig::default()
        },
        MemConfig {
            bandwidth_mbps: 1_000,
            latency_ns: 100,
            ..MemConfig::default()
        },
    ];
    let cfg = Ob1Config {
        scheduling: Scheduling::Binding,
        ..Ob1Config::default()
    };
    let (mut a, mut b, h) = pair(&rails, cfg);
    let small = pattern(100, 1);
    let s = send(&mut a, &small, 1, 0, 0);
    let mut x = vec![0u8; 100];
    let r = recv(&mut b, &mut x, Source::Rank(0), TagSel::Any, 0);
    wait_all(&mut a, &mut b, &[(Side::A, s), (Side::B, r)]);
    assert_eq!(
        (h[0].frags_to(1), h[1].frags_to(1)),
        (0, 1),
        "eager went to the low-latency rail"
    );
    let big = pattern(1_000_000, 2);
    let s = send(&mut a, &big, 1, 0, 0);
    let mut y = vec![0u8; 1_000_000];
    let r = recv(&mut b, &mut y, Source::Rank(0), TagSel::Any, 0);
    wait_all(&mut a, &mut b, &[(Side::A, s), (Side::B, r)]);
    assert!(y == big);
    // RNDV header on the eager rail, every FRAG on the high-bandwidth one.
    assert_eq!(h[1].frags_to(1), 2);
    assert!(h[0].frags_to(1) >= 1_000_000 / (64 * 1024));
}

#[test]
fn unreliable_btls_are_refused_with_advice() {
    use rmca_framework::bml::Bml;
    use rmca_framework::btl::Btl;
    use rmca_framework::modex::LocalModex;
    use rmca_framework::rank::ProcInfo;
    let rail = MemConfig {
        flags: BtlFlags::SEND | BtlFlags::NEED_ACK,
        ..MemConfig::default()
    };
    let procs: Vec<ProcInfo> = (0..2)
        .map(|r| ProcInfo {
            rank: r,
            node: 0,
            is_self: r == 0,
        })
        .collect();
    let btls: Vec<Box<dyn Btl>> = vec![
        Box::new(rmca_btl_self::BtlSelf::new(Default::default())),
        Box::new(MemBtl::new(0, rail, LinkHandle::default())),
    ];
    let bml = Bml::build(btls, &procs, &LocalModex::new()).unwrap();
    let err = rmca_pml_ob1::check_reliable(&bml).unwrap_err().to_string();
    assert!(err.contains("pml dr") && err.contains("btl mem"), "{err}");
    // The switch that accepts such BTLs anyway is named in the advice.
    assert!(err.contains("pml_ob1_unreliable_btls"), "{err}");
    assert_eq!(
        rmca_pml_ob1::unreliable_btl_in_use(&bml).as_deref(),
        Some("mem")
    );
}

#[test]
fn a_send_blocked_on_a_full_btl_is_not_progress() {
    // The wait loop backs off (and yields on an oversubscribed node) only after passes that
    // found nothing to do: a sender retrying into a full ring must report none, or it would
    // spin forever while the receiver, maybe on the same core, never gets to drain it.
    let (mut a, mut b, h) = pair(&one_rail(MemConfig::default()), Ob1Config::default());
    let big = pattern(1 << 20, 3);
    let mut y = vec![0u8; big.len()];
    let s = send(&mut a, &big, 1, 5, 0);
    let r = recv(&mut b, &mut y, Source::Rank(0), TagSel::Tag(5), 0);
    // Run until fragments flow, then fill the link.
    while h[0].frags_to(1) < 4 {
        a.progress();
        b.progress();
    }
    h[0].full.store(true, std::sync::atomic::Ordering::Relaxed);
    a.progress();
    for _ in 0..10 {
        assert_eq!(
            a.progress(),
            0,
            "a pass that only met a full BTL counted as progress"
        );
    }
    h[0].full.store(false, std::sync::atomic::Ordering::Relaxed);
    wait_all(&mut a, &mut b, &[(Side::A, s), (Side::B, r)]);
    assert!(y == big);
}

#[test]
fn a_peer_reached_reliably_drops_its_unreliable_routes() {
    use rmca_framework::bml::Bml;
    use rmca_framework::btl::Btl;
    use rmca_framework::modex::LocalModex;
    use rmca_framework::rank::ProcInfo;
    // Two network rails of one exclusivity to the peer, one needing acknowledgements (as ud
    // next to rc between nodes): ob1 keeps the reliable one and runs.
    let lossy = MemConfig {
        flags: BtlFlags::SEND | BtlFlags::NEED_ACK,
        ..MemConfig::default()
    };
    let procs: Vec<ProcInfo> = (0..2)
        .map(|r| ProcInfo {
            rank: r,
            node: 0,
            is_self: r == 0,
        })
        .collect();
    let btls: Vec<Box<dyn Btl>> = vec![
        Box::new(rmca_btl_self::BtlSelf::new(Default::default())),
        Box::new(MemBtl::new(0, lossy, LinkHandle::default())),
        Box::new(MemBtl::new(0, MemConfig::default(), LinkHandle::default())),
    ];
    let mut bml = Bml::build(btls, &procs, &LocalModex::new()).unwrap();
    let used = |bml: &Bml| -> Vec<usize> {
        let r = bml.routes(1);
        let mut v: Vec<usize> = r
            .eager
            .iter()
            .chain(&r.send)
            .chain(&r.rdma)
            .map(|x| x.btl)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    assert_eq!(used(&bml), vec![1, 2], "both rails reach the peer before");
    assert!(rmca_pml_ob1::check_reliable(&bml).is_err());
    rmca_pml_ob1::prefer_reliable_routes(&mut bml);
    assert_eq!(used(&bml), vec![2], "only the reliable rail is left");
    rmca_pml_ob1::check_reliable(&bml).unwrap();
    // Rank 0's route to itself (btl self) is untouched.
    assert_eq!(bml.routes(0).eager.len(), 1);
}

#[test]
fn start_send_completes_eager_at_once_and_keeps_order_under_back_pressure() {
    use rmca_framework::pml::{SendArgs, SendMode, SendStart};
    // Every third BTL send is refused: those sends become requests, and the later sends to
    // the same peer queue behind them (no overtaking) until the refused ones went out.
    let rail = MemConfig {
        would_block_every: 3,
        ..MemConfig::default()
    };
    let (mut a, mut b, _) = pair(&one_rail(rail), Ob1Config::default());
    let msgs: Vec<[u8; 4]> = (0..60u32).map(|i| i.to_le_bytes()).collect();
    let (mut done, mut reqs) = (0, Vec::new());
    for m in &msgs {
        let started = a
            .start_send(SendArgs {
                buf: lend(m),
                dest: 1,
                tag: 9,
                context: 0,
                mode: SendMode::Standard,
                pattern: Default::default(),
            })
            .unwrap();
        match started {
            SendStart::Done => done += 1,
            SendStart::Pending(id) => reqs.push((Side::A, id)),
        }
    }
    assert!(
        done > 0,
        "eager sends the BTL took complete without a request"
    );
    assert!(!reqs.is_empty(), "refused sends are kept as requests");
    assert_eq!(a.live_requests(), reqs.len());
    let mut bufs = vec![[0u8; 4]; msgs.len()];
    for buf in bufs.iter_mut() {
        let id = recv(&mut b, buf, Source::Rank(0), TagSel::Tag(9), 0);
        reqs.push((Side::B, id));
    }
    let st = wait_all(&mut a, &mut b, &reqs);
    assert!(st.iter().all(|s| s.error.is_none()));
    assert_eq!(bufs, msgs, "every message arrived once, in send order");
    assert_eq!(counter(&a, "pml.ob1.sent_msgs_le64"), msgs.len() as u64);
    assert_eq!(counter(&b, "pml.ob1.recv_msgs_le64"), msgs.len() as u64);
    assert_eq!(a.live_requests(), 0);
}

#[test]
fn traffic_counters_count_only_when_profiling() {
    // Counted by size class with `--mca profile 1` (the harness's setting); off, the message
    // paths skip them and they stay 0, while the protocol counters still count.
    let (a, b, _) = pair(&one_rail(MemConfig::default()), Ob1Config::default());
    let (mut a, mut b) = (
        a.with_traffic_counters(false),
        b.with_traffic_counters(false),
    );
    let mut x = [0u8; 8];
    let r = recv(&mut b, &mut x, Source::Rank(0), TagSel::Tag(1), 0);
    let s = send(&mut a, b"8 bytes!", 1, 1, 0);
    wait_all(&mut a, &mut b, &[(Side::A, s), (Side::B, r)]);
    assert_eq!(&x, b"8 bytes!");
    for (p, name) in [
        (&a, "pml.ob1.sent_msgs_le64"),
        (&a, "pml.ob1.eager"),
        (&b, "pml.ob1.recv_msgs_le64"),
        (&b, "pml.ob1.recv_bytes_le64"),
    ] {
        assert_eq!(counter(p, name), 0, "{name} counted without profiling");
    }
    assert_eq!(counter(&b, "pml.ob1.matched_on_arrival"), 1);

    let (mut a, mut b, _) = pair(&one_rail(MemConfig::default()), Ob1Config::default());
    let r = recv(&mut b, &mut x, Source::Rank(0), TagSel::Tag(1), 0);
    let s = send(&mut a, b"8 bytes!", 1, 1, 0);
    wait_all(&mut a, &mut b, &[(Side::A, s), (Side::B, r)]);
    assert_eq!(counter(&a, "pml.ob1.sent_msgs_le64"), 1);
    assert_eq!(counter(&b, "pml.ob1.recv_bytes_le64"), 8);
}

#[test]
fn a_blocking_wait_stops_delivery_once_its_request_completed() {
    // The BTL is told to stop as soon as the awaited receive completed, so a waiting rank
    // gets its message back without the BTL looking for more; the rest arrives later.
    let (mut a, mut b, _) = pair(&one_rail(MemConfig::default()), Ob1Config::default());
    let mut bufs = [[0u8; 4]; 3];
    let [x, y, z] = &mut bufs;
    let r0 = recv(&mut b, x, Source::Rank(0), TagSel::Tag(5), 0);
    let r1 = recv(&mut b, y, Source::Rank(0), TagSel::Tag(5), 0);
    let r2 = recv(&mut b, z, Source::Rank(0), TagSel::Tag(5), 0);
    for m in [b"msg0", b"msg1", b"msg2"] {
        let s = send(&mut a, m, 1, 5, 0);
        assert!(a.test(s).unwrap().is_some(), "eager sends complete at once");
    }
    let st = b.wait(r0, None).unwrap();
    assert_eq!(st.len, 4);
    assert!(
        b.test(r1).unwrap().is_none(),
        "delivery stopped after the awaited one"
    );
    let st2 = b.wait(r2, None).unwrap();
    assert_eq!(st2.len, 4);
    assert!(
        b.test(r1).unwrap().is_some(),
        "waiting for the last took the rest"
    );
    assert_eq!(&bufs, &[*b"msg0", *b"msg1", *b"msg2"]);
}

#[test]
fn wait_all_releases_every_request_and_reports_only_the_failures() {
    let (mut a, mut b, _) = pair(&one_rail(MemConfig::default()), Ob1Config::default());
    let (mut x, mut y, mut z) = ([0u8; 8], [0u8; 3], [0u8; 8]);
    let r0 = recv(&mut b, &mut x, Source::Rank(0), TagSel::Tag(1), 0);
    let r1 = recv(&mut b, &mut y, Source::Rank(0), TagSel::Tag(1), 0);
    let r2 = recv(&mut b, &mut z, Source::Rank(0), TagSel::Tag(1), 0);
    for m in [b"first-8B", b"second!!", b"third-8B"] {
        send(&mut a, m, 1, 1, 0);
    }
    // An id nobody issued sits in the middle: the others are still waited for and released.
    let bogus = RequestId(u64::MAX);
    let mut failed = Vec::new();
    let outcome = b.wait_all(&[r0, r1, bogus, r2], None, &mut failed);
    assert!(
        matches!(outcome, Err(PmlError::UnknownRequest(id)) if id == bogus),
        "{outcome:?}"
    );
    assert_eq!(
        failed.len(),
        1,
        "only the truncated receive reports: {failed:?}"
    );
    let (index, st) = &failed[0];
    assert_eq!(*index, 1);
    assert_eq!(
        st.error(),
        Some(&StatusError::Truncated {
            message_len: 8,
            received: 3
        })
    );
    assert_eq!((st.source, st.tag, st.len), (0, 1, 3));
    assert_eq!((&x, &y, &z), (b"first-8B", b"sec", b"third-8B"));
    for r in [r0, r1, r2] {
        assert!(b.test(r).is_err(), "request {r:?} was not released");
    }
    assert_eq!(b.live_requests(), 0);
}

#[test]
fn wait_all_statuses_reports_every_status_in_order_and_releases_every_request() {
    // MPI_Waitall with an array of statuses: successes report too, the failure with its
    // error, in the order of the window; an unknown id is skipped and reported at the end.
    let (mut a, mut b, _) = pair(&one_rail(MemConfig::default()), Ob1Config::default());
    let (mut x, mut y, mut z) = ([0u8; 8], [0u8; 3], [0u8; 8]);
    let r0 = recv(&mut b, &mut x, Source::Any, TagSel::Any, 0);
    let r1 = recv(&mut b, &mut y, Source::Rank(0), TagSel::Tag(2), 0);
    let r2 = recv(&mut b, &mut z, Source::Rank(0), TagSel::Any, 0);
    for (m, tag) in [(&b"first-8B"[..], 1), (b"second!!", 2), (b"third", 3)] {
        send(&mut a, m, 1, tag, 0);
    }
    let bogus = RequestId(u64::MAX);
    let mut statuses = Vec::new();
    let outcome = b.wait_all_statuses(&[r0, r1, bogus, r2], None, &mut statuses);
    assert!(
        matches!(outcome, Err(PmlError::UnknownRequest(id)) if id == bogus),
        "{outcome:?}"
    );
    let got: Vec<_> = statuses
        .iter()
        .map(|(i, st)| (*i, st.source, st.tag, st.len, st.error().cloned()))
        .collect();
    let truncated = StatusError::Truncated {
        message_len: 8,
        received: 3,
    };
    assert_eq!(
        got,
        [
            (0, 0, 1, 8, None),
            (1, 0, 2, 3, Some(truncated)),
            (3, 0, 3, 5, None)
        ]
    );
    assert_eq!((&x, &y, &z[..5]), (b"first-8B", b"sec", &b"third"[..]));
    for r in [r0, r1, r2] {
        assert!(b.test(r).is_err(), "request {r:?} was not released");
    }
    assert_eq!(b.live_requests(), 0);
}

#[test]
fn wait_all_takes_a_window_and_leaves_the_next_message_in_the_btl() {
    // Delivery goes on until the last request of the batch completed, then stops: a message
    // for a receive outside the batch stays in the BTL.
    let (mut a, mut b, _) = pair(&one_rail(MemConfig::default()), Ob1Config::default());
    let mut bufs = [[0u8; 4]; 4];
    let [w, x, y, z] = &mut bufs;
    let r: Vec<RequestId> = [w, x, y, z]
        .into_iter()
        .map(|buf| recv(&mut b, buf, Source::Rank(0), TagSel::Tag(5), 0))
        .collect();
    for m in [b"msg0", b"msg1", b"msg2", b"msg3"] {
        send(&mut a, m, 1, 5, 0);
    }
    let mut failed = Vec::new();
    b.wait_all(&r[..3], None, &mut failed).unwrap();
    assert!(failed.is_empty());
    assert!(
        b.test(r[3]).unwrap().is_none(),
        "delivery stopped after the batch's last request"
    );
    b.wait_all(&r[3..], None, &mut failed).unwrap();
    assert_eq!(&bufs, &[*b"msg0", *b"msg1", *b"msg2", *b"msg3"]);
}
