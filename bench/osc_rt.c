/* Round trips of one-sided operations on an MPI_Win_create window against a point-to-point
 * round trip in the same job (bench/RESULTS.md, "osc-am and osc-rdma round trips"). Rank 0 times
 * each iteration; p10/median/p90 (us) of N iterations (argv[1], default 5000); argv[2] picks
 * one loop by name (fop, cas, put8, get8, acc8, getacc8, pass, split). TGT_IPROBE=1: the
 * target waits in an MPI_Iprobe loop instead of MPI_Barrier. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
static int tgt_iprobe;
static void sync_ranks(int rank) {
  if (!tgt_iprobe) { MPI_Barrier(MPI_COMM_WORLD); return; }
  char c = 0; int flag = 0;
  if (rank == 0) MPI_Send(&c, 1, MPI_CHAR, 1, 99, MPI_COMM_WORLD);
  else { while (!flag) MPI_Iprobe(0, 99, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE); MPI_Recv(&c, 1, MPI_CHAR, 0, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
}
static void report(const char *name, double *t, int n) {
  qsort(t, n, sizeof *t, cmp);
  printf("%-22s p10 %8.2f  median %8.2f  p90 %8.2f us\n", name, t[n / 10] * 1e6, t[n / 2] * 1e6, t[n * 9 / 10] * 1e6);
}
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank; MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  tgt_iprobe = getenv("TGT_IPROBE") != NULL;
  int n = argc > 1 ? atoi(argv[1]) : 5000;
  const char *which = argc > 2 ? argv[2] : "all";
  double *t = malloc(sizeof(double) * n);
  long long *mem = calloc(1024, 8), one = 1, res = 0, cmpv = 0;
  char sbuf[64] = {0}, rbuf[64];
  MPI_Win win;
  MPI_Win_create(mem, 8192, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
  /* pt2pt */
  for (int i = 0; i < n; i++) {
    double t0 = MPI_Wtime();
    if (rank == 0) { MPI_Send(sbuf, 8, MPI_CHAR, 1, 0, MPI_COMM_WORLD); MPI_Recv(rbuf, 8, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
    else { MPI_Recv(rbuf, 8, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); MPI_Send(sbuf, 8, MPI_CHAR, 0, 0, MPI_COMM_WORLD); }
    t[i] = MPI_Wtime() - t0;
  }
  if (rank == 0) report("pt2pt 8B roundtrip", t, n);
  MPI_Barrier(MPI_COMM_WORLD);
#define FLUSHLOOP(name, body) \
  if (!strcmp(which, "all") || strstr(name, which)) { if (rank == 0) { MPI_Win_lock_all(0, win); \
    for (int i = 0; i < n; i++) { double t0 = MPI_Wtime(); body; MPI_Win_flush(1, win); t[i] = MPI_Wtime() - t0; } \
    MPI_Win_unlock_all(win); report(name " flush", t, n); } sync_ranks(rank); }
#define LOCKLOOP(name, body) \
  if (!strcmp(which, "all") || strstr(name, which)) { if (rank == 0) { \
    for (int i = 0; i < n; i++) { double t0 = MPI_Wtime(); MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win); body; MPI_Win_unlock(1, win); t[i] = MPI_Wtime() - t0; } \
    report(name " lock", t, n); } sync_ranks(rank); }
  if (!strcmp(which, "all") || strstr("pass", which)) { if (rank == 0) { int flag;
    for (int i = 0; i < n; i++) { double t0 = MPI_Wtime(); for (int k = 0; k < 100; k++) MPI_Iprobe(1, 5, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE); t[i] = (MPI_Wtime() - t0) / 100; }
    report("iprobe pass", t, n);
    MPI_Win_lock_all(0, win);
    for (int i = 0; i < n; i++) { double t0 = MPI_Wtime(); for (int k = 0; k < 100; k++) MPI_Win_flush(1, win); t[i] = (MPI_Wtime() - t0) / 100; }
    MPI_Win_unlock_all(win); report("empty flush", t, n); } MPI_Barrier(MPI_COMM_WORLD); }
  if (!strcmp(which, "all") || strstr("split", which)) { if (rank == 0) { double *t2 = malloc(sizeof(double) * n);
    MPI_Win_lock_all(0, win);
    for (int i = 0; i < n; i++) { double t0 = MPI_Wtime(); MPI_Fetch_and_op(&one, &res, MPI_LONG_LONG, 1, 0, MPI_SUM, win); double t1 = MPI_Wtime(); MPI_Win_flush(1, win); t[i] = t1 - t0; t2[i] = MPI_Wtime() - t1; }
    MPI_Win_unlock_all(win); report("fop call", t, n); report("fop's flush", t2, n); free(t2); } sync_ranks(rank); }
  FLUSHLOOP("fop", MPI_Fetch_and_op(&one, &res, MPI_LONG_LONG, 1, 0, MPI_SUM, win))
  LOCKLOOP("fop", MPI_Fetch_and_op(&one, &res, MPI_LONG_LONG, 1, 0, MPI_SUM, win))
  FLUSHLOOP("cas", MPI_Compare_and_swap(&one, &cmpv, &res, MPI_LONG_LONG, 1, 0, win))
  LOCKLOOP("cas", MPI_Compare_and_swap(&one, &cmpv, &res, MPI_LONG_LONG, 1, 0, win))
  FLUSHLOOP("put8", MPI_Put(sbuf, 8, MPI_CHAR, 1, 0, 8, MPI_CHAR, win))
  LOCKLOOP("put8", MPI_Put(sbuf, 8, MPI_CHAR, 1, 0, 8, MPI_CHAR, win))
  FLUSHLOOP("get8", MPI_Get(rbuf, 8, MPI_CHAR, 1, 0, 8, MPI_CHAR, win))
  LOCKLOOP("get8", MPI_Get(rbuf, 8, MPI_CHAR, 1, 0, 8, MPI_CHAR, win))
  FLUSHLOOP("acc8", MPI_Accumulate(sbuf, 8, MPI_CHAR, 1, 0, 8, MPI_CHAR, MPI_SUM, win))
  FLUSHLOOP("getacc8", MPI_Get_accumulate(sbuf, 8, MPI_CHAR, rbuf, 8, MPI_CHAR, 1, 0, 8, MPI_CHAR, MPI_SUM, win))
  MPI_Win_free(&win);
  MPI_Finalize();
  return 0;
}
