//! IPv4 and UDP header views over the raw packets read from a TUN device: just enough to route
//! a packet by its destination and to corrupt a UDP payload so that it reaches the application
//! (bits flipped, the UDP checksum cleared: 0 means "none" in IPv4, so the kernel delivers the
//! datagram). Bad input is an error, never a panic (proptested on arbitrary bytes).

use std::net::Ipv4Addr;
use std::ops::Range;

/// Why a packet could not be read as IPv4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    /// Shorter than an IPv4 header.
    #[error("packet of {0} bytes is shorter than an IPv4 header (20)")]
    Truncated(usize),
    /// Not IP version 4.
    #[error("IP version {0}, not 4")]
    NotIpv4(u8),
    /// A header length field below 5 words or past the packet's end.
    #[error("IPv4 header length {ihl} words does not fit a packet of {len} bytes")]
    BadHeaderLen {
        /// The IHL field (32-bit words).
        ihl: u8,
        /// The packet's length.
        len: usize,
    },
    /// A total length field shorter than the header or longer than the packet.
    #[error("IPv4 total length {total} does not fit header {header} and packet {len}")]
    BadTotalLen {
        /// The total length field.
        total: usize,
        /// The header length in bytes.
        header: usize,
        /// The bytes read.
        len: usize,
    },
    /// Flips outside the packet.
    #[error("bit {bit} is outside the packet of {len} bytes")]
    FlipOutside {
        /// The bit offset.
        bit: usize,
        /// The packet's length.
        len: usize,
    },
}

/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;
const UDP_HEADER: usize = 8;

/// The fields of an IPv4 header this tool uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Header {
    /// Header length in bytes.
    pub header_len: usize,
    /// Total length (header and payload) in bytes.
    pub total_len: usize,
    /// The protocol field.
    pub protocol: u8,
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Fragment offset in bytes.
    pub frag_offset: usize,
}

impl Ipv4Header {
    /// Reads the header of `buf`, checking that its lengths are consistent with the buffer.
    pub fn parse(buf: &[u8]) -> Result<Self, PacketError> {
        if buf.len() < 20 {
            return Err(PacketError::Truncated(buf.len()));
        }
        let version = buf[0] >> 4;
        if version != 4 {
            return Err(PacketError::NotIpv4(version));
        }
        let ihl = buf[0] & 0x0f;
        let header_len = usize::from(ihl) * 4;
        if ihl < 5 || header_len > buf.len() {
            return Err(PacketError::BadHeaderLen {
                ihl,
                len: buf.len(),
            });
        }
        let total_len = usize::from(u16::from_be_bytes([buf[2], buf[3]]));
        if total_len < header_len || total_len > buf.len() {
            return Err(PacketError::BadTotalLen {
                total: total_len,
                header: header_len,
                len: buf.len(),
            });
        }
        let frag = u16::from_be_bytes([buf[6], buf[7]]);
        Ok(Self {
            header_len,
            total_len,
            protocol: buf[9],
            src: Ipv4Addr::new(buf[12], buf[13], buf[14], buf[15]),
            dst: Ipv4Addr::new(buf[16], buf[17], buf[18], buf[19]),
            frag_offset: usize::from(frag & 0x1fff) * 8,
        })
    }

    /// The bytes of a UDP payload whose corruption reaches the application: a UDP packet that
    /// is unfragmented or the first fragment (the one carrying the checksum), past the UDP
    /// header. None for anything else (TCP: its checksum would catch it; later fragments: the
    /// checksum they are covered by is in the first).
    pub fn corruptible(&self) -> Option<Range<usize>> {
        let start = self.header_len + UDP_HEADER;
        (self.protocol == PROTO_UDP && self.frag_offset == 0 && start < self.total_len)
            .then_some(start..self.total_len)
    }
}

