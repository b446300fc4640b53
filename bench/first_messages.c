/* First round trips of a job against its thousandth: 2 ranks, 8-byte ping-pong, each round
 * trip timed on its own. Prints the first ten, the median of the first ten and of round
 * trips 990..1009, and their ratio. Builds with any MPI (mpicc, mpicc.openmpi, mpicc.mpich),
 * so peers run the same program:
 *   target/release/mpicc -O2 bench/first_messages.c -o /tmp/first && target/release/rmca-run -n 2 /tmp/first
 * Nothing runs before the first round trip but MPI_Init and, on rank 0, a sleep of
 * argv[1] milliseconds (default 100): ranks leave MPI_Init at different times, and without it
 * the first round trip would time rank 1's start-up rather than the cost of a first message
 * (0 measures that skew too).
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>

#define N 1010

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n) {
    double t[64];
    for (int i = 0; i < n; i++) t[i] = v[i];
    qsort(t, (size_t)n, sizeof t[0], cmp);
    return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "first_messages: run with 2 ranks (got %d)\n", size);
        MPI_Finalize();
        return 2;
    }
    long settle_ms = argc > 1 ? atol(argv[1]) : 100;
    if (settle_ms < 0 || settle_ms > 10000) {
        if (rank == 0) fprintf(stderr, "first_messages: settle time %ld ms: give 0..10000\n", settle_ms);
        MPI_Finalize();
        return 2;
    }
    if (rank == 0 && settle_ms > 0) {
        struct timespec ts = {settle_ms / 1000, (settle_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    static double rtt[N];
    char buf[8] = {0};
    for (int i = 0; i < N; i++) {
        if (rank == 0) {
            double t0 = MPI_Wtime();
            MPI_Send(buf, 8, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(buf, 8, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            rtt[i] = (MPI_Wtime() - t0) * 1e6;
        } else {
            MPI_Recv(buf, 8, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, 8, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
        }
    }
    if (rank == 0) {
        printf("first ten round trips (us):");
        for (int i = 0; i < 10; i++) printf(" %.2f", rtt[i]);
        double first = median(rtt, 10), steady = median(rtt + 990, 20);
        printf("\nmedian first ten %.2f us, round trips 990-1009 %.2f us, ratio %.2f\n", first,
               steady, first / steady);
        printf("first round trip %.2f us, ratio %.2f\n", rtt[0], rtt[0] / steady);
    }
    MPI_Finalize();
    return 0;
}
