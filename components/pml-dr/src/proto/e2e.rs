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

/// Where a staged message is copied at the match: the user's receive buffer in the PML, a
/// memory that does not keep what is written to it in tests.
pub trait CopyTarget {
    /// Writes `src` at `offset` (in bounds: the caller copies at most the target's length).
    fn write_at(&mut self, offset: usize, src: &[u8]);
    /// The bytes as the application will read them.
    fn bytes(&self) -> &[u8];
}

/// What [`copy_checked`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyOutcome {
    /// Every fragment's checksum matched after the first copy.
    Clean,
    /// `fragments` mismatched after the first copy and matched after copying them again.
    Recopied {
        /// Fragments copied a second time.
        fragments: usize,
    },
    /// `failed` fragments mismatched after the first copy, `still` of them after the second:
    /// the memory does not keep what is written to it (nothing a retransmission fixes).
    Corrupt {
        /// Fragments that mismatched after the first copy.
        failed: usize,
        /// Fragments still wrong after the second.
        still: usize,
    },
}

/// Copies the verified `staging` bytes (at most the target's length) into `dst` and checks
/// every recorded fragment there; the fragments that mismatch are copied once more from
/// `staging` (which was verified, so a mismatch is a bad copy or bad memory) and checked
/// again.
pub fn copy_checked<T: CopyTarget + ?Sized>(
    dst: &mut T,
    staging: &[u8],
    crcs: &StagedCrcs,
) -> CopyOutcome {
    let n = staging.len().min(dst.bytes().len());
    dst.write_at(0, &staging[..n]);
    let bad = crcs.mismatches(dst.bytes());
    if bad.is_empty() {
        return CopyOutcome::Clean;
    }
    for &(off, len) in &bad {
        // `mismatches` returns only ranges inside the target, and staging holds the message
        // from offset 0 up to at least the target's length.
        if let Some(src) = staging.get(off..off + len) {
            dst.write_at(off, src);
        }
    }
    match crcs.mismatches(dst.bytes()).len() {
        0 => CopyOutcome::Recopied {
            fragments: bad.len(),
        },
        still => CopyOutcome::Corrupt {
            failed: bad.len(),
            still,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory that flips one bit of the first `flaky` writes covering byte `at` (a bad copy,
    /// or a cell that does not keep a value).
    struct FlakyMemory {
        mem: Vec<u8>,
        at: usize,
        flaky: usize,
        writes: usize,
    }

    impl CopyTarget for FlakyMemory {
        fn write_at(&mut self, offset: usize, src: &[u8]) {
            self.mem[offset..offset + src.len()].copy_from_slice(src);
            if (offset..offset + src.len()).contains(&self.at) {
                self.writes += 1;
                if self.writes <= self.flaky {
                    self.mem[self.at] ^= 0x04;
                }
            }
        }
        fn bytes(&self) -> &[u8] {
            &self.mem
        }
    }

    fn staged(len: usize, frag: usize) -> (Vec<u8>, StagedCrcs) {
        let msg: Vec<u8> = (0..len as u32).map(|i| (i * 13 + 5) as u8).collect();
        let mut s = StagedCrcs::default();
        for off in (0..len).step_by(frag) {
            let end = (off + frag).min(len);
            s.record(
                off as u64,
                (end - off) as u32,
                crc32c::crc32c(&msg[off..end]),
            );
        }
        (msg, s)
    }

    fn memory(len: usize, at: usize, flaky: usize) -> FlakyMemory {
        FlakyMemory {
            mem: vec![0; len],
            at,
            flaky,
            writes: 0,
        }
    }

    #[test]
    fn a_bad_first_copy_is_copied_again_and_the_buffer_ends_right() {
        let (msg, crcs) = staged(4000, 1000);
        let mut m = memory(4000, 2500, 1);
        assert_eq!(
            copy_checked(&mut m, &msg, &crcs),
            CopyOutcome::Recopied { fragments: 1 }
        );
        assert_eq!(m.mem, msg, "the second copy repaired the buffer");
        // Only the bad fragment was written again.
        assert_eq!(m.writes, 2);
        let mut clean = memory(4000, 2500, 0);
        assert_eq!(copy_checked(&mut clean, &msg, &crcs), CopyOutcome::Clean);
        assert_eq!(clean.mem, msg);
    }

    #[test]
    fn memory_that_keeps_flipping_is_reported_corrupt() {
        let (msg, crcs) = staged(4000, 1000);
        let mut m = memory(4000, 10, usize::MAX);
        assert_eq!(
            copy_checked(&mut m, &msg, &crcs),
            CopyOutcome::Corrupt {
                failed: 1,
                still: 1
            }
        );
    }

    #[test]
    fn a_truncating_receive_buffer_is_copied_and_checked_up_to_its_length() {
        let (msg, crcs) = staged(4000, 1000);
        // 2500 bytes: fragments 0 and 1 are checked, the cut fragment 2 cannot be.
        let mut m = memory(2500, 1200, 1);
        assert_eq!(
            copy_checked(&mut m, &msg, &crcs),
            CopyOutcome::Recopied { fragments: 1 }
        );
        assert_eq!(m.mem, msg[..2500]);
    }

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
