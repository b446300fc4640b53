//! The btl-shm module: segment setup, peers, the [`Btl`] implementation.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rmca_framework::btl::{
    exclusivity, Btl, BtlAttributes, BtlError, BtlEvents, BtlFlags, BtlTag, CompletionToken,
    MemAccess, MemoryUsage, ModexRead, Registration, RemoteSegment, SendError, SendHint,
};
use rmca_framework::buffer::UserBuf;
use rmca_framework::component::InitContext;
use rmca_framework::memory::MemoryCounter;
use rmca_framework::rank::{ProcInfo, Rank};

use crate::card::{Card, CardRepr};
use crate::coop::{self, Help, Slot, Transfer};
use crate::ring::{self, Consumer, Producer, PushError, RingCorrupt, RingMem, LINE};
use crate::sys::{self, Mapping, SHM_DIR};
use crate::{CmaMode, MODEX_KEY};

/// Settings of a module (from the `btl_shm_*` parameters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmConfig {
    /// Bytes of each ring.
    pub fifo_size: usize,
    /// Largest fragment.
    pub max_send_size: usize,
    /// Eager limit.
    pub eager_limit: usize,
    /// Bytes a rendezvous request carries (header included).
    pub rndv_eager_limit: usize,
    /// Fragment size of a rendezvous copied through the rings (header included).
    pub pipeline_frag_size: usize,
    /// CMA policy.
    pub single_copy: CmaMode,
    /// Smallest message for which the PML should use CMA (`min_rdma_pipeline_size`).
    pub single_copy_min: usize,
    /// Smallest get that both processes copy together (0: the receiver copies alone).
    pub shared_copy_min: usize,
    /// Smallest fragment streamed through a ring (0: none).
    pub stream_min: usize,
    /// Bytes written between two progress stores of a streamed fragment.
    pub stream_chunk: usize,
    /// Latency estimate (ns).
    pub latency_ns: u32,
    /// Bandwidth estimate (Mbit/s).
    pub bandwidth_mbps: u32,
    /// Unlink the segment file once every local peer mapped it (else at finalize).
    pub early_unlink: bool,
    /// Offer streamed fragments to the PML to be written in place as they arrive.
    pub place_in_buffer: bool,
}

/// Default fragment size: 64 KiB of payload plus room for the PML's header (the 64 bytes keep
/// payloads whole multiples of a cache line).
const SHM_FRAGMENT: usize = 64 * 1024 + 64;

impl ShmConfig {
    /// The documented defaults.
    pub const DEFAULT: ShmConfig = ShmConfig {
        fifo_size: 256 * 1024,
        // 64 KiB of payload behind any ob1 header (MATCH 16, RNDV 32, FRAG 20 bytes): a
        // message up to 64 KiB goes in one streamed record, written into the receive buffer
        // as it arrives, with no rendezvous round trip (ping-pong, paired runs here on
        // 2026-11-24: 64 KiB 0.78x the time with a 32 KiB + 64 limit, smaller and larger
        // sizes unchanged; 32 KiB 0.79x the time with a limit of exactly 32 KiB, which sent
        // it as a rendezvous for its last bytes). Rendezvous fragments have their own size,
        // pipeline_frag_size.
        max_send_size: SHM_FRAGMENT,
        eager_limit: SHM_FRAGMENT,
        // A rendezvous asks for its data early and gets it in small fragments, so that the
        // receiver copies one out while the sender writes the next (paired runs here against
        // 32 KiB for both: ping-pong 64 KiB 0.81x, 128 KiB 0.85x, 256 KiB 0.92x, bandwidth
        // unchanged; 8 KiB fragments lost bandwidth).
        rndv_eager_limit: 4 * 1024 + 64,
        pipeline_frag_size: 16 * 1024 + 64,
        single_copy: CmaMode::Auto,
        // Every rendezvous message is offered for a CMA read, and ob1's receiver measures the
        // read against the rings per size class and takes the faster (pml_ob1_adaptive_bulk).
        // A fixed threshold was wrong from one boot to the next on the 2-vCPU VM: with fast
        // cache-line handoffs the rings won below 1 MiB (512 KiB ping-pong 32-33 against
        // 39-43 us), with slow ones a sweep ran the rings at 2 GB/s from 8 to 512 KiB.
        single_copy_min: 0,
        // Sharing halves the ping-pong time of a CMA transfer and raises its bandwidth
        // 1.3-1.5x here; bidirectional traffic, where both cores are busy anyway, is unchanged
        // (see the parameter's help). It applies to every get from single_copy_min up.
        shared_copy_min: 64 * 1024,
        stream_min: ring::STREAM_MIN,
        stream_chunk: ring::STREAM_CHUNK,
        latency_ns: 150,
        bandwidth_mbps: 100_000,
        early_unlink: true,
        place_in_buffer: true,
    };

    /// Check the combination; the error names the parameter and what is valid.
    pub fn validate(&self) -> Result<(), BtlError> {
        if !self.fifo_size.is_power_of_two() || self.fifo_size < 4096 {
            return Err(BtlError::Other(format!(
                "btl_shm_fifo_size = {}: must be a power of two of at least 4096 bytes (e.g. 64K, 256K, 1M)",
                self.fifo_size
            )));
        }
        let max = ring::max_fragment(self.fifo_size / LINE);
        if self.max_send_size > max {
            return Err(BtlError::Other(format!(
                "btl_shm_max_send_size = {}: a ring of btl_shm_fifo_size = {} bytes carries fragments of at most {max} bytes; lower it or raise btl_shm_fifo_size",
                self.max_send_size, self.fifo_size
            )));
        }
        if self.eager_limit > self.max_send_size {
            return Err(BtlError::Other(format!(
                "btl_shm_eager_limit = {}: must not exceed btl_shm_max_send_size = {}",
                self.eager_limit, self.max_send_size
            )));
        }
        Ok(())
    }
}

impl Default for ShmConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Segment header layout (all offsets in bytes from the segment start).
mod layout {
    use super::LINE;
    pub const MAGIC: &[u8; 8] = b"RMCASHM\0";
    pub const VERSION: u32 = 4;
    /// The info block at offset 0: magic (8), version, nrings, lines, rank, pid (u32 LE each).
    pub const INFO_LEN: usize = 28;
    /// Count of peers that mapped the segment (its own line: peers write it once).
    pub const OFF_ATTACHED: usize = 64;
    /// Consumer heads, one per ring, 128 bytes apart so the adjacent-line prefetcher does not
    /// make two rings' heads share traffic.
    pub const HEADS: usize = 128;
    pub const HEAD_STRIDE: usize = 128;
    pub const PAGE: usize = 4096;

