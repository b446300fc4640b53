//! Derived datatypes: layouts of typed buffers that are not one contiguous run of elements.
//!
//! A [`Datatype`] describes which bytes of a buffer a message carries and in which order,
//! as MPI's derived datatypes do: a column of a row-major matrix
//! ([`Datatype::vector`]), scattered blocks ([`Datatype::indexed`]), the fields of a struct
//! ([`Datatype::structure`]), or any nesting of those. Build one from the element types
//! ([`Datatype::of`]) and hand it, with a buffer and an instance count, to the `*_typed`
//! calls of [`crate::Communicator`] or to [`Datatype::pack`] / [`Datatype::unpack`].
//!
//! A datatype is committed when it is built. A layout of up to [`FLATTEN_LIMIT`] runs is
//! flattened into a list of (byte offset, length) [`Segment`]s, adjacent ones merged, in
//! type-map order; a larger one keeps the nested strided and listed blocks its constructors
//! made, so that its memory follows their arguments, not the number of runs. Using it is a
//! walk over the list or the nesting; nothing is interpreted per element. Datatypes are
//! immutable and cheap to clone (shared), and can be sent to other threads.
//!
//! Offsets are bytes from the start of the buffer slice given with the type; instance `i` of
//! `count` starts `i × extent` bytes further. Every byte an operation would touch must lie
//! inside the slice ([`DatatypeError::OutOfBounds`] otherwise), and a receive type must not
//! name a byte twice ([`DatatypeError::Overlap`]).
//!
//! ```
//! use rmca::Datatype;
//! // Column 1 of a 3 × 4 row-major matrix of f64: 3 blocks of 1 element, 4 elements apart.
//! let column = Datatype::vector(3, 1, 4, &Datatype::of::<f64>()).unwrap();
//! let matrix: Vec<f64> = (0..12).map(f64::from).collect();
//! let packed = column.pack_to_vec(&matrix[1..], 1).unwrap();
//! assert_eq!(rmca::bytemuck::cast_slice::<u8, f64>(&packed), &[1.0, 5.0, 9.0]);
//! assert_eq!((column.size(), column.extent()), (24, 72));
//! ```
//!
//! # Element types
//!
//! Buffers hold plain-old-data elements ([`bytemuck::Pod`]). A crate that depends only on
//! rmca derives them through rmca's re-exports, naming the path of the `bytemuck` crate for
//! the derive's generated code:
//!
//! ```
//! use rmca::Datatype;
//! use std::mem::{offset_of, size_of};
//!
//! #[derive(Clone, Copy, Debug, PartialEq, rmca::Pod, rmca::Zeroable)]
//! #[bytemuck(crate = "rmca::bytemuck")]
//! #[repr(C)]
//! struct Particle {
//!     pos: [f64; 3],
//!     id: u32,
//!     charge: f32,
//! }
//!
//! // Every field: the extent is the struct's size, so a slice of particles is `count`
//! // instances.
//! let particle = Datatype::structure(
//!     &[3, 1, 1],
//!     &[
//!         offset_of!(Particle, pos) as isize,
//!         offset_of!(Particle, id) as isize,
//!         offset_of!(Particle, charge) as isize,
//!     ],
//!     &[Datatype::of::<f64>(), Datatype::of::<u32>(), Datatype::of::<f32>()],
//! )
//! .unwrap();
//! assert_eq!(particle.extent(), size_of::<Particle>() as isize);
//! // Only the positions of each particle: 24 of its 32 bytes.
//! let positions = Datatype::resized(
//!     &Datatype::contiguous(3, &Datatype::of::<f64>()).unwrap(),
//!     0,
//!     size_of::<Particle>() as isize,
//! )
//! .unwrap();
//! let ps = [Particle { pos: [1.0, 2.0, 3.0], id: 7, charge: -1.0 }; 2];
//! let packed = positions.pack_to_vec(&ps, 2).unwrap();
//! assert_eq!(
//!     rmca::bytemuck::cast_slice::<u8, f64>(&packed),
//!     &[1.0, 2.0, 3.0, 1.0, 2.0, 3.0]
//! );
//! ```

mod comm;
#[cfg(test)]
mod tests;

pub use comm::TypedRequest;

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use thiserror::Error;

/// Layouts of at most this many runs of bytes are flattened into a list of runs when built
/// (the fastest to walk); larger ones keep the nested blocks their constructors describe, as
/// MPICH's and Open MPI's engines do, so that a type takes memory in proportion to its
/// constructors' arguments, not to the runs it names (a vector of 10^9 single bytes is a
/// few words).
pub const FLATTEN_LIMIT: usize = 1 << 16;

/// Why a datatype could not be built or used.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum DatatypeError {
    /// A size, offset or bound does not fit the address space.
    #[error("{constructor}: {what} overflows the address space")]
    Overflow {
        /// The constructor or operation.
        constructor: &'static str,
        /// The quantity that overflowed.
        what: &'static str,
    },
    /// Argument slices of different lengths.
    #[error("{constructor}: {what} has {got} entries but there are {expected} blocks")]
    LengthMismatch {
        /// The constructor.
        constructor: &'static str,
        /// The slice with the wrong length.
        what: &'static str,
        /// Its length.
        got: usize,
        /// The number of blocks (length of the block-length slice).
        expected: usize,
    },
    /// A [`Datatype::subarray`] block reaching past its array, or an array of no dimension.
    #[error("subarray: dimension {dim}: start {start} + subsize {subsize} exceeds the size {size} (the block must lie inside the array)")]
    SubarrayOutOfRange {
        /// The dimension (0 is the slowest-varying).
        dim: usize,
        /// Start of the block in that dimension.
        start: usize,
        /// Length of the block in that dimension.
        subsize: usize,
        /// Length of the array in that dimension.
        size: usize,
    },
    /// A [`Datatype::subarray`] of no dimension.
    #[error("subarray: sizes is empty; an array has at least one dimension")]
    NoDimensions,
    /// The instances of a type reach outside the buffer given with it.
    #[error("{count} instance(s) of the datatype touch bytes {start}..{end}, outside the buffer of {len} bytes (valid: 0..{len})")]
    OutOfBounds {
        /// Instances used.
        count: usize,
        /// First byte touched, relative to the buffer start.
        start: i128,
        /// One past the last byte touched.
        end: i128,
        /// Buffer length in bytes.
        len: usize,
    },
    /// A type used to receive or unpack names some byte twice.
    #[error("{count} instance(s) of the datatype name byte {offset} more than once; a type that is written into must not overlap")]
    Overlap {
        /// Instances used.
        count: usize,
        /// A byte offset named twice.
        offset: isize,
    },
    /// A type used to receive or unpack names more bytes than its instances span, so some
    /// byte twice.
    #[error("{count} instance(s) of the datatype name {bytes} bytes within a span of {span}, so some byte more than once; a type that is written into must not overlap")]
    OverlapBySize {
        /// Instances used.
        count: usize,
        /// Bytes named (count × size).
        bytes: u128,
        /// Bytes from the first to one past the last byte named.
        span: i128,
    },
    /// A layout reduced as elements of `elem` bytes cuts through one.
    #[error("the datatype's {what} {value} is not a multiple of the {elem}-byte element it is reduced as")]
    SplitsElements {
        /// Size of the element type.
        elem: usize,
        /// Which quantity ("segment offset", "segment length", "extent").
        what: &'static str,
        /// Its value in bytes.
        value: isize,
    },
    /// No memory for the packed copy of a message.
    #[error("cannot allocate {bytes} bytes to pack the message into")]
    Allocation {
        /// The packed size.
        bytes: usize,
    },
    /// The packed buffer has the wrong length.
    #[error("{what}: {got} packed bytes, but {count} instance(s) of {size} B {need}")]
    PackedLength {
        /// The operation.
        what: &'static str,
        /// Packed bytes available.
        got: usize,
        /// Instances.
        count: usize,
        /// Size of one instance.
        size: usize,
        /// What is needed ("need N" / "hold at most N").
        need: String,
    },
    /// The two sides of a collective describe different amounts of data.
    #[error("{what}: the send side carries {send} B per block but the receive side {recv} B; counts × type sizes must match")]
    SignatureMismatch {
        /// The collective.
        what: &'static str,
        /// Bytes per block sent.
        send: usize,
        /// Bytes per block received.
        recv: usize,
    },
}

