//! The connection alone (unit tests with explicit times) and two connections over a simulated
//! link that loses, duplicates, reorders and corrupts frames (property tests: every payload is
//! delivered exactly once, in order, and acknowledged). No sleeps, no clock: time is a
//! variable, and a failing case replays from its seed.

use super::*;
use proptest::prelude::*;
use rmca_framework::rng::SplitMix64;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn cfg() -> Config {
    Config {
        window: 4,
        max_payload: 100,
        rto: ms(10),
        rto_max: ms(40),
        ack_every: 2,
        ack_delay: ms(1),
        peer_timeout: ms(1000),
    }
}

/// Everything `c` wants to send now.
fn drain(c: &mut Connection, now: Instant) -> Vec<Vec<u8>> {
    std::iter::from_fn(|| c.poll_transmit(now)).collect()
}

fn delivered(c: &mut Connection) -> Vec<Vec<u8>> {
    std::iter::from_fn(|| c.poll_delivered()).collect()
}

#[test]
fn a_lossless_exchange_delivers_in_order_and_acks_cumulatively() {
    let t0 = Instant::now();
    let (mut a, mut b) = (
        Connection::new(cfg()).unwrap(),
        Connection::new(cfg()).unwrap(),
    );
    for i in 0..4u8 {
        assert_eq!(a.send(vec![i]), Ok(u32::from(i)));
    }
    assert_eq!(a.send(vec![9]), Err(SendError::WindowFull));
    for f in drain(&mut a, t0) {
        b.handle_frame(t0, &f).unwrap();
    }
    assert_eq!(delivered(&mut b), vec![vec![0], vec![1], vec![2], vec![3]]);
    // ack_every = 2: one ACK covers all four.
    let acks = drain(&mut b, t0);
    assert_eq!(acks.len(), 1);
    a.handle_frame(t0, &acks[0]).unwrap();
    assert_eq!(a.acked_through(), 4);
    assert!(a.has_room() && a.is_idle() && b.is_idle());
    assert_eq!(a.poll_timeout(), None);
}

#[test]
fn a_lone_fragment_is_acked_after_ack_delay() {
    let t0 = Instant::now();
    let (mut a, mut b) = (
        Connection::new(cfg()).unwrap(),
        Connection::new(cfg()).unwrap(),
    );
    a.send(b"x".to_vec()).unwrap();
    b.handle_frame(t0, &drain(&mut a, t0)[0]).unwrap();
    assert!(
        drain(&mut b, t0).is_empty(),
        "one fragment waits for a second"
    );
    assert_eq!(b.poll_timeout(), Some(t0 + ms(1)));
    b.handle_timeout(t0 + ms(1));
    let ack = drain(&mut b, t0 + ms(1));
    assert_eq!(ack.len(), 1);
    a.handle_frame(t0 + ms(1), &ack[0]).unwrap();
    assert_eq!(a.acked_through(), 1);
}

#[test]
fn data_going_back_carries_the_ack() {
    let t0 = Instant::now();
    let (mut a, mut b) = (
        Connection::new(cfg()).unwrap(),
        Connection::new(cfg()).unwrap(),
    );
    a.send(b"ping".to_vec()).unwrap();
    b.handle_frame(t0, &drain(&mut a, t0)[0]).unwrap();
    b.send(b"pong".to_vec()).unwrap();
    let back = drain(&mut b, t0);
    assert_eq!(back.len(), 1, "the reply, no separate ACK");
    a.handle_frame(t0, &back[0]).unwrap();
    assert_eq!(a.acked_through(), 1);
    assert_eq!(b.counters().acks_sent, 0);
}

