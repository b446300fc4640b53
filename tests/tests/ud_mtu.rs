//! pml dr over btl-ud (soft provider) between two network namespaces joined by a lossy
//! 1500-byte-MTU link. UD datagrams larger than the link were IP-fragmented;
//! each lost fragment left its siblings in the receiver's reassembly memory until
//! `ipfrag_time`, the memory filled, every later fragment was dropped, and dr declared the live
//! peer dead. Datagrams now never exceed one packet, so the job completes.

use rmca_tests::{Job, LossyLink};

#[test]
fn dr_over_ud_survives_a_lossy_1500_byte_link_without_ip_fragments() {
    // ipfrag_time (30 s, as in the issue) is far longer than the peer timeout: one filled
    // reassembly memory is enough for dr to give the peer up.
    let link = match LossyLink::new(1500, 0.2, 30) {
        Ok(l) => l,
        Err(e) => {
            return rmca_test_support::skip_or_fail(format!(
                "needs root, iproute2, veth, HTB and cls_bpf: {e}"
            ))
        }
    };
    let base: &[(&str, &str)] = &[
        ("pml", "dr"),
        ("btl", "ud,self"),
        ("btl_ud_provider", "soft"),
        ("pml_dr_peer_timeout", "5000"),
    ];
    // The default (one packet of the interface: 1444 here, silently), the 2048 bytes that were
    // the default when the issue was found, and a btl_ud_mtu far above the link: the two set
    // by hand are lowered with a warning.
    for extra in [
        None,
        Some(("btl_ud_mtu", "2048")),
        Some(("btl_ud_mtu", "65000")),
    ] {
        let mut mca = base.to_vec();
        mca.extend(extra);
        let frags_before = [0, 1].map(|i| link.ip_counter(i, "FragCreates"));
        let drops_before = link.dropped(0) + link.dropped(1);
        // 16 MiB checked byte for byte, then the pair keeps talking for a second.
        let out = link.run_job(&Job {
            ranks: 2,
            program: "dr_long_talk",
            args: &["16", "1"],
            mca: &mca,
            timeout_s: 30,
        });
        let what = format!("{extra:?}: {}", out.text());
        assert!(out.success(), "{what}");
        for r in 0..2 {
            assert!(out.stdout.contains(&format!("rank {r}: talked")), "{what}");
        }
        assert!(!out.stderr.contains("declared dead"), "{what}");
        for (i, before) in frags_before.into_iter().enumerate() {
            assert_eq!(
                link.ip_counter(i, "FragCreates"),
                before,
                "node {i} sent IP fragments: {what}"
            );
        }
        assert!(
            link.dropped(0) + link.dropped(1) > drops_before + 100,
            "the link lost nothing: {what}"
        );
        if let Some((_, asked)) = extra {
            assert!(
                out.stderr.contains(&format!("btl_ud_mtu {asked}"))
                    && out.stderr.contains(&link.dev[0])
                    && out.stderr.contains("MTU 1500")
                    && out.stderr.contains("using 1444"),
                "no warning about the lowered btl_ud_mtu: {what}"
            );
        }
    }
}
