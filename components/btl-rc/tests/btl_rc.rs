//! btl-rc modules in one process exchanging fragments over the configured verbs provider.

mod common;

use common::*;
use rmca_framework::btl::{
    Btl, CommPattern, CompletionToken, MemAccess, RemoteSegment, SendError, SendHint,
};
use rmca_framework::buffer::UserBuf;

// SAFETY (lend, lend_mut): the memory lent stays borrowed here until the operation using it
// has completed (every caller waits for its operations before its buffers go).
fn lend(v: &[u8]) -> UserBuf {
    unsafe { UserBuf::from_slice(v) }
}
fn lend_mut(v: &mut [u8]) -> UserBuf {
    unsafe { UserBuf::from_mut_slice(v) }
}

const TAG: u8 = 0x41;

fn hint(len: usize) -> SendHint {
    SendHint {
        pattern: CommPattern::Blocking,
        message_len: len,
    }
}

fn sinks(n: usize) -> Vec<Sink> {
    (0..n).map(|_| Sink::default()).collect()
}

/// Check that rank `to` got `count` messages from `from` in order with the expected bytes.
fn check_in_order(s: &Sink, from: u32, lens: &[usize]) {
    let got = &s.got[&from];
    assert_eq!(got.len(), lens.len());
    for (i, (tag, data)) in got.iter().enumerate() {
        assert_eq!(*tag, TAG);
        let mut want = (i as u32).to_le_bytes().to_vec();
        want.extend(payload(from, i, lens[i]));
        assert_eq!(data, &want, "message {i} from {from}");
    }
}

fn lens(n: usize) -> Vec<usize> {
    (0..n)
        .map(|i| [0, 1, 8, 100, 1000, 5000, 12_000][i % 7])
        .collect()
}

#[test]
fn on_demand_connects_on_first_send_and_keeps_order() {
    // One receive queue, so one QP per connection (a P+S spec has two).
    let (mut b, _m) = ranks("od", 2, &[("btl_rc_receive_queues", "P,32,16")]);
    let mut s = sinks(2);
    assert_eq!(counter(b[0].as_ref(), "qps_now"), 0, "no QP before traffic");
    assert_eq!(counter(b[1].as_ref(), "qps_now"), 0);
    let l = lens(3000);
    for (i, len) in l.iter().enumerate() {
        let hdr = (i as u32).to_le_bytes();
        send_retry(
            &mut b,
            &mut s,
            0,
            1,
            TAG,
            &hdr,
            &payload(0, i, *len),
            hint(*len),
        );
    }
    run_until(&mut b, &mut s, "3000 fragments", |s| {
        s[1].got.get(&0).map_or(0, Vec::len) == 3000
    });
    check_in_order(&s[1], 0, &l);
    assert_eq!(counter(b[0].as_ref(), "qps_now"), 1);
    assert_eq!(
        counter(b[1].as_ref(), "qps_now"),
        1,
        "the receiver connected on demand"
    );
    assert!(
        counter(b[0].as_ref(), "fragments_queued") > 0,
        "sends queued while connecting"
    );
    // The reverse direction reuses the connection.
    send_retry(
        &mut b,
        &mut s,
        1,
        0,
        TAG,
        &0u32.to_le_bytes(),
        &payload(1, 0, 0),
        hint(0),
    );
    run_until(&mut b, &mut s, "reply", |s| s[0].got.contains_key(&1));
    assert_eq!(counter(b[1].as_ref(), "connect_requests"), 0);
    assert_eq!(counter(b[0].as_ref(), "connections"), 1);
}

