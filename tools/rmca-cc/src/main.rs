//! `rmca-cc`: compile and link C programs against rmca's MPI library.
fn main() {
    std::process::exit(rmca_cc::run(
        rmca_cc::Language::C,
        std::env::args().skip(1).collect(),
    ));
}
