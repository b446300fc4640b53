/* OSU's windowed pattern (osu_bw: 64 MPI_Isend + MPI_Waitall with statuses against 64
 * pre-posted MPI_Irecv + MPI_Waitall with statuses, then a 4-byte reply; osu_bibw: both
 * ranks do both), for counting the instructions of the window's MPI calls with callgrind
 * (bench/osu-instructions.sh; run with --collect-atstart=no: collection is toggled here
 * around those calls only, after WARM uncounted rounds). The two ranks hand over through a
 * flag file outside MPI, so that what is counted does not depend on timing: the receiver's
 * Irecvs are all posted before the first send, and the whole window has been sent before the
 * receiver's Waitall. An MPI whose sends cannot complete before the receiver progresses makes
 * its peer wait out a timeout: the run says so on stderr ("late"), its counts then include
 * the waiting.
 * STYLE says how both windows are completed: waitall (OSU's: MPI_Waitall with statuses),
 * testall, waitsome, waitany, wait, test (each request in turn), testsome, testany (each
 * polled until it answers), each with statuses or, with
 * "-ignore" appended (waitall-ignore, ...), with MPI_STATUS(ES)_IGNORE.
 *   osu_window ROUNDS SIZE FLAGFILE [bw|bibw] [STYLE]   (FLAGFILE: 4096 zero bytes) */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <valgrind/callgrind.h>

enum { W = 64, WARM = 5 };
static volatile int *flags; /* [0]: rank 0's step, [1]: rank 1's step */

static void set_step(int rank, int v) { __atomic_store_n(&flags[rank], v, __ATOMIC_RELEASE); }
/* Wait for the peer's step, at most 2 s: an MPI whose sends wait for the receiver's
 * progress cannot finish a window alone. After one such timeout the run stops waiting (its
 * counts include spinning in any case) and says so at the end. */
static int late;
static void await_step(int rank, int v) {
  struct timespec t = {0, 100000};
  for (int n = 0; !late && __atomic_load_n(&flags[rank], __ATOMIC_ACQUIRE) < v; n++) {
    if (n == 20000) {
      late = 1;
      return;
    }
    nanosleep(&t, NULL);
  }
}

enum Style { WAITALL, TESTALL, WAITSOME, WAITANY, WAIT, TEST, TESTSOME, TESTANY, NSTYLES };
static const char *const style_names[NSTYLES] = {"waitall", "testall",  "waitsome", "waitany",
                                                 "wait",    "test",     "testsome", "testany"};

/* Complete the W requests of `req` in style `style`, statuses into `st` unless `ignore`. */
static void complete(MPI_Request *req, MPI_Status *st, int style, int ignore) {
  MPI_Status *sts = ignore ? MPI_STATUSES_IGNORE : st;
  int flag = 0, done = 0, n, idx[W];
  switch (style) {
  case WAITALL: MPI_Waitall(W, req, sts); break;
  case TESTALL:
    while (!flag) MPI_Testall(W, req, &flag, sts);
    break;
  case WAITSOME:
    for (; done < W; done += n) MPI_Waitsome(W, req, &n, idx, sts);
    break;
  case WAITANY:
    for (int j = 0; j < W; j++) MPI_Waitany(W, req, &n, ignore ? MPI_STATUS_IGNORE : &st[j]);
    break;
  case TESTSOME:
    for (; done < W; done += n) MPI_Testsome(W, req, &n, idx, sts);
    break;
  case TESTANY:
    for (int j = 0; j < W; j++)
      for (flag = 0; !flag;) MPI_Testany(W, req, &n, &flag, ignore ? MPI_STATUS_IGNORE : &st[j]);
    break;
  case WAIT:
    for (int j = 0; j < W; j++) MPI_Wait(&req[j], ignore ? MPI_STATUS_IGNORE : &st[j]);
    break;
  case TEST:
    for (int j = 0; j < W; j++)
      for (flag = 0; !flag;) MPI_Test(&req[j], &flag, ignore ? MPI_STATUS_IGNORE : &st[j]);
    break;
  }
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: osu_window ROUNDS SIZE FLAGFILE [bw|bibw] [STYLE]\n");
    return 2;
  }
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int rounds = atoi(argv[1]), size = atoi(argv[2]);
  if (rounds < 1 || size < 0 || (argc > 4 && strcmp(argv[4], "bw") && strcmp(argv[4], "bibw"))) {
    fprintf(stderr, "osu_window: ROUNDS >= 1, SIZE >= 0, mode bw or bibw (got %s %s %s)\n", argv[1],
            argv[2], argc > 4 ? argv[4] : "bw");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int bibw = argc > 4 && strcmp(argv[4], "bibw") == 0;
  int style = -1, ignore = 0;
  const char *sname = argc > 5 ? argv[5] : "waitall";
  size_t sl = strlen(sname);
  if (sl > 7 && strcmp(sname + sl - 7, "-ignore") == 0) {
    ignore = 1;
    sl -= 7;
  }
  for (int k = 0; k < NSTYLES; k++)
    if (strlen(style_names[k]) == sl && strncmp(sname, style_names[k], sl) == 0) style = k;
  if (style < 0) {
    fprintf(stderr,
            "osu_window: STYLE is waitall, testall, waitsome, waitany, wait, test, testsome or "
            "testany, optionally "
            "with -ignore (got %s)\n",
            sname);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int fd = open(argv[3], O_RDWR);
  if (fd < 0) { perror(argv[3]); MPI_Abort(MPI_COMM_WORLD, 2); }
  flags = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (flags == MAP_FAILED) { perror("mmap"); MPI_Abort(MPI_COMM_WORLD, 2); }
  char *s = calloc(size + 4, 1), *r = calloc(size + 4, 1);
  MPI_Request sreq[W], rreq[W];
  MPI_Status sst[W], rst[W];
  int peer = 1 - rank, step = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < WARM + rounds; i++) {
    int on = i >= WARM;
    int recv = bibw || rank == 1, send = bibw || rank == 0;
    /* 1: receives posted (both ranks wait for the peer's) */
    if (on) CALLGRIND_TOGGLE_COLLECT;
    if (recv) for (int j = 0; j < W; j++) MPI_Irecv(r, size, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &rreq[j]);
    if (on) CALLGRIND_TOGGLE_COLLECT;
    set_step(rank, ++step);
    await_step(peer, step);
    /* 2: window sent */
    if (on) CALLGRIND_TOGGLE_COLLECT;
    if (send) {
      for (int j = 0; j < W; j++) MPI_Isend(s, size, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &sreq[j]);
      complete(sreq, sst, style, ignore);
    }
    if (on) CALLGRIND_TOGGLE_COLLECT;
    set_step(rank, ++step);
    await_step(peer, step);
    /* 3: window received, reply */
    if (on) CALLGRIND_TOGGLE_COLLECT;
    if (recv) complete(rreq, rst, style, ignore);
    if (on) CALLGRIND_TOGGLE_COLLECT;
    if (rank == 1) MPI_Send(s, 4, MPI_CHAR, 0, 101, MPI_COMM_WORLD);
    else MPI_Recv(r, 4, MPI_CHAR, 1, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  if (late) fprintf(stderr, "rank %d: late: a step timed out (counts include waiting)\n", rank);
  MPI_Finalize();
  return 0;
}
