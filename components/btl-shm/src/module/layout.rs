use rmca_framework::wire;

use super::LINE;
pub const MAGIC: &[u8; 8] = b"RMCASHM\0";
pub const VERSION: u32 = 4;
/// The info block at offset 0: magic (8), version, nrings, lines, rank, pid (u32 LE each).
pub const INFO_LEN: usize = 28;
/// The doorbell word (`crate::wake`): in the first line, which is otherwise read-only after
/// setup, so that senders loading it share the line with no writer while nobody sleeps.
pub const OFF_DOORBELL: usize = 32;
/// Count of peers that mapped the segment (its own line: peers write it once).
pub const OFF_ATTACHED: usize = 64;
/// Consumer heads, one per ring, 128 bytes apart so the adjacent-line prefetcher does not
/// make two rings' heads share traffic.
pub const HEADS: usize = 128;
pub const HEAD_STRIDE: usize = 128;
pub const PAGE: usize = 4096;

/// The cooperative-copy slots, after the heads.
pub fn slots(nrings: usize) -> usize {
    (HEADS + nrings * HEAD_STRIDE).next_multiple_of(crate::coop::SLOT_STRIDE)
}
pub fn slot(nrings: usize, slot: usize) -> usize {
    slots(nrings) + slot * crate::coop::SLOT_STRIDE
}
pub fn header_len(nrings: usize) -> usize {
    (slots(nrings) + crate::coop::SLOTS * crate::coop::SLOT_STRIDE).div_ceil(PAGE) * PAGE
}
pub fn seg_len(nrings: usize, lines: usize) -> Option<usize> {
    nrings
        .checked_mul(lines)?
        .checked_mul(LINE)?
        .checked_add(header_len(nrings))
}
pub fn head(ring: usize) -> usize {
    HEADS + ring * HEAD_STRIDE
}
pub fn data(nrings: usize, lines: usize, ring: usize) -> usize {
    header_len(nrings) + ring * lines * LINE
}
pub fn info(nrings: u32, lines: u32, rank: u32, pid: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(INFO_LEN);
    wire::Writer::new(&mut b)
        .bytes(MAGIC)
        .u32(VERSION)
        .u32(nrings)
        .u32(lines)
        .u32(rank)
        .u32(pid);
    b
}
