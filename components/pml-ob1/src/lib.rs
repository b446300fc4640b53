//! pml-ob1: the default PML: MPI matching and ordering, eager and rendezvous protocols.