#[test]
fn a_lost_fragment_is_resent_after_rto_with_backoff_and_the_gap_is_filled() {
    let t0 = Instant::now();
    let (mut a, mut b) = (
        Connection::new(cfg()).unwrap(),
        Connection::new(cfg()).unwrap(),
    );
    a.send(vec![0]).unwrap();
    a.send(vec![1]).unwrap();
    let frames = drain(&mut a, t0);
    // Fragment 0 is lost; 1 arrives and is held.
    b.handle_frame(t0, &frames[1]).unwrap();
    assert!(delivered(&mut b).is_empty());
    assert_eq!(b.counters().out_of_order, 1);
    assert_eq!(a.poll_timeout(), Some(t0 + ms(10)));
    a.handle_timeout(t0 + ms(9));
    assert!(drain(&mut a, t0 + ms(9)).is_empty(), "not before rto");
    a.handle_timeout(t0 + ms(10));
    let again = drain(&mut a, t0 + ms(10));
    assert_eq!(again.len(), 2, "both fragments timed out: {again:?}");
    assert_eq!(a.counters().retransmissions, 2);
    // Lost again: the second timeout is twice as long.
    assert_eq!(a.poll_timeout(), Some(t0 + ms(30)));
    a.handle_timeout(t0 + ms(30));
    let third = drain(&mut a, t0 + ms(30));
    assert_eq!(
        a.poll_timeout(),
        Some(t0 + ms(70)),
        "then capped at rto_max"
    );
    b.handle_frame(t0 + ms(30), &third[0]).unwrap();
    assert_eq!(delivered(&mut b), vec![vec![0], vec![1]]);
    // Fragment 1 arrives a second time: dropped, and acknowledged at once.
    b.handle_frame(t0 + ms(30), &third[1]).unwrap();
    assert_eq!(b.counters().duplicates, 1);
    let ack = drain(&mut b, t0 + ms(30));
    assert_eq!(ack.len(), 1);
    a.handle_frame(t0 + ms(30), &ack[0]).unwrap();
    assert_eq!(a.acked_through(), 2);
    assert_eq!(a.poll_timeout(), None);
}

#[test]
fn a_silent_peer_fails_the_connection_with_the_reason() {
    let t0 = Instant::now();
    let mut a = Connection::new(cfg()).unwrap();
    a.send(vec![0]).unwrap();
    let mut now = t0;
    drain(&mut a, now);
    while a.failure().is_none() {
        now = a
            .poll_timeout()
            .expect("a timer runs while a fragment is in flight");
        a.handle_timeout(now);
        drain(&mut a, now);
    }
    assert_eq!(now, t0 + ms(1000));
    let e = a.failure().unwrap().to_string();
    assert!(
        e.contains("unacknowledged") && e.contains("pml_sw_peer_timeout_ms"),
        "{e}"
    );
    assert!(matches!(a.send(vec![1]), Err(SendError::Failed(_))));
    assert_eq!(a.poll_transmit(now), None);
}

#[test]
fn hostile_frames_are_dropped_and_counted() {
    let t0 = Instant::now();
    let mut a = Connection::new(cfg()).unwrap();
    a.send(vec![0]).unwrap();
    drain(&mut a, t0);
    // An ack of fragments never sent is ignored.
    a.handle_frame(t0, &wire::ack(5)).unwrap();
    assert_eq!(a.acked_through(), 0);
    assert_eq!(a.counters().malformed, 1);
    let mut f = wire::data(0, 0, b"abc");
    f[17] ^= 4;
    assert!(a.handle_frame(t0, &f).is_err());
    assert!(a.handle_frame(t0, &[1, 2]).is_err());
    assert_eq!(a.counters().crc_failures, 1);
    assert_eq!(a.counters().malformed, 2);
    assert!(delivered(&mut a).is_empty());
    // Too far ahead for the window: dropped, the sender will resend it in turn.
    a.handle_frame(t0, &wire::data(4, 0, b"far")).unwrap();
    assert_eq!(a.counters().beyond_window, 1);
    assert_eq!(
        a.send(vec![0; 101]),
        Err(SendError::TooLarge { len: 101, max: 100 })
    );
}

#[test]
fn bad_configurations_name_the_parameter() {
    type Change = fn(&mut Config);
    let cases: [(Change, &str); 4] = [
        (|c| c.window = 0, "pml_sw_window"),
        (|c| c.rto = ms(50), "pml_sw_rto_us"),
        (|c| c.ack_every = 0, "pml_sw_ack_every"),
        (|c| c.peer_timeout = ms(40), "pml_sw_peer_timeout_ms"),
    ];
    for (change, name) in cases {
        let mut c = cfg();
        change(&mut c);
        let e = Connection::new(c).unwrap_err();
        assert_eq!(e.name, name, "{e}");
    }
}

/// A link that delays, loses, duplicates, reorders and corrupts frames, with explicit time.
struct Link {
    rng: SplitMix64,
    loss: f64,
    dup: f64,
    reorder: f64,
    corrupt: f64,
    /// Frames in transit: (arrival time, to B?, bytes).
    transit: Vec<(Instant, bool, Vec<u8>)>,
}

impl Link {
    fn carry(&mut self, now: Instant, to_b: bool, frame: Vec<u8>) {
        if self.rng.chance(self.loss) {
            return;
        }
        let copies = if self.rng.chance(self.dup) { 2 } else { 1 };
        for _ in 0..copies {
            let mut f = frame.clone();
            if self.rng.chance(self.corrupt) {
                let bit = self.rng.below(8 * f.len() as u64) as usize;
                f[bit / 8] ^= 1 << (bit % 8);
            }
            // 100 us, or up to 3 ms when reordered (later frames overtake it).
            let delay = if self.rng.chance(self.reorder) {
                Duration::from_micros(100 + self.rng.below(3000))
            } else {
                Duration::from_micros(100)
            };
            self.transit.push((now + delay, to_b, f));
        }
    }
}

