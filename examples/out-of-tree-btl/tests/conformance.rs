//! The BTL conformance suite against btl-uds, in this process (`cargo test`).

fn subject() -> rmca_btl_conformance::Subject {
    rmca_btl_conformance::Subject::new(&rmca_btl_uds::UDS)
}

rmca_btl_conformance::btl_conformance_tests!(subject());
