//! The accumulate kernel of a window: the target's accumulate lock word, CPU atomics per
//! element (`osc_sm_atomics`), and the typed loops that combine a run in place.
//!
//! One kernel serves both ways into osc-sm: the module's calls ([`crate::SmModule`]'s
//! [`rmca_framework::osc::OscDirect`] and [`rmca_framework::osc::OscModule`]) and the host's
//! fast path through the window's [`rmca_framework::osc::DirectView`], which lends it as a
//! [`DirectAtomics`]. So an accumulate from either path takes the same lock word (or the
//! same CPU atomic) as every other on the same element, and they stay atomic with respect
//! to each other.
//!
//! The typed loops ([`rmca_framework::osc::typed`]): the operation and the element type are
//! matched once per call into a function monomorphised for the native type (`i32`,
//! `f64`...) and the operation (AVX2 for long runs where the CPU has it).

use std::rc::Rc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use rmca_framework::osc::typed::{leaf_of, Native};
use rmca_framework::osc::{accumulate_with, AccOp, DirectAtomics, Elem, HostAccumulate};

use crate::segment::Segment;

/// The accumulate kernel of one window at one member.
#[derive(Debug)]
pub struct Kernel {
    seg: Rc<Segment>,
    /// Segment offset and length of every member's memory.
    parts: Box<[(usize, usize)]>,
    /// Segment offset of every member's accumulate lock word.
    locks: Box<[usize]>,
    /// `osc_sm_atomics`: aligned 4- and 8-byte elements by CPU atomics.
    atomics: bool,
    host: Option<HostAccumulate>,
}

impl Kernel {
    /// The kernel of the window in `seg`: members' memory at `parts`, their lock words at
    /// `locks` (segment offsets, 4-byte aligned).
    pub fn new(
        seg: Rc<Segment>,
        parts: &[(usize, usize)],
        locks: Vec<usize>,
        atomics: bool,
        host: Option<HostAccumulate>,
    ) -> Self {
        Self {
            seg,
            parts: parts.into(),
            locks: locks.into_boxed_slice(),
            atomics,
            host,
        }
    }

    /// Hold member `t`'s accumulate lock word while `f` runs.
    #[inline(always)]
    pub fn locked<R>(&self, t: usize, f: impl FnOnce() -> R) -> R {
        let word: &AtomicU32 = self.seg.u32_at(self.locks[t]);
        if word
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            Self::contended(word);
        }
        let r = f();
        word.store(0, Ordering::Release);
        r
    }

    /// Take `word` held by another process (or thread): spin a little, then yield.
    #[cold]
    #[inline(never)]
    fn contended(word: &AtomicU32) {
        let mut spins = 0u32;
        while word
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Does an accumulate on an element of `elem` at segment offset `at` go by CPU atomics?
    /// Only the element type and its address decide, so two accumulates on one element
    /// always take the same path.
    #[inline]
    pub fn atomic_path(&self, elem: Elem, at: usize) -> bool {
        let es = elem.size();
        self.atomics && (es == 4 || es == 8) && !elem.host_arithmetic() && at.is_multiple_of(es)
    }

    /// The accumulate of `data` into the `len` bytes at segment offset `at` by CPU atomics
    /// per element ([`Kernel::atomic_path`], the caller checked it and the lengths), the
    /// previous contents into `old`.
    #[allow(clippy::too_many_arguments)]
    pub fn rmw_run(
        &self,
        at: usize,
        len: usize,
        op: AccOp,
        elem: Elem,
        data: &[u8],
        mut old: Option<&mut [u8]>,
    ) {
        let es = elem.size();
        for k in (0..len).step_by(es) {
            let origin = if op == AccOp::NoOp {
                &[0u8; 8][..es]
            } else {
                &data[k..k + es]
            };
            if es == 4 {
                let o = u32::from_ne_bytes(origin.try_into().expect("4 bytes"));
                let prev = rmw32(self.seg.u32_at(at + k), op, elem, o, self.host);
                if let Some(old) = old.as_deref_mut() {
                    old[k..k + 4].copy_from_slice(&prev.to_ne_bytes());
                }
            } else {
                let o = u64::from_ne_bytes(origin.try_into().expect("8 bytes"));
                let prev = rmw64(self.seg.u64_at(at + k), op, elem, o, self.host);
                if let Some(old) = old.as_deref_mut() {
                    old[k..k + 8].copy_from_slice(&prev.to_ne_bytes());
                }
            }
        }
    }

    /// The segment offset of the `len` bytes at offset `off` of member `t`, if they lie in
    /// its memory.
    #[inline]
    fn place(&self, t: usize, off: u64, len: usize) -> Option<usize> {
        let &(base, size) = self.parts.get(t)?;
        let off = usize::try_from(off).ok()?;
        (off.checked_add(len)? <= size).then_some(base + off)
    }

    /// The accumulate of [`DirectAtomics::accumulate`] on the `len` bytes at segment offset
    /// `at` of member `t` (inside its memory: the caller placed them), with its refusals:
    /// false, nothing written, for what the typed loops do not take.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn accumulate_at(
        &self,
        t: usize,
        at: usize,
        len: usize,
        op: AccOp,
        elem: Elem,
        data: &[u8],
        old: Option<&mut [u8]>,
    ) -> bool {
        // No loop for what it does not compute (pairs, the host's elements, an operation
        // the type has not): refused before anything else.
        let Some(f) = leaf_of(op, elem) else {
            return false;
        };
        // A result buffer over the target (erroneous, but not to corrupt memory): the
        // module's general path copies through it.
        if old
            .as_deref()
            .is_some_and(|o| self.seg.overlaps(at, len, o))
        {
            return false;
        }
        if self.atomics {
            return self.accumulate_atomics(t, at, len, op, elem, data, old);
        }
        // The loop checks the lengths (whole elements, the data's and the result's) before
        // it writes a byte.
        self.locked(t, || {
            self.seg
                .combine(at, len, data, |target, origin| f(target, origin, old))
        })
    }

    /// [`Kernel::accumulate_at`] with `osc_sm_atomics`: CPU atomics per element where
    /// [`Kernel::atomic_path`] says so, else the lock and the loops.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn accumulate_atomics(
        &self,
        t: usize,
        at: usize,
        len: usize,
        op: AccOp,
        elem: Elem,
        data: &[u8],
        old: Option<&mut [u8]>,
    ) -> bool {
        let es = elem.size();
        if len == 0
            || !len.is_multiple_of(es)
            || (op != AccOp::NoOp && data.len() != len)
            || old.as_deref().is_some_and(|o| o.len() != len)
        {
            return false;
        }
        if self.atomic_path(elem, at) {
            self.rmw_run(at, len, op, elem, data, old);
            return true;
        }
        let Some(f) = leaf_of(op, elem) else {
            return false;
        };
        self.locked(t, || {
            self.seg
                .combine(at, len, data, |target, origin| f(target, origin, old))
        })
    }

    /// The compare-and-swap of [`DirectAtomics::compare_and_swap`] at segment offset `at` of
    /// member `t` (inside its memory: the caller placed one element there): false, nothing
    /// written, for buffers that are not one element, an element of other than 1, 2, 4 or
    /// 8 bytes, or a result buffer over the target.
    #[inline]
    pub fn cas_at(
        &self,
        t: usize,
        at: usize,
        elem: Elem,
        compare: &[u8],
        value: &[u8],
        old: &mut [u8],
    ) -> bool {
        let es = elem.size();
        if compare.len() != es
            || value.len() != es
            || old.len() != es
            || self.seg.overlaps(at, es, old)
        {
            return false;
        }
        if self.atomic_path(elem, at) {
            if es == 4 {
                let (c, v) = (u32::load(compare), u32::load(value));
                let r =
                    self.seg
                        .u32_at(at)
                        .compare_exchange(c, v, Ordering::AcqRel, Ordering::Acquire);
                r.unwrap_or_else(|x| x).store(old);
            } else {
                let (c, v) = (u64::load(compare), u64::load(value));
                let r =
                    self.seg
                        .u64_at(at)
                        .compare_exchange(c, v, Ordering::AcqRel, Ordering::Acquire);
                r.unwrap_or_else(|x| x).store(old);
            }
            return true;
        }
        match es {
            1 => self.cas_locked::<u8>(t, at, compare, value, old),
            2 => self.cas_locked::<u16>(t, at, compare, value, old),
            4 => self.cas_locked::<u32>(t, at, compare, value, old),
            8 => self.cas_locked::<u64>(t, at, compare, value, old),
            _ => return false,
        }
        true
    }

    /// Compare-and-swap of one `T` (bitwise: only equality matters) under `t`'s lock.
    #[inline(always)]
    fn cas_locked<T: Native>(
        &self,
        t: usize,
        at: usize,
        compare: &[u8],
        value: &[u8],
        old: &mut [u8],
    ) {
        let (c, v) = (T::load(compare), T::load(value));
        let prev = self.locked(
            t,
            #[inline(always)]
            || self.seg.swap_if(at, c, v),
        );
        prev.store(old);
    }
}

