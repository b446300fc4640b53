//! Soft-provider features beyond the conformance suite: job isolation and fault injection.

use std::time::{Duration, Instant};

use rmca_verbs::*;

const ALL: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ);

struct Side {
    ctx: Context,
    scq: Cq,
    rcq: Cq,
    mr: Mr,
    qp: Qp,
    pd: Pd,
}

fn side(secret: &[u8], soft: SoftConfig, t: QpType) -> Side {
    side_with(secret, soft, t, 512)
}

fn side_with(secret: &[u8], soft: SoftConfig, t: QpType, max_recv_wr: u32) -> Side {
    let ctx = Context::open(&ProviderConfig {
        kind: ProviderKind::Soft,
        soft,
        job_secret: secret.to_vec(),
        ..Default::default()
    })
    .unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let scq = ctx.create_cq(1024).unwrap();
    let rcq = ctx.create_cq(1024).unwrap();
    let mr = pd.register(1 << 20, ALL).unwrap();
    let caps = QpCaps {
        max_send_wr: 512,
        max_recv_wr,
        ..Default::default()
    };
    let qp = pd
        .create_qp(QpInit {
            qp_type: t,
            send_cq: &scq,
            recv_cq: &rcq,
            srq: None,
            caps,
            qkey: 7,
        })
        .unwrap();
    Side {
        ctx,
        scq,
        rcq,
        mr,
        qp,
        pd,
    }
}

fn poll_for(cqs: &[&Cq], d: Duration) -> Vec<Wc> {
    let end = Instant::now() + d;
    let mut got = Vec::new();
    let mut buf = [Wc::EMPTY; 32];
    while Instant::now() < end {
        let k = cqs[0].poll(&mut buf).unwrap();
        got.extend_from_slice(&buf[..k]);
        for c in &cqs[1..] {
            c.poll(&mut []).unwrap();
        }
    }
    got
}

fn wait_n(cqs: &[&Cq], n: usize) -> Vec<Wc> {
    let end = Instant::now() + Duration::from_secs(20);
    let mut got = Vec::new();
    let mut buf = [Wc::EMPTY; 32];
    while got.len() < n {
        let k = cqs[0].poll(&mut buf).unwrap();
        got.extend_from_slice(&buf[..k]);
        for c in &cqs[1..] {
            c.poll(&mut []).unwrap();
        }
        assert!(Instant::now() < end, "timeout: {got:?}");
    }
    got
}

fn ud_pair(secret_b: &[u8], fault: FaultConfig) -> (Side, Side, Ah) {
    let soft = SoftConfig {
        ud_fault: fault,
        ..Default::default()
    };
    let a = side(b"job", soft, QpType::Ud);
    let b = side(secret_b, SoftConfig::default(), QpType::Ud);
    a.qp.connect(None, &RcParams::default()).unwrap();
    b.qp.connect(None, &RcParams::default()).unwrap();
    let ah = a.pd.create_ah(&b.qp.address()).unwrap();
    (a, b, ah)
}

fn ud_send_seq(a: &Side, ah: &Ah, n: u32) {
    for i in 0..n {
        ud_send(a, ah, u64::from(i), i as usize * 4, 4, i);
    }
}

/// Post one unsignaled UD send of `len` bytes at `at` of a's region, which start with
/// `value` (little-endian).
fn ud_send(a: &Side, ah: &Ah, wr_id: u64, at: usize, len: u32, value: u32) {
    a.mr.write_at(at, &value.to_le_bytes()).unwrap();
    a.qp.post_send(&SendWr {
        wr_id,
        op: SendOp::Send,
        sges: &[a.mr.sge(at, len).unwrap()],
        signaled: false,
        inline: false,
        ud: Some(UdDest {
            ah,
            remote_qpn: ah.remote_qpn(),
            remote_qkey: 7,
        }),
    })
    .unwrap();
}

fn post_recvs(b: &Side, n: u32) {
    for i in 0..n {
        b.qp.post_recv(&RecvWr {
            wr_id: u64::from(i),
            sges: &[b.mr.sge(i as usize * 64, 64).unwrap()],
        })
        .unwrap();
    }
}

fn payloads(b: &Side, wcs: &[Wc]) -> Vec<u32> {
    wcs.iter()
        .map(|w| {
            let mut v = [0u8; 4];
            b.mr.read_at(w.wr_id as usize * 64 + UD_GRH_LEN, &mut v)
                .unwrap();
            u32::from_le_bytes(v)
        })
        .collect()
}

