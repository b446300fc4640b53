//! Parameters of the DR protocol core. The PML glue registers them as `pml_dr_*` MCA
//! parameters; [`Config::validate`] names the offending parameter and the valid range.

use std::time::Duration;
use thiserror::Error;

use super::wire::{DATA_HEADER_LEN, MAX_VFRAG_FRAGS};

/// Protocol parameters (one set per job; every rank must use the same values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `pml_dr_vfrag_frags`: BTL fragments per vfrag (unit of acknowledgement), 1..=64.
    pub vfrag_frags: usize,
    /// `pml_dr_eager_limit`: messages up to this size go in one MATCH vfrag; larger ones use
    /// rendezvous (the first this-many bytes in the RNDV vfrag). Clamped to one vfrag.
    pub eager_limit: u64,
    /// `pml_dr_eager_copy`: standard sends up to this size are copied and complete at once
    /// (the acknowledgement frees the copy); larger ones complete when acknowledged.
    pub eager_copy: usize,
    /// `pml_dr_csum`: which payloads carry a CRC32C and where it is checked. See [`Csum`].
    pub csum: Csum,
    /// `pml_dr_ack_policy`: how a receiver acknowledges and how a sender detects loss. See
    /// [`AckPolicy`]. Every rank must use the same policy.
    pub ack_policy: AckPolicy,
    /// `pml_dr_rto_policy`: where the retransmission timeout comes from. See [`RtoPolicy`].
    pub rto_policy: RtoPolicy,
    /// `pml_dr_rto_fixed_us`: the retransmission timeout of [`RtoPolicy::Fixed`].
    pub rto_fixed: Duration,
    /// `pml_dr_rto_backoff`: each consecutive timeout doubles the timeout (up to `rto_max`).
    pub rto_backoff: bool,
    /// `pml_dr_rto_initial_us`: retransmission timeout before the first RTT sample.
    pub rto_initial: Duration,
    /// `pml_dr_rto_min_us`: floor of the retransmission timeout.
    pub rto_min: Duration,
    /// `pml_dr_rto_max_us`: cap of the (backed-off) retransmission timeout.
    pub rto_max: Duration,
    /// `pml_dr_ack_delay_us`: longest a receiver holds a partial ack hoping to cover more frags.
    pub ack_delay: Duration,
    /// `pml_dr_ack_hold_us`: how long the ack of a complete vfrag waits for data going back to
    /// the same peer, so that a reply carries it ([`Config::ack_bundle`]) or leaves ahead of it
    /// (0: acks leave at once).
    pub ack_hold: Duration,
    /// `pml_dr_ack_bundle`: where a pending ack travels in front of the next data fragment to
    /// its peer on the same BTL, in the same BTL fragment (a ping-pong step is then one packet,
    /// not a reply and an ack). See [`AckBundle`].
    pub ack_bundle: AckBundle,
    /// `pml_dr_peer_timeout`: a peer silent this long while we await it is declared dead (while
    /// messages of ours wait, only acknowledgements of them count as hearing from it).
    pub peer_timeout: Duration,
    /// `pml_dr_btl_retries`: consecutive timeouts after which a BTL is failed for the peer, if
    /// another BTL is left (the last one retries until `peer_timeout` of silence).
    pub btl_retries: u32,
    /// `pml_dr_btl_fail_silence`: and at least this long without an acknowledgement from the
    /// peer, so that a peer busy computing (not progressing) for a moment does not lose its
    /// preferred BTL to a few short RTT-derived timeouts.
    pub btl_fail_silence: Duration,
    /// `pml_dr_window`: most vfrags in flight (sent, not fully acked) per peer.
    pub window: usize,
    /// `pml_dr_watchdog`: a BTL that has not completed a send locally within this is failed.
    pub watchdog: Duration,
    /// `pml_dr_reorder_threshold`: a fragment is lost once a transmission this many
    /// transmissions later has been acknowledged (QUIC's packet threshold).
    pub reorder_threshold: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            vfrag_frags: 64,
            eager_limit: 64 * 1024,
            eager_copy: 4096,
            csum: Csum::Auto,
            ack_policy: AckPolicy::Selective,
            rto_policy: RtoPolicy::Rtt,
            rto_fixed: Duration::from_millis(10),
            rto_backoff: true,
            rto_initial: Duration::from_millis(50),
            rto_min: Duration::from_millis(5),
            rto_max: Duration::from_secs(2),
            ack_delay: Duration::from_millis(1),
            ack_hold: Duration::from_micros(20),
            ack_bundle: AckBundle::Auto,
            peer_timeout: Duration::from_secs(30),
            btl_retries: 4,
            btl_fail_silence: Duration::from_secs(1),
            window: 32,
            watchdog: Duration::from_secs(5),
            reorder_threshold: 3,
        }
    }
}