#[test]
fn simultaneous_connects_resolve_to_one_connection() {
    for qps in ["1", "3"] {
        let (mut b, _m) = ranks(
            "sim",
            2,
            &[
                ("btl_rc_qps_per_peer", qps),
                ("btl_rc_qp_policy", "round_robin"),
                ("btl_rc_receive_queues", "P,32,16"),
            ],
        );
        let mut s = sinks(2);
        let l = lens(200);
        // Both sides send before either progresses: both REQs cross.
        for (i, len) in l.iter().enumerate() {
            for from in 0..2u32 {
                let hdr = (i as u32).to_le_bytes();
                b[from as usize]
                    .send(1 - from, TAG, &hdr, &payload(from, i, *len), hint(*len))
                    .unwrap();
            }
        }
        run_until(&mut b, &mut s, "both directions", |s| {
            s[0].got.get(&1).map_or(0, Vec::len) == 200
                && s[1].got.get(&0).map_or(0, Vec::len) == 200
        });
        check_in_order(&s[1], 0, &l);
        check_in_order(&s[0], 1, &l);
        let n: u64 = qps.parse().unwrap();
        for r in &b {
            assert_eq!(
                counter(r.as_ref(), "qps_now"),
                n,
                "one connection, no duplicate QPs"
            );
            assert_eq!(counter(r.as_ref(), "connections"), 1);
        }
        assert!(
            counter(b[0].as_ref(), "connect_collisions")
                + counter(b[1].as_ref(), "connect_collisions")
                > 0,
            "the REQs crossed"
        );
    }
}

#[test]
fn three_ranks_static_and_zero_byte_payloads() {
    let (mut b, _m) = ranks(
        "st",
        3,
        &[
            ("btl_rc_connect", "static"),
            ("btl_rc_receive_queues", "P,32,16"),
        ],
    );
    let mut s = sinks(3);
    for (from, to) in [(0, 1), (0, 2), (1, 2), (2, 0), (1, 0), (2, 1)] {
        for i in 0..50usize {
            let hdr = (i as u32).to_le_bytes();
            send_retry(
                &mut b,
                &mut s,
                from,
                to as u32,
                TAG,
                &hdr,
                &payload(from as u32, i, 0),
                hint(0),
            );
        }
    }
    run_until(&mut b, &mut s, "all pairs", |s| {
        s.iter()
            .all(|x| x.got.values().map(Vec::len).sum::<usize>() == 100)
    });
    for to in 0..3usize {
        for from in 0..3u32 {
            if from as usize != to {
                check_in_order(&s[to], from, &[0; 50]);
            }
        }
        assert_eq!(
            counter(b[to].as_ref(), "qps_now"),
            2,
            "static: a QP to every peer"
        );
    }
}

#[test]
fn send_wqe_exhaustion_coalesces_queued_small_sends() {
    for (coalescing, wqes) in [("true", "5"), ("false", "5"), ("true", "200")] {
        let (mut b, _m) = ranks(
            "co",
            2,
            &[
                ("btl_rc_send_wqes", wqes),
                ("btl_rc_coalescing", coalescing),
            ],
        );
        let mut s = sinks(2);
        // Connect first so the burst meets the WQE budget, not the handshake.
        send_retry(
            &mut b,
            &mut s,
            0,
            1,
            TAG,
            &0u32.to_le_bytes(),
            &payload(0, 0, 8),
            hint(8),
        );
        run_until(&mut b, &mut s, "first", |s| s[1].got.contains_key(&0));
        let n = 2000;
        let mut l = vec![8usize];
        for i in 1..n {
            let len = if i % 500 == 0 { 40_000 } else { 8 + i % 24 };
            l.push(len);
            let hdr = (i as u32).to_le_bytes();
            send_retry(
                &mut b,
                &mut s,
                0,
                1,
                TAG,
                &hdr,
                &payload(0, i, len),
                hint(len),
            );
        }
        run_until(&mut b, &mut s, "burst", |s| s[1].got[&0].len() == n);
        check_in_order(&s[1], 0, &l);
        let packed = counter(b[0].as_ref(), "coalesced_messages");
        match (coalescing, wqes) {
            ("true", "5") => {
                assert!(
                    counter(b[0].as_ref(), "send_wqe_stalls") > 0,
                    "budget exhausted"
                );
                assert!(packed > 0, "queued sends were coalesced");
            }
            ("false", _) => assert_eq!(packed, 0),
            _ => {}
        }
    }
}

