//! pml-dr: the data-reliability PML: acknowledged virtual fragments, checksums, retransmission
//! and BTL failover.
//!
//! - [`proto`]: the sans-IO protocol core: wire format, a per-peer [`proto::Connection`] state
//!   machine with explicit time (vfrag acks, CRC32C, RTT-derived timeouts, fast retransmit,
//!   failover, peer death by silence).
//! - [`fuzz`]: bodies of the fuzz targets (cargo-fuzz in `fuzz/`, and `tests/fuzz.rs`).
//! - [`pml`]: the PML glue: [`Dr`] implements the framework's `Pml` trait over the BML,
//!   sharing the framework's matching engine with ob1.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod fuzz;
pub mod pml;
pub mod proto;

use std::time::Duration;

use rmca_framework::bml::Bml;
use rmca_framework::component::{Component, ComponentMeta, InitContext};
use rmca_framework::params::{Level, Param, ParamRegistrar, ParamStore};
use rmca_framework::pml::{Pml, PmlComponent, PmlError};

use crate::proto::{AckBundle, AckPolicy, Csum, RtoPolicy};

pub use pml::{Dr, DR_TAG};
pub use proto::Config as DrConfig;

/// The dr component.
#[derive(Debug, Default)]
pub struct DrComponent;

/// The component instance registered with the framework.
pub static DR: DrComponent = DrComponent;

rmca_framework::builtin_component!(Pml, DR);

/// Default selection priority (below ob1's: dr is chosen with `pml = "dr"`).
pub const DEFAULT_PRIORITY: i64 = 10;

/// Reads the `pml_dr_*` parameters into a validated [`DrConfig`].
pub fn config_from_params(params: &ParamStore) -> Result<DrConfig, PmlError> {
    let e = |x: rmca_framework::params::ParamError| PmlError::Init(x.to_string());
    let int = |n: &str| -> Result<u64, PmlError> {
        let v = params.get_int(n).map_err(e)?;
        u64::try_from(v).map_err(|_| PmlError::Init(format!("{n} = {v} must not be negative")))
    };
    let us = |n: &str| int(n).map(Duration::from_micros);
    let ms = |n: &str| int(n).map(Duration::from_millis);
    // Enumerated parameters: the store accepted only their words.
    let word = |n: &str| params.get_str(n).map_err(e);
    let cfg = DrConfig {
        vfrag_frags: int("pml_dr_vfrag_frags")? as usize,
        eager_limit: params.get_size("pml_dr_eager_limit").map_err(e)?,
        eager_copy: usize::try_from(params.get_size("pml_dr_eager_copy").map_err(e)?)
            .unwrap_or(usize::MAX),
        csum: {
            let w = word("pml_dr_csum")?;
            Csum::from_word(w).unwrap_or_else(|| unreachable!("an enumerated parameter: {w}"))
        },
        ack_policy: {
            let w = word("pml_dr_ack_policy")?;
            AckPolicy::from_word(w).unwrap_or_else(|| unreachable!("an enumerated parameter: {w}"))
        },
        rto_policy: {
            let w = word("pml_dr_rto_policy")?;
            RtoPolicy::from_word(w).unwrap_or_else(|| unreachable!("an enumerated parameter: {w}"))
        },
        rto_fixed: us("pml_dr_rto_fixed_us")?,
        rto_backoff: params.get_bool("pml_dr_rto_backoff").map_err(e)?,
        rto_initial: us("pml_dr_rto_initial_us")?,
        rto_min: us("pml_dr_rto_min_us")?,
        rto_max: us("pml_dr_rto_max_us")?,
        ack_delay: us("pml_dr_ack_delay_us")?,
        ack_hold: us("pml_dr_ack_hold_us")?,
        ack_bundle: {
            let w = params.get_str("pml_dr_ack_bundle").map_err(e)?;
            AckBundle::from_word(w).unwrap_or_else(|| unreachable!("an enumerated parameter: {w}"))
        },
        peer_timeout: ms("pml_dr_peer_timeout")?,
        btl_retries: int("pml_dr_btl_retries")? as u32,
        btl_fail_silence: ms("pml_dr_btl_fail_silence")?,
        window: int("pml_dr_window")? as usize,
        watchdog: ms("pml_dr_watchdog")?,
        reorder_threshold: int("pml_dr_reorder_threshold")?,
    };
    cfg.validate().map_err(|x| PmlError::Init(x.to_string()))?;
    Ok(cfg)
}

