//! DR wire format: zero-copy packet views (`*Packet<T: AsRef<[u8]>>`, smoltcp style) and the
//! parsed, validated representations (`*Repr`) that the connection works with.
//!
//! All integers are little-endian, read and written through [`rmca_framework::wire`] (rmca's
//! one byte order; version 1 of this format was big-endian). Every packet starts with the same 4 bytes: magic `"DR"`, a
//! version byte and a type byte, so that foreign or future packets are recognised and dropped.
//!
//! Data packet (MATCH, RNDV, FRAG), [`DATA_HEADER_LEN`] = 72 bytes, then the payload:
//!
//! ```text
//!  0 magic u16 "DR"    2 version u8    3 type u8     4 flags u8
//!  5 frag_index u8     6 frag_count u8 7 reserved u8 (0)
//!  8 header_crc u32    CRC32C of bytes 0..72 with this field zeroed
//! 12 payload_crc u32   CRC32C of the payload (0 unless flags has PAYLOAD_CSUM)
//! 16 payload_len u32  20 context id u32
//! 24 vfrag_id u64     32 pkt_num u64 (new for every transmission: unambiguous RTT samples)
//! 40 msg_seq u64      48 msg_len u64     56 offset u64 (of this payload in the message)
//! 64 src rank u32     68 tag i32
//! ```
//!
//! The header has its own CRC so that placement coordinates (message, offset) are trusted before
//! any payload byte is written to the user's buffer; the payload CRC is then checked over the
//! bytes as placed in memory.
//!
//! Ack packet (ACK, NACK), [`ACK_LEN`] = 48 bytes:
//!
//! ```text
//!  0 magic u16   2 version u8   3 type u8   4 flags u8   5 frag_count u8   6 reserved u16 (0)
//!  8 crc u32 (over 0..48, this field zeroed)   12 ack_delay_us u32
//! 16 vfrag_id u64   24 mask u64 (frags received intact)   32 echo pkt_num u64   40 msg_seq u64
//! ```

use rmca_framework::wire::{
    read_i32_at, read_u16_at, read_u32_at, read_u64_at, write_i32_at, write_u16_at, write_u32_at,
    write_u64_at,
};
use thiserror::Error;

/// `"DR"`: first two bytes of every DR packet, as the little-endian `u16` they read as.
pub const MAGIC: u16 = u16::from_le_bytes(*b"DR");
/// Wire-format version; a packet with another version is dropped and counted. 2: integers
/// little-endian (version 1 was big-endian).
pub const VERSION: u8 = 2;
/// Length of a data header (MATCH, RNDV, FRAG).
pub const DATA_HEADER_LEN: usize = 72;
/// Length of an ACK or NACK packet.
pub const ACK_LEN: usize = 48;
/// Most BTL fragments in one vfrag: one bit each in the 64-bit ack mask.
pub const MAX_VFRAG_FRAGS: usize = 64;

/// Errors of the parsers. Each means the packet is dropped (and counted) by the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum WireError {
    /// The buffer is shorter than the header (or header + payload_len).
    #[error("packet truncated")]
    Truncated,
    /// Not a DR packet.
    #[error("bad magic {0:#06x}")]
    BadMagic(u16),
    /// A DR packet of a version we do not speak.
    #[error("unsupported version {0}")]
    BadVersion(u8),
    /// Unknown packet type byte.
    #[error("unknown packet type {0}")]
    BadType(u8),
    /// The header checksum does not match.
    #[error("header checksum mismatch")]
    BadChecksum,
    /// A field holds a value that cannot occur (reserved bits, frag index out of range...).
    #[error("malformed field: {0}")]
    Malformed(&'static str),
}

/// The packet types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PacketType {
    /// Eager message: the whole message travels in one vfrag.
    Match = 1,
    /// First vfrag of a rendezvous message; the rest is sent once the receiver has matched.
    Rndv = 2,
    /// A later vfrag of a rendezvous message.
    Frag = 3,
    /// Positive acknowledgement of a vfrag (which fragments arrived intact).
    Ack = 4,
    /// Acknowledgement sent because a fragment failed its payload checksum.
    Nack = 5,
}

