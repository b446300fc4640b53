//! Lock-free single-producer/single-consumer fragment ring in shared memory.
//!
//! # Why SPSC per (sender, receiver) and not vader's MPSC fifo
//! Open MPI's vader gives every receiver one multi-producer fifo (an atomic swap on the tail)
//! of pointers to fragments that live in the *sender's* free lists, and returns every fragment
//! through the sender's fifo. That costs an atomic RMW per send, a pointer chase per receive and
//! a return trip per fragment. With one ring per sender the producer is alone on its ring, so the
//! fast path is two `memcpy`s and one release store, the receiver reads the fragment in place (no
//! return trip: it only publishes how far it has read), and a full ring back-pressures exactly
//! the sender that fills it. The price is memory (`local peers x fifo_size` per receiver), which
//! is what a node with tens of ranks can afford; the ring size is a parameter.
//!
//! # Layout
//! The ring is `lines` cache lines (a power of two) of [`LINE`] bytes, cut in [`SLOT`]s of 32
//! bytes, two per line. A record starts on a slot: its first 8 bytes are the *control word*,
//! then the fragment bytes, padded to whole slots. A fragment of up to 24 bytes (an 8-byte
//! eager message behind ob1's 16-byte MATCH header) takes one slot, so two of them share a
//! cache line: a window of small messages moves half the lines from producer to consumer that
//! one record per line moved (Open MPI's vader packs its fast boxes at 32 bytes for the same
//! reason). A longer record starts on a line, so that up to 56 bytes still travel in one line
//! and large copies start aligned: a producer at an odd slot first publishes a *skip marker*
//! there. A record that would straddle the end of the ring is preceded by a skip marker to the
//! end, where the consumer continues at slot 0. The control word is
//! `VALID | seq << 40 | tag << 32 | len`; a skip marker is `VALID | SKIP | slots`.
//!
//! # A short span for a receiver that keeps up
//! Every record's lines move to the consumer's core and, a lap later, back to the producer's.
//! In a lap of a few tens of KiB those lines are still in the two cores' caches; a lap of a
//! large ring brings each of them from L3 or memory (8-byte ping-pong took 0.75-0.85x the
//! time with 16-64 KiB rings than with 256 KiB, 1.12x with 1 MiB). A window of medium
//! messages wants the opposite: room for the whole window, so that the sender never waits for
//! space. So the producer may go back to the ring's start early, with a skip marker to the
//! ring's end, once its tail is `short_span` into the ring, if the consumer is less than half
//! of that behind ([`Producer::set_short_span`]); otherwise the lap runs on through the whole
//! ring. The consumer needs nothing for this: it follows skip markers as it always does.
//!
//! # Streamed records
//! A record written in one go is seen by the consumer only once its last byte is written, and
//! then every line moves between the cores while the consumer copies it out: the two copies of
//! a message run one after the other. A record of at least the producer's streaming threshold
//! (`btl_shm_stream_min`) is instead published *before* its bytes: control word
//! `VALID | STREAM | pad << 56 | seq << 40 | tag << 32 | len`, then a progress word (bytes
//! written so far), `pad` bytes, and the fragment. The producer raises the progress word
//! (release) after every chunk; the consumer, finding the record incomplete, reads the lines
//! written so far (pulling them into its cache while the producer writes the next chunk) and
//! delivers the record once the progress word reaches `len`; or its owner takes the written
//! prefix as it grows ([`Consumer::partial`]) and copies it to its final place itself, which
//! is what btl-shm does when the PML knows where the fragment goes. `pad` puts the byte after the
//! PML header on a 32-byte boundary, so that the payload copies on both sides run at full
//! speed for 32-byte-aligned user buffers (glibc's `memcpy` is faster when source and
//! destination share their offset within 32 bytes; "Alignment of copies" in
//! `git show c0ea37f:bench/RESULTS.md`).
//! The producer may write a streamed payload with non-temporal stores instead
//! ([`Producer::set_stores`]): to memory, past its cache, with a store fence before each
//! progress store. That is faster when the two cores share no cache (each ring line the
//! consumer last read would first have to be taken back from the consumer's cache), slower
//! when they do (the lines would have moved from cache to cache); btl-shm chooses as the
//! records go ([`Stores::Chosen`], `btl_shm_stream_stores`).
//!
//! The consumer polls the control word of its head slot. Stale bytes from an earlier lap must
//! never look like a record, so before *publishing* a record or a skip marker (release store of
//! its control word) the producer zeroes the control word of the slot where the consumer will
//! look next. Hence the consumer's head slot always holds either 0 (nothing yet) or a word
//! published in this lap. The consumer publishes its head (release) after it has finished with
//! the bytes; the producer reads it (acquire) only when its cached copy says the ring is full,
//! so in steady state the producer never touches the consumer's line.
//!
//! The consumer trusts nothing it reads: lengths are bounded by its *own* copy of the ring size
//! and fragment limit, skips must land on a line inside the ring and may not follow a skip, and
//! a per-ring 16-bit sequence number catches a producer that went wrong. A bad record is
//! reported as [`RingCorrupt`] and the ring is abandoned, never a crash.
#![allow(unsafe_code)]

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use rmca_framework::buffer::copy_to_raw;
use thiserror::Error;

/// Cache line size assumed by the layout (x86-64, most aarch64).
pub const LINE: usize = 64;
/// Granule of record placement: half a line.
pub const SLOT: usize = 32;
/// Slots per line.
const SLOTS_PER_LINE: u64 = (LINE / SLOT) as u64;
/// Bytes of the control word at the start of a record.
pub const CTRL: usize = 8;
/// Largest fragment that travels in one slot (any slot: it never needs a skip).
pub const ONE_SLOT_MAX: usize = SLOT - CTRL;
/// Largest fragment that travels in one cache line.
pub const ONE_LINE_MAX: usize = LINE - CTRL;

const VALID: u64 = 1 << 63;
const SKIP: u64 = 1 << 62;
/// The record is streamed: its second word counts the bytes written so far.
const STREAM: u64 = 1 << 61;
/// Bytes before a streamed record's padding: control word and progress word.
const STREAM_HDR: usize = 16;
/// Where a streamed record's padding length sits in its control word (5 bits).
const PAD_SHIFT: u32 = 56;
const PAD_MASK: u64 = 0x1F << PAD_SHIFT;
/// A streamed record's payload starts on this alignment in the ring.
const PAYLOAD_ALIGN: usize = 32;
const SEQ_SHIFT: u32 = 40;
const TAG_SHIFT: u32 = 32;
const LEN_MASK: u64 = 0xFFFF_FFFF;
const TAG_MASK: u64 = 0xFF << TAG_SHIFT;

/// Slots taken by a record carrying `len` bytes.
pub const fn record_slots(len: usize) -> usize {
    (CTRL + len).div_ceil(SLOT)
}

/// Slots taken by a streamed record carrying `len` bytes.
pub const fn stream_slots(pad: usize, len: usize) -> usize {
    (STREAM_HDR + pad + len).div_ceil(SLOT)
}

/// Padding that puts the payload after a `header_len`-byte header on [`PAYLOAD_ALIGN`].
fn stream_pad(header_len: usize) -> usize {
    (PAYLOAD_ALIGN - (STREAM_HDR + header_len) % PAYLOAD_ALIGN) % PAYLOAD_ALIGN
}

/// The largest fragment a ring of `lines` lines accepts: a record may need up to twice its size
/// (skip + record) plus the next record's zeroed control slot, so it must fit in half.
pub fn max_fragment(lines: usize) -> usize {
    (lines / 2) * LINE - STREAM_HDR - (PAYLOAD_ALIGN - 1)
}

fn control(seq: u16, tag: u8, len: usize) -> u64 {
    VALID | (u64::from(seq) << SEQ_SHIFT) | (u64::from(tag) << TAG_SHIFT) | len as u64
}

/// Why a push was refused. Nothing was written in either case.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum PushError {
    /// Not enough free slots until the consumer catches up.
    #[error("ring full")]
    Full,
    /// The fragment can never fit this ring.
    #[error("fragment of {len} bytes exceeds the ring's limit of {max} bytes")]
    TooLarge {
        /// Offered length.
        len: usize,
        /// Limit.
        max: usize,
    },
}

/// The ring holds something no correct producer writes.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("corrupt ring at slot {slot}: {reason}")]
pub struct RingCorrupt {
    /// Absolute slot position of the bad control word.
    pub slot: u64,
    /// What was wrong.
    pub reason: String,
}

/// Where a ring lives: its consumer-head word and its data lines.
#[derive(Clone, Copy, Debug)]
pub struct RingMem {
    head: NonNull<AtomicU64>,
    data: NonNull<u8>,
    lines: usize,
}

impl RingMem {
    /// Describe a ring at raw addresses.
    ///
    /// # Safety
    /// `head` must point to an 8-byte aligned word and `data` to `lines * LINE` bytes aligned to
    /// [`LINE`], both zeroed before first use and valid (mapped, not freed) for as long as any
    /// [`Producer`] or [`Consumer`] built from this `RingMem` exists. At most one producer and one
    /// consumer may use a ring at any time (they may be in different processes).
    pub unsafe fn new(head: *mut u8, data: *mut u8, lines: usize) -> Option<Self> {
        if !lines.is_power_of_two()
            || lines < 4
            || head.align_offset(8) != 0
            || data.align_offset(LINE) != 0
        {
            return None;
        }
        Some(Self {
            head: NonNull::new(head.cast())?,
            data: NonNull::new(data)?,
            lines,
        })
    }

    /// Number of lines.
    pub fn lines(&self) -> usize {
        self.lines
    }

    /// Number of slots.
    fn slots(&self) -> usize {
        self.lines * SLOTS_PER_LINE as usize
    }

    fn head(&self) -> &AtomicU64 {
        // SAFETY: `new`'s contract: aligned, valid for the ring's life; AtomicU64 has the layout
        // of u64 and every access to this word (both processes) is atomic.
        unsafe { self.head.as_ref() }
    }

