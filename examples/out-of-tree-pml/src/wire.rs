//! The frames pml-sw puts on a BTL: one frame per BTL fragment, little-endian.
//!
//! ```text
//! 0      kind   u8    1 = DATA, 2 = ACK
//! 1..4   zero         reserved (a receiver refuses anything else: room for a version)
//! 4..8   seq    u32   DATA: this fragment's sequence number; ACK: 0
//! 8..12  ack    u32   cumulative: every fragment before `ack` has arrived (both kinds)
//! 12..16 crc    u32   CRC32C of bytes 0..12 and of the payload
//! 16..          payload (DATA only; an ACK has none)
//! ```
//!
//! Sequence numbers wrap: compare them with [`seq_lt`], never with `<`.

use thiserror::Error;

/// Bytes before the payload.
pub const HEADER_LEN: usize = 16;

/// A per-peer fragment sequence number (wrapping).
pub type Seq = u32;

/// `a` comes before `b` in wrapping sequence space (RFC 1982 serial number arithmetic; valid
/// while the two are less than 2^31 apart, which the window guarantees).
pub fn seq_lt(a: Seq, b: Seq) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// Kind byte of a data frame.
const KIND_DATA: u8 = 1;
/// Kind byte of a pure acknowledgement.
const KIND_ACK: u8 = 2;

/// A decoded frame; the payload borrows the received bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A fragment of the reliable stream, with the sender's cumulative ack riding along.
    Data {
        /// Its sequence number.
        seq: Seq,
        /// The sender's cumulative ack of our fragments.
        ack: Seq,
        /// The fragment's bytes.
        payload: &'a [u8],
    },
    /// A cumulative ack alone.
    Ack {
        /// Every fragment before it has arrived.
        ack: Seq,
    },
}

/// Why a received frame was dropped. None of these is fatal: the sender retransmits.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum FrameError {
    /// Fewer bytes than a header.
    #[error("frame of {0} bytes is shorter than the {HEADER_LEN}-byte header")]
    Short(usize),
    /// The checksum does not match: corrupted on the way.
    #[error("CRC32C mismatch: frame says {found:#010x}, bytes give {computed:#010x}")]
    Checksum {
        /// The checksum in the frame.
        found: u32,
        /// The checksum of the bytes received.
        computed: u32,
    },
    /// A kind byte this version does not know, or reserved bytes not zero.
    #[error("unknown frame kind {kind} (reserved bytes {reserved:?}); valid kinds are 1 (DATA) and 2 (ACK)")]
    Kind {
        /// The kind byte.
        kind: u8,
        /// The reserved bytes.
        reserved: [u8; 3],
    },
    /// An ACK that carries a payload or a sequence number.
    #[error("ACK frame with {0} payload bytes or a non-zero seq")]
    AckWithData(usize),
}

fn crc(header: &[u8], payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(header), payload)
}

fn encode(kind: u8, seq: Seq, ack: Seq, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(HEADER_LEN + payload.len());
    f.extend_from_slice(&[kind, 0, 0, 0]);
    f.extend_from_slice(&seq.to_le_bytes());
    f.extend_from_slice(&ack.to_le_bytes());
    let sum = crc(&f, payload);
    f.extend_from_slice(&sum.to_le_bytes());
    f.extend_from_slice(payload);
    f
}

/// Encode a DATA frame.
pub fn data(seq: Seq, ack: Seq, payload: &[u8]) -> Vec<u8> {
    encode(KIND_DATA, seq, ack, payload)
}

/// Encode an ACK frame.
pub fn ack(ack: Seq) -> Vec<u8> {
    encode(KIND_ACK, 0, ack, &[])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Decode and verify a frame.
pub fn decode(bytes: &[u8]) -> Result<Frame<'_>, FrameError> {
    if bytes.len() < HEADER_LEN {
        return Err(FrameError::Short(bytes.len()));
    }
    let (header, payload) = bytes.split_at(HEADER_LEN);
    // The checksum first: a corrupted kind byte is corruption, not an unknown kind.
    let found = u32_at(header, 12);
    let computed = crc(&header[..12], payload);
    if found != computed {
        return Err(FrameError::Checksum { found, computed });
    }
    let (seq, ack) = (u32_at(header, 4), u32_at(header, 8));
    let reserved = [header[1], header[2], header[3]];
    match header[0] {
        KIND_DATA if reserved == [0; 3] => Ok(Frame::Data { seq, ack, payload }),
        KIND_ACK if reserved == [0; 3] => {
            if payload.is_empty() && seq == 0 {
                Ok(Frame::Ack { ack })
            } else {
                Err(FrameError::AckWithData(payload.len()))
            }
        }
        kind => Err(FrameError::Kind { kind, reserved }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip() {
        let f = data(7, 3, b"hello");
        assert_eq!(f.len(), HEADER_LEN + 5);
        assert_eq!(
            decode(&f),
            Ok(Frame::Data {
                seq: 7,
                ack: 3,
                payload: b"hello"
            })
        );
        assert_eq!(decode(&ack(u32::MAX)), Ok(Frame::Ack { ack: u32::MAX }));
    }

    #[test]
    fn bad_frames_are_refused_with_the_reason() {
        assert_eq!(decode(&[1, 0, 0]), Err(FrameError::Short(3)));
        let mut f = data(1, 0, b"x");
        f[3] = 9; // a reserved byte: the checksum catches it first
        assert!(matches!(decode(&f), Err(FrameError::Checksum { .. })));
        // A well-checksummed frame of an unknown kind (a newer protocol version, say).
        let f = encode(5, 0, 0, &[]);
        assert!(decode(&f).unwrap_err().to_string().contains("valid kinds"));
        let f = encode(KIND_ACK, 0, 0, b"junk");
        assert_eq!(decode(&f), Err(FrameError::AckWithData(4)));
    }

    #[test]
    fn sequence_numbers_compare_across_the_wrap() {
        assert!(seq_lt(1, 2));
        assert!(!seq_lt(2, 2));
        assert!(seq_lt(u32::MAX, 0));
        assert!(!seq_lt(0, u32::MAX));
    }

    proptest! {
        /// Any single flipped bit is caught: a corrupted frame is never accepted.
        #[test]
        fn every_single_bit_flip_is_caught(
            seq: u32, ack_: u32, payload in proptest::collection::vec(any::<u8>(), 0..256),
            bit in 0usize..(8 * (HEADER_LEN + 256)),
        ) {
            let mut f = data(seq, ack_, &payload);
            let bit = bit % (8 * f.len());
            f[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(decode(&f).is_err());
        }

        /// Arbitrary bytes never panic the decoder.
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode(&bytes);
        }
    }
}
