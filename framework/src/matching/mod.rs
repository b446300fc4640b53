//! MPI matching engine (sans-IO), shared by pml-ob1 and pml-dr.
