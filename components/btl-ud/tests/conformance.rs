//! The BTL conformance suite (`rmca-btl-conformance`) against btl-ud: the contract every
//! BTL keeps, checked the same way as for out-of-tree plugins.

fn subject() -> rmca_btl_conformance::Subject {
    rmca_btl_conformance::Subject::new(&rmca_btl_ud::UD)
}

rmca_btl_conformance::btl_conformance_tests!(subject());
