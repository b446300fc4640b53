//! In-place forms of the collectives (MPI's `MPI_IN_PLACE`): one buffer is both the input
//! and the output. Operations of all members take the buffer on every member; rooted ones
//! are called by the root only, while the other members make the ordinary call (as in MPI,
//! where only the root passes `MPI_IN_PLACE`). Where the algorithm reads its input after
//! writing results, the input is copied first (one pass over the buffer).

use super::{allgather_bytes, Reduction};
use crate::{Communicator, Error, Result};

impl Communicator {
    /// Rooted in-place forms are for the root only.
    fn check_in_place_root(&self, what: &str, root: usize) -> Result<()> {
        self.check_root(root)?;
        if self.rank() == root {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "{what}_in_place: only the root (rank {root}) works in place; rank {} calls {what}",
                self.rank()
            )))
        }
    }

    /// Blocks of `len` elements split among the members (size must divide it).
    fn blocks_of(&self, what: &str, len: usize) -> Result<usize> {
        let n = self.size();
        if len.is_multiple_of(n) {
            Ok(len / n)
        } else {
            Err(Error::InvalidArgument(format!(
                "{what}: buffer of {len} elements is not a multiple of the size {n}"
            )))
        }
    }

    /// [`Communicator::allreduce`] with `buf` as both input and result.
    pub fn allreduce_in_place<T: bytemuck::Pod>(
        &self,
        buf: &mut [T],
        op: impl Reduction<T>,
    ) -> Result<()> {
        op.check()?;
        let input = buf.to_vec();
        self.allreduce_bytes(
            bytemuck::cast_slice(&input),
            bytemuck::cast_slice_mut(buf),
            &op,
        )
    }

    /// [`Communicator::reduce`] at the root with `buf` as both its input and the result
    /// (root only; the other members call `reduce` with no receive buffer).
    pub fn reduce_in_place<T: bytemuck::Pod>(
        &self,
        buf: &mut [T],
        op: impl Reduction<T>,
        root: usize,
    ) -> Result<()> {
        self.check_in_place_root("reduce", root)?;
        op.check()?;
        let input = buf.to_vec();
        self.reduce_bytes(
            bytemuck::cast_slice(&input),
            bytemuck::cast_slice_mut(buf),
            &op,
            root,
        )
    }

    /// [`Communicator::gather`] at the root, whose own block is already in place (block
    /// `root` of `buf`, size × k elements). Root only; the others call `gather`.
    pub fn gather_in_place<T: bytemuck::Pod>(&self, buf: &mut [T], root: usize) -> Result<()> {
        self.check_in_place_root("gather", root)?;
        let block = self.blocks_of("gather_in_place", buf.len())? * std::mem::size_of::<T>();
        let work: &mut [u8] = bytemuck::cast_slice_mut(buf);
        // The leaves call `gather`, which a direct form may serve: so must the root (its own
        // block copied out, the direct forms take apart buffers).
        let own = work[root * block..(root + 1) * block].to_vec();
        if let Some(r) = self.coll_direct(|d, env| d.gather(env, &own, work, root)) {
            return r;
        }
        // Rank order to the schedule's virtual-rank order (own block first) and back.
        work.rotate_left(root * block);
        let r = self.gather_virtual(work, block, root);
        work.rotate_right(root * block);
        r
    }

    /// [`Communicator::gatherv`] at the root, whose own block is already in place
    /// (`buf[displs[root]..][..counts[root]]`). Root only; the others call `gatherv`.
    pub fn gatherv_in_place<T: bytemuck::Pod>(
        &self,
        buf: &mut [T],
        counts: &[usize],
        displs: &[usize],
        root: usize,
    ) -> Result<()> {
        self.check_in_place_root("gatherv", root)?;
        let regions = self.gather_layout::<T>("gatherv_in_place", buf.len(), counts, displs)?;
        self.gatherv_bytes(&[], bytemuck::cast_slice_mut(buf), &regions, root, true)
    }

    /// [`Communicator::scatter`] at the root, whose own block stays where it is in `buf`
    /// (size × k elements, unchanged). Root only; the others call `scatter`.
    pub fn scatter_in_place<T: bytemuck::Pod>(&self, buf: &[T], root: usize) -> Result<()> {
        self.check_in_place_root("scatter", root)?;
        let block = self.blocks_of("scatter_in_place", buf.len())? * std::mem::size_of::<T>();
        // The leaves call `scatter`, which a direct form may serve: so must the root (its
        // own block to scratch: it stays where it is).
        let input = bytemuck::cast_slice::<T, u8>(buf);
        let mut own = vec![0u8; block];
        if let Some(r) = self.coll_direct(|d, env| d.scatter(env, input, &mut own, root)) {
            return r;
        }
        // The schedule forwards subtrees from the buffer it works on: a rotated copy.
        let mut work = bytemuck::cast_slice::<T, u8>(buf).to_vec();
        work.rotate_left(root * block);
        self.scatter_virtual(&mut work, block, root)
    }

    /// [`Communicator::scatterv`] at the root, whose own region stays where it is in `buf`.
    /// Root only; the others call `scatterv`.
    pub fn scatterv_in_place<T: bytemuck::Pod>(
        &self,
        buf: &[T],
        counts: &[usize],
        displs: &[usize],
        root: usize,
    ) -> Result<()> {
        self.check_in_place_root("scatterv", root)?;
        let regions = self.scatter_layout::<T>(buf.len(), counts, displs)?;
        self.scatterv_bytes(bytemuck::cast_slice(buf), &mut [], &regions, root, true)
    }

    /// [`Communicator::allgather`] with every member's own block already in place (block
    /// `rank` of `buf`, size × k elements).
    pub fn allgather_in_place<T: bytemuck::Pod>(&self, buf: &mut [T]) -> Result<()> {
        let block = self.blocks_of("allgather_in_place", buf.len())? * std::mem::size_of::<T>();
        allgather_bytes(self, None, block, bytemuck::cast_slice_mut(buf))
    }

    /// [`Communicator::allgatherv`] with every member's own region already in place
    /// (`buf[displs[rank]..][..counts[rank]]`).
    pub fn allgatherv_in_place<T: bytemuck::Pod>(
        &self,
        buf: &mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<()> {
        let regions = self.gather_layout::<T>("allgatherv_in_place", buf.len(), counts, displs)?;
        self.allgatherv_bytes(&[], bytemuck::cast_slice_mut(buf), &regions, true)
    }

    /// [`Communicator::alltoall`] with `buf` as both the blocks sent and the blocks received.
    pub fn alltoall_in_place<T: bytemuck::Pod>(&self, buf: &mut [T]) -> Result<()> {
        self.blocks_of("alltoall_in_place", buf.len())?;
        let input = buf.to_vec();
        self.alltoall(&input, buf)
    }

    /// [`Communicator::reduce_scatter_block`] with `buf` (size × k elements) as the input;
    /// this member's block of the result is written to `buf[..k]`, the rest of `buf` keeps
    /// its input values.
    pub fn reduce_scatter_block_in_place<T: bytemuck::Pod>(
        &self,
        buf: &mut [T],
        op: impl Reduction<T>,
    ) -> Result<()> {
        let k = self.blocks_of("reduce_scatter_block_in_place", buf.len())?;
        let input = buf.to_vec();
        self.reduce_scatter_block(&input, &mut buf[..k], op)
    }

    /// [`Communicator::reduce_scatter`] with `buf` as the input; this member's
    /// `counts[rank]` elements of the result are written to the start of `buf`, the rest
    /// keeps its input values.
    pub fn reduce_scatter_in_place<T: bytemuck::Pod>(
        &self,
        buf: &mut [T],
        counts: &[usize],
        op: impl Reduction<T>,
    ) -> Result<()> {
        // Checked here too, so that a bad count is an error rather than a slice panic.
        self.reduce_scatter_chunks::<T>(buf.len(), counts)?;
        let mine = counts[self.rank()];
        let input = buf.to_vec();
        self.reduce_scatter(&input, &mut buf[..mine], counts, op)
    }

    /// [`Communicator::scan`] with `buf` as both input and result.
    pub fn scan_in_place<T: bytemuck::Pod>(
        &self,
        buf: &mut [T],
        op: impl Reduction<T>,
    ) -> Result<()> {
        let input = buf.to_vec();
        self.prefix(&input, buf, &op, false)
    }

    /// [`Communicator::exscan`] with `buf` as both input and result; member 0's `buf` keeps
    /// its input.
    pub fn exscan_in_place<T: bytemuck::Pod>(
        &self,
        buf: &mut [T],
        op: impl Reduction<T>,
    ) -> Result<()> {
        let input = buf.to_vec();
        self.prefix(&input, buf, &op, true)
    }
}
