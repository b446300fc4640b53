//! On-demand connection management, sans-IO.
//!
//! One [`Connection`] per peer. The requester creates its RC QPs and sends a REQ (its QP
//! addresses) over the unreliable UD connection-management QP, retransmitting with
//! exponential backoff; the acceptor creates its QPs, connects them to the requester's and
//! answers with a REP (its addresses); the requester connects and sends RTU in-band as its
//! first RC message, so the acceptor only sends once the requester's QPs can receive (the
//! ordering rule of a real HCA: a QP must be RTR before the peer sends to it). Any in-band
//! message counts as RTU.
//!
//! Simultaneous attempts resolve to one connection by rank: the lower rank's request wins; the
//! higher rank, having sent its own REQ, turns acceptor and connects the QPs it already made.
//! A duplicate REQ (our REP was lost) is answered with the same REP.
//!
//! The machine does no I/O: the module feeds it events and carries out the [`Action`]s.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Cap of the retransmission timeout, in multiples of the first one.
const MAX_BACKOFF: u32 = 32;

/// Where a connection is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// No QPs.
    Idle,
    /// REQ sent, waiting for REP.
    Requesting,
    /// Our QPs are connected to the requester's; waiting for its first in-band message.
    Accepting,
    /// Both sides may send.
    Connected,
    /// Gave up; the peer is unreachable through this BTL.
    Failed,
}

/// What the module must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create the local QPs (and post their receives).
    CreateQps,
    /// Connect the local QPs to these remote addresses (with the peer's per-QP credits).
    ConnectQps {
        /// Remote QP addresses.
        remote: Vec<Vec<u8>>,
        /// Data credits the peer posted per QP.
        credits: u16,
    },
    /// Send a REQ with our addresses over the CM QP.
    SendReq,
    /// Send a REP with our addresses over the CM QP.
    SendRep,
    /// Send the in-band RTU on QP 0 (requester, after connecting).
    SendRtu,
    /// The connection is up: flush the queued sends.
    Established,
    /// Give up: report the peer failed.
    Fail(String),
}

/// One peer's connection state machine.
#[derive(Debug)]
pub struct Connection {
    me: u32,
    peer: u32,
    state: State,
    rto: Duration,
    first_rto: Duration,
    retries_left: u32,
    max_retries: u32,
    deadline: Option<Instant>,
    remote: Option<Vec<Vec<u8>>>,
    actions: VecDeque<Action>,
    /// REQs sent (first transmissions and retransmissions).
    pub reqs_sent: u64,
    /// Simultaneous-connect collisions seen.
    pub collisions: u64,
}

impl Connection {
    /// A connection from `me` to `peer` with the first retransmission timeout and retry budget.
    pub fn new(me: u32, peer: u32, rto: Duration, retries: u32) -> Self {
        Self {
            me,
            peer,
            state: State::Idle,
            rto,
            first_rto: rto,
            retries_left: retries,
            max_retries: retries,
            deadline: None,
            remote: None,
            actions: VecDeque::new(),
            reqs_sent: 0,
            collisions: 0,
        }
    }

    /// Current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// True once both sides may send.
    pub fn is_connected(&self) -> bool {
        self.state == State::Connected
    }

    /// We have something to send: start connecting if idle.
    pub fn open(&mut self, now: Instant) {
        if self.state == State::Idle {
            self.state = State::Requesting;
            self.actions.push_back(Action::CreateQps);
            self.send_req(now);
        }
    }

    fn send_req(&mut self, now: Instant) {
        self.reqs_sent += 1;
        self.actions.push_back(Action::SendReq);
        self.deadline = Some(now + self.rto);
    }

    /// A REQ from the peer with its QP addresses.
    pub fn handle_req(&mut self, now: Instant, remote: Vec<Vec<u8>>, credits: u16) {
        match self.state {
            State::Idle => {
                self.actions.push_back(Action::CreateQps);
                self.accept(now, remote, credits);
            }
            State::Requesting => {
                self.collisions += 1;
                if self.me < self.peer {
                    // Our request wins; the peer will accept it.
                    tracing::debug!(me = self.me, peer = self.peer, "connect collision: we win");
                } else {
                    tracing::debug!(
                        me = self.me,
                        peer = self.peer,
                        "connect collision: we accept"
                    );
                    self.accept(now, remote, credits);
                }
            }
            State::Accepting => {
                if self.remote.as_ref() == Some(&remote) {
                    // Our REP was lost: say it again.
                    self.actions.push_back(Action::SendRep);
                } else {
                    tracing::warn!(
                        peer = self.peer,
                        "REQ with other QPs while accepting: ignored"
                    );
                }
            }
            State::Connected | State::Failed => {}
        }
    }