impl PacketType {
    fn from_u8(v: u8) -> Result<Self, WireError> {
        Ok(match v {
            1 => Self::Match,
            2 => Self::Rndv,
            3 => Self::Frag,
            4 => Self::Ack,
            5 => Self::Nack,
            other => return Err(WireError::BadType(other)),
        })
    }

    /// True for MATCH, RNDV and FRAG.
    pub fn is_data(self) -> bool {
        matches!(self, Self::Match | Self::Rndv | Self::Frag)
    }
}

/// Data flag: the sender asks for an immediate ack (last fragment of a burst, or a probe).
pub const FLAG_ACK_REQ: u8 = 0x01;
/// Data flag: `payload_crc` is valid and must be checked.
pub const FLAG_PAYLOAD_CSUM: u8 = 0x02;
/// Data flag: this transmission is a retransmission or probe (informational).
pub const FLAG_RETX: u8 = 0x04;
const DATA_FLAGS: u8 = FLAG_ACK_REQ | FLAG_PAYLOAD_CSUM | FLAG_RETX;
/// Ack flag: the rendezvous message `msg_seq` has been matched; the sender may stream the rest.
pub const ACK_FLAG_MATCHED: u8 = 0x01;
/// Ack flag: this ack answers a duplicate (informational).
pub const ACK_FLAG_DUP: u8 = 0x02;
/// Ack flag: a keepalive request (no vfrag); the peer answers with [`ACK_FLAG_PONG`].
pub const ACK_FLAG_PING: u8 = 0x04;
/// Ack flag: the answer to a keepalive request.
pub const ACK_FLAG_PONG: u8 = 0x08;
/// Ack flag: a data packet follows this ack in the same BTL fragment (an ack bundled in front
/// of the data going back to its peer, see [`split_bundle`]).
pub const ACK_FLAG_BUNDLED: u8 = 0x10;
/// Ack flag: a cumulative ack (`pml_dr_ack_policy = cumulative`): every vfrag id below
/// `vfrag_id` was received complete; `frag_count` is 1 and `mask` 0. Only sent under that policy
/// (a new bit in the flags byte, so the other policies' packets are unchanged and the version
/// stays 2; the policy is job-wide, so no rank meets a kind of ack it does not expect).
pub const ACK_FLAG_CUMULATIVE: u8 = 0x20;
const ACK_FLAGS: u8 = ACK_FLAG_MATCHED
    | ACK_FLAG_DUP
    | ACK_FLAG_PING
    | ACK_FLAG_PONG
    | ACK_FLAG_BUNDLED
    | ACK_FLAG_CUMULATIVE;

/// CRC32C of the `N`-byte header `bytes` with the 4 bytes at `crc_at` taken as zero. One
/// call into the CRC over a copy with the hole zeroed: each call costs ~130 instructions of
/// set-up whatever its length, which for three calls over a 72-byte header was most of the
/// checksum's cost (and a fifth of a small message's CPU in pml-dr).
fn crc_with_hole<const N: usize>(bytes: &[u8; N], crc_at: usize) -> u32 {
    let mut b = *bytes;
    b[crc_at..crc_at + 4].fill(0);
    crc32c::crc32c(&b)
}

/// The first `N` bytes of `b` as an array (the caller checked the length).
fn head<const N: usize>(b: &[u8]) -> &[u8; N] {
    b[..N].try_into().expect("length checked by the caller")
}

/// Reads the packet type of any DR packet after checking magic and version.
pub fn peek_type(bytes: &[u8]) -> Result<PacketType, WireError> {
    if bytes.len() < 4 {
        return Err(WireError::Truncated);
    }
    let magic = read_u16_at(bytes, 0);
    if magic != MAGIC {
        return Err(WireError::BadMagic(magic));
    }
    if bytes[2] != VERSION {
        return Err(WireError::BadVersion(bytes[2]));
    }
    PacketType::from_u8(bytes[3])
}

mod data_field {
    pub const FLAGS: usize = 4;
    pub const FRAG_INDEX: usize = 5;
    pub const FRAG_COUNT: usize = 6;
    pub const RESERVED: usize = 7;
    pub const HEADER_CRC: usize = 8;
    pub const PAYLOAD_CRC: usize = 12;
    pub const PAYLOAD_LEN: usize = 16;
    pub const CTX: usize = 20;
    pub const VFRAG_ID: usize = 24;
    pub const PKT_NUM: usize = 32;
    pub const MSG_SEQ: usize = 40;
    pub const MSG_LEN: usize = 48;
    pub const OFFSET: usize = 56;
    pub const SRC: usize = 64;
    pub const TAG: usize = 68;
}

