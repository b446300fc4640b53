//! btl-rc's MCA parameters (`btl_rc_*`) and their checked, typed form.
// ParamError carries its source by value (as in the framework); this runs once at init.
#![allow(clippy::result_large_err)]

use std::time::Duration;

use rmca_common_verbs::{
    fault_from_params, register_device_params, register_fault_params, DeviceConfig, Transport,
};
use rmca_framework::params::{Level, Param, ParamRegistrar, ParamStore, Source};
use rmca_verbs::FaultConfig;

use crate::sched::Policy;

pub use rmca_common_verbs::{ConfigError, ProviderChoice};

/// When QPs are created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectMode {
    /// On the first message to or from a peer (on-demand connection management).
    OnDemand,
    /// With every peer at `add_procs` (the all-to-all baseline).
    Static,
}

/// The kind of one receive queue (Open MPI's `receive_queues` entries).
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

/// One receive queue: fragments up to `size` bytes (PML header included) use it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiveQueue {
    /// Largest fragment its buffers hold.
    pub size: usize,
    /// Per-peer or shared.
    pub kind: RecvQueues,
}

/// `btl_rc_receive_queues`, checked: one queue, or a per-peer and a shared one of different
/// buffer sizes (small fragments on the smaller, e.g. per-peer queues of small buffers, whose
/// memory grows with the peers, and one SRQ of large buffers, whose memory does not; or the
/// reverse). Each queue class gets its own QPs to every peer (a QP has one receive queue).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceiveQueues {
    queues: Vec<ReceiveQueue>,
}

/// The grammar, for error messages and the help text.
pub const RECEIVE_QUEUES_GRAMMAR: &str = "one queue 'P,<bufs>[,<credit threshold>]' or 'S,<initial>[,<low watermark>[,<grow>[,<max>]]]' (buffers of btl_rc_max_send_size), or two queues of increasing buffer size separated by ':', each with its size first: 'P,<size>,<bufs>[,<threshold>]' and 'S,<size>,<initial>[,<low>[,<grow>[,<max>]]]' (one of each kind, the last size at least btl_rc_max_send_size), e.g. 'P,256,32,16:S,65536,256,64,256,4096'";