/// A parameter outside its valid range.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    /// A parameter value is out of range.
    #[error("pml_dr_{name} = {value} is invalid: valid values are {valid}")]
    OutOfRange {
        /// Parameter name without the `pml_dr_` prefix.
        name: &'static str,
        /// The offending value, as text.
        value: String,
        /// The valid range, as text.
        valid: &'static str,
    },
    /// No BTL was given for the peer.
    #[error("no BTL reaches this peer (pml dr needs at least one)")]
    NoPath,
    /// A BTL's max_send_size leaves no room for payload after the DR header.
    #[error(
        "BTL {btl}: max_send_size {max_send_size} must exceed the {DATA_HEADER_LEN}-byte DR header"
    )]
    FragTooSmall {
        /// BTL index.
        btl: usize,
        /// Its max_send_size.
        max_send_size: usize,
    },
}

impl Config {
    /// Checks every parameter.
    pub fn validate(&self) -> Result<(), ConfigError> {
        fn bad<T: std::fmt::Debug>(
            name: &'static str,
            value: T,
            valid: &'static str,
        ) -> ConfigError {
            ConfigError::OutOfRange {
                name,
                value: format!("{value:?}"),
                valid,
            }
        }
        if self.vfrag_frags == 0 || self.vfrag_frags > MAX_VFRAG_FRAGS {
            return Err(bad("vfrag_frags", self.vfrag_frags, "1..=64"));
        }
        if self.rto_min.is_zero() {
            return Err(bad("rto_min_us", self.rto_min, "> 0"));
        }
        if self.rto_min <= self.ack_delay {
            return Err(bad(
                "rto_min_us",
                self.rto_min,
                "greater than pml_dr_ack_delay_us",
            ));
        }
        if self.rto_min <= self.ack_hold {
            // A held ack must never look like a loss to the sender.
            return Err(bad("ack_hold_us", self.ack_hold, "below pml_dr_rto_min_us"));
        }
        if self.rto_policy == RtoPolicy::Fixed {
            // Like rto_min: a fixed timeout at or below the receiver's ack delay or hold would
            // retransmit what is merely waiting to be acknowledged.
            if self.rto_fixed <= self.ack_delay.max(self.ack_hold) {
                return Err(bad(
                    "rto_fixed_us",
                    self.rto_fixed,
                    "greater than pml_dr_ack_delay_us and pml_dr_ack_hold_us",
                ));
            }
            if self.rto_fixed > self.rto_max {
                return Err(bad("rto_fixed_us", self.rto_fixed, "<= pml_dr_rto_max_us"));
            }
        }
        if self.rto_max < self.rto_min {
            return Err(bad("rto_max_us", self.rto_max, ">= pml_dr_rto_min_us"));
        }
        if self.rto_initial < self.rto_min || self.rto_initial > self.rto_max {
            return Err(bad(
                "rto_initial_us",
                self.rto_initial,
                "pml_dr_rto_min_us..=pml_dr_rto_max_us",
            ));
        }
        if self.peer_timeout <= self.rto_max {
            return Err(bad(
                "peer_timeout",
                self.peer_timeout,
                "greater than pml_dr_rto_max_us",
            ));
        }
        if self.btl_retries == 0 || self.btl_retries > 30 {
            return Err(bad("btl_retries", self.btl_retries, "1..=30"));
        }
        if self.window == 0 || self.window > 4096 {
            return Err(bad("window", self.window, "1..=4096"));
        }
        if self.watchdog.is_zero() {
            return Err(bad("watchdog", self.watchdog, "> 0"));
        }
        // Keeps every deadline computation (Instant + Duration) far from overflow.
        const DAY: Duration = Duration::from_secs(86_400);
        for (name, d) in [
            ("rto_initial_us", self.rto_initial),
            ("rto_max_us", self.rto_max),
            ("rto_fixed_us", self.rto_fixed),
            ("ack_delay_us", self.ack_delay),
            ("peer_timeout", self.peer_timeout),
            ("watchdog", self.watchdog),
        ] {
            if d > DAY {
                return Err(bad(name, d, "at most one day (86400 s)"));
            }
        }
        if self.reorder_threshold == 0 {
            return Err(bad("reorder_threshold", self.reorder_threshold, ">= 1"));
        }
        Ok(())
    }
}

