//! The MCA parameters of btl-ud and their typed, checked form ([`UdConfig`]).

use std::net::IpAddr;
use std::time::Duration;

use rmca_framework::params::{Level, Param, ParamError, ParamRegistrar, ParamStore};
use rmca_verbs::FaultConfig;
use thiserror::Error;

/// Which verbs provider to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderChoice {
    /// rdma when compiled in and a device exists, else soft.
    Auto,
    /// The socket-based soft provider.
    Soft,
    /// libibverbs (real HCA or Soft-RoCE).
    Rdma,
}

/// A bad parameter value, naming the parameter and what is valid.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// A value out of range or unparsable.
    #[error("invalid value '{value}' for MCA parameter '{name}': expected {valid}")]
    Bad {
        /// Full parameter name.
        name: String,
        /// Value as set.
        value: String,
        /// What is valid.
        valid: String,
    },
    /// The parameter store lacks a btl-ud parameter (component not registered).
    #[error(transparent)]
    Param(Box<ParamError>),
}

impl From<ParamError> for ConfigError {
    fn from(e: ParamError) -> Self {
        ConfigError::Param(Box::new(e))
    }
}

/// Everything btl-ud reads from its parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct UdConfig {
    /// Provider.
    pub provider: ProviderChoice,
    /// Soft provider bind address (the node's address).
    pub if_addr: IpAddr,
    /// rdma device name (`None`: first device).
    pub device: Option<String>,
    /// rdma port.
    pub port: u8,
    /// rdma GID index.
    pub gid_index: u8,
    /// UD MTU override (`None`: the device's active MTU).
    pub mtu: Option<u32>,
    /// Number of send QPs.
    pub send_qps: usize,
    /// Send queue depth of each send QP.
    pub send_queue_depth: u32,
    /// Receive buffers (`None`: sized for the job, see [`UdConfig::recv_buffers_for`]).
    pub recv_buffers: Option<usize>,
    /// Cap of the pending-fragment queue.
    pub pending_max: usize,
    /// Largest datagram sent inline (clamped to the device limit; 0 disables).
    pub max_inline: u32,
    /// Q_Key of the receive QP.
    pub qkey: u32,
    /// Completions polled per batch.
    pub poll_batch: usize,
    /// Receive buffers reposted together (at most a quarter of the pool).
    pub repost_batch: usize,
    /// Latency estimate (ns) for the BML (`None`: per-provider default).
    pub latency_ns: Option<u32>,
    /// Bandwidth estimate (Mbit/s) for the BML (`None`: per-provider default).
    pub bandwidth_mbps: Option<u32>,
    /// Faults injected by the soft provider on UD traffic.
    pub fault: FaultConfig,
}

/// Defaults documented in the parameters' help.
pub mod defaults {
    /// Send QPs (Open MPI's ofud used 4).
    pub const SEND_QPS: i64 = 4;
    /// Send queue depth per send QP.
    pub const SEND_QUEUE_DEPTH: i64 = 128;
    /// Pending queue cap.
    pub const PENDING_MAX: i64 = 4096;
    /// Inline threshold.
    pub const MAX_INLINE: u64 = 128;
    /// Q_Key (any value below 2^31; the same for every rank).
    pub const QKEY: i64 = 0x0d0d_4d4d;
    /// Completions per poll.
    pub const POLL_BATCH: i64 = 64;
    /// Receive buffers reposted together.
    pub const REPOST_BATCH: i64 = 16;
    /// Receive buffers: floor, per rank, ceiling.
    pub const RECV_MIN: usize = 256;
    /// Receive buffers added per rank of the job.
    pub const RECV_PER_RANK: usize = 16;
    /// Receive buffers ceiling of the automatic size.
    pub const RECV_MAX_AUTO: usize = 8192;
}