    /// The cooperative-copy slots, after the heads.
    pub fn slots(nrings: usize) -> usize {
        (HEADS + nrings * HEAD_STRIDE).next_multiple_of(crate::coop::SLOT_STRIDE)
    }
    pub fn slot(nrings: usize, slot: usize) -> usize {
        slots(nrings) + slot * crate::coop::SLOT_STRIDE
    }
    pub fn header_len(nrings: usize) -> usize {
        (slots(nrings) + crate::coop::SLOTS * crate::coop::SLOT_STRIDE).div_ceil(PAGE) * PAGE
    }
    pub fn seg_len(nrings: usize, lines: usize) -> Option<usize> {
        nrings
            .checked_mul(lines)?
            .checked_mul(LINE)?
            .checked_add(header_len(nrings))
    }
    pub fn head(ring: usize) -> usize {
        HEADS + ring * HEAD_STRIDE
    }
    pub fn data(nrings: usize, lines: usize, ring: usize) -> usize {
        header_len(nrings) + ring * lines * LINE
    }
    pub fn info(nrings: u32, lines: u32, rank: u32, pid: u32) -> Vec<u8> {
        let mut b = Vec::with_capacity(INFO_LEN);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&nrings.to_le_bytes());
        b.extend_from_slice(&lines.to_le_bytes());
        b.extend_from_slice(&rank.to_le_bytes());
        b.extend_from_slice(&pid.to_le_bytes());
        b
    }
}

/// Upper bound on rings per segment (local ranks - 1) accepted from a card.
const MAX_RINGS: u32 = 1 << 16;
/// Ring sizes accepted from a card, in lines.
const MIN_LINES: u32 = 64;
const MAX_LINES: u32 = 1 << 24;
/// Refused sends to one peer between two checks that the peer process still exists.
const DEAD_CHECK_INTERVAL: u32 = 1024;
/// Records delivered per ring per progress call, so one busy sender cannot starve the others.
const POLL_BUDGET: usize = 64;
/// Ring tag of a cooperative-copy help message (btl-internal, never delivered to the PML).
const TAG_HELP: u8 = rmca_framework::btl::tags::BTL_INTERNAL_BASE;
/// Smallest piece of a cooperative copy: below this a system call costs more than it shares.
const MIN_CLAIM: u64 = 32 * 1024;
/// Passes over an unfinished cooperative copy between two checks that the helper still lives.
const HELPER_CHECK_INTERVAL: u32 = 4096;

/// Index of the ring that sender `sender` (local index) uses in receiver `receiver`'s segment.
fn ring_index(sender: usize, receiver: usize) -> usize {
    if sender < receiver {
        sender
    } else {
        sender - 1
    }
}

/// A local peer we send to. Field order matters: the producer (pointing into `mapping`) drops first.
struct Peer {
    producer: Producer,
    pid: i32,
    cma: bool,
    /// Refused sends so far: a ring that stays full may belong to a dead process, which is
    /// checked every [`DEAD_CHECK_INTERVAL`] refusals (a successful send touches nothing).
    refusals: u32,
    watch: sys::ProcessWatch,
    /// The peer's segment: its inbound ring from us, and its cooperative-copy slots.
    mapping: Mapping,
}

/// A ring of our inbox and the peer that writes it.
struct Inbound {
    rank: Rank,
    consumer: Consumer,
    failed: bool,
    /// The streamed record at the head, taken by the PML and copied into place as it arrives.
    placing: Option<Placing>,
}

/// A fragment being written into the PML's buffer as it arrives (see [`BtlEvents::recv_begin`]).
struct Placing {
    dst: UserBuf,
    token: CompletionToken,
    /// Bytes of the record that the PML took from the head (the rest goes to `dst`).
    head: usize,
    /// Bytes of the record handled so far (at least `head`).
    copied: usize,
}

/// Records of at least this many slots (2 KiB) give their space back to the producer as soon
/// as they are consumed; smaller ones at the end of the pass, one head store for many records.
const PUBLISH_EACH_SLOTS: u64 = (2048 / ring::SLOT) as u64;

/// The first bytes of a streamed record the PML is offered only once there are this many (or
/// the whole record): enough for any PML header.
const OFFER_MIN: usize = 64;

#[derive(Debug, Default, Clone, Copy)]
struct Stats {
    frags_sent: u64,
    bytes_sent: u64,
    frags_recv: u64,
    bytes_recv: u64,
    would_block: u64,
    cma_gets: u64,
    cma_get_bytes: u64,
    cma_puts: u64,
    cma_put_bytes: u64,
    cma_errors: u64,
    corrupt_rings: u64,
    shared_gets: u64,
    shared_bytes_helped: u64,
    bad_control: u64,
    /// Streamed records offered to the PML while being written, and those it took.
    offers: u64,
    offers_taken: u64,
    /// Streamed records already whole when first seen: too late to be placed.
    streamed_whole: u64,
}

/// A get shared with the sender (see [`coop`]): in flight until every byte is accounted for.
struct SharedGet {
    slot: u16,
    gen: u32,
    peer: Rank,
    pid: i32,
    local: UserBuf,
    src: u64,
    token: CompletionToken,
    /// Passes that found the copy unfinished since the last check on the helper.
    waits: u32,
    /// Why our own piece failed, if one did.
    error: Option<SendError>,
    /// End of our last piece (`u64::MAX` before the first): if the claims still end there,
    /// the sender is not helping and we take the rest in one piece.
    mine_end: u64,
}