    fn accept(&mut self, now: Instant, remote: Vec<Vec<u8>>, credits: u16) {
        self.state = State::Accepting;
        self.remote = Some(remote.clone());
        self.actions
            .push_back(Action::ConnectQps { remote, credits });
        self.actions.push_back(Action::SendRep);
        // The requester retransmits its REQ if our REP is lost; we only time out to give up.
        // Longer than the requester can keep retrying, so we never give up first.
        let total = self.first_rto * MAX_BACKOFF * (self.max_retries + 1) * 2;
        self.deadline = Some(now + total);
    }

    /// A REP from the peer with its QP addresses.
    pub fn handle_rep(&mut self, remote: Vec<Vec<u8>>, credits: u16) {
        if self.state == State::Requesting {
            self.state = State::Connected;
            self.deadline = None;
            self.remote = Some(remote.clone());
            self.actions
                .push_back(Action::ConnectQps { remote, credits });
            self.actions.push_back(Action::SendRtu);
            self.actions.push_back(Action::Established);
        }
    }

    /// A message arrived on one of the connection's RC QPs.
    pub fn handle_inband(&mut self) {
        if self.state == State::Accepting {
            self.state = State::Connected;
            self.deadline = None;
            self.actions.push_back(Action::Established);
        }
    }

    /// The transport failed (QP error): no more traffic.
    pub fn fail(&mut self, reason: &str) {
        if self.state != State::Failed {
            self.state = State::Failed;
            self.deadline = None;
            self.actions.push_back(Action::Fail(reason.to_owned()));
        }
    }

