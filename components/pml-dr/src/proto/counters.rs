//! Per-peer protocol counters for the profile (the glue sums them over peers).

use std::time::Duration;

/// What happened on one connection. Monotonic except `srtt`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Data fragments handed to a BTL (first transmissions and retransmissions).
    pub frags_sent: u64,
    /// Fragments sent again (loss, NACK, timeout probe, failover).
    pub retransmissions: u64,
    /// Loss declarations proved wrong by a later ack (reordering); each raises the thresholds.
    pub spurious_retransmissions: u64,
    /// Fragments declared lost by the reordering/time thresholds or a NACK.
    pub lost: u64,
    /// Data fragments received with a valid header.
    pub frags_received: u64,
    /// Data fragments received again (already placed, or of a completed vfrag): re-acked.
    pub duplicates: u64,
    /// Acks for vfrags no longer outstanding.
    pub duplicate_acks: u64,
    /// Header or payload checksum mismatches.
    pub csum_failures: u64,
    /// Packets dropped as foreign, truncated or inconsistent with what the peer sent before.
    pub malformed: u64,
    /// Valid fragments refused for now, the sender retransmitting them later: over the
    /// receiver's limit of messages held, a fragment ahead of its rendezvous, a new vfrag of a
    /// message already delivered. Flow control and reordering, not damage.
    pub refused: u64,
    /// Retransmission timeouts (per path, exponential backoff).
    pub timeouts: u64,
    /// Local-completion watchdog expirations.
    pub watchdog_expirations: u64,
    /// BTLs failed for this peer after which traffic moved to another BTL.
    pub failovers: u64,
    /// ACK packets sent.
    pub acks_sent: u64,
    /// NACK packets sent.
    pub nacks_sent: u64,
    /// Of the ACKs and NACKs sent, those that travelled in front of a data fragment (bundled).
    pub acks_bundled: u64,
    /// ACK packets received.
    pub acks_received: u64,
    /// NACK packets received.
    pub nacks_received: u64,
    /// Keepalive requests sent (while awaiting a silent peer).
    pub pings_sent: u64,
    /// Keepalive answers sent.
    pub pongs_sent: u64,
    /// Current smoothed RTT of the active path.
    pub srtt: Duration,
}

impl Counters {
    /// Add `other`'s counts into these (a sum over connections); `srtt` becomes the larger
    /// of the two, the slowest path's.
    pub fn add(&mut self, other: &Counters) {
        self.frags_sent += other.frags_sent;
        self.retransmissions += other.retransmissions;
        self.spurious_retransmissions += other.spurious_retransmissions;
        self.lost += other.lost;
        self.frags_received += other.frags_received;
        self.duplicates += other.duplicates;
        self.duplicate_acks += other.duplicate_acks;
        self.csum_failures += other.csum_failures;
        self.malformed += other.malformed;
        self.refused += other.refused;
        self.timeouts += other.timeouts;
        self.watchdog_expirations += other.watchdog_expirations;
        self.failovers += other.failovers;
        self.acks_sent += other.acks_sent;
        self.nacks_sent += other.nacks_sent;
        self.acks_bundled += other.acks_bundled;
        self.acks_received += other.acks_received;
        self.nacks_received += other.nacks_received;
        self.pings_sent += other.pings_sent;
        self.pongs_sent += other.pongs_sent;
        self.srtt = self.srtt.max(other.srtt);
    }
}