#[test]
fn cached_header_flag_for_repeated_headers() {
    let (mut b, _m) = ranks("ch", 2, &[("btl_rc_send_wqes", "1")]);
    let mut s = sinks(2);
    for i in 0..300usize {
        send_retry(
            &mut b,
            &mut s,
            0,
            1,
            TAG,
            b"SAMEHEADER",
            &payload(0, i, 4),
            hint(4),
        );
    }
    run_until(&mut b, &mut s, "all", |s| {
        s[1].got.get(&0).map_or(0, Vec::len) == 300
    });
    for (i, (_, d)) in s[1].got[&0].iter().enumerate() {
        let mut want = b"SAMEHEADER".to_vec();
        want.extend(payload(0, i, 4));
        assert_eq!(d, &want);
    }
    assert!(counter(b[0].as_ref(), "cached_headers") > 0);
}

#[test]
fn srq_exhaustion_triggers_low_watermark_refill() {
    let (mut b, _m) = ranks(
        "srq",
        2,
        &[
            ("btl_rc_receive_queues", "S,8,4,16,512"),
            ("btl_rc_coalescing", "false"),
        ],
    );
    let mut s = sinks(2);
    assert_eq!(
        counter(b[1].as_ref(), "recv_buffers_allocated"),
        0,
        "no SRQ buffer before the module carries traffic"
    );
    // The BML routing a peer over rank 1's module creates its SRQ; rank 0's is created at
    // its first connection.
    b[1].peers_routed(&[0]);
    let before = counter(b[1].as_ref(), "recv_buffers_allocated");
    assert_eq!(before, 8);
    let n = 600;
    let l: Vec<usize> = (0..n).map(|i| 64 + i % 100).collect();
    for (i, len) in l.iter().enumerate() {
        let hdr = (i as u32).to_le_bytes();
        send_retry(
            &mut b,
            &mut s,
            0,
            1,
            TAG,
            &hdr,
            &payload(0, i, *len),
            hint(*len),
        );
    }
    // Let the sender push while the receiver does not poll: the SRQ drains (RNR covers it).
    let t = std::time::Instant::now();
    while t.elapsed() < std::time::Duration::from_millis(300) {
        b[0].progress(&mut s[0]);
    }
    run_until(&mut b, &mut s, "all through the SRQ", |s| {
        s[1].got.get(&0).map_or(0, Vec::len) == n
    });
    check_in_order(&s[1], 0, &l);
    assert!(
        counter(b[1].as_ref(), "srq_low_watermark_events") > 0,
        "low watermark fired"
    );
    assert!(
        counter(b[1].as_ref(), "recv_buffers_allocated") > before,
        "the pool grew"
    );
}

#[test]
fn per_peer_credits_flow_without_loss() {
    let (mut b, _m) = ranks(
        "cr",
        2,
        &[
            ("btl_rc_receive_queues", "P,4,2"),
            ("btl_rc_coalescing", "false"),
        ],
    );
    let mut s = sinks(2);
    let l: Vec<usize> = (0..1000).map(|i| i % 300).collect();
    for (i, len) in l.iter().enumerate() {
        let hdr = (i as u32).to_le_bytes();
        send_retry(
            &mut b,
            &mut s,
            0,
            1,
            TAG,
            &hdr,
            &payload(0, i, *len),
            hint(*len),
        );
    }
    run_until(&mut b, &mut s, "credited", |s| {
        s[1].got.get(&0).map_or(0, Vec::len) == 1000
    });
    check_in_order(&s[1], 0, &l);
    assert!(
        counter(b[0].as_ref(), "credit_stalls") > 0,
        "the window of 4 closed"
    );
    assert!(
        counter(b[1].as_ref(), "credit_messages") > 0,
        "credits returned explicitly"
    );
}

