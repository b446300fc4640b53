//! Body of the `hdr` fuzz target, shared by the cargo-fuzz target in `fuzz/` (nightly,
//! coverage-guided) and the bounded stable runner `tests/fuzz.rs` that the test script runs.

use crate::hdr::{parse_match, Packet, Repr};

/// The `hdr` target: arbitrary bytes never panic the header parser, whatever parses re-emits
/// to the same header, and the eager fast path [`parse_match`] agrees with the full parser.
pub fn hdr(data: &[u8]) {
    let fast = parse_match(data);
    let Ok(p) = Packet::new_checked(data) else {
        assert!(
            fast.is_none(),
            "parse_match accepted what new_checked refuses"
        );
        return;
    };
    let Ok(repr) = Repr::parse(&p) else {
        assert!(
            fast.is_none(),
            "parse_match accepted what Repr::parse refuses"
        );
        return;
    };
    if let Some((m, payload)) = fast {
        assert_eq!(
            repr,
            Repr::Match(m),
            "parse_match disagrees with Repr::parse"
        );
        assert_eq!(payload, p.payload());
    }
    assert_eq!(repr.header_len(), p.header_len());
    let mut out = vec![0u8; repr.header_len()];
    repr.emit(&mut out).expect("a parsed header re-emits");
    // Reserved bytes and unknown flag bits are not preserved; compare the parse of the output.
    let again = Repr::parse(&Packet::new_checked(&out[..]).expect("re-emitted header is valid"))
        .expect("a re-emitted header parses");
    assert_eq!(again, repr);
}