    fn ctrl(&self, index: usize) -> &AtomicU64 {
        debug_assert!(index < self.slots());
        // SAFETY: index < slots so the word is inside the data area; slot starts are 32-aligned;
        // control words are only accessed atomically while they can be concurrently observed
        // (plain payload writes to the same bytes are ordered by the head/control handshake).
        unsafe { &*self.data.as_ptr().add(index * SLOT).cast::<AtomicU64>() }
    }

    /// The progress word of a streamed record starting at slot `index`.
    fn progress(&self, index: usize) -> &AtomicU64 {
        debug_assert!(index < self.slots());
        // SAFETY: as for `ctrl`: the word right after the control word, 8-aligned, inside the
        // record's first slot, only accessed atomically.
        unsafe {
            &*self
                .data
                .as_ptr()
                .add(index * SLOT + CTRL)
                .cast::<AtomicU64>()
        }
    }
}

/// Copy bytes `[from, to)` of `header ++ payload` to `dst + from`; the payload's with
/// non-temporal stores when `nontemporal` is set (see [`copy_nontemporal`]; the caller fences).
///
/// # Safety
/// `dst + from .. dst + to` must be valid for writes and not overlap the inputs.
unsafe fn copy_split(
    header: &[u8],
    payload: &[u8],
    from: usize,
    to: usize,
    dst: *mut u8,
    nontemporal: bool,
) {
    let h = header.len();
    if from < h {
        let e = to.min(h);
        // SAFETY: caller's contract; [from, e) is inside `header`.
        unsafe {
            std::ptr::copy_nonoverlapping(header.as_ptr().add(from), dst.add(from), e - from)
        };
    }
    let (a, b) = (from.max(h), to);
    if a < b {
        let (src, dst) = (payload[a - h..].as_ptr(), dst.wrapping_add(a));
        // SAFETY: caller's contract; [a - h, b - h) is inside `payload`.
        unsafe {
            if nontemporal {
                copy_nontemporal(src, dst, b - a)
            } else {
                std::ptr::copy_nonoverlapping(src, dst, b - a)
            }
        };
    }
}

/// Copy `len` bytes from `src` to `dst`, the whole cache lines of the destination with
/// non-temporal stores (to memory, bypassing this core's cache), the partial lines at either
/// end with ordinary ones. The stores are weakly ordered: [`nontemporal_fence`] must run
/// before anything that publishes the bytes. Where no such stores exist (not x86-64, or under
/// miri), an ordinary copy.
///
/// Why: when the two cores share no cache (a cache-line handoff costs ~200 ns on the VM in
/// its slow placements), writing a ring line the consumer last read first takes it back from
/// the consumer's cache, and the copy-in crawls at 4-9 GB/s; written to memory, the line
/// costs the producer nothing and the consumer reads it from memory at the same speed it
/// would have pulled it from the other core (see [`crate::tune::Transfers`]).
///
/// # Safety
/// `src..src + len` must be valid for reads, `dst..dst + len` for writes, not overlapping.
pub unsafe fn copy_nontemporal(src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        let head = dst.align_offset(LINE).min(len);
        let lines = (len - head) / LINE;
        // SAFETY: the caller's contract covers [0, len); `head` and the whole lines after it
        // lie within it, and every streamed store is 16-byte aligned (dst + head is
        // line-aligned). SSE2 is part of the x86-64 baseline.
        unsafe {
            std::ptr::copy_nonoverlapping(src, dst, head);
            let (mut s, mut d) = (src.add(head), dst.add(head));
            for _ in 0..lines {
                let a = _mm_loadu_si128(s.cast::<__m128i>());
                let b = _mm_loadu_si128(s.add(16).cast::<__m128i>());
                let c = _mm_loadu_si128(s.add(32).cast::<__m128i>());
                let e = _mm_loadu_si128(s.add(48).cast::<__m128i>());
                _mm_stream_si128(d.cast::<__m128i>(), a);
                _mm_stream_si128(d.add(16).cast::<__m128i>(), b);
                _mm_stream_si128(d.add(32).cast::<__m128i>(), c);
                _mm_stream_si128(d.add(48).cast::<__m128i>(), e);
                s = s.add(LINE);
                d = d.add(LINE);
            }
            let done = head + lines * LINE;
            std::ptr::copy_nonoverlapping(src.add(done), dst.add(done), len - done);
        }
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    // SAFETY: the caller's contract.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, len)
    };
}

/// Order the non-temporal stores of [`copy_nontemporal`] before any later store (the release
/// stores that publish a ring's bytes do not order them on x86).
#[inline]
pub fn nontemporal_fence() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: sfence has no preconditions (SSE, part of the x86-64 baseline).
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

/// Whether [`copy_nontemporal`] really bypasses the cache on this build.
pub const NONTEMPORAL_STORES: bool = cfg!(all(target_arch = "x86_64", not(miri)));

// SAFETY: RingMem is a pair of addresses into shared memory whose validity is guaranteed by the
// creator (see `RingMem::new`); every cross-thread access goes through atomics or the protocol.
unsafe impl Send for RingMem {}

/// How a producer writes the payloads of streamed records.
#[derive(Clone, Debug, PartialEq)]
pub enum Stores {
    /// Always one way: with non-temporal stores (true, see [`copy_nontemporal`]) or through
    /// the cache.
    Fixed(bool),
    /// Record by record, as the chooser decides from the copy times (boxed: the
    /// small-record path touches the producer on every push).
    Chosen(Box<crate::tune::StoreChooser>),
}

impl Stores {
    /// Chosen by `chooser`.
    pub fn chosen(chooser: crate::tune::StoreChooser) -> Self {
        Self::Chosen(Box::new(chooser))
    }

    /// Whether the next long record would go non-temporally (probes aside).
    pub fn nontemporal(&self) -> bool {
        match self {
            Self::Fixed(on) => *on,
            Self::Chosen(c) => c.nontemporal(),
        }
    }
}

/// The sending side of one ring.
#[derive(Debug)]
pub struct Producer {
    mem: RingMem,
    mask: u64,
    /// Absolute slot where the next record starts.
    tail: u64,
    cached_head: u64,
    seq: u16,
    max_len: usize,
    /// Records of at least this many bytes are streamed.
    stream_min: usize,
    /// Bytes written between two progress stores of a streamed record.
    stream_chunk: usize,
    /// When not 0, the chunk is chosen per record from this measured handoff cost in bytes
    /// of copying (see [`crate::tune::chunk_for`]) instead of `stream_chunk`.
    chunk_scale: u64,
    /// Slot position from which a record of one line goes back to the ring's start while
    /// the consumer keeps up (see [`Producer::set_short_span`]); the ring's slots
    /// when every record runs through the whole ring.
    short_span: u64,
    /// Absolute slot from which a push takes the slow path to decide whether to go back to the
    /// ring's start: this lap's span, the next lap's after a decision to run on (u64::MAX
    /// when every record runs through the whole ring). One comparison on the fast path.
    wrap_at: u64,
    /// Laps cut short at the span, and laps that ran on because the consumer lagged.
    early_wraps: u64,
    long_laps: u64,
    /// How streamed payloads are written, and the chooser's clock.
    stores: Stores,
    epoch: std::time::Instant,
    /// Streamed records written with non-temporal stores.
    nontemporal_records: u64,
}

/// The smallest [`Producer::set_short_span`], in slots (a one-line record after a wrap always
/// fits before the consumer's position).
const MIN_SHORT_SPAN: u64 = 64;

/// Default [`Producer::set_streaming`] threshold: records from this size are streamed.
pub const STREAM_MIN: usize = 4096;
/// Default [`Producer::set_streaming`] chunk. Each chunk costs a handoff (the producer's
/// progress store and the consumer's load of it move a cache line between the cores, as long
/// as copying a few KiB on the virtual machines measured here), and both sides copy a chunk
/// at a time, where glibc's `rep movsb` (8 KiB and up there) beats its vector loop. 16 KiB
/// chunks cut 8 to 128 KiB ping-pong latency by 22-31% against 4 KiB ones and doubled the
/// streamed bandwidth ("ob1 + shm medium messages: stream chunks" in
/// `git show c0ea37f:bench/RESULTS.md`); 32 KiB
/// chunks were no better, since larger chunks lose the overlap of the two copies.
pub const STREAM_CHUNK: usize = 16 * 1024;

/// End of the chunk of a `len`-byte streamed record that starts at byte `done`: `chunk` bytes
/// further, except that a rest shorter than a quarter chunk joins this chunk, since a handoff
/// costs more than copying it (a 16 KiB fragment behind its 64-byte header goes in one step).
fn chunk_end(done: usize, len: usize, chunk: usize) -> usize {
    let end = done.saturating_add(chunk);
    if end >= len || len - end < chunk / 4 {
        len
    } else {
        end
    }
}

impl Producer {
    /// The producer of `mem`, accepting fragments of up to `max_len` bytes (clamped to what the
    /// ring can ever hold).
    pub fn new(mem: RingMem, max_len: usize) -> Self {
        let head = mem.head().load(Ordering::Acquire);
        Self {
            mem,
            mask: mem.slots() as u64 - 1,
            tail: head,
            cached_head: head,
            seq: 0,
            max_len: max_len.min(max_fragment(mem.lines)),
            stream_min: STREAM_MIN,
            stream_chunk: STREAM_CHUNK,
            chunk_scale: 0,
            short_span: mem.slots() as u64,
            wrap_at: u64::MAX,
            early_wraps: 0,
            long_laps: 0,
            stores: Stores::Fixed(false),
            epoch: std::time::Instant::now(),
            nontemporal_records: 0,
        }
    }

    /// How the payloads of streamed records are written: to memory with non-temporal stores
    /// or through this core's cache (see [`copy_nontemporal`] for when which is faster), fixed
    /// or chosen record by record; records below the streaming threshold always go through
    /// the cache.
    pub fn set_stores(&mut self, stores: Stores) {
        self.stores = stores;
    }

