//! The business card btl-ud publishes in the modex under [`crate::MODEX_KEY`].
//!
//! ```text
//! "UC" | version u8 | provider u8 | mtu u32 | qkey u32 | n_send u8 | 0 u8 | addr_len u16
//!      | receive QP address blob (addr_len) | n_send x send QP number u32
//! ```
//! (little-endian, through [`rmca_framework::wire`]). The receive QP's address blob builds the address handle; the send QP numbers
//! let the receiver check that a datagram claiming to come from rank r left one of r's QPs.

use rmca_framework::wire::{read_u16_at, read_u32_at, Writer};
use thiserror::Error;

const MAGIC: [u8; 2] = *b"UC";
/// Card format version. 2: integers little-endian (version 1 was big-endian), so a job
/// mixing the two builds refuses the card instead of misreading it.
pub const CARD_VERSION: u8 = 2;
const FIXED_LEN: usize = 16;
/// Largest number of send QPs a card can list.
pub const MAX_SEND_QPS: usize = 255;

/// Field offsets (widths in the module doc).
mod field {
    pub const MAGIC: std::ops::Range<usize> = 0..2;
    pub const VERSION: usize = 2;
    pub const PROVIDER: usize = 3;
    pub const MTU: usize = 4;
    pub const QKEY: usize = 8;
    pub const N_SEND: usize = 12;
    pub const RESERVED: usize = 13;
    pub const ADDR_LEN: usize = 14;
}

/// Why a card was rejected.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CardError {
    /// Shorter than its fields say.
    #[error("card truncated: {len} bytes, expected {expected}")]
    Truncated {
        /// Actual length.
        len: usize,
        /// Length the fields imply.
        expected: usize,
    },
    /// Not a btl-ud card, or another version.
    #[error("not a btl-ud card of version {CARD_VERSION}")]
    Foreign,
    /// Longer than its fields say.
    #[error("card has {0} trailing bytes")]
    Trailing(usize),
}

/// Provider codes on the wire.
pub fn provider_code(kind: rmca_verbs::ProviderKind) -> u8 {
    match kind {
        rmca_verbs::ProviderKind::Soft => 0,
        rmca_verbs::ProviderKind::Rdma => 1,
    }
}

/// Zero-copy view of a card.
#[derive(Debug, Clone, Copy)]
pub struct CardPacket<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> CardPacket<T> {
    /// Wrap after checking magic, version and lengths.
    pub fn new_checked(buf: T) -> Result<Self, CardError> {
        let b = buf.as_ref();
        if b.len() < FIXED_LEN {
            return Err(CardError::Truncated {
                len: b.len(),
                expected: FIXED_LEN,
            });
        }
        if b[field::MAGIC] != MAGIC || b[field::VERSION] != CARD_VERSION || b[field::RESERVED] != 0
        {
            return Err(CardError::Foreign);
        }
        let p = Self { buf };
        let expected = FIXED_LEN + p.addr_len() + 4 * p.n_send();
        let len = p.buf.as_ref().len();
        if len < expected {
            return Err(CardError::Truncated { len, expected });
        }
        if len > expected {
            return Err(CardError::Trailing(len - expected));
        }
        Ok(p)
    }

    /// Provider code ([`provider_code`]).
    pub fn provider(&self) -> u8 {
        self.buf.as_ref()[field::PROVIDER]
    }
    /// The publisher's UD MTU (largest datagram its receive buffers hold, after the GRH).
    pub fn mtu(&self) -> u32 {
        read_u32_at(self.buf.as_ref(), field::MTU)
    }
    /// The Q_Key of the receive QP.
    pub fn qkey(&self) -> u32 {
        read_u32_at(self.buf.as_ref(), field::QKEY)
    }
    /// Number of send QPs listed.
    pub fn n_send(&self) -> usize {
        usize::from(self.buf.as_ref()[field::N_SEND])
    }
    fn addr_len(&self) -> usize {
        usize::from(read_u16_at(self.buf.as_ref(), field::ADDR_LEN))
    }
    /// The receive QP's address blob.
    pub fn addr(&self) -> &[u8] {
        &self.buf.as_ref()[FIXED_LEN..FIXED_LEN + self.addr_len()]
    }
    /// The `i`th send QP number.
    pub fn send_qpn(&self, i: usize) -> u32 {
        let at = FIXED_LEN + self.addr_len() + 4 * i;
        read_u32_at(self.buf.as_ref(), at)
    }
}

