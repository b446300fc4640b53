//! Cooperative single copy: both processes copy one large message at once.
//!
//! A CMA get is one core's copy. During a rendezvous the sender has nothing to do but wait for the
//! receiver's FIN, and two cores copy a large message faster than one, from cache and into cold
//! memory alike ("Figures formerly quoted in code" in `git show c0ea37f:bench/RESULTS.md`).
//! So the receiver publishes the transfer in a *slot* of its own segment, tells the sender (a
//! [`HELP_LEN`]-byte message on the ring), and both claim pieces of the message from the slot: the
//! receiver reads its pieces
//! with `process_vm_readv`, the sender, when it next polls, writes its pieces with
//! `process_vm_writev`. Claims are *guided*: each takes half of what is left (at least
//! `min_claim`), so the receiver's first claim is half the message, a sender that arrives late
//! takes a quarter, and so on; a sender that never polls costs the receiver a handful of extra
//! system calls, not a hang, because the receiver claims whatever is left itself.
//!
//! A slot is five words in shared memory:
//! - `claim`: generation (high 24 bits) and bytes claimed so far (low 40 bits). Claims are a
//!   compare-and-swap on this word, so a claim only succeeds in the generation it was meant for.
//! - `done`: bytes copied (or given up on) so far, plus [`ERROR_BIT`] if any piece failed.
//! - `len`, `dst` (receiver's address), `src` (sender's address): written before `claim`
//!   publishes the generation.
//!
//! The receiver's request completes when `done` reaches `len`; only then may it reuse the slot
//! or its buffer, and only then does the PML send the FIN that lets the sender reuse its buffer.
//! A help message that arrives late names a generation that is finished or gone, and its claim
//! fails. Everything here is plain atomics: the copies themselves are the caller's.

use std::sync::atomic::{AtomicU64, Ordering};

/// Slots in a segment: transfers a receiver can share at once (beyond that it copies alone).
pub const SLOTS: usize = 32;
/// Bytes between two slots (a slot's words share a line; slots do not share lines, nor the
/// adjacent-line prefetcher's pairs).
pub const SLOT_STRIDE: usize = 128;
/// Largest message a slot describes (40 bits of byte count).
pub const MAX_LEN: u64 = (1 << 40) - 1;
/// Set in `done` when a piece could not be copied.
pub const ERROR_BIT: u64 = 1 << 63;
/// Generations are 24 bits.
pub const GEN_MASK: u32 = (1 << 24) - 1;
/// Claims are whole pages (except the last), so pieces start page-aligned relative to the
/// message and the kernel pins no page twice.
pub const PAGE: u64 = 4096;

const OFF_BITS: u32 = 40;
const OFF_MASK: u64 = (1 << OFF_BITS) - 1;

fn pack(gen: u32, claimed: u64) -> u64 {
    (u64::from(gen & GEN_MASK) << OFF_BITS) | (claimed & OFF_MASK)
}

fn unpack(word: u64) -> (u32, u64) {
    ((word >> OFF_BITS) as u32, word & OFF_MASK)
}

/// Size of the next claim when `claimed` of `len` bytes are taken: half of the rest rounded up
/// to a page, at least `min_claim`, at most the rest.
pub fn claim_len(claimed: u64, len: u64, min_claim: u64) -> u64 {
    let left = len.saturating_sub(claimed);
    (left / 2).next_multiple_of(PAGE).max(min_claim).min(left)
}

/// One piece of a transfer: `len` bytes at `offset` from the start of both buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Offset in the message.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
}

/// What a slot describes (read by the helper after a successful claim check).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    /// Message length.
    pub len: u64,
    /// Receiver's buffer address.
    pub dst: u64,
    /// Sender's buffer address.
    pub src: u64,
}

/// A slot's words, wherever they live (a segment, or plain memory in tests).
#[derive(Clone, Copy, Debug)]
pub struct Slot<'a> {
    claim: &'a AtomicU64,
    done: &'a AtomicU64,
    len: &'a AtomicU64,
    dst: &'a AtomicU64,
    src: &'a AtomicU64,
}

impl<'a> Slot<'a> {
    /// The slot made of these five words.
    pub fn new(words: &'a [AtomicU64; 5]) -> Self {
        let [claim, done, len, dst, src] = words;
        Self {
            claim,
            done,
            len,
            dst,
            src,
        }
    }

    /// Receiver: describe a new transfer under generation `gen` (the slot must be idle: its
    /// previous transfer complete). Helpers can claim from the moment this returns.
    pub fn publish(&self, gen: u32, t: Transfer) {
        debug_assert!(t.len <= MAX_LEN);
        // Close the old generation first, so a helper that reads the new fields below can
        // never pair them with an old claim word.
        self.claim
            .store(pack(gen.wrapping_sub(1), MAX_LEN), Ordering::Release);
        self.done.store(0, Ordering::Relaxed);
        self.len.store(t.len, Ordering::Relaxed);
        self.dst.store(t.dst, Ordering::Relaxed);
        self.src.store(t.src, Ordering::Relaxed);
        self.claim.store(pack(gen, 0), Ordering::Release);
    }

