//! `mpif90`: the older name of `rmca-fort`.
fn main() {
    std::process::exit(rmca_cc::run(
        rmca_cc::Language::Fortran,
        std::env::args().skip(1).collect(),
    ));
}