/// Both receive queue kinds at once, in both orders: fragments up to the first queue's size
/// go over its QPs, larger ones over the second's, and one ordered stream comes out.
#[test]
fn combined_per_peer_and_shared_receive_queues() {
    for (spec, small_per_peer) in [
        ("P,300,4,2:S,65536,4,2,4,1024", true),
        ("S,300,4,2,4,1024:P,65536,4,2", false),
    ] {
        let (mut b, _m) = ranks(
            "pq",
            2,
            &[
                ("btl_rc_receive_queues", spec),
                ("btl_rc_coalescing", "false"),
                ("btl_rc_eager_rdma_max_peers", "0"),
            ],
        );
        let mut s = sinks(2);
        // Lengths on both sides of the 300-byte split (4 bytes of header in front).
        let l: Vec<usize> = (0..600)
            .map(|i| [0, 40, 296, 297, 2000, 12_000][i % 6])
            .collect();
        for (i, len) in l.iter().enumerate() {
            let hdr = (i as u32).to_le_bytes();
            send_retry(
                &mut b,
                &mut s,
                0,
                1,
                TAG,
                &hdr,
                &payload(0, i, *len),
                hint(*len),
            );
        }
        run_until(&mut b, &mut s, "both classes delivered", |s| {
            s[1].got.get(&0).map_or(0, Vec::len) == l.len()
        });
        check_in_order(&s[1], 0, &l);
        let c = |name: &str| counter(b[0].as_ref(), name);
        assert_eq!(c("qps_created"), 2, "{spec}: one QP per class");
        // 300 messages fit the small buffers, 300 do not.
        assert_eq!(c("qp0_fragments_sent"), 300, "{spec}: small class");
        assert_eq!(c("qp1_fragments_sent"), 300, "{spec}: large class");
        let r = |name: &str| counter(b[1].as_ref(), name);
        if small_per_peer {
            assert!(
                c("credit_stalls") > 0,
                "{spec}: the 4 small credits ran out"
            );
        }
        assert!(
            r("srq_low_watermark_events") > 0,
            "{spec}: the 4-buffer SRQ ran low"
        );
    }
}

#[test]
fn multi_qp_striping_reassembles_in_order() {
    // On Soft-RoCE in a loaded guest this once timed out: RNR-NAKed windows of four QPs make
    // rxe's ACKs late, and with a 67 ms local ACK timeout seven spurious timeouts in a row
    // failed the live peer (RetryExceeded); the default is now 4.3 s (btl_rc_ib_timeout), and
    // run_until names a lost peer at once instead of waiting out its deadline.
    for policy in ["striping", "epc", "round_robin", "binding"] {
        let (mut b, _m) = ranks(
            "mq",
            2,
            &[("btl_rc_qps_per_peer", "4"), ("btl_rc_qp_policy", policy)],
        );
        let mut s = sinks(2);
        let l: Vec<usize> = (0..400)
            .map(|i| if i % 3 == 0 { 50_000 } else { i % 200 })
            .collect();
        for (i, len) in l.iter().enumerate() {
            let hdr = (i as u32).to_le_bytes();
            let h = SendHint {
                pattern: if i % 2 == 0 {
                    CommPattern::Blocking
                } else {
                    CommPattern::NonBlocking
                },
                message_len: *len,
            };
            send_retry(&mut b, &mut s, 0, 1, TAG, &hdr, &payload(0, i, *len), h);
        }
        run_until(&mut b, &mut s, "striped", |s| {
            s[1].got.get(&0).map_or(0, Vec::len) == 400
        });
        check_in_order(&s[1], 0, &l);
        let stripes = counter(b[0].as_ref(), "stripes_sent");
        match policy {
            "striping" | "epc" => assert!(stripes > 0, "{policy} striped"),
            _ => assert_eq!(stripes, 0, "{policy} never stripes"),
        }
    }
}

