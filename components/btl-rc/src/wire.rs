//! Byte formats of btl-rc, smoltcp style: zero-copy views (`Packet<T: AsRef<[u8]>>` with
//! `new_checked`) separate from parsed `Repr`s.
//!
//! - The business card (modex): `"RC" | version u8 | provider u8 | addr_len u16 | UD CM address`.
//! - Connection-management datagrams on the UD CM QP: `"RM" | version u8 | type u8 | src u32 |
//!   dst u32 | job u32 | credits u16 | nqps u8 | 0 u8 | nqps x (len u16 | RC QP address)`.
//! - The 16-byte header of every RC send: `kind u8 | tag u8 | credits u16 | seq u16 | aux u16 |
//!   a u32 | b u32` (see [`FragKind`] for what `aux`, `a` and `b` mean per kind).
//! - Records inside a coalesced buffer: `flags u8 | tag u8 | hdr_len u16 | payload_len u32 |
//!   [hdr] | payload`, with [`REC_CACHED_HDR`] meaning "same header bytes as the previous record"
//!   and [`REC_PATCHED_HDR`] "the previous record's header with a few bytes changed", the
//!   `[hdr]` then being `n u8 | n x (offset u16 | byte u8)` (a PML's match header usually
//!   differs from the previous one only in its sequence number).
//!
//! Integers are little-endian, read and written through [`rmca_framework::wire`].

use rmca_framework::wire::{read_u16_at, read_u32_at, write_u16_at, write_u32_at, Reader, Writer};
use thiserror::Error;

/// Why bytes were not accepted.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// Shorter than its header or declared lengths.
    #[error("truncated")]
    Truncated,
    /// Wrong magic.
    #[error("bad magic")]
    BadMagic,
    /// Unknown version.
    #[error("unsupported version {0}")]
    Version(u8),
    /// Unknown kind/type.
    #[error("unknown kind {0}")]
    Kind(u8),
    /// A field has an impossible value.
    #[error("malformed field {0}")]
    Malformed(&'static str),
}

/// Format version of the card and CM datagrams. 2: the verbs address blobs they carry became
/// little-endian (a peer of version 1 is refused at the card, not misread).
pub const VERSION: u8 = 2;

impl From<rmca_framework::wire::Truncated> for WireError {
    fn from(_: rmca_framework::wire::Truncated) -> Self {
        Self::Truncated
    }
}

// ---------------------------------------------------------------------------------------------
// Business card

/// Parsed business card.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CardRepr {
    /// 0 soft, 1 rdma.
    pub provider: u8,
    /// Address of the peer's UD connection-management QP.
    pub cm_addr: Vec<u8>,
}

impl CardRepr {
    /// Serialise.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(6 + self.cm_addr.len());
        Writer::new(&mut v)
            .bytes(b"RC")
            .u8(VERSION)
            .u8(self.provider)
            .u16(self.cm_addr.len() as u16)
            .bytes(&self.cm_addr);
        v
    }

    /// Parse, checking every length.
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(b);
        if r.bytes(2)? != b"RC" {
            return Err(WireError::BadMagic);
        }
        let version = r.u8()?;
        if version != VERSION {
            return Err(WireError::Version(version));
        }
        let provider = r.u8()?;
        let len = usize::from(r.u16()?);
        Ok(Self {
            provider,
            cm_addr: r.bytes(len)?.to_vec(),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Connection management datagrams

/// Connection-management message types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmType {
    /// "Here are my QPs; connect to them and answer with yours."
    Req = 1,
    /// "Connected to yours; here are mine."
    Rep = 2,
}

/// Fixed part of a CM datagram.
pub const CM_HEADER_LEN: usize = 20;

/// Zero-copy view of a CM datagram.
#[derive(Debug, Clone, Copy)]
pub struct CmPacket<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> CmPacket<T> {
    /// Wrap and check magic, version, type and every length.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        if b.len() < CM_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if &b[..2] != b"RM" {
            return Err(WireError::BadMagic);
        }
        if b[2] != VERSION {
            return Err(WireError::Version(b[2]));
        }
        if !matches!(b[3], 1 | 2) {
            return Err(WireError::Kind(b[3]));
        }
        if b[18] == 0 {
            return Err(WireError::Malformed("nqps"));
        }
        let mut r = Reader::new(&b[CM_HEADER_LEN..]);
        for _ in 0..b[18] {
            let len = usize::from(r.u16()?);
            r.skip(len)?;
        }
        Ok(Self { buf })
    }
    /// Message type.
    pub fn cm_type(&self) -> CmType {
        if self.buf.as_ref()[3] == 1 {
            CmType::Req
        } else {
            CmType::Rep
        }
    }
    /// Sender rank.
    pub fn src(&self) -> u32 {
        read_u32_at(self.buf.as_ref(), 4)
    }
    /// Destination rank.
    pub fn dst(&self) -> u32 {
        read_u32_at(self.buf.as_ref(), 8)
    }
    /// Job tag.
    pub fn job(&self) -> u32 {
        read_u32_at(self.buf.as_ref(), 12)
    }
    /// Data credits the sender posted per QP (0 with an SRQ).
    pub fn credits(&self) -> u16 {
        read_u16_at(self.buf.as_ref(), 16)
    }
    /// The RC QP addresses.
    pub fn addrs(&self) -> Vec<Vec<u8>> {
        let b = self.buf.as_ref();
        let mut r = Reader::new(&b[CM_HEADER_LEN..]);
        (0..b[18])
            .map(|_| {
                // new_checked walked the same list: these reads are in bounds.
                let len = usize::from(r.u16().expect("checked"));
                r.bytes(len).expect("checked").to_vec()
            })
            .collect()
    }
}

