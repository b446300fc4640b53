//! ob1 wire headers (Open MPI's names): MATCH, RNDV, RGET, ACK, FRAG, FIN.
//!
//! smoltcp style: [`Packet`] is a zero-copy view over received bytes whose
//! [`Packet::new_checked`] validates lengths once, so the accessors cannot go out of bounds;
//! [`Repr`] is the parsed, owned form, and [`Repr::emit`] writes it back. Integers go through
//! [`rmca_framework::wire`] (little-endian, as all of rmca's wire formats); the hot path reads
//! them at fixed offsets. Every header starts with `type: u8, flags: u8, reserved: u16`.
//!
//! ```text
//! MATCH  type flags rsv | ctx u32 | tag i32 | seq u32                               (16 B) + data
//! RNDV   MATCH fields   | msg_len u64 | src_req u64                                 (32 B) + first bytes
//! RGET   RNDV fields    | addr u64 | nkeys u8 | nkeys x (name_len u8, name, key_len u16, key)
//! ACK    type flags rsv | src_req u64 | dst_req u64 | wanted u64                    (28 B)
//! FRAG   type flags rsv | dst_req u64 | offset u64                                  (20 B) + data
//! FIN    type flags rsv | src_req u64                                               (12 B)
//! ```
//!
//! The envelope carries no source rank (Open MPI's `hdr_src`): every BTL names the sending
//! peer with each fragment it delivers, and that is the message's source. A 16-byte MATCH
//! keeps an 8-byte eager message at 24 bytes, one 32-byte slot of btl-shm's ring with its
//! 8-byte control word.

use rmca_framework::wire::{
    read_u16_at, read_u32_at, read_u64_at, write_u16_at, write_u32_at, write_u64_at, Reader,
};
use thiserror::Error;

/// Header type codes.
pub mod kind {
    /// Eager message: envelope + the whole payload.
    pub const MATCH: u8 = 1;
    /// Rendezvous request: envelope, total length, first bytes.
    pub const RNDV: u8 = 2;
    /// Rendezvous offering the sender's registered buffer for the receiver to read.
    pub const RGET: u8 = 3;
    /// Receiver matched a rendezvous: send the rest as FRAGs (or nothing), sync satisfied.
    pub const ACK: u8 = 4;
    /// A piece of a rendezvous message at an offset.
    pub const FRAG: u8 = 5;
    /// Receiver finished reading an RGET buffer.
    pub const FIN: u8 = 6;
}

/// Header flag bits.
pub mod flags {
    /// RNDV/RGET: synchronous send (the receiver acknowledges the match).
    pub const SYNC: u8 = 1 << 0;
    /// FIN: the receiver failed to read the buffer.
    pub const FAILED: u8 = 1 << 1;
}

/// Length of a MATCH header.
pub const MATCH_LEN: usize = 16;
/// Length of a RNDV header.
pub const RNDV_LEN: usize = 32;
/// Length of the fixed part of an RGET header (before the keys).
pub const RGET_FIXED_LEN: usize = 41;
/// Length of an ACK header.
pub const ACK_LEN: usize = 28;
/// Length of a FRAG header.
pub const FRAG_LEN: usize = 20;
/// Length of a FIN header.
pub const FIN_LEN: usize = 12;
/// Longest fixed-size control header (ACK).
pub const MAX_CTRL_LEN: usize = ACK_LEN;