/// Zero-copy view of a data packet (MATCH, RNDV or FRAG).
#[derive(Debug, Clone)]
pub struct DataPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> DataPacket<T> {
    /// Wraps a buffer without checking anything; accessors may panic on a short buffer.
    pub fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer after checking length, magic, version, type, header CRC and field ranges,
    /// so that every accessor is then safe to call and its value is trustworthy.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let p = Self::new_unchecked(buffer);
        p.check()?;
        Ok(p)
    }

    fn check(&self) -> Result<(), WireError> {
        let b = self.buffer.as_ref();
        if !peek_type(b)?.is_data() {
            return Err(WireError::BadType(b[3]));
        }
        if b.len() < DATA_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if crc_with_hole(head::<DATA_HEADER_LEN>(b), data_field::HEADER_CRC) != self.header_crc() {
            return Err(WireError::BadChecksum);
        }
        if b[data_field::RESERVED] != 0 || self.flags() & !DATA_FLAGS != 0 {
            return Err(WireError::Malformed("reserved bits set"));
        }
        let count = self.frag_count() as usize;
        if count == 0 || count > MAX_VFRAG_FRAGS {
            return Err(WireError::Malformed("frag_count not in 1..=64"));
        }
        if self.frag_index() as usize >= count {
            return Err(WireError::Malformed("frag_index >= frag_count"));
        }
        if self.flags() & FLAG_PAYLOAD_CSUM == 0 && self.payload_crc() != 0 {
            return Err(WireError::Malformed("payload_crc without PAYLOAD_CSUM"));
        }
        let len = self.payload_len() as usize;
        if b.len() - DATA_HEADER_LEN < len {
            return Err(WireError::Truncated);
        }
        match self.offset().checked_add(len as u64) {
            Some(end) if end <= self.msg_len() => Ok(()),
            _ => Err(WireError::Malformed("offset + payload_len > msg_len")),
        }
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Packet type.
    pub fn packet_type(&self) -> Result<PacketType, WireError> {
        PacketType::from_u8(self.buffer.as_ref()[3])
    }
    /// Flag bits (`FLAG_*`).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[data_field::FLAGS]
    }
    /// Index of this fragment in its vfrag.
    pub fn frag_index(&self) -> u8 {
        self.buffer.as_ref()[data_field::FRAG_INDEX]
    }
    /// Number of fragments in the vfrag.
    pub fn frag_count(&self) -> u8 {
        self.buffer.as_ref()[data_field::FRAG_COUNT]
    }
    /// Header CRC as carried.
    pub fn header_crc(&self) -> u32 {
        read_u32_at(self.buffer.as_ref(), data_field::HEADER_CRC)
    }
    /// Payload CRC as carried.
    pub fn payload_crc(&self) -> u32 {
        read_u32_at(self.buffer.as_ref(), data_field::PAYLOAD_CRC)
    }
    /// Payload length.
    pub fn payload_len(&self) -> u32 {
        read_u32_at(self.buffer.as_ref(), data_field::PAYLOAD_LEN)
    }
    /// MPI context id.
    pub fn ctx(&self) -> u32 {
        read_u32_at(self.buffer.as_ref(), data_field::CTX)
    }
    /// Per-peer vfrag id.
    pub fn vfrag_id(&self) -> u64 {
        read_u64_at(self.buffer.as_ref(), data_field::VFRAG_ID)
    }
    /// Transmission number (unique per transmission on this connection).
    pub fn pkt_num(&self) -> u64 {
        read_u64_at(self.buffer.as_ref(), data_field::PKT_NUM)
    }
    /// Per-peer message sequence number (MPI ordering).
    pub fn msg_seq(&self) -> u64 {
        read_u64_at(self.buffer.as_ref(), data_field::MSG_SEQ)
    }
    /// Total message length.
    pub fn msg_len(&self) -> u64 {
        read_u64_at(self.buffer.as_ref(), data_field::MSG_LEN)
    }
    /// Offset of this payload in the message.
    pub fn offset(&self) -> u64 {
        read_u64_at(self.buffer.as_ref(), data_field::OFFSET)
    }
    /// Source rank.
    pub fn src(&self) -> u32 {
        read_u32_at(self.buffer.as_ref(), data_field::SRC)
    }
    /// MPI tag.
    pub fn tag(&self) -> i32 {
        read_i32_at(self.buffer.as_ref(), data_field::TAG)
    }
    /// The payload bytes (exactly `payload_len`; trailing padding is ignored).
    pub fn payload(&self) -> &[u8] {
        let len = self.payload_len() as usize;
        &self.buffer.as_ref()[DATA_HEADER_LEN..DATA_HEADER_LEN + len]
    }
}

