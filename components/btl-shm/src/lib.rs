//! btl-shm: shared memory between the processes of a node.
//!
//! Every process creates one *inbox* segment, `/dev/shm/<job.shm_prefix()>shm-<rank>` (created
//! with `O_CREAT|O_EXCL`, mode 0600), holding one lock-free single-producer/single-consumer ring
//! per other local rank (see [`ring`] for the design and why SPSC). It publishes the segment's
//! name, its pid and a CMA probe word in its business card; in `add_procs` every process maps
//! the inboxes of its local peers, checks the card against the segment header, and probes
//! whether `process_vm_readv` on the peer is permitted. Once every local peer has mapped a
//! segment its owner unlinks the file (the mappings live on), so a crash after startup leaves
//! nothing behind; before that point the launcher removes `rmca-<job>-*` files, and if the
//! launcher itself dies, each process removes its own (the segment is registered with
//! [`rmca_rte::lifeline`] before it is created).
//!
//! Fragments up to `max_send_size` are copied straight from the caller's header and payload into
//! the ring (no intermediate copy) and delivered to the receiver in place. Fragments of 4 KiB
//! and more are streamed: the receiver sees them while they are written and, when the PML
//! takes one early (`BtlEvents::recv_begin`), copies each chunk into the PML's buffer as it
//! arrives, so that the sender's and the receiver's copies overlap. Transfers from 1 MiB use
//! CMA single copy (`get`/`put`), advertised as
//! [`BtlFlags::GET`](rmca_framework::btl::BtlFlags::GET)/`PUT` only when the probe succeeded
//! with every peer, so the PML falls back to copy-in/copy-out otherwise.
//! A large get is shared between the two processes ([`coop`]): the receiver reads half while
//! the sender, otherwise idle until the FIN, writes pieces of the rest when it polls.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod card;
pub mod coop;
mod module;
pub mod ring;
pub mod sys;
#[cfg(test)]
mod tests;
pub mod tune;
pub mod wake;

use rmca_framework::btl::{Btl, BtlComponent, BtlError};
use rmca_framework::component::{Component, ComponentMeta, InitContext};
use rmca_framework::params::{Level, Param, ParamRegistrar, ParamStore};

pub use module::{ShmBtl, ShmConfig};

/// Key of the business card in the modex.
pub const MODEX_KEY: &str = "btl.shm";

/// The btl-shm component.
#[derive(Debug, Default)]
pub struct ShmComponent;

/// The component instance registered with the framework.
pub static SHM: ShmComponent = ShmComponent;

rmca_framework::builtin_component!(Btl, SHM);

/// What to do about single-copy (CMA) transfers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmaMode {
    /// Use CMA when every local peer can be read; otherwise copy-in/copy-out.
    Auto,
    /// Never use CMA.
    Off,
    /// Fail initialisation when CMA is not permitted.
    Require,
}

/// How a sender writes the payloads of streamed records into a ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMode {
    /// Whichever of the two is faster, chosen record by record from the sender's copy times
    /// ([`tune::StoreChooser`]), starting with the faster at init between two of the node's
    /// CPUs (through the cache when that measurement failed).
    Auto,
    /// Through the sender's cache (ordinary stores).
    Cached,
    /// Non-temporal stores, to memory ([`ring::copy_nontemporal`] says when that wins).
    Nontemporal,
}

impl Component for ShmComponent {
    fn meta(&self) -> ComponentMeta {
        ComponentMeta {
            name: "shm",
            version: env!("CARGO_PKG_VERSION"),
            description: "shared-memory rings between the ranks of a node, CMA single copy for large transfers",
        }
    }