impl Component for DrComponent {
    fn meta(&self) -> ComponentMeta {
        ComponentMeta {
            name: "dr",
            version: env!("CARGO_PKG_VERSION"),
            description: "data reliability: acknowledged vfrags, CRC32C, RTT-adaptive retransmission, BTL failover",
        }
    }

    fn register_params(&self, params: &mut ParamRegistrar<'_>) {
        let d = DrConfig::default();
        let us = |x: Duration| x.as_micros() as i64;
        let ms = |x: Duration| x.as_millis() as i64;
        params.add(
            Param::int("priority", DEFAULT_PRIORITY)
                .range(0, 100)
                .help("Selection priority of pml dr (highest allowed PML wins).")
                .level(Level::Tuning),
        );
        // Protocol constants both ends assume: job-wide, so the runtime checks through the modex at
        // init that every rank has the same value and fails naming both values otherwise (a
        // receiver drops an eager MATCH above its own eager limit: a mismatch would hang).
        params.add(Param::int("vfrag_frags", d.vfrag_frags as i64).range(1, 64).help("BTL fragments per vfrag, the unit of acknowledgement (one bit each in the 64-bit ack mask). Every rank must use the same value.").level(Level::Tuning).job_wide());
        params.add(Param::size("eager_limit", d.eager_limit).help("Messages up to this size are sent eagerly in one vfrag (clamped to one vfrag); larger ones use rendezvous. Also bounds the staging memory of an unexpected message. Every rank must use the same value.").level(Level::Tuning).job_wide());
        params.add(Param::size("eager_copy", d.eager_copy as u64).range(0, 1 << 20).help("Standard (not synchronous) sends up to this many bytes are copied and complete at once, like an eager send of ob1; the acknowledgement, a round trip later, only frees the copy. Larger sends complete when every vfrag is acknowledged. If the peer dies before acknowledging a copied send, the loss surfaces on the next operation with it.").level(Level::Tuning));
        params.add(Param::enumeration("csum", d.csum.word(), &Csum::WORDS).help("Payload checksums (CRC32C; headers always carry their own): auto on BTLs flagged NEED_CSUM only; crc32c on every BTL, computed over the bytes sent and checked where they are placed; none never, not even on NEED_CSUM BTLs (trusted links: a corrupted payload is delivered); end-to-end on every BTL, computed over the user's send buffer (small sends are then not copied: pml_dr_eager_copy is ignored) and checked in the user's receive buffer (a message that arrived before its receive is checked again after the copy into it). true and false are aliases of crc32c and auto. Each rank decides for what it sends.").level(Level::Basic));
        // The acknowledgement policy is read by both ends (the receiver writes acks the sender
        // interprets): job-wide, compared across ranks at init like vfrag_frags.
        params.add(Param::enumeration("ack_policy", d.ack_policy.word(), &AckPolicy::WORDS).help("Acknowledgement policy: selective acks each vfrag with a 64-bit mask of the fragments received, partial acks delayed up to pml_dr_ack_delay_us, complete ones held up to pml_dr_ack_hold_us, and the sender resends only what acks of later fragments show missing (fast retransmit); vfrag acks a vfrag only once complete, and the sender resends every unacknowledged fragment of its oldest vfrags (up to pml_dr_vfrag_frags fragments) on a timeout (the DR paper's scheme); cumulative acks carry the count of vfrags received complete in order, and the sender resends from it on a timeout (go-back-N, up to pml_dr_vfrag_frags fragments per timeout); immediate is selective with every fragment acked at once, without delay or hold (fragments of a vfrag handled in one progress pass share an ack). Every rank must use the same value.").level(Level::Tuning).job_wide());
        params.add(Param::enumeration("rto_policy", d.rto_policy.word(), &RtoPolicy::WORDS).help("Retransmission timeout: rtt derives it from the path's round-trip time (srtt + 4 rttvar + ack delay, within pml_dr_rto_min_us..pml_dr_rto_max_us); fixed uses pml_dr_rto_fixed_us whatever the RTT.").level(Level::Tuning));
        params.add(Param::int("rto_fixed_us", us(d.rto_fixed)).range(1, 86_400_000_000).help("The retransmission timeout of pml_dr_rto_policy = fixed, microseconds (above pml_dr_ack_delay_us and pml_dr_ack_hold_us, at most pml_dr_rto_max_us).").level(Level::Tuning));
        params.add(Param::bool("rto_backoff", d.rto_backoff).help("Each consecutive retransmission timeout (and each unanswered probe of an unmatched rendezvous) doubles the timeout, up to pml_dr_rto_max_us; false keeps it constant.").level(Level::Tuning));
        params.add(
            Param::int("rto_initial_us", us(d.rto_initial))
                .range(1, 86_400_000_000)
                .help("Retransmission timeout before the first RTT sample, microseconds.")
                .level(Level::Tuning),
        );
        params.add(Param::int("rto_min_us", us(d.rto_min)).range(1, 86_400_000_000).help("Floor of the RTT-derived retransmission timeout (srtt + 4 rttvar), microseconds.").level(Level::Tuning));
        params.add(
            Param::int("rto_max_us", us(d.rto_max))
                .range(1, 86_400_000_000)
                .help("Cap of the backed-off retransmission timeout, microseconds.")
                .level(Level::Tuning),
        );
        params.add(Param::int("ack_delay_us", us(d.ack_delay)).range(0, 86_400_000_000).help("Longest a receiver delays a partial vfrag ack, microseconds (complete vfrags are acked at once).").level(Level::Dev));
        params.add(Param::int("ack_hold_us", us(d.ack_hold)).range(0, 1_000_000).help("The ack of a complete vfrag waits up to this many microseconds for data going back to the same peer, which then carries it (pml_dr_ack_bundle) or leaves first with the ack right behind it (a ping-pong saves one packet ahead of each reply); 0 acks at once.").level(Level::Tuning));
        params.add(Param::enumeration("ack_bundle", d.ack_bundle.word(), &AckBundle::WORDS).help("Where a pending ack travels in front of the next data fragment to its peer on the same BTL, in one BTL fragment, when both fit (a ping-pong step is then one packet instead of a reply and an ack, the ack sealed and handled ahead of the reply's data): auto on BTLs that need acks (ud: each packet is a system call on either side), true on every BTL (on shm it costs a few percent), false never.").level(Level::Tuning));
        params.add(Param::int("peer_timeout", ms(d.peer_timeout)).range(1, 86_400_000).help("A peer silent this long (milliseconds) while we await it is declared dead and its requests fail. While messages of ours wait, only acknowledgements of them count as hearing from it.").level(Level::Basic));
        params.add(Param::int("btl_retries", d.btl_retries as i64).range(1, 30).help("Consecutive retransmission timeouts after which a BTL is failed for a peer and its traffic moves to the next BTL. The last BTL to a peer is never failed by timeouts: it keeps retrying until pml_dr_peer_timeout of silence.").level(Level::Basic));
        params.add(Param::int("btl_fail_silence", ms(d.btl_fail_silence)).range(0, 86_400_000).help("A BTL is failed over by timeouts only once the peer has also been silent (no acknowledgement) this many milliseconds, so that a peer busy computing for a moment keeps its preferred BTL; 0 fails after btl_retries timeouts alone.").level(Level::Tuning));
        params.add(
            Param::int("window", d.window as i64)
                .range(1, 4096)
                .help("Most vfrags in flight per peer (flow control).")
                .level(Level::Tuning),
        );
        params.add(Param::int("watchdog", ms(d.watchdog)).range(1, 86_400_000).help("A BTL that does not complete a send locally within this many milliseconds is failed for the peer.").level(Level::Tuning));
        params.add(Param::int("reorder_threshold", d.reorder_threshold as i64).range(1, 1 << 20).help("A fragment is declared lost once a transmission this many transmissions later is acknowledged (raised automatically when a path reorders).").level(Level::Dev));
    }
}

