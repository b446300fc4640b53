/* A small job run under valgrind's memcheck by tests/tests/valgrind.rs: initialization, a
 * collective, point-to-point with a derived datatype, and finalization, with every buffer
 * checked, so memcheck sees libmpi's common paths and the job's answers are still verified. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int sum = 0;
  MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (sum != size * (size - 1) / 2) {
    printf("rank %d: allreduce gave %d\n", rank, sum);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  /* Every second int of 8, as a vector type, around the ring. */
  MPI_Datatype every_other;
  MPI_Type_vector(4, 1, 2, MPI_INT, &every_other);
  MPI_Type_commit(&every_other);
  int out[8], in[8];
  for (int i = 0; i < 8; i++) {
    out[i] = rank * 100 + i;
    in[i] = -1;
  }
  int to = (rank + 1) % size, from = (rank + size - 1) % size;
  MPI_Sendrecv(out, 1, every_other, to, 7, in, 1, every_other, from, 7, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
  for (int i = 0; i < 8; i++) {
    int want = i % 2 == 0 ? from * 100 + i : -1;
    if (in[i] != want) {
      printf("rank %d: in[%d] = %d, expected %d\n", rank, i, in[i], want);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  MPI_Type_free(&every_other);
  MPI_Finalize();
  printf("ok under_valgrind: rank %d\n", rank);
  return 0;
}
