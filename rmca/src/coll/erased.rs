//! Blocking reductions whose operation is erased to bytes ([`ByteReduction`]: a binding's
//! user function, say, which works on whole runs of its own elements). They take the same
//! way as the typed forms: the direct forms at the top of the stack first (coll-sm, through
//! shared memory, rank order kept for a non-commutative operation), then the stack's
//! schedules; the non-blocking forms would only ever take the schedules.

use std::ops::Range;

use super::nonblocking::ByteReduction;
use super::{TAG_ALLREDUCE, TAG_REDUCE};
use crate::{Communicator, Error, Result};

/// `len` bytes must be whole elements of `op`.
fn check_elems(op: &ByteReduction, len: usize, what: &str) -> Result<()> {
    let elem = op.element_size();
    if elem == 0 || !len.is_multiple_of(elem) {
        return Err(Error::InvalidArgument(format!(
            "{what}: {len} B is not a whole number of {elem}-byte elements"
        )));
    }
    Ok(())
}

impl Communicator {
    /// Allreduce of `send` into `recv` (as long) with `op`.
    pub(crate) fn allreduce_erased(
        &self,
        send: &[u8],
        recv: &mut [u8],
        op: &ByteReduction,
    ) -> Result<()> {
        check_elems(op, send.len(), "allreduce")?;
        if recv.len() != send.len() {
            return Err(Error::InvalidArgument(format!(
                "allreduce: the receive buffer holds {} B, the input {} B",
                recv.len(),
                send.len()
            )));
        }
        if send.is_empty() {
            // Nothing to reduce on any member: no synchronisation is owed.
            return Ok(());
        }
        let (elem, ordered) = (op.element_size(), !op.is_commutative());
        let step = |d: &mut [u8], s: &[u8], a: Option<&[u8]>, f: bool| op.apply(d, s, a, f);
        if let Some(r) =
            self.coll_direct(|d, env| d.allreduce(env, send, recv, elem, ordered, &step))
        {
            return r;
        }
        let s = self.allreduce_schedule(send.len(), elem, ordered)?;
        self.run_schedule(&s, TAG_ALLREDUCE, send, recv, Some(&step))
    }

    /// Reduce of `send` with `op` into `recv` at `root` (`recv` is ignored elsewhere and
    /// must be as long as `send` at the root).
    pub(crate) fn reduce_erased(
        &self,
        send: &[u8],
        recv: Option<&mut [u8]>,
        op: &ByteReduction,
        root: usize,
    ) -> Result<()> {
        self.check_root(root)?;
        check_elems(op, send.len(), "reduce")?;
        // Non-roots combine their part in private space.
        let mut own = Vec::new();
        let work = if self.rank() == root {
            let recv = recv.ok_or_else(|| {
                Error::InvalidArgument("reduce: the root must pass a receive buffer".into())
            })?;
            if recv.len() != send.len() {
                return Err(Error::InvalidArgument(format!(
                    "reduce: the receive buffer holds {} B, the input {} B",
                    recv.len(),
                    send.len()
                )));
            }
            recv
        } else {
            own.resize(send.len(), 0u8);
            own.as_mut_slice()
        };
        if send.is_empty() {
            // Nothing to reduce on any member: no synchronisation is owed.
            return Ok(());
        }
        let (elem, ordered) = (op.element_size(), !op.is_commutative());
        let step = |d: &mut [u8], s: &[u8], a: Option<&[u8]>, f: bool| op.apply(d, s, a, f);
        if let Some(r) =
            self.coll_direct(|d, env| d.reduce(env, send, work, root, elem, ordered, &step))
        {
            return r;
        }
        let s = self.reduce_schedule(root, send.len(), elem, ordered)?;
        self.run_schedule(&s, TAG_REDUCE, send, work, Some(&step))
    }

    /// Reduce_scatter of `send` with `op`: this member gets bytes `chunks[rank]` of the
    /// result in `recv`. `chunks` (one per member, the same everywhere) tile `send` in rank
    /// order on element boundaries; `block` is their common length for reduce_scatter_block
    /// (its schedule is then kept), `None` for reduce_scatter.
    pub(crate) fn reduce_scatter_erased(
        &self,
        send: &[u8],
        recv: &mut [u8],
        chunks: &[Range<usize>],
        op: &ByteReduction,
        block: Option<usize>,
    ) -> Result<()> {
        let (len, elem) = (send.len(), op.element_size());
        check_elems(op, len, "reduce_scatter")?;
        let mut at = 0;
        let tiles = chunks.len() == self.size()
            && chunks.iter().all(|c| {
                let ok = c.start == at && c.end >= c.start && c.end.is_multiple_of(elem);
                at = c.end;
                ok
            })
            && at == len;
        if !tiles {
            return Err(Error::InvalidArgument(format!(
                "reduce_scatter: the chunks {chunks:?} do not tile the {len}-byte input in whole {elem}-byte elements, one per member"
            )));
        }
        let mine = chunks[self.rank()].clone();
        if recv.len() != mine.len() {
            return Err(Error::InvalidArgument(format!(
                "reduce_scatter: the receive buffer holds {} B, this member's part {} B",
                recv.len(),
                mine.len()
            )));
        }
        if len == 0 {
            // Nothing to reduce on any member (the chunks are the same everywhere): no
            // synchronisation is owed.
            return Ok(());
        }
        let ordered = !op.is_commutative();
        let step = |d: &mut [u8], s: &[u8], a: Option<&[u8]>, f: bool| op.apply(d, s, a, f);
        if let Some(r) = self
            .coll_direct(|d, env| d.reduce_scatter(env, send, recv, chunks, elem, ordered, &step))
        {
            return r;
        }
        let (s, tag) = self.reduce_scatter_schedule(chunks, len, elem, ordered, block)?;
        // The schedule works over the whole vector (partials of other members' chunks).
        let mut work = vec![0u8; len];
        self.run_schedule(&s, tag, send, &mut work, Some(&step))?;
        recv.copy_from_slice(&work[mine]);
        Ok(())
    }
}
