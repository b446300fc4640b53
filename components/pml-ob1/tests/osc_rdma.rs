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

/// Counts each thread's allocations (the harness runs tests on several threads).
#[global_allocator]
static ALLOC: rmca_test_support::alloc_count::Counting = rmca_test_support::alloc_count::Counting;

/// One transfer of `local` (a get when `get`), driven to its end: its result.
fn transfer(
    a: &mut rmca_pml_ob1::Ob1,
    b: &mut rmca_pml_ob1::Ob1,
    local: rmca_framework::buffer::UserBuf,
    keys: &rmca_framework::pml::RdmaKeys,
    addr: u64,
    get: bool,
    counted: &mut u64,
) -> Result<(), rmca_framework::pml::PmlError> {
    let before = rmca_test_support::alloc_count::allocations();
    let token = if get {
        b.rdma_get(0, local, keys, addr)
    } else {
        b.rdma_put(0, local, keys, addr)
    }
    .unwrap();
    *counted += rmca_test_support::alloc_count::allocations() - before;
    let mut done = None;
    drive(a, b, |_, b| {
        let before = rmca_test_support::alloc_count::allocations();
        done = b.rdma_test(token);
        *counted += rmca_test_support::alloc_count::allocations() - before;
        done.is_some()
    });
    done.unwrap()
}

/// Once the PML held a transfer, starting, issuing and testing the next ones allocates
/// nothing: no key copied per transfer or per piece, no map entry.
#[test]
fn a_warm_transfer_allocates_nothing() {
    let rail = MemConfig {
        flags: BtlFlags::SEND | BtlFlags::GET | BtlFlags::PUT,
        rdma_frag: 4096,
        ..MemConfig::default()
    };
    let (mut a, mut b, _links) = pair(&[rail], Ob1Config::default());
    let mut exposed = vec![0u8; 16384];
    let base = exposed.as_ptr() as u64;
    let (_handle, keys) = a.rdma_register(lend_mut(&mut exposed), &[1]).unwrap();
    let data = pattern(10_000, 3);
    let mut out = vec![0u8; 10_000];
    let mut ignored = 0;
    // Warm: the slab's slot, the BTL's completion queue.
    for _ in 0..4 {
        transfer(
            &mut a,
            &mut b,
            lend(&data),
            &keys,
            base,
            false,
            &mut ignored,
        )
        .unwrap();
        transfer(
            &mut a,
            &mut b,
            lend_mut(&mut out),
            &keys,
            base,
            true,
            &mut ignored,
        )
        .unwrap();
    }
    let mut counted = 0;
    for i in 0..50u64 {
        let at = base + i * 8;
        transfer(&mut a, &mut b, lend(&data), &keys, at, false, &mut counted).unwrap();
        transfer(
            &mut a,
            &mut b,
            lend_mut(&mut out),
            &keys,
            at,
            true,
            &mut counted,
        )
        .unwrap();
    }
    assert_eq!(counted, 0, "allocations in rdma_put/rdma_get/rdma_test");
    assert_eq!(out, data, "the last get read what the last put wrote");
}

/// A token names one transfer: once reported it is refused, even when the next transfer
/// took its place in the PML; transfers in flight together keep apart; a failed transfer
/// frees its place too.
#[test]
fn a_spent_token_is_refused_and_its_place_serves_the_next() {
    let rail = MemConfig {
        flags: BtlFlags::SEND | BtlFlags::GET,
        rdma_frag: 4096,
        ..MemConfig::default()
    };
    let (mut a, mut b, _links) = pair(&[rail], Ob1Config::default());
    let exposed = pattern(8192, 5);
    let base = exposed.as_ptr() as u64;
    let (_handle, keys) = a.rdma_register(lend(&exposed), &[1]).unwrap();
    let mut x = vec![0u8; 100];
    let mut y = vec![0u8; 100];
    let mut n = 0;
    let t1 = b.rdma_get(0, lend_mut(&mut x), &keys, base).unwrap();
    let t2 = b.rdma_get(0, lend_mut(&mut y), &keys, base + 1000).unwrap();
    assert_ne!(t1, t2);
    let (mut d1, mut d2) = (None, None);
    drive(&mut a, &mut b, |_, b| {
        if d1.is_none() {
            d1 = b.rdma_test(t1);
        }
        if d2.is_none() {
            d2 = b.rdma_test(t2);
        }
        d1.is_some() && d2.is_some()
    });
    d1.unwrap().unwrap();
    d2.unwrap().unwrap();
    assert_eq!(x, exposed[..100]);
    assert_eq!(y, exposed[1000..1100]);
    // Spent: refused, also after a new transfer reused its place.
    assert!(matches!(b.rdma_test(t1), Some(Err(_))));
    let mut z = vec![0u8; 100];
    transfer(
        &mut a,
        &mut b,
        lend_mut(&mut z),
        &keys,
        base + 2000,
        true,
        &mut n,
    )
    .unwrap();
    assert_eq!(z, exposed[2000..2100]);
    assert!(matches!(b.rdma_test(t1), Some(Err(_))));
    assert!(matches!(b.rdma_test(t2), Some(Err(_))));
    // Outside the registration: the BTL refuses it, the transfer reports the error once.
    let e = transfer(
        &mut a,
        &mut b,
        lend_mut(&mut z),
        &keys,
        base + 8192,
        true,
        &mut n,
    );
    assert!(e.is_err(), "a get past the registration fails");
    transfer(&mut a, &mut b, lend_mut(&mut z), &keys, base, true, &mut n).unwrap();
    assert_eq!(z, exposed[..100]);
}
