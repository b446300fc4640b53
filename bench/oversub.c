/* Oversubscribed jobs (more ranks than cores): the time per operation of an 8-byte ping-pong
 * between ranks 0 and 1 while the others wait in MPI_Barrier (osu_latency's shape), MPI_Barrier,
 * an 8-byte MPI_Allreduce, and a halo exchange (each rank trades 1 KiB with both neighbours
 * of a periodic ring: two MPI_Irecv, two MPI_Isend, MPI_Waitall). Builds with any MPI, so
 * the peers run the same loops (bench/oversub.sh runs them alternating):
 *   target/release/mpicc -O2 bench/oversub.c -o /tmp/oversub && target/release/rmca-run -n 4 /tmp/oversub
 * Prints one line per benchmark: its name and the mean microseconds per operation (the
 * ping-pong: half a round trip), averaged over the ranks (OSU's avg).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define HALO 1024

static void report(const char *name, double us_per_op, int rank, int size) {
    double sum = 0;
    MPI_Reduce(&us_per_op, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("%-10s %10.2f us\n", name, sum / size);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int iters = argc > 1 ? atoi(argv[1]) : 1000;
    if (iters < 1 || iters > 10000000 || size < 2) {
        if (rank == 0) fprintf(stderr, "oversub: usage: oversub [iterations >= 1], at least 2 ranks\n");
        MPI_Finalize();
        return 2;
    }
    int warm = iters / 10 + 1;
    char b8[8] = {0};
    double t0 = 0;

    /* Latency: ranks 0 and 1 only; the others wait in the barrier that follows. */
    for (int i = 0; i < warm + iters; i++) {
        if (i == warm) t0 = MPI_Wtime();
        if (rank == 0) {
            MPI_Send(b8, 8, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(b8, 8, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(b8, 8, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(b8, 8, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
        }
    }
    double lat = (MPI_Wtime() - t0) * 1e6 / iters / 2;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("%-10s %10.2f us\n", "latency", lat);

    for (int i = 0; i < warm + iters; i++) {
        if (i == warm) t0 = MPI_Wtime();
        MPI_Barrier(MPI_COMM_WORLD);
    }
    report("barrier", (MPI_Wtime() - t0) * 1e6 / iters, rank, size);

    double x = rank, y = 0;
    for (int i = 0; i < warm + iters; i++) {
        if (i == warm) t0 = MPI_Wtime();
        MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    if (y != (double)size * (size - 1) / 2) {
        fprintf(stderr, "oversub: allreduce gave %g on rank %d\n", y, rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    report("allreduce", (MPI_Wtime() - t0) * 1e6 / iters, rank, size);

    static char out[2][HALO], in[2][HALO];
    int left = (rank + size - 1) % size, right = (rank + 1) % size;
    for (int i = 0; i < warm + iters; i++) {
        if (i == warm) t0 = MPI_Wtime();
        MPI_Request r[4];
        MPI_Irecv(in[0], HALO, MPI_CHAR, left, 1, MPI_COMM_WORLD, &r[0]);
        MPI_Irecv(in[1], HALO, MPI_CHAR, right, 2, MPI_COMM_WORLD, &r[1]);
        MPI_Isend(out[0], HALO, MPI_CHAR, right, 1, MPI_COMM_WORLD, &r[2]);
        MPI_Isend(out[1], HALO, MPI_CHAR, left, 2, MPI_COMM_WORLD, &r[3]);
        MPI_Waitall(4, r, MPI_STATUSES_IGNORE);
    }
    report("halo", (MPI_Wtime() - t0) * 1e6 / iters, rank, size);
    MPI_Finalize();
    return 0;
}
