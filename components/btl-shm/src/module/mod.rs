//! The btl-shm module: segment setup, peers, the [`Btl`] implementation.

use std::sync::Arc;

use rmca_framework::btl::{
    Btl, BtlAttributes, BtlError, BtlEvents, BtlFlags, BtlTag, CompletionToken, MemAccess,
    MemoryUsage, ModexRead, Registration, RemoteSegment, SendError, SendHint,
};
use rmca_framework::buffer::UserBuf;
use rmca_framework::memory::MemoryCounter;
use rmca_framework::rank::{ProcInfo, Rank};
use rmca_framework::wire;

use crate::coop::{self, Help};
use crate::ring::{self, Producer, PushError, LINE};
use crate::sys::{self, Mapping};
use crate::{CmaMode, StoreMode};

mod inbound;
mod segment;
mod shared_get;

use inbound::Inbound;
#[cfg(test)]
pub(crate) use segment::prefault_share;
use shared_get::SharedGet;

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
    /// How streamed payloads are written into a ring.
    pub stream_stores: StoreMode,
    /// Latency estimate (ns).
    pub latency_ns: u32,
    /// Bandwidth estimate (Mbit/s).
    pub bandwidth_mbps: u32,
    /// Unlink the segment file once every local peer mapped it (else at finalize).
    pub early_unlink: bool,
    /// Offer streamed fragments to the PML to be written in place as they arrive.
    pub place_in_buffer: bool,
    /// Bytes of read ring space given back to the sender at once while records wait.
    pub publish_batch: usize,
    /// Bytes of a ring that records run through while the receiver keeps up (0: all of it).
    pub short_span: usize,
    /// Bytes of ring memory a process faults in when it connects to its local peers, over all
    /// the rings it maps (each ring gets an equal share, at most all of it, at least its
    /// short span).
    pub prefault: usize,
}

/// Default fragment size: 128 KiB of payload plus room for the PML's header (the 64 bytes keep
/// payloads whole multiples of a cache line).
const SHM_FRAGMENT: usize = 128 * 1024 + 64;

