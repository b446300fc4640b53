//! Derived datatypes: layouts of typed buffers that are not one contiguous run of elements.
//!
//! A [`Datatype`] describes which bytes of a buffer a message carries and in which order,
//! as MPI's derived datatypes do: a column of a row-major matrix
//! ([`Datatype::vector`]), scattered blocks ([`Datatype::indexed`]), the fields of a struct
//! ([`Datatype::structure`]), or any nesting of those. Build one from the element types
//! ([`Datatype::of`]) and hand it, with a buffer and an instance count, to the `*_typed`
//! calls of [`crate::Communicator`] or to [`Datatype::pack`] / [`Datatype::unpack`].
//!
//! A datatype is committed when it is built: its layout is flattened into a list of
//! (byte offset, length) [`Segment`]s, adjacent segments merged, in type-map order. Using it
//! is then a walk over that list; nothing is interpreted per element. Datatypes are
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
//! assert_eq!(particle.extent(), size_of::<Particle>());
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
use std::sync::Arc;

use thiserror::Error;

/// The most (byte offset, length) pieces one constructor may produce before merging: a
/// layout is flattened when it is built, so this bounds the memory a datatype takes (16 B a
/// piece). Layouts with more pieces than this are refused with
/// [`DatatypeError::TooManySegments`].
pub const MAX_SEGMENTS: usize = 1 << 22;

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
    /// The layout would have more segments than [`MAX_SEGMENTS`].
    #[error("{constructor}: the layout has {pieces} pieces before merging, more than the limit of {limit}; build it from a coarser old type")]
    TooManySegments {
        /// The constructor.
        constructor: &'static str,
        /// Pieces it would produce.
        pieces: u128,
        /// [`MAX_SEGMENTS`].
        limit: usize,
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
    /// [`Datatype::resized`] with a negative extent.
    #[error("resized: extent {0} is negative; an extent is >= 0 bytes")]
    NegativeExtent(isize),
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
    /// Merged, in type-map order.
    segments: Box<[Segment]>,
    /// Bytes of data in one instance.
    size: usize,
    /// Lower bound and upper bound (extent = ub - lb), as MPI defines them.
    lb: isize,
    ub: isize,
    /// Bounds of the bytes actually named.
    true_lb: isize,
    true_ub: isize,
    /// Largest alignment of the element types inside (rounds a structure's extent).
    align: usize,
    /// Some byte of one instance is named twice.
    self_overlap: Option<isize>,
    /// The largest instance count checked to name no byte twice (any smaller count is then
    /// fine too): interleaved instances are checked once, not on every receive.
    disjoint_upto: AtomicUsize,
}

