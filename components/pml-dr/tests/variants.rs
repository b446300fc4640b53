//! The protocol variants one by one, packet by packet: what each acknowledgement policy puts on
//! the wire, how each timeout policy times retransmissions, and how each checksum setting
//! treats payloads. Two connections over a scripted in-order link (a fragment is dropped on its
//! first transmission when the test says so); the lossy-link properties of every variant are in
//! `lossy_link.rs`.

use std::time::{Duration, Instant};

use rmca_pml_dr::proto::wire::{
    full_mask, AckRepr, DataRepr, ACK_FLAG_CUMULATIVE, ACK_FLAG_MATCHED, FLAG_PAYLOAD_CSUM,
    FLAG_RETX,
};
use rmca_pml_dr::proto::{
    AckPolicy, Config, Connection, Csum, Event, MatchFields, PathConfig, RtoPolicy, Transmit,
};

const US: Duration = Duration::from_micros(1);
const MS: Duration = Duration::from_millis(1);
/// 1024 - 72: 952 payload bytes per fragment.
const MAX_SEND: usize = 1024;

fn path(need_csum: bool) -> [PathConfig; 1] {
    [PathConfig {
        btl: 0,
        max_send_size: MAX_SEND,
        need_csum,
        need_ack: true,
    }]
}

fn cfg(policy: AckPolicy) -> Config {
    Config {
        vfrag_frags: 4,
        eager_limit: 4 * 952,
        ack_policy: policy,
        ..Config::default()
    }
}

/// What crossed the link while one message went from `a` to `b`.
#[derive(Debug, Default)]
struct Trace {
    /// Acks (not NACKs) `b` sent, with when.
    acks: Vec<(Duration, AckRepr)>,
    /// Data fragments `a` sent: (when, header).
    data: Vec<(Duration, DataRepr)>,
    done: Option<Duration>,
    received: Vec<u8>,
}

/// Sends one `len`-byte message from `a` to `b` over a link with a one-way delay of 10 us and
/// 1 us of serialization per packet (a burst arrives spread out), dropping a data fragment on its first transmission when `drop(header)` says so, until the
/// send completes (or `limit` passes). The receive is matched at once.
fn exchange(
    c: Config,
    need_csum: bool,
    len: usize,
    drop: impl Fn(&DataRepr) -> bool,
    limit: Duration,
) -> Trace {
    let t0 = Instant::now();
    let mut a = Connection::new(t0, c.clone(), &path(need_csum)).unwrap();
    let mut b = Connection::new(t0, c, &path(need_csum)).unwrap();
    let src: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
    let mut dst = vec![0u8; len];
    a.send_message(t0, MatchFields::default(), len as u64)
        .unwrap();
    let mut tr = Trace::default();
    let mut now = t0;
    // Packets in flight: (arrival time, to b?, bytes); when each direction's link is free.
    let mut wire: Vec<(Instant, bool, Vec<u8>)> = Vec::new();
    let mut free = [t0; 2];
    let mut send = |wire: &mut Vec<_>, now: Instant, to_b: bool, pkt: Vec<u8>| {
        let f = &mut free[to_b as usize];
        *f = (*f).max(now) + US;
        wire.push((*f + 10 * US, to_b, pkt));
    };
    while now - t0 < limit && tr.done.is_none() {
        for (c, to_b) in [(&mut a, true), (&mut b, false)] {
            if c.poll_timeout().is_some_and(|t| t <= now) {
                c.handle_timeout(now);
            }
            while let Some(t) = c.poll_transmit(now) {
                match t {
                    Transmit::Data(d) => {
                        let off = d.offset as usize;
                        let p = &src[off..off + d.len];
                        let mut pkt = d.seal(p).unwrap().to_vec();
                        pkt.extend_from_slice(p);
                        c.local_complete(d.token);
                        let h = DataRepr::parse_bytes(&pkt[pkt.len() - d.len - 72..]).unwrap();
                        tr.data.push((now - t0, h));
                        if !(h.flags & FLAG_RETX == 0 && drop(&h)) {
                            send(&mut wire, now, to_b, pkt);
                        }
                    }
                    Transmit::Ack { bytes, .. } => {
                        let r = AckRepr::parse_bytes(&bytes).unwrap();
                        if !to_b && !r.nack {
                            tr.acks.push((now - t0, r));
                        }
                        send(&mut wire, now, to_b, bytes.to_vec());
                    }
                }
            }
        }
        // On to the next event: an arrival or a timer.
        let next = wire
            .iter()
            .map(|w| w.0)
            .chain(a.poll_timeout())
            .chain(b.poll_timeout())
            .min();
        match next {
            Some(t) => now = now.max(t),
            None => break,
        }
        let (due, later): (Vec<_>, Vec<_>) = wire.drain(..).partition(|w| w.0 <= now);
        wire = later;
        for (_, to_b, pkt) in due {
            if !to_b {
                assert!(a.handle_packet(now, 0, &pkt).is_none(), "only acks go back");
            } else if let Some(arr) = b.handle_packet(now, 0, &pkt) {
                let off = arr.offset as usize;
                let end = off + arr.payload.len();
                dst[off..end].copy_from_slice(arr.payload);
                let _ = b.placed(now, arr.token, &dst[off..end]);
            }
        }
        while let Some(ev) = b.poll_event() {
            if let Event::IncomingMessage {
                seq, rndv: true, ..
            } = ev
            {
                b.matched(now, seq);
            }
        }
        while let Some(ev) = a.poll_event() {
            if let Event::SendComplete { .. } = ev {
                tr.done = Some(now - t0);
            }
        }
    }
    tr.received = dst;
    assert_eq!(tr.received, src, "delivered intact (done at {:?})", tr.done);
    tr
}

