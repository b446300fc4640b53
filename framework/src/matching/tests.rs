use proptest::prelude::*;

use super::*;

fn env(context: ContextId, source: Rank, tag: Tag) -> Envelope {
    Envelope {
        context,
        source,
        tag,
    }
}

#[test]
fn posted_specific_receive_matches_in_order() {
    let mut m: Matcher<u32, Vec<u8>> = Matcher::new(2);
    assert_eq!(
        m.post(0, Source::Rank(1), TagSel::Tag(5), 10),
        Posted::Queued
    );
    assert_eq!(
        m.post(0, Source::Rank(1), TagSel::Tag(5), 11),
        Posted::Queued
    );
    assert_eq!(
        m.arrive(env(0, 1, 5), 0, || panic!("no copy when matched")),
        Arrival::Matched(10)
    );
    assert_eq!(
        m.arrive(env(0, 1, 5), 1, || panic!("no copy when matched")),
        Arrival::Matched(11)
    );
    assert_eq!(m.posted_len(), 0);
}

#[test]
fn unexpected_then_post_matches_first_arrival() {
    let mut m: Matcher<u32, &str> = Matcher::new(3);
    assert_eq!(m.arrive(env(0, 2, 7), 0, || "a"), Arrival::Unexpected);
    assert_eq!(m.arrive(env(0, 1, 7), 0, || "b"), Arrival::Unexpected);
    assert_eq!(m.arrive(env(0, 1, 8), 1, || "c"), Arrival::Unexpected);
    assert_eq!(
        m.probe(0, Source::Any, TagSel::Tag(7))
            .map(|(e, p)| (e.source, *p)),
        Some((2, "a"))
    );
    assert_eq!(
        m.post(0, Source::Any, TagSel::Tag(8), 1),
        Posted::Matched(env(0, 1, 8), "c")
    );
    assert_eq!(
        m.post(0, Source::Any, TagSel::Any, 2),
        Posted::Matched(env(0, 2, 7), "a")
    );
    assert_eq!(
        m.post(0, Source::Rank(1), TagSel::Any, 3),
        Posted::Matched(env(0, 1, 7), "b")
    );
    assert_eq!(m.unexpected_len(), 0);
}

#[test]
fn earliest_posted_wins_between_specific_and_wildcard() {
    let mut m: Matcher<u32, ()> = Matcher::new(2);
    m.post(0, Source::Any, TagSel::Any, 1);
    m.post(0, Source::Rank(1), TagSel::Tag(3), 2);
    assert_eq!(m.arrive(env(0, 1, 3), 0, || ()), Arrival::Matched(1));
    assert_eq!(m.arrive(env(0, 1, 3), 1, || ()), Arrival::Matched(2));
}

#[test]
fn out_of_order_arrivals_are_held_and_released_in_sequence() {
    let mut m: Matcher<u32, u32> = Matcher::new(2);
    m.post(0, Source::Rank(1), TagSel::Any, 100);
    m.post(0, Source::Rank(1), TagSel::Any, 101);
    assert_eq!(m.arrive(env(0, 1, 0), 2, || 2), Arrival::Held);
    assert_eq!(m.arrive(env(0, 1, 0), 1, || 1), Arrival::Held);
    assert_eq!(m.held_len(), 2);
    assert_eq!(m.arrive(env(0, 1, 0), 0, || 0), Arrival::Matched(100));
    let r = m.poll_released().expect("seq 1 released");
    assert_eq!((r.recv, r.payload), (101, 1));
    assert!(m.poll_released().is_none());
    assert_eq!(m.unexpected_len(), 1, "seq 2 found no receive");
    assert_eq!(
        m.post(0, Source::Any, TagSel::Any, 102),
        Posted::Matched(env(0, 1, 0), 2)
    );
    assert_eq!(m.arrive(env(0, 1, 0), 1, || 9), Arrival::Stale);
}

#[test]
fn a_taken_message_is_matched_by_no_later_receive_or_probe() {
    let mut m: Matcher<u32, &str> = Matcher::new(3);
    assert_eq!(m.take(0, Source::Any, TagSel::Any), None);
    assert_eq!(m.arrive(env(0, 1, 4), 0, || "a"), Arrival::Unexpected);
    assert_eq!(m.arrive(env(0, 2, 4), 0, || "b"), Arrival::Unexpected);
    assert_eq!(m.take(1, Source::Any, TagSel::Any), None, "other context");
    assert_eq!(
        m.take(0, Source::Any, TagSel::Tag(4)),
        Some((env(0, 1, 4), "a"))
    );
    assert_eq!(
        m.probe(0, Source::Any, TagSel::Any).map(|(e, p)| (e, *p)),
        Some((env(0, 2, 4), "b"))
    );
    assert_eq!(m.post(0, Source::Rank(1), TagSel::Any, 7), Posted::Queued);
    assert_eq!(
        m.post(0, Source::Any, TagSel::Any, 8),
        Posted::Matched(env(0, 2, 4), "b")
    );
    assert_eq!(m.unexpected_len(), 0);
    assert_eq!(m.posted_len(), 1);
}

