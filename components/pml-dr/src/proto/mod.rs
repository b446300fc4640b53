//! The sans-IO DR protocol core: wire format, per-peer connection state machine, timers.
//!
//! Nothing here performs I/O or reads a clock: the caller passes `now` into every call, sends
//! what [`Connection::poll_transmit`] returns, feeds received bytes to
//! [`Connection::handle_packet`], and calls [`Connection::handle_timeout`] when
//! [`Connection::poll_timeout`] says so.

mod config;
mod connection;
mod counters;
pub mod e2e;
pub mod ranges;
pub mod rtt;
mod sorted_map;
pub mod wire;

pub use config::{AckBundle, AckPolicy, Config, ConfigError, Csum, PathConfig, RtoPolicy};
pub use connection::{
    Arrival, BtlFailReason, Connection, DataTransmit, DeathReason, Event, MsgSeq, PlaceError,
    PlaceToken, SealError, SendError, Transmit, TxToken,
};
pub use counters::Counters;
pub use wire::MatchFields;