    /// Streamed records written with non-temporal stores so far, and how often the chooser
    /// changed its mind.
    pub fn stores(&self) -> (u64, u64) {
        let switches = match &self.stores {
            Stores::Fixed(_) => 0,
            Stores::Chosen(c) => c.switches(),
        };
        (self.nontemporal_records, switches)
    }

    /// Let records of one line ([`ONE_LINE_MAX`] bytes) go back to the ring's start once the
    /// tail is `bytes` into the ring, as long as the consumer is less than half of that behind
    /// (0 or the ring's size: always the whole ring). See the module's documentation: small
    /// messages are faster in a few KiB of ring, longer records in a large one. A sender that
    /// runs ahead (a window of small messages) still gets the whole ring: at the span a
    /// lagging consumer makes the lap run on to the ring's end.
    pub fn set_short_span(&mut self, bytes: usize) {
        let slots = self.mem.slots() as u64;
        self.short_span = match (bytes / SLOT) as u64 {
            0 => slots,
            // At least a few lines, so that one-slot records always qualify.
            n => n.max(MIN_SHORT_SPAN).min(slots),
        };
        self.wrap_at = if self.short_span < slots {
            (self.tail & !self.mask) + self.short_span
        } else {
            u64::MAX
        };
    }

    /// Laps cut short at the span so far, and laps that ran on to the ring's end because the
    /// consumer lagged (see [`Producer::set_short_span`]).
    pub fn laps(&self) -> (u64, u64) {
        (self.early_wraps, self.long_laps)
    }

    /// Choose each streamed record's chunk from a handoff's measured cost in bytes of copying
    /// (see [`crate::tune`]); 0: the fixed chunk of [`Producer::set_streaming`].
    pub fn set_chunk_scale(&mut self, handoff_bytes: u64) {
        self.chunk_scale = handoff_bytes;
    }

    /// Stream records of at least `min` bytes in chunks of `chunk` bytes (`min` = usize::MAX:
    /// never). Streaming lets the consumer read a long record while it is being written.
    pub fn set_streaming(&mut self, min: usize, chunk: usize) {
        self.stream_min = min.max(ONE_LINE_MAX + 1);
        // (0: measured, see `set_chunk_scale`; until then, the default.)
        self.stream_chunk = if chunk == 0 {
            STREAM_CHUNK
        } else {
            chunk.max(LINE)
        };
    }

    /// Largest fragment accepted.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Append one record holding `header` then `payload` with `tag`. On error nothing changed.
    #[inline]
    pub fn push(&mut self, tag: u8, header: &[u8], payload: &[u8]) -> Result<(), PushError> {
        let len = header.len() + payload.len();
        if len <= ONE_SLOT_MAX && len <= self.max_len && self.tail < self.wrap_at {
            return self.push_one_slot(tag, header, payload, len);
        }
        // A one-line record at a line's start: what a stream of messages of 9-40 bytes behind
        // ob1's 16-byte header keeps doing (each leaves the tail at the next line's start).
        if len <= ONE_LINE_MAX
            && len <= self.max_len
            && self.tail < self.wrap_at
            && self.tail.is_multiple_of(SLOTS_PER_LINE)
        {
            return self.push_one_line(tag, header, payload, len);
        }
        self.push_slots(tag, header, payload, len)
    }

    /// [`Producer::push_slots`] for a one-line record at a line's start, inline: no skip
    /// marker (the tail is on a line, and a line never straddles the ring's end), no early
    /// wrap (`tail < wrap_at`: this lap's decision is not due), never streamed (the
    /// streaming threshold is above a line), and the bytes copied by word moves instead of
    /// two calls into `memcpy`: 8 B behind the header took ~540 instructions per message
    /// through the one-slot path, 16 B ~645 through `push_slots` (callgrind,
    /// bench/osu-instructions.sh).
    #[inline(always)]
    fn push_one_line(
        &mut self,
        tag: u8,
        header: &[u8],
        payload: &[u8],
        len: usize,
    ) -> Result<(), PushError> {
        debug_assert!(len > ONE_SLOT_MAX && len <= ONE_LINE_MAX && len < self.stream_min);
        // The record's two slots plus the next one, whose control word is zeroed now.
        self.reserve(SLOTS_PER_LINE + 1)?;
        let index = (self.tail & self.mask) as usize;
        // SAFETY: slots index and index + 1 are free (reserved above) and inside the ring
        // (index is even and the ring is whole lines); nobody reads them until the release
        // store below publishes them. The record's bytes (len <= ONE_LINE_MAX) stay inside
        // the line.
        unsafe {
            let dst = self.mem.data.as_ptr().add(index * SLOT + CTRL);
            copy_to_raw(header, dst);
            copy_to_raw(payload, dst.add(header.len()));
        }
        self.publish_record(index, SLOTS_PER_LINE, tag, len);
        Ok(())
    }

    /// The small-message path: a one-slot record fits at any position (no skip marker), so
    /// only the free space is checked, and the bytes are copied inline.
    #[inline(always)]
    fn push_one_slot(
        &mut self,
        tag: u8,
        header: &[u8],
        payload: &[u8],
        len: usize,
    ) -> Result<(), PushError> {
        // The record's slot plus the next one, whose control word is zeroed now.
        self.reserve(2)?;
        let index = (self.tail & self.mask) as usize;
        // SAFETY: slot `index` is free (reserved above) and inside the ring; nobody reads it
        // until the release store below publishes it. The record's bytes (len <= ONE_SLOT_MAX)
        // stay inside the slot.
        unsafe {
            let dst = self.mem.data.as_ptr().add(index * SLOT + CTRL);
            copy_to_raw(header, dst);
            copy_to_raw(payload, dst.add(header.len()));
        }
        self.publish_record(index, 1, tag, len);
        Ok(())
    }

    /// Is there room for `slots` more slots? Reads the consumer's head only when the cached
    /// copy says no.
    #[inline(always)]
    fn reserve(&mut self, slots: u64) -> Result<(), PushError> {
        let capacity = self.mem.slots() as u64;
        if self.tail + slots - self.cached_head > capacity {
            self.cached_head = self.mem.head().load(Ordering::Acquire);
            if self.tail + slots - self.cached_head > capacity {
                return Err(PushError::Full);
            }
        }
        Ok(())
    }

    /// Records of several slots: line-aligned, after a skip marker when the tail is mid-line or
    /// the record would straddle the ring's end.
    #[inline(never)]
    fn push_slots(
        &mut self,
        tag: u8,
        header: &[u8],
        payload: &[u8],
        len: usize,
    ) -> Result<(), PushError> {
        if len > self.max_len {
            return Err(PushError::TooLarge {
                len,
                max: self.max_len,
            });
        }
        let stream = len >= self.stream_min;
        let pad = if stream { stream_pad(header.len()) } else { 0 };
        let slots = if stream {
            stream_slots(pad, len)
        } else {
            record_slots(len)
        } as u64;
        let capacity = self.mem.slots() as u64;
        let pos = self.tail & self.mask;
        let to_line = pos.next_multiple_of(SLOTS_PER_LINE) - pos;
        let early = pos + to_line + slots <= capacity && self.wraps_early(slots);
        let skip = if early || pos + to_line + slots > capacity {
            capacity - pos
        } else {
            to_line
        };
        // +1: the slot where the next record starts gets its control word zeroed now.
        self.reserve(skip + slots + 1)?;
        if early {
            self.early_wraps += 1;
            self.wrap_at = self.tail + skip + self.short_span;
        }
        if skip > 0 {
            // The slot after the skip holds stale bytes from the last lap: clear it before the
            // consumer is sent there, then publish the marker.
            let landing = ((pos + skip) & self.mask) as usize;
            self.mem.ctrl(landing).store(0, Ordering::Relaxed);
            self.mem
                .ctrl(pos as usize)
                .store(VALID | SKIP | skip, Ordering::Release);
            self.tail += skip;
        }
        let index = (self.tail & self.mask) as usize;
        if stream {
            self.push_streamed(index, slots, pad, tag, header, payload);
            return Ok(());
        }
        // SAFETY: slots index..index+slots are free (reserved above) and inside the ring (the
        // skip guarantees index + slots <= capacity), so nobody else reads or writes them until
        // the release store below publishes them.
        unsafe {
            let dst = self.mem.data.as_ptr().add(index * SLOT + CTRL);
            // Word moves up to 64 bytes (a header, a small payload), `memcpy` above.
            copy_to_raw(header, dst);
            copy_to_raw(payload, dst.add(header.len()));
        }
        self.publish_record(index, slots, tag, len);
        Ok(())
    }

    /// Does a record of `slots` slots go back to the ring's start now (see
    /// [`Producer::set_short_span`])? Decided once per lap, at the first record past the
    /// span, from the consumer's head (read afresh if the cached copy says it lags).
    #[inline]
    fn wraps_early(&mut self, slots: u64) -> bool {
        if self.wrap_at == u64::MAX {
            return false;
        }
        let lap = self.tail & !self.mask;
        if self.wrap_at <= lap {
            // A lap that began without a decision (the last one ended at the ring's end).
            self.wrap_at = lap + self.short_span;
        }
        if self.tail < self.wrap_at || slots > SLOTS_PER_LINE {
            return false;
        }
        let lags = |head: u64, tail: u64, span: u64| tail - head > span / 2;
        if lags(self.cached_head, self.tail, self.short_span) {
            self.cached_head = self.mem.head().load(Ordering::Acquire);
            if lags(self.cached_head, self.tail, self.short_span) {
                // The sender is ahead: this lap runs through the whole ring.
                self.wrap_at = lap + self.mask + 1 + self.short_span;
                self.long_laps += 1;
                return false;
            }
        }
        true
    }