#[test]
fn get_and_put_with_registration_cache_and_reuse_after_free() {
    let (mut b, _m) = ranks("rd", 2, &[]);
    let mut s = sinks(2);
    // Connect.
    send_retry(&mut b, &mut s, 0, 1, TAG, &0u32.to_le_bytes(), &[], hint(0));
    run_until(&mut b, &mut s, "connect", |s| s[1].got.contains_key(&0));
    for round in 0..3u8 {
        // Rank 1 exposes a buffer; rank 0 reads it, then writes into it.
        let mut src = vec![round.wrapping_mul(17); 100_000];
        src[5] = round;
        let reg = b[1]
            .register_mem(
                lend_mut(&mut src),
                MemAccess {
                    remote_read: true,
                    remote_write: true,
                },
            )
            .unwrap();
        let seg = RemoteSegment {
            addr: src.as_ptr() as u64,
            len: src.len(),
            remote_key: reg.remote_key.clone(),
        };
        let mut dst = vec![0u8; 100_000];
        b[0].get(1, lend_mut(&mut dst), &seg, CompletionToken(round as u64))
            .unwrap();
        run_until(&mut b, &mut s, "get", |s| {
            s[0].rdma.len() == 2 * round as usize + 1
        });
        assert!(s[0].rdma.last().unwrap().1.is_ok());
        assert_eq!(dst, src);
        let data = vec![0xA5u8 ^ round; 100_000];
        b[0].put(1, lend(&data), &seg, CompletionToken(100 + round as u64))
            .unwrap();
        run_until(&mut b, &mut s, "put", |s| {
            s[0].rdma.len() == 2 * round as usize + 2
        });
        assert!(s[0].rdma.last().unwrap().1.is_ok());
        assert_eq!(src, data);
        b[1].deregister_mem(&reg);
        assert_eq!(
            counter(b[1].as_ref(), "registrations_now"),
            0,
            "released at request completion"
        );
        assert_eq!(
            counter(b[0].as_ref(), "registrations_now"),
            0,
            "local registrations released at completion"
        );
        // `src` is freed here; the next round's allocation of the same size usually reuses
        // the address, and must get a fresh registration (a miss), never the stale one.
        drop(src);
    }
    let misses = counter(b[1].as_ref(), "rcache_misses");
    let hits = counter(b[1].as_ref(), "rcache_hits");
    assert_eq!((hits, misses), (0, 3), "every round registered afresh");
}

#[test]
fn rdma_with_a_wrong_key_fails_the_operation_not_the_process() {
    let (mut b, _m) = ranks("bk", 2, &[]);
    let mut s = sinks(2);
    send_retry(&mut b, &mut s, 0, 1, TAG, &0u32.to_le_bytes(), &[], hint(0));
    run_until(&mut b, &mut s, "connect", |s| s[1].got.contains_key(&0));
    let mut dst = vec![0u8; 64];
    let seg = RemoteSegment {
        addr: 0x1000,
        len: 64,
        remote_key: vec![9, 9, 9, 9],
    };
    b[0].get(1, lend_mut(&mut dst), &seg, CompletionToken(7))
        .unwrap();
    run_until(&mut b, &mut s, "error completion", |s| {
        !s[0].rdma.is_empty()
    });
    assert!(matches!(
        s[0].rdma[0],
        (CompletionToken(7), Err(SendError::PeerFailed { .. }))
    ));
}

#[test]
fn unanswered_connection_is_reported_failed() {
    let (mut b, _m) = ranks(
        "uf",
        2,
        &[
            ("btl_rc_connect_timeout_ms", "2"),
            ("btl_rc_connect_retries", "2"),
        ],
    );
    let mut s = sinks(2);
    b[0].send(1, TAG, b"x", b"", hint(1)).unwrap();
    // Rank 1 never progresses: nobody answers.
    let t = std::time::Instant::now();
    while s[0].failed.is_empty() {
        assert!(t.elapsed() < std::time::Duration::from_secs(30));
        b[0].progress(&mut s[0]);
    }
    assert_eq!(s[0].failed[0].0, 1);
    assert!(matches!(
        b[0].send(1, TAG, b"x", b"", hint(1)),
        Err(SendError::PeerFailed { .. })
    ));
}