/// Parsed data header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DataRepr {
    /// MATCH, RNDV or FRAG.
    pub kind: PacketType,
    /// `FLAG_*` bits.
    pub flags: u8,
    /// Fragment index in the vfrag.
    pub frag_index: u8,
    /// Fragments in the vfrag (1..=64).
    pub frag_count: u8,
    /// Payload CRC (0 unless `FLAG_PAYLOAD_CSUM`).
    pub payload_crc: u32,
    /// Payload bytes following the header.
    pub payload_len: u32,
    /// Per-peer vfrag id.
    pub vfrag_id: u64,
    /// Transmission number.
    pub pkt_num: u64,
    /// Match fields.
    pub m: MatchFields,
    /// Per-peer message sequence.
    pub msg_seq: u64,
    /// Total message length.
    pub msg_len: u64,
    /// Offset of the payload in the message.
    pub offset: u64,
}

/// The MPI match fields carried by every data packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MatchFields {
    /// Communicator context id.
    pub ctx: u32,
    /// Source rank in the communicator.
    pub src: u32,
    /// Tag.
    pub tag: i32,
}

impl DataRepr {
    /// Parses a packet, checking it (as [`DataPacket::new_checked`] does).
    pub fn parse<T: AsRef<[u8]>>(p: &DataPacket<T>) -> Result<Self, WireError> {
        p.check()?;
        Ok(Self::from_checked(p))
    }

    /// Checks and parses the data packet at the start of `bytes`: one header CRC (wrapping it
    /// with [`DataPacket::new_checked`] and then calling [`DataRepr::parse`] computes two).
    pub fn parse_bytes(bytes: &[u8]) -> Result<Self, WireError> {
        Self::parse(&DataPacket::new_unchecked(bytes))
    }

    /// The fields of a packet that passed its checks.
    fn from_checked<T: AsRef<[u8]>>(p: &DataPacket<T>) -> Self {
        Self {
            kind: p.packet_type().expect("checked: a data type"),
            flags: p.flags(),
            frag_index: p.frag_index(),
            frag_count: p.frag_count(),
            payload_crc: p.payload_crc(),
            payload_len: p.payload_len(),
            vfrag_id: p.vfrag_id(),
            pkt_num: p.pkt_num(),
            m: MatchFields {
                ctx: p.ctx(),
                src: p.src(),
                tag: p.tag(),
            },
            msg_seq: p.msg_seq(),
            msg_len: p.msg_len(),
            offset: p.offset(),
        }
    }

    /// Writes the header (with a valid header CRC) into `buf[..DATA_HEADER_LEN]`.
    ///
    /// # Panics
    /// If `buf` is shorter than [`DATA_HEADER_LEN`].
    pub fn emit(&self, buf: &mut [u8]) {
        let b = &mut buf[..DATA_HEADER_LEN];
        write_u16_at(b, 0, MAGIC);
        b[2] = VERSION;
        b[3] = self.kind as u8;
        b[data_field::FLAGS] = self.flags;
        b[data_field::FRAG_INDEX] = self.frag_index;
        b[data_field::FRAG_COUNT] = self.frag_count;
        b[data_field::RESERVED] = 0;
        write_u32_at(b, data_field::PAYLOAD_CRC, self.payload_crc);
        write_u32_at(b, data_field::PAYLOAD_LEN, self.payload_len);
        write_u32_at(b, data_field::CTX, self.m.ctx);
        write_u64_at(b, data_field::VFRAG_ID, self.vfrag_id);
        write_u64_at(b, data_field::PKT_NUM, self.pkt_num);
        write_u64_at(b, data_field::MSG_SEQ, self.msg_seq);
        write_u64_at(b, data_field::MSG_LEN, self.msg_len);
        write_u64_at(b, data_field::OFFSET, self.offset);
        write_u32_at(b, data_field::SRC, self.m.src);
        write_i32_at(b, data_field::TAG, self.m.tag);
        write_u32_at(b, data_field::HEADER_CRC, 0);
        let crc = crc32c::crc32c(b);
        write_u32_at(b, data_field::HEADER_CRC, crc);
    }