impl ShmConfig {
    /// The documented defaults.
    pub const DEFAULT: ShmConfig = ShmConfig {
        // 512 KiB: a window of 64 messages of 4-8 KiB (OSU's osu_bw) fits, so the sender
        // never waits for space (same run, 2026-11-28, load ~12: 4-16 KiB bandwidth 1.6-1.8x
        // that of 256 KiB rings; UCX's shared-memory FIFO holds 256 such messages). Larger
        // rings alone made 8-byte ping-pong 1.09x the time (their laps bring every line from
        // L3); small records now go round the ring's first short_span bytes instead.
        fifo_size: 512 * 1024,
        // 128 KiB of payload behind any ob1 header (MATCH 16, RNDV 32, FRAG 20 bytes): a
        // message up to 128 KiB goes in one streamed record, written into the receive buffer
        // as it arrives, with no rendezvous round trip. 64 KiB against 32 KiB + 64 (paired
        // runs, 2026-11-24): 64 KiB ping-pong 0.78x the time, 32 KiB 0.79x against exactly
        // 32 KiB. 128 KiB against 64 KiB + 64 (2026-11-28, alternating jobs, in the mood
        // where the cores share a cache): 128 KiB ping-pong 7.5-8.5 against 13.4-14.6 us
        // (UCX 10.1-10.3 in the same minutes), 128 KiB bandwidth unchanged (6.5-12 against
        // 6.1-10.7 GB/s), 256 KiB unchanged. Rendezvous fragments have their own size,
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
        // Measured at init (see `crate::tune`); a size here fixes it.
        stream_chunk: 0,
        // Measured at init, like the chunk: which one wins depends on whether the two cores
        // share a cache, which moves between boots (and periods) of the VM.
        stream_stores: StoreMode::Auto,
        latency_ns: 150,
        bandwidth_mbps: 100_000,
        early_unlink: true,
        place_in_buffer: true,
        // Every record of 2 KiB or more, many smaller ones at once, as before: a quarter ring
        // (64 KiB) measured 1.2-1.5x the bandwidth at 4-16 KiB with 512 KiB rings in the slow
        // mood, but 0.78-0.83x at 4 KiB with 256 KiB rings in the fast one (same runs,
        // "ob1 + shm in every mood" in `git show c0ea37f:bench/RESULTS.md`).
        publish_batch: 2 * 1024,
        // Small records go round 16 KiB while the receiver keeps up: 8-byte ping-pong
        // 0.8x the time of laps of the whole ring (`ring.rs`, "A short span").
        short_span: 16 * 1024,
        // Every ring whole up to 16 local peers (2 x 15 rings of 512 KiB): the first lap of
        // a ring otherwise takes a page fault per 4 KiB in each process (1.4-2 us to
        // allocate the page, 0.9 us to map it in the other, on this VM) while the peer
        // waits; OSU's first size of records longer than a line (64 B) paid them all, at
        // 0.6-0.7x the best peer in osu_bw, osu_bibw and osu_mbw_mr. MADV_POPULATE_WRITE
        // at connection costs about half of what the faults do, off the messages' path.
        prefault: 16 * 1024 * 1024,
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
mod layout;

/// Refused sends to one peer between two checks that the peer process still exists.
const DEAD_CHECK_INTERVAL: u32 = 1024;
/// Ring tag of a cooperative-copy help message (btl-internal, never delivered to the PML).
const TAG_HELP: u8 = rmca_framework::btl::tags::BTL_INTERNAL_BASE;

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
    /// The costs measured at init for the stream chunk (0: not measured).
    measured_handoff_ns: u64,
    measured_copy_mbps: u64,
    /// 1 when that measurement was tried and failed (a loaded node): fixed chunks.
    cost_measurement_failed: u64,
    /// The rates (MB/s, the slower side) of a block moved between two CPUs through the cache
    /// and with non-temporal stores, measured at init (0: not measured).
    measured_cached_mbps: u64,
    measured_nontemporal_mbps: u64,
    /// 1 when streamed payloads start with non-temporal stores (the mode, or with `auto` the
    /// init measurement's choice).
    nontemporal_at_start: u64,
    /// Bytes of ring memory faulted in when peers were added (both directions).
    prefaulted_bytes: u64,
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
    /// A handoff in bytes of copying, which scales the stream chunk (0: fixed chunks).
    chunk_scale: u64,
    /// How every producer starts writing streamed payloads (`btl_shm_stream_stores`).
    stores: ring::Stores,
    memory: Arc<MemoryCounter>,
    charged: usize,
    next_registration: u64,
    /// This process's id, the key of its registrations (read once: glibc's getpid is a
    /// system call each time, and every RGET send registers its buffer).
    my_pid: u32,
    /// Our doorbell, installed as the progress engine's idle waiter in block mode.
    doorbell: Option<Arc<crate::wake::Doorbell>>,
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
        let kpid = wire::read_i32_at(&key, 0);
        if kpid != pid {
            return Err(SendError::PeerFailed {
                peer,
                reason: format!("remote key of pid {kpid}, peer is pid {pid}"),
            });
        }
        Ok(())
    }
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
                crate::wake::ring_if_blocking(|| p.mapping.atomic_u32(layout::OFF_DOORBELL));
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
        wire::Writer::new(&mut key)
            .i32(self.my_pid as i32)
            .u32(self.my_rank);
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
            } else if inb.consumer.holds_space() {
                // The ring is empty and a pass that stopped early (its budget, or the PML had
                // what it waited for) kept read space: give it back (see `drain`).
                inb.consumer.publish();
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
        let head_stores = self
            .inbox
            .iter()
            .flatten()
            .map(|i| i.consumer.publications());
        // Per producer: laps cut short and run on, records to memory, changes of way.
        let [early_wraps, long_laps, nontemporal_records, store_switches] = self
            .peers
            .iter()
            .flatten()
            .map(|p| {
                let ((e, l), (r, w)) = (p.producer.laps(), p.producer.stores());
                [e, l, r, w]
            })
            .fold([0; 4], |sum, p| std::array::from_fn(|i| sum[i] + p[i]));
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
            ("head_stores", head_stores.sum()),
            ("early_wraps", early_wraps),
            ("long_laps", long_laps),
            ("measured_handoff_ns", s.measured_handoff_ns),
            ("measured_copy_mbps", s.measured_copy_mbps),
            ("cost_measurement_failed", s.cost_measurement_failed),
            ("measured_cached_mbps", s.measured_cached_mbps),
            ("measured_nontemporal_mbps", s.measured_nontemporal_mbps),
            ("nontemporal_at_start", s.nontemporal_at_start),
            ("nontemporal_records", nontemporal_records),
            ("store_switches", store_switches),
            ("prefaulted_bytes", s.prefaulted_bytes),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    fn finalize(&mut self) {
        if self.doorbell.take().is_some() {
            rmca_framework::progress::set_idle_waiter(None);
        }
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