#[test]
fn bad_parameters_are_errors_naming_the_parameter() {
    let modex = rmca_framework::modex::LocalModex::new();
    let mem = rmca_framework::memory::MemoryAccounting::new();
    let e = init(
        &job(0, 1, "bp"),
        &modex,
        &mem,
        &[("btl_rc_receive_queues", "Q,9")],
    )
    .err()
    .expect("refused");
    assert!(e.to_string().contains("btl_rc_receive_queues"), "{e}");
    let e = init(
        &job(0, 1, "bp"),
        &modex,
        &mem,
        &[("btl_rc_eager_limit", "2M")],
    )
    .err()
    .expect("refused");
    assert!(e.to_string().contains("btl_rc_eager_limit"), "{e}");
}

#[test]
fn memory_is_accounted_and_grows_with_connections() {
    /// rc's accounted memory of rank 0 idle, then connected to one and to two peers.
    fn idle_one_two(name: &str, set: &[(&str, &str)]) -> (usize, usize, usize) {
        let (mut b, m) = ranks(name, 3, set);
        let mut s = sinks(3);
        let idle = m[0].counter("btl.rc").current();
        send_retry(&mut b, &mut s, 0, 1, TAG, &0u32.to_le_bytes(), &[], hint(0));
        run_until(&mut b, &mut s, "one", |s| s[1].got.contains_key(&0));
        let one = m[0].counter("btl.rc").current();
        send_retry(&mut b, &mut s, 0, 2, TAG, &0u32.to_le_bytes(), &[], hint(0));
        run_until(&mut b, &mut s, "two", |s| s[2].got.contains_key(&0));
        let two = m[0].counter("btl.rc").current();
        assert_eq!(b[0].memory_usage().current, two);
        let _: &dyn Btl = b[0].as_ref();
        (idle, one, two)
    }
    // Per-peer queues of full-size buffers: every connection adds its 32 x 64 KiB.
    let (idle, one, two) = idle_one_two("mem", &[("btl_rc_receive_queues", "P,32,16")]);
    assert!(
        idle < one && one < two && two - one >= 32 * 64 * 1024,
        "per-peer receive buffers appear per connection: {idle} {one} {two}"
    );
    // Small per-peer buffers and one shared queue: a connection adds far less.
    let (idle, one, two) = idle_one_two(
        "memd",
        &[("btl_rc_receive_queues", "P,256,16,8:S,65536,32,8,32,1024")],
    );
    assert!(
        idle < one && two - one < 256 * 1024,
        "P+S: the second connection adds no large buffers: {idle} {one} {two}"
    );
}

#[test]
fn dead_peer_surfaces_as_peer_failed() {
    // On rxe this needs a finite transport retry count: rxe retries forever with 7 (the
    // module uses 6), and a destroyed QP's packets are dropped without a NAK, so the failure
    // comes after 7 local ACK timeouts: 67 ms each here (14), not the default 4.3 s (20).
    let (mut b, _m) = ranks("dp", 2, &[("btl_rc_ib_timeout", "14")]);
    let mut s = sinks(2);
    send_retry(&mut b, &mut s, 0, 1, TAG, &0u32.to_le_bytes(), &[], hint(0));
    run_until(&mut b, &mut s, "connect", |s| s[1].got.contains_key(&0));
    // Rank 1 goes away (its QPs are destroyed, the transport breaks).
    let dead = b.pop().unwrap();
    drop(dead);
    let t = std::time::Instant::now();
    let mut i = 0u32;
    while s[0].failed.is_empty() {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(60),
            "failure never reported; counters {:?}",
            b[0].counters()
        );
        match b[0].send(1, TAG, &i.to_le_bytes(), b"after death", hint(11)) {
            Ok(()) | Err(SendError::WouldBlock) => {}
            Err(SendError::PeerFailed { .. }) => {}
            Err(e) => panic!("unexpected {e}"),
        }
        i += 1;
        b[0].progress(&mut s[0]);
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(s[0].failed[0].0, 1);
    assert!(matches!(
        b[0].send(1, TAG, b"x", b"", hint(1)),
        Err(SendError::PeerFailed { .. })
    ));
}