    /// Checks `placed` (the payload as it now sits in memory) against the payload CRC.
    /// Always true when the packet carries no payload checksum.
    pub fn payload_intact(&self, placed: &[u8]) -> bool {
        placed.len() == self.payload_len as usize
            && (self.flags & FLAG_PAYLOAD_CSUM == 0 || crc32c::crc32c(placed) == self.payload_crc)
    }
}

mod ack_field {
    pub const FLAGS: usize = 4;
    pub const FRAG_COUNT: usize = 5;
    pub const RESERVED: usize = 6;
    pub const CRC: usize = 8;
    pub const ACK_DELAY: usize = 12;
    pub const VFRAG_ID: usize = 16;
    pub const MASK: usize = 24;
    pub const ECHO: usize = 32;
    pub const MSG_SEQ: usize = 40;
}

/// Zero-copy view of an ACK or NACK packet.
#[derive(Debug, Clone)]
pub struct AckPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AckPacket<T> {
    /// Wraps a buffer without checking; accessors may panic on a short buffer.
    pub fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer after checking length, magic, version, type, CRC and fields.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let p = Self::new_unchecked(buffer);
        p.check()?;
        Ok(p)
    }

    fn check(&self) -> Result<(), WireError> {
        let b = self.buffer.as_ref();
        let ty = peek_type(b)?;
        if ty.is_data() {
            return Err(WireError::BadType(ty as u8));
        }
        if b.len() < ACK_LEN {
            return Err(WireError::Truncated);
        }
        if crc_with_hole(head::<ACK_LEN>(b), ack_field::CRC) != self.crc() {
            return Err(WireError::BadChecksum);
        }
        if read_u16_at(b, ack_field::RESERVED) != 0 || self.flags() & !ACK_FLAGS != 0 {
            return Err(WireError::Malformed("reserved bits set"));
        }
        let count = self.frag_count() as usize;
        if count == 0 || count > MAX_VFRAG_FRAGS {
            return Err(WireError::Malformed("frag_count not in 1..=64"));
        }
        if count < 64 && self.mask() >> count != 0 {
            return Err(WireError::Malformed("mask has bits beyond frag_count"));
        }
        Ok(())
    }

    /// Packet type (ACK or NACK).
    pub fn packet_type(&self) -> Result<PacketType, WireError> {
        PacketType::from_u8(self.buffer.as_ref()[3])
    }
    /// `ACK_FLAG_*` bits.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[ack_field::FLAGS]
    }
    /// Fragments in the acknowledged vfrag.
    pub fn frag_count(&self) -> u8 {
        self.buffer.as_ref()[ack_field::FRAG_COUNT]
    }
    /// CRC as carried.
    pub fn crc(&self) -> u32 {
        read_u32_at(self.buffer.as_ref(), ack_field::CRC)
    }
    /// Time the receiver held the ack after the echoed packet arrived, in microseconds.
    pub fn ack_delay_us(&self) -> u32 {
        read_u32_at(self.buffer.as_ref(), ack_field::ACK_DELAY)
    }
    /// Acknowledged vfrag.
    pub fn vfrag_id(&self) -> u64 {
        read_u64_at(self.buffer.as_ref(), ack_field::VFRAG_ID)
    }
    /// Fragments received intact (bit i = fragment i).
    pub fn mask(&self) -> u64 {
        read_u64_at(self.buffer.as_ref(), ack_field::MASK)
    }
    /// `pkt_num` of the transmission that triggered this ack.
    pub fn echo_pkt_num(&self) -> u64 {
        read_u64_at(self.buffer.as_ref(), ack_field::ECHO)
    }
    /// Message the vfrag belongs to.
    pub fn msg_seq(&self) -> u64 {
        read_u64_at(self.buffer.as_ref(), ack_field::MSG_SEQ)
    }
}