/// Why bytes are not a valid ob1 header.
#[derive(Clone, Copy, Debug, Error, PartialEq, Eq)]
pub enum HdrError {
    /// Shorter than its header type requires.
    #[error("truncated header")]
    Truncated,
    /// Unknown type code.
    #[error("unknown header type {0}")]
    UnknownType(u8),
    /// A field holds an impossible value.
    #[error("malformed header: {0}")]
    Malformed(&'static str),
}

/// Field offsets (widths in the module doc).
mod field {
    pub const TYPE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const RESERVED: usize = 2;
    pub const CTX: usize = 4;
    pub const TAG: usize = 8;
    pub const SEQ: usize = 12;
    pub const MSG_LEN: usize = 16;
    pub const RNDV_SRC_REQ: usize = 24;
    pub const ADDR: usize = 32;
    pub const NKEYS: usize = 40;
    pub const REQ_A: usize = 4;
    pub const REQ_B: usize = 12;
    pub const WANTED: usize = 20;
}

/// The envelope of a buffer at least [`MATCH_LEN`] long.
#[inline]
fn envelope_at(b: &[u8]) -> MatchRepr {
    MatchRepr {
        ctx: read_u32_at(b, field::CTX),
        tag: read_u32_at(b, field::TAG) as i32,
        seq: read_u32_at(b, field::SEQ),
    }
}

/// A MATCH header for `m` (the eager hot path: no [`Repr`] round trip).
#[inline]
pub fn emit_match(m: &MatchRepr) -> [u8; MATCH_LEN] {
    // Two little-endian words (type, flags 0, reserved 0, ctx | tag, seq): two stores where
    // field-by-field bytes took six.
    let lo = u64::from(kind::MATCH) | u64::from(m.ctx) << 32;
    let hi = u64::from(m.tag as u32) | u64::from(m.seq) << 32;
    let mut b = [0u8; MATCH_LEN];
    write_u64_at(&mut b, 0, lo);
    write_u64_at(&mut b, 8, hi);
    b
}

/// If `data` is a MATCH fragment, its envelope and payload (the eager hot path of the
/// receiver; [`Packet::new_checked`] + [`Repr::parse`] agree with it on every input).
#[inline]
pub fn parse_match(data: &[u8]) -> Option<(MatchRepr, &[u8])> {
    if data.len() < MATCH_LEN || data[field::TYPE] != kind::MATCH {
        return None;
    }
    Some((envelope_at(data), &data[MATCH_LEN..]))
}

/// A zero-copy view of a received ob1 fragment.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
    header_len: usize,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Validate `buffer` (type known, long enough, RGET key list within bounds).
    pub fn new_checked(buffer: T) -> Result<Self, HdrError> {
        let b = buffer.as_ref();
        let ty = *b.first().ok_or(HdrError::Truncated)?;
        let min = match ty {
            kind::MATCH => MATCH_LEN,
            kind::RNDV => RNDV_LEN,
            kind::RGET => RGET_FIXED_LEN,
            kind::ACK => ACK_LEN,
            kind::FRAG => FRAG_LEN,
            kind::FIN => FIN_LEN,
            other => return Err(HdrError::UnknownType(other)),
        };
        if b.len() < min {
            return Err(HdrError::Truncated);
        }
        let mut header_len = min;
        if ty == kind::RGET {
            for _ in 0..b[field::NKEYS] {
                let name_len = usize::from(*b.get(header_len).ok_or(HdrError::Truncated)?);
                header_len += 1 + name_len;
                let kl = b
                    .get(header_len..header_len + 2)
                    .ok_or(HdrError::Truncated)?;
                header_len += 2 + usize::from(read_u16_at(kl, 0));
                if header_len > b.len() {
                    return Err(HdrError::Truncated);
                }
            }
            if header_len != b.len() {
                return Err(HdrError::Malformed("RGET carries bytes after its keys"));
            }
        }
        if matches!(ty, kind::RNDV | kind::RGET) {
            let msg_len = read_u64_at(b, field::MSG_LEN);
            if ((b.len() - header_len) as u64) > msg_len {
                return Err(HdrError::Malformed(
                    "rendezvous carries more bytes than the message length",
                ));
            }
        }
        Ok(Self { buffer, header_len })
    }

    /// Header type code (see [`kind`]).
    pub fn kind(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }
    /// Flag bits (see [`flags`]).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    /// Length of the header (payload follows).
    pub fn header_len(&self) -> usize {
        self.header_len
    }
    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len..]
    }
}