/// Parsed CM datagram.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmRepr {
    /// Type.
    pub cm_type: CmType,
    /// Sender rank.
    pub src: u32,
    /// Destination rank.
    pub dst: u32,
    /// Job tag.
    pub job: u32,
    /// Per-QP data credits.
    pub credits: u16,
    /// RC QP addresses (1..=255).
    pub addrs: Vec<Vec<u8>>,
}

impl CmRepr {
    /// Parse a checked packet.
    pub fn parse<T: AsRef<[u8]>>(p: &CmPacket<T>) -> Self {
        Self {
            cm_type: p.cm_type(),
            src: p.src(),
            dst: p.dst(),
            job: p.job(),
            credits: p.credits(),
            addrs: p.addrs(),
        }
    }
    /// Serialise.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(64);
        let mut w = Writer::new(&mut v);
        w.bytes(b"RM")
            .u8(VERSION)
            .u8(self.cm_type as u8)
            .u32(self.src)
            .u32(self.dst)
            .u32(self.job)
            .u16(self.credits)
            .u8(self.addrs.len() as u8)
            .u8(0);
        for a in &self.addrs {
            w.u16(a.len() as u16).bytes(a);
        }
        v
    }
}

// ---------------------------------------------------------------------------------------------
// RC fragment header

/// Length of the header in front of every RC send.
pub const FRAG_HEADER_LEN: usize = 16;
/// Length of a record header inside a coalesced buffer.
pub const REC_HEADER_LEN: usize = 8;
/// Record flag: the PML header is the previous record's (not repeated on the wire).
pub const REC_CACHED_HDR: u8 = 1;
/// Record flag: the PML header is the previous record's with the listed bytes replaced.
pub const REC_PATCHED_HDR: u8 = 2;
/// Most bytes a patched header may change (beyond that the header is sent whole).
pub const MAX_HDR_PATCHES: usize = 8;

/// How `header` can be sent after `prev`: `Some(vec![])` when equal (cached), `Some(patches)`
/// when a few bytes differ and the patch is shorter than the header, `None` otherwise.
pub fn header_delta(prev: Option<&[u8]>, header: &[u8]) -> Option<Vec<(u16, u8)>> {
    let prev = prev?;
    if header.is_empty() || prev.len() != header.len() || header.len() > usize::from(u16::MAX) {
        return None;
    }
    let mut patches = Vec::new();
    for (i, (a, b)) in prev.iter().zip(header).enumerate() {
        if a != b {
            if patches.len() == MAX_HDR_PATCHES {
                return None;
            }
            patches.push((i as u16, *b));
        }
    }
    (patches.is_empty() || 1 + 3 * patches.len() < header.len()).then_some(patches)
}

/// What an RC send carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FragKind {
    /// One fragment: `seq`; payload follows. `a` = PML header length (informational).
    Data = 1,
    /// `aux` fragments with consecutive seqs from `seq`, as records.
    Coalesced = 2,
    /// One stripe of fragment `seq`: `aux` = index << 8 | count, `a` = total length, `b` = offset.
    Stripe = 3,
    /// Credits only (control, no seq).
    Credit = 4,
    /// Ready to use: the requester's first message on a new connection (control, no seq).
    Rtu = 5,
    /// Eager RDMA ring opened for the receiver of this message (control): `seq` = slots,
    /// `a` = rkey, `b` = slot size, body = ring address (u64).
    EagerOpen = 6,
    /// Eager RDMA ring slots returned (control): `aux` = slots.
    EagerCredit = 7,
    /// The receiver's next expected seq (control): `seq` = it; opens the sender's
    /// [`crate::reorder::SeqWindow`].
    SeqAck = 8,
}

