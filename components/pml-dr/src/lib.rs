//! pml-dr: the data-reliability PML: acknowledged virtual fragments, checksums, retransmission
//! and BTL failover.
//!
//! The protocol core lives in [`proto`]: a sans-IO, explicit-time state machine per peer
//! ([`proto::Connection`]) plus the wire format ([`proto::wire`]). The PML glue that binds it
//! to the framework's BTLs and matching engine drives it from the progress loop.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod proto;
