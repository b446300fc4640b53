//! rmca-run: the job launcher and PMI server.
//!
//! The decisions live in two sans-IO state machines, the PMI server
//! ([`rmca_rte::server::PmiServer`]) and the [`monitor::JobMonitor`]; [`launch`] is the I/O
//! around them (processes, sockets, pipes, signals).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod cli;
pub mod launch;
pub mod monitor;
mod poller;
mod sys;
