/* self_window.c: the C twin of rmca/examples/self_window.rs, for bench/instructions.sh.
 * ROUNDS rounds of one of two loops of 8-byte messages a rank sends itself:
 * - window (the default): 64 receives posted (MPI_Irecv), 64 sends (MPI_Isend), then
 *   MPI_Waitall with MPI_STATUSES_IGNORE: osu_like.c's msgrate loop without a second process;
 * - blocking: 64 times MPI_Send then MPI_Recv: the calls of its latency loop;
 * - the window loop completed by other calls, with statuses (C only): statuses (MPI_Waitall
 *   with an array of statuses: OSU's osu_bw/osu_bibw/osu_mbw_mr), testall (MPI_Testall until
 *   done), waitsome, waitany (until all are done), test (MPI_Test on each in turn).
 * So that the C layer's cost per message can be counted against the Rust API's (same PML
 * path, same BTL) by an instruction counter.
 *
 *   self_window [ROUNDS [window|blocking|statuses|testall|waitsome|waitany|test]]
 *   (build: rmca-cc -O2 self_window.c -o self_window)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64

static const char *loops[] = {"window", "blocking", "statuses", "testall", "waitsome",
                               "waitany", "test"};

/* Complete the 2 * WINDOW requests of a window as loop `how` does. */
static void complete(int how, MPI_Request *requests) {
  static MPI_Status statuses[2 * WINDOW];
  int indices[2 * WINDOW], flag = 0, n = 0, left = 2 * WINDOW;
  switch (how) {
  case 0:
    MPI_Waitall(2 * WINDOW, requests, MPI_STATUSES_IGNORE);
    break;
  case 2:
    MPI_Waitall(2 * WINDOW, requests, statuses);
    break;
  case 3:
    while (!flag) MPI_Testall(2 * WINDOW, requests, &flag, statuses);
    break;
  case 4:
    for (; left > 0; left -= n) MPI_Waitsome(2 * WINDOW, requests, &n, indices, statuses);
    break;
  case 5:
    for (; left > 0; left--) MPI_Waitany(2 * WINDOW, requests, &n, statuses);
    break;
  case 6:
    for (int i = 0; i < 2 * WINDOW; i++)
      for (flag = 0; !flag;) MPI_Test(&requests[i], &flag, statuses);
    break;
  }
}

int main(int argc, char **argv) {
  long windows = argc > 1 ? atol(argv[1]) : 1000;
  int how = 0;
  if (argc > 2) {
    for (how = 0; how < 7 && strcmp(argv[2], loops[how]); how++) {
    }
    if (how == 7) {
      fprintf(stderr, "self_window: unknown loop %s: window, blocking, statuses, testall, "
                      "waitsome, waitany or test\n", argv[2]);
      return 2;
    }
  }
  int blocking = how == 1;
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
    complete(how, requests);
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
