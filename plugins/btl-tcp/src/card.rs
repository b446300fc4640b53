//! The business card btl-tcp publishes in the modex: where this process listens.
//!
//! Text (`"v1 127.0.0.1:40123"`, `"v1 [::1]:40123"`) rather than binary: it is tiny, read once
//! per peer, and readable in a modex dump.

use std::net::SocketAddr;

use thiserror::Error;

/// The modex key of the card.
pub const MODEX_KEY: &str = "btl.tcp";

const PREFIX: &str = "v1 ";

/// Why a card was rejected.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CardError {
    /// Not UTF-8 or without the version prefix.
    #[error("not a btl-tcp v1 card ({0})")]
    Format(String),
    /// The address does not parse.
    #[error("bad listen address '{0}' (want ip:port)")]
    Address(String),
    /// The address parses but nobody can connect to it.
    #[error("listen address {0} cannot be connected to (unspecified, multicast or port 0)")]
    Unusable(SocketAddr),
}

/// A peer's listen address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Card {
    /// Where the peer accepts connections.
    pub addr: SocketAddr,
}

impl Card {
    /// The card's bytes.
    pub fn encode(&self) -> Vec<u8> {
        format!("{PREFIX}{}", self.addr).into_bytes()
    }

    /// Parse and validate a card.
    pub fn decode(bytes: &[u8]) -> Result<Self, CardError> {
        let text = std::str::from_utf8(bytes).map_err(|_| CardError::Format("not UTF-8".into()))?;
        let rest = text
            .strip_prefix(PREFIX)
            .ok_or_else(|| CardError::Format(format!("expected prefix '{}'", PREFIX.trim_end())))?;
        let addr: SocketAddr = rest
            .parse()
            .map_err(|_| CardError::Address(rest.chars().take(64).collect()))?;
        if addr.ip().is_unspecified() || addr.ip().is_multicast() || addr.port() == 0 {
            return Err(CardError::Unusable(addr));
        }
        Ok(Self { addr })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn roundtrip_v4_v6() {
        for a in ["127.0.0.1:4000", "[::1]:5"] {
            let c = Card {
                addr: a.parse().unwrap(),
            };
            assert_eq!(Card::decode(&c.encode()), Ok(c));
        }
    }

    #[test]
    fn bad_cards_say_why() {
        assert!(matches!(
            Card::decode(b"\xff\xfe"),
            Err(CardError::Format(_))
        ));
        assert!(matches!(
            Card::decode(b"127.0.0.1:1"),
            Err(CardError::Format(_))
        ));
        assert!(matches!(
            Card::decode(b"v1 localhost:1"),
            Err(CardError::Address(_))
        ));
        assert!(matches!(
            Card::decode(b"v1 0.0.0.0:1"),
            Err(CardError::Unusable(_))
        ));
        assert!(matches!(
            Card::decode(b"v1 127.0.0.1:0"),
            Err(CardError::Unusable(_))
        ));
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Card::decode(&bytes);
        }
    }
}