/// The btl-shm module.
pub struct ShmBtl {
    // Rings first: they point into the mappings below and must be dropped before them.
    peers: Vec<Option<Peer>>,
    inbox: Vec<Option<Inbound>>,
    own: Option<Mapping>,
    attrs: BtlAttributes,
    cfg: ShmConfig,
    my_rank: Rank,
    my_node: u32,
    prefix: String,
    local_ranks: Vec<Rank>,
    my_local: usize,
    lines: usize,
    /// The word peers read with CMA to test permission; kept alive (and at a fixed address)
    /// for the module's life since peers probe it during their own add_procs.
    _probe: Box<u64>,
    cma_local: bool,
    pending: Vec<(CompletionToken, Result<(), SendError>)>,
    /// Placements of peers forgotten by `del_procs`, reported as failed at the next progress.
    dropped_placements: Vec<(Rank, CompletionToken)>,
    /// Gets shared with their sender, not finished yet.
    shared: Vec<SharedGet>,
    /// Slots of our segment not in use, and the generation each used last.
    free_slots: Vec<u16>,
    slot_gens: Vec<u32>,
    /// Help messages received this pass, served after the rings are drained.
    help: Vec<(Rank, Help)>,
    attach_expected: u32,
    /// The segment is still linked and waits for every peer to map it (checked in progress).
    unlink_pending: bool,
    stats: Stats,
    memory: Arc<MemoryCounter>,
    charged: usize,
    next_registration: u64,
}

impl std::fmt::Debug for ShmBtl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmBtl")
            .field("rank", &self.my_rank)
            .field("segment", &self.own.as_ref().map(|m| m.path().to_owned()))
            .field("flags", &self.attrs.flags)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

fn random_u64() -> u64 {
    // RandomState is seeded from the OS per process: enough for a probe word that only has to
    // differ from whatever happens to be at the address in another process.
    let mut h = RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish() | 1
}

fn cma_failure(peer: Rank, e: &std::io::Error) -> SendError {
    let why = match e.raw_os_error() {
        Some(libc::ESRCH) => "process is gone".to_owned(),
        Some(libc::EPERM) => "CMA not permitted by the kernel".to_owned(),
        Some(libc::EFAULT) => "address range not mapped in one of the processes".to_owned(),
        _ => e.to_string(),
    };
    SendError::PeerFailed {
        peer,
        reason: format!("process_vm_readv/writev: {why}"),
    }
}

impl ShmBtl {
    /// Create the module: the inbox segment, the probe word, the business card. Returns `None`
    /// when no other rank shares this node (nothing to do).
    pub fn new(ctx: &mut InitContext<'_>, cfg: ShmConfig) -> Result<Option<Self>, BtlError> {
        cfg.validate()?;
        let job = ctx.job;
        let local_ranks = job.local_ranks();
        let Some(my_local) = local_ranks.iter().position(|&r| r == job.rank) else {
            return Err(BtlError::Other(format!(
                "rank {} is not in its own node's rank list",
                job.rank
            )));
        };
        if local_ranks.len() < 2 {
            tracing::info!(
                rank = job.rank,
                "btl shm: no other rank on this node, not used"
            );
            return Ok(None);
        }
        let nrings = local_ranks.len() - 1;
        let lines = cfg.fifo_size / LINE;
        let seg_len = layout::seg_len(nrings, lines).ok_or_else(|| {
            BtlError::Other(format!(
                "btl shm: {nrings} rings of {} bytes overflow",
                cfg.fifo_size
            ))
        })?;
        let prefix = job.shm_prefix();
        let name = format!("{prefix}shm-{}", job.rank);
        let path = PathBuf::from(SHM_DIR).join(&name);
        let mut own =
            Mapping::create(&path, seg_len).map_err(|(op, source)| BtlError::Io { op, source })?;
        own.write_at(
            0,
            &layout::info(nrings as u32, lines as u32, job.rank, std::process::id()),
        );
        let memory = ctx.memory.counter("btl.shm");
        memory.alloc(seg_len);

        let probe = Box::new(random_u64());
        let probe_addr = &*probe as *const u64 as u64;
        let cma_local = match cfg.single_copy {
            CmaMode::Off => false,
            CmaMode::Auto | CmaMode::Require => {
                sys::allow_ptrace_by_any();
                // Reading ourselves catches kernels without CMA and seccomp filters; peer
                // permissions (Yama, capabilities) are probed in add_procs.
                match sys::cma_read_word(sys::pid(), probe_addr) {
                    Ok(v) if v == *probe => true,
                    Ok(_) => false,
                    Err(e) if cfg.single_copy == CmaMode::Require => {
                        memory.free(seg_len);
                        return Err(BtlError::Io {
                            op: "btl_shm_single_copy=require: process_vm_readv".into(),
                            source: e,
                        });
                    }
                    Err(e) => {
                        tracing::info!(error = %e, "btl shm: process_vm_readv unavailable, large transfers by copy");
                        false
                    }
                }
            }
        };
        let card = CardRepr {
            cma: cma_local,
            pid: std::process::id(),
            rank: job.rank,
            nrings: nrings as u32,
            ring_lines: lines as u32,
            probe_addr,
            probe_value: *probe,
            seg_len: seg_len as u64,
            name,
        };
        if let Err(e) = ctx.modex_put(MODEX_KEY, &card.emit()) {
            memory.free(seg_len);
            return Err(BtlError::Other(format!(
                "btl shm: publishing the business card: {e}"
            )));
        }
        let mut flags = BtlFlags::SEND;
        if cma_local {
            flags |= BtlFlags::GET | BtlFlags::PUT;
        }
        let attrs = BtlAttributes {
            eager_limit: cfg.eager_limit,
            // Both default above a lowered max_send_size: they are "at most" sizes.
            rndv_eager_limit: cfg.rndv_eager_limit.min(cfg.max_send_size),
            max_send_size: cfg.max_send_size,
            pipeline_frag_size: cfg.pipeline_frag_size.min(cfg.max_send_size),
            exclusivity: exclusivity::SHARED_MEMORY,
            min_rdma_pipeline_size: cfg.single_copy_min,
            latency_ns: cfg.latency_ns,
            bandwidth_mbps: cfg.bandwidth_mbps,
            flags,
            ..BtlAttributes::default()
        };
        tracing::debug!(path = %path.display(), seg_len, nrings, cma_local, "btl shm: segment created");
        let mut inbox = Vec::new();
        inbox.resize_with(nrings, || None);
        let mut peers = Vec::new();
        peers.resize_with(job.size as usize, || None);
        Ok(Some(Self {
            peers,
            inbox,
            own: Some(own),
            attrs,
            cfg,
            my_rank: job.rank,
            my_node: job.node_of[job.rank as usize],
            prefix,
            local_ranks,
            my_local,
            lines,
            _probe: probe,
            cma_local,
            pending: Vec::new(),
            dropped_placements: Vec::new(),
            shared: Vec::new(),
            free_slots: (0..coop::SLOTS as u16).rev().collect(),
            slot_gens: vec![0; coop::SLOTS],
            help: Vec::new(),
            attach_expected: nrings as u32,
            unlink_pending: cfg.early_unlink,
            stats: Stats::default(),
            memory,
            charged: seg_len,
            next_registration: 1,
        }))
    }

