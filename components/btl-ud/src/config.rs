//! The MCA parameters of btl-ud and their typed, checked form ([`UdConfig`]).

use rmca_common_verbs::{
    fault_from_params, register_device_params, register_fault_params, DeviceConfig, Transport,
};
use rmca_framework::params::{Level, Param, ParamRegistrar, ParamStore};
use rmca_verbs::FaultConfig;

pub use rmca_common_verbs::{ConfigError, ProviderChoice};

/// Everything btl-ud reads from its parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct UdConfig {
    /// Device, provider and the BML estimates (shared with btl-rc).
    pub device: DeviceConfig,
    /// UD MTU override (`None`: the device's active MTU; a larger value is lowered to it).
    pub mtu: Option<u32>,
    /// Number of send QPs.
    pub send_qps: usize,
    /// Send queue depth of each send QP.
    pub send_queue_depth: u32,
    /// Receive buffers (`None`: sized for the job, see [`UdConfig::recv_buffers_for`]).
    pub recv_buffers: Option<usize>,
    /// Receive buffers posted at open, before the module is known to carry traffic (the rest
    /// of the pool is allocated and posted then: see [`crate::module::UdBtl::open`]).
    pub recv_buffers_initial: usize,
    /// Cap of the pending-fragment queue.
    pub pending_max: usize,
    /// Cap of the bytes queued in it (beyond its first fragment).
    pub pending_bytes_max: usize,
    /// Largest datagram sent inline (clamped to the device limit; 0 disables).
    pub max_inline: u32,
    /// Q_Key of the receive QP.
    pub qkey: u32,
    /// Completions polled per batch.
    pub poll_batch: usize,
    /// Receive buffers reposted together (at most a quarter of the pool).
    pub repost_batch: usize,
    /// Faults injected by the soft provider on UD traffic.
    pub fault: FaultConfig,
    /// `btl_ud_fault_blackhole_after`: fragments sent before every later send is discarded
    /// (the path "dies"); `None`: never. Provider-independent (see [`crate::fault`]).
    pub blackhole_after: Option<u64>,
}

/// Defaults documented in the parameters' help.
pub mod defaults {
    /// Send QPs (Open MPI's ofud used 4).
    pub const SEND_QPS: i64 = 4;
    /// Send queue depth per send QP.
    pub const SEND_QUEUE_DEPTH: i64 = 128;
    /// Pending queue cap.
    pub const PENDING_MAX: i64 = 4096;
    /// Pending queue cap in bytes: 8 MiB, what 4096 fragments of a 2 KiB MTU hold.
    pub const PENDING_BYTES_MAX: u64 = 8 << 20;
    /// Inline threshold.
    pub const MAX_INLINE: u64 = 128;
    /// Q_Key (any value below 2^31; the same for every rank).
    pub const QKEY: i64 = 0x0d0d_4d4d;
    /// Completions per poll.
    pub const POLL_BATCH: i64 = 64;
    /// Receive buffers reposted together.
    pub const REPOST_BATCH: i64 = 16;
    /// Receive buffers posted at open, until the module carries traffic (about 1 MiB at the
    /// soft provider's 65000-byte MTU on loopback, 66 KiB at a HCA's 4 KiB MTU).
    pub const RECV_INITIAL: i64 = 16;
    /// Receive buffers: floor, per rank, ceiling.
    pub const RECV_MIN: usize = 256;
    /// Receive buffers added per rank of the job.
    pub const RECV_PER_RANK: usize = 16;
    /// Receive buffers ceiling of the automatic size.
    pub const RECV_MAX_AUTO: usize = 8192;
    /// Bytes the automatic receive pool may take: with large datagrams (65000 bytes on
    /// loopback) it holds fewer buffers, at least [`RECV_MIN_LARGE`].
    pub const RECV_POOL_BYTES: usize = 32 << 20;
    /// Floor of the automatic receive buffer count whatever their size.
    pub const RECV_MIN_LARGE: usize = 64;
    /// The soft provider's UD MTU asked for when `btl_ud_mtu` is 0: the most one datagram
    /// carries, which the provider lowers to one packet of the interface (65000 on loopback,
    /// 1444 on a 1500-byte link), as a HCA's active MTU is its port's.
    pub const SOFT_MTU: u32 = 65000;
}