    /// A streamed record at slot `index` (reserved, `slots` long): its control word is published
    /// first, then the bytes chunk by chunk, each chunk made visible by a release store of the
    /// progress word, so that the consumer can pull the lines written so far into its cache
    /// while the rest is being written.
    fn push_streamed(
        &mut self,
        index: usize,
        slots: u64,
        pad: usize,
        tag: u8,
        header: &[u8],
        payload: &[u8],
    ) {
        let len = header.len() + payload.len();
        let mem = self.mem;
        let progress = mem.progress(index);
        let word = control(self.seq, tag, len) | STREAM | (pad as u64) << PAD_SHIFT;
        // SAFETY: the record's slots are reserved for us: the consumer reads none of them
        // before the control word is published, then only bytes below the progress word's
        // value, which we raise after writing them.
        let base = unsafe { self.mem.data.as_ptr().add(index * SLOT + STREAM_HDR + pad) };
        let chunk = match self.chunk_scale {
            0 => self.stream_chunk,
            scale => crate::tune::chunk_for(len, scale),
        };
        let now = self.clock_ns(len);
        let plan = match &mut self.stores {
            Stores::Chosen(c) => c.plan(len, now),
            Stores::Fixed(on) => crate::tune::StorePlan {
                nontemporal: *on,
                timed: false,
            },
        };
        let nontemporal = plan.nontemporal;
        self.nontemporal_records += u64::from(nontemporal);
        // (A streamed push never waits: its slots are reserved, so this times the copy.)
        let started = plan.timed.then(std::time::Instant::now);
        if chunk_end(0, len, chunk) == len {
            // One chunk: publishing first would let the consumer poll the record's first line
            // while we write into it, for nothing to read before the end. Written whole, it
            // keeps the streamed layout (the payload aligned for both copies).
            // SAFETY: [0, len) lies in the record and is not yet visible.
            unsafe { copy_split(header, payload, 0, len, base, nontemporal) };
            if nontemporal {
                nontemporal_fence();
            }
            self.timed(started, nontemporal, len);
            progress.store(len as u64, Ordering::Relaxed);
            self.publish_record_word(index, slots, word);
            return;
        }
        progress.store(0, Ordering::Relaxed);
        // Publishes the zeroed progress word with the control word (release).
        self.publish_record_word(index, slots, word);
        let mut done = 0;
        while done < len {
            let end = chunk_end(done, len, chunk);
            // SAFETY: [done, end) lies in the record (end <= len) and is not yet visible.
            unsafe { copy_split(header, payload, done, end, base, nontemporal) };
            if nontemporal {
                nontemporal_fence();
            }
            progress.store(end as u64, Ordering::Release);
            done = end;
        }
        self.timed(started, nontemporal, len);
    }

    /// The chooser's clock (ns since the producer was made), read only for the records it
    /// looks at.
    #[inline]
    fn clock_ns(&self, len: usize) -> u64 {
        match &self.stores {
            Stores::Chosen(c) if c.wants_clock(len) => {}
            _ => return 0,
        }
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Give the chooser the time of a record's copy that was timed from `started`.
    #[inline]
    fn timed(&mut self, started: Option<std::time::Instant>, nontemporal: bool, len: usize) {
        if let (Some(t0), Stores::Chosen(c)) = (started, &mut self.stores) {
            let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
            c.record(nontemporal, len, ns);
        }
    }

    /// Zero the control word where the next record will start, then publish the record at slot
    /// `index` (whose bytes are written) and advance.
    #[inline(always)]
    fn publish_record(&mut self, index: usize, slots: u64, tag: u8, len: usize) {
        self.publish_record_word(index, slots, control(self.seq, tag, len));
    }

    #[inline(always)]
    fn publish_record_word(&mut self, index: usize, slots: u64, word: u64) {
        let next = ((self.tail + slots) & self.mask) as usize;
        self.mem.ctrl(next).store(0, Ordering::Relaxed);
        self.mem.ctrl(index).store(word, Ordering::Release);
        self.seq = self.seq.wrapping_add(1);
        self.tail += slots;
    }
}

/// A record returned by [`Consumer::peek`].
#[derive(Debug)]
pub struct Record<'a> {
    /// The tag it was pushed with.
    pub tag: u8,
    /// Its bytes (header then payload, as pushed).
    pub bytes: &'a [u8],
    /// Slots it takes: what [`Consumer::advance`] moves past.
    pub slots: u64,
    /// A streamed record that was already whole when first seen (never partial at a peek).
    pub whole_streamed: bool,
}

/// The receiving side of one ring.
#[derive(Debug)]
pub struct Consumer {
    mem: RingMem,
    mask: u64,
    /// Absolute slot of the next record.
    head: u64,
    published: u64,
    seq: u16,
    max_len: usize,
    /// Byte offset in the ring up to which the streamed record at the head was pulled into this
    /// core's cache (0 after every record).
    pulled_to: usize,
    /// Whether the last peek stopped at an incomplete streamed record, and whether it was
    /// offered yet (see [`Consumer::has_partial`]); [`PARTIAL_NONE`] after every record.
    partial: u8,
    /// Slots [`Consumer::publish_batched`] lets go of at once (0: every call publishes).
    batch: u64,
    /// Head stores so far (each one moves the head's line to a producer that polls it).
    publications: u64,
}

/// Default [`Consumer::set_publish_batch`]: a quarter of the ring.
pub const PUBLISH_BATCH_DIVISOR: u64 = 4;

const PARTIAL_NONE: u8 = 0;
const PARTIAL_NEW: u8 = 1;
const PARTIAL_OFFERED: u8 = 2;

/// A checked streamed record (see `Consumer::streamed_at`).
struct StreamedAt {
    tag: u8,
    len: usize,
    written: usize,
    /// Byte offset of its fragment in the ring.
    start: usize,
    slots: u64,
}

/// A streamed record at the head of a ring, possibly still being written (see
/// [`Consumer::partial`]).
#[derive(Debug)]
pub struct Partial<'a> {
    /// The tag it was pushed with.
    pub tag: u8,
    /// Its length once complete.
    pub len: usize,
    /// The bytes written so far (complete when `written.len() == len`).
    pub written: &'a [u8],
    /// Slots it takes: what [`Consumer::advance`] moves past.
    pub slots: u64,
}

impl Consumer {
    /// The consumer of `mem`, refusing records longer than `max_len` as corrupt.
    pub fn new(mem: RingMem, max_len: usize) -> Self {
        let head = mem.head().load(Ordering::Acquire);
        Self {
            mem,
            mask: mem.slots() as u64 - 1,
            head,
            published: head,
            seq: 0,
            max_len: max_len.min(max_fragment(mem.lines)),
            pulled_to: 0,
            partial: PARTIAL_NONE,
            batch: mem.slots() as u64 / PUBLISH_BATCH_DIVISOR,
            publications: 0,
        }
    }

    /// Let [`Consumer::publish_batched`] give space back in steps of `bytes` (at most a quarter
    /// of the ring; 0: at every call).
    pub fn set_publish_batch(&mut self, bytes: usize) {
        let quarter = self.mem.slots() as u64 / PUBLISH_BATCH_DIVISOR;
        self.batch = (bytes / SLOT) as u64;
        self.batch = self.batch.min(quarter);
    }

    /// Is a record (or skip marker) waiting? One load of the head slot's control word: the
    /// idle poll of a progress loop.
    #[inline]
    pub fn ready(&self) -> bool {
        let index = (self.head & self.mask) as usize;
        self.mem.ctrl(index).load(Ordering::Acquire) != 0
    }

    /// Deliver the next record to `deliver(tag, bytes)` if there is one. Returns `Ok(true)` when a
    /// record was delivered. Call [`Consumer::publish`] afterwards to give the space back.
    #[inline]
    pub fn pop_with(&mut self, deliver: impl FnOnce(u8, &[u8])) -> Result<bool, RingCorrupt> {
        match self.peek()? {
            Some(rec) => {
                deliver(rec.tag, rec.bytes);
                let slots = rec.slots;
                self.advance(slots);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// The next record, if one is waiting (a skip marker before it is followed). The record
    /// stays in the ring until [`Consumer::advance`] moves past it (with its `slots`), and its
    /// space until [`Consumer::publish`]. The drain loop of a progress pass: no closure, so the
    /// loop's state stays in registers.
    #[inline]
    pub fn peek(&mut self) -> Result<Option<Record<'_>>, RingCorrupt> {
        let index = (self.head & self.mask) as usize;
        let word = self.mem.ctrl(index).load(Ordering::Acquire);
        if self.is_record(word, index) {
            return Ok(Some(self.record(word, index)));
        }
        if word == 0 {
            return Ok(None);
        }
        self.peek_after_skip(word, index)
    }

    /// Move past the record [`Consumer::peek`] returned, which took `slots` slots.
    #[inline]
    pub fn advance(&mut self, slots: u64) {
        self.seq = self.seq.wrapping_add(1);
        self.head += slots;
        self.pulled_to = 0;
        self.partial = PARTIAL_NONE;
    }

    /// The common case in one comparison: valid, no skip, no reserved bit, our sequence; and a
    /// length that fits.
    #[inline(always)]
    fn is_record(&self, word: u64, index: usize) -> bool {
        let expected = VALID | (u64::from(self.seq) << SEQ_SHIFT);
        let len = (word & LEN_MASK) as usize;
        word & !(TAG_MASK | LEN_MASK) == expected
            && len <= self.max_len
            && index + record_slots(len) <= self.mem.slots()
    }

    /// The record `word` at slot `index`, checked by [`Consumer::is_record`].
    #[inline(always)]
    fn record(&self, word: u64, index: usize) -> Record<'_> {
        let len = (word & LEN_MASK) as usize;
        // SAFETY: is_record checked index + record_slots(len) <= ring slots, so the bytes are
        // inside the ring; the acquire load of `word` ordered the producer's writes before our
        // reads, and the producer does not touch these slots again until we publish a head past
        // them (which needs `&mut self`, so not while the record is borrowed).
        let bytes = unsafe {
            std::slice::from_raw_parts(self.mem.data.as_ptr().add(index * SLOT + CTRL), len)
        };
        Record {
            tag: (word >> TAG_SHIFT) as u8,
            bytes,
            slots: record_slots(len) as u64,
            whole_streamed: false,
        }
    }

    /// A skip marker (then the record where it lands), or a control word no correct producer
    /// writes. A producer writes one marker before a record, never two in a row, so a hostile
    /// ring cannot keep us skipping.
    #[inline(never)]
    fn peek_after_skip(
        &mut self,
        word: u64,
        index: usize,
    ) -> Result<Option<Record<'_>>, RingCorrupt> {
        if word & (VALID | SKIP | STREAM) == VALID | STREAM {
            return self.peek_streamed(word, index);
        }
        if word & (VALID | SKIP) != VALID | SKIP {
            return Err(self.diagnose(word));
        }
        let skip = word & LEN_MASK;
        let landing = index as u64 + skip;
        if word != VALID | SKIP | skip
            || skip == 0
            || landing > self.mem.slots() as u64
            || !landing.is_multiple_of(SLOTS_PER_LINE)
        {
            return Err(self.corrupt(format!("bad skip marker {word:#018x} at slot {index}")));
        }
        self.head += skip;
        let index = (self.head & self.mask) as usize;
        let word = self.mem.ctrl(index).load(Ordering::Acquire);
        if self.is_record(word, index) {
            return Ok(Some(self.record(word, index)));
        }
        if word == 0 {
            return Ok(None);
        }
        if word & (VALID | SKIP) == VALID | SKIP {
            return Err(self.corrupt(format!("skip marker {word:#018x} right after a skip")));
        }
        if word & (VALID | STREAM) == VALID | STREAM {
            return self.peek_streamed(word, index);
        }
        Err(self.diagnose(word))
    }