/// Register btl-ud's parameters.
pub fn register(p: &mut ParamRegistrar<'_>) {
    p.add(
        Param::enumeration("provider", "auto", &["auto", "soft", "rdma"])
            .help("Verbs provider: 'rdma' (libibverbs: a real HCA or Soft-RoCE; needs rmca built with the 'rdma' feature), 'soft' (UD emulated over UDP sockets), or 'auto' (rdma when compiled in and a device exists, else soft)"),
    );
    p.add(
        Param::string("if_addr", "127.0.0.1")
            .help("Soft provider: IP address the UD sockets bind to (this node's address, reachable by the other nodes); 127.0.0.1 suits one node"),
    );
    p.add(
        Param::string("device", "")
            .help("rdma provider: device name (e.g. rxe0, mlx5_0); empty picks the first")
            .level(Level::Tuning),
    );
    p.add(
        Param::int("port", 1)
            .range(1, 255)
            .help("rdma provider: port number (1-based)")
            .level(Level::Tuning),
    );
    p.add(
        Param::int("gid_index", 0)
            .range(0, 255)
            .help("rdma provider: GID index used in address handles (Soft-RoCE needs 0)")
            .level(Level::Tuning),
    );
    p.add(
        Param::size("mtu", 0)
            .range(0, 65000)
            .help("UD MTU in bytes; 0 uses the device's active MTU (soft provider: 2048; Soft-RoCE: usually 1024). Fragments (4-byte header included) never exceed it, so eager limit and max send size are MTU - 4. Valid: 0, or 256 up to the device MTU (soft: up to 65000)"),
    );
    p.add(
        Param::int("send_qps", defaults::SEND_QPS)
            .range(1, 64)
            .help("Number of UD send QPs, used round-robin (ofud used 4)"),
    );
    p.add(
        Param::int("send_queue_depth", defaults::SEND_QUEUE_DEPTH)
            .range(1, 16384)
            .help("Send work requests outstanding per send QP; beyond them fragments wait in the pending queue")
            .level(Level::Tuning),
    );
    p.add(
        Param::int("recv_buffers", 0)
            .range(0, 1 << 20)
            .help("Receive buffers (each GRH 40 B + MTU) posted on the receive QP, allocated once from the mpool. 0 sizes for the job: 256 + 16 per rank, at most 8192 (and the device's queue limit); ofud used 6000"),
    );
    p.add(
        Param::int("pending_max", defaults::PENDING_MAX)
            .range(0, 1 << 24)
            .help("Fragments queued (copied) when every send queue is full; past this, sends return WouldBlock")
            .level(Level::Tuning),
    );
    p.add(
        Param::size("max_inline", defaults::MAX_INLINE)
            .range(0, 65536)
            .help("Datagrams up to this size (header included) are sent inline when the device supports it (clamped to the device limit); 0 disables")
            .level(Level::Tuning),
    );
    p.add(
        Param::int("qkey", defaults::QKEY)
            .range(0, 0x7fff_ffff)
            .help("Q_Key of the UD QPs (every rank must use the same)")
            .level(Level::Dev),
    );
    p.add(
        Param::int("poll_batch", defaults::POLL_BATCH)
            .range(1, 4096)
            .help("Completions polled per batch")
            .level(Level::Tuning),
    );
    p.add(
        Param::int("recv_repost_batch", defaults::REPOST_BATCH)
            .range(1, 4096)
            .help("Consumed receive buffers are reposted together once this many are free (capped at a quarter of the pool)")
            .level(Level::Tuning),
    );
    p.add(
        Param::int("latency", 0)
            .range(0, i64::from(u32::MAX))
            .help("Latency estimate in ns for the BML; 0 = provider default (soft 5000, rdma 2000)")
            .level(Level::Tuning),
    );
    p.add(Param::int("bandwidth", 0).range(0, i64::from(u32::MAX)).help("Bandwidth estimate in Mbit/s for the BML; 0 = provider default (soft 8000, rdma 20000)").level(Level::Tuning));
    let rate = |name: &str, what: &str| {
        Param::string(name, "0")
            .help(&format!("Soft provider fault injection on UD: probability (a decimal number from 0 to 1, e.g. 0.01) that a datagram is {what}. Seeded by btl_ud_fault_seed"))
            .level(Level::Dev)
    };
    p.add(rate("fault_drop", "dropped"));
    p.add(rate("fault_duplicate", "delivered twice"));
    p.add(rate("fault_reorder", "held back behind the next one"));
    p.add(rate(
        "fault_corrupt",
        "corrupted (one bit flipped on delivery)",
    ));
    p.add(rate("fault_delay_rate", "delayed by btl_ud_fault_delay"));
    p.add(
        Param::int("fault_delay", 0)
            .range(0, 60_000_000)
            .help("Soft provider fault injection on UD: delay in microseconds applied to datagrams chosen with probability btl_ud_fault_delay_rate (if that rate is 0 and this is set, every datagram is delayed)")
            .level(Level::Dev),
    );
    p.add(
        Param::int("fault_seed", 0)
            .range(0, i64::MAX)
            .help("Seed of the fault injection (same seed, same faults; mixed with the rank)")
            .level(Level::Dev),
    );
}