/// The matching envelope of MATCH/RNDV/RGET. There is no source rank: the message's source is
/// the peer the BTL reports the fragment from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatchRepr {
    /// Context id.
    pub ctx: u32,
    /// Tag.
    pub tag: i32,
    /// Per-(context, peer) sequence number.
    pub seq: u32,
}

/// A rendezvous request's fields beyond the envelope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RndvRepr {
    /// Envelope.
    pub hdr: MatchRepr,
    /// Total message length.
    pub msg_len: u64,
    /// The sender's request id (echoed in ACK/FIN).
    pub src_req: u64,
    /// Synchronous send.
    pub sync: bool,
}

/// One registration offered in an RGET: the BTL component it belongs to and its remote key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RgetKey {
    /// Component name of the BTL that made the registration.
    pub btl: String,
    /// Its `remote_key`.
    pub key: Vec<u8>,
}

/// A parsed ob1 header (payloads excluded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Repr {
    /// Eager message.
    Match(MatchRepr),
    /// Rendezvous request with the first bytes as payload.
    Rndv(RndvRepr),
    /// Rendezvous offering the sender's buffer at `addr` through `keys`.
    Rget {
        /// Rendezvous fields.
        rndv: RndvRepr,
        /// Address of the buffer in the sender.
        addr: u64,
        /// One key per BTL the sender registered with.
        keys: Vec<RgetKey>,
    },
    /// Receiver matched; send up to `wanted` bytes in total.
    Ack {
        /// Sender's request.
        src_req: u64,
        /// Receiver's request (target of FRAGs).
        dst_req: u64,
        /// Bytes the receiver accepts in total (min of message and buffer).
        wanted: u64,
    },
    /// Piece of a message at `offset` for receive request `dst_req`.
    Frag {
        /// Receiver's request.
        dst_req: u64,
        /// Offset of the payload in the message.
        offset: u64,
    },
    /// Receiver done with an RGET buffer.
    Fin {
        /// Sender's request.
        src_req: u64,
        /// The receiver could not read it.
        failed: bool,
    },
}