    /// Path of this process's segment file (also after it was unlinked).
    pub fn segment_path(&self) -> Option<PathBuf> {
        self.own.as_ref().map(|m| m.path().to_owned())
    }

    /// Whether the segment file is still in the file system.
    pub fn segment_linked(&self) -> bool {
        self.own.as_ref().is_some_and(Mapping::is_linked)
    }

    /// Take the help messages waiting in our inbox and claim one piece of each without ever
    /// copying or finishing it: a helper that dies in the middle of its copy. Returns the
    /// pieces claimed.
    #[cfg(test)]
    pub(crate) fn stall_helping_for_test(&mut self, events: &mut dyn BtlEvents) -> usize {
        for inb in self.inbox.iter_mut().flatten() {
            Self::drain(inb, false, &mut self.stats, &mut self.help, events);
        }
        let nrings = self.inbox.len();
        let mut claimed = 0;
        for (rank, h) in self.help.drain(..) {
            let p = self.peers[rank as usize]
                .as_ref()
                .expect("a connected peer");
            let slot = Slot::new(
                p.mapping
                    .slot_words(layout::slot(nrings, usize::from(h.slot))),
            );
            claimed += usize::from(slot.claim(h.gen, MIN_CLAIM, u64::MAX).is_some());
        }
        claimed
    }

    /// Overwrite bytes of our inbox ring `ring` at `offset` (tests of corruption handling).
    #[cfg(test)]
    pub(crate) fn scribble_inbox_for_test(&mut self, ring: usize, offset: usize, bytes: &[u8]) {
        let nrings = self.inbox.len();
        let at = layout::data(nrings, self.lines, ring) + offset;
        self.own
            .as_mut()
            .expect("not finalized")
            .write_at(at, bytes);
    }

    fn bad(rank: Rank, reason: impl Into<String>) -> BtlError {
        BtlError::BadCard {
            rank,
            reason: reason.into(),
        }
    }

    /// Map `proc`'s inbox and set up both directions. `Ok(None)` = not reachable (no card).
    fn connect(
        &mut self,
        proc: &ProcInfo,
        modex: &dyn ModexRead,
    ) -> Result<Option<(Peer, Inbound)>, BtlError> {
        let rank = proc.rank;
        let Some(bytes) = modex
            .get(rank, MODEX_KEY)
            .map_err(|e| BtlError::Other(format!("btl shm: modex: {e}")))?
        else {
            tracing::info!(
                peer = rank,
                "btl shm: local peer published no shm card (shm disabled there?)"
            );
            return Ok(None);
        };
        let card = Card::new_checked(&bytes[..]).map_err(|e| Self::bad(rank, e.to_string()))?;
        let card =
            CardRepr::parse(&card, &self.prefix).map_err(|e| Self::bad(rank, e.to_string()))?;
        if card.rank != rank {
            return Err(Self::bad(rank, format!("card says rank {}", card.rank)));
        }
        let Some(peer_local) = self.local_ranks.iter().position(|&r| r == rank) else {
            return Err(Self::bad(rank, "peer is not on this node"));
        };
        let nrings = self.local_ranks.len() as u32 - 1;
        if card.nrings != nrings || card.nrings > MAX_RINGS {
            return Err(Self::bad(
                rank,
                format!(
                    "{} rings, this node has {} other ranks",
                    card.nrings, nrings
                ),
            ));
        }
        if !card.ring_lines.is_power_of_two() || !(MIN_LINES..=MAX_LINES).contains(&card.ring_lines)
        {
            return Err(Self::bad(
                rank,
                format!(
                    "ring of {} lines; valid: a power of two in {MIN_LINES}..={MAX_LINES}",
                    card.ring_lines
                ),
            ));
        }
        let peer_lines = card.ring_lines as usize;
        let seg_len = layout::seg_len(nrings as usize, peer_lines)
            .ok_or_else(|| Self::bad(rank, "segment size overflows"))?;
        if card.seg_len != seg_len as u64 {
            return Err(Self::bad(
                rank,
                format!("segment of {} bytes, layout needs {seg_len}", card.seg_len),
            ));
        }
        if ring::max_fragment(peer_lines) < self.cfg.max_send_size {
            return Err(Self::bad(
                rank,
                format!(
                    "its rings ({} bytes) cannot carry our btl_shm_max_send_size of {} bytes; set btl_shm_fifo_size alike on every rank",
                    peer_lines * LINE,
                    self.cfg.max_send_size
                ),
            ));
        }
        if card.pid == 0 || card.pid > i32::MAX as u32 {
            return Err(Self::bad(rank, format!("pid {}", card.pid)));
        }
        let path = PathBuf::from(SHM_DIR).join(&card.name);
        let mapping =
            Mapping::open(&path, seg_len).map_err(|(op, source)| BtlError::Io { op, source })?;
        let expect = layout::info(nrings, card.ring_lines, rank, card.pid);
        if mapping.read_at(0, layout::INFO_LEN) != expect {
            return Err(Self::bad(
                rank,
                format!("segment {} does not match the card", path.display()),
            ));
        }
        let ring = ring_index(self.my_local, peer_local);
        // The mapping lives in `Peer` next to the producer and is dropped after it; we are the
        // only producer of this ring (one ring per sender, one shm module per rank).
        let mem = ring_in(&mapping, nrings as usize, peer_lines, ring)
            .ok_or_else(|| Self::bad(rank, "ring misaligned"))?;
        let mut producer = Producer::new(mem, self.cfg.max_send_size);
        let stream_min = match self.cfg.stream_min {
            0 => usize::MAX,
            n => n,
        };
        producer.set_streaming(stream_min, self.cfg.stream_chunk);
        mapping
            .atomic_u32(layout::OFF_ATTACHED)
            .fetch_add(1, Ordering::AcqRel);

        let own = self
            .own
            .as_ref()
            .ok_or_else(|| BtlError::Other("btl shm: used after finalize".into()))?;
        let in_ring = ring_index(peer_local, self.my_local);
        let in_mem = ring_in(own, nrings as usize, self.lines, in_ring)
            .ok_or_else(|| BtlError::Other("btl shm: own ring misaligned".into()))?;
        let consumer = Consumer::new(in_mem, ring::max_fragment(self.lines));

        let mut cma = false;
        if self.cma_local && card.cma {
            match sys::cma_read_word(card.pid as i32, card.probe_addr) {
                Ok(v) if v == card.probe_value => cma = true,
                Ok(v) => tracing::warn!(
                    peer = rank,
                    got = v,
                    "btl shm: CMA probe read a wrong value"
                ),
                Err(e) => {
                    tracing::info!(peer = rank, error = %e, "btl shm: CMA to peer not permitted")
                }
            }
        }
        Ok(Some((
            Peer {
                producer,
                pid: card.pid as i32,
                cma,
                refusals: 0,
                watch: sys::ProcessWatch::new(card.pid as i32),
                mapping,
            },
            Inbound {
                rank,
                consumer,
                failed: false,
                placing: None,
            },
        )))
    }

