//! btl-tcp: a BTL over TCP sockets, for jobs spanning nodes without RDMA, shipped as a plugin.
//!
//! This crate is built as a `cdylib` (`librmca_btl_tcp.so`) and loaded by the framework from
//! `component_path` through the descriptor [`rmca_framework::declare_plugin!`] exports; it is
//! deliberately *not* registered with `inventory`, so it also shows third parties how an
//! out-of-tree transport plugs in. (It is an `rlib` too, for its own tests.)
//!
//! # How it works
//! - At init each process binds a listening socket on `btl_tcp_if_addr` (a port from
//!   `btl_tcp_port_min` and `btl_tcp_port_range`, or one the kernel picks) and publishes it as
//!   its business card under `"btl.tcp"`.
//! - Each direction of a pair has its own connection: a process *sends* on the connection it
//!   opened itself (on the first send to that peer) and *receives* on the ones it accepted. So
//!   there is exactly one connection per ordered pair with no connect race to break.
//! - A connection starts with a hello carrying the job's secret: connections from another job
//!   (or anything else) are refused and counted. Then it carries frames
//!   `[tag u8][len u32][bytes]` (see [`wire`]); a sender says goodbye before closing so the
//!   receiver can tell a clean exit from a crash, which it reports as [`BtlEvents::peer_failed`].
//! - Nothing waits for the network. The connect runs in a short-lived helper thread (std has no
//!   non-blocking connect) while fragments queue; sockets are non-blocking. [`Btl::send`] copies
//!   the fragment into the connection's queue and writes what the kernel takes at once;
//!   [`Btl::progress`] accepts, reads, delivers, completes connects and flushes the rest. A send
//!   only answers `WouldBlock` when `btl_tcp_max_pending` is set and exceeded. Only
//!   [`Btl::finalize`] blocks, at most `btl_tcp_connect_timeout` per peer, to say goodbye.
//!
//! The protocol itself lives in sans-IO state machines ([`proto`]), the sockets in
//! [`module`].
//!
//! [`BtlEvents::peer_failed`]: rmca_framework::btl::BtlEvents::peer_failed
//! [`Btl::send`]: rmca_framework::btl::Btl::send
//! [`Btl::progress`]: rmca_framework::btl::Btl::progress
//! [`Btl::finalize`]: rmca_framework::btl::Btl::finalize
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod card;
pub mod module;
pub mod proto;
pub mod wire;

use std::net::IpAddr;
use std::time::Duration;

use rmca_framework::btl::{Btl, BtlComponent, BtlError};
use rmca_framework::component::{Component, ComponentMeta, InitContext};
use rmca_framework::params::{Level, Param, ParamRegistrar, ParamStore};

pub use module::BtlTcp;

/// The btl-tcp component.
#[derive(Debug, Default)]
pub struct TcpComponent;

/// The component instance the plugin descriptor hands to the host.
pub static TCP: TcpComponent = TcpComponent;

// The descriptor's vtable functions are `extern "C"` and the macro marks the descriptor `Sync`
// with an `unsafe impl` carrying its own SAFETY comment: allowed here only.
#[allow(unsafe_code)]
mod plugin {
    use super::TCP;
    use rmca_framework::component::ComponentRef;
    rmca_framework::declare_plugin!(btl, "tcp", ComponentRef::Btl(&TCP));
}

/// Configuration of a [`BtlTcp`] module, from the `btl_tcp_*` parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpConfig {
    /// Address to listen on and publish.
    pub if_addr: IpAddr,
    /// First port to try (0: let the kernel choose).
    pub port_min: u16,
    /// Ports after `port_min` also tried.
    pub port_range: u16,
    /// Largest eager fragment (header included).
    pub eager_limit: usize,
    /// Largest fragment accepted by `send` (and from the wire).
    pub max_send_size: usize,
    /// Bytes queued per peer beyond which `send` answers `WouldBlock` (0 = unbounded).
    pub max_pending: usize,
    /// Time allowed for a connect.
    pub connect_timeout: Duration,
    /// Time an accepted connection has to introduce itself.
    pub handshake_timeout: Duration,
    /// Advertised one-way latency (ns), for the BML.
    pub latency_ns: u32,
    /// Advertised bandwidth (Mbit/s), for the BML.
    pub bandwidth_mbps: u32,
}

