/* osu_like.c: the peer side of `rmca-bench --vs`. The same benchmarks, with the same
 * methodology and output format as rmca-bench's worker (tools/rmca-bench/src/worker.rs), on any
 * MPI. Compiled by rmca-bench with mpicc.openmpi / mpicc.mpich.
 *
 *   osu_like BENCH MIN MAX ITERS WINDOW [mem]
 *
 * BENCH: latency bw bibw msgrate allconn ringconn barrier allreduce. Sizes MIN, 2*MIN, ..., MAX
 * (starting with 0 when MIN is 0, then 1). Rank 0 prints one line per size:
 *   result SIZE VALUE [VALUE2]
 * latency: one-way us (half round trip); bw/bibw: MB/s (1e6 B/s) with WINDOW messages in
 * flight then an ack; msgrate: million messages/s, pairs r <-> r+n/2; allconn: us for a first
 * 0-byte exchange with every peer (ring order), then MPI_Init us (max over ranks), and with
 * `mem` VmHWM and VmRSS in MiB from /proc/self/status before MPI_Finalize (max over ranks);
 * ringconn: the same with the two ring neighbours only; barrier and
 * allreduce (float sum, SIZE/4 elements): us per call, averaged over ranks.
 * osu_bw, osu_bibw, osu_mbw_mr: OSU 7's loops exactly (MB/s): MPI_CHAR messages into one
 * receive buffer, MPI_Waitall with an array of statuses (osu_bibw: sends and receives in two
 * calls), a 1-byte reply (osu_bw, osu_mbw_mr; osu_mbw_mr over the pairs of msgrate).
 * With RMCA_BENCH_WHERE set in the environment (rmca-bench --nodes), every rank first prints
 *   where RANK net:[INODE]
 * its network namespace, which rmca-bench checks against the placement it asked for. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Same rule as the Rust worker: fewer iterations for large messages. */
static long iters_for(long iters, long size) {
  if (size <= 8192) return iters;
  long i = iters * 8192 / size;
  return i < 10 ? 10 : i;
}
static long warmup_for(long iters) { return iters / 10 + 1; }

static long next_size(long s) { return s == 0 ? 1 : 2 * s; }

/* "VmHWM:" / "VmRSS:" of /proc/self/status in MiB, -1 when unreadable. */
static double vm_mib(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  double v = -1;
  size_t n = strlen(field);
  if (!f) return -1;
  while (fgets(line, sizeof line, f)) {
    long kb;
    if (!strncmp(line, field, n) && line[n] == ':' && sscanf(line + n + 1, "%ld", &kb) == 1) {
      v = kb / 1024.0;
      break;
    }
  }
  fclose(f);
  return v;
}

