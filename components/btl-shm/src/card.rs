//! The business card btl-shm publishes in the modex under `"btl.shm"`: a zero-copy view
//! ([`Card`], smoltcp style) over the bytes and the parsed form ([`CardRepr`]).
//!
//! ```text
//!  0      4    5      6        8     12     16       20          24           32            40
//!  | magic | ver | flags | name_len | pid | rank | nrings | ring_lines | probe_addr | probe_value |
//!  40         48
//!  | seg_len  | name (name_len bytes, UTF-8) |
//! ```
//! All integers little-endian, through [`rmca_framework::wire`].

use rmca_framework::wire::{
    read_u16_at, read_u32_at, read_u64_at, write_u16_at, write_u32_at, write_u64_at,
};
use thiserror::Error;

/// `"RSHM"`.
pub const MAGIC: [u8; 4] = *b"RSHM";
/// Card format version.
pub const VERSION: u8 = 1;
/// Flag: the owner allows and supports CMA (`process_vm_readv`).
pub const FLAG_CMA: u8 = 1;
/// Longest segment name accepted.
pub const MAX_NAME: usize = 200;

/// Field offsets (widths in the module doc).
mod field {
    pub const MAGIC: std::ops::Range<usize> = 0..4;
    pub const VERSION: usize = 4;
    pub const FLAGS: usize = 5;
    pub const NAME_LEN: usize = 6;
    pub const PID: usize = 8;
    pub const RANK: usize = 12;
    pub const NRINGS: usize = 16;
    pub const RING_LINES: usize = 20;
    pub const PROBE_ADDR: usize = 24;
    pub const PROBE_VALUE: usize = 32;
    pub const SEG_LEN: usize = 40;
    pub const NAME: usize = 48;
}

/// Why a card was refused.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CardError {
    /// Shorter than its fixed part or its declared name.
    #[error("card truncated: {len} bytes, need {need}")]
    Truncated {
        /// Bytes present.
        len: usize,
        /// Bytes needed.
        need: usize,
    },
    /// Not a btl-shm card.
    #[error("bad magic {0:02x?}")]
    BadMagic([u8; 4]),
    /// Written by another version.
    #[error("card version {0}, this build reads version {VERSION}")]
    BadVersion(u8),
    /// The segment name is not acceptable.
    #[error("bad segment name: {0}")]
    BadName(String),
    /// Trailing bytes after the name.
    #[error("{0} trailing bytes after the card")]
    Trailing(usize),
}

/// A read-only view of card bytes.
#[derive(Debug, Clone)]
pub struct Card<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Card<T> {
    /// Wrap without checking (accessors may panic on short input; use [`Card::new_checked`]).
    pub fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wrap, checking length, magic and version so that every accessor is safe to call.
    pub fn new_checked(buffer: T) -> Result<Self, CardError> {
        let card = Self::new_unchecked(buffer);
        card.check()?;
        Ok(card)
    }

    fn check(&self) -> Result<(), CardError> {
        let b = self.buffer.as_ref();
        if b.len() < field::NAME {
            return Err(CardError::Truncated {
                len: b.len(),
                need: field::NAME,
            });
        }
        let magic: [u8; 4] = b[field::MAGIC].try_into().expect("range of 4");
        if magic != MAGIC {
            return Err(CardError::BadMagic(magic));
        }
        if b[field::VERSION] != VERSION {
            return Err(CardError::BadVersion(b[field::VERSION]));
        }
        let need = field::NAME + usize::from(self.name_len());
        if b.len() < need {
            return Err(CardError::Truncated { len: b.len(), need });
        }
        if b.len() > need {
            return Err(CardError::Trailing(b.len() - need));
        }
        Ok(())
    }

    /// Flags ([`FLAG_CMA`]).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    /// Length of the name.
    pub fn name_len(&self) -> u16 {
        read_u16_at(self.buffer.as_ref(), field::NAME_LEN)
    }
    /// Owner's process id.
    pub fn pid(&self) -> u32 {
        read_u32_at(self.buffer.as_ref(), field::PID)
    }
    /// Owner's rank.
    pub fn rank(&self) -> u32 {
        read_u32_at(self.buffer.as_ref(), field::RANK)
    }
    /// Rings in the owner's segment.
    pub fn nrings(&self) -> u32 {
        read_u32_at(self.buffer.as_ref(), field::NRINGS)
    }
    /// Lines per ring.
    pub fn ring_lines(&self) -> u32 {
        read_u32_at(self.buffer.as_ref(), field::RING_LINES)
    }
    /// Address of the CMA probe word in the owner.
    pub fn probe_addr(&self) -> u64 {
        read_u64_at(self.buffer.as_ref(), field::PROBE_ADDR)
    }
    /// Value of the CMA probe word.
    pub fn probe_value(&self) -> u64 {
        read_u64_at(self.buffer.as_ref(), field::PROBE_VALUE)
    }
    /// Segment length in bytes.
    pub fn seg_len(&self) -> u64 {
        read_u64_at(self.buffer.as_ref(), field::SEG_LEN)
    }
    /// Raw name bytes.
    pub fn name(&self) -> &[u8] {
        &self.buffer.as_ref()[field::NAME..field::NAME + usize::from(self.name_len())]
    }
}