impl Default for TcpConfig {
    fn default() -> Self {
        Self {
            if_addr: IpAddr::from([127, 0, 0, 1]),
            port_min: 0,
            port_range: 0,
            // Open MPI's btl_tcp defaults.
            eager_limit: 64 * 1024,
            max_send_size: 128 * 1024,
            max_pending: 0,
            connect_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(10),
            // Even over loopback TCP is far slower than shm and the verbs BTLs, so it ranks
            // below them; a real network is slower still.
            latency_ns: 5_000,
            bandwidth_mbps: 10_000,
        }
    }
}

fn param_err(e: impl std::fmt::Display) -> BtlError {
    BtlError::Other(e.to_string())
}

impl TcpConfig {
    /// Read the `btl_tcp_*` parameters, rejecting inconsistent values with a message naming them.
    pub fn from_params(params: &ParamStore) -> Result<Self, BtlError> {
        let size = |n: &str| -> Result<usize, BtlError> {
            let v = params.get_size(n).map_err(param_err)?;
            usize::try_from(v)
                .map_err(|_| BtlError::Other(format!("{n}={v} does not fit in memory")))
        };
        let int = |n: &str| params.get_int(n).map_err(param_err);
        let addr_text = params.get_str("btl_tcp_if_addr").map_err(param_err)?;
        let if_addr: IpAddr = addr_text.trim().parse().map_err(|_| {
            BtlError::Other(format!(
                "btl_tcp_if_addr='{addr_text}' is not an IP address (valid: an IPv4 or IPv6 address of this host, e.g. 127.0.0.1 or 10.0.0.5)"
            ))
        })?;
        if if_addr.is_unspecified() || if_addr.is_multicast() {
            return Err(BtlError::Other(format!(
                "btl_tcp_if_addr='{if_addr}' cannot be published to peers (valid: a unicast address of this host that peers can reach)"
            )));
        }
        let ms = |n: &str| -> Result<Duration, BtlError> {
            Ok(Duration::from_millis(int(n)?.max(1) as u64))
        };
        let cfg = Self {
            if_addr,
            port_min: int("btl_tcp_port_min")?.clamp(0, 65535) as u16,
            port_range: int("btl_tcp_port_range")?.clamp(0, 65535) as u16,
            eager_limit: size("btl_tcp_eager_limit")?,
            max_send_size: size("btl_tcp_max_send_size")?,
            max_pending: size("btl_tcp_max_pending")?,
            connect_timeout: ms("btl_tcp_connect_timeout")?,
            handshake_timeout: ms("btl_tcp_handshake_timeout")?,
            latency_ns: int("btl_tcp_latency")?.clamp(1, i64::from(u32::MAX)) as u32,
            bandwidth_mbps: int("btl_tcp_bandwidth")?.clamp(1, i64::from(u32::MAX)) as u32,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Check the relations between values.
    pub fn validate(&self) -> Result<(), BtlError> {
        if self.eager_limit > self.max_send_size {
            return Err(BtlError::Other(format!(
                "btl_tcp_eager_limit ({}) must not exceed btl_tcp_max_send_size ({})",
                self.eager_limit, self.max_send_size
            )));
        }
        if self.max_send_size > u32::MAX as usize {
            return Err(BtlError::Other(format!(
                "btl_tcp_max_send_size ({}) exceeds the wire format's 32-bit frame length",
                self.max_send_size
            )));
        }
        if self.port_min == 0 && self.port_range != 0 {
            return Err(BtlError::Other(
                "btl_tcp_port_range is set but btl_tcp_port_min is 0 (valid: set btl_tcp_port_min too, or leave both 0 for a kernel-chosen port)".into(),
            ));
        }
        if u32::from(self.port_min) + u32::from(self.port_range) > 65535 {
            return Err(BtlError::Other(format!(
                "btl_tcp_port_min ({}) + btl_tcp_port_range ({}) exceeds port 65535",
                self.port_min, self.port_range
            )));
        }
        Ok(())
    }
}

impl Component for TcpComponent {
    fn meta(&self) -> ComponentMeta {
        ComponentMeta {
            name: "tcp",
            version: env!("CARGO_PKG_VERSION"),
            description: "TCP sockets between any two hosts (plugin)",
        }
    }

    fn register_params(&self, params: &mut ParamRegistrar<'_>) {
        let d = TcpConfig::default();
        params.add(Param::string("if_addr", "127.0.0.1").help(
            "IP address to listen on and publish to peers; must be reachable from every other node of the job (the default only works on one host).",
        ));
        params.add(
            Param::int("port_min", 0)
                .range(0, 65535)
                .help("First TCP port to listen on (0: any free port chosen by the kernel).")
                .level(Level::Tuning),
        );
        params.add(
            Param::int("port_range", 0)
                .range(0, 65535)
                .help("Ports after btl_tcp_port_min also tried when it is taken (with a firewall, open port_min..port_min+port_range).")
                .level(Level::Tuning),
        );
        params.add(
            Param::size("eager_limit", d.eager_limit as u64)
                .range(64, i64::from(u32::MAX))
                .help("Largest fragment (PML header included) sent eagerly over TCP; larger messages use the rendezvous protocol.")
                .level(Level::Tuning),
        );
        params.add(
            Param::size("max_send_size", d.max_send_size as u64)
                .range(64, i64::from(u32::MAX))
                .help("Largest fragment btl-tcp sends or accepts from the wire.")
                .level(Level::Tuning),
        );
        params.add(
            Param::size("max_pending", 0)
                .help("Bytes queued per peer before sends are refused with WouldBlock until progress drains them (0 = unbounded).")
                .level(Level::Tuning),
        );
        params.add(
            Param::int("connect_timeout", d.connect_timeout.as_millis() as i64)
                .range(1, 3_600_000)
                .help("Milliseconds allowed to connect to a peer before it is declared failed.")
                .level(Level::Tuning),
        );
        params.add(
            Param::int("handshake_timeout", d.handshake_timeout.as_millis() as i64)
                .range(1, 3_600_000)
                .help("Milliseconds an accepted connection has to send its hello before it is dropped.")
                .level(Level::Dev),
        );
        params.add(
            Param::int("latency", i64::from(d.latency_ns))
                .range(1, i64::from(u32::MAX))
                .help("One-way latency in nanoseconds advertised to the BML (lower is preferred for eager traffic).")
                .level(Level::Tuning),
        );
        params.add(
            Param::int("bandwidth", i64::from(d.bandwidth_mbps))
                .range(1, i64::from(u32::MAX))
                .help("Bandwidth in Mbit/s advertised to the BML (large messages are split in proportion).")
                .level(Level::Tuning),
        );
    }
}

impl BtlComponent for TcpComponent {
    fn init(&self, ctx: &mut InitContext<'_>) -> Result<Vec<Box<dyn Btl>>, BtlError> {
        let cfg = TcpConfig::from_params(ctx.params)?;
        let mut btl = BtlTcp::bind(cfg, ctx.job)?;
        btl.set_memory_counter(ctx.memory.counter("btl.tcp"));
        ctx.modex_put(card::MODEX_KEY, &btl.card().encode())
            .map_err(|e| BtlError::Other(format!("btl tcp: publishing the business card: {e}")))?;
        tracing::debug!(addr = %btl.local_addr(), "btl tcp listening");
        Ok(vec![Box::new(btl)])
    }
}

#[cfg(test)]
mod tests;