/// A run of bytes of one instance of a datatype: `len` bytes at byte `offset` from the
/// instance's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Segment {
    /// Byte offset from the start of the instance (may be negative).
    pub offset: isize,
    /// Length in bytes (never 0 in a committed type).
    pub len: usize,
}

/// A committed layout: see the [module documentation](self).
#[derive(Clone)]
pub struct Datatype {
    map: Arc<TypeMap>,
}

#[derive(Debug)]
struct TypeMap {
    layout: Layout,
    /// Runs of one instance before merging (at most this many after).
    pieces: u128,
    /// Bytes of data in one instance.
    size: usize,
    /// Lower bound and upper bound (extent = ub - lb, negative when ub < lb), as MPI
    /// defines them.
    lb: isize,
    ub: isize,
    /// Bounds of the bytes actually named.
    true_lb: isize,
    true_ub: isize,
    /// Largest alignment of the element types inside (rounds a structure's extent).
    align: usize,
    /// Some byte of one instance named twice: found on the first receive that asks.
    self_overlap: OnceLock<Option<isize>>,
    /// The largest instance count checked to name no byte twice (any smaller count is then
    /// fine too): interleaved instances are checked once, not on every receive.
    disjoint_upto: AtomicUsize,
}

/// Where the bytes of one instance are.
#[derive(Debug)]
enum Layout {
    /// Merged runs in type-map order (at most [`FLATTEN_LIMIT`]).
    Flat(Arc<[Segment]>),
    /// `count` blocks, block `i` at `i × stride` bytes, each `blocklen` copies of `child`
    /// (one child extent apart).
    Strided {
        count: usize,
        blocklen: usize,
        stride: isize,
        child: Arc<TypeMap>,
    },
    /// One block per entry: (byte displacement, copies, child).
    Listed(Box<[(isize, usize, Arc<TypeMap>)]>),
}

impl std::fmt::Debug for Datatype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = &self.map;
        f.debug_struct("Datatype")
            .field("size", &m.size)
            .field("lb", &m.lb)
            .field("extent", &self.extent())
            .field("true_lb", &m.true_lb)
            .field("pieces", &m.pieces)
            .finish()
    }
}

