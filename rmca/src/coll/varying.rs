//! Collectives with per-rank counts (gatherv, scatterv, allgatherv) and reduce_scatter.

use std::ops::Range;

use super::{
    check_disjoint, check_len, check_regions, layout, reduce_step, schedule, Reduction, SchedKey,
    TAG_ALLGATHERV, TAG_GATHERV, TAG_REDUCE_SCATTER, TAG_REDUCE_SCATTER_BLOCK, TAG_SCATTERV,
};
use crate::{Communicator, Error, Result};

impl Communicator {
    /// Gather a varying number of elements from every member at `root`: member r's `send`
    /// (`counts[r]` elements) lands in `recv[displs[r]..][..counts[r]]`. `recv`, `counts`
    /// and `displs` are required at the root (one count and displacement per member; the
    /// regions must fit in `recv` and not overlap) and ignored elsewhere (pass `None` and
    /// empty slices).
    ///
    /// ```no_run
    /// # let universe = rmca::init().unwrap();
    /// # let world = universe.world();
    /// // Rank r contributes r + 1 values; rank 0 packs them back to back.
    /// let (n, me) = (world.size(), world.rank());
    /// let mine = vec![me as u32; me + 1];
    /// let counts: Vec<usize> = (0..n).map(|r| r + 1).collect();
    /// let displs: Vec<usize> = (0..n).map(|r| r * (r + 1) / 2).collect();
    /// let mut all = vec![0u32; n * (n + 1) / 2];
    /// let recv = (me == 0).then_some(&mut all[..]);
    /// world.gatherv(&mine, recv, &counts, &displs, 0).unwrap();
    /// ```
    pub fn gatherv<T: bytemuck::Pod>(
        &self,
        send: &[T],
        recv: Option<&mut [T]>,
        counts: &[usize],
        displs: &[usize],
        root: usize,
    ) -> Result<()> {
        self.check_root(root)?;
        if self.rank() != root {
            return self.gatherv_bytes(bytemuck::cast_slice(send), &mut [], &[], root, false);
        }
        let recv = recv.ok_or_else(|| {
            Error::InvalidArgument("gatherv: the root must pass a receive buffer".into())
        })?;
        let regions = self.gather_layout::<T>("gatherv", recv.len(), counts, displs)?;
        check_len(
            "gatherv",
            "the root's send buffer",
            send.len(),
            counts[root],
        )?;
        self.gatherv_bytes(
            bytemuck::cast_slice(send),
            bytemuck::cast_slice_mut(recv),
            &regions,
            root,
            false,
        )
    }

    /// Receive regions of a gatherv/allgatherv, checked against the buffer and each other.
    pub(super) fn gather_layout<T>(
        &self,
        what: &str,
        len: usize,
        counts: &[usize],
        displs: &[usize],
    ) -> Result<Vec<Range<usize>>> {
        let regions = layout(
            what,
            "receive",
            self.size(),
            len,
            counts,
            displs,
            std::mem::size_of::<T>(),
        )?;
        check_disjoint(what, &regions)?;
        Ok(regions)
    }

    /// Gatherv over bytes: `work` and `regions` are the root's (empty elsewhere).
    pub(super) fn gatherv_bytes(
        &self,
        send: &[u8],
        work: &mut [u8],
        regions: &[Range<usize>],
        root: usize,
        in_place: bool,
    ) -> Result<()> {
        let mine = if self.rank() == root {
            regions[root].len()
        } else {
            send.len()
        };
        let s = self.coll_provide("gatherv", |m| m.gatherv(root, mine, regions, in_place))?;
        self.run_schedule(&s, TAG_GATHERV, send, work, None)
    }

