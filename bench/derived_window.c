/* derived_window.c: self_window.c's window loop on a derived datatype, and a loop of user
 * reductions, for counting the instructions of the handle-table lookups on the per-message
 * path (bench/derived-instructions.sh). ROUNDS rounds of one of:
 * - dtype: 64 MPI_Irecv then 64 MPI_Isend to this rank itself of one element of a committed
 *   MPI_Type_contiguous(2, MPI_INT), then MPI_Waitall;
 * - op: 64 MPI_Reduce_local of 2 ints with a user operation (MPI_Op_create).
 *
 *   derived_window [ROUNDS [dtype|op]]   (build: rmca-cc -O2 derived_window.c -o derived_window)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64

static void add(void *in, void *inout, int *len, MPI_Datatype *dt) {
  (void)dt;
  int *a = in, *b = inout;
  for (int i = 0; i < *len; i++) b[i] += a[i];
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 1000;
  int op_loop = argc > 2 && !strcmp(argv[2], "op");
  MPI_Init(&argc, &argv);
  int me;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Datatype pair;
  MPI_Type_contiguous(2, MPI_INT, &pair);
  MPI_Type_commit(&pair);
  MPI_Op op;
  MPI_Op_create(add, 1, &op);
  static int out[WINDOW][2], in[WINDOW][2];
  MPI_Request rq[2 * WINDOW];
  for (int r = 0; r < rounds; r++) {
    if (op_loop) {
      for (int i = 0; i < WINDOW; i++) MPI_Reduce_local(out[i], in[i], 2, MPI_INT, op);
      continue;
    }
    for (int i = 0; i < WINDOW; i++) MPI_Irecv(in[i], 1, pair, me, i, MPI_COMM_WORLD, &rq[i]);
    for (int i = 0; i < WINDOW; i++)
      MPI_Isend(out[i], 1, pair, me, i, MPI_COMM_WORLD, &rq[WINDOW + i]);
    MPI_Waitall(2 * WINDOW, rq, MPI_STATUSES_IGNORE);
  }
  MPI_Op_free(&op);
  MPI_Type_free(&pair);
  MPI_Finalize();
  return 0;
}
