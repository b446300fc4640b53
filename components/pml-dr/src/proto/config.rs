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
    /// `pml_dr_csum`: checksum payloads on every BTL, not only those flagged NEED_CSUM.
    pub csum: bool,
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
            csum: false,
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
    /// of the step (bench/RESULTS.md).
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