/// Parsed ACK/NACK.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AckRepr {
    /// True for a NACK (a fragment failed its payload checksum).
    pub nack: bool,
    /// `ACK_FLAG_*` bits.
    pub flags: u8,
    /// Fragments in the vfrag.
    pub frag_count: u8,
    /// Receiver-side delay before sending, microseconds.
    pub ack_delay_us: u32,
    /// Acknowledged vfrag.
    pub vfrag_id: u64,
    /// Fragments received intact.
    pub mask: u64,
    /// Echoed transmission number.
    pub echo_pkt_num: u64,
    /// Message of the vfrag.
    pub msg_seq: u64,
}

impl AckRepr {
    /// Parses a packet, checking it (as [`AckPacket::new_checked`] does).
    pub fn parse<T: AsRef<[u8]>>(p: &AckPacket<T>) -> Result<Self, WireError> {
        p.check()?;
        Ok(Self::from_checked(p))
    }

    /// Checks and parses the ACK or NACK at the start of `bytes`, with one CRC computation.
    pub fn parse_bytes(bytes: &[u8]) -> Result<Self, WireError> {
        Self::parse(&AckPacket::new_unchecked(bytes))
    }

    /// The fields of a packet that passed its checks.
    fn from_checked<T: AsRef<[u8]>>(p: &AckPacket<T>) -> Self {
        Self {
            nack: p.packet_type().expect("checked: an ack type") == PacketType::Nack,
            flags: p.flags(),
            frag_count: p.frag_count(),
            ack_delay_us: p.ack_delay_us(),
            vfrag_id: p.vfrag_id(),
            mask: p.mask(),
            echo_pkt_num: p.echo_pkt_num(),
            msg_seq: p.msg_seq(),
        }
    }

    /// Writes the packet (with CRC) into `buf[..ACK_LEN]`.
    ///
    /// # Panics
    /// If `buf` is shorter than [`ACK_LEN`].
    pub fn emit(&self, buf: &mut [u8]) {
        let b = &mut buf[..ACK_LEN];
        write_u16_at(b, 0, MAGIC);
        b[2] = VERSION;
        b[3] = if self.nack {
            PacketType::Nack
        } else {
            PacketType::Ack
        } as u8;
        b[ack_field::FLAGS] = self.flags;
        b[ack_field::FRAG_COUNT] = self.frag_count;
        write_u16_at(b, ack_field::RESERVED, 0);
        write_u32_at(b, ack_field::ACK_DELAY, self.ack_delay_us);
        write_u64_at(b, ack_field::VFRAG_ID, self.vfrag_id);
        write_u64_at(b, ack_field::MASK, self.mask);
        write_u64_at(b, ack_field::ECHO, self.echo_pkt_num);
        write_u64_at(b, ack_field::MSG_SEQ, self.msg_seq);
        write_u32_at(b, ack_field::CRC, 0);
        let crc = crc32c::crc32c(b);
        write_u32_at(b, ack_field::CRC, crc);
    }

    /// The packet as a fixed-size array.
    pub fn to_bytes(&self) -> [u8; ACK_LEN] {
        let mut b = [0u8; ACK_LEN];
        self.emit(&mut b);
        b
    }
}

/// Any parsed DR packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repr {
    /// MATCH, RNDV or FRAG header (payload follows in the buffer).
    Data(DataRepr),
    /// ACK or NACK.
    Ack(AckRepr),
}

/// Parses any DR packet. Never panics, whatever the bytes.
pub fn parse(bytes: &[u8]) -> Result<Repr, WireError> {
    if peek_type(bytes)?.is_data() {
        DataRepr::parse_bytes(bytes).map(Repr::Data)
    } else {
        AckRepr::parse_bytes(bytes).map(Repr::Ack)
    }
}

