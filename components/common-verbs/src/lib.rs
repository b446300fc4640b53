//! What the verbs BTLs (btl-rc, btl-ud) share: the parameters that choose and address a verbs
//! device, the soft provider's fault-injection parameters, and opening a provider from them.
//! Open MPI keeps the same in `ompi/mca/common/verbs`; here it keeps `btl_rc_*` and `btl_ud_*`
//! spelled, checked and documented alike. The verbs crate itself stays framework-free.
//!
//! Each BTL registers these under its own prefix (`btl_rc_provider`, `btl_ud_provider`, ...)
//! with [`register_device_params`] and [`register_fault_params`], and reads them back with
//! [`DeviceConfig::from_params`] and [`fault_from_params`]. Opening a module fails with
//! [`OpenError`] (btl-rc's `RcError`, btl-ud's `UdError`), verbs calls mapped by [`verbs`].
#![deny(unsafe_code)]
// ParamError carries its source by value (as in the framework); this runs once at init.
#![allow(clippy::result_large_err)]

use std::net::IpAddr;
use std::time::Duration;

use rmca_framework::btl::BtlError;
use rmca_framework::job::JobInfo;
use rmca_framework::params::{Level, Param, ParamError, ParamRegistrar, ParamStore};
use rmca_verbs::{FaultConfig, ProviderConfig, ProviderKind, RdmaConfig, SoftConfig};
use thiserror::Error;

/// Which verbs provider to open (`btl_<name>_provider`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderChoice {
    /// rdma when compiled in and a device exists, else soft.
    Auto,
    /// The socket-based soft provider.
    Soft,
    /// libibverbs (real HCA or Soft-RoCE).
    Rdma,
}

impl ProviderChoice {
    /// The provider this choice opens on this machine: `Auto` is rdma when the rdma provider
    /// is compiled in and lists a device, else soft.
    pub fn resolve(self) -> ProviderKind {
        match self {
            ProviderChoice::Soft => ProviderKind::Soft,
            ProviderChoice::Rdma => ProviderKind::Rdma,
            ProviderChoice::Auto => match rmca_verbs::devices(ProviderKind::Rdma) {
                Ok(d) if !d.is_empty() => ProviderKind::Rdma,
                _ => ProviderKind::Soft,
            },
        }
    }
}

/// A parameter had a value a verbs BTL cannot use.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// Named parameter, bad value, what is valid.
    #[error("invalid value '{value}' for MCA parameter '{name}': expected {valid}")]
    Bad {
        /// Full parameter name.
        name: String,
        /// Offending value.
        value: String,
        /// What would be accepted.
        valid: String,
    },
    /// The parameter store lacks the parameter (component not registered) or refused it.
    #[error(transparent)]
    Param(Box<ParamError>),
}

impl From<ParamError> for ConfigError {
    fn from(e: ParamError) -> Self {
        ConfigError::Param(Box::new(e))
    }
}

impl ConfigError {
    /// A bad value of `<prefix>_<name>`.
    pub fn bad(prefix: &str, name: &str, value: impl ToString, valid: &str) -> Self {
        ConfigError::Bad {
            name: format!("{prefix}_{name}"),
            value: value.to_string(),
            valid: valid.to_owned(),
        }
    }
}

/// The transport a BTL drives; it decides the help texts and which faults the soft provider
/// can inject (a reliable connection only delays: it never loses, duplicates or reorders).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Reliable connections (emulated over TCP by the soft provider).
    Rc,
    /// Unreliable datagrams (emulated over UDP by the soft provider).
    Ud,
}