#[test]
fn contexts_are_isolated() {
    let mut m: Matcher<u32, u8> = Matcher::new(2);
    m.post(1, Source::Any, TagSel::Any, 7);
    assert_eq!(m.arrive(env(2, 0, 0), 0, || 1), Arrival::Unexpected);
    assert_eq!(m.arrive(env(1, 0, 0), 0, || 2), Arrival::Matched(7));
    assert!(m.probe(1, Source::Any, TagSel::Any).is_none());
    assert_eq!(m.next_send_seq(1, 1), 0);
    assert_eq!(m.next_send_seq(1, 1), 1);
    assert_eq!(m.next_send_seq(2, 1), 0);
}

#[test]
fn cancel_and_peer_failure_remove_posted_receives() {
    let mut m: Matcher<u32, ()> = Matcher::new(3);
    m.post(0, Source::Rank(2), TagSel::Any, 1);
    m.post(4, Source::Rank(2), TagSel::Tag(1), 2);
    m.post(0, Source::Any, TagSel::Any, 3);
    assert!(m.cancel(0, &3));
    assert!(!m.cancel(0, &3));
    assert_eq!(m.take_posted_from(2).len(), 2);
    assert_eq!(m.posted_len(), 0);
}

#[test]
fn bad_source_is_stale_not_a_panic() {
    let mut m: Matcher<u32, ()> = Matcher::new(2);
    assert_eq!(m.arrive(env(0, 9, 0), 0, || ()), Arrival::Stale);
    assert_eq!(m.post(0, Source::Rank(9), TagSel::Any, 1), Posted::Queued);
    assert_eq!(m.stats().stale, 1);
}

#[test]
fn sequence_numbers_wrap() {
    assert!(seq_before(u32::MAX, 0));
    assert!(!seq_before(0, u32::MAX));
    assert!(seq_before(5, 6));
}

// ---- reference model ----

