//! rmca-sim: a deterministic discrete-event simulator of N virtual processes that drives
//! pml-dr's own sans-IO protocol core ([`rmca_pml_dr::proto::Connection`]) over a modelled
//! network, with btl-ud's receive pool and the receive-queue memory of btl-ud and btl-rc, to
//! answer scale questions (memory per process, acknowledgement and timer rates, recovery
//! after a burst loss, a peer death or a killed BTL failed over to a second one, all-to-all
//! completion time) at up to 16384 processes.
//!
//! - [`queue`]: the event queue (explicit time, FIFO ties).
//! - [`net`]: latency, bandwidth per NIC, Bernoulli and Gilbert-Elliott loss, loss windows.
//! - [`sim`]: the processes, the glue around pml-dr's core, the receive-pool and CPU models,
//!   BTL (path) kills with a second BTL, and the all-to-all folded by symmetry.
//! - [`memory`]: memory per process from the components' own configuration code and constants,
//!   plus pml-dr's per-peer heap measured by driving the core.
//! - [`params`]: `--mca` settings read through the components' own parameter code.
//! - [`report`]: tables, JSON and SVG plots.
#![warn(missing_docs)]

pub mod heap;
pub mod memory;
pub mod net;
pub mod params;
pub mod queue;
pub mod report;
pub mod sim;

use thiserror::Error;

/// A configuration the simulator refuses.
#[derive(Debug, Error)]
pub enum SimError {
    /// A value out of its valid range.
    #[error("{what} = {value} is invalid: valid is {valid}")]
    Invalid {
        /// The option or parameter.
        what: String,
        /// The value given.
        value: String,
        /// What is valid.
        valid: String,
    },
    /// A component parameter refused by the component's own checks.
    #[error("{0}")]
    Param(String),
    /// Writing an output file.
    #[error("{path}: {why}")]
    Output {
        /// The file.
        path: String,
        /// What failed.
        why: String,
    },
}