#[test]
fn ud_from_another_job_is_dropped_and_counted() {
    let (a, b, ah) = ud_pair(b"other job", FaultConfig::default());
    post_recvs(&b, 4);
    ud_send_seq(&a, &ah, 3);
    let end = Instant::now() + Duration::from_secs(20);
    while b.ctx.soft_stats().unwrap().foreign_drops < 3 {
        let k = b.rcq.poll(&mut [Wc::EMPTY; 4]).unwrap();
        assert_eq!(k, 0, "a datagram of another job was delivered");
        assert!(Instant::now() < end);
    }
}

#[test]
fn rc_connection_from_another_job_is_refused() {
    let a = side(b"job", SoftConfig::default(), QpType::Rc);
    let b = side(b"intruder", SoftConfig::default(), QpType::Rc);
    let (aa, ba) = (a.qp.address(), b.qp.address());
    // Whichever side accepts refuses the other's hello; the connector then sees the close.
    let _ = a.qp.connect(Some(&ba), &RcParams::default());
    let _ = b.qp.connect(Some(&aa), &RcParams::default());
    for s in [&a, &b] {
        let _ = s.qp.post_send(&SendWr::send(1, &[s.mr.sge(0, 4).unwrap()]));
    }
    let end = Instant::now() + Duration::from_secs(20);
    while a.ctx.soft_stats().unwrap().foreign_drops + b.ctx.soft_stats().unwrap().foreign_drops == 0
    {
        a.scq.poll(&mut []).unwrap();
        b.scq.poll(&mut []).unwrap();
        assert!(Instant::now() < end, "foreign RC connection not refused");
    }
    assert_eq!(a.rcq.poll(&mut [Wc::EMPTY; 4]).unwrap_or(0), 0);
    assert_eq!(b.rcq.poll(&mut [Wc::EMPTY; 4]).unwrap_or(0), 0);
}

#[test]
fn ud_fault_drop_all() {
    let (a, b, ah) = ud_pair(
        b"job",
        FaultConfig {
            drop: 1.0,
            seed: 1,
            ..Default::default()
        },
    );
    post_recvs(&b, 10);
    ud_send_seq(&a, &ah, 10);
    assert!(poll_for(&[&b.rcq, &a.scq], Duration::from_millis(200)).is_empty());
    assert_eq!(a.qp.fault_stats().dropped, 10);
}

#[test]
fn ud_fault_duplicate_all() {
    let (a, b, ah) = ud_pair(
        b"job",
        FaultConfig {
            duplicate: 1.0,
            seed: 2,
            ..Default::default()
        },
    );
    post_recvs(&b, 20);
    ud_send_seq(&a, &ah, 5);
    let r = wait_n(&[&b.rcq, &a.scq], 10);
    let mut p = payloads(&b, &r);
    p.sort();
    assert_eq!(p, vec![0, 0, 1, 1, 2, 2, 3, 3, 4, 4]);
}

#[test]
fn ud_fault_reorder() {
    let (a, b, ah) = ud_pair(
        b"job",
        FaultConfig {
            reorder: 1.0,
            seed: 3,
            ..Default::default()
        },
    );
    post_recvs(&b, 20);
    ud_send_seq(&a, &ah, 10);
    let r = wait_n(&[&b.rcq, &a.scq], 10);
    let p = payloads(&b, &r);
    let mut sorted = p.clone();
    sorted.sort();
    assert_eq!(sorted, (0..10).collect::<Vec<_>>());
    assert_ne!(p, sorted, "reorder=1.0 left the order intact");
}

#[test]
fn ud_fault_corrupt_flips_one_bit() {
    let (a, b, ah) = ud_pair(
        b"job",
        FaultConfig {
            corrupt: 1.0,
            seed: 4,
            ..Default::default()
        },
    );
    // Corruption happens at the receiver of `a`'s config: make `a` the receiver too.
    let _ = (&b, &ah);
    let ah_back = b.pd.create_ah(&a.qp.address()).unwrap();
    post_recvs(&a, 4);
    ud_send_seq(&b, &ah_back, 1);
    let r = wait_n(&[&a.rcq, &b.scq], 1);
    let mut v = [0u8; 4];
    a.mr.read_at(r[0].wr_id as usize * 64 + UD_GRH_LEN, &mut v)
        .unwrap();
    assert_eq!(
        u32::from_le_bytes(v).count_ones(),
        1,
        "exactly one bit flipped in 0u32"
    );
}

