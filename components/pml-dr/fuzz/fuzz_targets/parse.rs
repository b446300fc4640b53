//! Every parser on arbitrary bytes: must never panic; what parses must re-emit identically.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rmca_pml_dr::proto::wire::{self, AckPacket, DataPacket, Repr, ACK_LEN, DATA_HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    let _ = wire::peek_type(data);
    if let Ok(p) = DataPacket::new_checked(data) {
        let _ = p.payload();
    }
    let _ = AckPacket::new_checked(data);
    match wire::parse(data) {
        Ok(Repr::Data(r)) => {
            let mut h = [0u8; DATA_HEADER_LEN];
            r.emit(&mut h);
            assert_eq!(&h[..], &data[..DATA_HEADER_LEN]);
        }
        Ok(Repr::Ack(r)) => assert_eq!(&r.to_bytes()[..], &data[..ACK_LEN]),
        Err(_) => {}
    }
});
