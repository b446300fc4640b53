//! ob1's one-sided RDMA for osc-rdma (`Pml::rdma_*`) over the in-memory BTL: a large
//! transfer is split into the BTL's RDMA fragments and pipelined at the rendezvous' depth,
//! never issued whole at once.

mod common;

use common::*;
use rmca_framework::btl::BtlFlags;
use rmca_framework::pml::Pml;
use rmca_pml_ob1::Ob1Config;

/// A get of `len` bytes in `frag`-byte pieces: at most `recv_pipeline_depth` pieces are
/// issued before a completion, every piece is issued in the end, and the bytes arrive.
fn pipelined_get(len: usize, frag: usize, depth: usize) {
    let rail = MemConfig {
        flags: BtlFlags::SEND | BtlFlags::GET,
        rdma_frag: frag,
        ..MemConfig::default()
    };
    let cfg = Ob1Config {
        recv_pipeline_depth: depth,
        ..Ob1Config::default()
    };
    let (mut a, mut b, links) = pair(&[rail], cfg);
    let exposed = pattern(len, 9);
    let (_handle, keys) = a.rdma_register(lend(&exposed), &[1]).unwrap();
    assert!(!keys.keys.is_empty(), "the mem BTL registered the window");
    let mut out = vec![0u8; len];
    let token = b
        .rdma_get(0, lend_mut(&mut out), &keys, exposed.as_ptr() as u64)
        .unwrap();
    let pieces = len.div_ceil(frag) as u64;
    // The mem BTL copies at `get` and reports the completion at its next progress: what it
    // copied before any progress is what ob1 issued in one go.
    assert_eq!(
        links[0].gets(),
        pieces.min(depth as u64),
        "pieces issued before a completion (depth {depth}, {pieces} pieces)"
    );
    let mut most = 0;
    let mut done = None;
    drive(&mut a, &mut b, |_, b| {
        done = b.rdma_test(token);
        most = most.max(links[0].gets());
        done.is_some()
    });
    done.unwrap().unwrap();
    assert_eq!(links[0].gets(), pieces, "every piece issued once");
    assert!(most <= pieces);
    assert_eq!(out, exposed);
}

#[test]
fn a_large_get_is_pipelined_at_the_rendezvous_depth() {
    pipelined_get(1 << 20, 4096, 4);
    pipelined_get(100_000, 4096, 1);
}

#[test]
fn a_transfer_of_fewer_pieces_than_the_depth_goes_at_once() {
    pipelined_get(10_000, 4096, 4);
    pipelined_get(4096, 4096, 4);
    pipelined_get(1, 4096, 4);
}