#[test]
fn eager_rdma_ring_opens_after_threshold_and_wraps_many_times() {
    let (mut b, _m) = ranks(
        "er",
        2,
        &[
            ("btl_rc_eager_rdma_threshold", "8"),
            ("btl_rc_eager_rdma_num", "4"),
            ("btl_rc_coalescing", "false"),
        ],
    );
    let mut s = sinks(2);
    let n = 3000;
    let l: Vec<usize> = (0..n)
        .map(|i| if i % 97 == 0 { 30_000 } else { i % 2000 })
        .collect();
    for (i, len) in l.iter().enumerate() {
        let hdr = (i as u32).to_le_bytes();
        send_retry(
            &mut b,
            &mut s,
            0,
            1,
            TAG,
            &hdr,
            &payload(0, i, *len),
            hint(*len),
        );
        if i % 8 == 0 {
            for (x, y) in b.iter_mut().zip(s.iter_mut()) {
                x.progress(y);
            }
        }
    }
    run_until(&mut b, &mut s, "ring traffic", |s| {
        s[1].got.get(&0).map_or(0, Vec::len) == n
    });
    check_in_order(&s[1], 0, &l);
    assert_eq!(
        counter(b[1].as_ref(), "eager_rdma_connections"),
        1,
        "receiver opened one ring"
    );
    let via_ring = counter(b[0].as_ref(), "eager_rdma_sent");
    assert!(
        via_ring > 40,
        "the 4-slot ring wrapped many times ({via_ring} writes)"
    );
    assert_eq!(counter(b[1].as_ref(), "eager_rdma_received"), via_ring);
    // Rank 0 never received 8 messages from rank 1: no ring the other way.
    assert_eq!(counter(b[0].as_ref(), "eager_rdma_connections"), 0);
}

#[test]
fn eager_rdma_respects_max_peers() {
    let (mut b, _m) = ranks(
        "emp",
        3,
        &[
            ("btl_rc_eager_rdma_threshold", "2"),
            ("btl_rc_eager_rdma_max_peers", "1"),
        ],
    );
    let mut s = sinks(3);
    for from in [0usize, 2] {
        for i in 0..20usize {
            send_retry(
                &mut b,
                &mut s,
                from,
                1,
                TAG,
                &(i as u32).to_le_bytes(),
                &payload(from as u32, i, 10),
                hint(10),
            );
        }
    }
    run_until(&mut b, &mut s, "both senders", |s| {
        s[1].got.values().map(Vec::len).sum::<usize>() == 40
    });
    check_in_order(&s[1], 0, &[10; 20]);
    check_in_order(&s[1], 2, &[10; 20]);
    assert_eq!(counter(b[1].as_ref(), "eager_rdma_connections"), 1);
}

