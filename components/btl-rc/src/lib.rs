//! btl-rc: the InfiniBand reliable-connection BTL (Open MPI's openib / MVAPICH, redone).
//!
//! - **On-demand connections** (\[Wu02\], [`conn`]): no RC QP exists until the first message
//!   to or from a peer. The business card only carries the address of one UD
//!   connection-management QP; the first send creates the QPs and runs a REQ/REP handshake over
//!   it (retransmitted with backoff), then an in-band RTU. Simultaneous attempts resolve to one
//!   connection (the lower rank's request wins). Sends queue FIFO meanwhile; a per-peer
//!   sequence number keeps MPI order across QPs, within a window the receiver's acks open
//!   ([`reorder`]). `btl_rc_connect = static` connects every peer at `add_procs` instead.
//! - **Receive buffers** (\[Sur06\], [`config::ReceiveQueues`]): per-QP receive queues with
//!   credit flow control ([`credits`]; `btl_rc_receive_queues = P,<bufs>,<threshold>`), or one
//!   SRQ for every connection whose low-watermark event grows and reposts the pool
//!   (`S,<initial>,<low>,<grow>,<max>`), or both, Open MPI style, each with its buffer size
//!   (`P,256,32,16:S,65536,256,64,256,4096`: fragments up to 256 bytes on per-peer queues of
//!   small buffers, larger ones on the SRQ; or the reverse order). Each queue class has its
//!   own QPs to a peer, since a QP has one receive queue. The default is Open MPI's layout,
//!   `P,256,16,8:S,65536,32,8,32,1024`: memory flat in the number of peers.
//! - **Adaptive eager RDMA** (\[Sur06\]): after `btl_rc_eager_rdma_threshold` messages from a
//!   peer (for at most `btl_rc_eager_rdma_max_peers` peers) the receiver registers a ring of
//!   `btl_rc_eager_rdma_num` slots and sends its address in-band; the sender RDMA-writes eager
//!   fragments right-aligned into the slots with a footer written last, the receiver polls the
//!   footer of the next slot, and returns consumed slots with eager-credit messages.
//! - **Send-WQE budget and coalescing** (\[Koop07\], [`sendq`]): `btl_rc_send_wqes` data WQEs per
//!   QP; when exhausted, queued small sends to a peer are packed into one buffer, with a
//!   cached-header flag for repeated PML headers. Never for rendezvous data or control.
//! - **Several QPs per peer** (\[Vishnu07\], [`sched`]): binding, round robin, striping and EPC,
//!   using the PML's [`rmca_framework::btl::SendHint`]; stripes are reassembled in order.
//! - **RDMA put/get** with registrations cached in the `rcache` component the framework
//!   selected (`--mca rcache lru`, [`InitContext::create_rcache`]), reference
//!   counted, invalidated and deregistered when the last user (PML request or RDMA operation)
//!   releases them, so freed-and-reallocated memory is never served a stale registration.
//! - Failures (QP errors, unanswered connection requests) surface as
//!   [`rmca_framework::btl::BtlEvents::peer_failed`] and `SendError::PeerFailed` for pml-dr,
//!   which fails over to another BTL. `btl_rc_fault_kill_after = N` (any provider) moves the
//!   QPs to the error state after N data fragments, to exercise exactly that.
//!
//! Providers: `btl_rc_provider = auto | soft | rdma` (rdma needs the crate feature `rdma`).
//!
//! References:
//! - \[Sur06\] S. Sur, M. J. Koop, D. K. Panda: *High-Performance and Scalable MPI over
//!   InfiniBand with Reduced Memory Usage: An In-Depth Performance Analysis*, SC 2006.
//! - \[Koop07\] M. J. Koop, T. Jones, D. K. Panda: *Reducing Connection Memory Requirements
//!   of MPI for InfiniBand Clusters: A Message Coalescing Approach*, CCGrid 2007.
//! - \[Vishnu07\] A. Vishnu, B. Benton, D. K. Panda: *High Performance MPI on IBM 12x
//!   InfiniBand Architecture*, IPDPS 2007 workshops.
//! - \[Wu02\] J. Wu, J. Liu, P. Wyckoff, D. K. Panda: *Impact of On-Demand Connection
//!   Management in MPI over VIA*, IEEE Cluster 2002.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod conn;
pub mod credits;
mod module;
#[allow(unsafe_code)]
mod reg;
pub mod reorder;
pub mod sched;
pub mod sendq;
pub mod wire;

use rmca_framework::btl::{Btl, BtlComponent, BtlError};
use rmca_framework::component::{Component, ComponentMeta, InitContext};
use rmca_framework::params::ParamRegistrar;

pub use config::{
    ConfigError, ConnectMode, ProviderChoice, RcConfig, ReceiveQueue, ReceiveQueues, RecvQueues,
};
pub use module::{RcBtl, RcError};

/// Modex key of btl-rc's business card.
pub const MODEX_KEY: &str = "btl.rc";

/// The btl-rc component.
#[derive(Debug)]
pub struct RcComponent;

/// The component instance registered with the framework.
pub static RC: RcComponent = RcComponent;

rmca_framework::builtin_component!(Btl, RC);

impl Component for RcComponent {
    fn meta(&self) -> ComponentMeta {
        ComponentMeta {
            name: "rc",
            version: env!("CARGO_PKG_VERSION"),
            description: "InfiniBand reliable connections: on-demand connections, per-peer credits or SRQ, adaptive eager RDMA, send-WQE budget with coalescing, multi-QP scheduling, RDMA put/get",
        }
    }

    fn register_params(&self, params: &mut ParamRegistrar<'_>) {
        config::register(params);
    }
}

impl BtlComponent for RcComponent {
    fn init(&self, ctx: &mut InitContext<'_>) -> Result<Vec<Box<dyn Btl>>, BtlError> {
        let cfg = RcConfig::from_params(ctx.params, ctx.job.rank)
            .map_err(|e| BtlError::Other(e.to_string()))?;
        let btl = RcBtl::open(&cfg, ctx.job, ctx.memory, ctx.create_rcache())?;
        ctx.modex_put(MODEX_KEY, &btl.card().to_bytes())
            .map_err(|e| BtlError::Other(format!("btl-rc: publishing the card: {e}")))?;
        Ok(vec![Box::new(btl)])
    }
}