/// How to build a datatype: blocks of `blocklen` consecutive copies of `child` (each
/// `child.extent` apart) at byte displacements.
enum Blocks<'a> {
    /// `count` blocks, block `i` at `i × stride` bytes.
    Regular {
        count: usize,
        blocklen: usize,
        stride: i128,
        child: &'a Arc<TypeMap>,
    },
    /// One block per entry: (displacement in bytes, blocklen, child).
    Listed(Vec<(i128, usize, &'a Arc<TypeMap>)>),
}

/// Checked arithmetic in i128, reporting which quantity overflowed.
fn ck(
    v: Option<i128>,
    constructor: &'static str,
    what: &'static str,
) -> Result<i128, DatatypeError> {
    v.ok_or(DatatypeError::Overflow { constructor, what })
}

fn to_isize(
    v: i128,
    constructor: &'static str,
    what: &'static str,
) -> Result<isize, DatatypeError> {
    isize::try_from(v).map_err(|_| DatatypeError::Overflow { constructor, what })
}

/// Merges runs that touch before handing them on: nested blocks often end where the next
/// begins (a vector of dense rows), and one copy is cheaper than several.
struct Merger<F: FnMut(isize, usize) -> bool> {
    pending: Option<(isize, usize)>,
    f: F,
}

impl<F: FnMut(isize, usize) -> bool> Merger<F> {
    #[inline(always)]
    fn push(&mut self, at: isize, len: usize) -> bool {
        if len == 0 {
            return true;
        }
        match &mut self.pending {
            Some((p, n)) if p.wrapping_add_unsigned(*n) == at => {
                *n += len;
                true
            }
            Some(prev) => {
                let (p, n) = *prev;
                *prev = (at, len);
                (self.f)(p, n)
            }
            None => {
                self.pending = Some((at, len));
                true
            }
        }
    }

    fn finish(mut self) {
        if let Some((p, n)) = self.pending.take() {
            (self.f)(p, n);
        }
    }
}

impl TypeMap {
    fn extent(&self) -> i128 {
        self.ub as i128 - self.lb as i128
    }

    fn true_extent(&self) -> i128 {
        self.true_ub as i128 - self.true_lb as i128
    }

    /// One run as long as the extent: copies of it side by side are one run.
    fn dense_run(&self) -> Option<Segment> {
        match &self.layout {
            Layout::Flat(s) if s.len() == 1 && s[0].len as i128 == self.extent() => Some(s[0]),
            _ => None,
        }
    }

    /// One instance as evenly spaced runs of one length (see [`UniformRuns`]), when it is.
    fn uniform_instance(&self) -> Option<UniformRuns> {
        let runs = match &self.layout {
            Layout::Flat(segs) => {
                // Evenly spaced segments of one length (a small vector, flattened).
                let (first, rest) = segs.split_first()?;
                let stride = rest
                    .first()
                    .map_or(0, |s| s.offset.wrapping_sub(first.offset));
                let even = segs.windows(2).all(|w| {
                    w[1].len == first.len && w[1].offset.wrapping_sub(w[0].offset) == stride
                });
                if !even {
                    return None;
                }
                UniformRuns {
                    offset: first.offset,
                    len: first.len,
                    stride,
                    n: segs.len(),
                }
            }
            Layout::Strided {
                count,
                blocklen,
                stride,
                child,
            } => {
                let s = child.dense_run()?;
                UniformRuns {
                    offset: s.offset,
                    len: s.len.checked_mul(*blocklen)?,
                    stride: *stride,
                    n: *count,
                }
            }
            Layout::Listed(blocks) => match **blocks {
                [(at, copies, ref child)] => {
                    let mut r = child
                        .uniform_instance()?
                        .repeated(copies, child.extent_isize())?;
                    r.offset = r.offset.checked_add(at)?;
                    r
                }
                _ => return None,
            },
        };
        (runs.len > 0 && runs.n > 0).then_some(runs)
    }

    /// The extent as the constructors keep it (they check it fits).
    fn extent_isize(&self) -> isize {
        self.ub.wrapping_sub(self.lb)
    }

    /// Runs a block of `blocklen` copies contributes before merging.
    fn pieces(&self, blocklen: usize) -> u128 {
        if blocklen == 0 || self.pieces == 0 {
            0
        } else if self.dense_run().is_some() {
            1
        } else {
            (blocklen as u128).saturating_mul(self.pieces)
        }
    }

    /// Hand each run of one instance at `base` to `out`, in type-map order; false when
    /// `out` asked to stop. Offsets were bounds-checked by the caller or the builder.
    fn walk<F: FnMut(isize, usize) -> bool>(&self, base: isize, out: &mut Merger<F>) -> bool {
        match &self.layout {
            Layout::Flat(segs) => segs
                .iter()
                .all(|s| out.push(base.wrapping_add(s.offset), s.len)),
            Layout::Strided {
                count,
                blocklen,
                stride,
                child,
            } => (0..*count as isize).all(|i| {
                child.walk_block(base.wrapping_add(i.wrapping_mul(*stride)), *blocklen, out)
            }),
            Layout::Listed(blocks) => blocks
                .iter()
                .all(|(d, n, c)| c.walk_block(base.wrapping_add(*d), *n, out)),
        }
    }

    /// [`TypeMap::walk`] over `n` copies at `base`, one extent apart.
    fn walk_block<F: FnMut(isize, usize) -> bool>(
        &self,
        base: isize,
        n: usize,
        out: &mut Merger<F>,
    ) -> bool {
        if n == 0 || self.pieces == 0 {
            return true;
        }
        if let Some(s) = self.dense_run() {
            return out.push(base.wrapping_add(s.offset), s.len * n);
        }
        let ext = self.extent() as isize;
        (0..n as isize).all(|k| self.walk(base.wrapping_add(k.wrapping_mul(ext)), out))
    }

    /// Does one instance name no byte twice? Decided from the nesting where the blocks'
    /// spans are apart (the usual case, and the only one for which a huge type is
    /// affordable); `None` when that does not settle it.
    fn disjoint_by_structure(&self) -> Option<bool> {
        // n copies of `c`: each copy disjoint, and copies apart by at least a true extent.
        let copies_ok = |c: &TypeMap, n: usize| -> Option<bool> {
            if n == 0 || c.pieces == 0 {
                return Some(true);
            }
            if c.self_overlap().is_some() {
                return Some(false);
            }
            (n == 1 || c.extent().abs() >= c.true_extent()).then_some(true)
        };
        let span = |c: &TypeMap, n: usize| -> i128 {
            // Bytes from the lowest to one past the highest named by n copies.
            c.true_extent() + (n as i128 - 1) * c.extent().abs()
        };
        match &self.layout {
            Layout::Flat(_) => None,
            Layout::Strided {
                count,
                blocklen,
                stride,
                child,
            } => {
                if !copies_ok(child, *blocklen)? {
                    return None;
                }
                (*count <= 1 || (*stride as i128).abs() >= span(child, *blocklen)).then_some(true)
            }
            Layout::Listed(blocks) => {
                let mut spans = Vec::with_capacity(blocks.len());
                for (d, n, c) in blocks.iter() {
                    if *n == 0 || c.pieces == 0 {
                        continue;
                    }
                    if !copies_ok(c, *n)? {
                        return None;
                    }
                    let lo =
                        *d as i128 + c.true_lb as i128 + ((*n as i128 - 1) * c.extent()).min(0);
                    spans.push((lo, lo + span(c, *n)));
                }
                spans.sort_unstable();
                spans.windows(2).all(|w| w[0].1 <= w[1].0).then_some(true)
            }
        }
    }

    /// A byte of one instance named twice, if any.
    fn self_overlap(&self) -> Option<isize> {
        *self.self_overlap.get_or_init(|| {
            if self.disjoint_by_structure() == Some(true) {
                return None;
            }
            if self.size as i128 > self.true_extent() {
                // More bytes than room for them, without listing a run.
                return Some(self.true_lb);
            }
            let mut runs = Vec::new();
            let mut m = Merger {
                pending: None,
                f: |at: isize, len: usize| {
                    runs.push((at as i128, len));
                    true
                },
            };
            self.walk(0, &mut m);
            m.finish();
            first_overlap(runs.into_iter()).map(|o| o as isize)
        })
    }
}

/// The bounds of the blocks seen so far: (lb, ub) over blocks of at least one copy, and
/// (true lb, true ub) over the bytes they name.
#[derive(Default)]
struct Bounds {
    bounds: Option<(i128, i128)>,
    true_bounds: Option<(i128, i128)>,
}

impl Bounds {
    /// Account for a block of `n` copies of `child` at byte `disp` (copies are the child's
    /// extent apart, which may be negative: the bounds are the lowest lb and highest ub
    /// of any copy, as MPI defines them).
    fn block(
        &mut self,
        constructor: &'static str,
        disp: i128,
        n: usize,
        child: &TypeMap,
    ) -> Result<(), DatatypeError> {
        if n == 0 {
            return Ok(());
        }
        let last = ck(
            (n as i128 - 1).checked_mul(child.extent()),
            constructor,
            "block length × extent",
        )?;
        let (down, up) = (last.min(0), last.max(0));
        let widen = |b: Option<(i128, i128)>, lo: i128, hi: i128| {
            Some(b.map_or((lo, hi), |(l, u)| (l.min(lo), u.max(hi))))
        };
        let span = |lo: isize,
                    hi: isize,
                    names: (&'static str, &'static str)|
         -> Result<(i128, i128), DatatypeError> {
            let from = ck(
                disp.checked_add(down)
                    .and_then(|v| v.checked_add(lo as i128)),
                constructor,
                names.0,
            )?;
            let to = ck(
                disp.checked_add(up).and_then(|v| v.checked_add(hi as i128)),
                constructor,
                names.1,
            )?;
            Ok((from, to))
        };
        let (lb, ub) = span(child.lb, child.ub, ("lower bound", "upper bound"))?;
        self.bounds = widen(self.bounds, lb, ub);
        if child.pieces > 0 {
            let (tlb, tub) = span(
                child.true_lb,
                child.true_ub,
                ("true lower bound", "true upper bound"),
            )?;
            self.true_bounds = widen(self.true_bounds, tlb, tub);
        }
        Ok(())
    }
}

impl Datatype {
    /// The type of one `T`: `size_of::<T>()` contiguous bytes, aligned as `T`.
    pub fn of<T: bytemuck::Pod>() -> Datatype {
        let size = std::mem::size_of::<T>();
        let segments: Arc<[Segment]> = if size == 0 {
            Arc::new([])
        } else {
            Arc::new([Segment {
                offset: 0,
                len: size,
            }])
        };
        Datatype {
            map: Arc::new(TypeMap {
                layout: Layout::Flat(segments),
                pieces: u128::from(size > 0),
                size,
                lb: 0,
                // size_of is at most isize::MAX.
                ub: size as isize,
                true_lb: 0,
                true_ub: size as isize,
                align: std::mem::align_of::<T>(),
                self_overlap: OnceLock::from(None),
                disjoint_upto: AtomicUsize::new(0),
            }),
        }
    }

    /// `count` copies of `old`, side by side (each `old.extent()` after the previous).
    pub fn contiguous(count: usize, old: &Datatype) -> Result<Datatype, DatatypeError> {
        Self::build(
            "contiguous",
            Blocks::Regular {
                count: 1,
                blocklen: count,
                stride: 0,
                child: &old.map,
            },
            None,
        )
    }

    /// `count` blocks of `blocklength` copies of `old`; block `i` starts `i × stride`
    /// extents of `old` from the start (`stride` may be negative).
    pub fn vector(
        count: usize,
        blocklength: usize,
        stride: isize,
        old: &Datatype,
    ) -> Result<Datatype, DatatypeError> {
        let stride = ck(
            (stride as i128).checked_mul(old.map.extent()),
            "vector",
            "stride × extent",
        )?;
        Self::build(
            "vector",
            Blocks::Regular {
                count,
                blocklen: blocklength,
                stride,
                child: &old.map,
            },
            None,
        )
    }

    /// Like [`Datatype::vector`] with the stride in bytes.
    pub fn hvector(
        count: usize,
        blocklength: usize,
        stride_bytes: isize,
        old: &Datatype,
    ) -> Result<Datatype, DatatypeError> {
        Self::build(
            "hvector",
            Blocks::Regular {
                count,
                blocklen: blocklength,
                stride: stride_bytes as i128,
                child: &old.map,
            },
            None,
        )
    }

    /// Block `i` holds `blocklengths[i]` copies of `old` and starts `displacements[i]`
    /// extents of `old` from the start.
    pub fn indexed(
        blocklengths: &[usize],
        displacements: &[isize],
        old: &Datatype,
    ) -> Result<Datatype, DatatypeError> {
        check_lengths(
            "indexed",
            "displacements",
            blocklengths,
            displacements.len(),
        )?;
        let ext = old.map.extent();
        let blocks = blocklengths
            .iter()
            .zip(displacements)
            .map(|(&n, &d)| {
                let disp = ck(
                    (d as i128).checked_mul(ext),
                    "indexed",
                    "displacement × extent",
                )?;
                Ok((disp, n, &old.map))
            })
            .collect::<Result<Vec<_>, DatatypeError>>()?;
        Self::build("indexed", Blocks::Listed(blocks), None)
    }

    /// Like [`Datatype::indexed`] with the displacements in bytes.
    pub fn hindexed(
        blocklengths: &[usize],
        displacements_bytes: &[isize],
        old: &Datatype,
    ) -> Result<Datatype, DatatypeError> {
        check_lengths(
            "hindexed",
            "displacements",
            blocklengths,
            displacements_bytes.len(),
        )?;
        let blocks = blocklengths
            .iter()
            .zip(displacements_bytes)
            .map(|(&n, &d)| (d as i128, n, &old.map))
            .collect();
        Self::build("hindexed", Blocks::Listed(blocks), None)
    }

    /// Block `i` holds `blocklengths[i]` copies of `types[i]` at byte `displacements[i]`
    /// (e.g. `std::mem::offset_of!` of a `#[repr(C)]` field). As in MPI, the extent is
    /// rounded up to the largest alignment of the member types, so that the type of a
    /// `#[repr(C)]` struct built from all its fields has the struct's size as its extent.
    pub fn structure(
        blocklengths: &[usize],
        displacements_bytes: &[isize],
        types: &[Datatype],
    ) -> Result<Datatype, DatatypeError> {
        check_lengths(
            "structure",
            "displacements",
            blocklengths,
            displacements_bytes.len(),
        )?;
        check_lengths("structure", "types", blocklengths, types.len())?;
        let blocks = blocklengths
            .iter()
            .zip(displacements_bytes)
            .zip(types)
            .map(|((&n, &d), t)| (d as i128, n, &t.map))
            .collect();
        let align = types.iter().map(|t| t.map.align).max().unwrap_or(1);
        Self::build("structure", Blocks::Listed(blocks), Some(align))
    }

    /// A block of a multi-dimensional row-major array of `old` (MPI's subarray in C order):
    /// the array has `sizes[d]` elements in dimension `d` (the last varies fastest), the
    /// block `subsizes[d]` elements from `starts[d]`. The extent is the whole array's, so
    /// that `count` instances are `count` consecutive arrays. The usual use: the faces and
    /// interior of a local grid with halo cells.
    ///
    /// ```
    /// use rmca::Datatype;
    /// // The 2 x 2 interior of a 4 x 4 grid with a one-cell halo.
    /// let interior = Datatype::subarray(&[4, 4], &[2, 2], &[1, 1], &Datatype::of::<u8>()).unwrap();
    /// let grid: Vec<u8> = (0..16).collect();
    /// assert_eq!(interior.pack_to_vec(&grid, 1).unwrap(), [5, 6, 9, 10]);
    /// assert_eq!(interior.extent(), 16);
    /// ```
    pub fn subarray(
        sizes: &[usize],
        subsizes: &[usize],
        starts: &[usize],
        old: &Datatype,
    ) -> Result<Datatype, DatatypeError> {
        check_lengths("subarray", "subsizes", sizes, subsizes.len())?;
        check_lengths("subarray", "starts", sizes, starts.len())?;
        let over = |what| DatatypeError::Overflow {
            constructor: "subarray",
            what,
        };
        let Some(last) = sizes.len().checked_sub(1) else {
            return Err(DatatypeError::NoDimensions);
        };
        for (dim, ((&size, &subsize), &start)) in sizes.iter().zip(subsizes).zip(starts).enumerate()
        {
            if start.checked_add(subsize).is_none_or(|end| end > size) {
                return Err(DatatypeError::SubarrayOutOfRange {
                    dim,
                    start,
                    subsize,
                    size,
                });
            }
        }
        // Byte stride of each dimension (the last: one element), innermost first.
        let mut stride = old.map.extent();
        let mut disp: i128 = 0;
        let mut t = Datatype::contiguous(subsizes[last], old)?;
        disp = ck(
            (starts[last] as i128)
                .checked_mul(stride)
                .and_then(|d| d.checked_add(disp)),
            "subarray",
            "start offset",
        )?;
        for dim in (0..last).rev() {
            stride = ck(
                stride.checked_mul(sizes[dim + 1] as i128),
                "subarray",
                "array size",
            )?;
            let stride_bytes = isize::try_from(stride).map_err(|_| over("array size"))?;
            t = Datatype::hvector(subsizes[dim], 1, stride_bytes, &t)?;
            disp = ck(
                (starts[dim] as i128)
                    .checked_mul(stride)
                    .and_then(|d| d.checked_add(disp)),
                "subarray",
                "start offset",
            )?;
        }
        let whole = ck(
            stride.checked_mul(sizes[0] as i128),
            "subarray",
            "array size",
        )?;
        let disp = isize::try_from(disp).map_err(|_| over("start offset"))?;
        let whole = isize::try_from(whole).map_err(|_| over("array size"))?;
        let placed = Datatype::hindexed(&[1], &[disp], &t)?;
        Datatype::resized(&placed, 0, whole)
    }

    /// `old` with its lower bound set to `lb` and its extent to `extent` bytes; the bytes it
    /// names are unchanged. The usual use: shrink a column type's extent to one element, so
    /// that consecutive instances are consecutive columns. A negative extent is allowed, as
    /// MPI allows it: consecutive instances then go down in memory.
    pub fn resized(old: &Datatype, lb: isize, extent: isize) -> Result<Datatype, DatatypeError> {
        let ub = lb.checked_add(extent).ok_or(DatatypeError::Overflow {
            constructor: "resized",
            what: "lb + extent",
        })?;
        let m = &old.map;
        let layout = match &m.layout {
            Layout::Flat(s) => Layout::Flat(s.clone()),
            // The same bytes, as one block of the old type.
            _ => Layout::Listed(Box::new([(0, 1, m.clone())])),
        };
        let self_overlap = OnceLock::new();
        if let Some(&o) = m.self_overlap.get() {
            let _ = self_overlap.set(o);
        }
        Ok(Datatype {
            map: Arc::new(TypeMap {
                layout,
                pieces: m.pieces,
                size: m.size,
                lb,
                ub,
                true_lb: m.true_lb,
                true_ub: m.true_ub,
                align: m.align,
                self_overlap,
                disjoint_upto: AtomicUsize::new(0),
            }),
        })
    }

    fn build(
        constructor: &'static str,
        blocks: Blocks<'_>,
        round_to_align: Option<usize>,
    ) -> Result<Datatype, DatatypeError> {
        let over = |what| DatatypeError::Overflow { constructor, what };
        // Everything is sized and bounded before any layout is made, so that no input makes
        // the builder loop or allocate beyond FLATTEN_LIMIT runs.
        let mut bounds = Bounds::default();
        let (pieces, size, align) = match &blocks {
            Blocks::Regular {
                count,
                blocklen,
                stride,
                child,
            } => {
                if *count > 0 {
                    // Blocks are evenly spaced: the first and the last bound them all.
                    let last_disp = ck(
                        (*count as i128 - 1).checked_mul(*stride),
                        constructor,
                        "count × stride",
                    )?;
                    bounds.block(constructor, 0, *blocklen, child)?;
                    bounds.block(constructor, last_disp, *blocklen, child)?;
                }
                let per_block = *blocklen as u128 * child.size as u128;
                (
                    child.pieces(*blocklen).saturating_mul(*count as u128),
                    per_block.checked_mul(*count as u128),
                    child.align,
                )
            }
            Blocks::Listed(list) => {
                let (mut pieces, mut size, mut align) = (0u128, Some(0u128), 1);
                for &(disp, n, child) in list {
                    bounds.block(constructor, disp, n, child)?;
                    pieces = pieces.saturating_add(child.pieces(n));
                    size = size.and_then(|s| s.checked_add(n as u128 * child.size as u128));
                    align = align.max(child.align);
                }
                (pieces, size, align)
            }
        };
        let size = size
            .and_then(|s| usize::try_from(s).ok())
            .filter(|&s| s <= isize::MAX as usize)
            .ok_or(over("size"))?;
        let (mut lb, mut ub) = bounds.bounds.unwrap_or((0, 0));
        if let Some(a) = round_to_align {
            let extent = ub - lb;
            let a = a.max(1) as i128;
            if extent > 0 {
                ub = lb + (extent + a - 1) / a * a;
            }
        }
        let (true_lb, true_ub) = bounds.true_bounds.unwrap_or((0, 0));
        to_isize(ub - lb, constructor, "extent")?;
        let lb_i = to_isize(lb, constructor, "lower bound")?;
        ub = to_isize(ub, constructor, "upper bound")? as i128;
        lb = lb_i as i128;
        let true_lb = to_isize(true_lb, constructor, "true lower bound")?;
        let true_ub = to_isize(true_ub, constructor, "true upper bound")?;
        let layout = if pieces <= flatten_limit() {
            let mut segments = Vec::with_capacity(pieces as usize);
            let mut w = Merger {
                pending: None,
                f: |offset: isize, len: usize| {
                    segments.push(Segment { offset, len });
                    true
                },
            };
            match &blocks {
                Blocks::Regular {
                    count,
                    blocklen,
                    stride,
                    child,
                } => {
                    // (A block with nothing in it must not cost `count` iterations.)
                    if child.pieces(*blocklen) > 0 {
                        for i in 0..*count as i128 {
                            child.walk_block((i * stride) as isize, *blocklen, &mut w);
                        }
                    }
                }
                Blocks::Listed(list) => {
                    for &(disp, n, child) in list {
                        child.walk_block(disp as isize, n, &mut w);
                    }
                }
            }
            w.finish();
            Layout::Flat(segments.into())
        } else {
            // Too many runs to list: keep the blocks (their offsets fit: bounded above).
            match blocks {
                Blocks::Regular {
                    count,
                    blocklen,
                    stride,
                    child,
                } => Layout::Strided {
                    count,
                    blocklen,
                    stride: stride as isize,
                    child: child.clone(),
                },
                Blocks::Listed(list) => Layout::Listed(
                    list.into_iter()
                        .filter(|&(_, n, c)| n > 0 && c.pieces > 0)
                        .map(|(d, n, c)| (d as isize, n, c.clone()))
                        .collect(),
                ),
            }
        };
        let self_overlap = OnceLock::new();
        if let Layout::Flat(s) = &layout {
            let _ = self_overlap.set(
                first_overlap(s.iter().map(|s| (s.offset as i128, s.len))).map(|o| o as isize),
            );
        }
        Ok(Datatype {
            map: Arc::new(TypeMap {
                layout,
                pieces,
                size,
                lb: lb as isize,
                ub: ub as isize,
                true_lb,
                true_ub,
                align,
                self_overlap,
                disjoint_upto: AtomicUsize::new(0),
            }),
        })
    }

    /// Bytes of data in one instance (what one instance packs to).
    pub fn size(&self) -> usize {
        self.map.size
    }

    /// Lower bound, in bytes from the instance start.
    pub fn lb(&self) -> isize {
        self.map.lb
    }

    /// Extent in bytes: how far apart consecutive instances are (negative when the type
    /// was resized so: instances then go down in memory).
    pub fn extent(&self) -> isize {
        // Every constructor checks that ub - lb fits.
        self.map.ub.wrapping_sub(self.map.lb)
    }

    /// Lower bound of the bytes actually named (0 for an empty type).
    pub fn true_lb(&self) -> isize {
        self.map.true_lb
    }

    /// Span of the bytes actually named, from the true lower bound.
    pub fn true_extent(&self) -> usize {
        (self.map.true_ub as i128 - self.map.true_lb as i128) as usize
    }

    /// The runs of bytes of one instance, merged, in type-map order. This lists them all:
    /// a type of more than [`FLATTEN_LIMIT`] runs is not stored so (see
    /// [`Datatype::for_each_run`] to visit them without a list).
    pub fn segments(&self) -> Vec<Segment> {
        let mut out = Vec::new();
        self.for_each_run(1, |offset, len| {
            out.push(Segment { offset, len });
            true
        });
        out
    }

    /// Runs of one instance, at most (before merging): what a walk over it costs.
    pub fn pieces(&self) -> u128 {
        self.map.pieces
    }

    /// Calls `f(byte offset from the buffer start, length)` for each run of bytes of
    /// `count` instances (instance `i` at `i × extent`), merged, in type-map order, while
    /// it returns true. Nothing is allocated, whatever the number of runs.
    pub fn for_each_run(&self, count: usize, f: impl FnMut(isize, usize) -> bool) {
        let m = &self.map;
        if m.pieces == 0 {
            return;
        }
        let extent = self.extent();
        let mut w = Merger { pending: None, f };
        if let Some(s) = m.dense_run() {
            // Instances side by side: one run (extent = length > 0).
            w.push(s.offset, s.len.saturating_mul(count));
        } else {
            for i in 0..count as isize {
                if !m.walk(i.wrapping_mul(extent), &mut w) {
                    return;
                }
            }
        }
        w.finish();
    }

    /// `count` instances as evenly spaced runs of one length, when they are (see
    /// [`UniformRuns`]): one instance is (a single run, a vector of a dense child, or such a
    /// type resized), and the instances continue its spacing or hold one run each.
    pub fn uniform_runs(&self, count: usize) -> Option<UniformRuns> {
        let one = self.map.uniform_instance()?;
        one.repeated(count, self.extent())
    }

    /// True when `count` instances are one run of bytes (sent and received in place).
    pub fn is_contiguous(&self, count: usize) -> bool {
        self.contiguous_run(count).is_some()
    }

    /// The run `count` instances occupy, if they are one: (byte offset, length).
    pub fn contiguous_run(&self, count: usize) -> Option<(isize, usize)> {
        let m = &self.map;
        if count == 0 || m.pieces == 0 {
            return Some((0, 0));
        }
        let Layout::Flat(segs) = &m.layout else {
            return None;
        };
        match **segs {
            [s] if count == 1 || s.len as i128 == m.extent() => {
                Some((s.offset, s.len.checked_mul(count)?))
            }
            _ => None,
        }
    }

    /// Whole instances in a message of `bytes` bytes (`MPI_Get_count`): `None` when `bytes` is
    /// not a multiple of the size.
    pub fn instances(&self, bytes: usize) -> Option<usize> {
        match self.map.size {
            0 => (bytes == 0).then_some(0),
            s => bytes.is_multiple_of(s).then(|| bytes / s),
        }
    }

    /// Bytes `count` instances pack to.
    pub fn pack_size(&self, count: usize) -> Result<usize, DatatypeError> {
        self.map
            .size
            .checked_mul(count)
            .ok_or(DatatypeError::Overflow {
                constructor: "pack_size",
                what: "count × size",
            })
    }

    /// The bytes `count` instances touch, relative to the buffer start: [start, end)
    /// (instance `i` at `i × extent`, so the first or last is the lowest, the other the
    /// highest).
    pub fn span(&self, count: usize) -> (i128, i128) {
        let m = &self.map;
        if count == 0 || m.pieces == 0 {
            return (0, 0);
        }
        let last = (count as i128 - 1) * m.extent();
        (
            m.true_lb as i128 + last.min(0),
            m.true_ub as i128 + last.max(0),
        )
    }

    /// Check that `count` instances fit a buffer of `len` bytes.
    pub(crate) fn check_bounds(&self, count: usize, len: usize) -> Result<(), DatatypeError> {
        let (start, end) = self.span(count);
        if start < 0 || end > len as i128 {
            return Err(DatatypeError::OutOfBounds {
                count,
                start,
                end,
                len,
            });
        }
        Ok(())
    }

    /// Check that every instance names whole elements of `elem` bytes, at multiples of
    /// `elem` from the buffer start: packed, they are then a sequence of such elements.
    pub(crate) fn check_whole_elements(&self, elem: usize) -> Result<(), DatatypeError> {
        let Ok(e) = isize::try_from(elem) else {
            return Ok(());
        };
        if e <= 1 {
            return Ok(());
        }
        let split = |what, value: isize| DatatypeError::SplitsElements { elem, what, value };
        let mut bad = None;
        self.for_each_run(1, |offset, len| {
            if offset % e != 0 {
                bad = Some(split("segment offset", offset));
            } else if !len.is_multiple_of(elem) {
                bad = Some(split("segment length", len as isize));
            }
            bad.is_none()
        });
        if let Some(b) = bad {
            return Err(b);
        }
        if self.extent() % e != 0 {
            return Err(split("extent", self.extent()));
        }
        Ok(())
    }

    /// Check that `count` instances name no byte twice (needed to write into them).
    pub(crate) fn check_no_overlap(&self, count: usize) -> Result<(), DatatypeError> {
        let m = &self.map;
        if count == 0 || m.pieces == 0 {
            return Ok(());
        }
        if let Some(offset) = m.self_overlap() {
            return Err(DatatypeError::Overlap { count, offset });
        }
        let extent = m.extent();
        if count > 1 && extent == 0 {
            // Every instance is the same bytes.
            return Err(DatatypeError::Overlap {
                count,
                offset: m.true_lb,
            });
        }
        if count == 1 || extent.abs() >= m.true_extent() {
            // Each instance stays inside its own [true_lb, true_ub) shifted by the extent.
            return Ok(());
        }
        if count <= m.disjoint_upto.load(Ordering::Relaxed) {
            return Ok(());
        }
        // More bytes than room for them: an overlap somewhere (and, otherwise, the runs to
        // sort below are at most the span's bytes, which the caller checked fit the buffer).
        let bytes = count as u128 * m.size as u128;
        let (start, end) = self.span(count);
        let span = end - start;
        if bytes > span as u128 {
            return Err(DatatypeError::OverlapBySize { count, bytes, span });
        }
        // Interleaved instances (a resized column type): check them all.
        let mut all = Vec::new();
        self.for_each_run(count, |at, len| {
            all.push((at as i128, len));
            true
        });
        match first_overlap(all.into_iter()) {
            None => {
                m.disjoint_upto.fetch_max(count, Ordering::Relaxed);
                Ok(())
            }
            Some(o) => Err(DatatypeError::Overlap {
                count,
                offset: o as isize,
            }),
        }
    }

    /// Pack `count` instances laid out in `buf` into `out` (which needs at least
    /// [`Datatype::pack_size`] bytes); returns the bytes written.
    pub fn pack<T: bytemuck::Pod>(
        &self,
        buf: &[T],
        count: usize,
        out: &mut [u8],
    ) -> Result<usize, DatatypeError> {
        let bytes: &[u8] = bytemuck::cast_slice(buf);
        self.check_bounds(count, bytes.len())?;
        let need = self.pack_size(count)?;
        if out.len() < need {
            return Err(DatatypeError::PackedLength {
                what: "pack",
                got: out.len(),
                count,
                size: self.map.size,
                need: format!("need {need}"),
            });
        }
        self.pack_unchecked(bytes, count, &mut out[..need]);
        Ok(need)
    }

    /// [`Datatype::pack`] into a new vector.
    pub fn pack_to_vec<T: bytemuck::Pod>(
        &self,
        buf: &[T],
        count: usize,
    ) -> Result<Vec<u8>, DatatypeError> {
        let bytes = self.pack_size(count)?;
        // Checked first: a huge count of overlapping instances must not allocate.
        self.check_bounds(count, std::mem::size_of_val(buf))?;
        let mut out = Vec::new();
        out.try_reserve_exact(bytes)
            .map_err(|_| DatatypeError::Allocation { bytes })?;
        out.resize(bytes, 0);
        self.pack(buf, count, &mut out)?;
        Ok(out)
    }

    /// Unpack `packed` into `count` instances laid out in `buf`, in type-map order. A
    /// shorter `packed` fills the first bytes only (as a receive of a shorter message does);
    /// a longer one is an error. Returns the bytes unpacked.
    pub fn unpack<T: bytemuck::Pod>(
        &self,
        packed: &[u8],
        buf: &mut [T],
        count: usize,
    ) -> Result<usize, DatatypeError> {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        self.check_bounds(count, bytes.len())?;
        self.check_no_overlap(count)?;
        let most = self.pack_size(count)?;
        if packed.len() > most {
            return Err(DatatypeError::PackedLength {
                what: "unpack",
                got: packed.len(),
                count,
                size: self.map.size,
                need: format!("hold at most {most}"),
            });
        }
        self.unpack_unchecked(packed, bytes, count);
        Ok(packed.len())
    }

    /// Pack with the bounds checked and `out` exactly `pack_size(count)` long.
    pub(crate) fn pack_unchecked(&self, bytes: &[u8], count: usize, out: &mut [u8]) {
        if let Some((start, len)) = self.contiguous_run(count) {
            let start = start.max(0) as usize;
            out.copy_from_slice(&bytes[start..start + len]);
            return;
        }
        if let Some(runs) = self.uniform_runs(count) {
            runs.gather(bytes, out);
            return;
        }
        let mut pos = 0;
        // The caller checked the bounds: every offset is inside `bytes`.
        self.for_each_run(count, |at, len| {
            let at = at as usize;
            copy_run(&mut out[pos..pos + len], &bytes[at..at + len]);
            pos += len;
            true
        });
    }

    /// Unpack with bounds and overlap checked and `packed` at most `pack_size(count)` long.
    pub(crate) fn unpack_unchecked(&self, packed: &[u8], bytes: &mut [u8], count: usize) {
        if let Some((start, _)) = self.contiguous_run(count) {
            let start = start.max(0) as usize;
            bytes[start..start + packed.len()].copy_from_slice(packed);
            return;
        }
        if let Some(runs) = self.uniform_runs(count) {
            runs.scatter(packed, bytes);
            return;
        }
        let total = packed.len();
        let mut pos = 0;
        self.for_each_run(count, |at, len| {
            let at = at as usize;
            // A shorter message ends inside this run.
            let n = len.min(total - pos);
            copy_run(&mut bytes[at..at + n], &packed[pos..pos + n]);
            pos += n;
            pos < total
        });
    }
}

/// `n` runs of `len` bytes, the first at `offset`, each `stride` bytes after the one before:
/// the layout of most strided types (a vector of a basic type, a resized basic type), copied
/// by one tight loop per element size instead of a walk (a 2^31-element vector of bytes packs
/// in a few seconds instead of a minute).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UniformRuns {
    /// Byte offset of the first run from the start of the buffer.
    pub offset: isize,
    /// Bytes in each run (> 0).
    pub len: usize,
    /// Bytes from the start of one run to the start of the next (may be negative).
    pub stride: isize,
    /// Number of runs.
    pub n: usize,
}

