//! pml-ob1: the default PML: MPI matching and ordering, eager and rendezvous protocols.
//!
//! Open MPI's ob1, rebuilt over rmca's BML:
//! - matching per communicator with per-sender ordering, posted and unexpected queues and
//!   wildcards, through the framework's shared engine ([`rmca_framework::matching`]);
//! - messages up to the eager BTL's eager limit travel in one MATCH fragment;
//! - larger ones send a rendezvous: RGET (the receiver reads the sender's registered buffer
//!   with BTL GETs, split over the RDMA routes, then sends FIN) when a GET-capable route
//!   exists, else RNDV with the first bytes, then an ACK from the receiver and a pipeline of
//!   FRAG copies over the send routes, split by bandwidth weight;
//! - multi-rail scheduling policies (`pml_ob1_scheduling`: binding, round robin, striping and
//!   EPC, after Vishnu, Benton and Panda, *High Performance MPI on IBM 12x InfiniBand
//!   Architecture*, 2007) decide which routes a message uses;
//! - back-pressure (`WouldBlock`) queues work inside the PML, never drops it; a peer with no
//!   route left fails its requests with [`rmca_framework::pml::StatusError::PeerFailed`].
//!
//! Wire headers are in [`hdr`]; the engine in [`engine`]; the fuzz target's body in [`fuzz`].
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod bulk;
pub mod engine;
pub mod fuzz;
pub mod hdr;
pub mod sched;

use rmca_framework::bml::Bml;
use rmca_framework::btl::BtlFlags;
use rmca_framework::component::{Component, ComponentMeta, InitContext};
use rmca_framework::params::{Level, Param, ParamRegistrar, ParamStore};
use rmca_framework::pml::{Pml, PmlComponent, PmlError};
use rmca_framework::rank::Rank;

pub use engine::Ob1;
pub use sched::Scheduling;

/// Tunables of an [`Ob1`] instance (the `pml_ob1_*` parameters).
#[derive(Clone, Debug, PartialEq)]
pub struct Ob1Config {
    /// Multi-rail scheduling policy.
    pub scheduling: Scheduling,
    /// Messages up to this length are never striped.
    pub stripe_threshold: usize,
    /// FRAGs one request pushes per progress pass.
    pub send_pipeline_depth: usize,
    /// Gets one receive keeps outstanding.
    pub recv_pipeline_depth: usize,
    /// Most BTLs one message is striped over (and RGET registrations).
    pub max_rdma_per_request: usize,
    /// Offer RGET (receiver-driven reads) when a GET-capable route exists.
    pub use_rget: bool,
    /// When a sender offers RGET, the receiver measures reads and the copy pipeline per size
    /// class and takes the faster ([`bulk::BulkChooser`]); off: it always reads.
    pub adaptive_bulk: bool,
    /// Use BTLs that need acknowledgements or checksums (NEED_ACK / NEED_CSUM) anyway:
    /// a lost fragment is then never recovered (for measuring the cost of reliability).
    pub unreliable_btls: bool,
}

impl Default for Ob1Config {
    fn default() -> Self {
        Self {
            scheduling: Scheduling::Striping,
            stripe_threshold: 16 * 1024,
            send_pipeline_depth: 3,
            recv_pipeline_depth: 4,
            max_rdma_per_request: 4,
            use_rget: true,
            adaptive_bulk: true,
            unreliable_btls: false,
        }
    }
}

impl Ob1Config {
    /// Read the `pml_ob1_*` parameters.
    pub fn from_params(params: &ParamStore) -> Result<Self, PmlError> {
        let e = |x: rmca_framework::params::ParamError| PmlError::Init(x.to_string());
        let int = |n: &str| -> Result<usize, PmlError> {
            let v = params.get_int(n).map_err(e)?;
            usize::try_from(v).map_err(|_| PmlError::Init(format!("{n}={v} must be positive")))
        };
        Ok(Self {
            scheduling: params
                .get_str("pml_ob1_scheduling")
                .map_err(e)?
                .parse()
                .map_err(PmlError::Init)?,
            stripe_threshold: usize::try_from(
                params.get_size("pml_ob1_stripe_threshold").map_err(e)?,
            )
            .unwrap_or(usize::MAX),
            send_pipeline_depth: int("pml_ob1_send_pipeline_depth")?.max(1),
            recv_pipeline_depth: int("pml_ob1_recv_pipeline_depth")?.max(1),
            max_rdma_per_request: int("pml_ob1_max_rdma_per_request")?.max(1),
            use_rget: params.get_bool("pml_ob1_use_rget").map_err(e)?,
            adaptive_bulk: params.get_bool("pml_ob1_adaptive_bulk").map_err(e)?,
            unreliable_btls: params.get_bool("pml_ob1_unreliable_btls").map_err(e)?,
        })
    }
}