impl Transport {
    fn name(self) -> &'static str {
        match self {
            Transport::Rc => "RC",
            Transport::Ud => "UD",
        }
    }

    /// What the BML should believe of this transport on `kind` when the user does not say:
    /// the soft provider's UDP datagrams beat its TCP streams on latency, a real HCA beats both.
    pub fn default_estimate(self, kind: ProviderKind) -> LinkEstimate {
        let (latency_ns, bandwidth_mbps) = match (kind, self) {
            (ProviderKind::Soft, Transport::Ud) => (5_000, 8_000),
            (ProviderKind::Soft, Transport::Rc) => (6_000, 7_000),
            (ProviderKind::Rdma, _) => (2_000, 20_000),
        };
        LinkEstimate {
            latency_ns,
            bandwidth_mbps,
        }
    }

    fn soft_medium(self) -> &'static str {
        match self {
            Transport::Rc => "TCP",
            Transport::Ud => "UDP",
        }
    }
}

/// Latency and bandwidth a BTL reports to the BML when the user does not override them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkEstimate {
    /// One-way latency in nanoseconds.
    pub latency_ns: u32,
    /// Bandwidth in Mbit/s.
    pub bandwidth_mbps: u32,
}

/// How to reach the device, and what the BML should believe of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceConfig {
    /// Provider.
    pub provider: ProviderChoice,
    /// Soft provider bind address (this node's address); `None` ("auto"): 127.0.0.1 when the
    /// job runs on one node, else this node's address ([`rmca_verbs::soft::link::node_address`]).
    pub if_addr: Option<IpAddr>,
    /// rdma device name (`None`: the first device).
    pub device: Option<String>,
    /// rdma port (1-based).
    pub port: u8,
    /// rdma GID index used in address handles.
    pub gid_index: u8,
    /// Latency estimate override in ns.
    pub latency_ns: Option<u32>,
    /// Bandwidth estimate override in Mbit/s.
    pub bandwidth_mbps: Option<u32>,
}

/// Register the device parameters (`provider`, `if_addr`, `device`, `port`, `gid_index`,
/// `latency`, `bandwidth`) of a BTL speaking `transport`.
pub fn register_device_params(p: &mut ParamRegistrar<'_>, transport: Transport) {
    let (t, medium) = (transport.name(), transport.soft_medium());
    let soft = transport.default_estimate(ProviderKind::Soft);
    let rdma = transport.default_estimate(ProviderKind::Rdma);
    p.add(
        Param::enumeration("provider", "auto", &["auto", "soft", "rdma"])
            .help(&format!("Verbs provider: 'rdma' (libibverbs: a real HCA or Soft-RoCE; needs rmca built with the 'rdma' feature), 'soft' ({t} emulated over {medium} sockets), or 'auto' (rdma when compiled in and a device exists, else soft)")),
    );
    p.add(
        Param::string("if_addr", "auto")
            .help("Soft provider: IP address the sockets bind to, reachable by the other nodes; 'auto': 127.0.0.1 when the job runs on one node, else the first IPv4 address of an interface that is up and not loopback (interfaces in name order)"),
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
        Param::int("latency", 0)
            .range(0, i64::from(u32::MAX))
            .help(&format!("Latency estimate in ns for the BML (eager traffic goes to the lowest); 0 = provider default (soft {}, rdma {})", soft.latency_ns, rdma.latency_ns))
            .level(Level::Tuning),
    );
    p.add(
        Param::int("bandwidth", 0)
            .range(0, i64::from(u32::MAX))
            .help(&format!("Bandwidth estimate in Mbit/s for the BML (large messages are split by it); 0 = provider default (soft {}, rdma {})", soft.bandwidth_mbps, rdma.bandwidth_mbps))
            .level(Level::Tuning),
    );
}