/// Splits a received BTL fragment into the DR packets it carries: an ACK or NACK flagged
/// [`ACK_FLAG_BUNDLED`] followed by a data packet, or else the one packet it is. Nothing is
/// validated beyond what the split needs: each part goes through its own checked parser (the
/// ack's CRC covers its flags, the data header has its own CRC).
pub fn split_bundle(bytes: &[u8]) -> (&[u8], Option<&[u8]>) {
    let bundled = bytes.len() > ACK_LEN
        && matches!(peek_type(bytes), Ok(PacketType::Ack | PacketType::Nack))
        && bytes[ack_field::FLAGS] & ACK_FLAG_BUNDLED != 0;
    if bundled {
        let (ack, data) = bytes.split_at(ACK_LEN);
        (ack, Some(data))
    } else {
        (bytes, None)
    }
}

/// Mask with the low `count` bits set (`count` in 0..=64).
pub fn full_mask(count: usize) -> u64 {
    if count >= 64 {
        u64::MAX
    } else {
        (1u64 << count) - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn data_strategy() -> impl Strategy<Value = (DataRepr, Vec<u8>)> {
        (
            prop_oneof![
                Just(PacketType::Match),
                Just(PacketType::Rndv),
                Just(PacketType::Frag)
            ],
            0u8..8,
            1u8..=64,
            any::<(u64, u64, u64, u32, u32, i32)>(),
            proptest::collection::vec(any::<u8>(), 0..300),
            any::<u64>(),
            any::<bool>(),
        )
            .prop_flat_map(
                |(kind, flags, count, (vid, pkt, seq, ctx, src, tag), payload, off, cs)| {
                    (0..count).prop_map(move |idx| {
                        let flags = (flags & DATA_FLAGS & !FLAG_PAYLOAD_CSUM)
                            | if cs { FLAG_PAYLOAD_CSUM } else { 0 };
                        let offset = off % (1 << 40);
                        let repr = DataRepr {
                            kind,
                            flags,
                            frag_index: idx,
                            frag_count: count,
                            payload_crc: if cs { crc32c::crc32c(&payload) } else { 0 },
                            payload_len: payload.len() as u32,
                            vfrag_id: vid,
                            pkt_num: pkt,
                            m: MatchFields { ctx, src, tag },
                            msg_seq: seq,
                            msg_len: offset + payload.len() as u64 + (vid % 7),
                            offset,
                        };
                        (repr, payload.clone())
                    })
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn data_roundtrip((repr, payload) in data_strategy()) {
            let mut buf = vec![0u8; DATA_HEADER_LEN + payload.len()];
            repr.emit(&mut buf);
            buf[DATA_HEADER_LEN..].copy_from_slice(&payload);
            prop_assert_eq!(parse(&buf), Ok(Repr::Data(repr)));
            let p = DataPacket::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(p.payload(), &payload[..]);
            prop_assert!(repr.payload_intact(&payload));
        }

        #[test]
                fn ack_roundtrip(nack in any::<bool>(), flags in 0u8..16, count in 1u8..=64,
                         mask in any::<u64>(), rest in any::<(u32, u64, u64, u64)>()) {
            let repr = AckRepr {
                nack, flags, frag_count: count, ack_delay_us: rest.0, vfrag_id: rest.1,
                mask: mask & full_mask(count as usize), echo_pkt_num: rest.2, msg_seq: rest.3,
            };
            let buf = repr.to_bytes();
            prop_assert_eq!(parse(&buf), Ok(Repr::Ack(repr)));
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse(&bytes);
            let _ = split_bundle(&bytes);
        }

        #[test]
        fn dr_prefixed_random_bytes_never_panic(ty in 0u8..8, mut bytes in proptest::collection::vec(any::<u8>(), 4..200)) {
            // Get past magic/version so the field checks are exercised.
            bytes[0] = 0x44; bytes[1] = 0x52; bytes[2] = VERSION; bytes[3] = ty;
            let _ = parse(&bytes);
        }

        #[test]
        fn single_bit_flip_in_header_is_detected((repr, payload) in data_strategy(), bit in 0usize..DATA_HEADER_LEN * 8) {
            let mut buf = vec![0u8; DATA_HEADER_LEN + payload.len()];
            repr.emit(&mut buf);
            buf[DATA_HEADER_LEN..].copy_from_slice(&payload);
            buf[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(parse(&buf).is_err());
        }

        #[test]
        fn payload_corruption_is_detected((repr, payload) in data_strategy(), bit in any::<usize>()) {
            prop_assume!(!payload.is_empty() && repr.flags & FLAG_PAYLOAD_CSUM != 0);
            let mut placed = payload.clone();
            let bit = bit % (placed.len() * 8);
            placed[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(!repr.payload_intact(&placed));
        }
    }

    #[test]
    fn foreign_and_truncated_are_errors() {
        assert_eq!(parse(&[]), Err(WireError::Truncated));
        assert_eq!(parse(b"GET / HTTP/1.1"), Err(WireError::BadMagic(0x4547)));
        assert_eq!(parse(&[0x44, 0x52, 9, 1]), Err(WireError::BadVersion(9)));
        // Version 1 is the big-endian layout: refused, not misread.
        assert_eq!(parse(&[0x44, 0x52, 1, 1]), Err(WireError::BadVersion(1)));
        assert_eq!(parse(&[0x44, 0x52, VERSION, 1]), Err(WireError::Truncated));
        assert_eq!(
            parse(&[0x44, 0x52, VERSION, 77]),
            Err(WireError::BadType(77))
        );
        let ack = AckRepr {
            nack: false,
            flags: 0,
            frag_count: 3,
            ack_delay_us: 0,
            vfrag_id: 1,
            mask: 0b111,
            echo_pkt_num: 2,
            msg_seq: 3,
        };
        let b = ack.to_bytes();
        assert_eq!(parse(&b[..ACK_LEN - 1]), Err(WireError::Truncated));
    }

    #[test]
    fn a_bundle_splits_into_its_ack_and_data_and_nothing_else_splits() {
        let ack = AckRepr {
            nack: false,
            flags: ACK_FLAG_BUNDLED,
            frag_count: 1,
            ack_delay_us: 3,
            vfrag_id: 9,
            mask: 1,
            echo_pkt_num: 4,
            msg_seq: 5,
        };
        let data = DataRepr {
            kind: PacketType::Match,
            flags: 0,
            frag_index: 0,
            frag_count: 1,
            payload_crc: 0,
            payload_len: 3,
            vfrag_id: 1,
            pkt_num: 2,
            m: MatchFields::default(),
            msg_seq: 0,
            msg_len: 3,
            offset: 0,
        };
        let mut d = vec![0u8; DATA_HEADER_LEN + 3];
        data.emit(&mut d);
        d[DATA_HEADER_LEN..].copy_from_slice(b"abc");
        let mut bundle = ack.to_bytes().to_vec();
        bundle.extend_from_slice(&d);
        let (a, rest) = split_bundle(&bundle);
        assert_eq!(parse(a), Ok(Repr::Ack(ack)));
        assert_eq!(rest, Some(&d[..]));
        assert_eq!(parse(&d), Ok(Repr::Data(data)));
        // An unflagged ack with bytes behind it, a lone flagged ack, a data packet, nothing:
        // one packet each (the first is an ack whose trailing bytes are ignored, as before).
        let mut plain = AckRepr { flags: 0, ..ack }.to_bytes().to_vec();
        plain.extend_from_slice(&d);
        assert_eq!(split_bundle(&plain), (&plain[..], None));
        let lone = ack.to_bytes();
        assert_eq!(split_bundle(&lone), (&lone[..], None));
        assert_eq!(split_bundle(&d), (&d[..], None));
        assert_eq!(split_bundle(&[]), (&[][..], None));
    }

    #[test]
    fn data_payload_shorter_than_declared_is_truncated() {
        let repr = DataRepr {
            kind: PacketType::Match,
            flags: 0,
            frag_index: 0,
            frag_count: 1,
            payload_crc: 0,
            payload_len: 10,
            vfrag_id: 0,
            pkt_num: 0,
            m: MatchFields::default(),
            msg_seq: 0,
            msg_len: 10,
            offset: 0,
        };
        let mut buf = vec![0u8; DATA_HEADER_LEN + 9];
        repr.emit(&mut buf);
        assert_eq!(buf[..4], [b'D', b'R', VERSION, 1]);
        assert_eq!(buf[16..20], [10, 0, 0, 0], "payload_len is little-endian");
        assert_eq!(parse(&buf), Err(WireError::Truncated));
    }
}
