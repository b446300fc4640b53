//! Per-message cost of ob1's eager path: a rank sends 8 B to itself through btl-self
//! (isend + irecv + progress + test on both requests). This isolates the PML's own overhead
//! (header encode/decode, matching, request slab); the BTL is a local queue. Prints the
//! median and spread of several runs, and a JSON line.
//!
//! `cargo bench -p rmca-pml-ob1 --bench ob1_self [-- <messages per run>]`

use std::time::Instant;

use rmca_btl_self::{BtlSelf, SelfConfig};
use rmca_framework::bml::Bml;
use rmca_framework::btl::Btl;
use rmca_framework::buffer::UserBuf;
use rmca_framework::modex::LocalModex;
use rmca_framework::pml::{Pml, RecvArgs, SendArgs, SendMode, Source, TagSel};
use rmca_framework::rank::ProcInfo;
use rmca_pml_ob1::{Ob1, Ob1Config};

// SAFETY (lend, lend_mut): the memory lent stays borrowed here until the operation using it
// has completed (every caller waits for its operations before its buffers go).
fn lend(v: &[u8]) -> UserBuf {
    unsafe { UserBuf::from_slice(v) }
}
fn lend_mut(v: &mut [u8]) -> UserBuf {
    unsafe { UserBuf::from_mut_slice(v) }
}

fn run(p: &mut Ob1, n: usize, len: usize, posted_first: bool) -> f64 {
    let msg = vec![7u8; len];
    let mut out = vec![0u8; len];
    let t = Instant::now();
    for i in 0..n {
        let tag = (i & 7) as i32;
        let send = |p: &mut Ob1| {
            p.isend(SendArgs {
                buf: lend(&msg),
                dest: 0,
                tag,
                context: 0,
                mode: SendMode::Standard,
                pattern: Default::default(),
            })
            .unwrap()
        };
        let (s, r) = if posted_first {
            let r = p
                .irecv(RecvArgs {
                    buf: lend_mut(&mut out),
                    source: Source::Rank(0),
                    tag: TagSel::Tag(tag),
                    context: 0,
                    pattern: Default::default(),
                })
                .unwrap();
            (send(p), r)
        } else {
            let s = send(p);
            p.progress();
            let r = p
                .irecv(RecvArgs {
                    buf: lend_mut(&mut out),
                    source: Source::Rank(0),
                    tag: TagSel::Tag(tag),
                    context: 0,
                    pattern: Default::default(),
                })
                .unwrap();
            (s, r)
        };
        loop {
            if p.test(r).unwrap().is_some() {
                break;
            }
            p.progress();
        }
        while p.test(s).unwrap().is_none() {
            p.progress();
        }
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let procs = [ProcInfo {
        rank: 0,
        node: 0,
        is_self: true,
    }];
    let btls: Vec<Box<dyn Btl>> = vec![Box::new(BtlSelf::new(SelfConfig::default()))];
    let mut p = Ob1::new(
        Bml::build(btls, &procs, &LocalModex::new()).unwrap(),
        Ob1Config::default(),
    );
    run(&mut p, n / 10, 8, true);
    for (name, posted_first) in [("expected", true), ("unexpected", false)] {
        let mut v: Vec<f64> = (0..7).map(|_| run(&mut p, n, 8, posted_first)).collect();
        v.sort_by(f64::total_cmp);
        println!(
            "ob1+self 8 B {name:>10}: median {:.1} ns/message (min {:.1}, max {:.1}, 7 runs of {n})",
            v[3], v[0], v[6]
        );
        println!(
            "{{\"bench\":\"ob1_self\",\"case\":\"{name}\",\"bytes\":8,\"median_ns\":{:.1},\"min_ns\":{:.1},\"max_ns\":{:.1},\"runs\":7,\"messages\":{n}}}",
            v[3], v[0], v[6]
        );
    }
}
