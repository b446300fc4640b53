//! Property test of ob1 end to end against a reference matching model: random messages
//! (sizes across eager / rendezvous / RGET, tags, contexts, modes) and random receive
//! selectors, over random BTL configurations (one or two rails, GET or not, reordering,
//! back-pressure, in-place delivery) and scheduling policies.

mod common;

use common::*;
use proptest::prelude::*;
use rmca_framework::btl::BtlFlags;
use rmca_framework::pml::{Pml, Source, TagSel};
use rmca_pml_ob1::{Ob1Config, Scheduling};

const SIZES: [usize; 6] = [0, 9, 3000, 5000, 70_000, 300_001];
const MAX: usize = 300_001;

#[derive(Clone, Debug)]
struct Msg {
    ctx: u32,
    tag: i32,
    size: usize,
    sync: bool,
}

fn msg() -> impl Strategy<Value = Msg> {
    (0u32..2, 0i32..3, 0usize..SIZES.len(), any::<bool>()).prop_map(|(ctx, tag, s, sync)| Msg {
        ctx,
        tag,
        size: SIZES[s],
        sync,
    })
}

fn rails(choice: u8) -> Vec<MemConfig> {
    let get = BtlFlags::SEND | BtlFlags::GET;
    match choice % 5 {
        0 => vec![MemConfig::default()],
        // Fragments written in place as they arrive (btl-shm), with back-pressure.
        4 => vec![MemConfig {
            place_from: 100,
            would_block_every: 7,
            ..MemConfig::default()
        }],
        1 => vec![MemConfig {
            flags: get,
            rdma_frag: 40_000,
            would_block_every: 4,
            ..MemConfig::default()
        }],
        2 => vec![
            MemConfig {
                reorder: true,
                bandwidth_mbps: 20_000,
                ..MemConfig::default()
            },
            MemConfig {
                reorder: true,
                max_send_size: 16 * 1024,
                would_block_every: 5,
                ..MemConfig::default()
            },
        ],
        _ => vec![
            MemConfig {
                flags: get,
                reorder: true,
                rdma_frag: 32 * 1024,
                ..MemConfig::default()
            },
            MemConfig {
                flags: get,
                reorder: true,
                rdma_frag: 64 * 1024,
                bandwidth_mbps: 5_000,
                ..MemConfig::default()
            },
        ],
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn ob1_matches_like_the_model(
        msgs in proptest::collection::vec(msg(), 1..24),
        recvs in proptest::collection::vec((0u32..2, proptest::option::of(0i32..3)), 0..24),
        rail_choice in any::<u8>(),
        policy in 0usize..4,
    ) {
        let policy = [Scheduling::Binding, Scheduling::RoundRobin, Scheduling::Striping, Scheduling::Epc][policy];
        let (mut a, mut b, _) = pair(&rails(rail_choice), Ob1Config { scheduling: policy, ..Ob1Config::default() });

        // Model: every receive is posted before any send, so each message (in send order)
        // matches the earliest posted receive that fits; leftovers go to receives posted after.
        let mut assigned: Vec<Option<usize>> = vec![None; recvs.len()];
        let mut leftovers = Vec::new();
        for (i, m) in msgs.iter().enumerate() {
            let slot = (0..recvs.len()).find(|&r| {
                assigned[r].is_none() && recvs[r].0 == m.ctx && (recvs[r].1.is_none() || recvs[r].1 == Some(m.tag))
            });
            match slot {
                Some(r) => assigned[r] = Some(i),
                None => leftovers.push(i),
            }
        }

        let payloads: Vec<Vec<u8>> = msgs.iter().enumerate().map(|(i, m)| pattern(m.size, i as u8)).collect();
        let mut bufs: Vec<Vec<u8>> = (0..recvs.len() + leftovers.len()).map(|_| vec![0u8; MAX]).collect();
        let (posted_bufs, late_bufs) = bufs.split_at_mut(recvs.len());
        let mut rids = Vec::new();
        for ((ctx, tag), buf) in recvs.iter().zip(posted_bufs.iter_mut()) {
            rids.push(recv(&mut b, buf, Source::Rank(0), tag.map_or(TagSel::Any, TagSel::Tag), *ctx));
        }
        let mut sends = Vec::new();
        for (m, p) in msgs.iter().zip(&payloads) {
            let id = if m.sync { ssend(&mut a, p, 1, m.tag, m.ctx) } else { send(&mut a, p, 1, m.tag, m.ctx) };
            sends.push((Side::A, id));
        }
        let mut late = Vec::new();
        for (&i, buf) in leftovers.iter().zip(late_bufs.iter_mut()) {
            // A wildcard on the leftover's context takes the earliest leftover of that context,
            // which (single sender, per-context order) is this one.
            late.push((i, recv(&mut b, buf, Source::Any, TagSel::Any, msgs[i].ctx)));
        }
        let mut waits = sends.clone();
        for (r, id) in rids.iter().enumerate() {
            if assigned[r].is_some() {
                waits.push((Side::B, *id));
            }
        }
        waits.extend(late.iter().map(|(_, id)| (Side::B, *id)));
        let st = wait_all(&mut a, &mut b, &waits);
        prop_assert!(st.iter().all(|s| s.error.is_none()), "{:?}", st);

        let mut k = sends.len();
        for (r, buf) in bufs.iter().enumerate().take(recvs.len()) {
            if let Some(i) = assigned[r] {
                prop_assert_eq!(st[k].len, msgs[i].size);
                prop_assert_eq!(st[k].tag, msgs[i].tag);
                prop_assert!(buf[..msgs[i].size] == payloads[i][..], "receive {} did not get message {}", r, i);
                k += 1;
            } else {
                prop_assert!(b.cancel(rids[r]).unwrap(), "receive {} should still be posted", r);
            }
        }
        for (j, (i, _)) in late.iter().enumerate() {
            prop_assert_eq!(st[k + j].len, msgs[*i].size);
            prop_assert!(bufs[recvs.len() + j][..msgs[*i].size] == payloads[*i][..]);
        }
    }
}
