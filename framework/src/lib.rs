//! The MCA base of rmca: parameters, the component registry and selection, plugin loading,
//! the four framework traits (PML, BTL, MPool, RCache), the BML, and per-component memory
//! accounting.
//!
//! Data flows down: application → PML ([`pml`]) → BML ([`bml`]) → BTLs ([`btl`]), with
//! memory pools ([`mpool`]) and registration caches ([`rcache`]) beside the BTLs.
#![deny(unsafe_code)]
#![warn(missing_docs)]
// Errors here carry the culprit's source (file path and line) by value; they occur at
// configuration time, never on a message path, so their size costs nothing that matters.
#![allow(clippy::result_large_err)]

pub mod bml;
pub mod btl;
pub mod buffer;
pub mod component;
pub mod job;
pub mod matching;
pub mod memory;
pub mod modex;
pub mod mpool;
pub mod params;
pub mod plugin;
pub mod pml;
pub mod progress;
pub mod rank;
pub mod rcache;
pub mod registry;

pub use inventory;
