//! btl-rc's MCA parameters (`btl_rc_*`) and their checked, typed form.
// ParamError carries its source by value (as in the framework); this runs once at init.
#![allow(clippy::result_large_err)]

use std::net::IpAddr;
use std::time::Duration;

use rmca_framework::params::{Level, Param, ParamError, ParamRegistrar, ParamStore};
use thiserror::Error;

use crate::sched::Policy;

/// A parameter had a value btl-rc cannot use.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// Named parameter, bad value, what is valid.
    #[error("btl-rc: parameter {name} = '{value}' is invalid; valid: {valid}")]
    Bad {
        /// Full parameter name.
        name: String,
        /// Offending value.
        value: String,
        /// What would be accepted.
        valid: String,
    },
    /// The parameter store refused the lookup.
    #[error(transparent)]
    Param(#[from] ParamError),
}

/// Which verbs provider to open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProviderChoice {
    /// rdma when compiled in and a device exists, else soft.
    Auto,
    /// Sockets.
    Soft,
    /// libibverbs.
    Rdma,
}

/// When QPs are created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectMode {
    /// On the first message to or from a peer (seed 004).
    OnDemand,
    /// With every peer at `add_procs` (the all-to-all baseline).
    Static,
}

/// How receive buffers are provided (Open MPI's `receive_queues`, one buffer size).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvQueues {
    /// Per-QP receive queues of `bufs` buffers with credit flow control; credits return
    /// explicitly once `threshold` are owed.
    PerPeer {
        /// Data buffers per QP (the peer's credits).
        bufs: u32,
        /// Owed credits that trigger an explicit credit message.
        threshold: u32,
    },
    /// One SRQ for all connections: `initial` buffers, a low-watermark event at `low`
    /// remaining that reposts and grows by `grow` buffers up to `max`.
    Shared {
        /// Buffers posted at start.
        initial: u32,
        /// Low-watermark (the SRQ limit).
        low: u32,
        /// Buffers added per low-watermark event.
        grow: u32,
        /// Upper bound on buffers.
        max: u32,
    },
}

impl RecvQueues {
    /// Parse `P,<bufs>[,<threshold>]` or `S,<initial>[,<low>[,<grow>[,<max>]]]`.
    pub fn parse(text: &str) -> Option<Self> {
        let mut it = text.trim().split(',').map(str::trim);
        let kind = it.next()?;
        let nums: Option<Vec<u32>> = it.map(|s| s.parse().ok()).collect();
        let nums = nums?;
        match (kind, nums.as_slice()) {
            ("P", [bufs, rest @ ..]) if *bufs >= 2 && rest.len() <= 1 => {
                let threshold = rest.first().copied().unwrap_or((bufs / 2).max(1));
                (threshold >= 1 && threshold <= *bufs).then_some(Self::PerPeer {
                    bufs: *bufs,
                    threshold,
                })
            }
            ("S", [initial, rest @ ..]) if *initial >= 2 && rest.len() <= 3 => {
                let low = rest.first().copied().unwrap_or((initial / 4).max(1));
                let grow = rest.get(1).copied().unwrap_or(*initial);
                let max = rest.get(2).copied().unwrap_or(initial * 8);
                (low < *initial && max >= *initial).then_some(Self::Shared {
                    initial: *initial,
                    low,
                    grow,
                    max,
                })
            }
            _ => None,
        }
    }
}

/// Defaults shared by the registration and the parser.
pub mod defaults {
    /// Send WQEs per QP for data.
    pub const SEND_WQES: i64 = 64;
    /// Largest eager fragment.
    pub const EAGER_LIMIT: u64 = 12 * 1024;
    /// Largest fragment.
    pub const MAX_SEND_SIZE: u64 = 64 * 1024;
    /// Striping threshold (seed 002).
    pub const STRIPE_THRESHOLD: u64 = 16 * 1024;
    /// Receive queues.
    pub const RECEIVE_QUEUES: &str = "P,32,16";
}

/// Every btl-rc setting, checked.
#[derive(Clone, Debug)]
pub struct RcConfig {
    /// Provider.
    pub provider: ProviderChoice,
    /// Soft provider bind address.
    pub if_addr: IpAddr,
    /// rdma device name.
    pub device: Option<String>,
    /// rdma port.
    pub port: u8,
    /// rdma GID index.
    pub gid_index: u8,
    /// Connection establishment.
    pub connect: ConnectMode,
    /// Receive buffers.
    pub recv: RecvQueues,
    /// Data send WQEs per QP.
    pub send_wqes: u32,
    /// Coalesce queued small sends.
    pub coalescing: bool,
    /// QPs per peer.
    pub qps_per_peer: u32,
    /// Multi-QP policy.
    pub policy: Policy,
    /// Striping threshold in bytes.
    pub stripe_threshold: usize,
    /// Eager limit (bytes, PML header included).
    pub eager_limit: usize,
    /// Largest fragment.
    pub max_send_size: usize,
    /// Bound on bytes queued per peer before `send` says WouldBlock.
    pub pending_max: usize,
    /// Messages from a peer before an eager RDMA ring is opened for it.
    pub eager_rdma_threshold: u32,
    /// Peers with an eager RDMA ring at most (0 disables eager RDMA).
    pub eager_rdma_max_peers: u32,
    /// Slots per eager RDMA ring.
    pub eager_rdma_num: u32,
    /// First retransmission timeout of a connection request.
    pub connect_timeout: Duration,
    /// Connection request retransmissions before the peer is declared unreachable.
    pub connect_retries: u32,
    /// Soft provider: probability that an RC segment's delivery is delayed.
    pub fault_delay_rate: f64,
    /// Soft provider: that delay.
    pub fault_delay: Duration,
    /// Fault seed.
    pub fault_seed: u64,
}