#[derive(Clone, Debug)]
enum Op {
    Post {
        ctx: u32,
        src: Option<u32>,
        tag: Option<i32>,
    },
    Send {
        ctx: u32,
        src: u32,
        tag: i32,
    },
    /// Deliver one in-flight message (index modulo the in-flight count): models reordering.
    Deliver(usize),
    Probe {
        ctx: u32,
        src: Option<u32>,
        tag: Option<i32>,
    },
    Cancel(u32),
    /// A matched probe: the message found is taken out of matching.
    Take {
        ctx: u32,
        src: Option<u32>,
        tag: Option<i32>,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let ctx = 0u32..2;
    let src = 0u32..3;
    let tag = 0i32..3;
    prop_oneof![
        3 => (ctx.clone(), proptest::option::of(src.clone()), proptest::option::of(tag.clone()))
            .prop_map(|(ctx, src, tag)| Op::Post { ctx, src, tag }),
        3 => (ctx.clone(), src.clone(), tag.clone()).prop_map(|(ctx, src, tag)| Op::Send { ctx, src, tag }),
        4 => (0usize..8).prop_map(Op::Deliver),
        1 => (ctx.clone(), proptest::option::of(src.clone()), proptest::option::of(tag.clone()))
            .prop_map(|(ctx, src, tag)| Op::Probe { ctx, src, tag }),
        1 => (ctx, proptest::option::of(src), proptest::option::of(tag))
            .prop_map(|(ctx, src, tag)| Op::Take { ctx, src, tag }),
        1 => (0u32..20).prop_map(Op::Cancel),
    ]
}

/// The obviously-correct model: flat lists scanned in order.
#[derive(Default)]
struct Model {
    posted: Vec<(u32, u32, Source, TagSel)>,
    /// (ctx, src, tag, msg id) in availability order.
    unexpected: Vec<(u32, u32, i32, u32)>,
    /// Delivered-but-not-yet-available messages: (ctx, src, seq, tag, msg id).
    waiting: Vec<(u32, u32, u32, i32, u32)>,
    expected: std::collections::HashMap<(u32, u32), u32>,
}

impl Model {
    fn fits(src: Source, tag: TagSel, s: u32, t: i32) -> bool {
        (match src {
            Source::Any => true,
            Source::Rank(r) => r == s,
        }) && tag_fits(tag, t)
    }
    fn post(&mut self, id: u32, ctx: u32, src: Source, tag: TagSel) -> Option<u32> {
        if let Some(i) = self
            .unexpected
            .iter()
            .position(|u| u.0 == ctx && Self::fits(src, tag, u.1, u.2))
        {
            return Some(self.unexpected.remove(i).3);
        }
        self.posted.push((id, ctx, src, tag));
        None
    }
    /// Returns the (recv, msg) matches this delivery caused.
    fn deliver(&mut self, ctx: u32, src: u32, seq: u32, tag: i32, msg: u32) -> Vec<(u32, u32)> {
        self.waiting.push((ctx, src, seq, tag, msg));
        let mut out = Vec::new();
        loop {
            let exp = *self.expected.entry((ctx, src)).or_default();
            let Some(i) = self
                .waiting
                .iter()
                .position(|w| w.0 == ctx && w.1 == src && w.2 == exp)
            else {
                break;
            };
            let (_, _, _, tag, msg) = self.waiting.remove(i);
            self.expected.insert((ctx, src), exp + 1);
            if let Some(j) = self
                .posted
                .iter()
                .position(|p| p.1 == ctx && Self::fits(p.2, p.3, src, tag))
            {
                out.push((self.posted.remove(j).0, msg));
            } else {
                self.unexpected.push((ctx, src, tag, msg));
            }
        }
        out
    }
}

fn sel(src: Option<u32>, tag: Option<i32>) -> (Source, TagSel) {
    (
        src.map_or(Source::Any, Source::Rank),
        tag.map_or(TagSel::Any, TagSel::Tag),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
    #[test]
    fn matches_the_reference_model(ops in proptest::collection::vec(op(), 1..120)) {
        let mut m: Matcher<u32, u32> = Matcher::new(3);
        let mut model = Model::default();
        let mut in_flight: Vec<(u32, u32, u32, i32, u32)> = Vec::new();
        let mut next_recv = 0u32;
        let mut next_msg = 0u32;
        for op in ops {
            match op {
                Op::Post { ctx, src, tag } => {
                    let (s, t) = sel(src, tag);
                    let id = next_recv;
                    next_recv += 1;
                    let got = match m.post(ctx, s, t, id) {
                        Posted::Matched(e, msg) => {
                            prop_assert!(e.fits(s, t));
                            Some(msg)
                        }
                        Posted::Queued => None,
                    };
                    prop_assert_eq!(got, model.post(id, ctx, s, t));
                }
                Op::Send { ctx, src, tag } => {
                    let seq = m.next_send_seq(ctx, src);
                    in_flight.push((ctx, src, seq, tag, next_msg));
                    next_msg += 1;
                }
                Op::Deliver(i) => {
                    if in_flight.is_empty() { continue; }
                    let (ctx, src, seq, tag, msg) = in_flight.remove(i % in_flight.len());
                    let mut got = Vec::new();
                    if let Arrival::Matched(r) = m.arrive(env(ctx, src, tag), seq, || msg) {
                        got.push((r, msg));
                    }
                    while let Some(r) = m.poll_released() {
                        got.push((r.recv, r.payload));
                    }
                    prop_assert_eq!(got, model.deliver(ctx, src, seq, tag, msg));
                }
                Op::Probe { ctx, src, tag } => {
                    let (s, t) = sel(src, tag);
                    let got = m.probe(ctx, s, t).map(|(_, p)| *p);
                    let want = model.unexpected.iter().find(|u| u.0 == ctx && Model::fits(s, t, u.1, u.2)).map(|u| u.3);
                    prop_assert_eq!(got, want);
                }
                Op::Take { ctx, src, tag } => {
                    let (s, t) = sel(src, tag);
                    let got = m.take(ctx, s, t).map(|(e, p)| {
                        assert!(e.fits(s, t) && e.context == ctx);
                        p
                    });
                    let want = model
                        .unexpected
                        .iter()
                        .position(|u| u.0 == ctx && Model::fits(s, t, u.1, u.2))
                        .map(|i| model.unexpected.remove(i).3);
                    prop_assert_eq!(got, want);
                }
                Op::Cancel(id) => {
                    let ctx = model.posted.iter().find(|p| p.0 == id).map_or(0, |p| p.1);
                    let got = m.cancel(ctx, &id);
                    let want = model.posted.iter().position(|p| p.0 == id).map(|i| model.posted.remove(i)).is_some();
                    prop_assert_eq!(got, want);
                }
            }
        }
        prop_assert_eq!(m.posted_len(), model.posted.len());
        prop_assert_eq!(m.unexpected_len(), model.unexpected.len());
        prop_assert_eq!(m.held_len(), model.waiting.len());
    }
}