    /// Claim the next piece of generation `gen`, if any is left: half of the rest (see
    /// [`claim_len`]), or all of it if nobody claimed since `rest_if_at` (the end of the
    /// caller's previous piece: the other side is not helping, so halving would only cost
    /// system calls). The transfer is read under the claim word, so it is the one of `gen`
    /// whenever a piece is returned.
    pub fn claim(&self, gen: u32, min_claim: u64, rest_if_at: u64) -> Option<(Piece, Transfer)> {
        let mut word = self.claim.load(Ordering::Acquire);
        loop {
            let (g, claimed) = unpack(word);
            if g != gen & GEN_MASK {
                return None;
            }
            let t = Transfer {
                len: self.len.load(Ordering::Relaxed),
                dst: self.dst.load(Ordering::Relaxed),
                src: self.src.load(Ordering::Relaxed),
            };
            if claimed >= t.len {
                return None;
            }
            let n = if claimed == rest_if_at {
                t.len - claimed
            } else {
                claim_len(claimed, t.len, min_claim.max(1))
            };
            // Success means the word did not change since it was read, so neither did the
            // fields read in between (a new generation rewrites the word first).
            match self.claim.compare_exchange_weak(
                word,
                pack(g, claimed + n),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Some((
                        Piece {
                            offset: claimed,
                            len: n,
                        },
                        t,
                    ))
                }
                Err(now) => word = now,
            }
        }
    }

    /// Report a claimed piece as copied (`ok`) or failed.
    pub fn finish(&self, piece: Piece, ok: bool) {
        if !ok {
            self.done.fetch_or(ERROR_BIT, Ordering::Release);
        }
        // Release: the copy (the kernel's stores into the receiver's pages) happens before
        // the receiver sees the count. Counts stay below 2^40, clear of the error bit.
        self.done.fetch_add(piece.len, Ordering::Release);
    }

    /// Receiver: stop further claims of `gen` and count the unclaimed rest as failed (after a
    /// failed piece, or when the transfer is abandoned).
    pub fn abandon(&self, gen: u32) {
        let mut word = self.claim.load(Ordering::Acquire);
        loop {
            let (g, claimed) = unpack(word);
            let len = self.len.load(Ordering::Relaxed);
            if g != gen & GEN_MASK || claimed >= len {
                return;
            }
            match self.claim.compare_exchange_weak(
                word,
                pack(g, len),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.finish(
                        Piece {
                            offset: claimed,
                            len: len - claimed,
                        },
                        false,
                    );
                    return;
                }
                Err(now) => word = now,
            }
        }
    }

    /// Receiver: `Some(ok)` once every byte of the current transfer is accounted for.
    pub fn outcome(&self) -> Option<bool> {
        let done = self.done.load(Ordering::Acquire);
        let len = self.len.load(Ordering::Relaxed);
        ((done & !ERROR_BIT) >= len).then_some(done & ERROR_BIT == 0)
    }
}

/// Length of a help message.
pub const HELP_LEN: usize = 8;

/// The help message: "slot `slot` of my segment holds generation `gen`; claim from it".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Help {
    /// Slot index in the receiver's segment.
    pub slot: u16,
    /// Generation of the transfer.
    pub gen: u32,
}

/// Why a help message was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HelpError {
    /// Wrong length.
    #[error("help message of {0} bytes, expected {HELP_LEN}")]
    Length(usize),
    /// Slot out of range.
    #[error("help message names slot {0}, a segment has {SLOTS}")]
    Slot(u16),
}

impl Help {
    /// Encode.
    pub fn emit(&self) -> [u8; HELP_LEN] {
        let mut b = [0u8; HELP_LEN];
        rmca_framework::wire::write_u16_at(&mut b, 0, self.slot);
        rmca_framework::wire::write_u32_at(&mut b, 4, self.gen);
        b
    }

