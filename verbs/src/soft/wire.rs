//! Wire formats of the soft provider: zero-copy views (`new_checked`) and parsed `Repr`s.
//!
//! UD datagram (one per UDP packet):
//! `magic u16 | version u8 | opcode u8 | job tag u64 | src qpn u32 | dst qpn u32 | qkey u32 | imm u32`
//! followed by the payload. RC segment (framed on a TCP stream):
//! `opcode u8 | syndrome u8 | rsvd u16 | psn u32 | payload len u32 | imm u32 | remote addr u64 |
//! rkey u32 | dma len u32` followed by `payload len` bytes. All fields little-endian, through
//! [`rmca_framework::wire`] (rmca's one byte order; [`VERSION`] 1 was big-endian).

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use rmca_framework::wire::{
    read_u16_at, read_u32_at, read_u64_at, write_u16_at, write_u32_at, write_u64_at, Reader, Writer,
};

/// Wire parse errors (the packet is dropped and counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Shorter than the header or the announced payload.
    #[error("truncated")]
    Truncated,
    /// Unknown magic/version: not ours.
    #[error("foreign packet")]
    Foreign,
    /// Unknown opcode.
    #[error("bad opcode {0}")]
    BadOpcode(u8),
}

impl From<rmca_framework::wire::Truncated> for WireError {
    fn from(_: rmca_framework::wire::Truncated) -> Self {
        Self::Truncated
    }
}

/// Magic of UD datagrams: the bytes "RV", as the little-endian `u16` they read as.
pub const UD_MAGIC: u16 = u16::from_le_bytes(*b"RV");
/// Wire version of UD datagrams and the RC hello. 2: little-endian (1 was big-endian).
pub const VERSION: u8 = 2;
/// UD header length.
pub const UD_HEADER_LEN: usize = 28;

/// UD opcodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UdOpcode {
    /// Send.
    Send = 1,
    /// Send with immediate.
    SendImm = 2,
}

/// Zero-copy view of a UD datagram.
#[derive(Debug)]
pub struct UdPacket<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> UdPacket<T> {
    /// Wraps and checks length, magic and version.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        if b.len() < UD_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if read_u16_at(b, 0) != UD_MAGIC || b[2] != VERSION {
            return Err(WireError::Foreign);
        }
        Ok(Self { buf })
    }
    /// Opcode.
    pub fn opcode(&self) -> Result<UdOpcode, WireError> {
        match self.buf.as_ref()[3] {
            1 => Ok(UdOpcode::Send),
            2 => Ok(UdOpcode::SendImm),
            o => Err(WireError::BadOpcode(o)),
        }
    }
    /// Job tag (filters datagrams of other jobs).
    pub fn job_tag(&self) -> u64 {
        read_u64_at(self.buf.as_ref(), 4)
    }
    /// Source QP number.
    pub fn src_qpn(&self) -> u32 {
        read_u32_at(self.buf.as_ref(), 12)
    }
    /// Destination QP number.
    pub fn dst_qpn(&self) -> u32 {
        read_u32_at(self.buf.as_ref(), 16)
    }
    /// Q_Key.
    pub fn qkey(&self) -> u32 {
        read_u32_at(self.buf.as_ref(), 20)
    }
    /// Immediate data (meaningful with `SendImm`).
    pub fn imm(&self) -> u32 {
        read_u32_at(self.buf.as_ref(), 24)
    }
    /// Payload.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[UD_HEADER_LEN..]
    }
}

/// Parsed UD header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdRepr {
    /// Opcode.
    pub opcode: UdOpcode,
    /// Job tag.
    pub job_tag: u64,
    /// Source QPN.
    pub src_qpn: u32,
    /// Destination QPN.
    pub dst_qpn: u32,
    /// Q_Key.
    pub qkey: u32,
    /// Immediate.
    pub imm: u32,
}

impl UdRepr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(p: &UdPacket<T>) -> Result<Self, WireError> {
        Ok(Self {
            opcode: p.opcode()?,
            job_tag: p.job_tag(),
            src_qpn: p.src_qpn(),
            dst_qpn: p.dst_qpn(),
            qkey: p.qkey(),
            imm: p.imm(),
        })
    }
    /// Writes the header into the first [`UD_HEADER_LEN`] bytes of `out`.
    pub fn emit(&self, out: &mut [u8]) {
        write_u16_at(out, 0, UD_MAGIC);
        out[2] = VERSION;
        out[3] = self.opcode as u8;
        write_u64_at(out, 4, self.job_tag);
        write_u32_at(out, 12, self.src_qpn);
        write_u32_at(out, 16, self.dst_qpn);
        write_u32_at(out, 20, self.qkey);
        write_u32_at(out, 24, self.imm);
    }
}

