//! btl-ud over the soft provider on a 1500-byte interface (a veth in a fresh network namespace;
//! needs root): datagrams never exceed one packet, a larger `btl_ud_mtu` is lowered with a
//! warning that names it, and peers of different MTUs use the smaller.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use common::*;
use rmca_framework::btl::{tags, SendHint};
use rmca_framework::memory::MemoryAccounting;
use rmca_framework::modex::LocalModex;

/// Runs `body` in a new network namespace holding a veth pair `udmtu0`/`udmtu1` with MTU
/// 1500, 10.77.0.1/24 on `udmtu0`.
fn in_fresh_netns(body: impl FnOnce() + Send + 'static) -> bool {
    rmca_test_support::netns::in_fresh_netns("udmtu", 1500, "10.77.0.1/24", body)
}

/// Log lines written while `f` runs on this thread.
fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let w = buf.clone();
    let sub = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .with_writer(move || w.clone())
        .finish();
    let out = tracing::subscriber::with_default(sub, f);
    let text = String::from_utf8_lossy(&buf.0.lock().unwrap()).into_owned();
    (out, text)
}

const ON_VETH: (&str, &str) = ("btl_ud_if_addr", "10.77.0.1");
/// UD payload of one packet on a 1500-byte link: 1500 - 20 (IPv4) - 8 (UDP) - 28 (soft UD).
const LINK_UD_MTU: usize = 1444;

#[test]
fn soft_only_btl_ud_mtu_above_the_interface_is_lowered_with_a_warning_naming_it() {
    if !require_soft("the interface MTU rule of the soft provider") {
        return;
    }
    in_fresh_netns(|| {
        let modex = LocalModex::new();
        let mem = MemoryAccounting::new();
        let (b, log) = logged(|| {
            init(
                &job(0, 1, "job-link"),
                &modex,
                &mem,
                &[ON_VETH, ("btl_ud_mtu", "65000")],
            )
        });
        let b = b.expect("a too large btl_ud_mtu is lowered, not refused");
        assert_eq!(b.attributes().max_send_size, LINK_UD_MTU - 4);
        assert_eq!(card_of(&modex, 0).mtu as usize, LINK_UD_MTU);
        for s in [
            "WARN",
            "btl_ud_mtu 65000",
            "udmtu0",
            "MTU 1500",
            "using 1444",
        ] {
            assert!(log.contains(s), "{s:?} missing from the warning: {log}");
        }
        // The default takes the interface's room silently; a smaller value is kept.
        let (b, log) =
            logged(|| init(&job(0, 1, "job-link"), &LocalModex::new(), &mem, &[ON_VETH]));
        assert_eq!(b.unwrap().attributes().max_send_size, LINK_UD_MTU - 4);
        assert!(!log.contains("btl_ud_mtu"), "{log}");
        let b = init(
            &job(0, 1, "job-link"),
            &LocalModex::new(),
            &mem,
            &[ON_VETH, ("btl_ud_mtu", "1024")],
        );
        assert_eq!(b.unwrap().attributes().max_send_size, 1020);
    });
}

#[test]
fn soft_only_a_peer_on_a_smaller_link_lowers_the_fragment_size_of_its_peers() {
    if !require_soft("the interface MTU rule of the soft provider") {
        return;
    }
    in_fresh_netns(|| {
        let modex = LocalModex::new();
        let mem = MemoryAccounting::new();
        // Rank 0 on the 1500-byte veth, rank 1 on loopback asking for 4 KiB.
        let settings: [&[(&str, &str)]; 2] = [
            &[ON_VETH],
            &[("btl_ud_if_addr", "127.0.0.1"), ("btl_ud_mtu", "4096")],
        ];
        let mut btls: Vec<_> = (0..2u32)
            .map(|r| init(&job(r, 2, "job-peers"), &modex, &mem, settings[r as usize]).unwrap())
            .collect();
        assert_eq!(btls[1].attributes().max_send_size, 4092);
        for (r, b) in btls.iter_mut().enumerate() {
            let reach = b
                .add_procs(&job(r as u32, 2, "job-peers").procs(), &modex)
                .unwrap();
            assert_eq!(reach, vec![true, true]);
        }
        for b in &btls {
            assert_eq!(b.attributes().max_send_size, LINK_UD_MTU - 4);
        }
        let max = LINK_UD_MTU - 4;
        let mut sk = sinks(2);
        for (from, to, byte) in [(0u32, 1u32, 3u8), (1, 0, 5)] {
            btls[from as usize]
                .send(
                    to,
                    tags::USER_BASE,
                    &[],
                    &vec![byte; max],
                    SendHint::default(),
                )
                .unwrap();
        }
        progress_until(&mut btls, &mut sk, |s| {
            s.iter().all(|s| !s.frags.is_empty())
        });
        assert_eq!(sk[1].frags[0].2, vec![3; max]);
        assert_eq!(sk[0].frags[0].2, vec![5; max]);
    });
}