/// The payload of message `i` from one side: its index in it, and a length depending on it.
fn payload(side: u8, i: u32) -> Vec<u8> {
    let mut p = vec![side; 1 + (i as usize * 7) % 50];
    p.extend_from_slice(&i.to_le_bytes());
    p
}

/// Run `n` messages each way between two connections over `link`; returns their counters.
/// Panics unless each side receives exactly the other's messages, in order, and everything
/// is acknowledged.
fn exchange(cfg: Config, start: Seq, n: u32, mut link: Link) -> (Counters, Counters) {
    let t0 = Instant::now();
    let mut now = t0;
    let mut a = Connection::starting_at(cfg.clone(), start).unwrap();
    let mut b = Connection::starting_at(cfg, start).unwrap();
    let (mut sent, mut got) = ([0u32; 2], [Vec::new(), Vec::new()]);
    for step in 0.. {
        assert!(
            step < 1_000_000,
            "no progress: {:?} {:?}",
            a.counters(),
            b.counters()
        );
        // Frames due now arrive.
        let (due, later): (Vec<_>, Vec<_>) = link.transit.drain(..).partition(|t| t.0 <= now);
        link.transit = later;
        for (_, to_b, f) in due {
            let c = if to_b { &mut b } else { &mut a };
            let _ = c.handle_frame(now, &f);
        }
        for (side, c) in [&mut a, &mut b].into_iter().enumerate() {
            if c.poll_timeout().is_some_and(|t| t <= now) {
                c.handle_timeout(now);
            }
            while sent[side] < n && c.has_room() {
                c.send(payload(side as u8, sent[side])).unwrap();
                sent[side] += 1;
            }
            while let Some(f) = c.poll_transmit(now) {
                link.carry(now, side == 0, f);
            }
            got[side].extend(std::iter::from_fn(|| c.poll_delivered()));
            assert!(c.failure().is_none(), "{:?}", c.failure());
        }
        let done = |c: &Connection| c.acked_through() == start.wrapping_add(n);
        if done(&a) && done(&b) && got[0].len() == n as usize && got[1].len() == n as usize {
            break;
        }
        // Jump to the next event: an arrival or a timer.
        let next = link
            .transit
            .iter()
            .map(|t| t.0)
            .chain(a.poll_timeout())
            .chain(b.poll_timeout())
            .min()
            .expect("something is pending while the exchange is unfinished");
        now = next.max(now);
    }
    for (side, received) in got.iter().enumerate() {
        let from = 1 - side as u8;
        let expected: Vec<Vec<u8>> = (0..n).map(|i| payload(from, i)).collect();
        assert!(*received == expected, "side {side} got {received:?}");
    }
    (a.counters(), b.counters())
}

#[test]
fn loss_is_repaired_deterministically() {
    let link = Link {
        rng: SplitMix64::new(7),
        loss: 0.2,
        dup: 0.1,
        reorder: 0.2,
        corrupt: 0.05,
        transit: Vec::new(),
    };
    let cfg = Config {
        peer_timeout: ms(600_000),
        ..cfg()
    };
    let (a, b) = exchange(cfg, u32::MAX - 20, 200, link);
    for c in [a, b] {
        assert!(
            c.retransmissions > 0 && c.duplicates > 0 && c.out_of_order > 0,
            "{c:?}"
        );
        assert!(c.crc_failures > 0, "{c:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the link does (short of losing everything), both sides get exactly the other's
    /// messages, once each and in order, across the sequence-number wrap.
    #[test]
    fn exactly_once_in_order_over_any_faulty_link(
        seed: u64,
        loss in 0.0..0.4f64,
        dup in 0.0..0.3f64,
        reorder in 0.0..0.5f64,
        corrupt in 0.0..0.1f64,
        window in 1u32..16,
        ack_every in 1u32..6,
        n in 1u32..150,
        near_wrap: bool,
    ) {
        // A long peer timeout: at 40% loss each way a fragment may need many tries.
        let cfg = Config { window, ack_every, peer_timeout: ms(600_000), ..cfg() };
        let link = Link { rng: SplitMix64::new(seed), loss, dup, reorder, corrupt, transit: Vec::new() };
        let start = if near_wrap { u32::MAX - 40 } else { 0 };
        exchange(cfg, start, n, link);
    }
}