/// RC segment header length.
pub const RC_HEADER_LEN: usize = 32;

/// RC segment opcodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RcOpcode {
    /// Send.
    Send = 1,
    /// Send with immediate.
    SendImm = 2,
    /// RDMA write request (carries data).
    Write = 3,
    /// RDMA read request.
    ReadReq = 4,
    /// RDMA read response (carries data; acknowledges up to its PSN).
    ReadResp = 5,
    /// Cumulative acknowledgement up to PSN.
    Ack = 6,
    /// Negative acknowledgement of PSN with a syndrome.
    Nak = 7,
}

impl RcOpcode {
    fn from_u8(v: u8) -> Result<Self, WireError> {
        Ok(match v {
            1 => Self::Send,
            2 => Self::SendImm,
            3 => Self::Write,
            4 => Self::ReadReq,
            5 => Self::ReadResp,
            6 => Self::Ack,
            7 => Self::Nak,
            o => return Err(WireError::BadOpcode(o)),
        })
    }
}

/// NAK syndromes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syndrome {
    /// Receiver not ready (no receive WQE).
    Rnr = 1,
    /// Remote access error (rkey/bounds/rights).
    RemoteAccess = 2,
    /// Invalid request (e.g. message longer than the receive buffers).
    InvalidRequest = 3,
}

impl Syndrome {
    /// From the wire byte (unknown values are invalid requests).
    pub fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::Rnr,
            2 => Self::RemoteAccess,
            _ => Self::InvalidRequest,
        }
    }
}

/// Parsed RC segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcRepr {
    /// Opcode.
    pub opcode: RcOpcode,
    /// NAK syndrome (0 otherwise).
    pub syndrome: u8,
    /// Packet sequence number.
    pub psn: u32,
    /// Bytes of payload following the header.
    pub payload_len: u32,
    /// Immediate data.
    pub imm: u32,
    /// Remote address (write/read).
    pub remote_addr: u64,
    /// Remote key (write/read).
    pub rkey: u32,
    /// Length to read (read requests).
    pub dma_len: u32,
}

impl RcRepr {
    /// A header with only opcode and PSN set.
    pub fn new(opcode: RcOpcode, psn: u32) -> Self {
        Self {
            opcode,
            syndrome: 0,
            psn,
            payload_len: 0,
            imm: 0,
            remote_addr: 0,
            rkey: 0,
            dma_len: 0,
        }
    }

    /// Appends the header and `payload` to `out`. `payload` may be empty while
    /// `payload_len` is not, when the caller appends the payload itself.
    pub fn emit(&self, payload: &[u8], out: &mut Vec<u8>) {
        debug_assert!(payload.is_empty() || payload.len() == self.payload_len as usize);
        Writer::new(out)
            .u8(self.opcode as u8)
            .u8(self.syndrome)
            .u16(0)
            .u32(self.psn)
            .u32(self.payload_len)
            .u32(self.imm)
            .u64(self.remote_addr)
            .u32(self.rkey)
            .u32(self.dma_len)
            .bytes(payload);
    }
}