/// 12 fragments: a 4-fragment RNDV vfrag, then two 4-fragment FRAG vfrags.
const LEN: usize = 12 * 952;

fn drop_frag(vfrag: u64, index: u8) -> impl Fn(&DataRepr) -> bool {
    move |h| h.vfrag_id == vfrag && h.frag_index == index
}

#[test]
fn selective_reports_holes_and_repairs_them_before_any_timeout() {
    let tr = exchange(
        cfg(AckPolicy::Selective),
        true,
        LEN,
        drop_frag(1, 1),
        Duration::from_secs(1),
    );
    let partial = tr
        .acks
        .iter()
        .any(|(_, a)| a.mask != full_mask(a.frag_count as usize));
    assert!(partial, "a partial ack showed the hole: {:?}", tr.acks);
    // Fast repair: well within the first timeout (rto_initial 50 ms).
    assert!(tr.done.unwrap() < 5 * MS, "{:?}", tr.done);
    assert_eq!(tr.data.len(), 13, "one fragment resent");
}

#[test]
fn vfrag_acks_only_whole_vfrags_and_resends_on_timeout() {
    let c = cfg(AckPolicy::Vfrag);
    let tr = exchange(
        c.clone(),
        true,
        LEN,
        drop_frag(1, 1),
        Duration::from_secs(1),
    );
    for (_, a) in &tr.acks {
        let whole = a.mask == full_mask(a.frag_count as usize);
        let bare_match = a.mask == 0 && a.flags & ACK_FLAG_MATCHED != 0;
        assert!(
            whole || bare_match,
            "only whole vfrags are acked, or a bare MATCHED: {a:?}"
        );
    }
    // The hole is repaired by the timeout (the RNDV vfrag's ack gave an RTT sample: srtt +
    // 4 rttvar + ack delay, at least rto_min).
    let done = tr.done.unwrap();
    assert!(done >= c.rto_min, "repaired by a timeout: {done:?}");
    // Every unacknowledged fragment of vfrag 1 went again (the sender knows nothing of what
    // arrived), nothing of the acked vfrags.
    let resent: Vec<_> = tr
        .data
        .iter()
        .filter(|(_, h)| h.flags & FLAG_RETX != 0)
        .collect();
    assert!(resent.iter().all(|(_, h)| h.vfrag_id == 1), "{resent:?}");
    assert_eq!(resent.len(), 4, "{resent:?}");
}

