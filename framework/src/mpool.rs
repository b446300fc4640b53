//! The MPool framework: pools of fixed-size buffers (free lists), grown in slabs so that a
//! BTL can register each slab once with its device (Open MPI's `mpool` + `ompi_free_list`).
//!
//! Buffers are handles ([`PoolBuf`]) into slabs owned by the pool, so the pool can be
//! accounted and registered without unsafe code; the BTL reads and writes them through the pool.

use std::sync::Arc;

use crate::base::{Component, ComponentMeta};
use crate::memory::MemoryCounter;
use crate::params::{Level, Param, ParamRegistrar, ParamStore};

/// How a pool should be shaped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolSpec {
    /// Size of every buffer.
    pub buffer_size: usize,
    /// Buffers allocated up front.
    pub initial: usize,
    /// Buffers added when the pool runs dry.
    pub grow_by: usize,
    /// Upper bound on buffers (`alloc` returns `None` past it).
    pub max: usize,
}

/// A buffer lent by a pool.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct PoolBuf {
    slab: u32,
    index: u32,
}

impl PoolBuf {
    /// Which slab the buffer lives in (see [`Mpool::slab`]).
    pub fn slab(&self) -> usize {
        self.slab as usize
    }
    /// A stable number identifying the buffer within its pool (e.g. a verbs `wr_id`).
    pub fn id(&self) -> u64 {
        (u64::from(self.slab) << 32) | u64::from(self.index)
    }
    /// Rebuild a handle from [`PoolBuf::id`] (for completions that only carry the id).
    pub fn from_id(id: u64) -> Self {
        Self {
            slab: (id >> 32) as u32,
            index: id as u32,
        }
    }
}

/// A pool of equally sized buffers.
pub trait Mpool: Send {
    /// Take a buffer, growing the pool if allowed. `None` when the pool is at its maximum.
    fn alloc(&mut self) -> Option<PoolBuf>;
    /// Give a buffer back.
    fn free(&mut self, buf: PoolBuf);
    /// The bytes of a buffer.
    fn bytes(&self, buf: &PoolBuf) -> &[u8];
    /// The bytes of a buffer, writable.
    fn bytes_mut(&mut self, buf: &PoolBuf) -> &mut [u8];
    /// A slab's memory, for registration with a device (its address is stable for the pool's life).
    fn slab(&mut self, index: usize) -> &mut [u8];
    /// Number of slabs so far (a BTL registers new ones after `alloc` grew the pool).
    fn slab_count(&self) -> usize;
    /// Byte offset of `buf` inside its slab.
    fn offset_in_slab(&self, buf: &PoolBuf) -> usize;
    /// Buffers allocated in total (free and lent).
    fn capacity(&self) -> usize;
    /// Buffers currently lent out.
    fn in_use(&self) -> usize;
}

/// An MPool component: the factory of pools.
pub trait MpoolComponent: Component {
    /// Create a pool; memory it holds is recorded in `memory`.
    fn create(
        &self,
        params: &ParamStore,
        spec: PoolSpec,
        memory: Arc<MemoryCounter>,
    ) -> Box<dyn Mpool>;
}

/// The default pool: slabs of `grow_by` buffers, a LIFO free list (hot buffers stay in cache).
#[derive(Debug)]
pub struct FreeListPool {
    spec: PoolSpec,
    slabs: Vec<Box<[u8]>>,
    free: Vec<PoolBuf>,
    capacity: usize,
    memory: Arc<MemoryCounter>,
}

impl FreeListPool {
    /// A pool shaped by `spec`, charging `memory`.
    pub fn new(spec: PoolSpec, memory: Arc<MemoryCounter>) -> Self {
        let mut pool = Self {
            spec,
            slabs: Vec::new(),
            free: Vec::new(),
            capacity: 0,
            memory,
        };
        let initial = pool.spec.initial.min(pool.spec.max);
        if initial > 0 {
            pool.grow(initial);
        }
        pool
    }

    /// Grow to `total` buffers (at most the spec's `max`) in one new slab, whatever
    /// `grow_by` says: for a user that sizes the pool in steps it chooses (btl-ud posts a few
    /// receive buffers at open and the rest once it carries traffic). Returns whether the pool
    /// grew.
    pub fn grow_to(&mut self, total: usize) -> bool {
        total > self.capacity && self.grow(total - self.capacity)
    }

    fn grow(&mut self, count: usize) -> bool {
        let count = count.min(self.spec.max - self.capacity);
        if count == 0 || self.spec.buffer_size == 0 {
            return false;
        }
        let bytes = count * self.spec.buffer_size;
        self.slabs.push(vec![0u8; bytes].into_boxed_slice());
        self.memory.alloc(bytes);
        let slab = (self.slabs.len() - 1) as u32;
        // Reverse so that the first alloc hands out index 0 (LIFO pop from the end).
        self.free
            .extend((0..count as u32).rev().map(|index| PoolBuf { slab, index }));
        self.capacity += count;
        true
    }
}

