/* 8-byte ping-pong between ranks 0 and 1 (blocking MPI_Send/MPI_Recv, MPI_STATUS_IGNORE):
 * the one-way latency in microseconds, then one MPI_Send to MPI_PROC_NULL in nanoseconds.
 * The C twin of pingpong.f90. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    enum { WARMUP = 2000, ITERS = 50000, CALLS = 1000000 };
    int64_t buf = 0;
    int rank;
    double t0 = 0, t1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int i = 1; i <= WARMUP + ITERS; i++) {
        if (i == WARMUP + 1) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
        }
        if (rank == 0) {
            MPI_Send(&buf, 8, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(&buf, 8, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(&buf, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(&buf, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
    }
    t1 = MPI_Wtime();
    if (rank == 0) {
        /* The call's own cost: a send to MPI_PROC_NULL moves nothing. */
        for (int i = 0; i < CALLS; i++)
            MPI_Send(&buf, 8, MPI_BYTE, MPI_PROC_NULL, 1, MPI_COMM_WORLD);
        double t2 = MPI_Wtime();
        printf("c 8B latency us: %8.3f proc_null send ns: %8.2f\n",
               (t1 - t0) * 1e6 / (2.0 * ITERS), (t2 - t1) * 1e9 / CALLS);
    }
    MPI_Finalize();
    return 0;
}
