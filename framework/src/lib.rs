//! The MCA base of rmca. See the crate-level modules.
pub mod matching;