impl Repr {
    /// Parse a checked packet.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, HdrError> {
        let b = p.buffer.as_ref();
        let rndv = || RndvRepr {
            hdr: envelope_at(b),
            msg_len: read_u64_at(b, field::MSG_LEN),
            src_req: read_u64_at(b, field::RNDV_SRC_REQ),
            sync: p.flags() & flags::SYNC != 0,
        };
        Ok(match p.kind() {
            kind::MATCH => Repr::Match(envelope_at(b)),
            kind::RNDV => Repr::Rndv(rndv()),
            kind::RGET => {
                let n = b[field::NKEYS];
                let mut r = Reader::new(&b[RGET_FIXED_LEN..p.header_len]);
                let mut keys = Vec::with_capacity(usize::from(n));
                for _ in 0..n {
                    // new_checked walked the same list, so a short read cannot happen here.
                    let nl = usize::from(r.u8().map_err(|_| HdrError::Truncated)?);
                    let name =
                        std::str::from_utf8(r.bytes(nl).map_err(|_| HdrError::Truncated)?)
                            .map_err(|_| HdrError::Malformed("RGET key names a non-UTF-8 BTL"))?;
                    let kl = usize::from(r.u16().map_err(|_| HdrError::Truncated)?);
                    let key = r.bytes(kl).map_err(|_| HdrError::Truncated)?;
                    keys.push(RgetKey {
                        btl: name.to_owned(),
                        key: key.to_vec(),
                    });
                }
                Repr::Rget {
                    rndv: rndv(),
                    addr: read_u64_at(b, field::ADDR),
                    keys,
                }
            }
            kind::ACK => Repr::Ack {
                src_req: read_u64_at(b, field::REQ_A),
                dst_req: read_u64_at(b, field::REQ_B),
                wanted: read_u64_at(b, field::WANTED),
            },
            kind::FRAG => Repr::Frag {
                dst_req: read_u64_at(b, field::REQ_A),
                offset: read_u64_at(b, field::REQ_B),
            },
            kind::FIN => Repr::Fin {
                src_req: read_u64_at(b, field::REQ_A),
                failed: p.flags() & flags::FAILED != 0,
            },
            other => return Err(HdrError::UnknownType(other)),
        })
    }

    /// Bytes [`Repr::emit`] writes.
    pub fn header_len(&self) -> usize {
        match self {
            Repr::Match(_) => MATCH_LEN,
            Repr::Rndv(_) => RNDV_LEN,
            Repr::Rget { keys, .. } => {
                RGET_FIXED_LEN
                    + keys
                        .iter()
                        .map(|k| 3 + k.btl.len() + k.key.len())
                        .sum::<usize>()
            }
            Repr::Ack { .. } => ACK_LEN,
            Repr::Frag { .. } => FRAG_LEN,
            Repr::Fin { .. } => FIN_LEN,
        }
    }

    /// Write the header into `buf[..self.header_len()]`. Fails if `buf` is too short or an
    /// RGET key does not fit its length field.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, HdrError> {
        let len = self.header_len();
        let b = buf.get_mut(..len).ok_or(HdrError::Truncated)?;
        write_u16_at(b, field::RESERVED, 0);
        let put_match = |b: &mut [u8], m: &MatchRepr| {
            write_u32_at(b, field::CTX, m.ctx);
            write_u32_at(b, field::TAG, m.tag as u32);
            write_u32_at(b, field::SEQ, m.seq);
        };
        let put_rndv = |b: &mut [u8], r: &RndvRepr| {
            put_match(b, &r.hdr);
            b[field::FLAGS] = if r.sync { flags::SYNC } else { 0 };
            write_u64_at(b, field::MSG_LEN, r.msg_len);
            write_u64_at(b, field::RNDV_SRC_REQ, r.src_req);
        };
        match self {
            Repr::Match(m) => {
                b[field::TYPE] = kind::MATCH;
                b[field::FLAGS] = 0;
                put_match(b, m);
            }
            Repr::Rndv(r) => {
                b[field::TYPE] = kind::RNDV;
                put_rndv(b, r);
            }
            Repr::Rget { rndv, addr, keys } => {
                b[field::TYPE] = kind::RGET;
                put_rndv(b, rndv);
                write_u64_at(b, field::ADDR, *addr);
                b[field::NKEYS] = u8::try_from(keys.len())
                    .map_err(|_| HdrError::Malformed("more than 255 RGET keys"))?;
                let mut at = RGET_FIXED_LEN;
                for k in keys {
                    let nl = u8::try_from(k.btl.len())
                        .map_err(|_| HdrError::Malformed("BTL name over 255 bytes"))?;
                    let kl = u16::try_from(k.key.len())
                        .map_err(|_| HdrError::Malformed("remote key over 65535 bytes"))?;
                    b[at] = nl;
                    b[at + 1..at + 1 + k.btl.len()].copy_from_slice(k.btl.as_bytes());
                    at += 1 + k.btl.len();
                    write_u16_at(b, at, kl);
                    b[at + 2..at + 2 + k.key.len()].copy_from_slice(&k.key);
                    at += 2 + k.key.len();
                }
            }
            Repr::Ack {
                src_req,
                dst_req,
                wanted,
            } => {
                b[field::TYPE] = kind::ACK;
                b[field::FLAGS] = 0;
                write_u64_at(b, field::REQ_A, *src_req);
                write_u64_at(b, field::REQ_B, *dst_req);
                write_u64_at(b, field::WANTED, *wanted);
            }
            Repr::Frag { dst_req, offset } => {
                b[field::TYPE] = kind::FRAG;
                b[field::FLAGS] = 0;
                write_u64_at(b, field::REQ_A, *dst_req);
                write_u64_at(b, field::REQ_B, *offset);
            }
            Repr::Fin { src_req, failed } => {
                b[field::TYPE] = kind::FIN;
                b[field::FLAGS] = if *failed { flags::FAILED } else { 0 };
                write_u64_at(b, field::REQ_A, *src_req);
            }
        }
        Ok(len)
    }
}