/// Footer at the end of every eager RDMA slot: `len u32 | EAGER_VALID`. The sender writes the
/// fragment right-aligned so that the footer lands last; the receiver polls it.
pub const EAGER_FOOTER_LEN: usize = 8;
/// Marks a full eager RDMA slot.
pub const EAGER_VALID: u32 = 0x5243_4541;

impl FragKind {
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::Data,
            2 => Self::Coalesced,
            3 => Self::Stripe,
            4 => Self::Credit,
            5 => Self::Rtu,
            6 => Self::EagerOpen,
            7 => Self::EagerCredit,
            8 => Self::SeqAck,
            _ => return None,
        })
    }
    /// Control messages bypass credits and never carry a seq of the reorder sequence.
    pub fn is_control(self) -> bool {
        matches!(
            self,
            Self::Credit | Self::Rtu | Self::EagerOpen | Self::EagerCredit | Self::SeqAck
        )
    }
}

/// Zero-copy view of an RC send.
#[derive(Debug, Clone, Copy)]
pub struct FragPacket<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> FragPacket<T> {
    /// Wrap and check the header (kind, stripe geometry).
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        if b.len() < FRAG_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let kind = FragKind::from_u8(b[0]).ok_or(WireError::Kind(b[0]))?;
        let p = Self { buf };
        match kind {
            FragKind::Coalesced if p.aux() == 0 => return Err(WireError::Malformed("count")),
            FragKind::Stripe => {
                let (idx, n) = p.stripe();
                let body = p.body().len() as u64;
                if n == 0 || idx >= n || u64::from(p.b()) + body > u64::from(p.a()) {
                    return Err(WireError::Malformed("stripe"));
                }
            }
            _ => {}
        }
        Ok(p)
    }
    /// Kind.
    pub fn kind(&self) -> FragKind {
        FragKind::from_u8(self.buf.as_ref()[0]).expect("checked")
    }
    /// BTL tag.
    pub fn tag(&self) -> u8 {
        self.buf.as_ref()[1]
    }
    /// Piggybacked credits.
    pub fn credits(&self) -> u16 {
        read_u16_at(self.buf.as_ref(), 2)
    }
    /// Per-peer sequence number.
    pub fn seq(&self) -> u16 {
        read_u16_at(self.buf.as_ref(), 4)
    }
    /// Kind-specific.
    pub fn aux(&self) -> u16 {
        read_u16_at(self.buf.as_ref(), 6)
    }
    /// Kind-specific.
    pub fn a(&self) -> u32 {
        read_u32_at(self.buf.as_ref(), 8)
    }
    /// Kind-specific.
    pub fn b(&self) -> u32 {
        read_u32_at(self.buf.as_ref(), 12)
    }
    /// Stripe index and count.
    pub fn stripe(&self) -> (u8, u8) {
        let aux = self.aux();
        ((aux >> 8) as u8, aux as u8)
    }
    /// Bytes after the header.
    pub fn body(&self) -> &[u8] {
        &self.buf.as_ref()[FRAG_HEADER_LEN..]
    }
}

/// Parsed RC header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragRepr {
    /// Kind.
    pub kind: FragKind,
    /// Tag.
    pub tag: u8,
    /// Credits returned.
    pub credits: u16,
    /// Seq.
    pub seq: u16,
    /// See [`FragKind`].
    pub aux: u16,
    /// See [`FragKind`].
    pub a: u32,
    /// See [`FragKind`].
    pub b: u32,
}

impl FragRepr {
    /// A control header.
    pub fn control(kind: FragKind, credits: u16) -> Self {
        Self {
            kind,
            tag: 0,
            credits,
            seq: 0,
            aux: 0,
            a: 0,
            b: 0,
        }
    }
    /// The header of one whole data fragment (not striped, not coalesced) whose PML header is
    /// `pml_header_len` bytes long.
    pub fn data(tag: u8, seq: u16, pml_header_len: usize) -> Self {
        Self {
            kind: FragKind::Data,
            tag,
            credits: 0,
            seq,
            aux: 1,
            a: pml_header_len as u32,
            b: 0,
        }
    }
    /// Write into the first [`FRAG_HEADER_LEN`] bytes of `out`.
    pub fn emit(&self, out: &mut [u8]) {
        out[0] = self.kind as u8;
        out[1] = self.tag;
        write_u16_at(out, 2, self.credits);
        write_u16_at(out, 4, self.seq);
        write_u16_at(out, 6, self.aux);
        write_u32_at(out, 8, self.a);
        write_u32_at(out, 12, self.b);
    }
    /// Parse a checked packet.
    pub fn parse<T: AsRef<[u8]>>(p: &FragPacket<T>) -> Self {
        Self {
            kind: p.kind(),
            tag: p.tag(),
            credits: p.credits(),
            seq: p.seq(),
            aux: p.aux(),
            a: p.a(),
            b: p.b(),
        }
    }
}

