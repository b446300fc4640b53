/* Rounds of one small collective call, for bench/coll-instructions.sh: the C library's own
 * cost per MPI_Allreduce / MPI_Reduce / MPI_Bcast of one double (MPI_SUM), and per
 * MPI_Allgather(v) / MPI_Alltoall(v) / MPI_Reduce_scatter(_block) / MPI_Gather / MPI_Scatter
 * of one double per rank (the v-forms with counts of 1 at displacements 0, 1, ..., as OSU's
 * loops pass them; rank 0 the root); `uallreduce` and `ureduce` reduce one double with a
 * commutative user operation (MPI_Op_create) instead of MPI_SUM, `rsblock0` is
 * MPI_Reduce_scatter_block with a count of 0 (OSU's at 1 B).
 *   coll_calls ROUNDS allreduce|inplace|reduce|bcast|allgather|allgatherv|alltoall|alltoallv|
 *              rsblock|rscatter|gather|scatter|uallreduce|ureduce|rsblock0 [barrier]
 * With `barrier`, an MPI_Barrier separates the calls (OSU's loops do so), so that at two
 * ranks a reduce's leaf and a broadcast's root never wait in the call counted. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The user operation: a sum of doubles. */
static void dsum(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    for (int i = 0; i < *len; i++) ((double *)inout)[i] += ((const double *)in)[i];
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    if (argc != 3 && !(argc == 4 && !strcmp(argv[3], "barrier"))) {
        fprintf(stderr, "usage: coll_calls ROUNDS allreduce|inplace|reduce|bcast|allgather|allgatherv|alltoall|alltoallv|rsblock|rscatter|gather|scatter|uallreduce|ureduce|rsblock0 [barrier]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int rounds = atoi(argv[1]);
    const char *call = argv[2];
    int sync = argc == 4;
    double a = 1.0, b = 0.0;
    int n;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    double *in = calloc(n, sizeof(double)), *out = calloc(n, sizeof(double));
    int *counts = malloc(n * sizeof(int)), *displs = malloc(n * sizeof(int));
    for (int r = 0; r < n; r++) {
        counts[r] = 1;
        displs[r] = r;
    }
    MPI_Op uop;
    MPI_Op_create(dsum, 1, &uop);
    for (int i = 0; i < rounds; i++) {
        if (sync)
            MPI_Barrier(MPI_COMM_WORLD);
        if (!strcmp(call, "allreduce"))
            MPI_Allreduce(&a, &b, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        else if (!strcmp(call, "inplace"))
            MPI_Allreduce(MPI_IN_PLACE, &b, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        else if (!strcmp(call, "reduce"))
            MPI_Reduce(&a, &b, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        else if (!strcmp(call, "allgather"))
            MPI_Allgather(&a, 1, MPI_DOUBLE, out, 1, MPI_DOUBLE, MPI_COMM_WORLD);
        else if (!strcmp(call, "allgatherv"))
            MPI_Allgatherv(&a, 1, MPI_DOUBLE, out, counts, displs, MPI_DOUBLE, MPI_COMM_WORLD);
        else if (!strcmp(call, "alltoall"))
            MPI_Alltoall(in, 1, MPI_DOUBLE, out, 1, MPI_DOUBLE, MPI_COMM_WORLD);
        else if (!strcmp(call, "alltoallv"))
            MPI_Alltoallv(in, counts, displs, MPI_DOUBLE, out, counts, displs, MPI_DOUBLE,
                          MPI_COMM_WORLD);
        else if (!strcmp(call, "uallreduce"))
            MPI_Allreduce(&a, &b, 1, MPI_DOUBLE, uop, MPI_COMM_WORLD);
        else if (!strcmp(call, "ureduce"))
            MPI_Reduce(&a, &b, 1, MPI_DOUBLE, uop, 0, MPI_COMM_WORLD);
        else if (!strcmp(call, "rsblock0"))
            MPI_Reduce_scatter_block(in, &b, 0, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        else if (!strcmp(call, "rsblock"))
            MPI_Reduce_scatter_block(in, &b, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        else if (!strcmp(call, "rscatter"))
            MPI_Reduce_scatter(in, &b, counts, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        else if (!strcmp(call, "gather"))
            MPI_Gather(&a, 1, MPI_DOUBLE, out, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        else if (!strcmp(call, "scatter"))
            MPI_Scatter(in, 1, MPI_DOUBLE, &b, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        else
            MPI_Bcast(&a, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    }
    MPI_Op_free(&uop);
    free(in);
    free(out);
    free(counts);
    free(displs);
    MPI_Finalize();
    return b < 0;
}
