/* A put of 1 MiB under fence in runs of B bytes (a vector type, stride 2B) on an
 * MPI_Win_create window, B from 8 B to 1 MiB: rank 0 prints the median of 15 epochs per B
 * (us). Run at 2 ranks with `--mca osc_rdma_min_run 0` (every run an RDMA transfer) and with
 * a large value (one message per put), alternating, to see where the two paths meet
 * (osc-rdma's MIN_RUN). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

enum { EPOCHS = 15 };

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const int total = 1 << 20;
    char *mem = calloc(2 * (size_t)total, 1), *src = calloc(total, 1);
    if (!mem || !src) MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Win win;
    MPI_Win_create(mem, 2 * (MPI_Aint)total, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    for (int b = 8; b <= total; b *= 2) {
        MPI_Datatype runs;
        MPI_Type_vector(total / b, b, 2 * b, MPI_BYTE, &runs);
        MPI_Type_commit(&runs);
        double t[EPOCHS];
        for (int e = 0; e < EPOCHS; e++) {
            MPI_Win_fence(0, win);
            double t0 = MPI_Wtime();
            if (rank == 0) MPI_Put(src, total, MPI_BYTE, 1, 0, 1, runs, win);
            MPI_Win_fence(0, win);
            t[e] = MPI_Wtime() - t0;
        }
        qsort(t, EPOCHS, sizeof t[0], by_value);
        if (rank == 0) printf("run %7d B  put %9.1f us\n", b, t[EPOCHS / 2] * 1e6);
        MPI_Type_free(&runs);
    }
    MPI_Win_free(&win);
    free(mem);
    free(src);
    MPI_Finalize();
    return 0;
}