/// Parse arbitrary bytes as far as possible; the fuzz target's entry point. Never panics.
pub fn parse_any(data: &[u8]) -> Result<(Repr, usize), HdrError> {
    let p = Packet::new_checked(data)?;
    let r = Repr::parse(&p)?;
    Ok((r, p.payload().len()))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn match_repr() -> impl Strategy<Value = MatchRepr> {
        (any::<u32>(), any::<i32>(), any::<u32>()).prop_map(|(ctx, tag, seq)| MatchRepr {
            ctx,
            tag,
            seq,
        })
    }

    fn rndv_repr() -> impl Strategy<Value = RndvRepr> {
        (match_repr(), any::<u64>(), any::<u64>(), any::<bool>()).prop_map(
            |(hdr, msg_len, src_req, sync)| RndvRepr {
                hdr,
                msg_len,
                src_req,
                sync,
            },
        )
    }

    fn repr() -> impl Strategy<Value = Repr> {
        let key = ("[a-z]{0,8}", proptest::collection::vec(any::<u8>(), 0..40))
            .prop_map(|(btl, key)| RgetKey { btl, key });
        prop_oneof![
            match_repr().prop_map(Repr::Match),
            rndv_repr().prop_map(Repr::Rndv),
            (
                rndv_repr(),
                any::<u64>(),
                proptest::collection::vec(key, 0..4)
            )
                .prop_map(|(rndv, addr, keys)| Repr::Rget { rndv, addr, keys }),
            (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(src_req, dst_req, wanted)| {
                Repr::Ack {
                    src_req,
                    dst_req,
                    wanted,
                }
            }),
            (any::<u64>(), any::<u64>())
                .prop_map(|(dst_req, offset)| Repr::Frag { dst_req, offset }),
            (any::<u64>(), any::<bool>())
                .prop_map(|(src_req, failed)| Repr::Fin { src_req, failed }),
        ]
    }

    proptest! {
        #[test]
        fn roundtrip(r in repr(), payload in proptest::collection::vec(any::<u8>(), 0..16)) {
            let mut buf = vec![0u8; r.header_len()];
            prop_assert_eq!(r.emit(&mut buf).unwrap(), r.header_len());
            let carries = match &r {
                Repr::Match(_) | Repr::Frag { .. } => true,
                Repr::Rndv(x) => x.msg_len >= payload.len() as u64,
                _ => false,
            };
            if carries {
                buf.extend_from_slice(&payload);
            }
            let p = Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(Repr::parse(&p).unwrap(), r);
            prop_assert_eq!(p.payload().len(), if carries { payload.len() } else { 0 });
        }

        /// The fuzz target's property, on random bytes biased towards valid type codes.
        #[test]
        fn whatever_parses_reemits_to_the_same_repr(ty in 1u8..7, rest in proptest::collection::vec(any::<u8>(), 0..96)) {
            let mut data = vec![ty];
            data.extend_from_slice(&rest);
            if let Ok(p) = Packet::new_checked(&data[..]) {
                if let Ok(r) = Repr::parse(&p) {
                    prop_assert_eq!(r.header_len(), p.header_len());
                    let mut out = vec![0u8; r.header_len()];
                    r.emit(&mut out).unwrap();
                    prop_assert_eq!(Repr::parse(&Packet::new_checked(&out[..]).unwrap()).unwrap(), r);
                }
            }
        }

        /// The hot-path encoder and decoder of MATCH agree with the general ones.
        #[test]
        fn match_fast_paths_agree(m in match_repr(), payload in proptest::collection::vec(any::<u8>(), 0..16), junk in proptest::collection::vec(any::<u8>(), 0..40)) {
            let mut general = [0u8; MATCH_LEN];
            Repr::Match(m).emit(&mut general).unwrap();
            prop_assert_eq!(emit_match(&m), general);
            let mut buf = general.to_vec();
            buf.extend_from_slice(&payload);
            prop_assert_eq!(parse_match(&buf), Some((m, &payload[..])));
            // On any bytes, the fast parser accepts exactly the MATCH fragments the general one does.
            let general = Packet::new_checked(&junk[..]).ok().and_then(|p| match Repr::parse(&p) {
                Ok(Repr::Match(m)) => Some((m, p.payload().to_vec())),
                _ => None,
            });
            prop_assert_eq!(parse_match(&junk).map(|(m, d)| (m, d.to_vec())), general);
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..96)) {
            let _ = parse_any(&data);
        }

        #[test]
        fn every_truncation_is_rejected(r in repr()) {
            let mut buf = vec![0u8; r.header_len()];
            r.emit(&mut buf).unwrap();
            for cut in 0..buf.len() {
                // A cut RGET may still be a valid RGET with fewer bytes only if it ends exactly
                // at a key boundary with a smaller count, which the count field forbids.
                prop_assert!(parse_any(&buf[..cut]).is_err(), "cut at {}", cut);
            }
        }
    }

    #[test]
    fn eager_8_byte_message_fits_one_32_byte_shm_slot() {
        // btl-shm's 32-byte ring slot holds an 8-byte control word + MATCH + 8 payload bytes.
        assert_eq!(MATCH_LEN, 16);
        let m = MatchRepr {
            ctx: 1,
            tag: 2,
            seq: 3,
        };
        let mut frag = emit_match(&m).to_vec();
        frag.extend_from_slice(&[0xAB; 8]);
        assert_eq!(frag.len(), 24);
        assert!(8 + frag.len() <= 32);
        assert_eq!(parse_match(&frag), Some((m, &[0xAB; 8][..])));
    }

    #[test]
    fn wire_layout_is_pinned() {
        let hdr = MatchRepr {
            ctx: 0x0403_0201,
            tag: -2,
            seq: 0x0c0b_0a09,
        };
        let envelope = [
            0, 0, 0, 0, 1, 2, 3, 4, 0xfe, 0xff, 0xff, 0xff, 9, 10, 11, 12,
        ];
        let mut m = envelope;
        m[0] = kind::MATCH;
        assert_eq!(emit_match(&hdr), m);
        let rndv = RndvRepr {
            hdr,
            msg_len: 0x1817_1615_1413_1211,
            src_req: 0x2827_2625_2423_2221,
            sync: true,
        };
        let mut b = [0u8; RNDV_LEN];
        Repr::Rndv(rndv).emit(&mut b).unwrap();
        assert_eq!(b[..2], [kind::RNDV, flags::SYNC]);
        assert_eq!(b[2..16], envelope[2..]);
        assert_eq!(b[16..24], rndv.msg_len.to_le_bytes());
        assert_eq!(b[24..32], rndv.src_req.to_le_bytes());
        let rget = Repr::Rget {
            rndv,
            addr: 0x3837_3635_3433_3231,
            keys: vec![RgetKey {
                btl: "sm".into(),
                key: vec![7],
            }],
        };
        let mut g = vec![0u8; rget.header_len()];
        assert_eq!(rget.emit(&mut g).unwrap(), RGET_FIXED_LEN + 6);
        assert_eq!(g[0], kind::RGET);
        assert_eq!(g[1..32], b[1..]);
        assert_eq!(g[32..40], 0x3837_3635_3433_3231u64.to_le_bytes());
        assert_eq!(g[40..], [1, 2, b's', b'm', 1, 0, 7]);
    }

    #[test]
    fn unknown_type_and_oversized_rndv_are_rejected() {
        assert_eq!(parse_any(&[99; 40]).unwrap_err(), HdrError::UnknownType(99));
        let r = Repr::Rndv(RndvRepr {
            hdr: MatchRepr {
                ctx: 0,
                tag: 0,
                seq: 0,
            },
            msg_len: 2,
            src_req: 0,
            sync: false,
        });
        let mut buf = vec![0u8; RNDV_LEN];
        r.emit(&mut buf).unwrap();
        buf.extend_from_slice(&[1, 2, 3]);
        assert!(matches!(parse_any(&buf), Err(HdrError::Malformed(_))));
    }
}