    fn register_params(&self, params: &mut ParamRegistrar<'_>) {
        params.add(
            Param::size("fifo_size", ShmConfig::DEFAULT.fifo_size as u64)
                .range(4096, 1 << 30)
                .help(
                    "Bytes of each receive ring (one per local sender, in the receiver's segment); a \
                     power of two holding at least two max_send_size fragments. Large enough for \
                     a window of medium messages (64 of 8 KiB in osu_bw), so the sender need not \
                     wait for space; small messages use only its first short_span bytes while \
                     the receiver keeps up.",
                )
                .level(Level::Tuning),
        );
        params.add(
            Param::size("max_send_size", ShmConfig::DEFAULT.max_send_size as u64)
                .range(64, 1 << 29)
                .help("Largest fragment (PML header + payload) sent through a ring.")
                .level(Level::Tuning),
        );
        params.add(
            Param::size("eager_limit", ShmConfig::DEFAULT.eager_limit as u64)
                .range(64, 1 << 29)
                .help("Largest message sent eagerly (no rendezvous); at most max_send_size.")
                .level(Level::Tuning),
        );
        params.add(
            Param::size(
                "rndv_eager_limit",
                ShmConfig::DEFAULT.rndv_eager_limit as u64,
            )
            .range(64, 1 << 29)
            .help(
                "Bytes (PML header included) a rendezvous request carries through the rings \
                     before the receiver asks for the rest; at most max_send_size.",
            )
            .level(Level::Tuning),
        );
        params.add(
            Param::size(
                "pipeline_frag_size",
                ShmConfig::DEFAULT.pipeline_frag_size as u64,
            )
            .range(64, 1 << 29)
            .help(
                "Fragment size (PML header included) of a rendezvous message copied through \
                     the rings (at most max_send_size): the receiver copies one fragment out while \
                     the sender writes the next.",
            )
            .level(Level::Tuning),
        );
        params.add(
            Param::enumeration("single_copy", "auto", &["auto", "off", "require"])
                .help(
                    "Cross-memory attach (process_vm_readv/writev) for large transfers: 'auto' uses it \
                     when the kernel permits it with every local peer, 'off' never, 'require' fails \
                     when it is not permitted.",
                )
                .level(Level::Tuning),
        );
        params.add(
            Param::enumeration("stream_stores", "auto", &["auto", "cached", "nontemporal"])
                .help(
                    "How a sender writes the payload of a streamed fragment (see stream_min) into \
                     a ring: 'cached' with ordinary stores, 'nontemporal' with stores that go to \
                     memory past the sender's cache (x86-64; elsewhere ordinary ones), 'auto' \
                     the faster of the two, chosen as it goes from the sender's copy times (one \
                     32-64 KiB record in 8 timed, the cache retried every 25 ms while \
                     non-temporal; records under 8 KiB always cached), starting from blocks moved \
                     both ways between two CPUs at init. When \
                     the two cores share a cache, lines move between them fastest through it; \
                     when they do not (on a VM, as the host moves the vCPUs), each ring line the \
                     receiver read last must first be taken back from its cache, and writing to \
                     memory instead is 2-4x faster (counters btl.shm.nontemporal_records, \
                     store_switches, nontemporal_at_start and measured_*_mbps).",
                )
                .level(Level::Tuning),
        );
        params.add(
            Param::size("single_copy_min", ShmConfig::DEFAULT.single_copy_min as u64)
                .help(
                    "Messages shorter than this go through the rings (streamed copy-in/copy-out) \
                     even when CMA works (the BTL's min_rdma_pipeline_size). 0 (the default): \
                     every rendezvous message is offered for a CMA read, and ob1's receiver \
                     measures reads against the rings per size class and takes the faster \
                     (pml_ob1_adaptive_bulk), since which one wins moves with the machine \
                     (the time to move a cache line between cores differs between machines, \
                     and between boots of one virtual machine). A fixed threshold: set this \
                     and pml_ob1_adaptive_bulk=0. Compare with rmca-bench latency,bw \
                     --conf adaptive=pml=ob1 --conf cma=pml_ob1_adaptive_bulk=0 \
                     --conf rings=btl_shm_single_copy_min=1G.",
                )
                .level(Level::Tuning),
        );
        params.add(
            Param::size("shared_copy_min", ShmConfig::DEFAULT.shared_copy_min as u64)
                .help(
                    "Single-copy transfers of at least this many bytes are copied by both \
                     processes at once: the receiver reads half, and the sender, which would \
                     otherwise only wait, writes pieces of the rest when it next polls (the \
                     receiver takes whatever the sender has not), so two cores share the copy. \
                     It shortens ping-pong and one-way bandwidth transfers, not bidirectional \
                     ones, where each rank is busy with gets of its own. \
                     0: the receiver copies alone, like Open MPI's vader.",
                )
                .level(Level::Tuning),
        );
        params.add(
            Param::size("stream_min", ShmConfig::DEFAULT.stream_min as u64)
                .help(
                    "Fragments of at least this many bytes are streamed through the ring: the \
                     sender publishes the record first and then its bytes chunk by chunk, and the \
                     receiver pulls what is written into its cache while the rest is being \
                     written, so the two copies overlap. 0: never.",
                )
                .level(Level::Tuning),
        );
        params.add(
            Param::size("stream_chunk", ShmConfig::DEFAULT.stream_chunk as u64)
                .range(0, 1 << 30)
                .help(
                    "Bytes of a streamed fragment written between two progress marks (a rest \
                     under a quarter of it joins the last chunk). Each mark moves a cache line \
                     between the cores, which costs as much as copying a few KiB: smaller \
                     chunks overlap the two copies more but pay more handoffs. 0 (the \
                     default): measured at init, since the handoff's cost moves with the \
                     machine (between boots of one virtual machine too): the first local \
                     rank of a job times a cache-line handoff between two of its CPUs and a \
                     16 KiB copy (a few milliseconds; the others read its figures), and a \
                     record of L bytes goes in chunks of about sqrt(L x handoff x copy rate), \
                     a power of two from 16K to 64K; 16K when the process may run on one CPU \
                     only or the node is too busy to measure (counter \
                     btl.shm.cost_measurement_failed). The measured figures are the counters \
                     btl.shm.measured_handoff_ns and measured_copy_mbps.",
                )
                .level(Level::Dev),
        );
        params.add(
            Param::size("publish_batch", ShmConfig::DEFAULT.publish_batch as u64)
                .help(
                    "Bytes of read ring space the receiver gives back to the sender at once while \
                     more records wait (at most a quarter of the ring; all of it whenever the \
                     ring is found empty or the PML has what it waited for). Each give-back \
                     moves a cache line to a sender polling a full ring: larger batches save \
                     those handoffs (64K: 1.2-1.5x the 4-16 KiB bandwidth with 512K rings when \
                     handoffs were slow) but let the sender wait longer (0.8x at 4 KiB with 256K \
                     rings when they were fast). 0: after every record.",
                )
                .level(Level::Dev),
        );
        params.add(
            Param::size("short_span", ShmConfig::DEFAULT.short_span as u64)
                .help(
                    "Bytes at the start of each ring that small records (one cache line: \
                     messages of up to 40 bytes behind ob1's header) run through while the \
                     receiver keeps up: once the sender is this far into the ring and the \
                     receiver less than half of it behind, the next such record goes back to \
                     the ring's start. Small messages are faster in a few KiB of ring that \
                     stay in the two cores' caches, longer records in a large ring (see \
                     btl_shm_fifo_size); a sender ahead of its receiver still gets the whole \
                     ring (counters btl.shm.early_wraps and long_laps). 0: the whole ring.",
                )
                .level(Level::Tuning),
        );
        params.add(
            Param::size("prefault", ShmConfig::DEFAULT.prefault as u64)
                .help(
                    "Bytes of ring memory each process faults in when it connects to its local \
                     peers, over all the rings it writes and reads (an equal share each, at \
                     most the whole ring, at least its short_span). A page of a ring not \
                     faulted in then faults in both processes the first time a record reaches \
                     it, while the peer waits: the first lap of records longer than a cache \
                     line (OSU's 64 B sizes) ran at 0.6x the later ones. The default covers \
                     whole rings up to 16 local peers at the default fifo_size; more pages \
                     resident in exchange for no faults on the way (counter \
                     btl.shm.prefaulted_bytes).",
                )
                .level(Level::Tuning),
        );
        params.add(
            Param::int("latency", i64::from(ShmConfig::DEFAULT.latency_ns))
                .range(1, 1_000_000)
                .help("Estimated one-way latency in nanoseconds, used by the BML to order BTLs.")
                .level(Level::Dev),
        );
        params.add(
            Param::int("bandwidth", i64::from(ShmConfig::DEFAULT.bandwidth_mbps))
                .range(1, 10_000_000)
                .help("Estimated bandwidth in Mbit/s, used by the BML to weigh BTLs.")
                .level(Level::Dev),
        );
        params.add(
            Param::bool("place_in_buffer", ShmConfig::DEFAULT.place_in_buffer)
                .help(
                    "Offer a streamed fragment to the PML while it is still being written: when \
                     the PML knows where it goes (an eager message for a posted receive, a \
                     rendezvous fragment), its bytes are copied there as they arrive instead of \
                     once it is whole. 0 delivers every fragment whole.",
                )
                .level(Level::Tuning),
        );
        params.add(
            Param::bool("early_unlink", ShmConfig::DEFAULT.early_unlink)
                .help(
                    "Unlink each segment file as soon as every local peer has mapped it, so a crash \
                     after startup leaves nothing in /dev/shm. 0 keeps the files until finalize \
                     (to inspect them, or to test the launcher's cleanup after a crash).",
                )
                .level(Level::Dev),
        );
    }
}