impl ReceiveQueues {
    /// Parse a spec; `max_send_size` is the size of the single-queue form and the least
    /// size of the last queue. The error says which entry and field is wrong and why.
    pub fn parse(text: &str, max_send_size: usize) -> Result<Self, String> {
        let entries: Vec<&str> = text.trim().split(':').map(str::trim).collect();
        if entries.len() > 2 {
            return Err(format!(
                "{} queues given; at most 2 (one per-peer, one shared)",
                entries.len()
            ));
        }
        let sized = entries.len() > 1;
        let mut queues = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            let at = |msg: String| format!("queue {} '{e}': {msg}", i + 1);
            let mut fields = e.split(',').map(str::trim);
            let kind = fields.next().unwrap_or_default();
            let mut nums = Vec::new();
            for (j, f) in fields.enumerate() {
                nums.push(f.parse::<u32>().map_err(|_| {
                    at(format!(
                        "field {} '{f}' is not a non-negative integer",
                        j + 2
                    ))
                })?);
            }
            let (size, nums) = if sized {
                match nums.split_first() {
                    Some((s, rest)) => (*s as usize, rest),
                    None => return Err(at("the buffer size is missing".into())),
                }
            } else {
                (max_send_size, &nums[..])
            };
            let kind = match (kind, nums) {
                ("P", [bufs, rest @ ..]) if rest.len() <= 1 => {
                    if *bufs < 2 {
                        return Err(at(format!("<bufs> is {bufs}; at least 2")));
                    }
                    let threshold = rest.first().copied().unwrap_or((bufs / 2).max(1));
                    if threshold == 0 || threshold > *bufs {
                        return Err(at(format!(
                            "<credit threshold> is {threshold}; 1 ..= <bufs> ({bufs})"
                        )));
                    }
                    RecvQueues::PerPeer {
                        bufs: *bufs,
                        threshold,
                    }
                }
                ("S", [initial, rest @ ..]) if rest.len() <= 3 => {
                    if *initial < 2 {
                        return Err(at(format!("<initial> is {initial}; at least 2")));
                    }
                    let low = rest.first().copied().unwrap_or((initial / 4).max(1));
                    let grow = rest.get(1).copied().unwrap_or(*initial);
                    let max = rest.get(2).copied().unwrap_or(initial.saturating_mul(8));
                    if low >= *initial {
                        return Err(at(format!(
                            "<low watermark> is {low}; below <initial> ({initial})"
                        )));
                    }
                    if max < *initial {
                        return Err(at(format!(
                            "<max> is {max}; at least <initial> ({initial})"
                        )));
                    }
                    RecvQueues::Shared {
                        initial: *initial,
                        low,
                        grow,
                        max,
                    }
                }
                ("P" | "S", _) => {
                    return Err(at(format!(
                        "{} numbers; {}",
                        nums.len(),
                        if kind == "P" {
                            "P takes <bufs>[,<credit threshold>]"
                        } else {
                            "S takes <initial>[,<low>[,<grow>[,<max>]]]"
                        }
                    )))
                }
                (k, _) => {
                    return Err(at(format!(
                        "kind '{k}'; P (per-peer queues) or S (shared receive queue)"
                    )))
                }
            };
            queues.push(ReceiveQueue { size, kind });
        }
        if let [a, b] = queues.as_slice() {
            if std::mem::discriminant(&a.kind) == std::mem::discriminant(&b.kind) {
                return Err("two queues of the same kind; one P and one S".into());
            }
            if a.size < 64 {
                return Err(format!(
                    "the first queue's size is {}; at least 64 (control messages use it)",
                    a.size
                ));
            }
            if b.size <= a.size {
                return Err(format!(
                    "sizes {} then {}; they must increase",
                    a.size, b.size
                ));
            }
            if b.size < max_send_size {
                return Err(format!(
                    "the last queue's size is {}; at least btl_rc_max_send_size ({max_send_size}) so that every fragment fits",
                    b.size
                ));
            }
        }
        Ok(Self { queues })
    }

    /// The queues by increasing buffer size (one or two).
    pub fn queues(&self) -> &[ReceiveQueue] {
        &self.queues
    }

    /// The queue class of a fragment of `len` bytes: the first whose buffers hold it.
    pub fn class_of(&self, len: usize) -> usize {
        self.queues
            .iter()
            .position(|q| len <= q.size)
            .unwrap_or(self.queues.len() - 1)
    }

    /// The per-peer queue, if any: (class, bufs, credit threshold).
    pub fn per_peer(&self) -> Option<(usize, u32, u32)> {
        self.queues
            .iter()
            .enumerate()
            .find_map(|(c, q)| match q.kind {
                RecvQueues::PerPeer { bufs, threshold } => Some((c, bufs, threshold)),
                RecvQueues::Shared { .. } => None,
            })
    }

    /// The shared queue, if any: its class and settings.
    pub fn shared(&self) -> Option<(usize, RecvQueues)> {
        self.queues
            .iter()
            .enumerate()
            .find(|(_, q)| matches!(q.kind, RecvQueues::Shared { .. }))
            .map(|(c, q)| (c, q.kind))
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
    /// Striping threshold of the multi-QP policies.
    pub const STRIPE_THRESHOLD: u64 = 16 * 1024;
    /// Local ACK timeout exponent: 4.096 us * 2^20 = 4.3 s per transport retry, Open MPI's
    /// `btl_openib_ib_timeout`. Soft-RoCE (rxe) times out spuriously when its host is busy
    /// (a guest on shared cores, or a loaded node: retransmissions of RNR-NAKed windows),
    /// and with 67 ms (14) seven in a row killed live connections under load.
    pub const IB_TIMEOUT: i64 = 20;
    /// Transport retries: 6, not the specification's largest 7, which rxe reads as "retry
    /// forever", so that a vanished peer still fails its sends (after about 7 timeouts).
    pub const IB_RETRY_COUNT: i64 = 6;
    /// Receive queues, Open MPI's default layout: fragments up to 256 bytes on per-peer
    /// queues of 16 small buffers (4 KiB per peer), larger ones on one SRQ of 64 KiB buffers
    /// (32 at start, growing by 32 up to 1024 at its low watermark of 8), so memory stays flat
    /// in the number of peers (per-peer full-size buffers, `P,32,16`, cost 2 MiB per peer).
    /// With a larger `btl_rc_max_send_size` the SRQ's buffers follow it
    /// ([`super::default_receive_queues`]).
    pub const RECEIVE_QUEUES: &str = "P,256,16,8:S,65536,32,8,32,1024";
    /// The SRQ buffer size of [`RECEIVE_QUEUES`].
    pub const RECEIVE_QUEUES_S_SIZE: u64 = 65536;
    /// [`RECEIVE_QUEUES`] before its SRQ buffer size.
    pub(super) const RECEIVE_QUEUES_P_PART: &str = "P,256,16,8";
    /// [`RECEIVE_QUEUES`]' SRQ counts after its buffer size: initial, low watermark, grow, max.
    pub(super) const RECEIVE_QUEUES_S_COUNTS: &str = "32,8,32,1024";
}