impl DirectAtomics for Kernel {
    fn accumulate(
        &self,
        t: usize,
        off: u64,
        len: usize,
        op: AccOp,
        elem: Elem,
        data: &[u8],
        old: Option<&mut [u8]>,
    ) -> bool {
        match self.place(t, off, len) {
            Some(at) => self.accumulate_at(t, at, len, op, elem, data, old),
            None => false,
        }
    }

    fn compare_and_swap(
        &self,
        t: usize,
        off: u64,
        elem: Elem,
        compare: &[u8],
        value: &[u8],
        old: &mut [u8],
    ) -> bool {
        match self.place(t, off, elem.size()) {
            Some(at) => self.cas_at(t, at, elem, compare, value, old),
            None => false,
        }
    }
}

/// `op` on one 4- or 8-byte element as a CPU atomic; the previous value.
macro_rules! rmw {
    ($name:ident, $atomic:ty, $t:ty, $ints:pat) => {
        fn $name(
            a: &$atomic,
            op: AccOp,
            elem: Elem,
            origin: $t,
            host: Option<HostAccumulate>,
        ) -> $t {
            let int = matches!(elem, $ints);
            match op {
                AccOp::Replace => a.swap(origin, Ordering::AcqRel),
                AccOp::NoOp => a.load(Ordering::Acquire),
                AccOp::Sum if int => a.fetch_add(origin, Ordering::AcqRel),
                AccOp::BAnd if int => a.fetch_and(origin, Ordering::AcqRel),
                AccOp::BOr if int => a.fetch_or(origin, Ordering::AcqRel),
                AccOp::BXor if int => a.fetch_xor(origin, Ordering::AcqRel),
                _ => {
                    let r = a.fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                        let mut b = cur.to_ne_bytes();
                        accumulate_with(op, elem, &mut b, &origin.to_ne_bytes(), host)
                            .ok()
                            .map(|()| <$t>::from_ne_bytes(b))
                    });
                    // Err only if the operation failed, which the caller's checks rule out.
                    r.unwrap_or_else(|v| v)
                }
            }
        }
    };
}
rmw!(rmw32, AtomicU32, u32, Elem::I32 | Elem::U32);
rmw!(rmw64, AtomicU64, u64, Elem::I64 | Elem::U64);
