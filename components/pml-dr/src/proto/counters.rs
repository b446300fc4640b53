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
    /// Packets dropped as foreign, truncated, inconsistent or over a limit.
    pub malformed: u64,
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
