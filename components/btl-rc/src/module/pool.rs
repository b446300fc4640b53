//! Registered buffer slabs: the send, receive and CM buffers of a module.

use std::sync::Arc;

use rmca_framework::memory::MemoryCounter;
use rmca_verbs::{AccessFlags, Mr, Pd};

/// Fixed-size buffers in registered slabs (send and receive buffers).
#[derive(Debug)]
pub(super) struct BufPool {
    slabs: Vec<Mr>,
    pub(super) size: usize,
    per_slab: usize,
    pub(super) free: Vec<u64>,
    pub(super) total: usize,
    pub(super) max: usize,
    memory: Arc<MemoryCounter>,
}

impl BufPool {
    pub(super) fn new(
        size: usize,
        per_slab: usize,
        max: usize,
        memory: Arc<MemoryCounter>,
    ) -> Self {
        Self {
            slabs: Vec::new(),
            size,
            per_slab: per_slab.max(1),
            free: Vec::new(),
            total: 0,
            max,
            memory,
        }
    }
    pub(super) fn grow(&mut self, pd: &Pd, n: usize) -> usize {
        let n = n.min(self.max.saturating_sub(self.total));
        if n == 0 {
            return 0;
        }
        let mr = match pd.register(n * self.size, AccessFlags::LOCAL_WRITE) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "btl-rc: buffer slab registration failed");
                return 0;
            }
        };
        self.memory.alloc(n * self.size);
        let slab = self.slabs.len() as u64;
        self.slabs.push(mr);
        self.free
            .extend((0..n as u64).rev().map(|i| (slab << 32) | i));
        self.total += n;
        n
    }
    pub(super) fn alloc(&mut self, pd: &Pd) -> Option<u64> {
        if self.free.is_empty() {
            self.grow(pd, self.per_slab);
        }
        self.free.pop()
    }
    pub(super) fn release(&mut self, id: u64) {
        self.free.push(id);
    }
    fn locate(&self, id: u64) -> (&Mr, usize) {
        let slab = ((id >> 32) & 0x1fff_ffff) as usize;
        (&self.slabs[slab], (id & 0xffff_ffff) as usize * self.size)
    }
    pub(super) fn sge(&self, id: u64, len: usize) -> rmca_verbs::Sge {
        let (mr, off) = self.locate(id);
        mr.sge(off, len as u32).expect("buffer inside its slab")
    }
    pub(super) fn write(&self, id: u64, at: usize, data: &[u8]) {
        let (mr, off) = self.locate(id);
        mr.write_at(off + at, data)
            .expect("write inside the buffer");
    }
    pub(super) fn read(&self, id: u64, at: usize, out: &mut [u8]) {
        let (mr, off) = self.locate(id);
        mr.read_at(off + at, out).expect("read inside the buffer");
    }
}

impl Drop for BufPool {
    fn drop(&mut self) {
        self.memory.free(self.total * self.size);
    }
}