/// Register btl-ud's parameters.
pub fn register(p: &mut ParamRegistrar<'_>) {
    register_device_params(p, Transport::Ud);
    p.add(
        Param::size("mtu", 0)
            .range(0, 65000)
            .help("UD MTU in bytes; 0 uses the device's active MTU (Soft-RoCE: usually 1024; soft provider: what one packet of the interface of btl_ud_if_addr carries, its MTU - 56 on IPv4, 65000 at most: 65000 on loopback, 1444 on a 1500-byte link). A larger value is lowered to the device MTU with a warning: a datagram is never IP-fragmented. Fragments (4-byte header included) never exceed it, nor the smallest MTU of the peers, so eager limit and max send size are MTU - 4. Valid: 0, or 256..=65000"),
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
            .help("Receive buffers (each GRH 40 B + MTU) posted on the receive QP, from the mpool: btl_ud_recv_buffers_initial at open, the rest once the module carries traffic. 0 sizes for the job: 256 + 16 per rank, at most 8192 and at most 32 MiB of buffers (but at least 64), and the device's queue limit; ofud used 6000"),
    );
    p.add(
        Param::int("recv_buffers_initial", defaults::RECV_INITIAL)
            .range(1, 1 << 20)
            .help("Receive buffers posted when the module opens; the rest of the pool (btl_ud_recv_buffers) and the send buffers are allocated once the BML routes a peer's traffic over ud, or the first datagram is sent or received. A job whose peers all go over shm (one node) thus never pays for ud's pools. Datagrams beyond these buffers that arrive before the pool grows are dropped (pml dr resends them)")
            .level(Level::Tuning),
    );
    p.add(
        Param::int("pending_max", defaults::PENDING_MAX)
            .range(0, 1 << 24)
            .help("Fragments queued (copied) when every send queue is full; past this, sends return WouldBlock")
            .level(Level::Tuning),
    );
    p.add(
        Param::size("pending_bytes_max", defaults::PENDING_BYTES_MAX)
            .help("Bytes of fragments queued (copied) when every send queue is full; past this (the queue always takes one fragment), sends return WouldBlock. Bounds the copies at large MTUs: 4096 fragments of 65000 bytes would hold 266 MB")
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
    register_fault_params(p, Transport::Ud);
    p.add(
        Param::int("fault_blackhole_after", -1)
            .range(-1, i64::MAX)
            .help("Kill this process's ud path after this many fragments: every later send is accepted and silently discarded (counted as faults_blackholed), as if the network died, on any provider. For failover tests. -1 (default) never; 0 from the start")
            .level(Level::Dev),
    );
}

fn bad(name: &str, value: impl ToString, valid: &str) -> ConfigError {
    ConfigError::bad("btl_ud", name, value, valid)
}

impl UdConfig {
    /// Read and check every parameter.
    pub fn from_params(params: &ParamStore, rank: u32) -> Result<Self, ConfigError> {
        let n = |s: &str| format!("btl_ud_{s}");
        let int = |s: &str| params.get_int(&n(s)).map_err(ConfigError::from);
        let mtu = params.get_size(&n("mtu"))?;
        let mtu = match mtu {
            0 => None,
            256..=65000 => Some(mtu as u32),
            _ => return Err(bad("mtu", mtu, "0 (device MTU) or 256..=65000")),
        };
        let recv = int("recv_buffers")?;
        Ok(Self {
            device: DeviceConfig::from_params(params, "btl_ud")?,
            mtu,
            send_qps: int("send_qps")? as usize,
            send_queue_depth: int("send_queue_depth")? as u32,
            recv_buffers: (recv > 0).then_some(recv as usize),
            recv_buffers_initial: int("recv_buffers_initial")? as usize,
            pending_max: int("pending_max")? as usize,
            pending_bytes_max: usize::try_from(params.get_size(&n("pending_bytes_max"))?)
                .unwrap_or(usize::MAX),
            max_inline: params.get_size(&n("max_inline"))? as u32,
            qkey: int("qkey")? as u32,
            poll_batch: int("poll_batch")? as usize,
            repost_batch: int("recv_repost_batch")? as usize,
            fault: fault_from_params(params, "btl_ud", Transport::Ud, rank)?,
            blackhole_after: match int("fault_blackhole_after")? {
                -1 => None,
                n @ 0.. => Some(n as u64),
                n => return Err(bad("fault_blackhole_after", n, "-1 (never) or >= 0")),
            },
        })
    }

    /// Receive buffers of `buffer_bytes` each for a job of `size` ranks: the parameter, or
    /// 256 + 16 per rank capped at 8192 and at [`defaults::RECV_POOL_BYTES`] of buffers (but at
    /// least [`defaults::RECV_MIN_LARGE`]), and never above the device's queue limit.
    pub fn recv_buffers_for(&self, size: u32, device_max: u32, buffer_bytes: usize) -> usize {
        let by_bytes =
            (defaults::RECV_POOL_BYTES / buffer_bytes.max(1)).max(defaults::RECV_MIN_LARGE);
        let auto = (defaults::RECV_MIN + defaults::RECV_PER_RANK * size as usize)
            .min(defaults::RECV_MAX_AUTO)
            .min(by_bytes);
        self.recv_buffers
            .unwrap_or(auto)
            .min(device_max as usize)
            .max(1)
    }
}