    /// Deliver the records waiting in one inbound ring, up to [`POLL_BUDGET`] and for as long
    /// as the PML wants more: once the operation it is blocked on completed, looking for
    /// another record would read the control word the producer zeroed when it published the
    /// last one, a miss on the peer's cache line whenever the ring is empty, between a
    /// message's arrival and its completion (8 B ping-pong latency -22% measured here
    /// without it). A rank waiting for many messages still takes a ring's records in one go.
    #[inline]
    fn drain(
        inb: &mut Inbound,
        offer: bool,
        stats: &mut Stats,
        help: &mut Vec<(Rank, Help)>,
        events: &mut dyn BtlEvents,
    ) -> usize {
        let rank = inb.rank;
        let mut n = 0;
        let mut bytes = 0;
        let mut bad_control = 0;
        loop {
            if inb.placing.is_some() {
                match Self::place(inb, events) {
                    Ok(Some(len)) => {
                        bytes += len;
                        n += 1;
                        // A placed record is a long one: give its space back now (see below).
                        inb.consumer.publish();
                        if n == POLL_BUDGET || !events.wants_more() {
                            break;
                        }
                        continue;
                    }
                    Ok(None) => break,
                    Err(e) => {
                        Self::abandon(inb, stats, events, &e);
                        break;
                    }
                }
            }
            let rec = match inb.consumer.peek() {
                Ok(Some(rec)) => rec,
                Ok(None) => {
                    if offer && inb.consumer.has_partial() {
                        Self::offer(inb, stats, events);
                    }
                    break;
                }
                Err(e) => {
                    Self::abandon(inb, stats, events, &e);
                    break;
                }
            };
            let (tag, slots) = (rec.tag, rec.slots);
            stats.streamed_whole += u64::from(rec.whole_streamed);
            if tag < TAG_HELP {
                bytes += rec.bytes.len();
                events.recv(rank, tag, rec.bytes);
            } else if !Self::control(rank, tag, rec.bytes, help) {
                bad_control += 1;
            }
            inb.consumer.advance(slots);
            if slots >= PUBLISH_EACH_SLOTS {
                // The producer may be waiting for this space: holding it while we copy the
                // next records out would make the sender wait for all of them, and the two
                // copies would run one after the other instead of side by side.
                inb.consumer.publish();
            }
            n += 1;
            if n == POLL_BUDGET || !events.wants_more() {
                break;
            }
        }
        if n > 0 {
            inb.consumer.publish();
            stats.frags_recv += n as u64;
            stats.bytes_recv += bytes as u64;
            stats.bad_control += bad_control;
        }
        n
    }

    /// The ring of `inb` holds something no correct peer writes: give the peer up.
    #[cold]
    fn abandon(inb: &mut Inbound, stats: &mut Stats, events: &mut dyn BtlEvents, e: &RingCorrupt) {
        let rank = inb.rank;
        inb.failed = true;
        stats.corrupt_rings += 1;
        tracing::error!(peer = rank, error = %e, "btl shm: corrupt ring, peer abandoned");
        if let Some(pl) = inb.placing.take() {
            let reason = format!("btl shm: {e}");
            events.recv_placed(pl.token, Err(SendError::PeerFailed { peer: rank, reason }));
        }
        events.peer_failed(rank, &format!("btl shm: {e}"));
    }

    /// The head of `inb` is a streamed record still being written: offer it to the PML, which
    /// may take it and have the rest written straight into its buffer (see
    /// [`BtlEvents::recv_begin`]), so that our copy overlaps the sender's writing.
    #[inline(never)]
    fn offer(inb: &mut Inbound, stats: &mut Stats, events: &mut dyn BtlEvents) {
        let Ok(Some(p)) = inb.consumer.partial() else {
            return; // (an error shows again at the next peek)
        };
        if p.written.len() < OFFER_MIN.min(p.len) {
            return;
        }
        if p.tag < TAG_HELP {
            stats.offers += 1;
            if let Some(pl) = events.recv_begin(inb.rank, p.tag, p.written, p.len) {
                stats.offers_taken += 1;
                let head = p.written.len();
                inb.placing = Some(Placing {
                    dst: pl.dst,
                    token: pl.token,
                    head,
                    copied: head,
                });
            }
        }
        inb.consumer.set_offered();
    }

    /// Copy what arrived of the record being placed. Returns its length once it is whole (and
    /// reported with [`BtlEvents::recv_placed`]).
    #[inline(never)]
    fn place(inb: &mut Inbound, events: &mut dyn BtlEvents) -> Result<Option<usize>, RingCorrupt> {
        let Some(pl) = inb.placing.as_mut() else {
            return Ok(None);
        };
        let Some(p) = inb.consumer.partial()? else {
            return Err(RingCorrupt {
                slot: inb.consumer.position(),
                reason: "the record being placed is no longer there".into(),
            });
        };
        let written = p.written.len();
        let (from, to) = (pl.copied, written.min(pl.head + pl.dst.len()));
        if from < to {
            pl.dst.write_at(from - pl.head, &p.written[from..to]);
        }
        pl.copied = pl.copied.max(written);
        if written < p.len {
            return Ok(None);
        }
        let placed = p.len.saturating_sub(pl.head).min(pl.dst.len());
        let (token, slots, len) = (pl.token, p.slots, p.len);
        inb.placing = None;
        inb.consumer.advance(slots);
        events.recv_placed(token, Ok(placed));
        Ok(Some(len))
    }