/// One BTL that reaches the peer, in failover order (first = preferred).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathConfig {
    /// The glue's index of the BTL (echoed in every `Transmit`).
    pub btl: usize,
    /// The BTL's max_send_size (header + payload of one fragment).
    pub max_send_size: usize,
    /// The BTL's NEED_CSUM flag: it does not guarantee integrity itself.
    pub need_csum: bool,
    /// The BTL's NEED_ACK flag: it may lose packets (unreliable datagrams).
    pub need_ack: bool,
}

/// Where acks ride in front of data (`pml_dr_ack_bundle`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckBundle {
    /// `false`: every ack is its own packet.
    Never,
    /// `auto` (the default): on BTLs that need acks (NEED_ACK: unreliable datagrams, ud),
    /// where a packet costs a system call on each side, so that a step of request/reply
    /// traffic is one packet and the peer's CPU is not spent on the second; not on the others
    /// (shm), where the ack's sealing and handling ahead of the reply's data cost a few percent
    /// of the step ("dr+ud 8 B latency: acks bundled with replies" in
    /// `git show c0ea37f:bench/RESULTS.md`).
    Auto,
    /// `true`: on every BTL.
    Always,
}

impl AckBundle {
    /// The parameter's words.
    pub const WORDS: [&'static str; 3] = ["auto", "true", "false"];

    /// From a word of [`AckBundle::WORDS`].
    pub fn from_word(w: &str) -> Option<Self> {
        match w {
            "auto" => Some(Self::Auto),
            "true" => Some(Self::Always),
            "false" => Some(Self::Never),
            _ => None,
        }
    }

    /// The parameter word.
    pub fn word(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Always => "true",
            Self::Never => "false",
        }
    }

    /// Whether acks are bundled on a BTL with (`need_ack`) or without the NEED_ACK flag.
    pub fn on(self, need_ack: bool) -> bool {
        match self {
            Self::Never => false,
            Self::Auto => need_ack,
            Self::Always => true,
        }
    }
}

/// Payload checksums (`pml_dr_csum`). Headers always carry their own CRC32C (placement
/// coordinates are trusted before a byte is written); this decides the payload's. A sender's
/// setting decides what its fragments carry and a receiver checks whatever carries one, so the
/// ranks need not agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Csum {
    /// `auto` (the default; `false` is an alias): only on BTLs flagged NEED_CSUM.
    Auto,
    /// `crc32c` (`true` is an alias): on every BTL, computed over the bytes sent (a small
    /// send's copy) and checked over the bytes as placed (the user's buffer, or the staging
    /// buffer of a message not matched yet).
    Crc32c,
    /// `none`: never, not even on NEED_CSUM BTLs: for links trusted to deliver intact bytes.
    /// A corrupted payload is then delivered.
    None,
    /// `end-to-end`: on every BTL, computed over the user's send buffer (small sends are not
    /// copied, see `pml_dr_eager_copy`) and checked in the user's receive buffer: a message
    /// staged before its match is checked again after the copy into the receive buffer, the
    /// checksum verified in main memory where the application reads it (the DR paper's point).
    EndToEnd,
}

impl Csum {
    /// The parameter's words (the last two are aliases of the boolean parameter it was).
    pub const WORDS: [&'static str; 6] = ["auto", "crc32c", "none", "end-to-end", "true", "false"];

    /// From a word of [`Csum::WORDS`].
    pub fn from_word(w: &str) -> Option<Self> {
        match w {
            "auto" | "false" => Some(Self::Auto),
            "crc32c" | "true" => Some(Self::Crc32c),
            "none" => Some(Self::None),
            "end-to-end" => Some(Self::EndToEnd),
            _ => None,
        }
    }

    /// The canonical parameter word.
    pub fn word(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Crc32c => "crc32c",
            Self::None => "none",
            Self::EndToEnd => "end-to-end",
        }
    }

    /// Whether payloads sent on a BTL with (`need_csum`) or without the NEED_CSUM flag carry a
    /// checksum.
    pub fn on(self, need_csum: bool) -> bool {
        match self {
            Self::Auto => need_csum,
            Self::Crc32c | Self::EndToEnd => true,
            Self::None => false,
        }
    }
}

