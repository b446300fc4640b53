/* osc_calls.c: the one-sided calls of OSU's one-sided benchmarks, in a loop on a window one
 * rank allocates for itself (MPI_Win_allocate: osc-sm), so that bench/osc-instructions.sh can
 * count the instructions per call with callgrind (deterministic, unlike timings on a loaded
 * machine). Inside one MPI_Win_lock_all epoch, ROUNDS times:
 * - put:      MPI_Put of 8 MPI_CHAR, MPI_Win_flush          (osu_put_latency -s flush)
 * - get:      MPI_Get of 8 MPI_CHAR, MPI_Win_flush          (osu_get_latency -s flush)
 * - getbw:    64 MPI_Get of 8 MPI_CHAR, one MPI_Win_flush   (osu_get_bw, per get)
 * - acc:      MPI_Accumulate of 8 MPI_CHAR (MPI_SUM), flush (osu_acc_latency)
 * - acc64k:   MPI_Accumulate of 65536 MPI_CHAR, flush       (osu_acc_latency, 64 KiB)
 * - acc64ki:  MPI_Accumulate of 16384 MPI_INT, flush
 * - getacc64k: MPI_Get_accumulate of 65536 MPI_CHAR (MPI_SUM), flush (osu_get_acc_latency,
 *             64 KiB)
 * - getacc:   MPI_Get_accumulate of 8 MPI_CHAR, flush       (osu_get_acc_latency)
 * - fop:      MPI_Fetch_and_op of one MPI_CHAR (MPI_SUM), flush (osu_fop_latency)
 * - cas:      MPI_Compare_and_swap of one MPI_INT64_T, flush
 * - caschar:  MPI_Compare_and_swap of one MPI_CHAR, flush  (osu_cas_latency's datatype)
 * - lockput, lockget, lockacc, lockfop, lockcas: put, get, acc, fop, cas as above, each in
 *             its own MPI_Win_lock(MPI_LOCK_SHARED)/MPI_Win_unlock epoch instead of a flush,
 *             with no lock_all around (OSU's `-s lock`)
 * - lockgetacc: getacc in an MPI_LOCK_EXCLUSIVE epoch (osu_get_acc_latency's `-s lock`)
 * - xlockput: put in an MPI_LOCK_EXCLUSIVE epoch
 * - lockall:  put in its own MPI_Win_lock_all/MPI_Win_unlock_all epoch
 * - flushlocal: put as above, MPI_Win_flush_local           (osu_put_latency -s flush_local)
 * - fence:    put as above, MPI_Win_fence (no lock_all around: OSU's `-s fence`, an epoch
 *             the first fence opens)
 * - pscw:     MPI_Win_post and MPI_Win_start of a group of this rank, put as above,
 *             MPI_Win_complete, MPI_Win_wait (OSU's `-s pscw`, both sides of it in one rank;
 *             the group made once)
 * The result is checked at the end, so a broken path cannot pass for a fast one.
 * OSC_WIN=create: the window is MPI_Win_create over memory the program allocated (osc-rdma
 * in rmca: the C library's general path, the module and the PML's RDMA, btl-self here).
 *
 *   osc_calls ROUNDS LOOP   (build: mpicc -O2 osc_calls.c -o osc_calls)
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BIG 65536
#define WINDOW 64

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: osc_calls ROUNDS put|get|getbw|acc|acc64k|acc64ki|getacc64k|getacc|fop|cas|caschar|lockput|lockget|lockacc|lockgetacc|lockfop|lockcas|xlockput|lockall|flushlocal|fence|pscw\n");
    return 2;
  }
  long rounds = atol(argv[1]);
  const char *loop = argv[2];
  MPI_Init(&argc, &argv);
  static char origin[BIG], result[BIG * 2];
  static int iorigin[BIG / 4];
  for (int i = 0; i < BIG; i++) origin[i] = 1;
  for (int i = 0; i < BIG / 4; i++) iorigin[i] = 1;
  char *base;
  MPI_Win win;
  const char *flavour = getenv("OSC_WIN");
  if (flavour && !strcmp(flavour, "create")) {
    base = malloc(BIG);
    MPI_Win_create(base, BIG, 1, MPI_INFO_NULL, MPI_COMM_SELF, &win);
  } else {
    MPI_Win_allocate(BIG, 1, MPI_INFO_NULL, MPI_COMM_SELF, &base, &win);
  }
  memset(base, 0, BIG);
  const int lockmode = !strncmp(loop, "lock", 4) || !strncmp(loop, "xlock", 5) ||
                       !strcmp(loop, "fence") || !strcmp(loop, "pscw");
  if (!lockmode) MPI_Win_lock_all(0, win);
  long expect = -1; /* what byte 0 (or the int64 at 0) must hold at the end */
  if (!strcmp(loop, "put")) {
    for (long r = 0; r < rounds; r++) {
      MPI_Put(origin, 8, MPI_CHAR, 0, 0, 8, MPI_CHAR, win);
      MPI_Win_flush(0, win);
    }
    expect = 1;
  } else if (!strcmp(loop, "get")) {
    base[0] = 7;
    for (long r = 0; r < rounds; r++) {
      MPI_Get(result, 8, MPI_CHAR, 0, 0, 8, MPI_CHAR, win);
      MPI_Win_flush(0, win);
    }
    expect = result[0] == 7 ? 7 : -2;
  } else if (!strcmp(loop, "getbw")) {
    base[8] = 7;
    for (long r = 0; r < rounds; r++) {
      for (int j = 0; j < WINDOW; j++) MPI_Get(result + 8 * j, 8, MPI_CHAR, 0, 8, 8, MPI_CHAR, win);
      MPI_Win_flush(0, win);
    }
    expect = result[8 * (WINDOW - 1)] == 7 ? 0 : -2;
  } else if (!strcmp(loop, "acc")) {
    for (long r = 0; r < rounds; r++) {
      MPI_Accumulate(origin, 8, MPI_CHAR, 0, 0, 8, MPI_CHAR, MPI_SUM, win);
      MPI_Win_flush(0, win);
    }
    expect = (char)rounds;
  } else if (!strcmp(loop, "acc64k")) {
    for (long r = 0; r < rounds; r++) {
      MPI_Accumulate(origin, BIG, MPI_CHAR, 0, 0, BIG, MPI_CHAR, MPI_SUM, win);
      MPI_Win_flush(0, win);
    }
    expect = (char)rounds;
  } else if (!strcmp(loop, "acc64ki")) {
    for (long r = 0; r < rounds; r++) {
      MPI_Accumulate(iorigin, BIG / 4, MPI_INT, 0, 0, BIG / 4, MPI_INT, MPI_SUM, win);
      MPI_Win_flush(0, win);
    }
    expect = ((int *)base)[BIG / 4 - 1] == rounds ? (char)rounds : -2;
  } else if (!strcmp(loop, "getacc64k")) {
    for (long r = 0; r < rounds; r++) {
      MPI_Get_accumulate(origin, BIG, MPI_CHAR, result, BIG, MPI_CHAR, 0, 0, BIG, MPI_CHAR, MPI_SUM,
                         win);
      MPI_Win_flush(0, win);
    }
    expect = (char)rounds;
  } else if (!strcmp(loop, "getacc")) {
    for (long r = 0; r < rounds; r++) {
      MPI_Get_accumulate(origin, 8, MPI_CHAR, result, 8, MPI_CHAR, 0, 0, 8, MPI_CHAR, MPI_SUM, win);
      MPI_Win_flush(0, win);
    }
    expect = (char)rounds;
  } else if (!strcmp(loop, "fop")) {
    for (long r = 0; r < rounds; r++) {
      MPI_Fetch_and_op(origin, result, MPI_CHAR, 0, 0, MPI_SUM, win);
      MPI_Win_flush(0, win);
    }
    expect = (char)rounds;
  } else if (!strcmp(loop, "cas")) {
    int64_t value = 1, compare = 0, old;
    for (long r = 0; r < rounds; r++) {
      MPI_Compare_and_swap(&value, &compare, &old, MPI_INT64_T, 0, 0, win);
      MPI_Win_flush(0, win);
      compare = value;
      value++;
    }
    expect = *(int64_t *)base == rounds ? (char)rounds : -2;
  } else if (!strcmp(loop, "caschar")) {
    char value = 1, compare = 0, old;
    for (long r = 0; r < rounds; r++) {
      MPI_Compare_and_swap(&value, &compare, &old, MPI_CHAR, 0, 0, win);
      MPI_Win_flush(0, win);
      compare = value;
      value++;
    }
    expect = (char)rounds;
  } else if (!strcmp(loop, "lockput")) {
    for (long r = 0; r < rounds; r++) {
      MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
      MPI_Put(origin, 8, MPI_CHAR, 0, 0, 8, MPI_CHAR, win);
      MPI_Win_unlock(0, win);
    }
    expect = 1;
  } else if (!strcmp(loop, "lockget")) {
    base[0] = 7;
    for (long r = 0; r < rounds; r++) {
      MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
      MPI_Get(result, 8, MPI_CHAR, 0, 0, 8, MPI_CHAR, win);
      MPI_Win_unlock(0, win);
    }
    expect = result[0] == 7 ? 7 : -2;
  } else if (!strcmp(loop, "xlockput")) {
    for (long r = 0; r < rounds; r++) {
      MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
      MPI_Put(origin, 8, MPI_CHAR, 0, 0, 8, MPI_CHAR, win);
      MPI_Win_unlock(0, win);
    }
    expect = 1;
  } else if (!strcmp(loop, "lockall")) {
    for (long r = 0; r < rounds; r++) {
      MPI_Win_lock_all(0, win);
      MPI_Put(origin, 8, MPI_CHAR, 0, 0, 8, MPI_CHAR, win);
      MPI_Win_unlock_all(win);
    }
    expect = 1;
  } else if (!strcmp(loop, "flushlocal")) {
    for (long r = 0; r < rounds; r++) {
      MPI_Put(origin, 8, MPI_CHAR, 0, 0, 8, MPI_CHAR, win);
      MPI_Win_flush_local(0, win);
    }
    expect = 1;
  } else if (!strcmp(loop, "fence")) {
    MPI_Win_fence(0, win);
    for (long r = 0; r < rounds; r++) {
      MPI_Put(origin, 8, MPI_CHAR, 0, 0, 8, MPI_CHAR, win);
      MPI_Win_fence(0, win);
    }
    MPI_Win_fence(MPI_MODE_NOSUCCEED, win);
    expect = 1;
  } else if (!strcmp(loop, "pscw")) {
    MPI_Group world, self;
    int zero = 0;
    MPI_Comm_group(MPI_COMM_SELF, &world);
    MPI_Group_incl(world, 1, &zero, &self);
    for (long r = 0; r < rounds; r++) {
      MPI_Win_post(self, 0, win);
      MPI_Win_start(self, 0, win);
      MPI_Put(origin, 8, MPI_CHAR, 0, 0, 8, MPI_CHAR, win);
      MPI_Win_complete(win);
      MPI_Win_wait(win);
    }
    MPI_Group_free(&self);
    MPI_Group_free(&world);
    expect = 1;
  } else if (!strcmp(loop, "lockgetacc")) {
    for (long r = 0; r < rounds; r++) {
      MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
      MPI_Get_accumulate(origin, 8, MPI_CHAR, result, 8, MPI_CHAR, 0, 0, 8, MPI_CHAR, MPI_SUM, win);
      MPI_Win_unlock(0, win);
    }
    expect = (char)rounds;
  } else if (!strcmp(loop, "lockacc")) {
    for (long r = 0; r < rounds; r++) {
      MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
      MPI_Accumulate(origin, 8, MPI_CHAR, 0, 0, 8, MPI_CHAR, MPI_SUM, win);
      MPI_Win_unlock(0, win);
    }
    expect = (char)rounds;
  } else if (!strcmp(loop, "lockfop")) {
    for (long r = 0; r < rounds; r++) {
      MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
      MPI_Fetch_and_op(origin, result, MPI_CHAR, 0, 0, MPI_SUM, win);
      MPI_Win_unlock(0, win);
    }
    expect = (char)rounds;
  } else if (!strcmp(loop, "lockcas")) {
    int64_t value = 1, compare = 0, old;
    for (long r = 0; r < rounds; r++) {
      MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
      MPI_Compare_and_swap(&value, &compare, &old, MPI_INT64_T, 0, 0, win);
      MPI_Win_unlock(0, win);
      compare = value;
      value++;
    }
    expect = *(int64_t *)base == rounds ? (char)rounds : -2;
  } else {
    fprintf(stderr, "osc_calls: unknown loop '%s'\n", loop);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  if (!lockmode) MPI_Win_unlock_all(win);
  int ok = base[0] == expect;
  if (!ok) fprintf(stderr, "osc_calls %s: byte 0 is %d, expected %ld\n", loop, base[0], expect);
  MPI_Win_free(&win);
  MPI_Finalize();
  return ok ? 0 : 1;
}
