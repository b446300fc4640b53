/* The C twin of proc_null_loop.f90: N times MPI_Send to and MPI_Recv from MPI_PROC_NULL in
 * rmca_c_loop, the function callgrind counts (bench/fortran/instructions.sh). */
#include <mpi.h>
#include <stdlib.h>
__attribute__((noinline)) void rmca_c_loop(int n)
{
    long buf = 0;
    for (int i = 0; i < n; i++) {
        MPI_Send(&buf, 8, MPI_BYTE, MPI_PROC_NULL, 1, MPI_COMM_WORLD);
        MPI_Recv(&buf, 8, MPI_BYTE, MPI_PROC_NULL, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
}
int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    MPI_Init(&argc, &argv);
    rmca_c_loop(n);
    MPI_Finalize();
    return 0;
}
