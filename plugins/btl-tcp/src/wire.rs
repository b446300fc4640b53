//! Byte layouts of the TCP stream, as zero-copy views ([`HelloPacket`], [`FramePacket`]) over
//! any buffer, separate from their parsed forms ([`HelloRepr`], [`FrameRepr`]).
//!
//! A connection carries data one way only (the connector sends, the acceptor receives):
//!
//! ```text
//! hello: magic "RMTC" | version u8 | from u32 LE | to u32 LE | secret_len u16 LE | secret bytes
//! frame: tag u8 | len u32 LE | len bytes          (repeated until the stream ends)
//! ```
//!
//! Integers are little-endian: every host we target is, so no byte swapping on the hot path.
//! They are read and written through [`rmca_framework::wire`], rmca's one byte-order rule.

use rmca_framework::wire::{read_u16_at, read_u32_at, write_u16_at, write_u32_at};
use thiserror::Error;

/// The first bytes of every connection: tells a stray client (port scanner, another program)
/// apart from an rmca peer before anything else is believed.
pub const MAGIC: [u8; 4] = *b"RMTC";

/// Version of this layout; a peer speaking another one is refused at the handshake.
pub const VERSION: u8 = 1;

/// Longest job secret accepted in a hello (a bound so that a hostile length cannot make the
/// receiver buffer without limit before it rejects the connection).
pub const MAX_SECRET_LEN: usize = 1024;

/// Bytes of a frame header.
pub const FRAME_HEADER_LEN: usize = 5;

/// Errors of parsing a view or a repr.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// Not enough bytes yet (on a stream: wait for more).
    #[error("truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes needed for the whole item.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// The connection does not start with [`MAGIC`].
    #[error("bad magic {0:02x?} (not an rmca btl-tcp peer)")]
    BadMagic([u8; 4]),
    /// The peer speaks another layout version.
    #[error("unsupported btl-tcp wire version {found} (this build speaks {VERSION})")]
    BadVersion {
        /// The peer's version.
        found: u8,
    },
    /// The announced secret is longer than [`MAX_SECRET_LEN`].
    #[error("hello announces a {0}-byte secret, more than the {MAX_SECRET_LEN} allowed")]
    SecretTooLong(usize),
}

/// Field offsets (widths in the module doc).
mod field {
    pub const MAGIC: std::ops::Range<usize> = 0..4;
    pub const VERSION: usize = 4;
    pub const RANK: usize = 5;
    pub const TO: usize = 9;
    pub const SECRET_LEN: usize = 13;
    pub const SECRET: usize = 15;

    pub const TAG: usize = 0;
    pub const LEN: usize = 1;
    pub const PAYLOAD: usize = 5;
}

/// Fixed part of a hello.
pub const HELLO_HEADER_LEN: usize = field::SECRET;

/// A view of a hello message.
#[derive(Debug, Clone)]
pub struct HelloPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> HelloPacket<T> {
    /// Wrap without checking the length (accessors may panic on a short buffer).
    pub fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wrap, checking that the fixed part and the announced secret are all present.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Check that every accessor is in bounds.
    pub fn check_len(&self) -> Result<(), WireError> {
        let have = self.buffer.as_ref().len();
        if have < HELLO_HEADER_LEN {
            return Err(WireError::Truncated {
                need: HELLO_HEADER_LEN,
                have,
            });
        }
        let secret_len = usize::from(self.secret_len());
        if secret_len > MAX_SECRET_LEN {
            return Err(WireError::SecretTooLong(secret_len));
        }
        let need = HELLO_HEADER_LEN + secret_len;
        if have < need {
            return Err(WireError::Truncated { need, have });
        }
        Ok(())
    }

    /// The magic bytes.
    pub fn magic(&self) -> [u8; 4] {
        let b = &self.buffer.as_ref()[field::MAGIC];
        [b[0], b[1], b[2], b[3]]
    }

    /// The layout version.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }

    /// The connector's rank.
    pub fn rank(&self) -> u32 {
        read_u32_at(self.buffer.as_ref(), field::RANK)
    }

    /// The rank the connector meant to reach (a stale or misrouted card shows here).
    pub fn to(&self) -> u32 {
        read_u32_at(self.buffer.as_ref(), field::TO)
    }

    /// Length of the secret.
    pub fn secret_len(&self) -> u16 {
        read_u16_at(self.buffer.as_ref(), field::SECRET_LEN)
    }

    /// The job secret.
    pub fn secret(&self) -> &[u8] {
        let start = field::SECRET;
        &self.buffer.as_ref()[start..start + usize::from(self.secret_len())]
    }

    /// Bytes of the whole hello.
    pub fn total_len(&self) -> usize {
        HELLO_HEADER_LEN + usize::from(self.secret_len())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> HelloPacket<T> {
    fn data_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
}

/// A parsed hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelloRepr<'a> {
    /// The connector's rank.
    pub rank: u32,
    /// The rank the connector meant to reach.
    pub to: u32,
    /// The connector's job secret.
    pub secret: &'a [u8],
}

impl<'a> HelloRepr<'a> {
    /// Parse a checked view (magic and version are verified here).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &'a HelloPacket<&'a T>,
    ) -> Result<Self, WireError> {
        packet.check_len()?;
        if packet.magic() != MAGIC {
            return Err(WireError::BadMagic(packet.magic()));
        }
        if packet.version() != VERSION {
            return Err(WireError::BadVersion {
                found: packet.version(),
            });
        }
        Ok(Self {
            rank: packet.rank(),
            to: packet.to(),
            secret: packet.secret(),
        })
    }

