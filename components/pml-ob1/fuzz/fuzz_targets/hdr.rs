//! Fuzz the ob1 header parser: arbitrary bytes never panic, whatever parses re-emits to the
//! same header bytes, and the eager fast path agrees. The body is `rmca_pml_ob1::fuzz::hdr`,
//! which `tests/fuzz.rs` also runs on stable.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| rmca_pml_ob1::fuzz::hdr(data));