/// Zero-copy view of one RC segment at the start of a stream buffer.
#[derive(Debug)]
pub struct RcSegment<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> RcSegment<T> {
    /// Checks a whole segment (header and payload) is present.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        if b.len() < RC_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        RcOpcode::from_u8(b[0])?;
        if b.len() < RC_HEADER_LEN + read_u32_at(b, 8) as usize {
            return Err(WireError::Truncated);
        }
        Ok(Self { buf })
    }
    /// Length of the segment starting at `b` as announced by its header (0 if the header is
    /// incomplete), to size the receive buffer.
    pub fn announced_len(b: &[u8]) -> usize {
        if b.len() < RC_HEADER_LEN {
            return 0;
        }
        RC_HEADER_LEN + read_u32_at(b, 8) as usize
    }

    /// Total length of the segment on the stream.
    pub fn total_len(&self) -> usize {
        RC_HEADER_LEN + read_u32_at(self.buf.as_ref(), 8) as usize
    }
    /// The payload.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[RC_HEADER_LEN..self.total_len()]
    }
    /// Parses the header.
    pub fn repr(&self) -> RcRepr {
        let b = self.buf.as_ref();
        RcRepr {
            opcode: RcOpcode::from_u8(b[0]).expect("checked in new_checked"),
            syndrome: b[1],
            psn: read_u32_at(b, 4),
            payload_len: read_u32_at(b, 8),
            imm: read_u32_at(b, 12),
            remote_addr: read_u64_at(b, 16),
            rkey: read_u32_at(b, 24),
            dma_len: read_u32_at(b, 28),
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RcSegment<T> {
    /// The payload, mutable (fault injection corrupts it in place).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.total_len();
        &mut self.buf.as_mut()[RC_HEADER_LEN..end]
    }
}

/// Magic of address blobs.
const ADDR_MAGIC: [u8; 2] = *b"RA";
/// Layout version of soft address blobs, in the byte version 1 of the blob kept 0 (and
/// checked): 1 = little-endian port and QP number. A blob of the big-endian build is refused.
const ADDR_VERSION: u8 = 1;
/// Soft provider address blob length.
pub const SOFT_ADDR_LEN: usize = 2 + 1 + 1 + 16 + 2 + 4;

/// Address of a soft QP, exchanged through the modex as opaque bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SoftAddr {
    /// RC (TCP listener) or UD (UDP socket) endpoint.
    pub sock: SocketAddr,
    /// QP number.
    pub qpn: u32,
    /// 0 = RC, 1 = UD.
    pub kind: u8,
}

impl SoftAddr {
    /// Serialises: `"RA" | kind | ADDR_VERSION | ipv6(-mapped) 16 | port u16 | qpn u32`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(SOFT_ADDR_LEN);
        let ip6 = match self.sock.ip() {
            IpAddr::V4(a) => a.to_ipv6_mapped(),
            IpAddr::V6(a) => a,
        };
        Writer::new(&mut v)
            .bytes(&ADDR_MAGIC)
            .u8(self.kind)
            .u8(ADDR_VERSION)
            .bytes(&ip6.octets())
            .u16(self.sock.port())
            .u32(self.qpn);
        v
    }

    /// Parses a blob made by [`SoftAddr::to_bytes`].
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        if b.len() != SOFT_ADDR_LEN {
            return Err(WireError::Truncated);
        }
        let mut r = Reader::new(b);
        let magic: [u8; 2] = r.array()?;
        let kind = r.u8()?;
        if magic != ADDR_MAGIC || r.u8()? != ADDR_VERSION || kind > 1 {
            return Err(WireError::Foreign);
        }
        let ip6 = Ipv6Addr::from(r.array::<16>()?);
        let ip = match ip6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(ip6),
        };
        Ok(Self {
            sock: SocketAddr::new(ip, r.u16()?),
            qpn: r.u32()?,
            kind,
        })
    }
}

/// RC connection hello, sent by the connecting side first on the stream:
/// `magic "RH" | version | 0 | job tag u64 | src qpn u32 | dst qpn u32 | src port u16 | 0 u16`.
pub const HELLO_LEN: usize = 24;

/// Parsed hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// Job tag.
    pub job_tag: u64,
    /// Connecting QP.
    pub src_qpn: u32,
    /// Accepting QP.
    pub dst_qpn: u32,
    /// Connecting side's listener port (identifies its context).
    pub src_port: u16,
}

impl Hello {
    /// Serialises.
    pub fn to_bytes(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..2].copy_from_slice(b"RH");
        b[2] = VERSION;
        write_u64_at(&mut b, 4, self.job_tag);
        write_u32_at(&mut b, 12, self.src_qpn);
        write_u32_at(&mut b, 16, self.dst_qpn);
        write_u16_at(&mut b, 20, self.src_port);
        b
    }
    /// Parses.
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        if b.len() < HELLO_LEN {
            return Err(WireError::Truncated);
        }
        if &b[0..2] != b"RH" || b[2] != VERSION {
            return Err(WireError::Foreign);
        }
        Ok(Self {
            job_tag: read_u64_at(b, 4),
            src_qpn: read_u32_at(b, 12),
            dst_qpn: read_u32_at(b, 16),
            src_port: read_u16_at(b, 20),
        })
    }
}