/// Flips the bits `flips` (offsets from the packet's start) of the UDP packet `buf` and clears
/// its UDP checksum. The IP header is untouched, so its checksum stays valid.
pub fn corrupt_udp(buf: &mut [u8], flips: &[usize]) -> Result<(), PacketError> {
    let h = Ipv4Header::parse(buf)?;
    if let Some(&bit) = flips.iter().find(|&&b| b / 8 >= h.total_len) {
        return Err(PacketError::FlipOutside {
            bit,
            len: h.total_len,
        });
    }
    for &b in flips {
        buf[b / 8] ^= 1 << (b % 8);
    }
    if h.protocol == PROTO_UDP && h.frag_offset == 0 && h.header_len + UDP_HEADER <= h.total_len {
        buf[h.header_len + 6] = 0;
        buf[h.header_len + 7] = 0;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An IPv4/UDP packet with `payload`.
    fn udp_packet(payload: &[u8], frag_offset_words: u16) -> Vec<u8> {
        let total = 20 + 8 + payload.len();
        let mut p = vec![0u8; total];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[6..8].copy_from_slice(&frag_offset_words.to_be_bytes());
        p[8] = 64;
        p[9] = PROTO_UDP;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        p[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        p[26..28].copy_from_slice(&[0xab, 0xcd]);
        p[28..].copy_from_slice(payload);
        p
    }

    #[test]
    fn reads_udp_and_corrupts_its_payload_only() {
        let mut p = udp_packet(b"hello world", 0);
        let h = Ipv4Header::parse(&p).unwrap();
        assert_eq!(h.dst, Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(h.corruptible(), Some(28..39));
        let before = p.clone();
        corrupt_udp(&mut p, &[28 * 8 + 1, 38 * 8 + 7]).unwrap();
        assert_eq!(p[28], before[28] ^ 2);
        assert_eq!(p[38], before[38] ^ 0x80);
        assert_eq!(&p[26..28], &[0, 0], "checksum cleared");
        assert_eq!(&p[..20], &before[..20], "IP header untouched");
        assert!(matches!(
            corrupt_udp(&mut p, &[39 * 8]),
            Err(PacketError::FlipOutside { .. })
        ));
    }

    #[test]
    fn later_fragments_tcp_and_empty_payloads_are_not_corruptible() {
        assert_eq!(
            Ipv4Header::parse(&udp_packet(b"abc", 10))
                .unwrap()
                .corruptible(),
            None
        );
        assert_eq!(
            Ipv4Header::parse(&udp_packet(b"", 0))
                .unwrap()
                .corruptible(),
            None
        );
        let mut tcp = udp_packet(b"abcdef", 0);
        tcp[9] = 6;
        assert_eq!(Ipv4Header::parse(&tcp).unwrap().corruptible(), None);
    }

    #[test]
    fn refuses_what_is_not_ipv4() {
        assert_eq!(
            Ipv4Header::parse(&[0x45; 10]),
            Err(PacketError::Truncated(10))
        );
        let mut v6 = udp_packet(b"x", 0);
        v6[0] = 0x60;
        assert_eq!(Ipv4Header::parse(&v6), Err(PacketError::NotIpv4(6)));
        let mut p = udp_packet(b"x", 0);
        p[0] = 0x4f;
        assert!(matches!(
            Ipv4Header::parse(&p),
            Err(PacketError::BadHeaderLen { .. })
        ));
        let mut p = udp_packet(b"x", 0);
        p[2..4].copy_from_slice(&1000u16.to_be_bytes());
        assert!(matches!(
            Ipv4Header::parse(&p),
            Err(PacketError::BadTotalLen { .. })
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Arbitrary bytes never panic the parser or the corrupter.
        #[test]
        fn arbitrary_bytes_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
            flips in proptest::collection::vec(0usize..2000, 0..4),
        ) {
            if let Ok(h) = Ipv4Header::parse(&bytes) {
                prop_assert!(h.header_len >= 20 && h.total_len <= bytes.len());
                if let Some(r) = h.corruptible() {
                    prop_assert!(r.end <= bytes.len() && r.start < r.end);
                }
            }
            let mut b = bytes.clone();
            let _ = corrupt_udp(&mut b, &flips);
        }

        /// Well-formed UDP with flips chosen inside the corruptible range: exactly those bits
        /// differ, besides the cleared checksum.
        #[test]
        fn flips_are_exactly_applied(
            payload in proptest::collection::vec(any::<u8>(), 1..300),
            picks in proptest::collection::btree_set(any::<u16>(), 1..8),
        ) {
            let p = udp_packet(&payload, 0);
            let r = Ipv4Header::parse(&p).unwrap().corruptible().unwrap();
            let bits = r.len() * 8;
            let flips: std::collections::BTreeSet<usize> =
                picks.iter().map(|&x| r.start * 8 + usize::from(x) % bits).collect();
            let flips: Vec<usize> = flips.into_iter().collect();
            let mut q = p.clone();
            corrupt_udp(&mut q, &flips).unwrap();
            let differing: usize = p[r.clone()].iter().zip(&q[r.clone()]).map(|(a, b)| (a ^ b).count_ones() as usize).sum();
            prop_assert_eq!(differing, flips.len());
            prop_assert_eq!(&q[26..28], &[0u8, 0][..]);
        }
    }
}