    /// A btl-internal record from `rank`. Returns false (and logs) if it is not one we know.
    #[cold]
    fn control(rank: Rank, tag: u8, data: &[u8], help: &mut Vec<(Rank, Help)>) -> bool {
        if tag != TAG_HELP {
            tracing::warn!(peer = rank, tag, "btl shm: unknown control record ignored");
            return false;
        }
        match Help::parse(data) {
            Ok(h) => {
                help.push((rank, h));
                true
            }
            Err(e) => {
                tracing::warn!(peer = rank, error = %e, "btl shm: bad help message ignored");
                false
            }
        }
    }

    /// Completions of CMA transfers and the segment's early unlink (the rare work of a pass).
    #[inline(never)]
    fn housekeeping(&mut self, events: &mut dyn BtlEvents) -> usize {
        if !self.shared.is_empty() {
            self.advance_shared();
        }
        let mut delivered = 0;
        for (token, result) in self.pending.drain(..) {
            events.rdma_complete(token, result);
            delivered += 1;
        }
        for (peer, token) in self.dropped_placements.drain(..) {
            let reason = "btl shm: peer removed".to_owned();
            events.recv_placed(token, Err(SendError::PeerFailed { peer, reason }));
            delivered += 1;
        }
        if self.unlink_pending {
            self.check_early_unlink();
        }
        delivered
    }

    /// Start a get that the sender may help with (see [`coop`]): publish it in `slot`, tell
    /// the sender, copy our first piece (half the message) now and the rest in progress.
    fn start_shared(
        &mut self,
        peer: Rank,
        pid: i32,
        slot: u16,
        local: UserBuf,
        src: u64,
        token: CompletionToken,
    ) -> Result<(), SendError> {
        let nrings = self.inbox.len();
        let Some(own) = self.own.as_ref() else {
            self.free_slots.push(slot);
            return Err(SendError::Unreachable(peer));
        };
        let gen = &mut self.slot_gens[usize::from(slot)];
        *gen = gen.wrapping_add(1) & coop::GEN_MASK;
        if *gen == 0 {
            *gen = 1;
        }
        let gen = *gen;
        let words = Slot::new(own.slot_words(layout::slot(nrings, usize::from(slot))));
        words.publish(
            gen,
            Transfer {
                len: local.len() as u64,
                dst: local.addr() as u64,
                src,
            },
        );
        if let Some(p) = self.peers.get_mut(peer as usize).and_then(Option::as_mut) {
            // A full ring only means the sender will not help: we copy it all then.
            let _ = p.producer.push(TAG_HELP, &Help { slot, gen }.emit(), &[]);
        }
        let mut g = SharedGet {
            slot,
            gen,
            peer,
            pid,
            local,
            src,
            token,
            waits: 0,
            error: None,
            mine_end: u64::MAX,
        };
        Self::copy_pieces(&words, &mut g, 1, &mut self.stats);
        self.stats.shared_gets += 1;
        self.shared.push(g);
        Ok(())
    }

    /// Receiver: claim and read up to `max_pieces` pieces of `g`.
    fn copy_pieces(slot: &Slot<'_>, g: &mut SharedGet, max_pieces: usize, stats: &mut Stats) {
        for _ in 0..max_pieces {
            let Some((piece, _)) = slot.claim(g.gen, MIN_CLAIM, g.mine_end) else {
                return;
            };
            g.mine_end = piece.offset + piece.len;
            let local = g.local.slice(piece.offset as usize, piece.len as usize);
            match sys::cma_get(g.pid, &local, g.src.wrapping_add(piece.offset)) {
                Ok(()) => slot.finish(piece, true),
                Err(e) => {
                    stats.cma_errors += 1;
                    slot.finish(piece, false);
                    slot.abandon(g.gen);
                    g.error.get_or_insert_with(|| cma_failure(g.peer, &e));
                    return;
                }
            }
        }
    }

    /// Receiver: copy what is left of the shared gets and complete those fully accounted for.
    fn advance_shared(&mut self) {
        let nrings = self.inbox.len();
        let Some(own) = self.own.as_ref() else {
            return;
        };
        let mut i = 0;
        while i < self.shared.len() {
            let g = &mut self.shared[i];
            let slot = Slot::new(own.slot_words(layout::slot(nrings, usize::from(g.slot))));
            Self::copy_pieces(&slot, g, usize::MAX, &mut self.stats);
            let result = match slot.outcome() {
                Some(true) => Ok(()),
                Some(false) => Err(g.error.take().unwrap_or_else(|| SendError::PeerFailed {
                    peer: g.peer,
                    reason: "cooperative copy: the sender could not write its part \
                             (process_vm_writev failed)"
                        .into(),
                })),
                None => {
                    // The sender holds a piece. Only a dead sender never finishes one.
                    g.waits = g.waits.wrapping_add(1);
                    let gone = g.waits.is_multiple_of(HELPER_CHECK_INTERVAL)
                        && self
                            .peers
                            .get(g.peer as usize)
                            .and_then(Option::as_ref)
                            .is_none_or(|p| p.watch.exited());
                    if !gone {
                        i += 1;
                        continue;
                    }
                    Err(SendError::PeerFailed {
                        peer: g.peer,
                        reason: "process exited during a cooperative copy".into(),
                    })
                }
            };
            let g = self.shared.swap_remove(i);
            // After a dead helper the slot's count never completes; the next publish resets it
            // and nobody is left to touch the old generation.
            self.free_slots.push(g.slot);
            if result.is_ok() {
                self.stats.cma_gets += 1;
                self.stats.cma_get_bytes += g.local.len() as u64;
            }
            self.pending.push((g.token, result));
        }
    }