impl UniformRuns {
    /// `count` copies of these runs, `extent` bytes apart, if they are still evenly spaced.
    fn repeated(self, count: usize, extent: isize) -> Option<UniformRuns> {
        if count == 1 {
            Some(self)
        } else if self.n == 1 {
            Some(UniformRuns {
                stride: extent,
                n: count,
                ..self
            })
        } else if (self.n as isize).checked_mul(self.stride) == Some(extent) {
            Some(UniformRuns {
                n: self.n.checked_mul(count)?,
                ..self
            })
        } else {
            None
        }
    }

    /// Where run `i` starts from the start of the buffer.
    #[inline(always)]
    pub fn offset_of(&self, i: usize) -> isize {
        self.offset
            .wrapping_add((i as isize).wrapping_mul(self.stride))
    }

    /// Where run `i` starts in the program's buffer (bounds checked by the caller).
    #[inline(always)]
    fn at(&self, i: usize) -> usize {
        self.offset
            .wrapping_add((i as isize).wrapping_mul(self.stride)) as usize
    }

    /// Pack: `out` holds `n × len` bytes.
    fn gather(&self, bytes: &[u8], out: &mut [u8]) {
        fn fixed<const N: usize>(r: &UniformRuns, bytes: &[u8], out: &mut [u8]) {
            for (i, o) in out.chunks_exact_mut(N).enumerate() {
                let at = r.at(i);
                o.copy_from_slice(&bytes[at..at + N]);
            }
        }
        match self.len {
            1 => fixed::<1>(self, bytes, out),
            2 => fixed::<2>(self, bytes, out),
            4 => fixed::<4>(self, bytes, out),
            8 => fixed::<8>(self, bytes, out),
            16 => fixed::<16>(self, bytes, out),
            len => {
                for (i, o) in out.chunks_exact_mut(len).enumerate() {
                    let at = self.at(i);
                    o.copy_from_slice(&bytes[at..at + len]);
                }
            }
        }
    }