    /// When [`Connection::handle_timeout`] wants to run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    /// Time passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        let Some(d) = self.deadline else { return };
        if now < d {
            return;
        }
        match self.state {
            State::Requesting if self.retries_left > 0 => {
                self.retries_left -= 1;
                // Exponential backoff, capped so a long outage does not stall for minutes.
                self.rto = self.rto.saturating_mul(2).min(self.first_rto * MAX_BACKOFF);
                self.send_req(now);
            }
            State::Requesting => self.fail(&format!(
                "no answer to {} connection requests",
                self.max_retries + 1
            )),
            State::Accepting => self.fail("requester never used the connection"),
            _ => self.deadline = None,
        }
    }

    /// Next action for the module.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn addrs(tag: u8) -> Vec<Vec<u8>> {
        vec![vec![tag; 4]]
    }

    fn drain(c: &mut Connection) -> Vec<Action> {
        std::iter::from_fn(|| c.poll_action()).collect()
    }

    #[test]
    fn one_sided_handshake() {
        let t = Instant::now();
        let rto = Duration::from_millis(10);
        let (mut a, mut b) = (Connection::new(0, 1, rto, 3), Connection::new(1, 0, rto, 3));
        a.open(t);
        assert_eq!(drain(&mut a), vec![Action::CreateQps, Action::SendReq]);
        b.handle_req(t, addrs(0), 8);
        assert_eq!(
            drain(&mut b),
            vec![
                Action::CreateQps,
                Action::ConnectQps {
                    remote: addrs(0),
                    credits: 8
                },
                Action::SendRep
            ]
        );
        a.handle_rep(addrs(1), 8);
        assert!(a.is_connected());
        assert_eq!(
            drain(&mut a),
            vec![
                Action::ConnectQps {
                    remote: addrs(1),
                    credits: 8
                },
                Action::SendRtu,
                Action::Established
            ]
        );
        assert!(!b.is_connected(), "acceptor waits for RTU before sending");
        b.handle_inband();
        assert_eq!(drain(&mut b), vec![Action::Established]);
    }

    #[test]
    fn simultaneous_connect_resolves_to_lower_rank_request() {
        let t = Instant::now();
        let rto = Duration::from_millis(10);
        let (mut a, mut b) = (Connection::new(0, 1, rto, 3), Connection::new(1, 0, rto, 3));
        a.open(t);
        b.open(t);
        drain(&mut a);
        drain(&mut b);
        // Both REQs cross.
        a.handle_req(t, addrs(1), 4);
        b.handle_req(t, addrs(0), 4);
        assert!(drain(&mut a).is_empty(), "winner ignores the loser's REQ");
        assert_eq!(
            drain(&mut b),
            vec![
                Action::ConnectQps {
                    remote: addrs(0),
                    credits: 4
                },
                Action::SendRep
            ],
            "loser reuses its QPs and accepts"
        );
        a.handle_rep(addrs(1), 4);
        b.handle_inband();
        assert!(a.is_connected() && b.is_connected());
    }

    #[test]
    fn lost_req_is_retransmitted_with_backoff_then_fails() {
        let t = Instant::now();
        let mut a = Connection::new(0, 1, Duration::from_millis(10), 2);
        a.open(t);
        drain(&mut a);
        let d1 = a.poll_timeout().unwrap();
        a.handle_timeout(d1);
        assert_eq!(drain(&mut a), vec![Action::SendReq]);
        let d2 = a.poll_timeout().unwrap();
        assert_eq!(d2 - d1, Duration::from_millis(20));
        a.handle_timeout(d2);
        drain(&mut a);
        a.handle_timeout(a.poll_timeout().unwrap());
        assert!(matches!(drain(&mut a).as_slice(), [Action::Fail(_)]));
        assert_eq!(a.state(), State::Failed);
        assert_eq!(a.reqs_sent, 3);
    }

    #[test]
    fn duplicate_req_gets_the_same_rep() {
        let t = Instant::now();
        let mut b = Connection::new(1, 0, Duration::from_millis(10), 2);
        b.handle_req(t, addrs(0), 4);
        drain(&mut b);
        b.handle_req(t, addrs(0), 4);
        assert_eq!(drain(&mut b), vec![Action::SendRep]);
    }

    proptest! {
        /// Two endpoints over a lossy, reordering CM channel always end connected exactly once
        /// with each other's addresses, whoever starts and whatever is lost.
        #[test]
        fn lossy_simulation_converges(starts in 0u8..3, seed in any::<u64>(), loss in 0u32..60) {
            // SplitMix64: consecutive outputs are independent. (An xorshift here tied the loss
            // draw to the draw before it, so that for some seeds every REP after a delivered
            // REQ was lost, and a zero seed lost everything.)
            let mut rng = seed;
            let mut rand = move || {
                rng = rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = rng;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                z ^ (z >> 31)
            };
            let rto = Duration::from_millis(10);
            // Enough retries that losing them all is out of reach even at 59% loss (each try
            // fails with p = 1 - 0.41^2 = 0.83; 0.83^201 < 1e-16): with 30, about one run of
            // the suite in thirty failed. Giving up is tested on its own above.
            const RETRIES: u32 = 200;
            let mut ends = [Connection::new(0, 1, rto, RETRIES), Connection::new(1, 0, rto, RETRIES)];
            let mut t = Instant::now();
            if starts != 1 { ends[0].open(t); }
            if starts != 0 { ends[1].open(t); }
            let mut connected_to: [Option<Vec<Vec<u8>>>; 2] = [None, None];
            let mut established = [0u32; 2];
            // In flight: (to, kind 0=req 1=rep 2=inband)
            let mut wire: Vec<(usize, u8)> = Vec::new();
            for _ in 0..100_000 {
                for i in 0..2 {
                    while let Some(a) = ends[i].poll_action() {
                        match a {
                            Action::SendReq => wire.push((1 - i, 0)),
                            Action::SendRep => wire.push((1 - i, 1)),
                            Action::SendRtu => wire.push((1 - i, 2)),
                            Action::ConnectQps { remote, .. } => connected_to[i] = Some(remote),
                            Action::Established => established[i] += 1,
                            Action::CreateQps => {}
                            Action::Fail(r) => prop_assert!(false, "failed: {}", r),
                        }
                    }
                }
                if wire.is_empty() {
                    t += Duration::from_millis(5);
                    for e in ends.iter_mut() { e.handle_timeout(t); }
                    if ends.iter().all(|e| e.is_connected()) { break; }
                    continue;
                }
                let k = (rand() as usize) % wire.len();
                let (to, kind) = wire.swap_remove(k);
                // RTU is in-band (reliable); CM datagrams may be lost.
                if kind != 2 && (rand() % 100) < u64::from(loss) { continue; }
                match kind {
                    0 => ends[to].handle_req(t, addrs(1 - to as u8), 1),
                    1 => ends[to].handle_rep(addrs(1 - to as u8), 1),
                    _ => ends[to].handle_inband(),
                }
            }
            prop_assert!(ends[0].is_connected() && ends[1].is_connected());
            prop_assert_eq!(established, [1, 1]);
            prop_assert_eq!(connected_to[0].clone(), Some(addrs(1)));
            prop_assert_eq!(connected_to[1].clone(), Some(addrs(0)));
        }
    }
}
