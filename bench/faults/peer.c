/* peer.c: rmca-faults' worker for the peer MPIs (Open MPI, MPICH), the same measurement as
 * tools/rmca-faults/src/worker.rs on 2 ranks: per message size a stamped ping-pong (one-way
 * latency samples) and a windowed stream from rank 0 to rank 1 (goodput), every message
 * checked on arrival against its stamp (tools/rmca-faults/src/check.rs: an 8-byte sequence
 * number, then words that are a function of seed, sequence and offset), so that a duplicate,
 * a reordering or a corruption the MPI lets through is counted, never missed.
 *
 *   peer SEED LAT_ITERS BW_BYTES WINDOW SIZE...
 *
 * Rank 0 prints one line, `faults-result {JSON}`: per size the raw latency samples (us), the
 * stream's message count and seconds; the delivery counts of both ranks. Built by rmca-faults
 * with mpicc.openmpi / mpicc.mpich. */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The 64-bit finalizer of splitmix64, as check.rs's mix. */
static uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static void put_le(unsigned char *p, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static void stamp(unsigned char *buf, size_t size, uint64_t seed, uint64_t seq) {
  put_le(buf, seq, 8);
  uint64_t key = mix(seed ^ mix(seq));
  for (size_t off = 8, w = 0; off < size; off += 8, w++) {
    size_t n = size - off < 8 ? size - off : 8;
    put_le(buf + off, mix(key ^ w), n);
  }
}

/* checked, duplicate, out_of_order, corrupt */
static uint64_t delivery[4];

static void check(const unsigned char *buf, size_t size, uint64_t seed, uint64_t expected) {
  delivery[0]++;
  uint64_t seq = get_le(buf);
  if (seq < expected) delivery[1]++;
  if (seq > expected) delivery[2]++;
  uint64_t key = mix(seed ^ mix(seq));
  unsigned char word[8];
  for (size_t off = 8, w = 0; off < size; off += 8, w++) {
    size_t n = size - off < 8 ? size - off : 8;
    put_le(word, mix(key ^ w), 8);
    if (memcmp(buf + off, word, n) != 0) {
      delivery[3]++;
      return;
    }
  }
}

static void die(const char *what) {
  fprintf(stderr, "rmca-faults worker: %s\n", what);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int me, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (n != 2) die("needs exactly 2 ranks");
  if (argc < 6) die("usage: peer SEED LAT_ITERS BW_BYTES WINDOW SIZE...");
  uint64_t seed = strtoull(argv[1], NULL, 10);
  long lat_iters = atol(argv[2]), bw_bytes = atol(argv[3]), window = atol(argv[4]);
  if (lat_iters < 1 || bw_bytes < 1 || window < 1) die("LAT_ITERS, BW_BYTES, WINDOW must be > 0");
  uint64_t seq = 0;
  if (me == 0) printf("faults-result {\"sizes\":[");
  for (int a = 5; a < argc; a++) {
    long size = atol(argv[a]);
    if (size < 8) die("sizes are at least 8 bytes");
    long it = size <= 4096 ? lat_iters : lat_iters * 4096 / size;
    if (size > 4096 && it < 50) it = 50;
    long count = bw_bytes / size;
    count = count < 16 ? 16 : count > 4000 ? 4000 : count;
    unsigned char *sbuf = malloc(size), *rbuf = malloc(size * window);
    double *lat = malloc(sizeof(double) * it);
    if (!sbuf || !rbuf || !lat) die("out of memory");
    MPI_Barrier(MPI_COMM_WORLD);
    for (long i = 0; i < it; i++, seq++) {
      if (me == 0) {
        stamp(sbuf, size, seed, seq);
        double t = now_s();
        MPI_Send(sbuf, size, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
        MPI_Recv(rbuf, size, MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        lat[i] = (now_s() - t) * 1e6 / 2;
        check(rbuf, size, seed, seq);
      } else {
        MPI_Recv(rbuf, size, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        check(rbuf, size, seed, seq);
        MPI_Send(rbuf, size, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Request *reqs = malloc(sizeof(MPI_Request) * window);
    MPI_Status *st = malloc(sizeof(MPI_Status) * window);
    if (!reqs || !st) die("out of memory");
    double t = now_s();
    for (long sent = 0; sent < count;) {
      long k = count - sent < window ? count - sent : window;
      for (long i = 0; i < k; i++) {
        if (me == 0) {
          stamp(rbuf + i * size, size, seed, seq + i);
          MPI_Isend(rbuf + i * size, size, MPI_BYTE, 1, 3, MPI_COMM_WORLD, &reqs[i]);
        } else {
          MPI_Irecv(rbuf + i * size, size, MPI_BYTE, 0, 3, MPI_COMM_WORLD, &reqs[i]);
        }
      }
      MPI_Waitall(k, reqs, st);
      /* Receives posted in order match in order: slot i holds message seq + i. */
      if (me == 1)
        for (long i = 0; i < k; i++) check(rbuf + i * size, size, seed, seq + i);
      seq += k;
      sent += k;
    }
    if (me == 0)
      MPI_Recv(NULL, 0, MPI_BYTE, 1, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    else
      MPI_Send(NULL, 0, MPI_BYTE, 0, 4, MPI_COMM_WORLD);
    double secs = now_s() - t;
    if (me == 0) {
      printf("%s{\"size\":%ld,\"stream_messages\":%ld,\"stream_secs\":%.9f,\"lat_us\":[",
             a > 5 ? "," : "", size, count, secs);
      for (long i = 0; i < it; i++) printf("%s%.3f", i ? "," : "", lat[i]);
      printf("]}");
    }
    free(sbuf);
    free(rbuf);
    free(lat);
    free(reqs);
    free(st);
  }
  uint64_t theirs[4];
  if (me == 1) {
    MPI_Send(delivery, 4, MPI_UINT64_T, 0, 9, MPI_COMM_WORLD);
  } else {
    MPI_Recv(theirs, 4, MPI_UINT64_T, 1, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (int i = 0; i < 4; i++) delivery[i] += theirs[i];
    printf("],\"delivery\":{\"checked\":%llu,\"duplicate\":%llu,\"out_of_order\":%llu,"
           "\"corrupt\":%llu}}\n",
           (unsigned long long)delivery[0], (unsigned long long)delivery[1],
           (unsigned long long)delivery[2], (unsigned long long)delivery[3]);
    fflush(stdout);
  }
  MPI_Finalize();
  return 0;
}