/// Job tag derived from the job secret (FNV-1a 64): a filter against stray traffic from other
/// jobs on the same hosts, not an authenticator.
pub fn job_tag(secret: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in secret {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layouts_are_little_endian_and_the_big_endian_build_is_refused() {
        let mut rc = Vec::new();
        RcRepr::new(RcOpcode::Send, 0x0102_0304).emit(&[], &mut rc);
        assert_eq!(rc[4..8], [4, 3, 2, 1]);
        let mut ud = [0u8; UD_HEADER_LEN];
        UdRepr {
            opcode: UdOpcode::Send,
            job_tag: 1,
            src_qpn: 2,
            dst_qpn: 3,
            qkey: 4,
            imm: 5,
        }
        .emit(&mut ud);
        assert_eq!(ud[..5], [b'R', b'V', VERSION, 1, 1]);
        let a = SoftAddr {
            sock: "10.0.0.1:258".parse().unwrap(),
            qpn: 0x0a0b_0c0d,
            kind: 1,
        };
        let b = a.to_bytes();
        assert_eq!(b[20..], [2, 1, 0x0d, 0x0c, 0x0b, 0x0a]);
        // Version 1 datagrams, hellos and (reserved byte 0) addresses are foreign.
        ud[2] = 1;
        assert_eq!(
            UdPacket::new_checked(&ud[..]).err(),
            Some(WireError::Foreign)
        );
        let mut h = Hello {
            job_tag: 1,
            src_qpn: 2,
            dst_qpn: 3,
            src_port: 4,
        }
        .to_bytes();
        h[2] = 1;
        assert_eq!(Hello::parse(&h), Err(WireError::Foreign));
        let mut old = b;
        old[3] = 0;
        assert_eq!(SoftAddr::parse(&old), Err(WireError::Foreign));
    }

    proptest! {
        #[test]
        fn ud_parse_never_panics(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(p) = UdPacket::new_checked(&b[..]) { let _ = UdRepr::parse(&p); let _ = p.payload(); }
        }
        #[test]
        fn rc_parse_never_panics(b in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(s) = RcSegment::new_checked(&b[..]) { let _ = s.repr(); let _ = s.payload(); }
        }
        #[test]
        fn addr_parse_never_panics(b in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = SoftAddr::parse(&b); let _ = Hello::parse(&b);
        }
        #[test]
        fn rc_roundtrip(psn in any::<u32>(), imm in any::<u32>(), ra in any::<u64>(), rkey in any::<u32>(),
                        payload in proptest::collection::vec(any::<u8>(), 0..100)) {
            let r = RcRepr { opcode: RcOpcode::Write, syndrome: 0, psn, payload_len: payload.len() as u32,
                imm, remote_addr: ra, rkey, dma_len: 7 };
            let mut out = Vec::new();
            r.emit(&payload, &mut out);
            let s = RcSegment::new_checked(&out[..]).unwrap();
            prop_assert_eq!(s.repr(), r);
            prop_assert_eq!(s.payload(), &payload[..]);
            prop_assert_eq!(s.total_len(), out.len());
            prop_assert_eq!(RcSegment::new_checked(&out[..out.len() - 1]).err(),
                Some(WireError::Truncated));
        }
        #[test]
        fn ud_roundtrip(src in any::<u32>(), dst in any::<u32>(), qkey in any::<u32>(), tag in any::<u64>()) {
            let r = UdRepr { opcode: UdOpcode::SendImm, job_tag: tag, src_qpn: src, dst_qpn: dst, qkey, imm: 9 };
            let mut b = vec![0u8; UD_HEADER_LEN + 3];
            r.emit(&mut b);
            let p = UdPacket::new_checked(&b[..]).unwrap();
            prop_assert_eq!(UdRepr::parse(&p).unwrap(), r);
            prop_assert_eq!(p.payload().len(), 3);
        }
        #[test]
        fn hello_roundtrip(job_tag in any::<u64>(), src_qpn in any::<u32>(), dst_qpn in any::<u32>(), src_port in any::<u16>()) {
            let h = Hello { job_tag, src_qpn, dst_qpn, src_port };
            prop_assert_eq!(Hello::parse(&h.to_bytes()).unwrap(), h);
        }
        #[test]
        fn addr_roundtrip(a in any::<[u8; 4]>(), port in any::<u16>(), qpn in any::<u32>(), kind in 0u8..2) {
            let s = SoftAddr { sock: SocketAddr::new(IpAddr::from(a), port), qpn, kind };
            prop_assert_eq!(SoftAddr::parse(&s.to_bytes()).unwrap(), s);
        }
    }
}