/// A parsed, validated card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardRepr {
    /// The owner supports and allows CMA.
    pub cma: bool,
    /// Owner's process id.
    pub pid: u32,
    /// Owner's rank.
    pub rank: u32,
    /// Rings in the owner's segment.
    pub nrings: u32,
    /// Lines per ring.
    pub ring_lines: u32,
    /// Address of the owner's CMA probe word.
    pub probe_addr: u64,
    /// Expected value of the probe word.
    pub probe_value: u64,
    /// Segment length.
    pub seg_len: u64,
    /// Segment file name inside [`crate::sys::SHM_DIR`].
    pub name: String,
}

impl CardRepr {
    /// Parse a checked view. The name must be a plain file name starting with `prefix`.
    pub fn parse<T: AsRef<[u8]>>(card: &Card<T>, prefix: &str) -> Result<Self, CardError> {
        let name = std::str::from_utf8(card.name())
            .map_err(|_| CardError::BadName("not UTF-8".into()))?
            .to_owned();
        if name.len() > MAX_NAME {
            return Err(CardError::BadName(format!(
                "{} bytes, at most {MAX_NAME}",
                name.len()
            )));
        }
        if !name.starts_with(prefix)
            || name.contains('/')
            || name.contains('\0')
            || name.contains("..")
        {
            return Err(CardError::BadName(format!(
                "'{name}' is not a file name starting with '{prefix}'"
            )));
        }
        Ok(Self {
            cma: card.flags() & FLAG_CMA != 0,
            pid: card.pid(),
            rank: card.rank(),
            nrings: card.nrings(),
            ring_lines: card.ring_lines(),
            probe_addr: card.probe_addr(),
            probe_value: card.probe_value(),
            seg_len: card.seg_len(),
            name,
        })
    }

    /// Bytes of the emitted card.
    pub fn buffer_len(&self) -> usize {
        field::NAME + self.name.len()
    }

    /// Serialize.
    pub fn emit(&self) -> Vec<u8> {
        let mut b = vec![0u8; self.buffer_len()];
        b[field::MAGIC].copy_from_slice(&MAGIC);
        b[field::VERSION] = VERSION;
        b[field::FLAGS] = if self.cma { FLAG_CMA } else { 0 };
        write_u16_at(&mut b, field::NAME_LEN, self.name.len() as u16);
        write_u32_at(&mut b, field::PID, self.pid);
        write_u32_at(&mut b, field::RANK, self.rank);
        write_u32_at(&mut b, field::NRINGS, self.nrings);
        write_u32_at(&mut b, field::RING_LINES, self.ring_lines);
        write_u64_at(&mut b, field::PROBE_ADDR, self.probe_addr);
        write_u64_at(&mut b, field::PROBE_VALUE, self.probe_value);
        write_u64_at(&mut b, field::SEG_LEN, self.seg_len);
        b[field::NAME..].copy_from_slice(self.name.as_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> CardRepr {
        CardRepr {
            cma: true,
            pid: 4242,
            rank: 3,
            nrings: 2,
            ring_lines: 4096,
            probe_addr: 0x7fff_0000_1000,
            probe_value: 0xdead_beef_cafe_f00d,
            seg_len: 1 << 20,
            name: "rmca-job7-shm-3".into(),
        }
    }

    #[test]
    fn round_trip() {
        let repr = sample();
        let bytes = repr.emit();
        let card = Card::new_checked(&bytes[..]).unwrap();
        assert_eq!(CardRepr::parse(&card, "rmca-job7-").unwrap(), repr);
    }

    #[test]
    fn refuses_foreign_names() {
        let mut repr = sample();
        for bad in [
            "rmca-other-shm-3",
            "rmca-job7-/../etc/passwd",
            "rmca-job7-a/b",
        ] {
            repr.name = bad.into();
            let bytes = repr.emit();
            let card = Card::new_checked(&bytes[..]).unwrap();
            assert!(
                matches!(
                    CardRepr::parse(&card, "rmca-job7-"),
                    Err(CardError::BadName(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn refuses_bad_framing() {
        let bytes = sample().emit();
        assert!(matches!(
            Card::new_checked(&bytes[..10]),
            Err(CardError::Truncated { .. })
        ));
        assert!(matches!(
            Card::new_checked(&bytes[..bytes.len() - 1]),
            Err(CardError::Truncated { .. })
        ));
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(
            Card::new_checked(&longer[..]),
            Err(CardError::Trailing(1))
        ));
        let mut magic = bytes.clone();
        magic[0] = b'X';
        assert!(matches!(
            Card::new_checked(&magic[..]),
            Err(CardError::BadMagic(_))
        ));
        let mut ver = bytes;
        ver[4] = 9;
        assert!(matches!(
            Card::new_checked(&ver[..]),
            Err(CardError::BadVersion(9))
        ));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            if let Ok(card) = Card::new_checked(&bytes[..]) {
                let _ = CardRepr::parse(&card, "rmca-");
            }
        }

        #[test]
        fn mutated_cards_never_panic(pos in 0usize..63, val in any::<u8>()) {
            let mut bytes = sample().emit();
            if pos < bytes.len() { bytes[pos] = val; }
            if let Ok(card) = Card::new_checked(&bytes[..]) {
                let _ = CardRepr::parse(&card, "rmca-job7-");
            }
        }
    }
}