#[test]
fn cumulative_acks_carry_the_in_order_point_and_go_back_n() {
    let tr = exchange(
        cfg(AckPolicy::Cumulative),
        true,
        LEN,
        drop_frag(1, 0),
        Duration::from_secs(1),
    );
    let points: Vec<u64> = tr.acks.iter().map(|(_, a)| a.vfrag_id).collect();
    for (_, a) in &tr.acks {
        assert!(a.flags & ACK_FLAG_CUMULATIVE != 0, "{a:?}");
        assert_eq!((a.frag_count, a.mask), (1, 0));
    }
    assert!(points.windows(2).all(|w| w[0] <= w[1]), "{points:?}");
    // Vfrag 2 completed while 1 had a hole: its ack still says 1 (the point did not move).
    assert!(points.contains(&1), "{points:?}");
    assert_eq!(*points.last().unwrap(), 3, "{points:?}");
    // Go-back-N from the point, one vfrag's worth of fragments per timeout: vfrag 1 whole; its
    // arrival moves the point past vfrag 2, which the receiver already had, so nothing more.
    let resent: Vec<(u64, u8)> = tr
        .data
        .iter()
        .filter(|(_, h)| h.flags & FLAG_RETX != 0)
        .map(|(_, h)| (h.vfrag_id, h.frag_index))
        .collect();
    assert_eq!(resent, [(1, 0), (1, 1), (1, 2), (1, 3)]);
}

#[test]
fn immediate_acks_every_fragment_at_once() {
    let tr = exchange(
        cfg(AckPolicy::Immediate),
        true,
        LEN,
        |_| false,
        Duration::from_secs(1),
    );
    // Every fragment placed is acked by its own ack, none held: 12 fragments plus the MATCHED ack.
    assert!(tr.acks.len() >= 12, "{}", tr.acks.len());
    assert!(
        tr.acks.iter().all(|(_, a)| a.ack_delay_us == 0),
        "{:?}",
        tr.acks
    );
    let sel = exchange(
        cfg(AckPolicy::Selective),
        true,
        LEN,
        |_| false,
        Duration::from_secs(1),
    );
    assert!(
        sel.acks.len() < tr.acks.len(),
        "{} vs {}",
        sel.acks.len(),
        tr.acks.len()
    );
}

/// Times of the transmissions of a message whose every data packet is lost.
fn retransmission_times(c: Config) -> Vec<Duration> {
    let t0 = Instant::now();
    let mut a = Connection::new(t0, c, &path(true)).unwrap();
    a.send_message(t0, MatchFields::default(), 10).unwrap();
    let mut times = Vec::new();
    let mut now = t0;
    while times.len() < 8 {
        while let Some(t) = a.poll_transmit(now) {
            if let Transmit::Data(d) = t {
                a.local_complete(d.token);
                times.push(now - t0);
            }
        }
        now = a.poll_timeout().expect("a timer is armed");
        a.handle_timeout(now);
    }
    times
}

#[test]
fn fixed_rto_is_constant_with_backoff_off_and_doubles_with_it() {
    let fixed = Config {
        rto_policy: RtoPolicy::Fixed,
        rto_fixed: 7 * MS,
        rto_backoff: false,
        ..Config::default()
    };
    let t = retransmission_times(fixed.clone());
    // A lone probe is sent twice: pairs, 7 ms apart.
    let gaps: Vec<Duration> = t
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|g| !g.is_zero())
        .collect();
    assert!(gaps.iter().all(|&g| g == 7 * MS), "{t:?}");
    let t = retransmission_times(Config {
        rto_backoff: true,
        ..fixed
    });
    let gaps: Vec<Duration> = t
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|g| !g.is_zero())
        .collect();
    assert_eq!(gaps[..3], [7 * MS, 14 * MS, 28 * MS], "{t:?}");
    // The default: RTT-derived (no sample yet: srtt = rto_initial, rttvar = rto_initial / 2,
    // so srtt + 4 rttvar + ack delay), doubling.
    let t = retransmission_times(Config::default());
    let d = Config::default();
    assert_eq!(t[1], 3 * d.rto_initial + d.ack_delay, "{t:?}");
    assert_eq!(t[3] - t[1], 2 * t[1], "{t:?}");
}