/// The default receive queues for `max_send_size`: [`defaults::RECEIVE_QUEUES`], its SRQ
/// buffers raised to `max_send_size` when that is larger (the last queue must hold every
/// fragment).
pub fn default_receive_queues(max_send_size: u64) -> String {
    let srq_size = max_send_size.max(defaults::RECEIVE_QUEUES_S_SIZE);
    format!(
        "{}:S,{srq_size},{}",
        defaults::RECEIVE_QUEUES_P_PART,
        defaults::RECEIVE_QUEUES_S_COUNTS
    )
}

/// Every btl-rc setting, checked.
#[derive(Clone, Debug)]
pub struct RcConfig {
    /// Device, provider and the BML estimates (shared with btl-ud).
    pub device: DeviceConfig,
    /// Connection establishment.
    pub connect: ConnectMode,
    /// Receive queues.
    pub recv: ReceiveQueues,
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
    /// Local ACK timeout exponent of the RC QPs (4.096 us * 2^n per transport retry).
    pub ib_timeout: u8,
    /// Transport retries of the RC QPs before a send fails with `RetryExceeded`.
    pub ib_retry_count: u8,
    /// Fault injection: after this many data fragments sent, the QPs to the peer of the last
    /// one go to the error state (`None`: never; 0 acts at the first fragment).
    pub fault_kill_after: Option<u64>,
    /// Faults the soft provider injects on RC traffic (delays only).
    pub fault: FaultConfig,
}

fn bad(name: &str, value: impl ToString, valid: &str) -> ConfigError {
    ConfigError::bad("btl_rc", name, value, valid)
}

/// Declare btl-rc's parameters.
pub fn register(p: &mut ParamRegistrar<'_>) {
    register_device_params(p, Transport::Rc);
    p.add(
        Param::enumeration("connect", "on_demand", &["on_demand", "static"])
            .help("When RC QPs are created: 'on_demand' at the first message to or from a peer, 'static' with every peer at startup"),
    );
    p.add(
        Param::string("receive_queues", defaults::RECEIVE_QUEUES)
            .help(&format!("Receive buffers, Open MPI style: P = per-QP receive queues with credit flow control, S = one shared receive queue refilled and grown on its low-watermark event. The default keeps memory flat in the number of peers (its SRQ buffers follow a larger btl_rc_max_send_size). Syntax: {RECEIVE_QUEUES_GRAMMAR}")),
    );
    p.add(
        Param::int("send_wqes", defaults::SEND_WQES)
            .range(1, 16384)
            .help("Send work requests in flight per QP for data; when exhausted, sends queue (and are coalesced when btl_rc_coalescing is on)"),
    );
    p.add(
        Param::bool("coalescing", true)
            .help("Pack queued small sends to one peer into one buffer when the send-WQE budget or credits are exhausted (never rendezvous data or control messages)"),
    );
    p.add(
        Param::int("qps_per_peer", 1)
            .range(1, 16)
            .help("RC QPs per peer (used as btl_rc_qp_policy says)"),
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
            .help("Messages received from a peer before this process opens an eager RDMA ring for it (adaptive eager RDMA)"),
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
        Param::int("ib_timeout", defaults::IB_TIMEOUT)
            .range(1, 31)
            .help("Local ACK timeout of the RC QPs, as an exponent: 4.096 us * 2^n per transport retry (20 = 4.3 s, Open MPI's default; 14 = 67 ms). A peer that vanished is reported failed after about btl_rc_ib_retry_count + 1 timeouts; too short a timeout fails live but slow peers (Soft-RoCE on a busy host)")
            .level(Level::Tuning),
    );
    p.add(
        Param::int("ib_retry_count", defaults::IB_RETRY_COUNT)
            .range(0, 7)
            .help("Transport retries of the RC QPs before a send fails with RetryExceeded and the peer is reported failed (7 means forever on Soft-RoCE, so a vanished peer would never be detected)")
            .level(Level::Tuning),
    );
    register_fault_params(p, Transport::Rc);
    p.add(
        Param::int("fault_kill_after", -1)
            .range(-1, i64::MAX)
            .help("Fault injection on any provider: after this many data fragments sent by this process, move the RC QPs to the peer of the last one to the error state, as a link whose retries ran out, so that the peer is reported failed (pml dr then fails over to another BTL), as btl_ud_fault_blackhole_after does for ud. -1 (default) never; 0 with the first fragment")
            .level(Level::Dev),
    );
}

