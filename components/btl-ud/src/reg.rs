//! A fixed-size mpool pool whose single slab is registered with the device: the one place
//! btl-ud needs `unsafe` (registering memory the verbs layer did not allocate).

use std::sync::Arc;

use rmca_framework::memory::MemoryCounter;
use rmca_framework::mpool::{FreeListPool, Mpool, PoolBuf, PoolSpec};
use rmca_verbs::{AccessFlags, Mr, Pd, Sge};

/// A pool of `count` buffers of `size` bytes, allocated once from the mpool framework's free
/// list and registered once. It never grows, so its one slab never moves.
#[derive(Debug)]
pub struct RegisteredPool {
    // Field order matters: the registration is dropped before the memory it covers.
    mr: Mr,
    pool: FreeListPool,
    size: usize,
}

impl RegisteredPool {
    /// Allocate and register. `count` and `size` must be non-zero.
    pub fn new(
        pd: &Pd,
        size: usize,
        count: usize,
        access: AccessFlags,
        memory: Arc<MemoryCounter>,
    ) -> Result<Self, rmca_verbs::Error> {
        assert!(size > 0 && count > 0, "empty registered pool");
        // initial == max and grow_by == 0: one slab, allocated here, never grown.
        let spec = PoolSpec {
            buffer_size: size,
            initial: count,
            grow_by: 0,
            max: count,
        };
        let mut pool = FreeListPool::new(spec, memory);
        debug_assert_eq!(pool.slab_count(), 1);
        let slab = pool.slab(0);
        let (ptr, len) = (slab.as_mut_ptr(), slab.len());
        // SAFETY: the slab is a heap allocation owned by `pool`, which lives in the same struct
        // as the returned Mr and is dropped after it (field order), and never grows or frees a
        // slab before its own drop, so `ptr..ptr+len` stays allocated while the Mr exists.
        // The device writes only into buffers posted as receives, and this module reads or
        // writes a buffer only while it is not posted (after its completion, before reposting),
        // so safe references never overlap a transfer.
        let mr = unsafe { pd.register_raw(ptr, len, access) }?;
        Ok(Self { mr, pool, size })
    }

    /// Take a buffer (`None` when all are in use).
    pub fn alloc(&mut self) -> Option<PoolBuf> {
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
        self.mr
            .sge(self.pool.offset_in_slab(buf), len as u32)
            .expect("a pool buffer lies inside the registered slab")
    }
    /// Buffer size.
    pub fn buffer_size(&self) -> usize {
        self.size
    }
    /// Buffers in total.
    pub fn capacity(&self) -> usize {
        self.pool.capacity()
    }
    /// Buffers lent out.
    pub fn in_use(&self) -> usize {
        self.pool.in_use()
    }
}