    /// Decode and check a message from the ring (any bytes: a peer may be corrupt).
    pub fn parse(b: &[u8]) -> Result<Self, HelpError> {
        let b: &[u8; HELP_LEN] = b.try_into().map_err(|_| HelpError::Length(b.len()))?;
        let slot = rmca_framework::wire::read_u16_at(b, 0);
        if usize::from(slot) >= SLOTS {
            return Err(HelpError::Slot(slot));
        }
        Ok(Self {
            slot,
            gen: rmca_framework::wire::read_u32_at(b, 4) & GEN_MASK,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NEVER: u64 = u64::MAX;

    fn words() -> [AtomicU64; 5] {
        Default::default()
    }

    fn t(len: u64) -> Transfer {
        Transfer {
            len,
            dst: 0x1000,
            src: 0x2000,
        }
    }

    #[test]
    fn claims_halve_what_is_left() {
        let w = words();
        let s = Slot::new(&w);
        s.publish(1, t(1 << 20));
        let sizes: Vec<u64> =
            std::iter::from_fn(|| s.claim(1, 64 << 10, NEVER).map(|(p, _)| p.len)).collect();
        assert_eq!(sizes, [512 << 10, 256 << 10, 128 << 10, 64 << 10, 64 << 10]);
    }

    #[test]
    fn a_claimer_left_alone_takes_the_rest() {
        let w = words();
        let s = Slot::new(&w);
        s.publish(1, t(1 << 20));
        let (first, _) = s.claim(1, 4096, NEVER).unwrap();
        assert_eq!(first.len, 512 << 10);
        let end = first.offset + first.len;
        let (rest, _) = s.claim(1, 4096, end).unwrap();
        assert_eq!(
            (rest.offset, rest.len),
            (end, 512 << 10),
            "nobody else claimed"
        );

        s.publish(2, t(1 << 20));
        let (mine, _) = s.claim(2, 4096, NEVER).unwrap();
        let (theirs, _) = s.claim(2, 4096, NEVER).unwrap();
        let (next, _) = s.claim(2, 4096, mine.offset + mine.len).unwrap();
        assert_eq!(theirs.len, 256 << 10);
        assert_eq!(next.len, 128 << 10, "a helper is at work: keep halving");
    }

    #[test]
    fn a_stale_generation_claims_nothing() {
        let w = words();
        let s = Slot::new(&w);
        s.publish(7, t(100_000));
        assert!(s.claim(6, 4096, NEVER).is_none());
        let (p, tr) = s.claim(7, 4096, NEVER).unwrap();
        assert_eq!((p.offset, tr), (0, t(100_000)));
        s.publish(8, t(50_000));
        assert!(s.claim(7, 4096, NEVER).is_none(), "generation 7 is over");
        assert!(s.claim(8, 4096, NEVER).is_some());
    }

    #[test]
    fn outcome_waits_for_every_byte_and_reports_errors() {
        let w = words();
        let s = Slot::new(&w);
        s.publish(1, t(4 * PAGE));
        let (a, _) = s.claim(1, PAGE, NEVER).unwrap();
        assert_eq!(s.outcome(), None);
        s.finish(a, true);
        assert_eq!(s.outcome(), None);
        let (b, _) = s.claim(1, PAGE, NEVER).unwrap();
        s.finish(b, false);
        assert_eq!(s.outcome(), None, "a piece is still unclaimed");
        s.abandon(1);
        assert!(s.claim(1, PAGE, NEVER).is_none());
        assert_eq!(s.outcome(), Some(false));

        s.publish(2, t(PAGE));
        let (c, _) = s.claim(2, PAGE, NEVER).unwrap();
        s.finish(c, true);
        assert_eq!(s.outcome(), Some(true), "a new generation starts clean");
    }

    #[test]
    fn a_zero_length_transfer_is_complete_at_once() {
        let w = words();
        let s = Slot::new(&w);
        s.publish(3, t(0));
        assert!(s.claim(3, PAGE, NEVER).is_none());
        assert_eq!(s.outcome(), Some(true));
    }

    #[test]
    fn two_threads_claim_disjoint_pieces_covering_the_message() {
        let w = words();
        let s = Slot::new(&w);
        let len = 10_000_000 + 123;
        s.publish(5, t(len));
        let grab = || {
            let mut got = Vec::new();
            while let Some((p, _)) = s.claim(5, 4096, NEVER) {
                got.push(p);
                s.finish(p, true);
            }
            got
        };
        let (mut a, b) = std::thread::scope(|sc| {
            let h = sc.spawn(grab);
            let mine = grab();
            (mine, h.join().unwrap())
        });
        a.extend(b);
        a.sort_by_key(|p| p.offset);
        let mut at = 0;
        for p in &a {
            assert_eq!(p.offset, at);
            at += p.len;
        }
        assert_eq!(at, len);
        assert_eq!(s.outcome(), Some(true));
    }

    #[test]
    fn help_messages_round_trip_and_bad_ones_are_errors() {
        let h = Help { slot: 31, gen: 77 };
        assert_eq!(Help::parse(&h.emit()), Ok(h));
        assert_eq!(Help::parse(&[0; 7]), Err(HelpError::Length(7)));
        let mut b = h.emit();
        b[0] = SLOTS as u8;
        assert_eq!(Help::parse(&b), Err(HelpError::Slot(SLOTS as u16)));
    }

    proptest! {
        #[test]
        fn claims_partition_any_message(len in 0u64..(1 << 32), min in 1u64..(1 << 20)) {
            let w = words();
            let s = Slot::new(&w);
            s.publish(9, t(len));
            let mut at = 0;
            let mut n = 0;
            while let Some((p, _)) = s.claim(9, min, NEVER) {
                prop_assert_eq!(p.offset, at);
                prop_assert!(p.len > 0);
                at += p.len;
                n += 1;
                s.finish(p, true);
            }
            prop_assert_eq!(at, len);
            prop_assert!(n <= 2 + 64, "guided claims are logarithmic in number");
            prop_assert_eq!(s.outcome(), Some(true));
        }

        #[test]
        fn parsing_any_bytes_never_panics(b in proptest::collection::vec(any::<u8>(), 0..32)) {
            if let Ok(h) = Help::parse(&b) {
                prop_assert!(usize::from(h.slot) < SLOTS);
                prop_assert_eq!(Help::parse(&h.emit()), Ok(h));
            }
        }
    }
}
