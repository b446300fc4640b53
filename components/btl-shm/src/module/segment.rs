//! The segment lifecycle: our inbox segment and business card ([`ShmBtl::new`]), mapping a
//! peer's segment from its card ([`ShmBtl::connect`]), and the early unlink.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use rmca_framework::btl::{exclusivity, BtlAttributes, BtlError, BtlFlags, ModexRead};
use rmca_framework::component::InitContext;
use rmca_framework::rank::{ProcInfo, Rank};

use super::{layout, ring_index, Inbound, Peer, ShmBtl, ShmConfig, Stats};
use crate::card::{Card, CardRepr};
use crate::coop;
use crate::ring::{self, Consumer, Producer, RingMem, LINE};
use crate::sys::{self, Mapping, SHM_DIR};
use crate::StoreMode;
use crate::{CmaMode, MODEX_KEY};

/// Upper bound on rings per segment (local ranks - 1) accepted from a card.
const MAX_RINGS: u32 = 1 << 16;
/// Ring sizes accepted from a card, in lines.
const MIN_LINES: u32 = 64;
const MAX_LINES: u32 = 1 << 24;

fn random_u64() -> u64 {
    // RandomState is seeded from the OS per process: enough for a probe word that only has to
    // differ from whatever happens to be at the address in another process.
    let mut h = RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish() | 1
}

/// Bytes of one of `rings` rings of `ring_bytes` to fault in ahead of use under a budget of
/// `budget` bytes over all of them: an equal share, at least `short_span` (the part small
/// records go round, which the first messages use) and one line, at most the ring.
pub(crate) fn prefault_share(
    budget: usize,
    rings: usize,
    short_span: usize,
    ring_bytes: usize,
) -> usize {
    (budget / rings.max(1))
        .max(short_span)
        .max(LINE)
        .min(ring_bytes)
}

/// The [`RingMem`] of ring `ring` inside `mapping`.
fn ring_in(mapping: &Mapping, nrings: usize, lines: usize, ring: usize) -> Option<RingMem> {
    if ring >= nrings || layout::head(ring) + 8 > layout::header_len(nrings) {
        return None;
    }
    mapping.ring(layout::head(ring), layout::data(nrings, lines, ring), lines)
}