fn bad(name: &str, value: impl ToString, valid: &str) -> ConfigError {
    ConfigError::Bad {
        name: format!("btl_rc_{name}"),
        value: value.to_string(),
        valid: valid.to_owned(),
    }
}

/// Declare btl-rc's parameters.
pub fn register(p: &mut ParamRegistrar<'_>) {
    p.add(
        Param::enumeration("provider", "auto", &["auto", "soft", "rdma"])
            .help("Verbs provider: 'rdma' (libibverbs: a real HCA or Soft-RoCE; needs the 'rdma' feature), 'soft' (RC emulated over TCP), or 'auto' (rdma when compiled in and a device exists, else soft)"),
    );
    p.add(
        Param::string("if_addr", "127.0.0.1")
            .help("Soft provider: IP address the sockets bind to (this node's address, reachable by the other nodes)"),
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
            .help("rdma provider: GID index (Soft-RoCE needs 0)")
            .level(Level::Tuning),
    );
    p.add(
        Param::enumeration("connect", "on_demand", &["on_demand", "static"])
            .help("When RC QPs are created: 'on_demand' at the first message to or from a peer (seed 004), 'static' with every peer at startup"),
    );
    p.add(
        Param::string("receive_queues", defaults::RECEIVE_QUEUES)
            .help("Receive buffers, Open MPI style: 'P,<bufs>[,<credit threshold>]' per-QP receive queues with credit flow control, or 'S,<initial>[,<low watermark>[,<grow>[,<max>]]]' one shared receive queue refilled and grown on its low-watermark event"),
    );
    p.add(
        Param::int("send_wqes", defaults::SEND_WQES)
            .range(1, 16384)
            .help("Send work requests in flight per QP for data (seed 001); when exhausted, sends queue (and are coalesced when btl_rc_coalescing is on)"),
    );
    p.add(
        Param::bool("coalescing", true)
            .help("Pack queued small sends to one peer into one buffer when the send-WQE budget or credits are exhausted (never rendezvous data or control messages)"),
    );
    p.add(
        Param::int("qps_per_peer", 1)
            .range(1, 16)
            .help("RC QPs per peer (seed 002)"),
    );
    p.add(
        Param::enumeration(
            "qp_policy",
            "epc",
            &["binding", "round_robin", "striping", "epc"],
        )
        .help("How sends use several QPs per peer: 'binding' (one QP), 'round_robin', 'striping' (messages above btl_rc_stripe_threshold split over all QPs), 'epc' (stripe blocking and collective traffic, round-robin non-blocking)"),
    );
    p.add(
        Param::size("stripe_threshold", defaults::STRIPE_THRESHOLD)
            .help(
                "Messages at least this long are striped over the QPs (policies striping and epc)",
            )
            .level(Level::Tuning),
    );
    p.add(
        Param::size("eager_limit", defaults::EAGER_LIMIT)
            .help("Largest fragment (PML header included) sent eagerly")
            .level(Level::Tuning),
    );
    p.add(
        Param::size("max_send_size", defaults::MAX_SEND_SIZE)
            .help("Largest fragment; also the size of every send and receive buffer (plus a 16-byte header). Valid: 1 KiB ..= 1 MiB, at least btl_rc_eager_limit")
            .level(Level::Tuning),
    );
    p.add(
        Param::size("pending_max", 16 << 20)
            .help("Bytes queued per peer (while connecting or out of resources) before send refuses with WouldBlock")
            .level(Level::Tuning),
    );
    p.add(
        Param::int("eager_rdma_threshold", 16)
            .range(1, 1 << 30)
            .help("Messages received from a peer before this process opens an eager RDMA ring for it (seed 000's adaptive eager RDMA)"),
    );
    p.add(
        Param::int("eager_rdma_max_peers", 16)
            .range(0, 1 << 20)
            .help("Peers that may get an eager RDMA ring (0 disables eager RDMA)"),
    );
    p.add(
        Param::int("eager_rdma_num", 16)
            .range(2, 1024)
            .help("Slots per eager RDMA ring (each btl_rc_eager_limit + 24 bytes)")
            .level(Level::Tuning),
    );
    p.add(
        Param::int("connect_timeout_ms", 100)
            .range(1, 60_000)
            .help("First retransmission timeout of an on-demand connection request (doubles per retry)")
            .level(Level::Tuning),
    );
    p.add(
        Param::int("connect_retries", 8)
            .range(0, 64)
            .help("Connection request retransmissions before the peer is reported failed")
            .level(Level::Tuning),
    );
    p.add(
        Param::string("fault_delay_rate", "0")
            .help("Soft provider fault injection on RC: probability (0 to 1) that a segment is delayed by btl_rc_fault_delay")
            .level(Level::Dev),
    );
    p.add(
        Param::int("fault_delay", 0)
            .range(0, 60_000_000)
            .help("Soft provider fault injection on RC: delay in microseconds")
            .level(Level::Dev),
    );
    p.add(
        Param::int("fault_seed", 0)
            .range(0, i64::MAX)
            .help("Seed of the fault injection (mixed with the rank)")
            .level(Level::Dev),
    );
}

