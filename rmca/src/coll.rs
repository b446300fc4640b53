//! Collective operations over point-to-point, on each communicator's collective context.

use rmca_framework::btl::CommPattern;

use crate::{Communicator, Result, Src};

const TAG_BARRIER: i32 = 1;
const TAG_ALLGATHER: i32 = 2;

impl Communicator {
    /// Block until every member called `barrier` (dissemination algorithm: ceil(log2 n) rounds).
    pub fn barrier(&self) -> Result<()> {
        let n = self.size();
        let me = self.rank();
        let mut dist = 1;
        while dist < n {
            let to = (me + dist) % n;
            let from = (me + n - dist) % n;
            let mut token = [0u8; 0];
            self.sendrecv_bytes(&[], to, &mut token, Src::Rank(from), TAG_BARRIER, self.coll_context(), CommPattern::Collective)?;
            dist *= 2;
        }
        Ok(())
    }
}

/// Gather `mine` from every member into `out` (rank order; `out.len() == size * mine.len()`),
/// with a ring: n-1 steps, each passing one block to the right.
pub(crate) fn allgather_into<T: bytemuck::Pod>(comm: &Communicator, mine: &[T], out: &mut [u8]) -> Result<()> {
    let block = std::mem::size_of_val(mine);
    let n = comm.size();
    let me = comm.rank();
    assert_eq!(out.len(), block * n, "allgather output size");
    out[me * block..(me + 1) * block].copy_from_slice(bytemuck::cast_slice(mine));
    let right = (me + 1) % n;
    let left = (me + n - 1) % n;
    for step in 0..n.saturating_sub(1) {
        let send_idx = (me + n - step) % n;
        let recv_idx = (me + n - step - 1) % n;
        let send = out[send_idx * block..(send_idx + 1) * block].to_vec();
        let recv = &mut out[recv_idx * block..(recv_idx + 1) * block];
        comm.sendrecv_bytes(&send, right, recv, Src::Rank(left), TAG_ALLGATHER, comm.coll_context(), CommPattern::Collective)?;
    }
    Ok(())
}
