//! Every parser on arbitrary bytes: must never panic; what parses must re-emit identically.
//! The body is `rmca_pml_dr::fuzz::parse`, which `tests/fuzz.rs` also runs on stable.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| rmca_pml_dr::fuzz::parse(data));