#[test]
fn fault_kill_after_fails_the_path() {
    let (mut b, _m) = ranks(
        "fk",
        2,
        &[
            ("btl_rc_fault_kill_after", "10"),
            ("btl_rc_eager_rdma_max_peers", "0"),
        ],
    );
    let mut s = sinks(2);
    let mut refused = None;
    let mut accepted = 0;
    for i in 0..100usize {
        let hdr = (i as u32).to_le_bytes();
        match b[0].send(1, TAG, &hdr, &payload(0, i, 100), hint(100)) {
            Ok(()) => accepted += 1,
            Err(SendError::WouldBlock) => {}
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
        for (m, sink) in b.iter_mut().zip(s.iter_mut()) {
            m.progress(sink);
        }
    }
    // The soft provider's RC is a TCP stream, which the killed end closes, so the peer's QP
    // breaks too; on real verbs the peer learns only when its own sends exhaust their retries.
    let peer_notices = provider() != "rdma";
    run_until_failures(&mut b, &mut s, "the killed path reported", |s| {
        !s[0].failed.is_empty() && (!peer_notices || !s[1].failed.is_empty())
    });
    assert!(
        matches!(refused, Some(SendError::PeerFailed { peer: 1, .. })),
        "later sends are refused as PeerFailed: {refused:?}"
    );
    assert!(s[0].failed[0].1.contains("fault injection"));
    if peer_notices {
        assert_eq!(s[1].failed[0].0, 0, "the peer notices its QP died too");
    }
    // The kill takes effect at the progress after the 10th post: what was posted by then
    // may or may not arrive, nothing later is accepted.
    let got = s[1].got.get(&0).map_or(0, Vec::len);
    assert!(accepted < 100 && got <= accepted, "{got} of {accepted}");
    assert_eq!(counter(b[0].as_ref(), "peer_failures"), 1);
}

/// A registration cache component that counts its use, to see that btl-rc takes its cache
/// from the framework's selection rather than building its own.
mod counting_rcache {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use rmca_framework::btl::Registration;
    use rmca_framework::component::{Component, ComponentMeta};
    use rmca_framework::params::{ParamRegistrar, ParamStore};
    use rmca_framework::rcache::{CachedRegistration, LruRcache, Rcache, RcacheComponent};

    pub static CREATED: AtomicUsize = AtomicUsize::new(0);
    pub static INSERTS: AtomicUsize = AtomicUsize::new(0);

    #[derive(Debug)]
    pub struct Counting;
    pub static COUNTING: Counting = Counting;

    impl Component for Counting {
        fn meta(&self) -> ComponentMeta {
            ComponentMeta {
                name: "counting",
                version: "0",
                description: "test rcache",
            }
        }
        fn register_params(&self, _: &mut ParamRegistrar<'_>) {}
    }

    impl RcacheComponent for Counting {
        fn create(&self, _: &ParamStore) -> Box<dyn Rcache> {
            CREATED.fetch_add(1, Ordering::SeqCst);
            Box::new(Cache(LruRcache::new(0)))
        }
    }

    struct Cache(LruRcache);

    impl Rcache for Cache {
        fn lookup(&mut self, addr: usize, len: usize) -> Option<Registration> {
            self.0.lookup(addr, len)
        }
        fn insert(&mut self, e: CachedRegistration) -> Vec<CachedRegistration> {
            INSERTS.fetch_add(1, Ordering::SeqCst);
            self.0.insert(e)
        }
        fn invalidate(&mut self, addr: usize, len: usize) -> Vec<CachedRegistration> {
            self.0.invalidate(addr, len)
        }
        fn len(&self) -> usize {
            self.0.len()
        }
        fn stats(&self) -> (u64, u64) {
            self.0.stats()
        }
    }
}

#[test]
fn registrations_go_through_the_selected_rcache_component() {
    use rmca_framework::component::InitContext;
    use rmca_framework::modex::{LocalModex, ModexWrite};
    use std::sync::atomic::Ordering;
    let modex = LocalModex::new();
    let mem = rmca_framework::memory::MemoryAccounting::new();
    let j = job(0, 1, "rcache-sel");
    let p = params(&[]);
    let mut w = modex.writer(0);
    let mut ctx = InitContext::new(&j, &p, &mem, &mut w as &mut dyn ModexWrite)
        .with_rcache(&counting_rcache::COUNTING);
    assert_eq!(ctx.rcache_name(), "counting");
    let mut btl = rmca_framework::btl::BtlComponent::init(&rmca_btl_rc::RC, &mut ctx)
        .unwrap()
        .remove(0);
    assert_eq!(counting_rcache::CREATED.load(Ordering::SeqCst), 1);
    let mut buf = vec![0u8; 4096];
    let access = MemAccess {
        remote_read: true,
        remote_write: true,
    };
    let r = btl.register_mem(lend_mut(&mut buf), access).unwrap();
    assert_eq!(counting_rcache::INSERTS.load(Ordering::SeqCst), 1);
    btl.deregister_mem(&r);
    assert_eq!(counter(btl.as_ref(), "registrations_now"), 0);
}
