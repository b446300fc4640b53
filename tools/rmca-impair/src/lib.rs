//! rmca-impair: a user-space impaired-link emulator between network namespaces, for kernels
//! without netem. Each node (namespace) has a TUN device; the emulator reads the IP packets a
//! node sends, routes them by destination to the other node's TUN device, and applies, per
//! direction and from a seed: loss (independent or bursty Gilbert-Elliott), duplication,
//! reordering, corruption that reaches the application, delay with jitter, a rate limit with
//! a tail-dropping queue, and an MTU.
//!
//! The decisions are a sans-IO state machine ([`model::Direction`], explicit time, seeded
//! generator) inside a sans-IO switch ([`switch::Switch`]); `sys` is the kernel edge.
#![deny(unsafe_code)]

pub mod model;
pub mod packet;
pub mod rng;
pub mod spec;
pub mod switch;
pub mod sys;