    /// Scatter a varying number of elements from `root`: member r receives
    /// `send[displs[r]..][..counts[r]]` into `recv` (`counts[r]` elements). `send`, `counts`
    /// and `displs` are required at the root (one count and displacement per member, each
    /// region inside `send`; regions may overlap, they are only read) and ignored elsewhere.
    pub fn scatterv<T: bytemuck::Pod>(
        &self,
        send: Option<&[T]>,
        counts: &[usize],
        displs: &[usize],
        recv: &mut [T],
        root: usize,
    ) -> Result<()> {
        self.check_root(root)?;
        let recv_len = recv.len();
        let recv_bytes: &mut [u8] = bytemuck::cast_slice_mut(recv);
        if self.rank() != root {
            return self.scatterv_bytes(&[], recv_bytes, &[], root, false);
        }
        let send = send.ok_or_else(|| {
            Error::InvalidArgument("scatterv: the root must pass a send buffer".into())
        })?;
        let regions = self.scatter_layout::<T>(send.len(), counts, displs)?;
        check_len(
            "scatterv",
            "the root's receive buffer",
            recv_len,
            counts[root],
        )?;
        self.scatterv_bytes(
            bytemuck::cast_slice(send),
            recv_bytes,
            &regions,
            root,
            false,
        )
    }

    /// Send regions of a scatterv, checked against the buffer.
    pub(super) fn scatter_layout<T>(
        &self,
        len: usize,
        counts: &[usize],
        displs: &[usize],
    ) -> Result<Vec<Range<usize>>> {
        layout(
            "scatterv",
            "send",
            self.size(),
            len,
            counts,
            displs,
            std::mem::size_of::<T>(),
        )
    }

    /// Scatterv over bytes: `send` and `regions` are the root's (empty elsewhere).
    pub(super) fn scatterv_bytes(
        &self,
        send: &[u8],
        work: &mut [u8],
        regions: &[Range<usize>],
        root: usize,
        in_place: bool,
    ) -> Result<()> {
        let mine = if self.rank() == root {
            regions[root].len()
        } else {
            work.len()
        };
        let s = self.coll_provide("scatterv", |m| m.scatterv(root, mine, regions, in_place))?;
        self.run_schedule(&s, TAG_SCATTERV, send, work, None)
    }

    /// Gather a varying number of elements from every member into every member's `recv`:
    /// member r's `send` (`counts[r]` elements) lands in `recv[displs[r]..][..counts[r]]`
    /// everywhere. Every member passes the same `counts` and `displs` (one per member; the
    /// regions must fit in `recv` and not overlap).
    pub fn allgatherv<T: bytemuck::Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<()> {
        let regions = self.gather_layout::<T>("allgatherv", recv.len(), counts, displs)?;
        check_len("allgatherv", "send buffer", send.len(), counts[self.rank()])?;
        self.allgatherv_bytes(
            bytemuck::cast_slice(send),
            bytemuck::cast_slice_mut(recv),
            &regions,
            false,
        )
    }

    /// [`Communicator::allgatherv`] over bytes, the blocks given as byte ranges rather than
    /// counts and displacements (what a caller that computed them already, like the C
    /// library, passes without a conversion): member r's `send` lands in `recv[regions[r]]`
    /// everywhere. One range per member, inside `recv`, not overlapping; this member's as
    /// long as `send`.
    pub fn allgatherv_regions(
        &self,
        send: &[u8],
        recv: &mut [u8],
        regions: &[Range<usize>],
    ) -> Result<()> {
        check_regions("allgatherv", "receive", self.size(), recv.len(), regions)?;
        check_disjoint("allgatherv", regions)?;
        let mine = regions[self.rank()].len();
        check_len("allgatherv", "send buffer", send.len(), mine)?;
        self.allgatherv_bytes(send, recv, regions, false)
    }

    /// Allgatherv over bytes (`send` is unused in place).
    pub(super) fn allgatherv_bytes(
        &self,
        send: &[u8],
        work: &mut [u8],
        regions: &[Range<usize>],
        in_place: bool,
    ) -> Result<()> {
        if !in_place {
            // In place takes the schedules: a direct form reads `send` apart from `work`.
            if let Some(r) = self.coll_direct(|d, env| d.allgatherv(env, send, work, regions)) {
                return r;
            }
        }
        let s = self.coll_provide("allgatherv", |m| m.allgatherv(regions, in_place))?;
        self.run_schedule(&s, TAG_ALLGATHERV, send, work, None)
    }

