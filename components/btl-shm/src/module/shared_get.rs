//! The driver of gets shared with their sender (the protocol is in [`coop`]): the receiver's
//! side ([`ShmBtl::start_shared`], [`ShmBtl::advance_shared`]) and the sender's help.

#[cfg(test)]
use rmca_framework::btl::BtlEvents;
use rmca_framework::btl::{CompletionToken, SendError};
use rmca_framework::buffer::UserBuf;
use rmca_framework::rank::Rank;

use super::{cma_failure, layout, ShmBtl, Stats, TAG_HELP};
use crate::coop::{self, Help, Slot, Transfer};
use crate::sys;

/// Smallest piece of a cooperative copy: below this a system call costs more than it shares.
const MIN_CLAIM: u64 = 32 * 1024;
/// Passes over an unfinished cooperative copy between two checks that the helper still lives.
const HELPER_CHECK_INTERVAL: u32 = 4096;

/// A get shared with the sender (see [`coop`]): in flight until every byte is accounted for.
pub(super) struct SharedGet {
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

impl ShmBtl {
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

    /// Start a get that the sender may help with (see [`coop`]): publish it in `slot`, tell
    /// the sender, copy our first piece (half the message) now and the rest in progress.
    pub(super) fn start_shared(
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
            if p.producer
                .push(TAG_HELP, &Help { slot, gen }.emit(), &[])
                .is_ok()
            {
                crate::wake::ring_if_blocking(|| p.mapping.atomic_u32(super::layout::OFF_DOORBELL));
            }
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
    pub(super) fn advance_shared(&mut self) {
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
    pub(super) fn serve_help(&mut self) {
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
}