    /// Bytes [`HelloRepr::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        HELLO_HEADER_LEN + self.secret.len()
    }

    /// Write into `packet`, which must be [`HelloRepr::buffer_len`] bytes long.
    /// The secret must not exceed [`MAX_SECRET_LEN`] (checked by the caller at init).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut HelloPacket<T>) {
        debug_assert!(self.secret.len() <= MAX_SECRET_LEN);
        let d = packet.data_mut();
        d[field::MAGIC].copy_from_slice(&MAGIC);
        d[field::VERSION] = VERSION;
        write_u32_at(d, field::RANK, self.rank);
        write_u32_at(d, field::TO, self.to);
        write_u16_at(d, field::SECRET_LEN, self.secret.len() as u16);
        d[field::SECRET..field::SECRET + self.secret.len()].copy_from_slice(self.secret);
    }
}

/// A view of one data frame.
#[derive(Debug, Clone)]
pub struct FramePacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> FramePacket<T> {
    /// Wrap without checking the length.
    pub fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wrap, checking that the header and the whole payload are present.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Check that the header is present (the payload may still be incomplete: see
    /// [`FramePacket::check_len`]).
    pub fn check_header(&self) -> Result<(), WireError> {
        let have = self.buffer.as_ref().len();
        if have < FRAME_HEADER_LEN {
            return Err(WireError::Truncated {
                need: FRAME_HEADER_LEN,
                have,
            });
        }
        Ok(())
    }

    /// Check that the header and the payload are present.
    pub fn check_len(&self) -> Result<(), WireError> {
        self.check_header()?;
        let have = self.buffer.as_ref().len();
        let need = self.total_len();
        if have < need {
            return Err(WireError::Truncated { need, have });
        }
        Ok(())
    }

    /// The BTL tag.
    pub fn tag(&self) -> u8 {
        self.buffer.as_ref()[field::TAG]
    }

    /// Payload length.
    pub fn len(&self) -> u32 {
        read_u32_at(self.buffer.as_ref(), field::LEN)
    }

    /// True for an empty payload.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Header plus payload length.
    pub fn total_len(&self) -> usize {
        FRAME_HEADER_LEN + self.len() as usize
    }

    /// The payload.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..self.total_len()]
    }
}

/// A parsed frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRepr {
    /// The BTL tag.
    pub tag: u8,
    /// Payload length.
    pub len: u32,
}

impl FrameRepr {
    /// Parse the header of a view (the payload need not be complete).
    pub fn parse<T: AsRef<[u8]>>(packet: &FramePacket<T>) -> Result<Self, WireError> {
        packet.check_header()?;
        Ok(Self {
            tag: packet.tag(),
            len: packet.len(),
        })
    }

    /// Write the 5 header bytes.
    pub fn emit_header(&self) -> [u8; FRAME_HEADER_LEN] {
        let mut h = [self.tag, 0, 0, 0, 0];
        write_u32_at(&mut h, field::LEN, self.len);
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hello_bytes(rank: u32, secret: &[u8]) -> Vec<u8> {
        let repr = HelloRepr {
            rank,
            to: 7,
            secret,
        };
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut HelloPacket::new_unchecked(&mut buf[..]));
        buf
    }

    #[test]
    fn hello_layout_is_stable() {
        let b = hello_bytes(0x0102_0304, b"xy");
        assert_eq!(
            b,
            [b'R', b'M', b'T', b'C', 1, 4, 3, 2, 1, 7, 0, 0, 0, 2, 0, b'x', b'y']
        );
    }

    #[test]
    fn hello_rejects_foreign_bytes() {
        let mut b = hello_bytes(1, b"s");
        b[0] = b'G';
        let p = HelloPacket::new_checked(&b[..]).unwrap();
        assert!(matches!(HelloRepr::parse(&p), Err(WireError::BadMagic(_))));
        let mut b = hello_bytes(1, b"s");
        b[4] = 9;
        let p = HelloPacket::new_checked(&b[..]).unwrap();
        assert_eq!(
            HelloRepr::parse(&p),
            Err(WireError::BadVersion { found: 9 })
        );
        let mut b = hello_bytes(1, b"s");
        b[13..15].copy_from_slice(&5000u16.to_le_bytes());
        assert_eq!(
            HelloPacket::new_checked(&b[..]).unwrap_err(),
            WireError::SecretTooLong(5000)
        );
    }

    #[test]
    fn frame_header_roundtrip() {
        let h = FrameRepr { tag: 0x41, len: 3 }.emit_header();
        let mut b = h.to_vec();
        b.extend_from_slice(b"abc");
        let p = FramePacket::new_checked(&b[..]).unwrap();
        assert_eq!(
            FrameRepr::parse(&p).unwrap(),
            FrameRepr { tag: 0x41, len: 3 }
        );
        assert_eq!(p.payload(), b"abc");
        assert_eq!(
            FramePacket::new_checked(&b[..6]).unwrap_err(),
            WireError::Truncated { need: 8, have: 6 }
        );
    }

    proptest! {
        #[test]
        fn hello_roundtrip(rank in any::<u32>(), secret in proptest::collection::vec(any::<u8>(), 0..64)) {
            let b = hello_bytes(rank, &secret);
            let p = HelloPacket::new_checked(&b[..]).unwrap();
            let r = HelloRepr::parse(&p).unwrap();
            prop_assert_eq!(r.rank, rank);
            prop_assert_eq!(r.to, 7);
            prop_assert_eq!(r.secret, &secret[..]);
            prop_assert_eq!(p.total_len(), b.len());
        }

        #[test]
        fn views_never_panic_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(p) = HelloPacket::new_checked(&bytes[..]) {
                let _ = HelloRepr::parse(&p);
                prop_assert!(p.total_len() <= bytes.len());
            }
            if let Ok(p) = FramePacket::new_checked(&bytes[..]) {
                prop_assert!(p.payload().len() + FRAME_HEADER_LEN <= bytes.len());
            }
        }
    }
}