/// In block mode, map our segment's doorbell and install it as the progress engine's idle
/// waiter (senders ring it); without it waits yield instead of sleeping, which is slower but
/// correct, so a failure is only logged.
fn install_doorbell(path: &std::path::Path) -> Option<std::sync::Arc<crate::wake::Doorbell>> {
    if !rmca_framework::progress::wait_mode_blocks() {
        return None;
    }
    match sys::DoorbellPage::open(path, layout::OFF_DOORBELL) {
        Ok(page) => {
            let d = std::sync::Arc::new(crate::wake::Doorbell::new(page));
            rmca_framework::progress::set_idle_waiter(Some(d.clone()));
            tracing::debug!("btl shm: idle waits sleep on the doorbell");
            Some(d)
        }
        Err((op, e)) => {
            tracing::warn!(error = %e, "btl shm: {op}: idle waits will yield instead of sleeping");
            None
        }
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
        let doorbell = install_doorbell(&path);

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
        let measured = measure_costs(&cfg, &prefix);
        let chunk_scale = chunk_scale(&cfg, measured.as_ref());
        let stores = stores_at_start(&cfg, measured.as_ref());
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
            stats: Stats {
                measured_handoff_ns: measured.map_or(0, |c| c.handoff_ns.round() as u64),
                measured_copy_mbps: measured.map_or(0, |c| (c.copy_bytes_per_ns * 1e3) as u64),
                cost_measurement_failed: u64::from(wants_costs(&cfg) && measured.is_none()),
                measured_cached_mbps: transfer_mbps(measured.as_ref(), |t| t.cached),
                measured_nontemporal_mbps: transfer_mbps(measured.as_ref(), |t| t.nontemporal),
                nontemporal_at_start: u64::from(stores.nontemporal()),
                ..Stats::default()
            },
            chunk_scale,
            stores,
            memory,
            charged: seg_len,
            next_registration: 1,
            my_pid: std::process::id(),
            doorbell,
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

    /// Bytes faulted in at connection of a ring of `lines` lines: this ring's share of
    /// `btl_shm_prefault` over the rings this process maps (one to and one from each local
    /// peer), at least the short span small records go round, at most the ring.
    fn prefault_span(&self, lines: usize) -> usize {
        let rings = 2 * self.local_ranks.len().saturating_sub(1);
        prefault_share(self.cfg.prefault, rings, self.cfg.short_span, lines * LINE)
    }

    fn bad(rank: Rank, reason: impl Into<String>) -> BtlError {
        BtlError::BadCard {
            rank,
            reason: reason.into(),
        }
    }

    /// Map `proc`'s inbox and set up both directions. `Ok(None)` = not reachable (no card).
    pub(super) fn connect(
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
        producer.set_chunk_scale(self.chunk_scale);
        producer.set_stores(self.stores.clone());
        producer.set_short_span(self.cfg.short_span);
        // Fault in our ring's head and its first bytes now (see `prefault_span`), not on the
        // first sends (a minor fault per page, on the first messages' path).
        let head = layout::head(ring);
        let data = layout::data(nrings as usize, peer_lines, ring);
        let span = self.prefault_span(peer_lines);
        self.stats.prefaulted_bytes +=
            (mapping.populate_write(head, LINE) + mapping.populate_write(data, span)) as u64;
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
        // Likewise the receiving side: our consumer head and the ring's first bytes.
        let span = self.prefault_span(self.lines);
        self.stats.prefaulted_bytes += (own.populate_write(layout::head(in_ring), LINE)
            + own.populate_write(layout::data(nrings as usize, self.lines, in_ring), span))
            as u64;
        let mut consumer = Consumer::new(in_mem, ring::max_fragment(self.lines));
        consumer.set_publish_batch(self.cfg.publish_batch);

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

    pub(super) fn check_early_unlink(&mut self) {
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
}

/// Whether the module needs the costs measured at init: a measured stream chunk or store mode.
fn wants_costs(cfg: &ShmConfig) -> bool {
    cfg.stream_chunk == 0 || cfg.stream_stores == StoreMode::Auto
}

/// The costs [`crate::tune`] decides from, measured now when [`wants_costs`] (a few
/// milliseconds, once per job and node); `None` when not wanted or the measurement failed.
fn measure_costs(cfg: &ShmConfig, job_key: &str) -> Option<crate::tune::Costs> {
    if !wants_costs(cfg) {
        return None;
    }
    let measured = sys::measure_costs_once_per_job(job_key, || {
        sys::measure_costs(std::time::Duration::from_millis(2))
    });
    match measured {
        Some(c) => tracing::debug!(
            handoff_ns = c.handoff_ns,
            copy_bytes_per_ns = c.copy_bytes_per_ns,
            transfers = ?c.transfers,
            "btl shm: costs measured"
        ),
        None => tracing::debug!("btl shm: costs not measured, fixed stream chunks, cached stores"),
    }
    measured
}

/// With `btl_shm_stream_chunk = 0`, the handoff in bytes of copying that
/// [`crate::tune::chunk_for`] scales the stream chunk by; 0 keeps the fixed chunk (also when
/// the measurement failed: then the default of [`ring::STREAM_CHUNK`]).
fn chunk_scale(cfg: &ShmConfig, measured: Option<&crate::tune::Costs>) -> u64 {
    if cfg.stream_chunk != 0 {
        return 0;
    }
    measured.and_then(|c| c.handoff_bytes()).unwrap_or(0)
}

/// How the producers write streamed payloads: as configured, or with `auto` chosen as they
/// go, starting non-temporally when that measured enough faster at init (through the cache
/// when not measured).
fn stores_at_start(cfg: &ShmConfig, measured: Option<&crate::tune::Costs>) -> ring::Stores {
    let transfers = measured.and_then(|c| c.transfers);
    match cfg.stream_stores {
        StoreMode::Cached => ring::Stores::Fixed(false),
        StoreMode::Nontemporal => ring::Stores::Fixed(true),
        StoreMode::Auto => ring::Stores::chosen(crate::tune::StoreChooser::new(
            transfers.is_some_and(|t| t.prefer_nontemporal()),
            // The chooser compares the producer's copy-in rates.
            transfers.map(|t| t.nontemporal.write_bytes_per_ns),
        )),
    }
}

/// A measured transfer's rate in MB/s (0: not measured), for the counters.
fn transfer_mbps(
    measured: Option<&crate::tune::Costs>,
    way: impl Fn(&crate::tune::Transfers) -> crate::tune::Transfer,
) -> u64 {
    measured
        .and_then(|c| c.transfers)
        .and_then(|t| way(&t).rate())
        .map_or(0, |rate| (rate * 1e3) as u64)
}
