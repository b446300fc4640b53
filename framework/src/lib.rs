//! The MCA base of rmca, and all a component or plugin author compiles against: parameters,
//! the component registry and selection, plugin loading, the four framework traits (PML, BTL,
//! MPool, RCache), the BML, user buffers, the matching engine, progress and per-component memory
//! accounting. Joining a job (PMI, the modex over the launcher, the init sequence) is not here:
//! it is the `rmca-runtime` crate's, so that this crate and the plugin ABI do not depend on rte.
//!
//! Data flows down: application → PML ([`pml`]) → BML ([`bml`]) → BTLs ([`btl`]), with
//! memory pools ([`mpool`]) and registration caches ([`rcache`]) beside the BTLs.
//!
//! # Module layering
//! Modules import only from modules below them (a DAG; `a → b` reads "a uses b"):
//!
//! ```text
//! registry  → component, plugin, params, btl, pml
//! plugin    → component
//! component → base, init, btl, pml, mpool, rcache, osc, coll   (ComponentRef over the framework traits)
//! osc       → base, buffer, params
//! coll      → base, params                        (CollComponent, CollModule; schedules, sim)
//! matching  → pml, rank
//! slab      → pml                                 (the request table, keyed by RequestId)
//! pml       → base, init, bml, btl, buffer, progress, params, rank
//! bml       → btl, rank
//! btl       → base, init, modex, rcache, buffer, rank
//! init      → job, memory, modex, params, rcache   (InitContext)
//! mpool     → base, memory, params
//! rcache    → base, params                        (Registration, the rcache's currency)
//! base      → params                              (Framework, ComponentMeta, Component)
//! modex     → rank                                (ModexRead, ModexWrite)
//! job       → rank
//! params, progress, memory, buffer, rank, wire: leaves
//! ```
//!
//! [`component`] re-exports what a component crate needs from below it ([`base::Component`],
//! [`base::ComponentMeta`], [`base::Framework`], [`init::InitContext`]), and [`btl`] re-exports
//! the [`modex::ModexRead`] and [`rcache::Registration`] its trait uses; a re-export points down
//! like any other import.
#![deny(unsafe_code)]
#![warn(missing_docs)]
// Errors here carry the culprit's source (file path and line) by value; they occur at
// configuration time, never on a message path, so their size costs nothing that matters.
#![allow(clippy::result_large_err)]

pub mod base;
pub mod bml;
pub mod btl;
pub mod buffer;
pub mod coll;
pub mod component;
pub mod counters;
pub mod hash;
pub mod init;
pub mod job;
pub mod matching;
pub mod memory;
pub mod modex;
pub mod mpool;
pub mod osc;
pub mod params;
pub mod plugin;
pub mod pml;
pub mod progress;
pub mod rank;
pub mod rcache;
pub mod registry;
pub mod rng;
pub mod slab;
pub mod wire;

pub use inventory;

// The pins of the crates crossing the plugin boundary, read by build.rs; compiled here for its tests.
#[cfg(test)]
#[path = "../build/abi.rs"]
mod build_abi;