impl DeviceConfig {
    /// Read and check the device parameters registered under `prefix` (e.g. `"btl_ud"`).
    pub fn from_params(params: &ParamStore, prefix: &str) -> Result<Self, ConfigError> {
        let n = |s: &str| format!("{prefix}_{s}");
        let int = |s: &str| params.get_int(&n(s)).map_err(ConfigError::from);
        let provider = match params.get_str(&n("provider"))? {
            "auto" => ProviderChoice::Auto,
            "soft" => ProviderChoice::Soft,
            "rdma" => ProviderChoice::Rdma,
            other => {
                return Err(ConfigError::bad(
                    prefix,
                    "provider",
                    other,
                    "auto, soft or rdma",
                ))
            }
        };
        let addr_text = params.get_str(&n("if_addr"))?;
        let if_addr = match addr_text.trim() {
            "auto" => None,
            text => Some(text.parse::<IpAddr>().map_err(|_| {
                ConfigError::bad(
                    prefix,
                    "if_addr",
                    addr_text,
                    "'auto' or an IPv4 or IPv6 address of this node",
                )
            })?),
        };
        let device =
            Some(params.get_str(&n("device"))?.trim().to_owned()).filter(|d| !d.is_empty());
        let nonzero = |v: i64| u32::try_from(v).ok().filter(|&v| v > 0);
        let byte = |name: &str, valid: &str| -> Result<u8, ConfigError> {
            let v = int(name)?;
            u8::try_from(v).map_err(|_| ConfigError::bad(prefix, name, v, valid))
        };
        Ok(Self {
            provider,
            if_addr,
            device,
            port: byte("port", "1..=255")?,
            gid_index: byte("gid_index", "0..=255")?,
            latency_ns: nonzero(int("latency")?),
            bandwidth_mbps: nonzero(int("bandwidth")?),
        })
    }

    /// The soft provider's bind address for `job`: `if_addr`, or under "auto" loopback for a
    /// job on one node and this node's address for one that spans nodes.
    pub fn bind_addr(&self, job: &JobInfo) -> Result<IpAddr, rmca_verbs::Error> {
        match self.if_addr {
            Some(a) => Ok(a),
            None if job.node_names.len() <= 1 => Ok(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)),
            None => rmca_verbs::soft::link::node_address(),
        }
    }

    /// The provider configuration to open `kind` with: this device, the soft provider
    /// settings the BTL prepared (`soft.bind_addr` is set from [`DeviceConfig::bind_addr`]),
    /// the job secret.
    pub fn provider_config(
        &self,
        kind: ProviderKind,
        soft: SoftConfig,
        job: &JobInfo,
    ) -> Result<ProviderConfig, rmca_verbs::Error> {
        let bind_addr = if kind == ProviderKind::Soft {
            self.bind_addr(job)?
        } else {
            // The rdma provider binds nothing; the field keeps its meaning for logs only.
            soft.bind_addr
        };
        Ok(ProviderConfig {
            kind,
            soft: SoftConfig { bind_addr, ..soft },
            rdma: RdmaConfig {
                device: self.device.clone(),
                port: self.port,
                gid_index: self.gid_index,
            },
            job_secret: job.secret.clone(),
        })
    }

    /// The estimates the BML gets: the user's overrides, else the transport's default on
    /// `kind`.
    pub fn estimate(&self, kind: ProviderKind, transport: Transport) -> LinkEstimate {
        let base = transport.default_estimate(kind);
        LinkEstimate {
            latency_ns: self.latency_ns.unwrap_or(base.latency_ns),
            bandwidth_mbps: self.bandwidth_mbps.unwrap_or(base.bandwidth_mbps),
        }
    }
}

/// Parse a probability written as a decimal number in 0..=1.
pub fn parse_rate(text: &str) -> Option<f64> {
    let v: f64 = text.trim().parse().ok()?;
    (0.0..=1.0).contains(&v).then_some(v)
}

/// The probabilities a transport's soft provider can inject, with their parameter names.
fn fault_rates(transport: Transport) -> &'static [(&'static str, &'static str)] {
    const UD: &[(&str, &str)] = &[
        ("fault_drop", "dropped"),
        ("fault_duplicate", "delivered twice"),
        ("fault_reorder", "held back behind the next one"),
        ("fault_corrupt", "corrupted (one bit flipped on delivery)"),
        ("fault_delay_rate", "delayed by the fault_delay parameter"),
    ];
    const RC: &[(&str, &str)] = &[("fault_delay_rate", "delayed by the fault_delay parameter")];
    match transport {
        Transport::Ud => UD,
        Transport::Rc => RC,
    }
}