/// One record of a coalesced buffer, borrowed from it (a patched header is rebuilt).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    /// Tag.
    pub tag: u8,
    /// The PML header bytes (resolved from the previous record when cached or patched).
    pub header: std::borrow::Cow<'a, [u8]>,
    /// Payload.
    pub payload: &'a [u8],
}

/// Split a coalesced body into `count` records, resolving cached headers.
pub fn parse_records(body: &[u8], count: u16) -> Result<Vec<Record<'_>>, WireError> {
    let mut out: Vec<Record<'_>> = Vec::with_capacity(usize::from(count));
    let mut off = 0usize;
    for _ in 0..count {
        let mut h = Reader::new(&body[off..]);
        let flags = h.u8()?;
        let tag = h.u8()?;
        let hdr_len = usize::from(h.u16()?);
        let pay_len = h.u32()? as usize;
        off += REC_HEADER_LEN;
        let header = if flags & (REC_CACHED_HDR | REC_PATCHED_HDR) != 0 {
            let prev = out
                .last()
                .ok_or(WireError::Malformed("cached header first"))?;
            if prev.header.len() != hdr_len {
                return Err(WireError::Malformed("cached header length"));
            }
            if flags & REC_PATCHED_HDR != 0 {
                let n = usize::from(*body.get(off).ok_or(WireError::Truncated)?);
                let list = body
                    .get(off + 1..off + 1 + 3 * n)
                    .ok_or(WireError::Truncated)?;
                off += 1 + 3 * n;
                let mut h = prev.header.to_vec();
                for p in list.chunks_exact(3) {
                    let at = usize::from(read_u16_at(p, 0));
                    *h.get_mut(at)
                        .ok_or(WireError::Malformed("header patch out of range"))? = p[2];
                }
                std::borrow::Cow::Owned(h)
            } else {
                prev.header.clone()
            }
        } else {
            let hb = body.get(off..off + hdr_len).ok_or(WireError::Truncated)?;
            off += hdr_len;
            std::borrow::Cow::Borrowed(hb)
        };
        let payload = body
            .get(off..off.checked_add(pay_len).ok_or(WireError::Truncated)?)
            .ok_or(WireError::Truncated)?;
        off += pay_len;
        out.push(Record {
            tag,
            header,
            payload,
        });
    }
    if off != body.len() {
        return Err(WireError::Malformed("trailing bytes"));
    }
    Ok(out)
}