fn bad(name: &str, value: impl ToString, valid: &str) -> ConfigError {
    ConfigError::Bad {
        name: format!("btl_ud_{name}"),
        value: value.to_string(),
        valid: valid.to_owned(),
    }
}

/// Parse a probability written as a decimal number in 0..=1.
pub fn parse_rate(text: &str) -> Option<f64> {
    let v: f64 = text.trim().parse().ok()?;
    (0.0..=1.0).contains(&v).then_some(v)
}

impl UdConfig {
    /// Read and check every parameter.
    pub fn from_params(params: &ParamStore, rank: u32) -> Result<Self, ConfigError> {
        let n = |s: &str| format!("btl_ud_{s}");
        let int = |s: &str| params.get_int(&n(s)).map_err(ConfigError::from);
        let provider = match params.get_str(&n("provider"))? {
            "auto" => ProviderChoice::Auto,
            "soft" => ProviderChoice::Soft,
            "rdma" => ProviderChoice::Rdma,
            other => return Err(bad("provider", other, "auto, soft or rdma")),
        };
        let addr_text = params.get_str(&n("if_addr"))?;
        let if_addr: IpAddr = addr_text
            .trim()
            .parse()
            .map_err(|_| bad("if_addr", addr_text, "an IPv4 or IPv6 address of this node"))?;
        let device =
            Some(params.get_str(&n("device"))?.trim().to_owned()).filter(|d| !d.is_empty());
        let mtu = params.get_size(&n("mtu"))?;
        let mtu = match mtu {
            0 => None,
            256..=65000 => Some(mtu as u32),
            _ => return Err(bad("mtu", mtu, "0 (device MTU) or 256..=65000")),
        };
        let recv = int("recv_buffers")?;
        let nz = |v: i64| (v > 0).then_some(v as u32);
        let mut fault = FaultConfig::default();
        for (name, slot) in [
            ("fault_drop", &mut fault.drop),
            ("fault_duplicate", &mut fault.duplicate),
            ("fault_reorder", &mut fault.reorder),
            ("fault_corrupt", &mut fault.corrupt),
            ("fault_delay_rate", &mut fault.delay_rate),
        ] {
            let t = params.get_str(&n(name))?;
            *slot = parse_rate(t)
                .ok_or_else(|| bad(name, t, "a probability from 0 to 1, e.g. 0.05"))?;
        }
        fault.delay = Duration::from_micros(int("fault_delay")? as u64);
        if !fault.delay.is_zero() && fault.delay_rate == 0.0 {
            fault.delay_rate = 1.0;
        }
        // Mix the rank in so that ranks do not inject the same fault pattern.
        fault.seed =
            (int("fault_seed")? as u64) ^ u64::from(rank).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        Ok(Self {
            provider,
            if_addr,
            device,
            port: int("port")? as u8,
            gid_index: int("gid_index")? as u8,
            mtu,
            send_qps: int("send_qps")? as usize,
            send_queue_depth: int("send_queue_depth")? as u32,
            recv_buffers: (recv > 0).then_some(recv as usize),
            pending_max: int("pending_max")? as usize,
            max_inline: params.get_size(&n("max_inline"))? as u32,
            qkey: int("qkey")? as u32,
            poll_batch: int("poll_batch")? as usize,
            repost_batch: int("recv_repost_batch")? as usize,
            latency_ns: nz(int("latency")?),
            bandwidth_mbps: nz(int("bandwidth")?),
            fault,
        })
    }

    /// Receive buffers for a job of `size` ranks: the parameter, or 256 + 16 per rank capped
    /// at 8192, and never above the device's queue limit.
    pub fn recv_buffers_for(&self, size: u32, device_max: u32) -> usize {
        let auto = (defaults::RECV_MIN + defaults::RECV_PER_RANK * size as usize)
            .min(defaults::RECV_MAX_AUTO);
        self.recv_buffers
            .unwrap_or(auto)
            .min(device_max as usize)
            .max(1)
    }
}
