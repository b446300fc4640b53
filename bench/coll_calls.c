/* Rounds of one small collective call, for bench/coll-instructions.sh: the C library's own
 * cost per MPI_Allreduce / MPI_Reduce / MPI_Bcast of one double (MPI_SUM).
 *   coll_calls ROUNDS allreduce|inplace|reduce|bcast [barrier]
 * With `barrier`, an MPI_Barrier separates the calls (OSU's loops do so), so that at two
 * ranks a reduce's leaf and a broadcast's root never wait in the call counted. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    if (argc != 3 && !(argc == 4 && !strcmp(argv[3], "barrier"))) {
        fprintf(stderr, "usage: coll_calls ROUNDS allreduce|inplace|reduce|bcast [barrier]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int rounds = atoi(argv[1]);
    const char *call = argv[2];
    int sync = argc == 4;
    double a = 1.0, b = 0.0;
    for (int i = 0; i < rounds; i++) {
        if (sync)
            MPI_Barrier(MPI_COMM_WORLD);
        if (!strcmp(call, "allreduce"))
            MPI_Allreduce(&a, &b, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        else if (!strcmp(call, "inplace"))
            MPI_Allreduce(MPI_IN_PLACE, &b, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        else if (!strcmp(call, "reduce"))
            MPI_Reduce(&a, &b, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        else
            MPI_Bcast(&a, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    }
    MPI_Finalize();
    return b < 0;
}
