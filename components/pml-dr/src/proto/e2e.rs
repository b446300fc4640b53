//! End-to-end payload checks of staged messages (`pml_dr_csum = end-to-end`).
//!
//! A fragment that arrives before its receive is matched is verified where it is placed, in a
//! staging buffer, and acknowledged; the message is copied into the user's buffer later, at the
//! match. Under `end-to-end` the receiver remembers each staged fragment's checksum and checks
//! the bytes again once they sit in the user's buffer, so that the checksum is verified in main
//! memory where the application reads the data (the DR paper's point), the copy included.

/// The checksums of the fragments of one staged message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StagedCrcs {
    /// (offset in the message, length, CRC32C of those bytes).
    frags: Vec<(u64, u32, u32)>,
}

impl StagedCrcs {
    /// Remembers that bytes `offset..offset + len` have CRC32C `crc` (as verified on
    /// placement).
    pub fn record(&mut self, offset: u64, len: u32, crc: u32) {
        self.frags.push((offset, len, crc));
    }

    /// Number of fragments recorded.
    pub fn len(&self) -> usize {
        self.frags.len()
    }

    /// True if nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.frags.is_empty()
    }

    /// The recorded ranges whose bytes in `buf` (the message from offset 0, possibly
    /// truncated) do not match their checksum, as `(offset, len)`. A range that does not fit
    /// `buf` entirely is skipped: a truncated receive keeps a prefix the checksum cannot vouch
    /// for, and says so in its status.
    pub fn mismatches(&self, buf: &[u8]) -> Vec<(usize, usize)> {
        self.frags
            .iter()
            .filter_map(|&(off, len, crc)| {
                let off = usize::try_from(off).ok()?;
                let end = off.checked_add(len as usize)?;
                let bytes = buf.get(off..end)?;
                (crc32c::crc32c(bytes) != crc).then_some((off, len as usize))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flipped_bit_in_the_receive_buffer_names_its_fragment() {
        let msg: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
        let mut s = StagedCrcs::default();
        for off in (0..3000).step_by(1000) {
            s.record(off as u64, 1000, crc32c::crc32c(&msg[off..off + 1000]));
        }
        assert_eq!(s.len(), 3);
        assert!(s.mismatches(&msg).is_empty());
        let mut bad = msg.clone();
        bad[1500] ^= 0x10;
        assert_eq!(s.mismatches(&bad), vec![(1000, 1000)]);
        // A truncated receive buffer: only whole fragments are checked.
        assert!(s.mismatches(&bad[..900]).is_empty());
        assert_eq!(s.mismatches(&bad[..2000]), vec![(1000, 1000)]);
    }
}
