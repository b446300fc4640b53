//! Fuzz the ob1 header parser: arbitrary bytes never panic, and whatever parses re-emits to
//! the same header bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rmca_pml_ob1::hdr::{Packet, Repr};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = Packet::new_checked(data) else { return };
    let Ok(repr) = Repr::parse(&p) else { return };
    assert_eq!(repr.header_len(), p.header_len());
    let mut out = vec![0u8; repr.header_len()];
    repr.emit(&mut out).expect("a parsed header re-emits");
    // Reserved bytes and unknown flag bits are not preserved; compare the parse of the output.
    let again = Repr::parse(&Packet::new_checked(&out[..]).expect("re-emitted header is valid")).unwrap();
    assert_eq!(again, repr);
});