    /// Unpack: `packed` holds at most `n × len` bytes (a shorter message ends inside a run).
    fn scatter(&self, packed: &[u8], bytes: &mut [u8]) {
        fn fixed<const N: usize>(r: &UniformRuns, packed: &[u8], bytes: &mut [u8]) {
            for (i, p) in packed.chunks_exact(N).enumerate() {
                let at = r.at(i);
                bytes[at..at + N].copy_from_slice(p);
            }
        }
        let whole = packed.len() / self.len * self.len;
        let (full, tail) = packed.split_at(whole);
        match self.len {
            1 => fixed::<1>(self, full, bytes),
            2 => fixed::<2>(self, full, bytes),
            4 => fixed::<4>(self, full, bytes),
            8 => fixed::<8>(self, full, bytes),
            16 => fixed::<16>(self, full, bytes),
            len => {
                for (i, p) in full.chunks_exact(len).enumerate() {
                    let at = self.at(i);
                    bytes[at..at + len].copy_from_slice(p);
                }
            }
        }
        if !tail.is_empty() {
            let at = self.at(whole / self.len);
            bytes[at..at + tail.len()].copy_from_slice(tail);
        }
    }
}

/// Copy one segment. The common element sizes get fixed-size copies (a move or two)
/// instead of a call into `memcpy`: strided layouts are mostly such short runs.
#[inline(always)]
fn copy_run(dst: &mut [u8], src: &[u8]) {
    match src.len() {
        4 => dst[..4].copy_from_slice(&src[..4]),
        8 => dst[..8].copy_from_slice(&src[..8]),
        16 => dst[..16].copy_from_slice(&src[..16]),
        _ => dst.copy_from_slice(src),
    }
}