fn rc_pair(fault: FaultConfig) -> (Side, Side) {
    let soft = SoftConfig {
        rc_fault: fault,
        ..Default::default()
    };
    let a = side(b"job", soft.clone(), QpType::Rc);
    let b = side(b"job", soft, QpType::Rc);
    let (aa, ba) = (a.qp.address(), b.qp.address());
    a.qp.connect(Some(&ba), &RcParams::default()).unwrap();
    b.qp.connect(Some(&aa), &RcParams::default()).unwrap();
    (a, b)
}

#[test]
fn rc_fault_corrupt_after_integrity_check() {
    let (a, b) = rc_pair(FaultConfig {
        corrupt: 1.0,
        seed: 5,
        ..Default::default()
    });
    b.qp.post_recv(&RecvWr {
        wr_id: 1,
        sges: &[b.mr.sge(0, 64).unwrap()],
    })
    .unwrap();
    a.qp.post_send(&SendWr::send(1, &[a.mr.sge(0, 32).unwrap()]))
        .unwrap();
    let r = wait_n(&[&b.rcq, &a.scq], 1);
    assert!(
        r[0].is_ok(),
        "RC cannot see host-bus corruption: the receive succeeds"
    );
    let mut v = [0u8; 32];
    b.mr.read_at(0, &mut v).unwrap();
    assert_eq!(v.iter().map(|x| x.count_ones()).sum::<u32>(), 1);
}

#[test]
fn rc_fault_delay_keeps_order() {
    let (a, b) = rc_pair(FaultConfig {
        delay_rate: 0.5,
        delay: Duration::from_millis(5),
        seed: 6,
        ..Default::default()
    });
    for i in 0..50u64 {
        b.qp.post_recv(&RecvWr {
            wr_id: i,
            sges: &[b.mr.sge(i as usize * 8, 8).unwrap()],
        })
        .unwrap();
    }
    for i in 0..50u32 {
        a.mr.write_at(i as usize * 4, &i.to_le_bytes()).unwrap();
        a.qp.post_send(&SendWr {
            signaled: false,
            ..SendWr::send(u64::from(i), &[a.mr.sge(i as usize * 4, 4).unwrap()])
        })
        .unwrap();
        // Let some segments leave between posts, so several delayed batches form.
        a.scq.poll(&mut []).unwrap();
    }
    let r = wait_n(&[&b.rcq, &a.scq], 50);
    for (i, w) in r.iter().enumerate() {
        assert_eq!(w.wr_id, i as u64);
        let mut v = [0u8; 4];
        b.mr.read_at(i * 8, &mut v).unwrap();
        assert_eq!(u32::from_le_bytes(v), i as u32);
    }
    assert!(a.qp.fault_stats().delayed > 0);
}