/// ob1 has no acknowledgements or checksums of its own: refuse BTLs that need them (they
/// would lose or corrupt messages silently, and a lost fragment is a hang) with an error that
/// says what to select instead.
pub fn check_reliable(bml: &Bml) -> Result<(), PmlError> {
    match unreliable_btl_in_use(bml) {
        None => Ok(()),
        Some(name) => Err(PmlError::Init(format!(
            "btl {name} delivers unreliably (it needs acknowledgements/checksums from the PML), \
             which pml ob1 does not provide: select pml dr (--mca pml dr) or exclude the btl \
             (--mca btl ^{name}); to measure ob1 over it anyway, accepting that a lost fragment \
             hangs the job, set pml_ob1_unreliable_btls 1"
        ))),
    }
}

/// Where a peer is reached both by BTLs that deliver reliably and by ones that need
/// acknowledgements (e.g. rc and ud between nodes), drop the latter from its routes: ob1 can
/// use the peer safely, and a job that opened every network BTL still runs on ob1. Peers
/// reached only unreliably keep their routes, for [`check_reliable`] to refuse.
pub fn prefer_reliable_routes(bml: &mut Bml) {
    let unsafe_flags = BtlFlags::NEED_ACK | BtlFlags::NEED_CSUM;
    let unreliable: Vec<bool> = (0..bml.btl_count())
        .map(|b| bml.btl_ref(b).attributes().flags.intersects(unsafe_flags))
        .collect();
    for peer in 0..bml.peer_count() as Rank {
        let r = bml.routes(peer);
        let used: Vec<usize> = r
            .eager
            .iter()
            .chain(&r.send)
            .chain(&r.rdma)
            .map(|x| x.btl)
            .collect();
        if !used.iter().any(|&b| !unreliable[b]) {
            continue;
        }
        for b in used.into_iter().filter(|&b| unreliable[b]) {
            tracing::debug!(
                peer,
                btl = bml.btl_ref(b).component_name(),
                "ob1: a reliable BTL reaches this peer; the unreliable one is not used for it"
            );
            bml.remove_route(peer, b);
        }
    }
}

/// The component name of the first BTL that routes some traffic and needs acknowledgements
/// or checksums (NEED_ACK / NEED_CSUM), if any.
pub fn unreliable_btl_in_use(bml: &Bml) -> Option<String> {
    let unsafe_flags = BtlFlags::NEED_ACK | BtlFlags::NEED_CSUM;
    for b in 0..bml.btl_count() {
        let btl = bml.btl_ref(b);
        if !btl.attributes().flags.intersects(unsafe_flags) {
            continue;
        }
        let used = (0..bml.peer_count() as Rank).any(|p| {
            let r = bml.routes(p);
            r.eager
                .iter()
                .chain(&r.send)
                .chain(&r.rdma)
                .any(|x| x.btl == b)
        });
        if used {
            return Some(btl.component_name().to_owned());
        }
    }
    None
}

/// The ob1 component.
#[derive(Debug, Default)]
pub struct Ob1Component;

/// The component instance registered with the framework.
pub static OB1: Ob1Component = Ob1Component;

rmca_framework::builtin_component!(Pml, OB1);

/// Default selection priority (above dr's, so ob1 is the default PML).
pub const DEFAULT_PRIORITY: i64 = 20;

impl Component for Ob1Component {
    fn meta(&self) -> ComponentMeta {
        ComponentMeta {
            name: "ob1",
            version: env!("CARGO_PKG_VERSION"),
            description:
                "MPI matching, eager and rendezvous (RGET / copy pipeline) over several BTLs",
        }
    }