fn check_lengths(
    constructor: &'static str,
    what: &'static str,
    blocklengths: &[usize],
    got: usize,
) -> Result<(), DatatypeError> {
    if got != blocklengths.len() {
        return Err(DatatypeError::LengthMismatch {
            constructor,
            what,
            got,
            expected: blocklengths.len(),
        });
    }
    Ok(())
}

/// The start of a byte named by two of the runs (offset, len), if any.
fn first_overlap(runs: impl Iterator<Item = (i128, usize)>) -> Option<i128> {
    let mut v: Vec<(i128, usize)> = runs.filter(|r| r.1 > 0).collect();
    v.sort_unstable();
    v.windows(2)
        .find(|w| w[0].0 + w[0].1 as i128 > w[1].0)
        .map(|w| w[1].0)
}

#[cfg(test)]
thread_local! {
    /// A lower flatten limit for this thread's tests: every layout nested.
    static FLATTEN_OVERRIDE: Cell<Option<usize>> = const { Cell::new(None) };
}

/// [`FLATTEN_LIMIT`], lowered by the tests that check the nested walk.
fn flatten_limit() -> u128 {
    #[cfg(test)]
    if let Some(l) = FLATTEN_OVERRIDE.with(Cell::get) {
        return l as u128;
    }
    FLATTEN_LIMIT as u128
}

thread_local! {
    /// Bytes the typed calls of this thread copied through scratch buffers.
    static STAGED: Cell<u64> = const { Cell::new(0) };
}

/// Bytes the `*_typed` calls of this thread have copied through scratch buffers so far
/// (packs plus unpacks). A contiguous layout is sent and received in place and adds
/// nothing; a non-contiguous one adds its packed size on each side it is used.
pub fn staged_bytes() -> u64 {
    STAGED.with(Cell::get)
}

fn count_staged(bytes: usize) {
    STAGED.with(|s| s.set(s.get() + bytes as u64));
}