/// Append one record to a coalesced body. `delta` (from [`header_delta`] against the previous
/// record's header) omits the header bytes: empty means cached, else the patches are sent.
pub fn emit_record(
    out: &mut Vec<u8>,
    tag: u8,
    header: &[u8],
    payload: &[u8],
    delta: Option<&[(u16, u8)]>,
) {
    out.push(match delta {
        None => 0,
        Some([]) => REC_CACHED_HDR,
        Some(_) => REC_PATCHED_HDR,
    });
    let mut w = Writer::new(out);
    w.u8(tag).u16(header.len() as u16).u32(payload.len() as u32);
    match delta {
        None => {
            w.bytes(header);
        }
        Some([]) => {}
        Some(patches) => {
            w.u8(patches.len() as u8);
            for (at, b) in patches {
                w.u16(*at).u8(*b);
            }
        }
    }
    w.bytes(payload);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn card_roundtrip_and_rejects() {
        let c = CardRepr {
            provider: 1,
            cm_addr: vec![1, 2, 3],
        };
        assert_eq!(CardRepr::parse(&c.to_bytes()), Ok(c.clone()));
        let mut b = c.to_bytes();
        b[0] = b'X';
        assert_eq!(CardRepr::parse(&b), Err(WireError::BadMagic));
        assert_eq!(
            CardRepr::parse(&c.to_bytes()[..7]),
            Err(WireError::Truncated)
        );
        // A peer of the big-endian layout (version 1) is refused at its card and at its
        // connection packets.
        let mut b = c.to_bytes();
        b[2] = 1;
        assert_eq!(CardRepr::parse(&b), Err(WireError::Version(1)));
        let cm = CmRepr {
            cm_type: CmType::Req,
            src: 1,
            dst: 2,
            job: 3,
            credits: 4,
            addrs: vec![vec![5]],
        };
        let mut b = cm.to_bytes();
        b[2] = 1;
        assert!(matches!(
            CmPacket::new_checked(&b[..]),
            Err(WireError::Version(1))
        ));
    }

    #[test]
    fn records_with_cached_header() {
        let mut body = Vec::new();
        emit_record(&mut body, 7, b"HDR", b"one", None);
        emit_record(&mut body, 7, b"HDR", b"", Some(&[]));
        emit_record(&mut body, 8, b"", b"xyz", None);
        let r = parse_records(&body, 3).unwrap();
        assert_eq!(&r[1].header[..], b"HDR");
        assert_eq!(r[1].payload, b"");
        assert_eq!((r[2].tag, r[2].payload), (8, &b"xyz"[..]));
        assert!(parse_records(&body, 4).is_err());
        assert!(parse_records(&body, 2).is_err(), "trailing bytes");
    }

    #[test]
    fn records_with_patched_header() {
        // A match header whose sequence number (bytes 4..6) counts up.
        let h1 = b"\x10\x00\x05\x00\x07\x00ctxtag..";
        let h2 = b"\x10\x00\x05\x00\x08\x00ctxtag..";
        let d = header_delta(Some(h1), h2).unwrap();
        assert_eq!(d, vec![(4, 8)]);
        assert_eq!(header_delta(Some(h1), h1), Some(vec![]));
        assert_eq!(header_delta(Some(b"ab"), b"ba"), None, "patch not shorter");
        assert_eq!(header_delta(Some(b"abc"), b"abcd"), None, "length differs");
        assert_eq!(header_delta(None, h1), None);
        let mut body = Vec::new();
        emit_record(&mut body, 1, h1, b"p1", None);
        emit_record(&mut body, 1, h2, b"p2", Some(&d));
        emit_record(&mut body, 1, h2, b"p3", Some(&[]));
        let r = parse_records(&body, 3).unwrap();
        assert_eq!(&r[1].header[..], h2);
        assert_eq!(&r[2].header[..], h2);
        assert_eq!(r[2].payload, b"p3");
        // A patch pointing past the header is refused, not applied.
        let mut bad = Vec::new();
        emit_record(&mut bad, 1, h1, b"", None);
        emit_record(&mut bad, 1, h2, b"", Some(&[(200, 1)]));
        assert_eq!(
            parse_records(&bad, 2),
            Err(WireError::Malformed("header patch out of range"))
        );
    }

    proptest! {
        #[test]
        fn cm_roundtrip(src in any::<u32>(), dst in any::<u32>(), job in any::<u32>(),
                        credits in any::<u16>(), addrs in proptest::collection::vec(
                            proptest::collection::vec(any::<u8>(), 0..40), 1..8), req in any::<bool>()) {
            let r = CmRepr { cm_type: if req { CmType::Req } else { CmType::Rep }, src, dst, job, credits, addrs };
            let b = r.to_bytes();
            let p = CmPacket::new_checked(&b[..]).unwrap();
            prop_assert_eq!(CmRepr::parse(&p), r);
            for cut in 0..b.len() {
                prop_assert!(CmPacket::new_checked(&b[..cut]).is_err());
            }
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200), count in 0u16..10) {
            let _ = CardRepr::parse(&bytes);
            if let Ok(p) = CmPacket::new_checked(&bytes[..]) { let _ = CmRepr::parse(&p); }
            if let Ok(p) = FragPacket::new_checked(&bytes[..]) {
                let r = FragRepr::parse(&p);
                if r.kind == FragKind::Coalesced { let _ = parse_records(p.body(), count); }
            }
        }

        #[test]
        fn frag_header_roundtrip(tag in any::<u8>(), credits in any::<u16>(), seq in any::<u16>(), n in 1u16..100) {
            let r = FragRepr { kind: FragKind::Coalesced, tag, credits, seq, aux: n, a: 0, b: 0 };
            let mut b = [0u8; FRAG_HEADER_LEN];
            r.emit(&mut b);
            let p = FragPacket::new_checked(&b[..]).unwrap();
            prop_assert_eq!(FragRepr::parse(&p), r);
        }
    }
}
