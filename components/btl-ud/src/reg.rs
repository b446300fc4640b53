//! A fixed-size mpool pool whose slabs are each registered with the device: the one place
//! btl-ud needs `unsafe` (registering memory the verbs layer did not allocate).

use std::sync::Arc;

use rmca_framework::memory::MemoryCounter;
use rmca_framework::mpool::{FreeListPool, Mpool, PoolBuf, PoolSpec};
use rmca_verbs::{AccessFlags, Mr, Pd, Sge};

/// A pool of buffers of `size` bytes from the mpool framework's free list, each slab
/// registered once. It grows only when told ([`RegisteredPool::grow_to`], one new slab each
/// time), never on `alloc`, so a slab never moves and every buffer lent out is registered.
#[derive(Debug)]
pub struct RegisteredPool {
    // Field order matters: the registrations are dropped before the memory they cover.
    /// `mrs[i]` covers slab `i` (`None`: its registration failed, see `unusable`).
    mrs: Vec<Option<Mr>>,
    pool: FreeListPool,
    size: usize,
    access: AccessFlags,
    /// Buffers of a slab whose registration failed: taken out of the free list for good.
    unusable: Vec<PoolBuf>,
}

impl RegisteredPool {
    /// Allocate and register `count` buffers (0: none until [`RegisteredPool::grow_to`]);
    /// the pool never holds more than `max`. `size` must be non-zero.
    pub fn new(
        pd: &Pd,
        size: usize,
        count: usize,
        max: usize,
        access: AccessFlags,
        memory: Arc<MemoryCounter>,
    ) -> Result<Self, rmca_verbs::Error> {
        assert!(size > 0, "registered pool of empty buffers");
        // grow_by == 0 and `alloc` refusing when every buffer is lent: the pool grows only
        // through grow_to, which registers the new slab.
        let spec = PoolSpec {
            buffer_size: size,
            initial: 0,
            grow_by: 0,
            max: max.max(count),
        };
        let mut p = Self {
            mrs: Vec::new(),
            pool: FreeListPool::new(spec, memory),
            size,
            access,
            unusable: Vec::new(),
        };
        p.grow_to(pd, count)?;
        Ok(p)
    }

    /// Grow to `total` buffers (at most the `max` given to [`RegisteredPool::new`]) in one new
    /// registered slab. Returns the buffers added (0 when already that large). When the
    /// registration fails the new slab stays unused (its buffers are never lent) and the
    /// error is returned.
    pub fn grow_to(&mut self, pd: &Pd, total: usize) -> Result<usize, rmca_verbs::Error> {
        let before = self.pool.capacity();
        if !self.pool.grow_to(total) {
            return Ok(0);
        }
        let index = self.pool.slab_count() - 1;
        debug_assert_eq!(index, self.mrs.len());
        let slab = self.pool.slab(index);
        let (ptr, len) = (slab.as_mut_ptr(), slab.len());
        // SAFETY: the slab is a heap allocation owned by `pool`, which lives in the same struct
        // as the Mr and is dropped after it (field order); the pool never frees or moves a
        // slab before its own drop (slabs are boxed; growing pushes a new box), so
        // `ptr..ptr+len` stays allocated while the Mr exists. The device writes only into
        // buffers posted as receives, and this module reads or writes a buffer only while it
        // is not posted (after its completion, before reposting), so safe references never
        // overlap a transfer.
        match unsafe { pd.register_raw(ptr, len, self.access) } {
            Ok(mr) => {
                self.mrs.push(Some(mr));
                Ok(self.pool.capacity() - before)
            }
            Err(e) => {
                // The pool cannot shrink: keep the slab but never lend its buffers. They are
                // the last `added` entries of the LIFO free list, so the next pops take
                // exactly them.
                self.mrs.push(None);
                let added = self.pool.capacity() - before;
                for _ in 0..added {
                    let b = self.pool.alloc().expect("the new slab's buffers are free");
                    debug_assert_eq!(b.slab(), index);
                    self.unusable.push(b);
                }
                Err(e)
            }
        }
    }

    /// Take a buffer (`None` when all are in use: the pool does not grow here).
    pub fn alloc(&mut self) -> Option<PoolBuf> {
        if self.pool.in_use() == self.pool.capacity() {
            return None;
        }
        self.pool.alloc()
    }
    /// Give a buffer back.
    pub fn free(&mut self, buf: PoolBuf) {
        self.pool.free(buf);
    }
    /// The bytes of a buffer that is not posted.
    pub fn bytes(&self, buf: &PoolBuf) -> &[u8] {
        self.pool.bytes(buf)
    }
    /// The bytes of a buffer that is not posted, writable.
    pub fn bytes_mut(&mut self, buf: &PoolBuf) -> &mut [u8] {
        self.pool.bytes_mut(buf)
    }
    /// An SGE covering the first `len` bytes of `buf`.
    pub fn sge(&self, buf: &PoolBuf, len: usize) -> Sge {
        debug_assert!(len <= self.size);
        self.mrs[buf.slab()]
            .as_ref()
            .and_then(|mr| mr.sge(self.pool.offset_in_slab(buf), len as u32).ok())
            .expect("a pool buffer lies inside its registered slab")
    }
    /// Buffer size.
    pub fn buffer_size(&self) -> usize {
        self.size
    }
    /// Buffers that can be lent (those of registered slabs).
    pub fn capacity(&self) -> usize {
        self.pool.capacity() - self.unusable.len()
    }
    /// Buffers lent out.
    pub fn in_use(&self) -> usize {
        self.pool.in_use() - self.unusable.len()
    }
}