impl ShmConfig {
    /// Read and check the `btl_shm_*` parameters.
    pub fn from_params(params: &ParamStore) -> Result<Self, BtlError> {
        let get = |n: &str| {
            params
                .get_size(&format!("btl_shm_{n}"))
                .map_err(|e| BtlError::Other(e.to_string()))
        };
        let geti = |n: &str| {
            params
                .get_int(&format!("btl_shm_{n}"))
                .map_err(|e| BtlError::Other(e.to_string()))
        };
        let mode = match params
            .get_str("btl_shm_single_copy")
            .map_err(|e| BtlError::Other(e.to_string()))?
        {
            "off" => CmaMode::Off,
            "require" => CmaMode::Require,
            _ => CmaMode::Auto,
        };
        let stream_stores = match params
            .get_str("btl_shm_stream_stores")
            .map_err(|e| BtlError::Other(e.to_string()))?
        {
            "cached" => StoreMode::Cached,
            "nontemporal" => StoreMode::Nontemporal,
            _ => StoreMode::Auto,
        };
        let cfg = ShmConfig {
            fifo_size: usize::try_from(get("fifo_size")?).unwrap_or(usize::MAX),
            max_send_size: usize::try_from(get("max_send_size")?).unwrap_or(usize::MAX),
            eager_limit: usize::try_from(get("eager_limit")?).unwrap_or(usize::MAX),
            rndv_eager_limit: usize::try_from(get("rndv_eager_limit")?).unwrap_or(usize::MAX),
            pipeline_frag_size: usize::try_from(get("pipeline_frag_size")?).unwrap_or(usize::MAX),
            single_copy: mode,
            single_copy_min: usize::try_from(get("single_copy_min")?).unwrap_or(usize::MAX),
            shared_copy_min: usize::try_from(get("shared_copy_min")?).unwrap_or(usize::MAX),
            stream_min: usize::try_from(get("stream_min")?).unwrap_or(usize::MAX),
            stream_chunk: usize::try_from(get("stream_chunk")?).unwrap_or(usize::MAX),
            stream_stores,
            publish_batch: usize::try_from(get("publish_batch")?).unwrap_or(usize::MAX),
            short_span: usize::try_from(get("short_span")?).unwrap_or(usize::MAX),
            prefault: usize::try_from(get("prefault")?).unwrap_or(usize::MAX),
            latency_ns: u32::try_from(geti("latency")?).unwrap_or(u32::MAX),
            bandwidth_mbps: u32::try_from(geti("bandwidth")?).unwrap_or(u32::MAX),
            place_in_buffer: params
                .get_bool("btl_shm_place_in_buffer")
                .map_err(|e| BtlError::Other(e.to_string()))?,
            early_unlink: params
                .get_bool("btl_shm_early_unlink")
                .map_err(|e| BtlError::Other(e.to_string()))?,
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

impl BtlComponent for ShmComponent {
    fn init(&self, ctx: &mut InitContext<'_>) -> Result<Vec<Box<dyn Btl>>, BtlError> {
        let cfg = ShmConfig::from_params(ctx.params)?;
        match ShmBtl::new(ctx, cfg)? {
            Some(btl) => Ok(vec![Box::new(btl)]),
            None => Ok(vec![]),
        }
    }
}
