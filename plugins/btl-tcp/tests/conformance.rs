//! The BTL conformance suite (`rmca-btl-conformance`) against btl-tcp, over loopback.

fn subject() -> rmca_btl_conformance::Subject {
    rmca_btl_conformance::Subject::new(&rmca_btl_tcp::TCP)
}

rmca_btl_conformance::btl_conformance_tests!(subject());