    /// Sender: copy pieces of the gets that receivers asked us to help with. Not while gets
    /// of our own are shared (both sides of a bidirectional exchange are busy copying, and
    /// helping would only split the same work into more system calls): the requests wait,
    /// and the receivers take what we leave.
    #[inline(never)]
    fn serve_help(&mut self) {
        if !self.shared.is_empty() {
            return;
        }
        let nrings = self.inbox.len();
        for i in 0..self.help.len() {
            let (rank, h) = self.help[i];
            let Some(p) = self.peers.get(rank as usize).and_then(Option::as_ref) else {
                continue;
            };
            if !p.cma {
                continue;
            }
            let slot = Slot::new(
                p.mapping
                    .slot_words(layout::slot(nrings, usize::from(h.slot))),
            );
            while let Some((piece, t)) = slot.claim(h.gen, MIN_CLAIM, u64::MAX) {
                let r = sys::cma_write_own(
                    p.pid,
                    t.src.wrapping_add(piece.offset),
                    t.dst.wrapping_add(piece.offset),
                    piece.len as usize,
                );
                slot.finish(piece, r.is_ok());
                match r {
                    Ok(()) => self.stats.shared_bytes_helped += piece.len,
                    Err(e) => {
                        self.stats.cma_errors += 1;
                        tracing::debug!(peer = rank, error = %e, "btl shm: helping a get failed");
                        break;
                    }
                }
            }
        }
        self.help.clear();
    }

    fn check_early_unlink(&mut self) {
        if !self.cfg.early_unlink {
            self.unlink_pending = false;
            return;
        }
        if let Some(own) = &mut self.own {
            if own.is_linked()
                && own.atomic_u32(layout::OFF_ATTACHED).load(Ordering::Acquire)
                    >= self.attach_expected
            {
                // Every local peer holds a mapping: the name is no longer needed, and removing it
                // now means a crash cannot leak the segment.
                own.unlink();
            }
            self.unlink_pending = own.is_linked();
        } else {
            self.unlink_pending = false;
        }
    }

    /// A push was refused: back-pressure, or a fragment that can never fit.
    #[inline(never)]
    fn refused(p: &mut Peer, stats: &mut Stats, peer: Rank, e: PushError) -> Result<(), SendError> {
        match e {
            PushError::Full => {
                stats.would_block += 1;
                p.refusals = p.refusals.wrapping_add(1);
                // A dead receiver never drains its ring: check now and then, off the fast path.
                if p.refusals.is_multiple_of(DEAD_CHECK_INTERVAL) && p.watch.exited() {
                    return Err(SendError::PeerFailed {
                        peer,
                        reason: format!("process {} exited", p.pid),
                    });
                }
                Err(SendError::WouldBlock)
            }
            PushError::TooLarge { len, max } => Err(SendError::TooLarge { len, max }),
        }
    }

    fn peer_for_rdma(&self, peer: Rank, op: &'static str) -> Result<&Peer, SendError> {
        if !self.attrs.flags.contains(BtlFlags::GET) {
            return Err(SendError::Unsupported(op));
        }
        let p = self
            .peers
            .get(peer as usize)
            .and_then(Option::as_ref)
            .ok_or(SendError::Unreachable(peer))?;
        if !p.cma {
            return Err(SendError::Unsupported(op));
        }
        Ok(p)
    }

    fn check_key(&self, peer: Rank, pid: i32, remote: &RemoteSegment) -> Result<(), SendError> {
        if remote.remote_key.is_empty() {
            return Ok(());
        }
        let key: Option<[u8; 8]> = remote.remote_key.as_slice().try_into().ok();
        let Some(key) = key else {
            return Err(SendError::PeerFailed {
                peer,
                reason: format!(
                    "remote key of {} bytes, expected 8",
                    remote.remote_key.len()
                ),
            });
        };
        let kpid = i32::from_le_bytes(key[..4].try_into().expect("4 bytes"));
        if kpid != pid {
            return Err(SendError::PeerFailed {
                peer,
                reason: format!("remote key of pid {kpid}, peer is pid {pid}"),
            });
        }
        Ok(())
    }
}

/// The [`RingMem`] of ring `ring` inside `mapping`.
fn ring_in(mapping: &Mapping, nrings: usize, lines: usize, ring: usize) -> Option<RingMem> {
    if ring >= nrings || layout::head(ring) + 8 > layout::header_len(nrings) {
        return None;
    }
    mapping.ring(layout::head(ring), layout::data(nrings, lines, ring), lines)
}

impl Btl for ShmBtl {
    fn component_name(&self) -> &str {
        "shm"
    }

    fn attributes(&self) -> &BtlAttributes {
        &self.attrs
    }

    fn add_procs(
        &mut self,
        procs: &[ProcInfo],
        modex: &dyn ModexRead,
    ) -> Result<Vec<bool>, BtlError> {
        let mut reach = Vec::with_capacity(procs.len());
        for proc in procs {
            if proc.is_self || proc.rank == self.my_rank || proc.node != self.my_node {
                reach.push(false);
                continue;
            }
            if (proc.rank as usize) < self.peers.len() && self.peers[proc.rank as usize].is_some() {
                reach.push(true);
                continue;
            }
            match self.connect(proc, modex)? {
                Some((peer, inbound)) => {
                    let in_ring = ring_index(
                        self.local_ranks
                            .iter()
                            .position(|&r| r == proc.rank)
                            .expect("checked in connect"),
                        self.my_local,
                    );
                    if proc.rank as usize >= self.peers.len() {
                        self.peers.resize_with(proc.rank as usize + 1, || None);
                    }
                    self.peers[proc.rank as usize] = Some(peer);
                    self.inbox[in_ring] = Some(inbound);
                    reach.push(true);
                }
                None => reach.push(false),
            }
        }
        let reachable: Vec<&Peer> = self.peers.iter().flatten().collect();
        if self.attrs.flags.contains(BtlFlags::GET) && reachable.iter().any(|p| !p.cma) {
            if self.cfg.single_copy == CmaMode::Require {
                return Err(BtlError::Other(
                    "btl_shm_single_copy=require but process_vm_readv to a local peer is not permitted \
                     (check /proc/sys/kernel/yama/ptrace_scope and seccomp)"
                        .into(),
                ));
            }
            tracing::info!(
                "btl shm: CMA not permitted with every local peer; large transfers by copy"
            );
            self.attrs.flags.remove(BtlFlags::GET | BtlFlags::PUT);
        }
        self.check_early_unlink();
        Ok(reach)
    }