int main(int argc, char **argv) {
  double t_init0 = now_us();
  MPI_Init(&argc, &argv);
  double init_us = now_us() - t_init0;
  int mem = argc == 8 && !strcmp(argv[7], "mem");
  if (argc != 7 && !mem) {
    fprintf(stderr, "usage: osu_like BENCH MIN MAX ITERS WINDOW MISALIGN [mem]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const char *bench = argv[1];
  long min = atol(argv[2]), max = atol(argv[3]), iters0 = atol(argv[4]), window = atol(argv[5]);
  /* The send buffer starts this many bytes past a page boundary (rmca-bench --misalign). */
  long misalign = atol(argv[6]);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (getenv("RMCA_BENCH_WHERE")) {
    char ns[64] = "";
    if (readlink("/proc/self/ns/net", ns, sizeof ns - 1) < 0) strcpy(ns, "unknown");
    printf("where %d %s\n", rank, ns);
    fflush(stdout);
  }
  if (window < 1 || iters0 < 1 || max < min || misalign < 0 || misalign >= 4096)
    MPI_Abort(MPI_COMM_WORLD, 2);

  if (!strcmp(bench, "allconn") || !strcmp(bench, "ringconn")) {
    int ring = !strcmp(bench, "ringconn");
    int steps = ring ? (n > 1 ? 1 : 0) : n - 1;
    double t0 = now_us();
    for (int k = 1; k <= steps; k++) {
      MPI_Sendrecv(NULL, 0, MPI_BYTE, (rank + k) % n, 5, NULL, 0, MPI_BYTE, (rank + n - k) % n, 5,
                   MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    if (ring && n > 2) {
      MPI_Sendrecv(NULL, 0, MPI_BYTE, (rank + n - 1) % n, 5, NULL, 0, MPI_BYTE, (rank + 1) % n, 5,
                   MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    double mine[4] = {now_us() - t0, init_us, vm_mib("VmHWM"), vm_mib("VmRSS")}, worst[4];
    int nf = mem ? 4 : 2;
    MPI_Reduce(mine, worst, nf, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      printf("result 0 %.3f %.3f", worst[0], worst[1]);
      for (int i = 2; i < nf; i++) {
        if (worst[i] < 0) printf(" -");
        else printf(" %.3f", worst[i]);
      }
      printf("\n");
    }
    MPI_Finalize();
    return 0;
  }
  if (!strcmp(bench, "barrier")) {
    long it = iters0, w = warmup_for(it);
    double t0 = 0;
    for (long i = 0; i < w + it; i++) {
      if (i == w) t0 = now_us();
      MPI_Barrier(MPI_COMM_WORLD);
    }
    double mine = (now_us() - t0) / it, sum;
    MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("result 0 %.6g\n", sum / n);
    MPI_Finalize();
    return 0;
  }

  long maxbuf = max * window;
  /* Page-aligned like the OSU benchmarks' buffers (and the Rust worker's), the send buffer
     `misalign` bytes further: the kernel's copy for single-copy transfers is slower when source
     and destination are not aligned alike, so heap addresses would measure the heap's layout. */
  char *sbase = NULL, *rbuf = NULL;
  if (posix_memalign((void **)&sbase, 4096, (max > 0 ? max : 1) + misalign) ||
      posix_memalign((void **)&rbuf, 4096, maxbuf > 0 ? maxbuf : 1))
    MPI_Abort(MPI_COMM_WORLD, 2);
  char *sbuf = sbase + misalign;
  memset(sbuf, 'a', max > 0 ? max : 1);
  memset(rbuf, 0, maxbuf > 0 ? maxbuf : 1);
  MPI_Request *reqs = malloc(sizeof(MPI_Request) * 2 * window);
  MPI_Status *stats = malloc(sizeof(MPI_Status) * 2 * window);
  int pairs = n / 2 > 0 ? n / 2 : 1;

  /* Allreduce starts at one float, like the Rust worker. */
  long start = (!strcmp(bench, "allreduce") && min < 4) ? 4 : min;
  for (long size = start; size <= max; size = next_size(size)) {
    long it = iters_for(iters0, size), w = warmup_for(it);
    double t0 = 0, value = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    if (!strcmp(bench, "latency")) {
      for (long i = 0; i < w + it && rank < 2 && n >= 2; i++) {
        if (i == w) t0 = now_us();
        if (rank == 0) {
          MPI_Send(sbuf, size, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
          MPI_Recv(rbuf, size, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
          MPI_Recv(rbuf, size, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          MPI_Send(sbuf, size, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
      }
      value = (now_us() - t0) / (2.0 * it);
    } else if (!strcmp(bench, "bw") || !strcmp(bench, "msgrate")) {
      int msgrate = !strcmp(bench, "msgrate");
      int active = msgrate ? rank < 2 * pairs : rank < 2;
      int sender = msgrate ? rank < pairs : rank == 0;
      int peer = msgrate ? (sender ? rank + pairs : rank - pairs) : 1 - rank;
      for (long i = 0; i < w + it && active && n >= 2; i++) {
        if (i == w) t0 = now_us();
        if (sender) {
          for (long k = 0; k < window; k++) MPI_Isend(sbuf, size, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &reqs[k]);
          MPI_Waitall(window, reqs, MPI_STATUSES_IGNORE);
          MPI_Recv(rbuf, 0, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
          for (long k = 0; k < window; k++) MPI_Irecv(rbuf + k * size, size, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &reqs[k]);
          MPI_Waitall(window, reqs, MPI_STATUSES_IGNORE);
          MPI_Send(sbuf, 0, MPI_BYTE, peer, 3, MPI_COMM_WORLD);
        }
      }
      double secs = (now_us() - t0) / 1e6;
      value = msgrate ? pairs * (double)window * it / secs / 1e6 : (double)size * window * it / secs / 1e6;
    } else if (!strcmp(bench, "osu_bw") || !strcmp(bench, "osu_mbw_mr")) {
      int p = !strcmp(bench, "osu_mbw_mr") ? pairs : 1;
      int sender = rank < p, peer = sender ? rank + p : rank - p;
      for (long i = 0; i < w + it && rank < 2 * p && n >= 2; i++) {
        if (i == w) t0 = now_us();
        if (sender) {
          for (long k = 0; k < window; k++) MPI_Isend(sbuf, size, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &reqs[k]);
          MPI_Waitall(window, reqs, stats);
          MPI_Recv(rbuf, 1, MPI_CHAR, peer, 101, MPI_COMM_WORLD, &stats[0]);
        } else {
          for (long k = 0; k < window; k++) MPI_Irecv(rbuf, size, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &reqs[k]);
          MPI_Waitall(window, reqs, stats);
          MPI_Send(sbuf, 1, MPI_CHAR, peer, 101, MPI_COMM_WORLD);
        }
      }
      value = (double)p * size * window * it / ((now_us() - t0) / 1e6) / 1e6;
    } else if (!strcmp(bench, "osu_bibw")) {
      for (long i = 0; i < w + it && rank < 2 && n >= 2; i++) {
        if (i == w) t0 = now_us();
        int peer = 1 - rank;
        for (long k = 0; k < window; k++) MPI_Irecv(rbuf, size, MPI_CHAR, peer, 10, MPI_COMM_WORLD, &reqs[window + k]);
        for (long k = 0; k < window; k++) MPI_Isend(sbuf, size, MPI_CHAR, peer, 10, MPI_COMM_WORLD, &reqs[k]);
        MPI_Waitall(window, rank == 0 ? reqs : reqs + window, stats);
        MPI_Waitall(window, rank == 0 ? reqs + window : reqs, stats);
      }
      value = 2.0 * size * window * it / ((now_us() - t0) / 1e6) / 1e6;
    } else if (!strcmp(bench, "bibw")) {
      for (long i = 0; i < w + it && rank < 2 && n >= 2; i++) {
        if (i == w) t0 = now_us();
        int peer = 1 - rank;
        for (long k = 0; k < window; k++) MPI_Irecv(rbuf + k * size, size, MPI_BYTE, peer, 4, MPI_COMM_WORLD, &reqs[k]);
        for (long k = 0; k < window; k++) MPI_Isend(sbuf, size, MPI_BYTE, peer, 4, MPI_COMM_WORLD, &reqs[window + k]);
        MPI_Waitall(2 * window, reqs, MPI_STATUSES_IGNORE);
      }
      value = 2.0 * size * window * it / ((now_us() - t0) / 1e6) / 1e6;
    } else if (!strcmp(bench, "allreduce")) {
      int count = (int)(size / 4);
      for (long i = 0; i < w + it; i++) {
        if (i == w) t0 = now_us();
        MPI_Allreduce(sbuf, rbuf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      }
      double mine = (now_us() - t0) / it, sum;
      MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
      value = sum / n;
    } else {
      if (rank == 0) fprintf(stderr, "osu_like: unknown benchmark %s\n", bench);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (rank == 0) printf("result %ld %.6g\n", size, value);
    fflush(stdout);
  }
  free(sbase);
  free(rbuf);
  free(reqs);
  MPI_Finalize();
  return 0;
}
