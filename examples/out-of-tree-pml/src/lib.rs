//! pml-sw: a reliability PML built as an out-of-tree plugin, the starting point for a
//! researcher's own protocol (the guide: `docs/reliability-pml.md` at the repository root).
//!
//! Each pair of ranks runs a sliding-window protocol over whatever BTL the BML chose (ud
//! included): per-peer sequence numbers, cumulative acks (delayed, or carried by data going
//! back), retransmission on a timeout that doubles per try, CRC32C of every fragment,
//! duplicates dropped, out-of-order fragments held until the gap fills. On top of that reliable,
//! ordered stream of fragments, MPI messages are sent eagerly, cut to the BTL's max send size,
//! and matched by the framework's matching engine.
//!
//! - [`wire`]: the frame format (header, CRC32C).
//! - [`conn`]: the protocol with one peer, sans-IO with explicit time: all of the reliability
//!   logic, unit- and property-tested over a simulated faulty link.
//! - [`pml`]: the I/O edge: [`pml::Sw`] implements the framework's `Pml` over the BML: it reads
//!   the clock, moves frames between connections and BTLs, and turns MPI calls into messages.
//!
//! Loaded by `rmca-run --mca component_path DIR --mca pml sw` from `librmca_pml_sw.so`.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod conn;
pub mod pml;
pub mod wire;

use std::time::Duration;

use rmca_framework::bml::Bml;
use rmca_framework::component::{Component, ComponentMeta, InitContext};
use rmca_framework::params::{Level, Param, ParamRegistrar, ParamStore};
use rmca_framework::pml::{Pml, PmlComponent, PmlError};

pub use conn::Config;

/// The sw component.
#[derive(Debug)]
pub struct SwComponent;

/// The component instance the plugin descriptor hands to the host.
pub static SW: SwComponent = SwComponent;

// The descriptor's vtable is `extern "C"` and the macro's `unsafe impl Sync` carries its own
// SAFETY comment: allowed in this module only.
#[allow(unsafe_code)]
mod plugin {
    use super::SW;
    use rmca_framework::component::ComponentRef;
    rmca_framework::declare_plugin!(pml, "sw", ComponentRef::Pml(&SW));
}

/// Selection priority: below ob1 and dr, so pml-sw runs only when asked for (`--mca pml sw`).
pub const DEFAULT_PRIORITY: i64 = 1;

/// Reads the `pml_sw_*` parameters into a validated [`Config`] (its `max_payload` is set per
/// peer from the BTL's max send size).
pub fn config_from_params(params: &ParamStore) -> Result<Config, PmlError> {
    let int = |name: &str| -> Result<u64, PmlError> {
        let v = params
            .get_int(name)
            .map_err(|e| PmlError::Init(e.to_string()))?;
        // The registered ranges start at 0 or 1: a negative value never gets here.
        u64::try_from(v).map_err(|_| PmlError::Init(format!("{name} = {v} must not be negative")))
    };
    let cfg = Config {
        window: int("pml_sw_window")? as u32,
        max_payload: Config::default().max_payload,
        rto: Duration::from_micros(int("pml_sw_rto_us")?),
        rto_max: Duration::from_micros(int("pml_sw_rto_max_us")?),
        ack_every: int("pml_sw_ack_every")? as u32,
        ack_delay: Duration::from_micros(int("pml_sw_ack_delay_us")?),
        peer_timeout: Duration::from_millis(int("pml_sw_peer_timeout_ms")?),
    };
    cfg.validate().map_err(|e| PmlError::Init(e.to_string()))?;
    Ok(cfg)
}

impl Component for SwComponent {
    fn meta(&self) -> ComponentMeta {
        ComponentMeta {
            name: "sw",
            version: env!("CARGO_PKG_VERSION"),
            description: "sliding window: cumulative acks, retransmission timeouts, CRC32C (an out-of-tree plugin example)",
        }
    }