/// Acknowledgement and loss-detection policy (`pml_dr_ack_policy`). The receiver decides what
/// acks say and the sender what it infers from them, so every rank must use the same policy
/// (a job-wide parameter: the runtime compares it across ranks at init). All keep the wire
/// format: a cumulative ack is an ack packet with [`crate::proto::wire::ACK_FLAG_CUMULATIVE`].
/// Every policy NACKs a fragment that fails its payload checksum, re-acks duplicates, and
/// probes on timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckPolicy {
    /// `selective` (the default): per-vfrag acks carrying a 64-bit mask of the fragments
    /// received intact; a complete vfrag's ack is held up to `pml_dr_ack_hold_us` (for a reply
    /// to carry it), a partial one up to `pml_dr_ack_delay_us` unless the sender asked for it
    /// (last fragment of a burst, probe). The sender detects losses early from the acks of later
    /// transmissions (QUIC/RACK packet and time thresholds) and resends only missing fragments.
    Selective,
    /// `vfrag`: one ack per vfrag, sent only when the whole vfrag has arrived; no partial acks
    /// (the DR paper's scheme). The sender learns nothing of a partial vfrag: on timeout it
    /// resends every unacknowledged fragment of its oldest vfrags, up to `vfrag_frags`
    /// fragments (duplicates are dropped by the receiver); no early loss detection.
    Vfrag,
    /// `cumulative`: every ack carries the number of vfrags received complete and in order (all
    /// ids below it); vfrags completed beyond a gap are not reported. On timeout the sender
    /// resends from that point on (go-back-N, up to `vfrag_frags` fragments per timeout; the receiver keeps and deduplicates what
    /// it already has); no early loss detection.
    Cumulative,
    /// `immediate`: like `selective`, but every fragment is acknowledged at the first chance to
    /// send (no delay, no hold; fragments of one vfrag handled before that chance share one
    /// ack): the most acks, the earliest loss signal.
    Immediate,
}

impl AckPolicy {
    /// The parameter's words.
    pub const WORDS: [&'static str; 4] = ["selective", "vfrag", "cumulative", "immediate"];

    /// Every policy, in [`AckPolicy::WORDS`] order (for tests and sweeps).
    pub const ALL: [Self; 4] = [
        Self::Selective,
        Self::Vfrag,
        Self::Cumulative,
        Self::Immediate,
    ];

    /// From a word of [`AckPolicy::WORDS`].
    pub fn from_word(w: &str) -> Option<Self> {
        Self::WORDS
            .iter()
            .position(|&x| x == w)
            .map(|i| Self::ALL[i])
    }

    /// The parameter word.
    pub fn word(self) -> &'static str {
        Self::WORDS[self as usize]
    }

    /// Acks report partially received vfrags (a mask with holes).
    pub fn partial_acks(self) -> bool {
        matches!(self, Self::Selective | Self::Immediate)
    }

    /// The sender declares fragments lost from acks of later ones (packet and time
    /// thresholds), before any timeout.
    pub fn early_loss_detection(self) -> bool {
        matches!(self, Self::Selective | Self::Immediate)
    }
}

/// Where the retransmission timeout comes from (`pml_dr_rto_policy`; a sender's choice).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtoPolicy {
    /// `rtt` (the default): srtt + max(4 rttvar, 250 us) + ack delay, clamped to
    /// `pml_dr_rto_min_us..=pml_dr_rto_max_us` (RFC 6298 with QUIC's refinements).
    Rtt,
    /// `fixed`: the constant `pml_dr_rto_fixed_us`, whatever the path's RTT (the DR paper's
    /// ACK timeout).
    Fixed,
}

impl RtoPolicy {
    /// The parameter's words.
    pub const WORDS: [&'static str; 2] = ["rtt", "fixed"];

    /// From a word of [`RtoPolicy::WORDS`].
    pub fn from_word(w: &str) -> Option<Self> {
        match w {
            "rtt" => Some(Self::Rtt),
            "fixed" => Some(Self::Fixed),
            _ => None,
        }
    }

    /// The parameter word.
    pub fn word(self) -> &'static str {
        match self {
            Self::Rtt => "rtt",
            Self::Fixed => "fixed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_are_bundled_by_default_only_on_btls_that_need_acks() {
        assert_eq!(Config::default().ack_bundle, AckBundle::Auto);
        assert!(AckBundle::Auto.on(true) && !AckBundle::Auto.on(false));
        assert!(AckBundle::Always.on(false) && !AckBundle::Never.on(true));
        for w in AckBundle::WORDS {
            assert_eq!(AckBundle::from_word(w).map(AckBundle::word), Some(w));
        }
        assert_eq!(AckBundle::from_word("yes"), None);
    }

    #[test]
    fn default_is_valid() {
        Config::default().validate().unwrap();
    }

    #[test]
    fn errors_name_the_parameter_and_range() {
        let c = Config {
            vfrag_frags: 65,
            ..Config::default()
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("pml_dr_vfrag_frags") && e.contains("1..=64"),
            "{e}"
        );
        let c = Config {
            peer_timeout: Duration::from_millis(1),
            ..Config::default()
        };
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("pml_dr_peer_timeout"));
    }
}
