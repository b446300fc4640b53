/* The traffic pattern the simulator's validation reproduces (rmca-sim validate): a pairwise
 * exchange, as a pairwise all-to-all does it. In step k (1..n-1) of each of ITERS rounds,
 * rank r sends SIZE bytes to (r+k)%n and receives SIZE bytes from (r-k+n)%n with
 * MPI_Sendrecv. No barrier or collective: the PML carries only these messages, so its
 * profile counters (acks, fragments, retransmissions) can be compared message for message.
 * usage: pairwise ITERS SIZE */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int me, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc != 3) {
        if (me == 0) fprintf(stderr, "usage: pairwise ITERS SIZE\n");
        MPI_Finalize();
        return 2;
    }
    long iters = atol(argv[1]);
    long size = atol(argv[2]);
    if (iters < 1 || size < 0 || size > (1L << 26)) {
        if (me == 0) fprintf(stderr, "pairwise: ITERS must be >= 1 and SIZE in 0..=67108864\n");
        MPI_Finalize();
        return 2;
    }
    char *out = malloc((size_t)size + 1), *in = malloc((size_t)size + 1);
    memset(out, me & 0xff, (size_t)size + 1);
    double t0 = MPI_Wtime();
    for (long i = 0; i < iters; i++) {
        for (int k = 1; k < n; k++) {
            int to = (me + k) % n, from = (me - k + n) % n;
            MPI_Sendrecv(out, (int)size, MPI_BYTE, to, k, in, (int)size, MPI_BYTE, from, k,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (size > 0 && in[0] != (char)(from & 0xff)) {
                fprintf(stderr, "rank %d: wrong byte from %d\n", me, from);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
    }
    double t = MPI_Wtime() - t0;
    if (me == 0)
        printf("pairwise n=%d iters=%ld size=%ld messages/rank=%ld time_s=%.6f\n", n, iters, size,
               iters * (long)(n - 1), t);
    free(out);
    free(in);
    MPI_Finalize();
    return 0;
}
