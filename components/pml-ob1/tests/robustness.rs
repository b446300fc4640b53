//! Forged and random fragments thrown at a live ob1 (with requests in every state) never
//! panic; they are dropped and counted.

mod common;

use common::*;
use proptest::prelude::*;
use rmca_framework::pml::{Pml, Source, TagSel};
use rmca_pml_ob1::engine::TAG;
use rmca_pml_ob1::hdr::{MatchRepr, Repr, RgetKey, RndvRepr};
use rmca_pml_ob1::Ob1Config;

fn forged() -> impl Strategy<Value = (Repr, Vec<u8>)> {
    // Request ids near the real ones (generation 1, small indices) to hit live requests.
    let req = prop_oneof![(0u64..8).prop_map(|i| (1u64 << 32) | i), any::<u64>()];
    // No source rank on the wire: a forged envelope is taken as from the link's peer.
    let env = (0u32..3, -2i32..3, 0u32..4).prop_map(|(ctx, tag, seq)| MatchRepr { ctx, tag, seq });
    let rndv = (
        env.clone(),
        prop_oneof![0u64..100_000, any::<u64>()],
        req.clone(),
        any::<bool>(),
    )
        .prop_map(|(hdr, msg_len, src_req, sync)| RndvRepr {
            hdr,
            msg_len,
            src_req,
            sync,
        });
    let repr = prop_oneof![
        env.prop_map(Repr::Match),
        rndv.clone().prop_map(Repr::Rndv),
        (
            rndv,
            any::<u64>(),
            proptest::collection::vec(
                ("mem|self|x", proptest::collection::vec(any::<u8>(), 0..9)),
                0..3
            )
        )
            .prop_map(|(rndv, addr, keys)| Repr::Rget {
                rndv,
                addr,
                keys: keys
                    .into_iter()
                    .map(|(btl, key)| RgetKey { btl, key })
                    .collect()
            }),
        (req.clone(), req.clone(), any::<u64>()).prop_map(|(src_req, dst_req, wanted)| Repr::Ack {
            src_req,
            dst_req,
            wanted
        }),
        (req.clone(), prop_oneof![0u64..100_000, any::<u64>()])
            .prop_map(|(dst_req, offset)| Repr::Frag { dst_req, offset }),
        (req, any::<bool>()).prop_map(|(src_req, failed)| Repr::Fin { src_req, failed }),
    ];
    (repr, proptest::collection::vec(any::<u8>(), 0..64))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn forged_fragments_never_panic(frags in proptest::collection::vec(forged(), 1..20)) {
        let (mut a, mut b, h) = pair(&[MemConfig::default()], Ob1Config::default());
        let big = pattern(50_000, 1);
        let mut rbuf = vec![0u8; 50_000];
        let mut small = vec![0u8; 16];
        // Live requests on B: a posted receive, a rendezvous send waiting for its ACK, and a
        // receive in the FRAG phase.
        let _r0 = recv(&mut b, &mut small, Source::Any, TagSel::Any, 1);
        let _s = send(&mut b, &big, 0, 0, 0);
        let _s2 = send(&mut a, &big, 1, 9, 2);
        let _r1 = recv(&mut b, &mut rbuf, Source::Rank(0), TagSel::Tag(9), 2);
        a.progress();
        for (repr, payload) in &frags {
            let mut bytes = vec![0u8; repr.header_len()];
            repr.emit(&mut bytes).unwrap();
            bytes.extend_from_slice(payload);
            h[0].inject(1, TAG, &bytes);
        }
        for _ in 0..4 {
            a.progress();
            b.progress();
        }
        let _ = b.iprobe(0, Source::Any, TagSel::Any).unwrap();
        let _ = b.counters();
    }
}