impl RcConfig {
    /// Read and check every parameter.
    pub fn from_params(params: &ParamStore, rank: u32) -> Result<Self, ConfigError> {
        let n = |s: &str| format!("btl_rc_{s}");
        let int = |s: &str| params.get_int(&n(s)).map_err(ConfigError::from);
        let size = |s: &str| params.get_size(&n(s)).map_err(ConfigError::from);
        let connect = match params.get_str(&n("connect"))? {
            "on_demand" => ConnectMode::OnDemand,
            "static" => ConnectMode::Static,
            other => return Err(bad("connect", other, "on_demand or static")),
        };
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
        let rq_name = n("receive_queues");
        // Only the implied default follows a larger btl_rc_max_send_size: a spec the user
        // wrote (even one equal to the default) is taken as written, and refused with the
        // reason if its last queue is too small.
        let rq = if params.entry(&rq_name)?.source == Source::Default {
            default_receive_queues(max_send_size)
        } else {
            params.get_str(&rq_name)?.to_owned()
        };
        let rq = rq.as_str();
        let recv = ReceiveQueues::parse(rq, max_send_size as usize).map_err(|why| {
            bad(
                "receive_queues",
                rq,
                &format!("a valid spec ({why}): {RECEIVE_QUEUES_GRAMMAR}"),
            )
        })?;
        Ok(Self {
            device: DeviceConfig::from_params(params, "btl_rc")?,
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
            ib_timeout: int("ib_timeout")? as u8,
            ib_retry_count: int("ib_retry_count")? as u8,
            fault_kill_after: u64::try_from(int("fault_kill_after")?).ok(),
            fault: fault_from_params(params, "btl_rc", Transport::Rc, rank)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: usize = 65536;

    fn one(text: &str) -> RecvQueues {
        let q = ReceiveQueues::parse(text, M).unwrap();
        assert_eq!(q.queues().len(), 1);
        assert_eq!(q.queues()[0].size, M);
        q.queues()[0].kind
    }

    #[test]
    fn receive_queue_specs() {
        assert_eq!(
            one("P,32,8"),
            RecvQueues::PerPeer {
                bufs: 32,
                threshold: 8
            }
        );
        assert_eq!(
            one("S,64,8,32,256"),
            RecvQueues::Shared {
                initial: 64,
                low: 8,
                grow: 32,
                max: 256
            }
        );
        let err = |t: &str| ReceiveQueues::parse(t, M).unwrap_err();
        assert!(err("S,64,64").contains("<low watermark> is 64"));
        assert!(err("P,1").contains("<bufs> is 1"));
        assert!(err("X,4").contains("kind 'X'"));
        assert!(err("P,4,x").contains("field 3 'x'"));
        assert!(err("P,4,2,1").contains("3 numbers"));
    }

    #[test]
    fn the_default_is_per_peer_small_and_shared_large() {
        let q = ReceiveQueues::parse(defaults::RECEIVE_QUEUES, M).unwrap();
        assert_eq!(q.per_peer(), Some((0, 16, 8)));
        assert_eq!(q.queues()[0].size, 256);
        assert_eq!(
            q.shared(),
            Some((
                1,
                RecvQueues::Shared {
                    initial: 32,
                    low: 8,
                    grow: 32,
                    max: 1024
                }
            ))
        );
        assert_eq!(default_receive_queues(M as u64), defaults::RECEIVE_QUEUES);
        // A larger fragment size: the SRQ's buffers follow, so the default stays valid.
        let big = default_receive_queues(1 << 20);
        assert_eq!(big, "P,256,16,8:S,1048576,32,8,32,1024");
        assert_eq!(
            ReceiveQueues::parse(&big, 1 << 20).unwrap().queues()[1].size,
            1 << 20
        );
    }

    fn store(settings: &[(&str, &str)]) -> ParamStore {
        use rmca_framework::component::Component;
        let mut specs = Vec::new();
        crate::RC.register_params(&mut ParamRegistrar::new("btl", "rc", &mut specs));
        ParamStore::with_settings(specs, settings).unwrap()
    }

    #[test]
    fn only_the_implied_default_follows_a_larger_fragment_size() {
        let big = [("btl_rc_max_send_size", "1048576")];
        let cfg = RcConfig::from_params(&store(&big), 0).unwrap();
        assert_eq!(cfg.recv.queues()[1].size, 1 << 20);
        // The same text written by the user is the user's: too small for 1 MiB fragments.
        let written = [big[0], ("btl_rc_receive_queues", defaults::RECEIVE_QUEUES)];
        let err = RcConfig::from_params(&store(&written), 0)
            .unwrap_err()
            .to_string();
        assert!(err.contains("btl_rc_receive_queues"), "{err}");
        assert!(err.contains("btl_rc_max_send_size (1048576)"), "{err}");
        // At the default fragment size the written default is taken as it is.
        let cfg = RcConfig::from_params(&store(&written[1..]), 0).unwrap();
        assert_eq!(cfg.recv.queues()[1].size, M);
    }

    #[test]
    fn transport_timeout_defaults_to_open_mpis_and_is_checked() {
        // 67 ms (14) let a busy Soft-RoCE host time out seven times in a row and fail a live
        // peer (multi_qp_striping_reassembles_in_order, RetryExceeded under load).
        let cfg = RcConfig::from_params(&store(&[]), 0).unwrap();
        assert_eq!((cfg.ib_timeout, cfg.ib_retry_count), (20, 6));
        let set = [("btl_rc_ib_timeout", "14"), ("btl_rc_ib_retry_count", "3")];
        let cfg = RcConfig::from_params(&store(&set), 0).unwrap();
        assert_eq!((cfg.ib_timeout, cfg.ib_retry_count), (14, 3));
        for (name, bad) in [
            ("btl_rc_ib_timeout", "0"),
            ("btl_rc_ib_timeout", "32"),
            ("btl_rc_ib_retry_count", "8"),
        ] {
            use rmca_framework::component::Component;
            let mut specs = Vec::new();
            crate::RC.register_params(&mut ParamRegistrar::new("btl", "rc", &mut specs));
            let err = ParamStore::with_settings(specs, &[(name, bad)])
                .err()
                .unwrap_or_else(|| panic!("{name}={bad} accepted"));
            let text = format!("{err:?}");
            assert!(text.contains(name), "{text}");
        }
    }

    #[test]
    fn combined_specs() {
        let q = ReceiveQueues::parse("P,128,32,16:S,65536,256,64,128,4096", M).unwrap();
        assert_eq!(q.queues().len(), 2);
        assert_eq!(q.per_peer(), Some((0, 32, 16)));
        assert_eq!(q.shared().map(|s| s.0), Some(1));
        assert_eq!(q.class_of(0), 0);
        assert_eq!(q.class_of(128), 0);
        assert_eq!(q.class_of(129), 1);
        assert_eq!(q.class_of(M), 1);
        // The reverse: small on the SRQ, large on per-peer queues.
        let r = ReceiveQueues::parse("S,1024,64:P,65536,4", M).unwrap();
        assert_eq!(r.shared().map(|s| s.0), Some(0));
        assert_eq!(r.per_peer(), Some((1, 4, 2)));
        let err = |t: &str| ReceiveQueues::parse(t, M).unwrap_err();
        assert!(err("P,128,8:P,65536,8").contains("same kind"));
        assert!(err("P,4096,8:S,1024,8").contains("must increase"));
        assert!(err("P,128,8:S,4096,8").contains("btl_rc_max_send_size (65536)"));
        assert!(err("P,16,8:S,65536,8").contains("at least 64"));
        assert!(err("P,128:S,65536,8").contains("queue 1 'P,128'"));
        assert!(err("S,65536:P,128,8").contains("0 numbers; S takes"));
        assert!(err("P,128,8:S,65536,8:S,1,2").contains("3 queues"));
    }
}