impl std::fmt::Debug for Datatype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = &self.map;
        f.debug_struct("Datatype")
            .field("size", &m.size)
            .field("lb", &m.lb)
            .field("extent", &self.extent())
            .field("true_lb", &m.true_lb)
            .field("segments", &m.segments.len())
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
        child: &'a TypeMap,
    },
    /// One block per entry: (displacement in bytes, blocklen, child).
    Listed(Vec<(i128, usize, &'a TypeMap)>),
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

impl TypeMap {
    fn extent(&self) -> i128 {
        self.ub as i128 - self.lb as i128
    }

    /// One segment as long as the extent: copies of it side by side are one run.
    fn is_dense(&self) -> bool {
        self.segments.len() == 1 && self.segments[0].len as i128 == self.extent()
    }

    /// Pieces a block of `blocklen` copies contributes before merging.
    fn pieces(&self, blocklen: usize) -> u128 {
        if blocklen == 0 || self.segments.is_empty() {
            0
        } else if self.is_dense() {
            1
        } else {
            blocklen as u128 * self.segments.len() as u128
        }
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
    /// extent, >= 0, apart).
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
        let widen = |b: Option<(i128, i128)>, lo: i128, hi: i128| {
            Some(b.map_or((lo, hi), |(l, u)| (l.min(lo), u.max(hi))))
        };
        // From the first instance's `lo` to the last instance's `hi`.
        let span = |lo: isize,
                    hi: isize,
                    names: (&'static str, &'static str)|
         -> Result<(i128, i128), DatatypeError> {
            let from = ck(disp.checked_add(lo as i128), constructor, names.0)?;
            let to = ck(
                disp.checked_add(last)
                    .and_then(|v| v.checked_add(hi as i128)),
                constructor,
                names.1,
            )?;
            Ok((from, to))
        };
        let (lb, ub) = span(child.lb, child.ub, ("lower bound", "upper bound"))?;
        self.bounds = widen(self.bounds, lb, ub);
        if !child.segments.is_empty() {
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

/// Appends segments in type-map order, merging each with the previous one when they touch.
struct SegmentWriter {
    segments: Vec<Segment>,
}

impl SegmentWriter {
    fn push(&mut self, offset: isize, len: usize) {
        if len == 0 {
            return;
        }
        if let Some(last) = self.segments.last_mut() {
            if last.offset.checked_add_unsigned(last.len) == Some(offset) {
                last.len += len;
                return;
            }
        }
        self.segments.push(Segment { offset, len });
    }

    /// Append `blocklen` copies of `child` starting at byte `disp`. Every offset was
    /// bounds-checked by the caller (it fits in isize).
    fn block(&mut self, disp: i128, blocklen: usize, child: &TypeMap) {
        if blocklen == 0 || child.segments.is_empty() {
            return;
        }
        if child.is_dense() {
            let s = child.segments[0];
            self.push((disp + s.offset as i128) as isize, s.len * blocklen);
            return;
        }
        let ext = child.extent();
        for k in 0..blocklen as i128 {
            let base = disp + k * ext;
            for s in child.segments.iter() {
                self.push((base + s.offset as i128) as isize, s.len);
            }
        }
    }
}

impl Datatype {
    /// The type of one `T`: `size_of::<T>()` contiguous bytes, aligned as `T`.
    pub fn of<T: bytemuck::Pod>() -> Datatype {
        let size = std::mem::size_of::<T>();
        let segments: Box<[Segment]> = if size == 0 {
            Box::new([])
        } else {
            Box::new([Segment {
                offset: 0,
                len: size,
            }])
        };
        Datatype {
            map: Arc::new(TypeMap {
                segments,
                size,
                lb: 0,
                // size_of is at most isize::MAX.
                ub: size as isize,
                true_lb: 0,
                true_ub: size as isize,
                align: std::mem::align_of::<T>(),
                self_overlap: None,
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
                Ok((disp, n, &*old.map))
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
            .map(|(&n, &d)| (d as i128, n, &*old.map))
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
            .map(|((&n, &d), t)| (d as i128, n, &*t.map))
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

    /// `old` with its lower bound set to `lb` and its extent to `extent` bytes (>= 0); the
    /// bytes it names are unchanged. The usual use: shrink a column type's extent to one
    /// element, so that consecutive instances are consecutive columns.
    pub fn resized(old: &Datatype, lb: isize, extent: isize) -> Result<Datatype, DatatypeError> {
        if extent < 0 {
            return Err(DatatypeError::NegativeExtent(extent));
        }
        let ub = lb.checked_add(extent).ok_or(DatatypeError::Overflow {
            constructor: "resized",
            what: "lb + extent",
        })?;
        let m = &old.map;
        Ok(Datatype {
            map: Arc::new(TypeMap {
                segments: m.segments.clone(),
                size: m.size,
                lb,
                ub,
                true_lb: m.true_lb,
                true_ub: m.true_ub,
                align: m.align,
                self_overlap: m.self_overlap,
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
        // Everything is sized and bounded before a single segment is written, so that no
        // input makes the builder loop or allocate beyond MAX_SEGMENTS.
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
        if pieces > MAX_SEGMENTS as u128 {
            return Err(DatatypeError::TooManySegments {
                constructor,
                pieces,
                limit: MAX_SEGMENTS,
            });
        }
        let size = size
            .and_then(|s| usize::try_from(s).ok())
            .filter(|&s| s <= isize::MAX as usize)
            .ok_or(over("size"))?;
        let (mut lb, mut ub) = bounds.bounds.unwrap_or((0, 0));
        if let Some(a) = round_to_align {
            let extent = ub - lb;
            let a = a.max(1) as i128;
            ub = lb + (extent + a - 1) / a * a;
        }
        let (true_lb, true_ub) = bounds.true_bounds.unwrap_or((0, 0));
        to_isize(ub - lb, constructor, "extent")?;
        let lb_i = to_isize(lb, constructor, "lower bound")?;
        ub = to_isize(ub, constructor, "upper bound")? as i128;
        lb = lb_i as i128;
        let true_lb = to_isize(true_lb, constructor, "true lower bound")?;
        let true_ub = to_isize(true_ub, constructor, "true upper bound")?;
        let mut w = SegmentWriter {
            segments: Vec::with_capacity(pieces as usize),
        };
        match blocks {
            Blocks::Regular {
                count,
                blocklen,
                stride,
                child,
            } => {
                // (A block with nothing in it must not cost `count` iterations.)
                if child.pieces(blocklen) > 0 {
                    for i in 0..count as i128 {
                        w.block(i * stride, blocklen, child);
                    }
                }
            }
            Blocks::Listed(list) => {
                for (disp, n, child) in list {
                    w.block(disp, n, child);
                }
            }
        }
        let mut segments = w.segments;
        segments.shrink_to_fit();
        let self_overlap = first_overlap(segments.iter().map(|s| (s.offset as i128, s.len)));
        Ok(Datatype {
            map: Arc::new(TypeMap {
                segments: segments.into_boxed_slice(),
                size,
                lb: lb as isize,
                ub: ub as isize,
                true_lb,
                true_ub,
                align,
                self_overlap: self_overlap.map(|o| o as isize),
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

    /// Extent in bytes: how far apart consecutive instances are.
    pub fn extent(&self) -> usize {
        // ub >= lb: every constructor keeps it so.
        (self.map.ub as i128 - self.map.lb as i128) as usize
    }

    /// Lower bound of the bytes actually named (0 for an empty type).
    pub fn true_lb(&self) -> isize {
        self.map.true_lb
    }

    /// Span of the bytes actually named, from the true lower bound.
    pub fn true_extent(&self) -> usize {
        (self.map.true_ub as i128 - self.map.true_lb as i128) as usize
    }

    /// The committed layout of one instance: merged runs of bytes in type-map order.
    pub fn segments(&self) -> &[Segment] {
        &self.map.segments
    }

    /// True when `count` instances are one run of bytes (sent and received in place).
    pub fn is_contiguous(&self, count: usize) -> bool {
        self.contiguous_run(count).is_some()
    }

    /// The run `count` instances occupy, if they are one: (byte offset, length).
    fn contiguous_run(&self, count: usize) -> Option<(isize, usize)> {
        let m = &self.map;
        match &*m.segments {
            _ if count == 0 => Some((0, 0)),
            [] => Some((0, 0)),
            [s] if count == 1 || s.len as i128 == self.map.ub as i128 - self.map.lb as i128 => {
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

    /// Check that `count` instances fit a buffer of `len` bytes.
    pub(crate) fn check_bounds(&self, count: usize, len: usize) -> Result<(), DatatypeError> {
        let m = &self.map;
        if count == 0 || m.segments.is_empty() {
            return Ok(());
        }
        // Instances are extent (>= 0) apart: the first starts lowest, the last ends highest.
        let last = (count as i128 - 1) * (m.ub as i128 - m.lb as i128);
        let (start, end) = (m.true_lb as i128, last + m.true_ub as i128);
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
        for s in self.map.segments.iter() {
            if s.offset % e != 0 {
                return Err(split("segment offset", s.offset));
            }
            if !s.len.is_multiple_of(elem) {
                return Err(split("segment length", s.len as isize));
            }
        }
        if !self.extent().is_multiple_of(elem) {
            return Err(split("extent", self.extent() as isize));
        }
        Ok(())
    }

    /// Check that `count` instances name no byte twice (needed to write into them).
    pub(crate) fn check_no_overlap(&self, count: usize) -> Result<(), DatatypeError> {
        let m = &self.map;
        if count == 0 || m.segments.is_empty() {
            return Ok(());
        }
        if let Some(offset) = m.self_overlap {
            return Err(DatatypeError::Overlap { count, offset });
        }
        let extent = m.ub as i128 - m.lb as i128;
        if count > 1 && extent == 0 {
            // Every instance is the same bytes.
            return Err(DatatypeError::Overlap {
                count,
                offset: m.segments[0].offset,
            });
        }
        if count == 1 || extent >= m.true_ub as i128 - m.true_lb as i128 {
            // Each instance stays inside its own [true_lb, true_ub) shifted by the extent.
            return Ok(());
        }
        if count <= m.disjoint_upto.load(Ordering::Relaxed) {
            return Ok(());
        }
        // More bytes than room for them: an overlap somewhere (and, otherwise, the runs to
        // sort below are at most the span's bytes, which the caller checked fit the buffer).
        let bytes = count as u128 * m.size as u128;
        let span = (count as i128 - 1) * extent + m.true_ub as i128 - m.true_lb as i128;
        if bytes > span as u128 {
            return Err(DatatypeError::OverlapBySize { count, bytes, span });
        }
        // Interleaved instances (a resized column type): check them all.
        let all = (0..count as i128).flat_map(|i| {
            m.segments
                .iter()
                .map(move |s| (i * extent + s.offset as i128, s.len))
        });
        match first_overlap(all) {
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

    /// Calls `f(buffer offset, packed offset, length)` for each segment of each of `count`
    /// instances, in order, while it returns true. The caller checked the bounds: every
    /// offset is non-negative and inside the buffer, so plain `usize` arithmetic is exact.
    #[inline(always)]
    fn for_each_run(&self, count: usize, mut f: impl FnMut(usize, usize, usize) -> bool) {
        let m = &self.map;
        let extent = self.extent();
        let mut pos = 0;
        for i in 0..count {
            let base = i * extent;
            for s in m.segments.iter() {
                let at = base.wrapping_add_signed(s.offset);
                if !f(at, pos, s.len) {
                    return;
                }
                pos += s.len;
            }
        }
    }

    /// Pack with the bounds checked and `out` exactly `pack_size(count)` long.
    pub(crate) fn pack_unchecked(&self, bytes: &[u8], count: usize, out: &mut [u8]) {
        if let Some((start, len)) = self.contiguous_run(count) {
            let start = start.max(0) as usize;
            out.copy_from_slice(&bytes[start..start + len]);
            return;
        }
        self.for_each_run(count, |at, pos, len| {
            copy_run(&mut out[pos..pos + len], &bytes[at..at + len]);
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
        let total = packed.len();
        self.for_each_run(count, |at, pos, len| {
            if pos + len <= total {
                copy_run(&mut bytes[at..at + len], &packed[pos..pos + len]);
                return pos + len < total;
            }
            // A shorter message ends inside this segment.
            let n = total - pos;
            bytes[at..at + n].copy_from_slice(&packed[pos..]);
            false
        });
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
