//! The one reader and writer of integer fields for everything rmca puts on a wire: business
//! cards in the modex, BTL and PML headers, the soft verbs provider's datagrams and segments.
//!
//! # Byte order: little-endian, everywhere
//! Every multi-byte integer this module reads or writes is little-endian, and no rmca format
//! uses another order. Every host rmca runs on (x86-64, AArch64 as Linux runs it) is
//! little-endian, so a field is a plain load or store with no byte swap on the message path,
//! and the same bytes are what btl-shm's in-memory rings hold natively. Network order would
//! buy nothing: all ranks of a job run the same build on hosts of the same order, and every
//! card carries a version byte so that a job mixing builds refuses clearly instead of
//! misreading fields.
//!
//! Two ways to read:
//! - [`Reader`], a cursor over `&[u8]` whose getters return [`Truncated`] on short input: for
//!   variable-length formats (key lists, address blobs) and anything parsed once.
//! - `read_*_at(buf, offset)`, fixed-offset reads for views whose length was checked once up
//!   front (the hot-path headers): they compile to one bounds check and one load. They panic
//!   on an out-of-range offset like slice indexing does, so call them only after that check;
//!   [`Reader`] is the form for unchecked input.
//!
//! [`Writer`] appends to a `Vec<u8>`; `write_*_at` stores at a fixed offset.

use thiserror::Error;

/// Input ended before a field did.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
#[error("truncated: a {need}-byte field at offset {at}, input has only {have} bytes")]
pub struct Truncated {
    /// Offset of the field.
    pub at: usize,
    /// Width of the field.
    pub need: usize,
    /// Length of the input.
    pub have: usize,
}

/// A cursor reading little-endian fields from the front of a byte slice.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Offset of the next field.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The bytes not read yet, without consuming them.
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Truncated> {
        let short = Truncated {
            at: self.pos,
            need: n,
            have: self.buf.len(),
        };
        let end = self.pos.checked_add(n).ok_or(short)?;
        let b = self.buf.get(self.pos..end).ok_or(short)?;
        self.pos = end;
        Ok(b)
    }

    /// The next `N` bytes as an array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], Truncated> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(a)
    }

    /// Skip `n` bytes.
    pub fn skip(&mut self, n: usize) -> Result<(), Truncated> {
        self.bytes(n).map(|_| ())
    }

    /// The next byte.
    pub fn u8(&mut self) -> Result<u8, Truncated> {
        Ok(self.array::<1>()?[0])
    }

    /// The next little-endian `u16`.
    pub fn u16(&mut self) -> Result<u16, Truncated> {
        self.array().map(u16::from_le_bytes)
    }

    /// The next little-endian `u32`.
    pub fn u32(&mut self) -> Result<u32, Truncated> {
        self.array().map(u32::from_le_bytes)
    }

    /// The next little-endian `i32`.
    pub fn i32(&mut self) -> Result<i32, Truncated> {
        self.array().map(i32::from_le_bytes)
    }

    /// The next little-endian `u64`.
    pub fn u64(&mut self) -> Result<u64, Truncated> {
        self.array().map(u64::from_le_bytes)
    }
}

/// Appends little-endian fields to a `Vec<u8>`.
#[derive(Debug)]
pub struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> Writer<'a> {
    /// A writer appending to `out` (existing bytes are kept).
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        Self { out }
    }

    /// Bytes in the underlying vector.
    pub fn len(&self) -> usize {
        self.out.len()
    }

    /// True when the underlying vector is empty.
    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }

    /// Append raw bytes.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.out.extend_from_slice(b);
        self
    }

    /// Append a byte.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.out.push(v);
        self
    }

    /// Append a little-endian `u16`.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    /// Append a little-endian `u32`.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    /// Append a little-endian `i32`.
    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    /// Append a little-endian `u64`.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
}

#[inline]
fn at<const N: usize>(buf: &[u8], off: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&buf[off..off + N]);
    a
}