#[test]
fn csum_settings_decide_which_payloads_carry_a_checksum() {
    for (csum, need_csum, carried) in [
        (Csum::Auto, true, true),
        (Csum::Auto, false, false),
        (Csum::Crc32c, false, true),
        (Csum::EndToEnd, false, true),
        (Csum::None, true, false),
    ] {
        let c = Config {
            csum,
            ..cfg(AckPolicy::Selective)
        };
        let tr = exchange(c, need_csum, 3000, |_| false, Duration::from_secs(1));
        for (_, h) in &tr.data {
            assert_eq!(
                h.flags & FLAG_PAYLOAD_CSUM != 0,
                carried,
                "{csum:?} need_csum={need_csum}"
            );
        }
    }
}

#[test]
fn rto_fixed_is_validated_against_the_ack_delay_and_the_cap() {
    for (fixed, ok) in [
        (MS, false),
        (Duration::from_micros(1001), true),
        (3 * 1000 * MS, false),
    ] {
        let c = Config {
            rto_policy: RtoPolicy::Fixed,
            rto_fixed: fixed,
            ..Config::default()
        };
        match c.validate() {
            Ok(()) => assert!(ok, "{fixed:?} accepted"),
            Err(e) => {
                assert!(!ok, "{fixed:?}: {e}");
                assert!(e.to_string().contains("pml_dr_rto_fixed_us"), "{e}");
            }
        }
    }
    // Ignored unless the policy is fixed.
    Config {
        rto_fixed: MS,
        ..Config::default()
    }
    .validate()
    .unwrap();
}

#[test]
fn a_cumulative_ack_under_another_policy_is_refused_and_counted() {
    // Rank disagreement the runtime's job-wide check would have stopped: the selective sender
    // must not read a cumulative point as a vfrag id.
    let t0 = Instant::now();
    let mut a = Connection::new(t0, cfg(AckPolicy::Selective), &path(true)).unwrap();
    let mut b = Connection::new(t0, cfg(AckPolicy::Cumulative), &path(true)).unwrap();
    a.send_message(t0, MatchFields::default(), 10).unwrap();
    let mut acked = false;
    let mut now = t0;
    for _ in 0..4 {
        now += 10 * US;
        while let Some(t) = a.poll_transmit(now) {
            if let Transmit::Data(d) = t {
                let p = vec![1u8; d.len];
                let mut pkt = d.seal(&p).unwrap().to_vec();
                pkt.extend_from_slice(&p);
                a.local_complete(d.token);
                if let Some(arr) = b.handle_packet(now, 0, &pkt) {
                    let bytes = arr.payload.to_vec();
                    b.placed(now, arr.token, &bytes).unwrap();
                }
            }
        }
        now += 100 * US;
        while let Some(t) = b.poll_transmit(now) {
            if let Transmit::Ack { bytes, .. } = t {
                assert!(AckRepr::parse_bytes(&bytes).unwrap().flags & ACK_FLAG_CUMULATIVE != 0);
                assert!(a.handle_packet(now, 0, &bytes).is_none());
                acked = true;
            }
        }
    }
    assert!(acked);
    assert!(a.counters().malformed > 0);
    assert!(
        !std::iter::from_fn(|| a.poll_event()).any(|e| matches!(e, Event::SendComplete { .. })),
        "not completed by an ack it cannot read"
    );
}