/// Register the soft provider's fault-injection parameters for `transport` (level dev).
pub fn register_fault_params(p: &mut ParamRegistrar<'_>, transport: Transport) {
    let t = transport.name();
    for (name, what) in fault_rates(transport) {
        p.add(
            Param::string(name, "0")
                .help(&format!("Soft provider fault injection on {t}: probability (a decimal number from 0 to 1, e.g. 0.01) that a packet is {what}. Seeded by the fault_seed parameter"))
                .level(Level::Dev),
        );
    }
    p.add(
        Param::int("fault_delay", 0)
            .range(0, 60_000_000)
            .help(&format!("Soft provider fault injection on {t}: delay in microseconds applied to the packets chosen by fault_delay_rate (if that rate is 0 and this is set, every packet is delayed)"))
            .level(Level::Dev),
    );
    p.add(
        Param::int("fault_seed", 0)
            .range(0, i64::MAX)
            .help("Seed of the fault injection (same seed, same faults; mixed with the rank so ranks differ)")
            .level(Level::Dev),
    );
}

/// Read the fault parameters registered under `prefix` for `transport`; `rank` is mixed into
/// the seed so that ranks do not inject the same pattern.
pub fn fault_from_params(
    params: &ParamStore,
    prefix: &str,
    transport: Transport,
    rank: u32,
) -> Result<FaultConfig, ConfigError> {
    let n = |s: &str| format!("{prefix}_{s}");
    let mut fault = FaultConfig::default();
    for (name, _) in fault_rates(transport) {
        let text = params.get_str(&n(name))?;
        let rate = parse_rate(text).ok_or_else(|| {
            ConfigError::bad(prefix, name, text, "a probability from 0 to 1, e.g. 0.05")
        })?;
        let slot = match *name {
            "fault_drop" => &mut fault.drop,
            "fault_duplicate" => &mut fault.duplicate,
            "fault_reorder" => &mut fault.reorder,
            "fault_corrupt" => &mut fault.corrupt,
            _ => &mut fault.delay_rate,
        };
        *slot = rate;
    }
    fault.delay = Duration::from_micros(params.get_int(&n("fault_delay"))? as u64);
    if !fault.delay.is_zero() && fault.delay_rate == 0.0 {
        fault.delay_rate = 1.0;
    }
    fault.seed = (params.get_int(&n("fault_seed"))? as u64)
        ^ u64::from(rank).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    Ok(fault)
}

/// Faults are injected by the soft provider only: asking for them on rdma is an error naming
/// the parameters, rather than a silent no-op.
pub fn check_faults_supported(
    kind: ProviderKind,
    fault: &FaultConfig,
    prefix: &str,
) -> Result<(), String> {
    if kind == ProviderKind::Rdma && !fault.is_none() {
        return Err(format!(
            "{prefix}_fault_* parameters need the soft provider (set {prefix}_provider = soft)"
        ));
    }
    Ok(())
}

/// Errors of opening a verbs BTL's module; each message starts with the BTL's name.
#[derive(Debug, Error)]
pub enum OpenError {
    /// A parameter is wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A verbs call failed.
    #[error("{btl}: {op}: {source}")]
    Verbs {
        /// The BTL (`btl-rc`, `btl-ud`).
        btl: &'static str,
        /// What was being done.
        op: &'static str,
        /// The verbs error.
        #[source]
        source: rmca_verbs::Error,
    },
    /// The configuration cannot work here.
    #[error("{btl}: {reason}")]
    Unsupported {
        /// The BTL (`btl-rc`, `btl-ud`).
        btl: &'static str,
        /// What does not work, and what would.
        reason: String,
    },
}

impl From<OpenError> for BtlError {
    fn from(e: OpenError) -> Self {
        BtlError::Other(e.to_string())
    }
}

/// For `map_err`: a verbs call of `btl` (`btl-rc`, `btl-ud`) doing `op` failed.
pub fn verbs(btl: &'static str, op: &'static str) -> impl FnOnce(rmca_verbs::Error) -> OpenError {
    move |source| OpenError::Verbs { btl, op, source }
}

#[cfg(test)]
mod tests;
