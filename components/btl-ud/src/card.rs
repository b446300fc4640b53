//! The business card btl-ud publishes in the modex under [`crate::MODEX_KEY`].
//!
//! ```text
//! "UC" | version u8 | provider u8 | mtu u32 | qkey u32 | n_send u8 | 0 u8 | addr_len u16
//!      | receive QP address blob (addr_len) | n_send x send QP number u32
//! ```
//! (big endian). The receive QP's address blob builds the address handle; the send QP numbers
//! let the receiver check that a datagram claiming to come from rank r left one of r's QPs.

use thiserror::Error;

const MAGIC: [u8; 2] = *b"UC";
/// Card format version.
pub const CARD_VERSION: u8 = 1;
const FIXED_LEN: usize = 16;
/// Largest number of send QPs a card can list.
pub const MAX_SEND_QPS: usize = 255;

mod field {
    use std::ops::Range;
    pub const MAGIC: Range<usize> = 0..2;
    pub const VERSION: usize = 2;
    pub const PROVIDER: usize = 3;
    pub const MTU: Range<usize> = 4..8;
    pub const QKEY: Range<usize> = 8..12;
    pub const N_SEND: usize = 12;
    pub const RESERVED: usize = 13;
    pub const ADDR_LEN: Range<usize> = 14..16;
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

    fn be32(&self, r: std::ops::Range<usize>) -> u32 {
        let b = &self.buf.as_ref()[r];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Provider code ([`provider_code`]).
    pub fn provider(&self) -> u8 {
        self.buf.as_ref()[field::PROVIDER]
    }
    /// The publisher's UD MTU (largest datagram its receive buffers hold, after the GRH).
    pub fn mtu(&self) -> u32 {
        self.be32(field::MTU)
    }
    /// The Q_Key of the receive QP.
    pub fn qkey(&self) -> u32 {
        self.be32(field::QKEY)
    }
    /// Number of send QPs listed.
    pub fn n_send(&self) -> usize {
        usize::from(self.buf.as_ref()[field::N_SEND])
    }
    fn addr_len(&self) -> usize {
        let b = &self.buf.as_ref()[field::ADDR_LEN];
        usize::from(u16::from_be_bytes([b[0], b[1]]))
    }
    /// The receive QP's address blob.
    pub fn addr(&self) -> &[u8] {
        &self.buf.as_ref()[FIXED_LEN..FIXED_LEN + self.addr_len()]
    }
    /// The `i`th send QP number.
    pub fn send_qpn(&self, i: usize) -> u32 {
        let at = FIXED_LEN + self.addr_len() + 4 * i;
        self.be32(at..at + 4)
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
        v.extend_from_slice(&MAGIC);
        v.push(CARD_VERSION);
        v.push(self.provider);
        v.extend_from_slice(&self.mtu.to_be_bytes());
        v.extend_from_slice(&self.qkey.to_be_bytes());
        v.push(self.send_qpns.len() as u8);
        v.push(0);
        v.extend_from_slice(&(self.addr.len() as u16).to_be_bytes());
        v.extend_from_slice(&self.addr);
        for q in &self.send_qpns {
            v.extend_from_slice(&q.to_be_bytes());
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
