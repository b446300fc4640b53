/* OSU's reduction loop with a user-defined operation: the average latency (us, over the
 * ranks, as osu_allreduce and osu_reduce report it) of MPI_Allreduce and MPI_Reduce (root 0)
 * on floats with an operation of MPI_Op_create, commutative (an elementwise sum) or not
 * (`ordered`: the same sum declared non-commutative, so the library must combine in rank
 * order), beside the predefined MPI_SUM, for bench/coll-userop.sh. Each timed call is
 * followed by a barrier outside the timing, as OSU's loops do.
 *   coll_userop allreduce|reduce user|ordered|sum ITERS MAXBYTES
 * prints "<bytes> <us>" per size from 4 B, doubling. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fsum(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    const float *a = in;
    float *b = inout;
    for (int i = 0; i < *len; i++) b[i] += a[i];
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int me;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (argc != 5) {
        if (me == 0)
            fprintf(stderr, "usage: coll_userop allreduce|reduce user|ordered|sum ITERS MAXBYTES\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int all = strcmp(argv[1], "allreduce") == 0;
    MPI_Op op = MPI_SUM;
    if (strcmp(argv[2], "sum") != 0) MPI_Op_create(fsum, strcmp(argv[2], "ordered") != 0, &op);
    int iters = atoi(argv[3]), skip = iters / 10 + 1, max = atoi(argv[4]);
    float *in = calloc((size_t)max / 4 + 1, 4), *out = calloc((size_t)max / 4 + 1, 4);
    for (int bytes = 4; bytes <= max; bytes *= 2) {
        int n = bytes / 4;
        for (int i = 0; i < n; i++) in[i] = (float)(me + i);
        double t = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < iters + skip; i++) {
            double t0 = MPI_Wtime();
            if (all)
                MPI_Allreduce(in, out, n, MPI_FLOAT, op, MPI_COMM_WORLD);
            else
                MPI_Reduce(in, out, n, MPI_FLOAT, op, 0, MPI_COMM_WORLD);
            double t1 = MPI_Wtime();
            if (i >= skip) t += t1 - t0;
            MPI_Barrier(MPI_COMM_WORLD);
        }
        double avg = t / iters * 1e6, sum = 0;
        int size;
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        MPI_Reduce(&avg, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        if (me == 0) printf("%d %.3f\n", bytes, sum / size);
    }
    if (op != MPI_SUM) MPI_Op_free(&op);
    free(in);
    free(out);
    MPI_Finalize();
    return 0;
}
