//! Inbound rings: delivering their records to the PML, and placing a streamed record straight
//! into the PML's buffer as it arrives.

use rmca_framework::btl::{BtlEvents, CompletionToken, SendError};
use rmca_framework::buffer::UserBuf;
use rmca_framework::rank::Rank;

use super::{ShmBtl, Stats, TAG_HELP};
use crate::coop::Help;
use crate::ring::{Consumer, RingCorrupt};

/// Records delivered per ring per progress call, so one busy sender cannot starve the others.
const POLL_BUDGET: usize = 64;

/// A ring of our inbox and the peer that writes it.
pub(super) struct Inbound {
    pub(super) rank: Rank,
    pub(super) consumer: Consumer,
    pub(super) failed: bool,
    /// The streamed record at the head, taken by the PML and copied into place as it arrives.
    pub(super) placing: Option<Placing>,
}

/// A fragment being written into the PML's buffer as it arrives (see [`BtlEvents::recv_begin`]).
pub(super) struct Placing {
    dst: UserBuf,
    pub(super) token: CompletionToken,
    /// Bytes of the record that the PML took from the head (the rest goes to `dst`).
    head: usize,
    /// Bytes of the record handled so far (at least `head`).
    copied: usize,
}

/// The first bytes of a streamed record the PML is offered only once there are this many (or
/// the whole record): enough for any PML header.
const OFFER_MIN: usize = 64;

impl ShmBtl {
    /// Deliver the records waiting in one inbound ring, up to [`POLL_BUDGET`] and for as long
    /// as the PML wants more: once the operation it is blocked on completed, looking for
    /// another record would read the control word the producer zeroed when it published the
    /// last one, a miss on the peer's cache line whenever the ring is empty, between a
    /// message's arrival and its completion (8 B ping-pong latency -22% measured here
    /// without it). A rank waiting for many messages still takes a ring's records in one go.
    #[inline]
    pub(super) fn drain(
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
        // Whether the pass stopped at the ring's end (nothing more, or a record still being
        // written): then the space read is given back at once, since the producer may be
        // waiting for it and we have nothing to read that would free it later.
        let mut at_end = false;
        loop {
            if inb.placing.is_some() {
                match Self::place(inb, events) {
                    Ok(Some(len)) => {
                        bytes += len;
                        n += 1;
                        inb.consumer.publish_batched();
                        if n == POLL_BUDGET || !events.wants_more() {
                            break;
                        }
                        continue;
                    }
                    Ok(None) => {
                        at_end = true;
                        break;
                    }
                    Err(e) => {
                        Self::abandon(inb, stats, events, &e);
                        break;
                    }
                }
            }
            let rec = match inb.consumer.peek() {
                Ok(Some(rec)) => rec,
                Ok(None) => {
                    at_end = true;
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
            // Records may be waiting (a sender ahead of us): the space goes back in batches of
            // btl_shm_publish_batch, so that the sender refills it while we copy the rest out;
            // larger batches move the head's line less often.
            inb.consumer.publish_batched();
            n += 1;
            if n == POLL_BUDGET || !events.wants_more() {
                break;
            }
        }
        // Held only when the budget ran out with records left: a pass that stops because the
        // PML has what it waited for gives the space back now, before the caller's next send
        // (keeping it for the next idle pass made 8-byte ping-pong ~7% slower here).
        if at_end || (n > 0 && n < POLL_BUDGET) {
            inb.consumer.publish();
        }
        if n > 0 {
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
}
