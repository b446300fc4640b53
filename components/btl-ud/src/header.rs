//! The 4-byte fragment header every btl-ud datagram starts with (smoltcp-style view + repr).
//!
//! ```text
//!  0        1        2        3
//! +--------+--------+--------+--------+
//! |  tag   |ver|rsvd|   job tag (LE)  |
//! +--------+--------+--------+--------+
//! ```
//! The issue fixes the header at 4 bytes (tag + padding). The padding carries a version nibble
//! and a 16-bit tag derived from the job secret, so a datagram of another job or another
//! version of rmca that slipped past the provider is recognised and dropped, never delivered.
//! The sender's rank travels in the work request's immediate data (free on InfiniBand: it is
//! part of the transport header, not of the payload).

use rmca_framework::wire::{read_u16_at, write_u16_at};
use thiserror::Error;

/// Header length in bytes.
pub const HEADER_LEN: usize = 4;
/// Wire version (the high nibble of byte 1). 2: the job tag is little-endian, through
/// [`rmca_framework::wire`] (version 1 sent it big-endian).
pub const VERSION: u8 = 2;

mod field {
    pub const TAG: usize = 0;
    pub const VER: usize = 1;
    pub const JOB: usize = 2;
}

/// Why a header was rejected.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum HeaderError {
    /// Fewer than [`HEADER_LEN`] bytes.
    #[error("datagram of {0} bytes is shorter than the 4-byte btl-ud header")]
    Truncated(usize),
    /// Another wire version (or not a btl-ud datagram at all).
    #[error("btl-ud header version {0}, expected {VERSION}")]
    Version(u8),
    /// The reserved nibble is not zero.
    #[error("reserved header bits set")]
    Reserved,
}

/// Zero-copy view of a fragment header followed by its payload.
#[derive(Debug, Clone, Copy)]
pub struct FragPacket<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> FragPacket<T> {
    /// Wrap without checks (fields may panic on short buffers).
    pub fn new_unchecked(buf: T) -> Self {
        Self { buf }
    }

    /// Wrap after checking length, version and reserved bits.
    pub fn new_checked(buf: T) -> Result<Self, HeaderError> {
        let p = Self::new_unchecked(buf);
        p.check()?;
        Ok(p)
    }

    /// Validate the buffer.
    pub fn check(&self) -> Result<(), HeaderError> {
        let b = self.buf.as_ref();
        if b.len() < HEADER_LEN {
            return Err(HeaderError::Truncated(b.len()));
        }
        let v = b[field::VER];
        if v >> 4 != VERSION {
            return Err(HeaderError::Version(v >> 4));
        }
        if v & 0x0f != 0 {
            return Err(HeaderError::Reserved);
        }
        Ok(())
    }

    /// BTL tag.
    pub fn tag(&self) -> u8 {
        self.buf.as_ref()[field::TAG]
    }

    /// 16-bit job tag.
    pub fn job_tag(&self) -> u16 {
        read_u16_at(self.buf.as_ref(), field::JOB)
    }

    /// Bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> FragPacket<T> {
    /// Set the tag.
    pub fn set_tag(&mut self, tag: u8) {
        self.buf.as_mut()[field::TAG] = tag;
    }
    /// Set version and clear reserved bits.
    pub fn set_version(&mut self) {
        self.buf.as_mut()[field::VER] = VERSION << 4;
    }
    /// Set the job tag.
    pub fn set_job_tag(&mut self, job: u16) {
        write_u16_at(self.buf.as_mut(), field::JOB, job);
    }
}

/// A parsed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragRepr {
    /// BTL tag.
    pub tag: u8,
    /// 16-bit job tag ([`job_tag16`]).
    pub job_tag: u16,
}

impl FragRepr {
    /// Parse a checked view.
    pub fn parse<T: AsRef<[u8]>>(p: &FragPacket<T>) -> Result<Self, HeaderError> {
        p.check()?;
        Ok(Self {
            tag: p.tag(),
            job_tag: p.job_tag(),
        })
    }

    /// Write into the first [`HEADER_LEN`] bytes of `out` (which must be that long).
    pub fn emit(&self, out: &mut [u8]) {
        let mut p = FragPacket::new_unchecked(&mut out[..HEADER_LEN]);
        p.set_tag(self.tag);
        p.set_version();
        p.set_job_tag(self.job_tag);
    }
}

/// The 16-bit job tag: FNV-1a 64 of the secret folded to 16 bits. A filter against stray
/// traffic, not an authenticator (the secret never leaves the job).
pub fn job_tag16(secret: &[u8]) -> u16 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in secret {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let folded = (h ^ (h >> 16) ^ (h >> 32) ^ (h >> 48)) as u16;
    // 0 is what a zeroed buffer carries: keep it out of the valid tags.
    if folded == 0 {
        0x5544
    } else {
        folded
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn emit_parse_roundtrip() {
        let mut b = [0u8; 6];
        FragRepr {
            tag: 0x21,
            job_tag: 0xbeef,
        }
        .emit(&mut b);
        assert_eq!(b[..4], [0x21, VERSION << 4, 0xef, 0xbe]);
        let p = FragPacket::new_checked(&b[..]).unwrap();
        assert_eq!(
            FragRepr::parse(&p).unwrap(),
            FragRepr {
                tag: 0x21,
                job_tag: 0xbeef
            }
        );
        assert_eq!(p.payload().len(), 2);
    }

    #[test]
    fn rejects_short_and_foreign() {
        assert_eq!(
            FragPacket::new_checked(&[1u8, 0x20, 0][..]).unwrap_err(),
            HeaderError::Truncated(3)
        );
        // Version 1 (the big-endian build) and unknown versions are refused.
        assert_eq!(
            FragPacket::new_checked(&[1u8, 0x10, 0, 0][..]).unwrap_err(),
            HeaderError::Version(1)
        );
        assert_eq!(
            FragPacket::new_checked(&[1u8, 0x30, 0, 0][..]).unwrap_err(),
            HeaderError::Version(3)
        );
        assert_eq!(
            FragPacket::new_checked(&[1u8, 0x21, 0, 0][..]).unwrap_err(),
            HeaderError::Reserved
        );
    }

    #[test]
    fn job_tags_differ_and_are_never_zero() {
        assert_ne!(job_tag16(b"job-a"), job_tag16(b"job-b"));
        assert_ne!(job_tag16(b""), 0);
    }

    proptest! {
        #[test]
        fn parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..16)) {
            if let Ok(p) = FragPacket::new_checked(&bytes[..]) {
                let r = FragRepr::parse(&p).unwrap();
                let mut again = bytes.clone();
                r.emit(&mut again);
                prop_assert_eq!(again, bytes);
            }
        }

        #[test]
        fn roundtrip(tag in any::<u8>(), job in any::<u16>(), payload in proptest::collection::vec(any::<u8>(), 0..32)) {
            let mut b = vec![0u8; HEADER_LEN];
            b.extend_from_slice(&payload);
            FragRepr { tag, job_tag: job }.emit(&mut b);
            let p = FragPacket::new_checked(&b[..]).unwrap();
            prop_assert_eq!(FragRepr::parse(&p).unwrap(), FragRepr { tag, job_tag: job });
            prop_assert_eq!(p.payload(), &payload[..]);
        }
    }
}
