//! `rmca-cxx`: `rmca-cc` for C++ compilers and C++ links.
fn main() {
    std::process::exit(rmca_cc::run(
        rmca_cc::Language::Cxx,
        std::env::args().skip(1).collect(),
    ));
}