    /// A streamed record: until the progress word says it is complete, pull the lines written
    /// since the last look into this core's cache, so that the transfer between the cores
    /// overlaps the producer's writing and the bytes are local when the record is delivered.
    #[inline(never)]
    fn peek_streamed(
        &mut self,
        word: u64,
        index: usize,
    ) -> Result<Option<Record<'_>>, RingCorrupt> {
        let p = self.streamed_at(word, index)?;
        if p.written < p.len {
            // Whole lines only: a line the producer has yet to finish would bounce back to it.
            let from = self.pulled_to.max(index * SLOT);
            let to = (p.start + p.written) & !(LINE - 1);
            let data = self.mem.data.as_ptr();
            for at in (from..to).step_by(LINE) {
                // SAFETY: [index * SLOT, start + written) is inside the record (checked by
                // streamed_at) and written: the acquire load of the progress word ordered the
                // producer's writes before this read.
                unsafe { std::ptr::read_volatile(data.add(at)) };
            }
            self.pulled_to = from.max(to);
            if self.partial == PARTIAL_NONE {
                self.partial = PARTIAL_NEW;
            }
            return Ok(None);
        }
        Ok(Some(Record {
            tag: p.tag,
            bytes: self.bytes(p.start, p.len),
            slots: p.slots,
            whole_streamed: self.partial == PARTIAL_NONE,
        }))
    }

    /// The streamed record of control word `word` at slot `index`, checked: where its bytes
    /// start in the ring and how many are written.
    fn streamed_at(&self, word: u64, index: usize) -> Result<StreamedAt, RingCorrupt> {
        let len = (word & LEN_MASK) as usize;
        let pad = ((word & PAD_MASK) >> PAD_SHIFT) as usize;
        let expected = VALID | STREAM | (u64::from(self.seq) << SEQ_SHIFT);
        if word & !(TAG_MASK | LEN_MASK | PAD_MASK) != expected
            || len > self.max_len
            || index + stream_slots(pad, len) > self.mem.slots()
        {
            return Err(self.diagnose(word & !(STREAM | PAD_MASK)));
        }
        let written = self.mem.progress(index).load(Ordering::Acquire);
        if written > len as u64 {
            return Err(self.corrupt(format!(
                "streamed record of {len} bytes at slot {index} claims {written} written"
            )));
        }
        Ok(StreamedAt {
            tag: (word >> TAG_SHIFT) as u8,
            len,
            written: written as usize,
            start: index * SLOT + STREAM_HDR + pad,
            slots: stream_slots(pad, len) as u64,
        })
    }

    /// `len` bytes of the ring from byte `start`, written (ordered by an acquire load of the
    /// control or progress word that says so) and inside the ring (checked by the caller).
    fn bytes(&self, start: usize, len: usize) -> &[u8] {
        debug_assert!(start + len <= self.mem.lines * LINE);
        // SAFETY: the caller's contract: in the ring and written; the producer does not touch
        // them again until we publish a head past them (which needs `&mut self`, so not while
        // the slice is borrowed).
        unsafe { std::slice::from_raw_parts(self.mem.data.as_ptr().add(start), len) }
    }

    /// Absolute slot of the head (for error reports).
    pub fn position(&self) -> u64 {
        self.head
    }

    /// Did [`Consumer::peek`] stop at a streamed record that is still being written, and
    /// that [`Consumer::set_offered`] was not called for?
    #[inline]
    pub fn has_partial(&self) -> bool {
        self.partial == PARTIAL_NEW
    }

    /// The partial record at the head was offered to the PML (taken or not): `has_partial`
    /// is false until the next record.
    pub fn set_offered(&mut self) {
        self.partial = PARTIAL_OFFERED;
    }

    /// The streamed record at the head, however much of it is written (see
    /// [`Consumer::has_partial`]); `None` if the head holds something else. Unlike
    /// [`Consumer::peek`] this reads nothing but the record's first line: the caller copies
    /// the bytes out itself as they arrive, then moves past the record with
    /// [`Consumer::advance`] once `written` is whole.
    pub fn partial(&self) -> Result<Option<Partial<'_>>, RingCorrupt> {
        let index = (self.head & self.mask) as usize;
        let word = self.mem.ctrl(index).load(Ordering::Acquire);
        if word & (VALID | SKIP | STREAM) != VALID | STREAM {
            return Ok(None);
        }
        let p = self.streamed_at(word, index)?;
        Ok(Some(Partial {
            tag: p.tag,
            len: p.len,
            written: self.bytes(p.start, p.written),
            slots: p.slots,
        }))
    }

    /// What is wrong with `word`, a control word that is neither a record nor a skip marker.
    #[cold]
    fn diagnose(&self, word: u64) -> RingCorrupt {
        if word & VALID == 0 {
            return self.corrupt(format!("control word {word:#018x} lacks the valid bit"));
        }
        if word & !(VALID | (0xFFFF << SEQ_SHIFT) | TAG_MASK | LEN_MASK) != 0 {
            return self.corrupt(format!("reserved bits set in {word:#018x}"));
        }
        let seq = (word >> SEQ_SHIFT) as u16;
        if seq != self.seq {
            return self.corrupt(format!("sequence {seq}, expected {}", self.seq));
        }
        let len = (word & LEN_MASK) as usize;
        self.corrupt(format!(
            "length {len} exceeds the limit of {} bytes or the ring's end",
            self.max_len
        ))
    }

    /// Tell the producer how far we have read (frees the space). Cheap when nothing changed.
    #[inline]
    pub fn publish(&mut self) {
        if self.head != self.published {
            self.mem.head().store(self.head, Ordering::Release);
            self.published = self.head;
            self.publications += 1;
        }
    }

    /// Head stores so far.
    pub fn publications(&self) -> u64 {
        self.publications
    }

    /// Publish only once the space read since the last publication reaches the batch (see
    /// [`Consumer::set_publish_batch`]). While records wait, a head store per record moved the
    /// head's cache line to the producer and back once per record whenever the producer was
    /// polling a full ring, and the store waited for that transfer before the copies behind
    /// it could go on: one handoff per record, which in the VM's slow mood (~280 ns) was
    /// more than copying a 4-8 KiB record. The caller must [`Consumer::publish`] whenever it
    /// finds the ring empty, so that a producer is never kept waiting on held space.
    #[inline]
    pub fn publish_batched(&mut self) {
        if self.head - self.published >= self.batch {
            self.publish();
        }
    }

    /// Is space read but not yet given back (see [`Consumer::publish_batched`])?
    #[inline]
    pub fn holds_space(&self) -> bool {
        self.head != self.published
    }

    fn corrupt(&self, reason: String) -> RingCorrupt {
        RingCorrupt {
            slot: self.head,
            reason,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    #[repr(C, align(64))]
    #[derive(Clone, Copy)]
    pub(crate) struct Line(pub [u8; LINE]);

    /// A ring in ordinary heap memory (head word in line 0, data after it).
    pub(crate) struct HeapRing {
        pub lines: Vec<Line>,
    }

    impl HeapRing {
        pub fn new(data_lines: usize) -> Self {
            Self {
                lines: vec![Line([0; LINE]); data_lines + 1],
            }
        }
        pub fn mem(&mut self) -> RingMem {
            let n = self.lines.len() - 1;
            let base = self.lines.as_mut_ptr().cast::<u8>();
            // SAFETY: the Vec holds n+1 aligned zeroed lines and outlives every use in the tests.
            unsafe { RingMem::new(base, base.add(LINE), n) }.unwrap()
        }
    }

    fn pattern(i: u64, len: usize) -> Vec<u8> {
        (0..len)
            .map(|k| (i as usize).wrapping_mul(31).wrapping_add(k) as u8)
            .collect()
    }

    #[test]
    fn one_line_record_round_trip() {
        let mut ring = HeapRing::new(16);
        let mem = ring.mem();
        let mut p = Producer::new(mem, 1 << 20);
        let mut c = Consumer::new(mem, 1 << 20);
        p.push(7, b"hdr", b"payload").unwrap();
        let mut got = None;
        assert!(c.pop_with(|t, d| got = Some((t, d.to_vec()))).unwrap());
        assert_eq!(got, Some((7, b"hdrpayload".to_vec())));
        assert!(!c.pop_with(|_, _| panic!("empty ring delivered")).unwrap());
        assert_eq!(record_slots(ONE_SLOT_MAX), 1);
        assert_eq!(record_slots(ONE_SLOT_MAX + 1), 2);
        assert_eq!(record_slots(ONE_LINE_MAX), 2);
    }

    /// Where each record lands: one-slot records pack two per line, longer ones start on a
    /// line (after a skip marker when the tail is mid-line), and every one arrives intact.
    #[test]
    fn small_records_share_lines_and_long_ones_start_on_a_line() {
        let mut ring = HeapRing::new(16);
        let mem = ring.mem();
        let mut p = Producer::new(mem, 1 << 20);
        let mut c = Consumer::new(mem, 1 << 20);
        let mut expect = VecDeque::new();
        // (length, slot where the record must start)
        for (i, (len, slot)) in [(24, 0), (0, 1), (24, 2), (25, 4), (8, 6), (56, 8), (57, 10)]
            .into_iter()
            .enumerate()
        {
            let data = pattern(i as u64, len);
            p.push(1, &data, &[]).unwrap();
            let start = p.tail - record_slots(len) as u64;
            assert_eq!(start, slot, "record {i} of {len} bytes");
            expect.push_back(data);
        }
        // (After the 24-byte record at slot 2 the 25-byte one skipped slot 3.)
        assert_eq!(mem.ctrl(3).load(Ordering::Relaxed), VALID | SKIP | 1);
        // (8 bytes at slot 6 leaves the tail mid-line: the 56-byte record skipped slot 7.)
        assert_eq!(mem.ctrl(7).load(Ordering::Relaxed), VALID | SKIP | 1);
        while let Some(want) = expect.pop_front() {
            let mut got = None;
            assert!(c.pop_with(|_, d| got = Some(d.to_vec())).unwrap());
            assert_eq!(got, Some(want));
        }
        assert!(!c.pop_with(|_, _| panic!("empty ring delivered")).unwrap());
    }

    /// A stream of one-line records (9-40 B messages behind ob1's header: the inline
    /// one-line path) fills consecutive lines with no skip marker, lap after lap, both with
    /// the whole ring and with a short span; one after a one-slot record (the tail mid-line)
    /// still goes after a skip marker; a full ring refuses one and takes it once read.
    #[test]
    fn one_line_records_fill_consecutive_lines_lap_after_lap() {
        for span in [0, 8 * LINE] {
            let mut ring = HeapRing::new(16);
            let mem = ring.mem();
            let mut p = Producer::new(mem, 1 << 20);
            p.set_short_span(span);
            let mut c = Consumer::new(mem, 1 << 20);
            let mut i = 0u64;
            for _lap in 0..6 {
                let mut expect = VecDeque::new();
                for _ in 0..6 {
                    let len = ONE_SLOT_MAX + 1 + (i as usize % (ONE_LINE_MAX - ONE_SLOT_MAX));
                    let data = pattern(i, len);
                    let before = p.tail;
                    assert_eq!(before % SLOTS_PER_LINE, 0);
                    p.push(2, &data[..16.min(len)], &data[16.min(len)..])
                        .unwrap();
                    // Two slots, or two plus a skip to the ring's start (a wrap, early or at
                    // the end), never a skip within the ring.
                    let taken = p.tail - before;
                    assert!(
                        taken == 2 || (p.tail - 2) & p.mask == 0,
                        "record {i} took {taken} slots from slot {before}"
                    );
                    expect.push_back(data);
                    i += 1;
                }
                while let Some(want) = expect.pop_front() {
                    let mut got = None;
                    assert!(c.pop_with(|t, d| got = Some((t, d.to_vec()))).unwrap());
                    assert_eq!(got, Some((2, want)));
                }
                c.publish();
            }
            // Mid-line: the one-line record goes after a skip marker.
            p.push(2, b"x", &[]).unwrap();
            let at = p.tail;
            assert_eq!(at % SLOTS_PER_LINE, 1);
            p.push(2, &pattern(1, ONE_LINE_MAX), &[]).unwrap();
            assert_eq!(
                mem.ctrl((at & p.mask) as usize).load(Ordering::Relaxed),
                VALID | SKIP | 1
            );
            for want in [b"x".to_vec(), pattern(1, ONE_LINE_MAX)] {
                let mut got = None;
                assert!(c.pop_with(|_, d| got = Some(d.to_vec())).unwrap());
                assert_eq!(got, Some(want));
            }
            c.publish();
            // Full: refused with nothing written, taken once the consumer read the ring.
            let mut n = 0;
            while p.push(2, &pattern(n, 40), &[]).is_ok() {
                n += 1;
            }
            let tail = p.tail;
            assert!(matches!(
                p.push(2, &pattern(n, 40), &[]),
                Err(PushError::Full)
            ));
            assert_eq!(p.tail, tail);
            for k in 0..n {
                let mut got = None;
                assert!(c.pop_with(|_, d| got = Some(d.to_vec())).unwrap());
                assert_eq!(got, Some(pattern(k, 40)));
            }
            c.publish();
            p.push(2, &pattern(n, 40), &[]).unwrap();
            let mut got = None;
            assert!(c.pop_with(|_, d| got = Some(d.to_vec())).unwrap());
            assert_eq!(got, Some(pattern(n, 40)));
        }
    }

    #[test]
    fn every_split_of_a_one_line_record_arrives_intact() {
        // The one-slot path copies with overlapping word moves: check every header/payload
        // split up to a full line, over stale bytes from earlier laps.
        let mut ring = HeapRing::new(64);
        let mem = ring.mem();
        let mut p = Producer::new(mem, 1 << 20);
        let mut c = Consumer::new(mem, 1 << 20);
        let mut i = 0u64;
        for total in 0..=ONE_LINE_MAX {
            for h in 0..=total {
                let bytes = pattern(i, total);
                p.push(3, &bytes[..h], &bytes[h..]).unwrap();
                let mut got = None;
                assert!(c.pop_with(|_, d| got = Some(d.to_vec())).unwrap());
                c.publish();
                assert_eq!(got.as_deref(), Some(&bytes[..]), "header {h} of {total}");
                i += 1;
            }
        }
    }

    /// Streamed records arrive intact for every header length (and so every padding), and the
    /// byte after the header sits on a 32-byte boundary of the ring.
    #[test]
    fn streamed_records_arrive_intact_with_aligned_payloads() {
        for nontemporal in [false, true] {
            streamed_records_arrive_intact(nontemporal);
        }
    }

    fn streamed_records_arrive_intact(nontemporal: bool) {
        let mut ring = HeapRing::new(256);
        let mem = ring.mem();
        let mut p = Producer::new(mem, 1 << 20);
        p.set_streaming(100, 64);
        p.set_stores(Stores::Fixed(nontemporal));
        let mut c = Consumer::new(mem, 1 << 20);
        let data_start = mem.data.as_ptr() as usize;
        let mut i = 0u64;
        for header_len in 0..=40 {
            for len in [100, 101, 163, 1000, 4095] {
                let bytes = pattern(i, len);
                p.push(5, &bytes[..header_len], &bytes[header_len..])
                    .unwrap();
                let rec = c.peek().unwrap().expect("a complete streamed record");
                assert_eq!(
                    (rec.tag, rec.bytes),
                    (5, &bytes[..]),
                    "header {header_len}, {len} B, nontemporal {nontemporal}"
                );
                let payload_at = rec.bytes.as_ptr() as usize + header_len - data_start;
                assert_eq!(payload_at % PAYLOAD_ALIGN, 0, "header {header_len}");
                let slots = rec.slots;
                c.advance(slots);
                c.publish();
                i += 1;
            }
        }
        // Below the threshold records are written in one go.
        p.push(1, &[], &[9; 99]).unwrap();
        let word = mem.ctrl(((p.tail - record_slots(99) as u64) & p.mask) as usize);
        assert_eq!(word.load(Ordering::Relaxed) & STREAM, 0);
    }

    /// An incomplete streamed record is not delivered, and pulling its lines changes nothing.
    #[test]
    fn incomplete_streamed_record_waits_for_its_last_chunk() {
        let mut ring = HeapRing::new(64);
        let mem = ring.mem();
        let mut p = Producer::new(mem, 1 << 20);
        p.set_streaming(64, 64);
        let mut c = Consumer::new(mem, 1 << 20);
        let bytes = pattern(3, 1500);
        p.push(2, &bytes[..16], &bytes[16..]).unwrap();
        // Roll the progress word back, as if the producer were still writing.
        let progress = mem.progress(0);
        for written in [0, 1, 63, 64, 700, 1499] {
            progress.store(written, Ordering::Release);
            assert!(
                c.peek().unwrap().is_none(),
                "delivered at {written} of 1500"
            );
            assert!(c.ready(), "the record is visible while incomplete");
        }
        progress.store(1500, Ordering::Release);
        let rec = c.peek().unwrap().expect("complete");
        assert_eq!(rec.bytes, &bytes[..]);
    }

    /// `partial` shows a streamed record's written prefix while peek holds it back; the record
    /// is offered once (`has_partial` until `set_offered`) and the state ends at `advance`.
    #[test]
    fn partial_records_show_their_written_prefix() {
        let mut ring = HeapRing::new(64);
        let mem = ring.mem();
        let mut p = Producer::new(mem, 1 << 20);
        p.set_streaming(64, 64);
        let mut c = Consumer::new(mem, 1 << 20);
        assert!(c.partial().unwrap().is_none(), "empty ring");
        let bytes = pattern(9, 1500);
        p.push(4, &bytes[..20], &bytes[20..]).unwrap();
        let progress = mem.progress(0);
        progress.store(640, Ordering::Release);
        assert!(!c.has_partial(), "not before a peek saw it");
        assert!(c.peek().unwrap().is_none());
        assert!(c.has_partial());
        let part = c.partial().unwrap().expect("a streamed record at the head");
        assert_eq!((part.tag, part.len, part.written), (4, 1500, &bytes[..640]));
        c.set_offered();
        assert!(c.peek().unwrap().is_none());
        assert!(!c.has_partial(), "offered once");
        progress.store(1500, Ordering::Release);
        let part = c.partial().unwrap().unwrap();
        assert_eq!(part.written, &bytes[..]);
        let slots = part.slots;
        c.advance(slots);
        c.publish();
        // The next record starts fresh.
        p.push(4, &[], &bytes[..900]).unwrap();
        mem.progress(((p.tail - stream_slots(stream_pad(0), 900) as u64) & p.mask) as usize)
            .store(64, Ordering::Release);
        assert!(c.peek().unwrap().is_none());
        assert!(c.has_partial());
        // A short record at the head is not partial.
        let mut ring = HeapRing::new(64);
        let mem = ring.mem();
        let mut p = Producer::new(mem, 1 << 20);
        let c = Consumer::new(mem, 1 << 20);
        p.push(4, &[], &[1; 100]).unwrap();
        assert!(c.partial().unwrap().is_none());
    }

    #[test]
    fn bad_streamed_records_are_reported() {
        // (progress word, control word change) -> corrupt
        let cases: [(u64, u64); 4] = [
            (1501, 0),           // more written than the record holds
            (0, 1 << SEQ_SHIFT), // wrong sequence
            (0, 0x10_0000),      // length past the limit
            (0, SKIP),           // streamed skip marker
        ];
        for (written, change) in cases {
            let mut ring = HeapRing::new(64);
            let mem = ring.mem();
            let mut p = Producer::new(mem, 2000);
            p.set_streaming(64, 64);
            let mut c = Consumer::new(mem, 2000);
            p.push(2, &[], &pattern(1, 1500)).unwrap();
            let word = mem.ctrl(0).load(Ordering::Relaxed);
            mem.ctrl(0).store(word ^ change, Ordering::Relaxed);
            if written > 0 {
                mem.progress(0).store(written, Ordering::Relaxed);
            }
            assert!(c.peek().is_err(), "written {written}, change {change:#x}");
        }
    }

    #[test]
    fn full_ring_refuses_then_recovers_after_publish() {
        let mut ring = HeapRing::new(16);
        let mem = ring.mem();
        let mut p = Producer::new(mem, 1 << 20);
        let mut c = Consumer::new(mem, 1 << 20);
        let mut sent = 0;
        while p.push(1, &[], &[sent as u8; 100]).is_ok() {
            sent += 1;
        }
        assert!(sent > 0);
        assert_eq!(p.push(1, &[], &[0; 100]), Err(PushError::Full));
        // Consuming without publishing frees nothing.
        assert!(c.pop_with(|_, _| {}).unwrap());
        assert_eq!(p.push(1, &[], &[0; 100]), Err(PushError::Full));
        c.publish();
        assert!(p.push(1, &[], &[0; 100]).is_ok());
    }

    /// `publish_batched` gives read space back a quarter ring at a time (one head store, so
    /// one move of the head's line, per batch instead of per record); `publish` all of it.
    #[test]
    fn batched_publication_gives_space_back_a_quarter_ring_at_a_time() {
        let mut ring = HeapRing::new(64); // 128 slots: a quarter is 32
        let mem = ring.mem();
        let mut p = Producer::new(mem, 1 << 20);
        let mut c = Consumer::new(mem, 1 << 20);
        let mut pushed = 0;
        while p.push(1, &[], &[7; 200]).is_ok() {
            pushed += 1; // 7 slots + a skip now and then
        }
        assert!(pushed >= 12);
        let mut published = vec![];
        for _ in 0..pushed {
            assert!(c.pop_with(|_, _| {}).unwrap());
            c.publish_batched();
            published.push(mem.head().load(Ordering::Relaxed));
        }
        let steps: Vec<u64> = published
            .windows(2)
            .map(|w| w[1] - w[0])
            .filter(|&d| d > 0)
            .collect();
        assert!(!steps.is_empty());
        assert!(
            steps.iter().all(|&d| d >= 32),
            "head stores of less than a quarter ring: {steps:?}"
        );
        assert!(c.holds_space() || published.last() == Some(&c.head));
        c.publish();
        assert!(!c.holds_space());
        assert_eq!(mem.head().load(Ordering::Relaxed), c.head);
        // A batch of 0 publishes at every call; a batch larger than a quarter is a quarter.
        c.set_publish_batch(0);
        p.push(1, &[], &[7; 200]).unwrap();
        assert!(c.pop_with(|_, _| {}).unwrap());
        c.publish_batched();
        assert!(!c.holds_space());
        c.set_publish_batch(1 << 30);
        assert_eq!(c.batch, 32);
    }

    /// Records of one line stay within the short span while the consumer keeps up (so their
    /// lines stay in the cores' caches), longer ones run through the whole ring, and every
    /// record arrives intact.
    #[test]
    fn records_stay_in_the_short_span_while_the_consumer_keeps_up() {
        let mut ring = HeapRing::new(1024); // 2048 slots
        let mem = ring.mem();
        let mut p = Producer::new(mem, 1 << 20);
        p.set_streaming(4096, 1024);
        p.set_short_span(8 * 1024); // 256 slots
        let mut c = Consumer::new(mem, 1 << 20);
        let span = 256;
        let mut furthest = 0;
        for i in 0..5000u64 {
            let len = [8, 24, 0, 56, 30][i as usize % 5];
            let data = pattern(i, len);
            p.push(3, &data[..len.min(7)], &data[len.min(7)..]).unwrap();
            let start = (p.tail - record_slots(len) as u64) & p.mask;
            furthest = furthest.max(start);
            let mut got = None;
            assert!(c.pop_with(|_, d| got = Some(d.to_vec())).unwrap());
            assert_eq!(got.as_deref(), Some(&data[..]), "record {i}");
            c.publish();
        }
        // A record starts before the span or right at it (the one that decides the wrap).
        assert!(furthest < span + 2, "a record started at slot {furthest}");
        let (early, long) = p.laps();
        assert!(
            early >= 20 && long == 0,
            "{early} early wraps, {long} long laps"
        );
        // A record longer than a line runs on past the span.
        let mut starts = vec![];
        for i in 0..40u64 {
            let data = pattern(i, 2500);
            p.push(3, &[], &data).unwrap();
            starts.push((p.tail - record_slots(2500) as u64) & p.mask);
            p.push(3, &[], &data[..57]).unwrap();
            starts.push((p.tail - record_slots(57) as u64) & p.mask);
            assert!(c.pop_with(|_, d| assert_eq!(d, &data[..])).unwrap());
            assert!(c.pop_with(|_, d| assert_eq!(d, &data[..57])).unwrap());
            c.publish();
        }
        assert!(starts.iter().any(|&s| s > 1024), "{starts:?}");
    }

    /// A sender ahead of its consumer gets the whole ring, not the short span: at the span the
    /// consumer lags, and the lap runs on to the ring's end.
    #[test]
    fn a_sender_ahead_of_its_consumer_gets_the_whole_ring() {
        let mut ring = HeapRing::new(1024); // 64 KiB
        let mem = ring.mem();
        let mut p = Producer::new(mem, 1 << 20);
        p.set_short_span(8 * 1024);
        let mut c = Consumer::new(mem, 1 << 20);
        let mut bytes = 0;
        let mut n = 0u64;
        // Two slots each: 2047 slots hold 1023 of them.
        while p.push(1, &[], &pattern(n, 50)).is_ok() {
            bytes += 50;
            n += 1;
        }
        assert!(n > 900, "only {n} records of 50 bytes ({bytes}) accepted");
        assert_eq!(p.laps(), (0, 1));
        for i in 0..n {
            assert!(c
                .pop_with(|_, d| assert_eq!(d, &pattern(i, 50)[..]))
                .unwrap());
        }
        c.publish();
        // Caught up: the next lap is cut short again.
        for i in 0..2000u64 {
            p.push(1, &[], &pattern(i, 50)).unwrap();
            assert!(c
                .pop_with(|_, d| assert_eq!(d, &pattern(i, 50)[..]))
                .unwrap());
            c.publish();
        }
        let (early, long) = p.laps();
        assert!(
            early >= 1 && long == 1,
            "{early} early wraps, {long} long laps"
        );
        // A span of 0 (or the ring's size) is the whole ring.
        p.set_short_span(0);
        assert_eq!(p.wrap_at, u64::MAX);
        p.set_short_span(1 << 30);
        assert_eq!(p.wrap_at, u64::MAX);
        p.set_short_span(100);
        assert_eq!(p.short_span, MIN_SHORT_SPAN);
    }

    #[test]
    fn too_large_is_refused() {
        let mut ring = HeapRing::new(16);
        let mem = ring.mem();
        let mut p = Producer::new(mem, 1 << 20);
        let max = max_fragment(16);
        assert!(matches!(
            p.push(0, &[], &vec![0; max + 1]),
            Err(PushError::TooLarge { .. })
        ));
        assert!(p.push(0, &[], &vec![0; max]).is_ok());
    }

    #[test]
    fn garbage_is_reported_not_crashed_on() {
        for word in [
            1u64,
            VALID | 0xFFFF_FFFF,
            VALID | SKIP | 3,             // lands mid-line
            VALID | SKIP,                 // skips nothing
            VALID | SKIP | 34,            // lands past the ring's end
            VALID | SKIP | (1 << 40) | 2, // reserved bits in a marker
            VALID | (3 << SEQ_SHIFT) | 4,
        ] {
            let mut ring = HeapRing::new(16);
            let mem = ring.mem();
            mem.ctrl(0).store(word, Ordering::Relaxed);
            let mut c = Consumer::new(mem, 512);
            assert!(
                c.pop_with(|_, _| panic!("garbage delivered")).is_err(),
                "{word:#x}"
            );
        }
        // A skip marker to the ring's end followed by garbage at slot 0, and a skip marker
        // followed by another (a hostile ring must not keep the consumer skipping).
        for (landing_word, landing) in [(VALID | 1 << 20, 0), (VALID | SKIP | 2, 4)] {
            let mut ring = HeapRing::new(16);
            let mem = ring.mem();
            let mut p = Producer::new(mem, 512);
            let mut c = Consumer::new(mem, 512);
            p.push(0, &[], &[1; 10]).unwrap();
            assert!(c.pop_with(|_, _| {}).unwrap());
            let skip = if landing == 0 { 31 } else { 3 };
            mem.ctrl(1).store(VALID | SKIP | skip, Ordering::Relaxed);
            mem.ctrl(landing).store(landing_word, Ordering::Relaxed);
            let err = c.pop_with(|_, _| panic!("garbage delivered")).unwrap_err();
            assert!(err.reason.contains("skip") || landing == 0, "{err}");
        }
    }

    /// Producer and consumer on two threads over heap memory: small enough for miri, which then
    /// checks the release/acquire protocol for data races on the payload bytes.
    #[test]
    fn two_threads_heap_ring() {
        two_threads(usize::MAX);
    }

    /// The same with every record of 60 bytes or more streamed in 64-byte chunks: the consumer
    /// sees records half written.
    #[test]
    fn two_threads_heap_ring_streamed() {
        two_threads(60);
    }

    /// With a chooser, records go one way or the other (here the non-temporal probe a chooser
    /// without a reference makes) and all arrive intact; the producer counts those that went
    /// to memory.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "128 records of 32 KiB take tens of minutes under Miri; both ways' copies are \
                  checked there by streamed_records_arrive_intact_with_aligned_payloads"
    )]
    fn records_stay_intact_whichever_way_the_chooser_writes_them() {
        let mut ring = HeapRing::new(4096);
        let mem = ring.mem();
        let mut p = Producer::new(mem, 1 << 20);
        p.set_streaming(100, 4096);
        p.set_stores(Stores::chosen(crate::tune::StoreChooser::new(false, None)));
        let mut c = Consumer::new(mem, 1 << 20);
        let len = crate::tune::StoreChooser::SAMPLE_MIN + 100;
        let count = 2 * crate::tune::StoreChooser::PROBE_EVERY;
        for i in 0..count {
            let bytes = pattern(i, len);
            p.push(3, &bytes[..24], &bytes[24..]).unwrap();
            let rec = c.peek().unwrap().expect("a whole record");
            assert_eq!(rec.bytes, &bytes[..], "record {i}");
            let slots = rec.slots;
            c.advance(slots);
            c.publish();
        }
        let (nontemporal, _) = p.stores();
        assert!(nontemporal >= 1, "the probe went to memory");
    }

    /// Streamed payloads written to memory (non-temporal stores, fenced before each progress
    /// store) are whole when the consumer on another thread reads them.
    #[test]
    fn two_threads_heap_ring_streamed_nontemporal() {
        two_threads_in(32, 0, 60, true);
    }

    /// The chunk ends of a `len`-byte streamed record (each one a progress store).
    fn chunk_ends(len: usize, chunk: usize) -> Vec<usize> {
        let mut ends = vec![];
        let mut done = 0;
        while done < len {
            done = chunk_end(done, len, chunk);
            ends.push(done);
        }
        ends
    }

    /// A medium message is a handful of handoffs by default: every progress store moves a
    /// cache line between the cores, which costs as much as copying a few KiB (4 KiB chunks
    /// made a 64 KiB message sixteen handoffs, and 8-128 KiB latency 25-35% worse).
    #[test]
    fn streamed_records_take_few_handoffs() {
        let medium = 64 * 1024 + 64;
        assert!(chunk_ends(medium, STREAM_CHUNK).len() <= 4);
        // A copied rendezvous fragment (16 KiB behind its header) is one step, not two.
        assert_eq!(
            chunk_ends(16 * 1024 + 64, STREAM_CHUNK),
            vec![16 * 1024 + 64]
        );
        assert_eq!(
            chunk_ends(40_000, 16_384),
            vec![16_384, 32_768, 40_000],
            "a rest of a quarter chunk or more is a chunk of its own"
        );
        assert_eq!(chunk_ends(36_000, 16_384), vec![16_384, 36_000]);
        for len in [1, 63, 64, 4095, 4096, 100_000, 1 << 20] {
            for chunk in [64, 4096, STREAM_CHUNK] {
                let ends = chunk_ends(len, chunk);
                assert_eq!(ends.last(), Some(&len));
                let mut from = 0;
                for &e in &ends {
                    assert!(
                        e > from && e - from <= chunk + chunk / 4,
                        "{len} {chunk} {ends:?}"
                    );
                    from = e;
                }
            }
        }
    }

    /// The same with a short span: the producer goes back to the ring's start early or runs
    /// on, depending on how far behind the consumer thread is.
    #[test]
    fn two_threads_heap_ring_short_span() {
        two_threads_in(128, 2048, 60, false);
    }

    fn two_threads(stream_min: usize) {
        two_threads_in(32, 0, stream_min, false);
    }

    fn two_threads_in(lines: usize, span: usize, stream_min: usize, nontemporal: bool) {
        const COUNT: u64 = if cfg!(miri) { 300 } else { 20_000 };
        let mut ring = HeapRing::new(lines);
        let mem = ring.mem();
        let consumer = std::thread::spawn(move || {
            let mut c = Consumer::new(mem, 1 << 20);
            let mut next = 0u64;
            while next < COUNT {
                let mut ok = true;
                if c.pop_with(|_, d| ok = d == pattern(next, (next % 300) as usize))
                    .unwrap()
                {
                    assert!(ok, "record {next} damaged");
                    next += 1;
                } else {
                    std::thread::yield_now();
                }
                c.publish();
            }
        });
        let mut p = Producer::new(mem, 1 << 20);
        p.set_streaming(stream_min, 64);
        p.set_short_span(span);
        p.set_stores(Stores::Fixed(nontemporal));
        for i in 0..COUNT {
            let data = pattern(i, (i % 300) as usize);
            while p
                .push(0, &data[..data.len().min(5)], &data[data.len().min(5)..])
                .is_err()
            {
                std::thread::yield_now();
            }
        }
        consumer.join().unwrap();
        drop(ring);
    }

    proptest! {
        /// The non-temporal copy writes exactly the bytes an ordinary one would, at any
        /// alignment of either side and any length, and nothing around them.
        #[test]
        fn nontemporal_copy_is_a_copy(src_at in 0usize..64, dst_at in 0usize..64, len in 0usize..700) {
            let src: Vec<u8> = (0..src_at + len).map(|i| (i * 7 + 3) as u8).collect();
            let mut dst = vec![0xAAu8; 64 + dst_at + len + 64];
            // (base < LINE: the copy and a byte after it fit.)
            let base = dst.as_ptr().align_offset(LINE);
            // SAFETY: both ranges lie inside their vectors, which do not overlap.
            unsafe {
                copy_nontemporal(src.as_ptr().add(src_at), dst.as_mut_ptr().add(base + dst_at), len);
            }
            nontemporal_fence();
            prop_assert_eq!(&dst[base + dst_at..base + dst_at + len], &src[src_at..]);
            prop_assert!(dst[..base + dst_at].iter().all(|&b| b == 0xAA));
            prop_assert!(dst[base + dst_at + len..].iter().all(|&b| b == 0xAA));
        }

        /// Whatever a broken or hostile producer leaves in the ring, the consumer returns records
        /// inside the ring or an error, and never panics or reads out of bounds.
        #[test]
        fn random_ring_contents_never_crash(words in proptest::collection::vec(any::<u64>(), 16), valid in any::<u16>()) {
            let mut ring = HeapRing::new(16);
            let mem = ring.mem();
            for (i, w) in words.iter().enumerate() {
                // Bias half the lines towards plausible control words.
                // ... some of them streamed (random pad; the next word is then read as progress).
                let w = if valid & (1 << i) != 0 { VALID | (w & 0x3FFF_FFFF_0000_03FF) } else { *w };
                mem.ctrl(i).store(w, Ordering::Relaxed);
            }
            let mut c = Consumer::new(mem, 512);
            for _ in 0..32 {
                match c.pop_with(|_, d| assert!(d.len() <= 512)) {
                    Ok(true) => c.publish(),
                    Ok(false) | Err(_) => break,
                }
            }
        }

        /// Against a queue model: any interleaving of pushes (random sizes), pops and publishes
        /// delivers exactly what was accepted, in order, and refuses only when really full.
        #[test]
        fn behaves_like_a_bounded_fifo(ops in proptest::collection::vec((0u8..4, 0usize..700), 1..400), stream_min in prop_oneof![Just(usize::MAX), 57usize..700], span in prop_oneof![Just(0usize), 1usize..4096], stores in 0u8..3) {
            let mut ring = HeapRing::new(64);
            let mem = ring.mem();
            let mut p = Producer::new(mem, 1 << 20);
            p.set_streaming(stream_min, 64);
            p.set_short_span(span);
            match stores {
                0 => p.set_stores(Stores::Fixed(false)),
                1 => p.set_stores(Stores::Fixed(true)),
                // Starts cached and probes non-temporally every 64th streamed record.
                _ => p.set_stores(Stores::chosen(crate::tune::StoreChooser::new(false, None))),
            }
            let mut c = Consumer::new(mem, 1 << 20);
            let mut model: VecDeque<Vec<u8>> = VecDeque::new();
            let mut n = 0u64;
            for (op, len) in ops {
                match op {
                    0 | 1 => {
                        let len = len.min(p.max_len());
                        let data = pattern(n, len);
                        let (h, pl) = data.split_at(len.min(13));
                        match p.push(n as u8, h, pl) {
                            Ok(()) => { model.push_back(data); n += 1; }
                            Err(PushError::Full) => {
                                // Full only if, after draining everything, it would fit.
                                let busy = !model.is_empty() || c.head != c.published;
                                prop_assert!(busy, "refused while empty");
                            }
                            Err(e) => prop_assert!(false, "{e}"),
                        }
                    }
                    2 => {
                        let mut got = None;
                        let popped = c.pop_with(|t, d| got = Some((t, d.to_vec()))).unwrap();
                        let expect_some = !model.is_empty();
                        prop_assert_eq!(popped, expect_some);
                        if let Some((_, d)) = got { prop_assert_eq!(Some(d), model.pop_front()); }
                    }
                    _ => c.publish(),
                }
            }
            while let Some(expect) = model.pop_front() {
                let mut got = None;
                let popped = c.pop_with(|_, d| got = Some(d.to_vec())).unwrap();
                prop_assert!(popped, "record missing");
                prop_assert_eq!(got, Some(expect));
            }
            let more = c.pop_with(|_, _| ()).unwrap();
            prop_assert!(!more, "delivered more than was pushed");
        }
    }
}