impl Drop for FreeListPool {
    fn drop(&mut self) {
        let total: usize = self.slabs.iter().map(|s| s.len()).sum();
        self.memory.free(total);
    }
}

impl Mpool for FreeListPool {
    fn alloc(&mut self) -> Option<PoolBuf> {
        if self.free.is_empty() && !self.grow(self.spec.grow_by.max(1)) {
            return None;
        }
        self.free.pop()
    }
    fn free(&mut self, buf: PoolBuf) {
        debug_assert!((buf.slab as usize) < self.slabs.len());
        self.free.push(buf);
    }
    fn bytes(&self, buf: &PoolBuf) -> &[u8] {
        let off = buf.index as usize * self.spec.buffer_size;
        &self.slabs[buf.slab as usize][off..off + self.spec.buffer_size]
    }
    fn bytes_mut(&mut self, buf: &PoolBuf) -> &mut [u8] {
        let off = buf.index as usize * self.spec.buffer_size;
        &mut self.slabs[buf.slab as usize][off..off + self.spec.buffer_size]
    }
    fn slab(&mut self, index: usize) -> &mut [u8] {
        &mut self.slabs[index]
    }
    fn slab_count(&self) -> usize {
        self.slabs.len()
    }
    fn offset_in_slab(&self, buf: &PoolBuf) -> usize {
        buf.index as usize * self.spec.buffer_size
    }
    fn capacity(&self) -> usize {
        self.capacity
    }
    fn in_use(&self) -> usize {
        self.capacity - self.free.len()
    }
}

/// The built-in `default` mpool component.
#[derive(Debug)]
pub struct DefaultMpoolComponent;

impl Component for DefaultMpoolComponent {
    fn meta(&self) -> ComponentMeta {
        ComponentMeta {
            name: "default",
            version: env!("CARGO_PKG_VERSION"),
            description: "free lists of fixed-size buffers grown in registrable slabs",
        }
    }
    fn register_params(&self, params: &mut ParamRegistrar<'_>) {
        params.add(
            Param::bool("zero_fill", true)
                .help("Zero new slabs (always true for the default pool: slabs come from the zeroing allocator)")
                .level(Level::Dev),
        );
    }
}

impl MpoolComponent for DefaultMpoolComponent {
    fn create(
        &self,
        _params: &ParamStore,
        spec: PoolSpec,
        memory: Arc<MemoryCounter>,
    ) -> Box<dyn Mpool> {
        Box::new(FreeListPool::new(spec, memory))
    }
}

/// The `default` component instance (registered as a built-in by [`crate::component`]).
pub static DEFAULT_MPOOL: DefaultMpoolComponent = DefaultMpoolComponent;

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(max: usize) -> PoolSpec {
        PoolSpec {
            buffer_size: 64,
            initial: 2,
            grow_by: 2,
            max,
        }
    }

    #[test]
    fn grows_in_slabs_up_to_max_and_reuses() {
        let mem = Arc::new(MemoryCounter::default());
        let mut p = FreeListPool::new(spec(5), mem.clone());
        let bufs: Vec<_> = (0..5).map(|_| p.alloc().expect("within max")).collect();
        assert!(p.alloc().is_none(), "max is a hard bound");
        assert_eq!((p.slab_count(), p.capacity(), p.in_use()), (3, 5, 5));
        assert_eq!(mem.peak(), 5 * 64);
        let id = bufs[4].id();
        for b in bufs {
            p.free(b);
        }
        assert_eq!(p.in_use(), 0);
        let again = p.alloc().unwrap();
        assert_eq!(
            again.id(),
            id,
            "LIFO: the most recently freed buffer comes back first"
        );
    }

    #[test]
    fn grow_to_adds_one_slab_up_to_max() {
        let mem = Arc::new(MemoryCounter::default());
        let mut p = FreeListPool::new(spec(10), mem.clone());
        assert!(p.grow_to(7));
        assert_eq!((p.slab_count(), p.capacity(), p.in_use()), (2, 7, 0));
        assert!(!p.grow_to(7), "already that large");
        assert!(p.grow_to(50), "clamped to max");
        assert_eq!((p.slab_count(), p.capacity()), (3, 10));
        assert_eq!(mem.current(), 10 * 64);
    }

    #[test]
    fn buffers_do_not_overlap() {
        let mut p = FreeListPool::new(spec(4), Arc::default());
        let a = p.alloc().unwrap();
        let b = p.alloc().unwrap();
        p.bytes_mut(&a).fill(1);
        p.bytes_mut(&b).fill(2);
        assert!(p.bytes(&a).iter().all(|&x| x == 1));
        assert_eq!(PoolBuf::from_id(b.id()), b);
    }
}
