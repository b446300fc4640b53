//! `rmca-fort`: compile and link Fortran programs against rmca's MPI library (mpif.h, `use mpi`, `use mpi_f08`).
fn main() {
    std::process::exit(rmca_cc::run(
        rmca_cc::Language::Fortran,
        std::env::args().skip(1).collect(),
    ));
}
