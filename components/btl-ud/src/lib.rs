//! btl-ud: the InfiniBand unreliable-datagram BTL (Open MPI's ofud, redone after the UD design of
//! Friedley, Hoefler, Leininger and Lumsdaine, \[Friedley07\] in the README's references).
//!
//! Connectionless: one UD receive QP and `btl_ud_send_qps` send QPs used round-robin, address
//! handles built from the peers' business cards at `add_procs`, no handshake in the send path.
//! A receive pool of `btl_ud_recv_buffers` buffers (GRH + MTU each) from the mpool framework,
//! each slab registered once, reposted per completion batch. Only `btl_ud_recv_buffers_initial`
//! of them (and no send buffers) exist at open; the rest and the send pool are allocated once
//! the module carries traffic (the BML routes a peer over it, or a datagram is sent or
//! delivered), so a one-node job whose peers all go over shm never pays for them. Every
//! datagram is one fragment: a 4-byte header ([`header`]) then the PML's bytes, at most the UD
//! MTU, so eager limit = max send size = MTU - 4. The MTU is the device's (on the soft provider:
//! what one packet on the interface of `btl_ud_if_addr` carries, so datagrams are never
//! IP-fragmented), or `btl_ud_mtu` when smaller (a larger value is lowered, with a warning).
//! Each card carries the MTU; `add_procs` lowers the fragment size to the smallest MTU of the
//! peers, as a HCA's path MTU is the smaller of both ports'.
//! Small datagrams go inline. When every send queue is full a fragment is copied into a FIFO
//! and posted from `progress`; it is never dropped (past `btl_ud_pending_max`, `send` says
//! `WouldBlock` and takes nothing). The sender's rank travels in the immediate data and is
//! checked against the source QP; foreign, truncated, wrong-job or unknown-source datagrams are
//! dropped and counted, never delivered. UD may lose, duplicate or reorder datagrams: the
//! module advertises `NEED_ACK | NEED_CSUM` and leaves reliability to the PML (pml-dr).
//!
//! Providers: `btl_ud_provider = auto | soft | rdma` (rdma needs the crate feature `rdma`,
//! e.g. Soft-RoCE in the CI guest; rxe reserves the 40-byte GRH, uses GID 0 and MTU 1024).
//! The soft provider can inject faults (`btl_ud_fault_*`: drop, duplicate, reorder, delay,
//! corrupt, seeded by `btl_ud_fault_seed`). On every provider, `btl_ud_fault_blackhole_after`
//! N kills the path after N fragments sent by this process ([`fault`]), for failover tests.
//!
//! Counters ([`rmca_framework::btl::Btl::counters`]): `frags_sent/received`, `bytes_*`,
//! `inline_sends`, `recv_buffers_total/posted`, `recv_posts`, `drops_truncated`,
//! `drops_foreign`, `drops_wrong_job`, `drops_unknown_source`, `drops_completion_error`,
//! the soft provider's `drops_no_recv_posted`, `drops_provider_{foreign,malformed,mtu}` and
//! `drops_provider_send_mtu` (datagrams the kernel refused for a path MTU that shrank),
//! `send_errors`, `sends_refused`, `sends_outstanding`, `pending_now`, `pending_max_depth`,
//! `pending_total`, `cq_errors`, the injected `faults_*` and `faults_blackholed`.
//!
//! Tests: `cargo test -p rmca-btl-ud` (soft provider); on Soft-RoCE,
//! `scripts/vm-tests.sh btl-ud` runs the same integration tests on the rdma provider
//! (`RMCA_BTL_UD_TEST_PROVIDER=rdma`). Latency against raw UDP: `cargo run --release -p
//! rmca-btl-ud --example ud_pingpong`.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod card;
pub mod config;
pub mod fault;
pub mod header;
mod module;
pub mod recv;
#[allow(unsafe_code)]
mod reg;
pub mod sched;

use rmca_framework::btl::{Btl, BtlComponent, BtlError};
use rmca_framework::component::{Component, ComponentMeta, InitContext};
use rmca_framework::params::ParamRegistrar;

pub use config::{ConfigError, ProviderChoice, UdConfig};
pub use module::{UdBtl, UdError};

/// Modex key of btl-ud's business card.
pub const MODEX_KEY: &str = "btl.ud";

/// The btl-ud component.
#[derive(Debug)]
pub struct UdComponent;

/// The component instance registered with the framework.
pub static UD: UdComponent = UdComponent;

rmca_framework::builtin_component!(Btl, UD);

impl Component for UdComponent {
    fn meta(&self) -> ComponentMeta {
        ComponentMeta {
            name: "ud",
            version: env!("CARGO_PKG_VERSION"),
            description: "InfiniBand unreliable datagrams: 1 receive QP, round-robin send QPs, static receive pool, MTU-sized fragments (needs an acknowledging PML such as dr)",
        }
    }

    fn register_params(&self, params: &mut ParamRegistrar<'_>) {
        config::register(params);
    }
}

impl BtlComponent for UdComponent {
    fn init(&self, ctx: &mut InitContext<'_>) -> Result<Vec<Box<dyn Btl>>, BtlError> {
        let cfg = UdConfig::from_params(ctx.params, ctx.job.rank)
            .map_err(|e| BtlError::Other(e.to_string()))?;
        let btl = UdBtl::open(&cfg, ctx.job, ctx.memory)?;
        ctx.modex_put(MODEX_KEY, &btl.card().to_bytes())
            .map_err(|e| BtlError::Other(format!("btl-ud: publishing the card: {e}")))?;
        Ok(vec![Box::new(btl)])
    }
}
