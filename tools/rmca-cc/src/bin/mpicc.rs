//! `mpicc`: the usual name of `rmca-cc`, for build systems that look for it.
fn main() {
    std::process::exit(rmca_cc::run(
        rmca_cc::Language::C,
        std::env::args().skip(1).collect(),
    ));
}