impl PmlComponent for DrComponent {
    fn priority(&self, params: &ParamStore) -> i32 {
        params
            .get_int("pml_dr_priority")
            .map(|p| p as i32)
            .unwrap_or(DEFAULT_PRIORITY as i32)
    }

    fn init(&self, ctx: &mut InitContext<'_>, bml: Bml) -> Result<Box<dyn Pml>, PmlError> {
        let cfg = config_from_params(ctx.params)?;
        tracing::debug!(?cfg, "pml dr init");
        let memory = ctx.memory.counter("pml.dr");
        Ok(Box::new(Dr::new(bml, cfg)?.with_memory(memory)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmca_framework::params::{RawSetting, RawSources, Source};

    fn store(
        settings: &[(&str, &str)],
    ) -> Result<ParamStore, Vec<rmca_framework::params::ParamError>> {
        let mut specs = Vec::new();
        DR.register_params(&mut ParamRegistrar::new("pml", "dr", &mut specs));
        let raw = RawSources {
            settings: settings
                .iter()
                .map(|(n, v)| RawSetting {
                    name: (*n).into(),
                    value: (*v).into(),
                    source: Source::CommandLine,
                })
                .collect(),
        };
        ParamStore::resolve(specs, &raw)
    }

    #[test]
    fn registered_defaults_are_the_config_defaults() {
        assert_eq!(
            config_from_params(&store(&[]).unwrap()).unwrap(),
            DrConfig::default()
        );
    }

    #[test]
    fn params_reach_the_config() {
        let s = store(&[
            ("pml_dr_vfrag_frags", "16"),
            ("pml_dr_csum", "true"),
            ("pml_dr_peer_timeout", "5000"),
            ("pml_dr_eager_limit", "8K"),
        ])
        .unwrap();
        let c = config_from_params(&s).unwrap();
        assert_eq!(c.vfrag_frags, 16);
        assert_eq!(c.csum, Csum::Crc32c, "true is an alias of crc32c");
        assert_eq!(c.peer_timeout, Duration::from_secs(5));
        assert_eq!(c.eager_limit, 8192);
    }

    #[test]
    fn protocol_constants_are_job_wide_and_a_mismatch_names_both_values() {
        let mine = store(&[]).unwrap().job_wide_settings();
        let theirs = store(&[("pml_dr_vfrag_frags", "16")])
            .unwrap()
            .job_wide_settings();
        for p in [
            "pml_dr_vfrag_frags",
            "pml_dr_eager_limit",
            "pml_dr_ack_policy",
        ] {
            assert!(mine.contains(p), "{p} is not job-wide: {mine}");
        }
        // What the runtime reports at init when rank 1 runs with another vfrag size.
        let d = rmca_framework::params::job_wide_disagreements(0, &mine, &[(1, theirs)]);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(
            d[0].contains("pml_dr_vfrag_frags")
                && d[0].contains("rank 0 has 64")
                && d[0].contains("rank 1 has 16"),
            "{d:?}"
        );
    }

    #[test]
    fn variants_are_selected_by_word_and_bad_words_name_the_valid_ones() {
        let s = store(&[
            ("pml_dr_ack_policy", "cumulative"),
            ("pml_dr_rto_policy", "fixed"),
            ("pml_dr_rto_fixed_us", "20000"),
            ("pml_dr_rto_backoff", "false"),
            ("pml_dr_csum", "end-to-end"),
        ])
        .unwrap();
        let c = config_from_params(&s).unwrap();
        assert_eq!(c.ack_policy, AckPolicy::Cumulative);
        assert_eq!(c.rto_policy, RtoPolicy::Fixed);
        assert_eq!(c.rto_fixed, Duration::from_millis(20));
        assert!(!c.rto_backoff);
        assert_eq!(c.csum, Csum::EndToEnd);
        for (w, want) in [
            ("false", Csum::Auto),
            ("true", Csum::Crc32c),
            ("none", Csum::None),
            ("auto", Csum::Auto),
            ("crc32c", Csum::Crc32c),
        ] {
            let s = store(&[("pml_dr_csum", w)]).unwrap();
            assert_eq!(config_from_params(&s).unwrap().csum, want, "{w}");
        }
        for (name, bad, valid) in [
            (
                "pml_dr_ack_policy",
                "sack",
                "selective, vfrag, cumulative, immediate",
            ),
            ("pml_dr_rto_policy", "adaptive", "rtt, fixed"),
            (
                "pml_dr_csum",
                "crc32",
                "auto, crc32c, none, end-to-end, true, false",
            ),
        ] {
            let e = store(&[(name, bad)]).unwrap_err();
            let e = e
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            assert!(
                e.contains(name) && e.contains(bad) && e.contains(valid),
                "{e}"
            );
        }
        // In range for the parameter, not for the policy: named by validation.
        let s = store(&[
            ("pml_dr_rto_policy", "fixed"),
            ("pml_dr_rto_fixed_us", "500"),
        ])
        .unwrap();
        let e = config_from_params(&s).unwrap_err().to_string();
        assert!(
            e.contains("pml_dr_rto_fixed_us") && e.contains("pml_dr_ack_delay_us"),
            "{e}"
        );
    }

    #[test]
    fn inconsistent_params_are_an_error_naming_the_parameter() {
        // Each value is in its own range, but the floor is above the cap.
        let s = store(&[
            ("pml_dr_rto_min_us", "5000000"),
            ("pml_dr_rto_max_us", "1000"),
        ])
        .unwrap();
        let e = config_from_params(&s).unwrap_err().to_string();
        assert!(e.contains("pml_dr_rto_"), "{e}");
        assert!(
            store(&[("pml_dr_vfrag_frags", "65")]).is_err(),
            "range checked at resolve"
        );
    }
}