    fn register_params(&self, p: &mut ParamRegistrar<'_>) {
        let d = Config::default();
        let us = |x: Duration| x.as_micros() as i64;
        p.add(
            Param::int("priority", DEFAULT_PRIORITY)
                .range(0, 100)
                .help("Selection priority of pml sw (highest allowed PML wins).")
                .level(Level::Tuning),
        );
        // The receiver holds at most a window of fragments ahead of a gap: a sender with a
        // larger window would only see its extra fragments dropped, so every rank must agree.
        p.add(
            Param::int("window", i64::from(d.window))
                .range(1, 1 << 16)
                .help("Fragments in flight (unacknowledged) per peer, and held out of order by the receiver. Every rank must use the same value.")
                .level(Level::Tuning)
                .job_wide(),
        );
        p.add(
            Param::int("rto_us", us(d.rto))
                .range(1, 60_000_000)
                .help("Retransmission timeout of a fragment's first transmission, microseconds (doubled per retransmission).")
                .level(Level::Tuning),
        );
        p.add(
            Param::int("rto_max_us", us(d.rto_max))
                .range(1, 60_000_000)
                .help("Cap of the doubled retransmission timeout, microseconds.")
                .level(Level::Tuning),
        );
        p.add(
            Param::int("ack_every", i64::from(d.ack_every))
                .range(1, 1 << 16)
                .help("Acknowledge at once after this many in-order fragments.")
                .level(Level::Tuning),
        );
        p.add(
            Param::int("ack_delay_us", us(d.ack_delay))
                .range(0, 60_000_000)
                .help("Otherwise acknowledge this many microseconds after the first unacknowledged fragment (0: every fragment at once), unless data going back carries the ack first.")
                .level(Level::Tuning),
        );
        p.add(
            Param::int("peer_timeout_ms", d.peer_timeout.as_millis() as i64)
                .range(1, 86_400_000)
                .help("A fragment unacknowledged this many milliseconds fails the peer: its requests complete with an error.")
                .level(Level::Basic),
        );
    }
}

impl PmlComponent for SwComponent {
    fn priority(&self, params: &ParamStore) -> i32 {
        params
            .get_int("pml_sw_priority")
            .map(|p| p as i32)
            .unwrap_or(DEFAULT_PRIORITY as i32)
    }

    fn init(&self, ctx: &mut InitContext<'_>, bml: Bml) -> Result<Box<dyn Pml>, PmlError> {
        let cfg = config_from_params(ctx.params)?;
        tracing::debug!(?cfg, "pml sw init");
        Ok(Box::new(pml::Sw::new(bml, cfg)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmca_framework::component::{component_params, Framework};

    fn params(settings: &[(&str, &str)]) -> Result<ParamStore, String> {
        component_params(Framework::Pml, &SW, settings).map_err(|e| format!("{e:?}"))
    }

    #[test]
    fn registered_defaults_are_the_config_defaults() {
        assert_eq!(
            config_from_params(&params(&[]).unwrap()).unwrap(),
            Config::default()
        );
    }

    #[test]
    fn params_reach_the_config() {
        let c = config_from_params(
            &params(&[("pml_sw_window", "16"), ("pml_sw_rto_us", "2000")]).unwrap(),
        )
        .unwrap();
        assert_eq!(c.window, 16);
        assert_eq!(c.rto, Duration::from_millis(2));
    }

    #[test]
    fn bad_values_are_refused_naming_the_parameter() {
        // Out of its range: refused when the parameters are resolved.
        let e = params(&[("pml_sw_window", "0")]).unwrap_err();
        assert!(e.contains("pml_sw_window"), "{e}");
        // In range alone, inconsistent together.
        let s = params(&[("pml_sw_rto_us", "900000"), ("pml_sw_rto_max_us", "1000")]).unwrap();
        let e = config_from_params(&s).unwrap_err().to_string();
        assert!(e.contains("pml_sw_rto_us") && e.contains("at most"), "{e}");
    }

    #[test]
    fn window_is_job_wide() {
        let s = params(&[]).unwrap().job_wide_settings();
        assert!(s.contains("pml_sw_window"), "{s}");
    }
}