    /// Reduce every member's `send` (size × `recv.len()` elements) with `op`, and scatter
    /// the result in equal blocks: member r gets elements `r * k..(r + 1) * k` of the
    /// reduction in `recv` (k = `recv.len()`, the same everywhere).
    pub fn reduce_scatter_block<T: bytemuck::Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: impl Reduction<T>,
    ) -> Result<()> {
        op.check()?;
        let (n, k) = (self.size(), recv.len());
        check_len("reduce_scatter_block", "send buffer", send.len(), n * k)?;
        let sz = std::mem::size_of::<T>();
        let chunks: Vec<Range<usize>> = (0..n).map(|r| r * k * sz..(r + 1) * k * sz).collect();
        self.reduce_scatter_elems(send, recv, &chunks, &op, Some(k * sz))
    }

    /// Reduce every member's `send` with `op`, and scatter the result: member r gets the
    /// `counts[r]` elements that follow the first `counts[0] + ... + counts[r-1]` in `recv`
    /// (`counts` has one entry per member, the same everywhere, and sums to `send.len()`;
    /// `recv.len()` is this member's count).
    pub fn reduce_scatter<T: bytemuck::Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        op: impl Reduction<T>,
    ) -> Result<()> {
        op.check()?;
        let chunks = self.reduce_scatter_chunks::<T>(send.len(), counts)?;
        check_len(
            "reduce_scatter",
            "receive buffer",
            recv.len(),
            counts[self.rank()],
        )?;
        self.reduce_scatter_elems(send, recv, &chunks, &op, None)
    }

    /// The byte chunks of a reduce_scatter: `counts` tiling `len` elements in rank order.
    pub(super) fn reduce_scatter_chunks<T>(
        &self,
        len: usize,
        counts: &[usize],
    ) -> Result<Vec<Range<usize>>> {
        let n = self.size();
        if counts.len() != n {
            return Err(Error::InvalidArgument(format!(
                "reduce_scatter: counts ({}) need one entry per rank ({n})",
                counts.len()
            )));
        }
        if counts.iter().try_fold(0usize, |a, &c| a.checked_add(c)) != Some(len) {
            return Err(Error::InvalidArgument(format!(
                "reduce_scatter: the counts {counts:?} must add up to the send buffer's {len} elements"
            )));
        }
        let sz = std::mem::size_of::<T>();
        let mut off = 0;
        Ok(counts
            .iter()
            .map(|&c| {
                off += c * sz;
                off - c * sz..off
            })
            .collect())
    }

    /// Reduce_scatter over checked `chunks`; `block` is the chunk size of
    /// reduce_scatter_block (equal chunks: the schedule is then kept), `None` for
    /// reduce_scatter.
    pub(super) fn reduce_scatter_elems<T: bytemuck::Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        chunks: &[Range<usize>],
        op: &impl Reduction<T>,
        block: Option<usize>,
    ) -> Result<()> {
        let me = self.rank();
        let len = std::mem::size_of_val(send);
        let elem = std::mem::size_of::<T>();
        let ordered = !op.is_commutative();
        if len == 0 {
            // Nothing to reduce on any member (the counts are the same everywhere): no
            // synchronisation is owed (OSU's reduce_scatter_block of 1 byte on 2 ranks).
            return Ok(());
        }
        {
            // A direct form reads every member's whole input and writes this member's
            // block alone: no partials of other blocks.
            let step = reduce_step(op);
            let (input, out) = (
                bytemuck::cast_slice::<T, u8>(send),
                bytemuck::cast_slice_mut::<T, u8>(recv),
            );
            if let Some(r) = self.coll_direct(|d, env| {
                d.reduce_scatter(env, input, out, chunks, elem, ordered, &step)
            }) {
                return r;
            }
        }
        let (s, tag) = self.reduce_scatter_schedule(chunks, len, elem, ordered, block)?;
        // The schedule works over the whole vector (partials of other ranks' chunks);
        // typed, so that the reduction kernels see aligned elements.
        let mut work = vec![T::zeroed(); send.len()];
        self.run_schedule(
            &s,
            tag,
            bytemuck::cast_slice(send),
            bytemuck::cast_slice_mut(&mut work),
            Some(&reduce_step(op)),
        )?;
        bytemuck::cast_slice_mut::<T, u8>(recv)
            .copy_from_slice(&bytemuck::cast_slice::<T, u8>(&work)[chunks[me].clone()]);
        Ok(())
    }

    /// The schedule (and tag) of a reduce_scatter of `len` bytes over `chunks`, elements of
    /// `elem` bytes; `ordered` for a non-commutative operation, `block` as in
    /// [`Communicator::reduce_scatter_elems`].
    pub(super) fn reduce_scatter_schedule(
        &self,
        chunks: &[Range<usize>],
        len: usize,
        elem: usize,
        ordered: bool,
        block: Option<usize>,
    ) -> Result<(std::rc::Rc<schedule::Schedule>, i32)> {
        debug_assert_eq!(chunks.last().map_or(0, |c| c.end), len);
        let build = || {
            self.coll_provide("reduce_scatter", |m| {
                m.reduce_scatter(chunks, elem, ordered)
            })
        };
        let (s, tag) = match block {
            Some(b) => (
                self.schedule(
                    SchedKey::new(TAG_REDUCE_SCATTER_BLOCK, 0, b, elem).ordered(ordered),
                    build,
                )?,
                TAG_REDUCE_SCATTER_BLOCK,
            ),
            None => (std::rc::Rc::new(build()?), TAG_REDUCE_SCATTER),
        };
        Ok((s, tag))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{check_disjoint, check_regions};
    use crate::Error;

    fn overlap(regions: &[std::ops::Range<usize>]) -> Option<String> {
        match check_disjoint("t", regions) {
            Ok(()) => None,
            Err(Error::InvalidArgument(m)) => Some(m),
            Err(e) => panic!("unexpected error {e:?}"),
        }
    }

    #[test]
    fn ordered_regions_are_checked_in_one_pass() {
        assert_eq!(overlap(&[0..4, 4..4, 4..8, 8..8, 9..10]), None);
        // Empty regions anywhere are no overlap, even inside another region.
        assert_eq!(overlap(&[0..4, 2..2, 4..8]), None);
        assert_eq!(
            overlap(&[0..4, 4..6, 5..8]).as_deref(),
            Some("t: receive regions of ranks 1 and 2 overlap")
        );
        assert_eq!(
            overlap(&[0..4, 0..4]).as_deref(),
            Some("t: receive regions of ranks 0 and 1 overlap")
        );
    }

    #[test]
    fn unordered_regions_name_the_pair_the_sorted_order_finds() {
        assert_eq!(overlap(&[8..12, 4..8, 0..4]), None);
        // In rank order 0..10 and 5..6 overlap first, but rank 2 breaks the order: the
        // pair reported is the first in start order (ranks 2 and 0).
        assert_eq!(
            overlap(&[1..10, 5..6, 0..2]).as_deref(),
            Some("t: receive regions of ranks 2 and 0 overlap")
        );
    }

    #[test]
    fn regions_must_be_one_per_rank_and_inside_the_buffer() {
        assert!(check_regions("t", "receive", 2, 8, &[0..4, 4..8]).is_ok());
        assert!(check_regions("t", "receive", 3, 8, &[0..4, 4..8]).is_err());
        assert!(check_regions("t", "receive", 2, 7, &[0..4, 4..8]).is_err());
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = [4..2, 4..8];
        assert!(check_regions("t", "receive", 2, 8, &backwards).is_err());
    }
}