    fn del_procs(&mut self, ranks: &[Rank]) {
        for &r in ranks {
            if let Some(slot) = self.peers.get_mut(r as usize) {
                *slot = None;
            }
            for slot in &mut self.inbox {
                if slot.as_ref().is_some_and(|i| i.rank == r) {
                    if let Some(pl) = slot.take().and_then(|i| i.placing) {
                        self.dropped_placements.push((r, pl.token));
                    }
                }
            }
        }
    }

    #[inline]
    fn send(
        &mut self,
        peer: Rank,
        tag: BtlTag,
        header: &[u8],
        payload: &[u8],
        _hint: SendHint,
    ) -> Result<(), SendError> {
        let Some(p) = self.peers.get_mut(peer as usize).and_then(Option::as_mut) else {
            return Err(SendError::Unreachable(peer));
        };
        // The ring checks the length against btl_shm_max_send_size (its limit).
        match p.producer.push(tag, header, payload) {
            Ok(()) => {
                self.stats.frags_sent += 1;
                self.stats.bytes_sent += (header.len() + payload.len()) as u64;
                Ok(())
            }
            Err(e) => Self::refused(p, &mut self.stats, peer, e),
        }
    }

    fn register_mem(&mut self, buf: UserBuf, _access: MemAccess) -> Result<Registration, BtlError> {
        // CMA needs no registration: the key only names the process, so a get can check that the
        // address belongs to the peer it is sent to.
        let _ = buf;
        let handle = self.next_registration;
        self.next_registration += 1;
        let mut key = Vec::with_capacity(8);
        key.extend_from_slice(&(std::process::id() as i32).to_le_bytes());
        key.extend_from_slice(&self.my_rank.to_le_bytes());
        Ok(Registration {
            handle,
            remote_key: key,
        })
    }

    fn get(
        &mut self,
        peer: Rank,
        local: UserBuf,
        remote: &RemoteSegment,
        token: CompletionToken,
    ) -> Result<(), SendError> {
        let p = self.peer_for_rdma(peer, "get")?;
        let pid = p.pid;
        self.check_key(peer, pid, remote)?;
        if !local.is_writable() {
            return Err(SendError::Unsupported("get into a read-only buffer"));
        }
        if local.len() > remote.len {
            return Err(SendError::TooLarge {
                len: local.len(),
                max: remote.len,
            });
        }
        if self.cfg.shared_copy_min > 0
            && local.len() >= self.cfg.shared_copy_min
            && local.len() as u64 <= coop::MAX_LEN
        {
            // Out of slots (many large gets in flight), the receiver copies alone.
            if let Some(slot) = self.free_slots.pop() {
                return self.start_shared(peer, pid, slot, local, remote.addr, token);
            }
        }
        let result = sys::cma_get(pid, &local, remote.addr);
        let result = result.map_err(|e| {
            self.stats.cma_errors += 1;
            cma_failure(peer, &e)
        });
        if result.is_ok() {
            self.stats.cma_gets += 1;
            self.stats.cma_get_bytes += local.len() as u64;
        }
        self.pending.push((token, result));
        Ok(())
    }

    fn put(
        &mut self,
        peer: Rank,
        local: UserBuf,
        remote: &RemoteSegment,
        token: CompletionToken,
    ) -> Result<(), SendError> {
        let p = self.peer_for_rdma(peer, "put")?;
        let pid = p.pid;
        self.check_key(peer, pid, remote)?;
        if local.len() > remote.len {
            return Err(SendError::TooLarge {
                len: local.len(),
                max: remote.len,
            });
        }
        let result = sys::cma_put(pid, &local, remote.addr);
        let result = result.map_err(|e| {
            self.stats.cma_errors += 1;
            cma_failure(peer, &e)
        });
        if result.is_ok() {
            self.stats.cma_puts += 1;
            self.stats.cma_put_bytes += local.len() as u64;
        }
        self.pending.push((token, result));
        Ok(())
    }

    #[inline]
    fn progress(&mut self, events: &mut dyn BtlEvents) -> usize {
        // Runs on every pass of every wait loop: an idle pass is one load per inbound ring.
        let mut delivered = 0;
        if !self.pending.is_empty()
            || self.unlink_pending
            || !self.shared.is_empty()
            || !self.dropped_placements.is_empty()
        {
            delivered += self.housekeeping(events);
        }
        let offer = self.cfg.place_in_buffer;
        for inb in self.inbox.iter_mut().flatten() {
            if inb.consumer.ready() && !inb.failed {
                delivered += Self::drain(inb, offer, &mut self.stats, &mut self.help, events);
            }
        }
        if !self.help.is_empty() {
            self.serve_help();
        }
        delivered
    }

    fn memory_usage(&self) -> MemoryUsage {
        let current = if self.own.is_some() { self.charged } else { 0 };
        MemoryUsage {
            current,
            peak: self.charged,
        }
    }

    fn counters(&self) -> Vec<(String, u64)> {
        let s = &self.stats;
        [
            ("frags_sent", s.frags_sent),
            ("bytes_sent", s.bytes_sent),
            ("frags_recv", s.frags_recv),
            ("bytes_recv", s.bytes_recv),
            ("would_block", s.would_block),
            ("cma_gets", s.cma_gets),
            ("cma_get_bytes", s.cma_get_bytes),
            ("cma_puts", s.cma_puts),
            ("cma_put_bytes", s.cma_put_bytes),
            ("cma_errors", s.cma_errors),
            ("corrupt_rings", s.corrupt_rings),
            ("shared_gets", s.shared_gets),
            ("shared_bytes_helped", s.shared_bytes_helped),
            ("bad_control", s.bad_control),
            ("offers", s.offers),
            ("offers_taken", s.offers_taken),
            ("streamed_whole", s.streamed_whole),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    fn finalize(&mut self) {
        self.shared.clear();
        self.help.clear();
        self.inbox.clear();
        self.peers.clear();
        if let Some(own) = self.own.take() {
            drop(own); // unlinks (if not yet) and unmaps
            self.memory.free(self.charged);
        }
    }
}

impl Drop for ShmBtl {
    fn drop(&mut self) {
        self.finalize();
    }
}