/// The little-endian `u16` at `off`.
///
/// # Panics
/// If `buf` is shorter than `off + 2` (check the length first, or use [`Reader`]).
#[inline]
pub fn read_u16_at(buf: &[u8], off: usize) -> u16 {
    u16::from_le_bytes(at(buf, off))
}

/// The little-endian `u32` at `off`.
///
/// # Panics
/// If `buf` is shorter than `off + 4` (check the length first, or use [`Reader`]).
#[inline]
pub fn read_u32_at(buf: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(at(buf, off))
}

/// The little-endian `i32` at `off`.
///
/// # Panics
/// If `buf` is shorter than `off + 4` (check the length first, or use [`Reader`]).
#[inline]
pub fn read_i32_at(buf: &[u8], off: usize) -> i32 {
    i32::from_le_bytes(at(buf, off))
}

/// The little-endian `u64` at `off`.
///
/// # Panics
/// If `buf` is shorter than `off + 8` (check the length first, or use [`Reader`]).
#[inline]
pub fn read_u64_at(buf: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(at(buf, off))
}

/// Store `v` little-endian at `off`.
///
/// # Panics
/// If `buf` is shorter than `off + 2`.
#[inline]
pub fn write_u16_at(buf: &mut [u8], off: usize, v: u16) {
    buf[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

/// Store `v` little-endian at `off`.
///
/// # Panics
/// If `buf` is shorter than `off + 4`.
#[inline]
pub fn write_u32_at(buf: &mut [u8], off: usize, v: u32) {
    buf[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// Store `v` little-endian at `off`.
///
/// # Panics
/// If `buf` is shorter than `off + 4`.
#[inline]
pub fn write_i32_at(buf: &mut [u8], off: usize, v: i32) {
    buf[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// Store `v` little-endian at `off`.
///
/// # Panics
/// If `buf` is shorter than `off + 8`.
#[inline]
pub fn write_u64_at(buf: &mut [u8], off: usize, v: u64) {
    buf[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// One field of a random record.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Field {
        U8(u8),
        U16(u16),
        U32(u32),
        I32(i32),
        U64(u64),
        Bytes(Vec<u8>),
    }

    fn field() -> impl Strategy<Value = Field> {
        prop_oneof![
            any::<u8>().prop_map(Field::U8),
            any::<u16>().prop_map(Field::U16),
            any::<u32>().prop_map(Field::U32),
            any::<i32>().prop_map(Field::I32),
            any::<u64>().prop_map(Field::U64),
            proptest::collection::vec(any::<u8>(), 0..12).prop_map(Field::Bytes),
        ]
    }

    fn write(w: &mut Writer<'_>, f: &Field) {
        match f {
            Field::U8(v) => w.u8(*v),
            Field::U16(v) => w.u16(*v),
            Field::U32(v) => w.u32(*v),
            Field::I32(v) => w.i32(*v),
            Field::U64(v) => w.u64(*v),
            Field::Bytes(v) => w.bytes(v),
        };
    }

    fn read(r: &mut Reader<'_>, like: &Field) -> Result<Field, Truncated> {
        Ok(match like {
            Field::U8(_) => Field::U8(r.u8()?),
            Field::U16(_) => Field::U16(r.u16()?),
            Field::U32(_) => Field::U32(r.u32()?),
            Field::I32(_) => Field::I32(r.i32()?),
            Field::U64(_) => Field::U64(r.u64()?),
            Field::Bytes(v) => Field::Bytes(r.bytes(v.len())?.to_vec()),
        })
    }

    /// The fixed-offset reader's view of a field written at `off`.
    fn read_at(b: &[u8], off: usize, like: &Field) -> Field {
        match like {
            Field::U8(_) => Field::U8(b[off]),
            Field::U16(_) => Field::U16(read_u16_at(b, off)),
            Field::U32(_) => Field::U32(read_u32_at(b, off)),
            Field::I32(_) => Field::I32(read_i32_at(b, off)),
            Field::U64(_) => Field::U64(read_u64_at(b, off)),
            Field::Bytes(v) => Field::Bytes(b[off..off + v.len()].to_vec()),
        }
    }

    fn width(f: &Field) -> usize {
        match f {
            Field::U8(_) => 1,
            Field::U16(_) => 2,
            Field::U32(_) | Field::I32(_) => 4,
            Field::U64(_) => 8,
            Field::Bytes(v) => v.len(),
        }
    }

    proptest! {
        /// Whatever the Writer appends, the Reader and the fixed-offset readers read back; a
        /// cut record fails with `Truncated` at the first field that does not fit, never panics.
        #[test]
        fn round_trip(prefix in proptest::collection::vec(any::<u8>(), 0..4),
                      fields in proptest::collection::vec(field(), 0..16),
                      cut in any::<prop::sample::Index>()) {
            let mut buf = prefix.clone();
            let mut w = Writer::new(&mut buf);
            for f in &fields {
                write(&mut w, f);
            }
            prop_assert_eq!(w.len(), prefix.len() + fields.iter().map(width).sum::<usize>());
            prop_assert_eq!(&buf[..prefix.len()], &prefix[..]);

            let mut r = Reader::new(&buf);
            r.skip(prefix.len()).unwrap();
            for f in &fields {
                let off = r.position();
                prop_assert_eq!(&read(&mut r, f).unwrap(), f);
                prop_assert_eq!(&read_at(&buf, off, f), f);
            }
            prop_assert_eq!(r.remaining(), 0);

            // The fixed-offset writers agree with the appending one.
            let mut fixed = vec![0u8; buf.len()];
            fixed[..prefix.len()].copy_from_slice(&prefix);
            let mut off = prefix.len();
            for f in &fields {
                match f {
                    Field::U8(v) => fixed[off] = *v,
                    Field::U16(v) => write_u16_at(&mut fixed, off, *v),
                    Field::U32(v) => write_u32_at(&mut fixed, off, *v),
                    Field::I32(v) => write_i32_at(&mut fixed, off, *v),
                    Field::U64(v) => write_u64_at(&mut fixed, off, *v),
                    Field::Bytes(v) => fixed[off..off + v.len()].copy_from_slice(v),
                }
                off += width(f);
            }
            prop_assert_eq!(&fixed, &buf);

            let cut = cut.index(buf.len() + 1);
            let mut r = Reader::new(&buf[..cut]);
            r.skip(prefix.len().min(cut)).unwrap();
            for f in &fields {
                let off = r.position();
                match read(&mut r, f) {
                    Ok(got) => prop_assert_eq!(&got, f),
                    Err(e) => {
                        prop_assert_eq!(e, Truncated { at: off, need: width(f), have: cut });
                        prop_assert!(off + width(f) > cut);
                        prop_assert_eq!(r.position(), off, "a failed read consumes nothing");
                        break;
                    }
                }
            }
        }
    }

    #[test]
    fn integers_are_little_endian() {
        let mut v = Vec::new();
        Writer::new(&mut v)
            .u16(0x0102)
            .u32(0x0304_0506)
            .i32(-2)
            .u64(0x0708_090a_0b0c_0d0e);
        assert_eq!(
            v,
            [2, 1, 6, 5, 4, 3, 0xfe, 0xff, 0xff, 0xff, 0x0e, 0x0d, 0x0c, 0x0b, 0x0a, 9, 8, 7]
        );
        assert_eq!(read_u32_at(&v, 2), 0x0304_0506);
    }

    #[test]
    fn short_input_names_the_field() {
        let mut r = Reader::new(&[1, 2, 3]);
        assert_eq!(r.u8(), Ok(1));
        let e = r.u32().unwrap_err();
        assert_eq!(
            e,
            Truncated {
                at: 1,
                need: 4,
                have: 3
            }
        );
        assert_eq!(
            e.to_string(),
            "truncated: a 4-byte field at offset 1, input has only 3 bytes"
        );
        assert_eq!(r.bytes(usize::MAX).unwrap_err().need, usize::MAX);
        assert_eq!(r.rest(), &[2, 3]);
    }
}