    fn register_params(&self, params: &mut ParamRegistrar<'_>) {
        let d = Ob1Config::default();
        params.add(
            Param::int("priority", DEFAULT_PRIORITY)
                .range(0, 100)
                .help("Selection priority of pml ob1 (highest allowed PML wins).")
                .level(Level::Tuning),
        );
        params.add(
            Param::enumeration("scheduling", d.scheduling.name(), &Scheduling::NAMES)
                .help("How messages use several BTLs to one peer: binding = always the best BTL; round_robin = whole messages rotate over the BTLs; striping = messages above pml_ob1_stripe_threshold are split over the BTLs by bandwidth; epc = striping for blocking and collective traffic, round robin for non-blocking traffic.")
                .level(Level::Tuning),
        );
        params.add(
            Param::size("stripe_threshold", d.stripe_threshold as u64)
                .help("Messages up to this many bytes are never striped over several BTLs.")
                .level(Level::Tuning),
        );
        params.add(
            Param::int("send_pipeline_depth", d.send_pipeline_depth as i64)
                .range(1, 1 << 20)
                .help(
                    "FRAG fragments one rendezvous send pushes per progress pass (copy pipeline).",
                )
                .level(Level::Tuning),
        );
        params.add(
            Param::int("recv_pipeline_depth", d.recv_pipeline_depth as i64)
                .range(1, 1 << 20)
                .help("RDMA gets one receive keeps outstanding.")
                .level(Level::Tuning),
        );
        params.add(
            Param::int("max_rdma_per_request", d.max_rdma_per_request as i64)
                .range(1, 255)
                .help("Most BTLs a single message is striped over.")
                .level(Level::Tuning),
        );
        params.add(
            Param::bool("unreliable_btls", d.unreliable_btls)
                .help("Let ob1 use BTLs that need acknowledgements or checksums from the PML (NEED_ACK / NEED_CSUM, e.g. btl ud), which it refuses by default. ob1 does not acknowledge, retransmit or checksum: a lost fragment is never recovered (the job hangs) and a corrupted one is delivered. Only for measuring the cost of reliability (ob1+ud against dr+ud) on a loss-free fabric; use pml dr otherwise.")
                .level(Level::Dev),
        );
        params.add(
            Param::bool("adaptive_bulk", d.adaptive_bulk)
                .help("When a sender offers a large message for reading (RGET), the receiver measures, per power-of-two size class, the time per byte of reading it (e.g. CMA) and of having it sent through the copy pipeline (e.g. shm's rings), and takes the faster, in runs of 16 messages that go the same way (one run in 16 goes the other way). Which one wins moves with the machine (cache-line transfer times, load); a fixed threshold measured once does not. Off: the receiver always reads what is offered (the BTL's threshold, e.g. btl_shm_single_copy_min, then decides alone).")
                .level(Level::Tuning),
        );
        params.add(Param::bool("use_rget", d.use_rget).help("Use receiver-driven RDMA reads (RGET) for large messages when a BTL offers GET; otherwise the copy pipeline.").level(Level::Tuning));
    }
}

impl PmlComponent for Ob1Component {
    fn priority(&self, params: &ParamStore) -> i32 {
        params
            .get_int("pml_ob1_priority")
            .map(|p| p as i32)
            .unwrap_or(DEFAULT_PRIORITY as i32)
    }

    fn init(&self, ctx: &mut InitContext<'_>, mut bml: Bml) -> Result<Box<dyn Pml>, PmlError> {
        let cfg = Ob1Config::from_params(ctx.params)?;
        if !cfg.unreliable_btls {
            prefer_reliable_routes(&mut bml);
            check_reliable(&bml)?;
        } else if let Some(name) = unreliable_btl_in_use(&bml) {
            tracing::warn!(
                btl = %name,
                "pml_ob1_unreliable_btls: ob1 uses btl {name}, which needs acknowledgements; \
                 a lost fragment will not be recovered (the job hangs) and a corrupted one is delivered"
            );
        }
        tracing::debug!(?cfg, "pml ob1 init");
        let memory = ctx.memory.counter("pml.ob1");
        let profile = ctx.params.get_bool("profile").unwrap_or(false);
        Ok(Box::new(
            Ob1::new(bml, cfg)
                .with_memory(memory)
                .with_traffic_counters(profile),
        ))
    }
}
