//! Prefix reductions: scan (inclusive) and exscan (exclusive).

use super::{reduce_step, schedule, Reduction, SchedKey, TAG_EXSCAN, TAG_SCAN};
use crate::{Communicator, Result};

impl Communicator {
    /// Inclusive prefix reduction: member r gets `send(0) op send(1) op ... op send(r)` in
    /// `recv` (same length as `send`, the same everywhere), combined in rank order (so a
    /// non-commutative [`UserOp`](super::UserOp) is fine).
    ///
    /// ```no_run
    /// # let universe = rmca::init().unwrap();
    /// # let world = universe.world();
    /// // Running 2x2 matrix products over the ranks (not commutative: rank order is kept).
    /// let matmul = rmca::coll::UserOp::non_commutative(|a: [i64; 4], b: [i64; 4]| {
    ///     [a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3],
    ///      a[2] * b[0] + a[3] * b[2], a[2] * b[1] + a[3] * b[3]]
    /// });
    /// let mut prefix = [[1, world.rank() as i64, 0, 1]];
    /// world.scan_in_place(&mut prefix, &matmul).unwrap();
    /// ```
    pub fn scan<T: bytemuck::Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: impl Reduction<T>,
    ) -> Result<()> {
        self.prefix(send, recv, &op, false)
    }

    /// Exclusive prefix reduction: member r > 0 gets `send(0) op ... op send(r-1)` in
    /// `recv`. Member 0's `recv` is left untouched (MPI leaves it undefined; here it keeps
    /// whatever the caller put there).
    pub fn exscan<T: bytemuck::Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: impl Reduction<T>,
    ) -> Result<()> {
        self.prefix(send, recv, &op, true)
    }

    pub(super) fn prefix<T: bytemuck::Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: &impl Reduction<T>,
        exclusive: bool,
    ) -> Result<()> {
        let what = if exclusive { "exscan" } else { "scan" };
        op.check()?;
        super::check_len(what, "receive buffer", recv.len(), send.len())?;
        let me = self.rank();
        let len = std::mem::size_of_val(send);
        if len == 0 {
            // Nothing to combine on any member (the count is the same everywhere): no
            // synchronisation is owed.
            return Ok(());
        }
        let (s, tag) = self.prefix_schedule(len, exclusive)?;
        // [partial | result], typed so that the reduction kernels see aligned elements.
        let mut work = vec![T::zeroed(); 2 * send.len()];
        self.run_schedule(
            &s,
            tag,
            bytemuck::cast_slice(send),
            bytemuck::cast_slice_mut(&mut work),
            Some(&reduce_step(op)),
        )?;
        if !(exclusive && me == 0) {
            recv.copy_from_slice(&work[send.len()..]);
        }
        Ok(())
    }

    /// The schedule (and tag) of a prefix reduction of `len` bytes: it works over
    /// `[partial | result]`, 2 × `len` bytes of `Work`.
    pub(super) fn prefix_schedule(
        &self,
        len: usize,
        exclusive: bool,
    ) -> Result<(std::rc::Rc<schedule::Schedule>, i32)> {
        let tag = if exclusive { TAG_EXSCAN } else { TAG_SCAN };
        // Scans keep rank order whatever the operation, so the key needs no `ordered` flag.
        let s = self.schedule(SchedKey::new(tag, 0, len, 0), || {
            self.coll_provide("scan", |m| m.scan(len, exclusive))
        })?;
        Ok((s, tag))
    }
}
