/* self_window.c: the C twin of rmca/examples/self_window.rs, for bench/instructions.sh.
 * ROUNDS rounds of one of two loops of 8-byte messages a rank sends itself:
 * - window (the default): 64 receives posted (MPI_Irecv), 64 sends (MPI_Isend), then
 *   MPI_Waitall with MPI_STATUSES_IGNORE: osu_like.c's msgrate loop without a second process;
 * - blocking: 64 times MPI_Send then MPI_Recv: the calls of its latency loop.
 * So that the C layer's cost per message can be counted against the Rust API's (same PML
 * path, same BTL) by an instruction counter.
 *
 *   self_window [ROUNDS [window|blocking]]   (build: rmca-cc -O2 self_window.c -o self_window)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64

int main(int argc, char **argv) {
  long windows = argc > 1 ? atol(argv[1]) : 1000;
  int blocking = argc > 2 && !strcmp(argv[2], "blocking");
  if (argc > 2 && !blocking && strcmp(argv[2], "window")) {
    fprintf(stderr, "self_window: unknown loop %s: window or blocking\n", argv[2]);
    return 2;
  }
  MPI_Init(&argc, &argv);
  int me;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  char out[8] = {7, 7, 7, 7, 7, 7, 7, 7};
  static char inbox[8 * WINDOW];
  MPI_Request requests[2 * WINDOW];
  for (long w = 0; w < windows && blocking; w++) {
    for (int i = 0; i < WINDOW; i++) {
      MPI_Send(out, 8, MPI_BYTE, me, 2, MPI_COMM_WORLD);
      MPI_Recv(inbox + 8 * i, 8, MPI_BYTE, me, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
  }
  for (long w = 0; w < windows && !blocking; w++) {
    for (int i = 0; i < WINDOW; i++)
      MPI_Irecv(inbox + 8 * i, 8, MPI_BYTE, me, 2, MPI_COMM_WORLD, &requests[i]);
    for (int i = 0; i < WINDOW; i++)
      MPI_Isend(out, 8, MPI_BYTE, me, 2, MPI_COMM_WORLD, &requests[WINDOW + i]);
    MPI_Waitall(2 * WINDOW, requests, MPI_STATUSES_IGNORE);
  }
  for (int i = 0; i < 8 * WINDOW; i++) {
    if (inbox[i] != 7) {
      fprintf(stderr, "self_window: message %d did not arrive\n", i / 8);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  MPI_Finalize();
  return 0;
}
