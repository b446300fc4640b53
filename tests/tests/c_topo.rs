//! Process topologies and neighbourhood collectives through the C interface
//! (`tests/c/topo.c`): `MPI_Dims_create`, Cartesian grids (shifts, coordinates, sub-grids,
//! fewer ranks than the communicator), graphs and distributed graphs (both constructors,
//! weights), `MPI_Topo_test`, the topology kept by `MPI_Comm_dup`; every neighbourhood
//! collective (blocking, non-blocking, persistent, `_c`) on each kind of topology, and bad
//! input (`MPI_ERR_TOPOLOGY`, `MPI_ERR_DIMS`, `MPI_ERR_RANK`, `MPI_ERR_ARG`), at 1, 2 and 3
//! ranks in every configuration.

use rmca_tests::c::every_config;

#[test]
fn topologies_and_neighbourhood_collectives() {
    every_config("topo");
}