impl RcConfig {
    /// Read and check every parameter.
    pub fn from_params(params: &ParamStore, rank: u32) -> Result<Self, ConfigError> {
        let n = |s: &str| format!("btl_rc_{s}");
        let int = |s: &str| params.get_int(&n(s)).map_err(ConfigError::from);
        let size = |s: &str| params.get_size(&n(s)).map_err(ConfigError::from);
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
        let connect = match params.get_str(&n("connect"))? {
            "on_demand" => ConnectMode::OnDemand,
            "static" => ConnectMode::Static,
            other => return Err(bad("connect", other, "on_demand or static")),
        };
        let rq = params.get_str(&n("receive_queues"))?;
        let recv = RecvQueues::parse(rq).ok_or_else(|| {
            bad(
                "receive_queues",
                rq,
                "'P,<bufs >= 2>[,<threshold 1..=bufs>]' or 'S,<initial >= 2>[,<low < initial>[,<grow>[,<max >= initial>]]]'",
            )
        })?;
        let policy = match params.get_str(&n("qp_policy"))? {
            "binding" => Policy::Binding,
            "round_robin" => Policy::RoundRobin,
            "striping" => Policy::Striping,
            "epc" => Policy::Epc,
            other => {
                return Err(bad(
                    "qp_policy",
                    other,
                    "binding, round_robin, striping or epc",
                ))
            }
        };
        let max_send_size = size("max_send_size")?;
        if !(1024..=1 << 20).contains(&max_send_size) {
            return Err(bad("max_send_size", max_send_size, "1 KiB ..= 1 MiB"));
        }
        let eager_limit = size("eager_limit")?;
        if eager_limit == 0 || eager_limit > max_send_size {
            return Err(bad(
                "eager_limit",
                eager_limit,
                "1 ..= btl_rc_max_send_size",
            ));
        }
        let rate_text = params.get_str(&n("fault_delay_rate"))?;
        let fault_delay_rate = rate_text
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|v| (0.0..=1.0).contains(v))
            .ok_or_else(|| bad("fault_delay_rate", rate_text, "a probability from 0 to 1"))?;
        Ok(Self {
            provider,
            if_addr,
            device,
            port: int("port")? as u8,
            gid_index: int("gid_index")? as u8,
            connect,
            recv,
            send_wqes: int("send_wqes")? as u32,
            coalescing: params.get_bool(&n("coalescing"))?,
            qps_per_peer: int("qps_per_peer")? as u32,
            policy,
            stripe_threshold: size("stripe_threshold")?.max(1) as usize,
            eager_limit: eager_limit as usize,
            max_send_size: max_send_size as usize,
            pending_max: size("pending_max")? as usize,
            eager_rdma_threshold: int("eager_rdma_threshold")? as u32,
            eager_rdma_max_peers: int("eager_rdma_max_peers")? as u32,
            eager_rdma_num: int("eager_rdma_num")? as u32,
            connect_timeout: Duration::from_millis(int("connect_timeout_ms")? as u64),
            connect_retries: int("connect_retries")? as u32,
            fault_delay_rate,
            fault_delay: Duration::from_micros(int("fault_delay")? as u64),
            fault_seed: (int("fault_seed")? as u64)
                ^ u64::from(rank).wrapping_mul(0x9e37_79b9_7f4a_7c15),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receive_queue_specs() {
        assert_eq!(
            RecvQueues::parse("P,32,8"),
            Some(RecvQueues::PerPeer {
                bufs: 32,
                threshold: 8
            })
        );
        assert_eq!(
            RecvQueues::parse("S,64,8,32,256"),
            Some(RecvQueues::Shared {
                initial: 64,
                low: 8,
                grow: 32,
                max: 256
            })
        );
        assert!(
            RecvQueues::parse("S,64,64").is_none(),
            "low must be below initial"
        );
        assert!(RecvQueues::parse("P,1").is_none());
        assert!(RecvQueues::parse("X,4").is_none());
        assert!(RecvQueues::parse("P,4,x").is_none());
    }
}
