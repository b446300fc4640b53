//! Random traffic between two btl-ud modules: whatever the sizes, tags, header splits and the
//! interleaving of sends and progress, every fragment arrives exactly once and intact (no
//! faults injected; loopback does not lose datagrams while receive buffers are posted).

mod common;

use common::*;
use proptest::prelude::*;
use rmca_framework::btl::SendHint;

#[derive(Debug, Clone)]
enum Step {
    Send {
        from: usize,
        len: usize,
        split: usize,
        tag: u8,
    },
    Progress(usize),
}

fn step(max: usize) -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0usize..2, 0..=max, 0usize..8, any::<u8>()).prop_map(|(from, len, split, tag)| Step::Send { from, len, split, tag }),
        1 => (0usize..2).prop_map(Step::Progress),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    #[test]
    fn random_traffic_arrives_exactly_once_and_intact(steps in proptest::collection::vec(step(1020), 1..120)) {
        // A tiny send queue so that the pending FIFO is exercised; a pool larger than the
        // burst so that nothing is dropped for lack of receive buffers.
        let s: &[(&str, &str)] = &[
            ("btl_ud_mtu", if soft() { "1024" } else { "0" }),
            ("btl_ud_send_qps", "2"),
            ("btl_ud_send_queue_depth", "3"),
            ("btl_ud_recv_buffers", "256"),
        ];
        let mut btls = ranks("job-prop", &[s, s]);
        let max = btls[0].attributes().max_send_size;
        let mut sk = sinks(2);
        let mut expected: Vec<Vec<(u32, u8, Vec<u8>)>> = vec![Vec::new(), Vec::new()];
        for (seq, st) in steps.into_iter().enumerate() {
            match st {
                Step::Send { from, len, split, tag } => {
                    let len = len.min(max);
                    let data = pattern(from as u32, seq as u32, len);
                    let split = split.min(len);
                    btls[from].send(1 - from as u32, tag, &data[..split], &data[split..], SendHint::default()).unwrap();
                    expected[1 - from].push((from as u32, tag, data));
                }
                Step::Progress(who) => {
                    let (b, s) = (&mut btls[who], &mut sk[who]);
                    b.progress(s);
                }
            }
        }
        progress_until(&mut btls, &mut sk, |s| (0..2).all(|d| s[d].frags.len() >= expected[d].len()));
        progress_rounds(&mut btls, &mut sk, 3);
        for d in 0..2 {
            let mut got = std::mem::take(&mut sk[d].frags);
            got.sort();
            let mut want = expected[d].clone();
            want.sort();
            prop_assert_eq!(got, want);
        }
    }
}