/// A parsed card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardRepr {
    /// Provider code ([`provider_code`]).
    pub provider: u8,
    /// UD MTU of the publisher's receive buffers.
    pub mtu: u32,
    /// Q_Key of its receive QP.
    pub qkey: u32,
    /// Its receive QP's address blob.
    pub addr: Vec<u8>,
    /// Its send QP numbers (sources of its datagrams).
    pub send_qpns: Vec<u32>,
}

impl CardRepr {
    /// Parse a checked view.
    pub fn parse<T: AsRef<[u8]>>(p: &CardPacket<T>) -> Self {
        Self {
            provider: p.provider(),
            mtu: p.mtu(),
            qkey: p.qkey(),
            addr: p.addr().to_vec(),
            send_qpns: (0..p.n_send()).map(|i| p.send_qpn(i)).collect(),
        }
    }

    /// Parse bytes.
    pub fn from_bytes(b: &[u8]) -> Result<Self, CardError> {
        Ok(Self::parse(&CardPacket::new_checked(b)?))
    }

    /// Serialise. Panics if the address blob exceeds 64 KiB or more than [`MAX_SEND_QPS`] QPs
    /// are listed (both bounded by the module's own configuration).
    pub fn to_bytes(&self) -> Vec<u8> {
        assert!(self.send_qpns.len() <= MAX_SEND_QPS && self.addr.len() <= usize::from(u16::MAX));
        let mut v = Vec::with_capacity(FIXED_LEN + self.addr.len() + 4 * self.send_qpns.len());
        let mut w = Writer::new(&mut v);
        w.bytes(&MAGIC)
            .u8(CARD_VERSION)
            .u8(self.provider)
            .u32(self.mtu)
            .u32(self.qkey)
            .u8(self.send_qpns.len() as u8)
            .u8(0)
            .u16(self.addr.len() as u16)
            .bytes(&self.addr);
        for q in &self.send_qpns {
            w.u32(*q);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> CardRepr {
        CardRepr {
            provider: 0,
            mtu: 2048,
            qkey: 0x1111_2222,
            addr: vec![7; 26],
            send_qpns: vec![3, 4, 5, 6],
        }
    }

    #[test]
    fn roundtrip_and_rejects() {
        let c = sample();
        let b = c.to_bytes();
        assert_eq!(CardRepr::from_bytes(&b).unwrap(), c);
        assert!(matches!(
            CardRepr::from_bytes(&b[..b.len() - 1]),
            Err(CardError::Truncated { .. })
        ));
        let mut long = b.clone();
        long.push(0);
        assert_eq!(CardRepr::from_bytes(&long), Err(CardError::Trailing(1)));
        let mut foreign = b;
        foreign[0] = b'X';
        assert_eq!(CardRepr::from_bytes(&foreign), Err(CardError::Foreign));
    }

    #[test]
    fn layout_is_little_endian_and_version_1_is_refused() {
        let c = CardRepr {
            provider: 1,
            mtu: 0x0102_0304,
            qkey: 0x0506_0708,
            addr: vec![0xaa],
            send_qpns: vec![0x090a_0b0c],
        };
        let b = c.to_bytes();
        assert_eq!(
            b,
            [
                b'U',
                b'C',
                CARD_VERSION,
                1,
                4,
                3,
                2,
                1,
                8,
                7,
                6,
                5,
                1,
                0,
                1,
                0,
                0xaa,
                0x0c,
                0x0b,
                0x0a,
                0x09
            ]
        );
        // A card of the big-endian build (version 1) is refused, not misread.
        let mut old = b;
        old[field::VERSION] = 1;
        assert_eq!(CardRepr::from_bytes(&old), Err(CardError::Foreign));
    }

    proptest! {
        #[test]
        fn parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(c) = CardRepr::from_bytes(&bytes) {
                prop_assert_eq!(c.to_bytes(), bytes);
            }
        }

        #[test]
        fn roundtrip(addr in proptest::collection::vec(any::<u8>(), 0..80),
                     qpns in proptest::collection::vec(any::<u32>(), 0..16),
                     mtu in any::<u32>(), qkey in any::<u32>(), provider in 0u8..2) {
            let c = CardRepr { provider, mtu, qkey, addr, send_qpns: qpns };
            prop_assert_eq!(CardRepr::from_bytes(&c.to_bytes()).unwrap(), c);
        }
    }
}
