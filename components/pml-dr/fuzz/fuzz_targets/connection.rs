//! A connection fed arbitrary packets (length-prefixed chunks of the input), with timers,
//! transmissions and placements in between: must never panic. The body is
//! `rmca_pml_dr::fuzz::connection`, which `tests/fuzz.rs` also runs on stable.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| rmca_pml_dr::fuzz::connection(data));
