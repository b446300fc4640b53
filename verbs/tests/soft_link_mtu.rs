//! The soft provider's UD MTU is the path MTU: contexts bound on a 1500-byte veth interface in a
//! fresh network namespace (needs root) never send a datagram larger than one packet, and a
//! datagram above a path MTU that shrank afterwards is refused (DF) and counted, not fragmented.

use rmca_test_support::netns::ip;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use rmca_verbs::soft::link::ud_payload_limit;
use rmca_verbs::soft::wire::SoftAddr;
use rmca_verbs::*;

/// Runs `body` in a new network namespace holding a veth pair `mtu0`/`mtu1` with MTU
/// 1500, 10.77.0.1/24 on `mtu0`.
fn in_fresh_netns(body: impl FnOnce() + Send + 'static) -> bool {
    rmca_test_support::netns::in_fresh_netns("mtu", 1500, "10.77.0.1/24", body)
}

fn open(bind: &str, ud_mtu: u32) -> Context {
    Context::open(&ProviderConfig {
        kind: ProviderKind::Soft,
        soft: SoftConfig {
            bind_addr: bind.parse().unwrap(),
            ud_mtu,
            ..Default::default()
        },
        job_secret: b"mtu".to_vec(),
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn a_context_on_a_1500_byte_interface_never_offers_more_than_one_packet() {
    in_fresh_netns(|| {
        let limit = 1500 - 20 - 8 - 28;
        assert_eq!(ud_payload_limit(1500, false), limit);
        for wanted in [2048, 65000] {
            let ctx = open("10.77.0.1", wanted);
            assert_eq!(ctx.attr().mtu, limit, "wanted {wanted}");
            assert_eq!(
                ctx.soft_link(),
                Some(SoftLink {
                    interface: "mtu0".into(),
                    if_mtu: 1500,
                    ud_mtu_limit: limit,
                })
            );
        }
        // Smaller wishes are kept: the limit is a ceiling.
        assert_eq!(open("10.77.0.1", 1024).attr().mtu, 1024);
        // Loopback (and the unspecified address, which peers reach only on this host) keep
        // loopback's room.
        let lo = open("127.0.0.1", 65000);
        assert_eq!(lo.soft_link().unwrap().interface, "lo");
        assert_eq!(lo.attr().mtu, 65000);
        assert_eq!(open("0.0.0.0", 65000).attr().mtu, 65000);
        // The MTU follows the interface: a jumbo link carries more.
        ip(&["link", "set", "mtu0", "mtu", "9000"]);
        assert_eq!(open("10.77.0.1", 65000).attr().mtu, 9000 - 56);
        // An interface too small for the smallest UD MTU (256) is a clear error.
        ip(&["link", "set", "mtu0", "mtu", "300"]);
        let e = Context::open(&ProviderConfig {
            kind: ProviderKind::Soft,
            soft: SoftConfig {
                bind_addr: "10.77.0.1".parse().unwrap(),
                ..Default::default()
            },
            ..Default::default()
        })
        .expect_err("a 300-byte MTU leaves 244 bytes of UD payload")
        .to_string();
        assert!(
            e.contains("mtu0") && e.contains("300") && e.contains("244") && e.contains("256"),
            "{e}"
        );
    });
}

#[test]
fn a_datagram_above_a_path_mtu_that_shrank_is_refused_and_counted_not_fragmented() {
    in_fresh_netns(|| {
        let ctx = open("10.77.0.1", 2048);
        let mtu = ctx.attr().mtu;
        assert_eq!(mtu, 1444);
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(64).unwrap();
        let mr = pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
        let qp = pd
            .create_qp(QpInit {
                qp_type: QpType::Ud,
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                caps: QpCaps {
                    max_send_wr: 16,
                    max_recv_wr: 16,
                    ..Default::default()
                },
                qkey: 7,
            })
            .unwrap();
        qp.connect(None, &RcParams::default()).unwrap();
        // A peer on the veth's subnet (the datagram leaves through mtu0, not loopback). The
        // kernel checks the size against the route's MTU before resolving the neighbour.
        let peer = SoftAddr {
            sock: SocketAddr::new(IpAddr::from([10, 77, 0, 99]), 4791),
            qpn: 1,
            kind: 1,
        };
        let ah = pd.create_ah(&peer.to_bytes()).unwrap();
        // The path shrinks under the open context (as when a router reports a smaller MTU).
        ip(&["link", "set", "mtu0", "mtu", "1280"]);
        let sge = [mr.sge(0, mtu).unwrap()];
        qp.post_send(&SendWr {
            wr_id: 1,
            op: SendOp::Send,
            sges: &sge,
            signaled: true,
            inline: false,
            ud: Some(UdDest {
                ah: &ah,
                remote_qpn: 1,
                remote_qkey: 7,
            }),
        })
        .unwrap();
        let mut wc = [Wc::EMPTY; 4];
        let end = Instant::now() + Duration::from_secs(10);
        let mut got = 0;
        while got == 0 && Instant::now() < end {
            got = cq.poll(&mut wc).unwrap();
        }
        // Unreliable datagram: locally complete, lost on the way, as a HCA's would be.
        assert_eq!(got, 1);
        assert_eq!(wc[0].status, WcStatus::Success);
        // With DF the kernel refused it (EMSGSIZE) instead of sending two IP fragments.
        let st = ctx.soft_stats().unwrap();
        assert_eq!(st.ud_send_mtu_drops, 1, "{st:?}");
        assert_eq!(
            qp.state(),
            QpState::Rts,
            "a refused datagram is no QP error"
        );
    });
}