#[test]
fn bad_fault_config_is_an_error() {
    let e = Context::open(&ProviderConfig {
        soft: SoftConfig {
            rc_fault: FaultConfig {
                drop: 0.5,
                ..Default::default()
            },
            ..Default::default()
        },
        ..Default::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("RC fault drop rate"), "{e}");
}

#[test]
fn rdma_without_device_is_declined_cleanly() {
    // Holds on hosts without RDMA devices (like CI outside the VM) in builds with and without
    // the `rdma` feature: no device is listed and opening fails with a typed error.
    let devs = devices(ProviderKind::Rdma).unwrap();
    if devs.is_empty() {
        let e = Context::open(&ProviderConfig {
            kind: ProviderKind::Rdma,
            ..Default::default()
        })
        .unwrap_err();
        assert!(
            matches!(e, Error::NoDevice(_) | Error::ProviderUnavailable(..)),
            "{e:?}"
        );
    } else {
        assert!(devs.iter().all(|d| d.provider == ProviderKind::Rdma));
    }
}

/// Two connected UD sides and a's address handle for b, where b's agent never takes over
/// an idle QP: only the test's own polls read b's socket.
fn ud_pair_polled_by_hand() -> (Side, Side, Ah) {
    let a = side(b"job", SoftConfig::default(), QpType::Ud);
    let b = side(
        b"job",
        SoftConfig {
            agent_idle: Duration::from_secs(3600),
            ..Default::default()
        },
        QpType::Ud,
    );
    a.qp.connect(None, &RcParams::default()).unwrap();
    b.qp.connect(None, &RcParams::default()).unwrap();
    let ah = a.pd.create_ah(&b.qp.address()).unwrap();
    (a, b, ah)
}

#[test]
fn queued_datagrams_are_received_in_batches_in_order() {
    // Only the polls below receive, so the count of receive calls is exact.
    let (a, b, ah) = ud_pair_polled_by_hand();
    post_recvs(&b, 40);
    let calls0 = b.ctx.soft_stats().unwrap().ud_recv_calls;
    ud_send_seq(&a, &ah, 40);
    // Let all 40 queue up on b's socket before b polls.
    std::thread::sleep(Duration::from_millis(50));
    let wcs = wait_n(&[&b.rcq], 40);
    assert_eq!(payloads(&b, &wcs), (0..40).collect::<Vec<u32>>());
    let calls = b.ctx.soft_stats().unwrap().ud_recv_calls - calls0;
    // The first four polls take one datagram each (a poll that found nothing before receives
    // one at a time); from then on 32 per call: 32, then 4.
    assert_eq!(calls, 6, "{calls} receive calls for 40 queued datagrams");
}

#[test]
fn a_datagram_above_the_receivers_mtu_is_dropped_in_a_batch_and_its_neighbours_delivered() {
    // a sends up to 2048 bytes; b's MTU is 256: b's slots are 256 + header bytes.
    let a = side(b"job", SoftConfig::default(), QpType::Ud);
    let b = side(
        b"job",
        SoftConfig {
            ud_mtu: 256,
            ..Default::default()
        },
        QpType::Ud,
    );
    a.qp.connect(None, &RcParams::default()).unwrap();
    b.qp.connect(None, &RcParams::default()).unwrap();
    let ah = a.pd.create_ah(&b.qp.address()).unwrap();
    post_recvs(&b, 4);
    let send = |wr_id: u64, at: usize, len: u32| ud_send(&a, &ah, wr_id, at, len, wr_id as u32);
    send(0, 0, 4);
    send(1, 4096, 1000);
    send(2, 8, 4);
    std::thread::sleep(Duration::from_millis(50));
    let wcs = wait_n(&[&b.rcq], 2);
    assert_eq!(payloads(&b, &wcs), vec![0, 2]);
    assert_eq!(b.ctx.soft_stats().unwrap().mtu_drops, 1);
    assert!(poll_for(&[&b.rcq], Duration::from_millis(100)).is_empty());
}

/// The agent accepts RC connections only when one is pending: an idle context makes (almost)
/// no `accept` calls while its agent wakes every few milliseconds, and a connection is still
/// accepted (the RC tests above connect through it).
#[test]
fn an_idle_agent_does_not_call_accept() {
    let ctx = Context::open(&ProviderConfig {
        kind: ProviderKind::Soft,
        job_secret: b"idle-agent".to_vec(),
        ..Default::default()
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let calls = ctx.soft_stats().unwrap().accept_calls;
    // The agent's first pass accepts once; it wakes ~100 times in 200 ms.
    assert!(
        calls <= 2,
        "{calls} accept calls from an idle agent in 200 ms"
    );
}

/// A UD QP with no receive posted (and no SRQ), like btl-ud's send QPs, does not read its
/// socket when its CQ is polled: each such poll used to be a receive system call that found
/// nothing. What arrives meanwhile is dropped as "no WQE" once a receive is posted, as a HCA
/// drops it on arrival, and what arrives after the post is delivered.
#[test]
fn a_ud_qp_without_receives_is_never_read() {
    // Only the polls below touch b's socket.
    let (a, b, ah) = ud_pair_polled_by_hand();
    ud_send_seq(&a, &ah, 3);
    std::thread::sleep(Duration::from_millis(20));
    let s0 = b.ctx.soft_stats().unwrap();
    let mut buf = [Wc::EMPTY; 8];
    for _ in 0..1000 {
        assert_eq!(b.rcq.poll(&mut buf).unwrap(), 0);
        assert_eq!(b.scq.poll(&mut buf).unwrap(), 0);
    }
    let s1 = b.ctx.soft_stats().unwrap();
    assert_eq!(
        (
            s1.ud_recv_calls - s0.ud_recv_calls,
            s1.ud_empty_polls - s0.ud_empty_polls
        ),
        (0, 0),
        "receive system calls on a QP with no receive posted"
    );
    // Posting drains the socket: the three found no WQE.
    post_recvs(&b, 1);
    assert_eq!(b.ctx.soft_stats().unwrap().ud_no_wqe_drops, 3);
    ud_send(&a, &ah, 9, 0, 4, 42);
    let wcs = wait_n(&[&b.rcq], 1);
    assert_eq!(payloads(&b, &wcs), vec![42]);
    // With the WQE consumed the QP stops reading again.
    let s2 = b.ctx.soft_stats().unwrap();
    for _ in 0..100 {
        assert_eq!(b.rcq.poll(&mut buf).unwrap(), 0);
    }
    assert_eq!(
        b.ctx.soft_stats().unwrap().ud_empty_polls,
        s2.ud_empty_polls
    );
}

fn ud_send_to(a: &Side, ah: &Ah, qkey: u32, value: u32) {
    a.mr.write_at(0, &value.to_le_bytes()).unwrap();
    a.qp.post_send(&SendWr {
        wr_id: u64::from(value),
        op: SendOp::Send,
        sges: &[a.mr.sge(0, 4).unwrap()],
        signaled: false,
        inline: true,
        ud: Some(UdDest {
            ah,
            remote_qpn: ah.remote_qpn(),
            remote_qkey: qkey,
        }),
    })
    .unwrap();
}

/// A QP created without a receive queue (its socket then connected to its first destination,
/// which spares later sends a route lookup) sends to other destinations too; a QP that can
/// receive but sends first is never connected: once it posts receives, every source reaches it.
#[test]
fn send_only_and_send_first_qps_reach_and_hear_everyone() {
    let s = side_with(b"job", SoftConfig::default(), QpType::Ud, 0);
    let a = side(b"job", SoftConfig::default(), QpType::Ud);
    let b = side(b"job", SoftConfig::default(), QpType::Ud);
    let c = side(b"job", SoftConfig::default(), QpType::Ud);
    for x in [&s, &a, &b, &c] {
        x.qp.connect(None, &RcParams::default()).unwrap();
    }
    assert!(matches!(
        s.qp.post_recv(&RecvWr {
            wr_id: 0,
            sges: &[s.mr.sge(0, 64).unwrap()],
        }),
        Err(Error::QueueFull { depth: 0 })
    ));
    post_recvs(&b, 4);
    post_recvs(&c, 4);
    let s_to_b = s.pd.create_ah(&b.qp.address()).unwrap();
    let s_to_c = s.pd.create_ah(&c.qp.address()).unwrap();
    ud_send_to(&s, &s_to_b, 7, 1);
    ud_send_to(&s, &s_to_c, 7, 2);
    ud_send_to(&s, &s_to_b, 7, 3);
    assert_eq!(payloads(&b, &wait_n(&[&b.rcq], 2)), vec![1, 3]);
    assert_eq!(payloads(&c, &wait_n(&[&c.rcq], 1)), vec![2]);
    // a sends first, then receives from b and c.
    let a_to_b = a.pd.create_ah(&b.qp.address()).unwrap();
    ud_send_to(&a, &a_to_b, 7, 4);
    assert_eq!(payloads(&b, &wait_n(&[&b.rcq], 1)), vec![4]);
    post_recvs(&a, 4);
    let c_to_a = c.pd.create_ah(&a.qp.address()).unwrap();
    let b_to_a = b.pd.create_ah(&a.qp.address()).unwrap();
    ud_send_to(&c, &c_to_a, 7, 20);
    ud_send_to(&b, &b_to_a, 7, 10);
    let mut got = payloads(&a, &wait_n(&[&a.rcq], 2));
    got.sort_unstable();
    assert_eq!(got, vec![10, 20]);
}

/// A send towards a closed port makes the kernel queue an ICMP error on the sending socket,
/// which a connected UDP socket (a send-only QP's) reports on its next send instead of
/// sending: that next datagram, for a live destination, must still leave.
#[test]
fn a_send_after_an_unreachable_destination_still_leaves() {
    let s = side_with(b"job", SoftConfig::default(), QpType::Ud, 0);
    let b = side(b"job", SoftConfig::default(), QpType::Ud);
    s.qp.connect(None, &RcParams::default()).unwrap();
    b.qp.connect(None, &RcParams::default()).unwrap();
    post_recvs(&b, 4);
    let gone = {
        let d = side(b"job", SoftConfig::default(), QpType::Ud);
        d.qp.address()
    };
    let s_to_gone = s.pd.create_ah(&gone).unwrap();
    let s_to_b = s.pd.create_ah(&b.qp.address()).unwrap();
    for i in 0..3 {
        ud_send_to(&s, &s_to_gone, 7, 100 + i);
        // Loopback answers within the send: the ICMP error is queued by now.
        ud_send_to(&s, &s_to_b, 7, i);
    }
    assert_eq!(payloads(&b, &wait_n(&[&b.rcq], 3)), vec![0, 1, 2]);
}
