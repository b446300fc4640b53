/* One-sided communication on windows whose members share the node (osc-sm: one shared
 * segment, loads, stores and CPU atomics; osc-am when forced with --mca osc am):
 * MPI_Win_allocate_shared with MPI_Win_shared_query (parts contiguous in rank order, a member
 * of size 0, MPI_PROC_NULL), load/store seen by the other members after MPI_Win_sync and a
 * barrier; every RMA call and synchronization on MPI_Win_allocate_shared and MPI_Win_allocate
 * windows; atomics and exclusive locks under contention from every rank (the counts add up
 * exactly); bad input answered with the RMA error classes and nothing written, on the general
 * path and on the C library's fast paths (small put/get and accumulates, fetch-and-op,
 * compare-and-swap) and its passive-target locks (exclusion under contention, misuse);
 * post/start groups that change from one epoch to the next. Runs on
 * any number of ranks on one node (1 included). */
#include <stddef.h>
#include <stdint.h>

#include "check.h"

static int rank, size;

static int right(void) { return (rank + 1) % size; }
static int left(void) { return (rank + size - 1) % size; }

/* Member r exposes r + 1 ints, except member 1, which exposes none. */
static int ints_of(int r) { return r == 1 ? 0 : r + 1; }

/* Load and store through MPI_Win_shared_query's pointers. */
static void load_store(void) {
    int *mine = NULL;
    MPI_Win win;
    OK(MPI_Win_allocate_shared((MPI_Aint)sizeof(int) * ints_of(rank), sizeof(int), MPI_INFO_NULL,
                               MPI_COMM_WORLD, &mine, &win));
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    int *flavor = NULL, flag = 0;
    OK(MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &flag));
    CHECK(flag && *flavor == MPI_WIN_FLAVOR_SHARED, "flavor %d", flavor ? *flavor : -1);
    void *base = NULL;
    OK(MPI_Win_get_attr(win, MPI_WIN_BASE, &base, &flag));
    CHECK(flag && (ints_of(rank) == 0 || base == mine), "MPI_WIN_BASE %p, baseptr %p", base,
          (void *)mine);
    /* Contiguous in rank order (alloc_shared_noncontig=false): each part right after the
     * previous one, the member of size 0 taking no room. */
    int *first = NULL;
    char *expect = NULL;
    for (int r = 0; r < size; r++) {
        MPI_Aint sz = -1;
        int du = 0, *p = NULL;
        OK(MPI_Win_shared_query(win, r, &sz, &du, &p));
        CHECK(sz == (MPI_Aint)sizeof(int) * ints_of(r) && du == (int)sizeof(int), "query %d: %ld %d",
              r, (long)sz, du);
        if (sz > 0) {
            if (expect) CHECK((char *)p == expect, "rank %d's part follows the previous one", r);
            if (!first) first = p;
            expect = (char *)p + sz;
        }
    }
    MPI_Aint sz = -1;
    int du = 0, *p = NULL;
    OK(MPI_Win_shared_query(win, MPI_PROC_NULL, &sz, &du, &p));
    CHECK(p == first && sz == (MPI_Aint)sizeof(int), "MPI_PROC_NULL: the first part with memory");
    CHECK(MPI_Win_shared_query(win, size, &sz, &du, &p) == MPI_ERR_RANK, "rank = size");

    /* Store into the right neighbour's part, then the unified model's handshake. */
    OK(MPI_Win_lock_all(0, win));
    OK(MPI_Win_shared_query(win, right(), &sz, &du, &p));
    for (int i = 0; i < ints_of(right()); i++) p[i] = 1000 * rank + i;
    OK(MPI_Win_sync(win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Win_sync(win));
    for (int i = 0; i < ints_of(rank); i++)
        CHECK(mine[i] == 1000 * left() + i, "store from the left: [%d] = %d", i, mine[i]);
    OK(MPI_Win_unlock_all(win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Win_free(&win));
}

/* Every RMA call and synchronization on a window of each allocated flavor. */
static void every_call(int shared) {
    int64_t *mem = NULL;
    MPI_Win win;
    const int n = 16;
    if (shared)
        OK(MPI_Win_allocate_shared(n * sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL,
                                   MPI_COMM_WORLD, &mem, &win));
    else
        OK(MPI_Win_allocate(n * sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, MPI_COMM_WORLD,
                            &mem, &win));
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    for (int i = 0; i < n; i++) mem[i] = -1;

    /* Fence: put, get, a strided target (every other element), accumulate. */
    OK(MPI_Win_fence(0, win));
    int64_t v[4] = {rank, rank + 1, rank + 2, rank + 3};
    OK(MPI_Put(v, 4, MPI_INT64_T, right(), 0, 4, MPI_INT64_T, win));
    MPI_Datatype every_other;
    OK(MPI_Type_vector(4, 1, 2, MPI_INT64_T, &every_other));
    OK(MPI_Type_commit(&every_other));
    OK(MPI_Put(v, 4, MPI_INT64_T, right(), 8, 1, every_other, win));
    OK(MPI_Win_fence(0, win));
    for (int i = 0; i < 4; i++) CHECK(mem[i] == left() + i, "put [%d] = %ld", i, (long)mem[i]);
    for (int i = 0; i < 4; i++)
        CHECK(mem[8 + 2 * i] == left() + i && mem[9 + 2 * i] == -1, "strided put [%d]", i);
    /* The next epoch's accumulates land here as soon as the left neighbour left the fence. */
    OK(MPI_Barrier(MPI_COMM_WORLD));
    int64_t got[4] = {0};
    OK(MPI_Get(got, 4, MPI_INT64_T, right(), 8, 1, every_other, win));
    OK(MPI_Accumulate(v, 4, MPI_INT64_T, right(), 0, 4, MPI_INT64_T, MPI_SUM, win));
    OK(MPI_Win_fence(0, win));
    for (int i = 0; i < 4; i++) CHECK(got[i] == rank + i, "strided get [%d] = %ld", i, (long)got[i]);
    for (int i = 0; i < 4; i++)
        CHECK(mem[i] == 2 * (left() + i), "accumulate [%d] = %ld", i, (long)mem[i]);
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));

    /* Post/start/complete/wait with the neighbours: get_accumulate, fetch_and_op, CAS. */
    MPI_Group world, from, to;
    OK(MPI_Comm_group(MPI_COMM_WORLD, &world));
    int l = left(), r = right();
    OK(MPI_Group_incl(world, 1, &l, &from));
    OK(MPI_Group_incl(world, 1, &r, &to));
    OK(MPI_Win_post(from, 0, win));
    OK(MPI_Win_start(to, 0, win));
    int64_t one = 1, old = 0, prev[2] = {0}, cmp = 2 * rank, swap = 7;
    OK(MPI_Get_accumulate(v, 2, MPI_INT64_T, prev, 2, MPI_INT64_T, right(), 2, 2, MPI_INT64_T,
                          MPI_MAX, win));
    OK(MPI_Fetch_and_op(&one, &old, MPI_INT64_T, right(), 4, MPI_SUM, win));
    OK(MPI_Compare_and_swap(&swap, &cmp, &cmp, MPI_INT64_T, right(), 0, win));
    OK(MPI_Win_complete(win));
    int done = 0;
    while (!done) POLL(MPI_Win_test(win, &done));
    CHECK(prev[0] == 2 * (rank + 2) && prev[1] == 2 * (rank + 3), "get_accumulate's old values");
    CHECK(old == -1, "fetch_and_op's old value %ld", (long)old);
    CHECK(cmp == 2 * rank, "compare_and_swap's old value %ld", (long)cmp);
    CHECK(mem[0] == 7 && mem[4] == 0, "CAS and fetch_and_op landed: %ld %ld", (long)mem[0],
          (long)mem[4]);
    CHECK(mem[2] == 2 * (left() + 2), "MPI_MAX kept the larger value");

    /* Locks: exclusive and shared, request-based calls, every flush. */
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, right(), 0, win));
    MPI_Request req[4];
    int64_t rg = 0, fetched = 0, add = 5;
    OK(MPI_Rput(&add, 1, MPI_INT64_T, right(), 5, 1, MPI_INT64_T, win, &req[0]));
    OK(MPI_Win_flush(right(), win));
    OK(MPI_Rget(&rg, 1, MPI_INT64_T, right(), 5, 1, MPI_INT64_T, win, &req[1]));
    OK(MPI_Raccumulate(&add, 1, MPI_INT64_T, right(), 5, 1, MPI_INT64_T, MPI_SUM, win, &req[2]));
    OK(MPI_Win_flush_local(right(), win));
    OK(MPI_Rget_accumulate(&add, 1, MPI_INT64_T, &fetched, 1, MPI_INT64_T, right(), 5, 1,
                           MPI_INT64_T, MPI_NO_OP, win, &req[3]));
    OK(MPI_Waitall(4, req, MPI_STATUSES_IGNORE));
    CHECK(rg == 5 && fetched == 10, "request-based: %ld %ld", (long)rg, (long)fetched);
    OK(MPI_Win_unlock(right(), win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Win_lock(MPI_LOCK_SHARED, left(), 0, win));
    OK(MPI_Get(&rg, 1, MPI_INT64_T, left(), 5, 1, MPI_INT64_T, win));
    OK(MPI_Win_unlock(left(), win));
    CHECK(rg == 10, "shared lock get %ld", (long)rg);
    OK(MPI_Win_lock_all(0, win));
    OK(MPI_Put(&one, 1, MPI_INT64_T, left(), 6, 1, MPI_INT64_T, win));
    OK(MPI_Win_flush_all(win));
    OK(MPI_Win_flush_local_all(win));
    OK(MPI_Win_sync(win));
    OK(MPI_Win_unlock_all(win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Win_lock_all(MPI_MODE_NOCHECK, win));
    OK(MPI_Win_sync(win));
    CHECK(mem[6] == 1, "put under lock_all: %ld", (long)mem[6]);
    OK(MPI_Win_unlock_all(win));
    OK(MPI_Barrier(MPI_COMM_WORLD));

    OK(MPI_Type_free(&every_other));
    OK(MPI_Group_free(&from));
    OK(MPI_Group_free(&to));
    OK(MPI_Group_free(&world));
    OK(MPI_Win_free(&win));
}

/* Every rank hammers rank 0's counters: fetch-and-add and CAS on 8-byte integers, sums on
 * 4-byte ints and doubles (CPU atomics), on shorts (the target's lock word), and a
 * read-modify-write under an exclusive lock. */
static void contention(void) {
    struct counters {
        int64_t fadd, cas, locked;
        double dsum;
        int32_t isum;
        short ssum[2];
    } *c = NULL;
    MPI_Win win;
    MPI_Aint bytes = rank == 0 ? (MPI_Aint)sizeof *c : 0;
    OK(MPI_Win_allocate_shared(bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &c, &win));
    MPI_Aint sz;
    int du;
    OK(MPI_Win_shared_query(win, 0, &sz, &du, &c));
    if (rank == 0) memset(c, 0, sizeof *c);
    OK(MPI_Barrier(MPI_COMM_WORLD));
    const int rounds = 300;
    const MPI_Aint fadd = offsetof(struct counters, fadd), cas = offsetof(struct counters, cas),
                   locked = offsetof(struct counters, locked),
                   dsum = offsetof(struct counters, dsum), isum = offsetof(struct counters, isum),
                   ssum = offsetof(struct counters, ssum);
    int64_t one = 1, old = 0;
    double half = 0.5;
    int32_t ione = 1;
    short two[2] = {1, 2};
    OK(MPI_Win_lock_all(0, win));
    for (int i = 0; i < rounds; i++) {
        POLL(MPI_Fetch_and_op(&one, &old, MPI_INT64_T, 0, fadd, MPI_SUM, win));
        POLL(MPI_Accumulate(&half, 1, MPI_DOUBLE, 0, dsum, 1, MPI_DOUBLE, MPI_SUM, win));
        POLL(MPI_Accumulate(&ione, 1, MPI_INT32_T, 0, isum, 1, MPI_INT32_T, MPI_SUM, win));
        POLL(MPI_Accumulate(two, 2, MPI_SHORT, 0, ssum, 2, MPI_SHORT, MPI_SUM, win));
        /* An increment by compare-and-swap, retried until it wins. */
        int64_t seen = 0, next;
        POLL(MPI_Fetch_and_op(&one, &seen, MPI_INT64_T, 0, cas, MPI_NO_OP, win));
        POLL(MPI_Win_flush(0, win));
        for (;;) {
            int64_t was = 0;
            next = seen + 1;
            POLL(MPI_Compare_and_swap(&next, &seen, &was, MPI_INT64_T, 0, cas, win));
            POLL(MPI_Win_flush(0, win));
            if (was == seen) break;
            seen = was;
        }
    }
    OK(MPI_Win_unlock_all(win));
    for (int i = 0; i < rounds / 3; i++) {
        int64_t x = 0;
        POLL(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
        POLL(MPI_Get(&x, 1, MPI_INT64_T, 0, locked, 1, MPI_INT64_T, win));
        POLL(MPI_Win_flush(0, win));
        x++;
        POLL(MPI_Put(&x, 1, MPI_INT64_T, 0, locked, 1, MPI_INT64_T, win));
        POLL(MPI_Win_unlock(0, win));
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
    int64_t total = (int64_t)rounds * size;
    CHECK(c->fadd == total, "fetch_and_op counter %ld of %ld", (long)c->fadd, (long)total);
    CHECK(c->cas == total, "CAS counter %ld of %ld", (long)c->cas, (long)total);
    CHECK(c->dsum == 0.5 * (double)total, "double sums %g", c->dsum);
    CHECK(c->isum == total, "int sums %d", c->isum);
    CHECK(c->ssum[0] == (short)total && c->ssum[1] == (short)(2 * total), "short sums %d %d",
          c->ssum[0], c->ssum[1]);
    CHECK(c->locked == (int64_t)(rounds / 3) * size, "exclusive-lock increments %ld",
          (long)c->locked);
    OK(MPI_Win_unlock(0, win));
    OK(MPI_Win_free(&win));
}

/* Large and non-contiguous operations (osc-sm's in-place paths: whole runs under one hold of
 * the target's lock, the program's buffers used directly), every rank into rank 0 at once,
 * ROUNDS times, checked exactly against a reference: sums of ints, chars (wrapping) and
 * integer-valued doubles over long contiguous runs; a strided target (vector type) and a
 * strided origin; MPI_REPLACE over a long run; get_accumulate and MPI_NO_OP fetches into
 * contiguous and strided result types; a get into a strided origin; a put whose origin is
 * the window's own shared memory. Lost updates (a non-atomic element) or a misplaced run
 * show as wrong sums. */
static void bulk(void) {
    enum { N = 20000, ROUNDS = 3 };
    struct area {
        int32_t ints[N];
        double dbls[N];
        int32_t strided[3 * N];
        int32_t repl[N];
        int32_t spare[N];
        signed char chars[N];
    } *a = NULL;
    MPI_Win win;
    OK(MPI_Win_allocate_shared((MPI_Aint)sizeof *a, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &a, &win));
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    struct area *z = NULL; /* rank 0's */
    MPI_Aint sz;
    int du;
    OK(MPI_Win_shared_query(win, 0, &sz, &du, &z));
    memset(a, 0, sizeof *a);
    for (int i = 0; i < N; i++) a->spare[i] = 1000 * rank + i;
    OK(MPI_Barrier(MPI_COMM_WORLD));
    int32_t *ints = malloc(sizeof(int32_t) * 2 * N), *got = malloc(sizeof(int32_t) * 2 * N);
    double *dbls = malloc(sizeof(double) * N);
    signed char *chars = malloc(N);
    for (int i = 0; i < N; i++) {
        ints[i] = (rank + 1) * (i % 97);
        ints[N + i] = -1;
        dbls[i] = (double)((rank + 1) * (i % 13));
        chars[i] = (signed char)(rank + 1 + i % 5);
    }
    /* Every second pair of ints: 2 ints, stride 3 (target), and every other int (origin). */
    MPI_Datatype pairs, every_other;
    OK(MPI_Type_vector(N / 2, 2, 3, MPI_INT32_T, &pairs));
    OK(MPI_Type_commit(&pairs));
    OK(MPI_Type_vector(N, 1, 2, MPI_INT32_T, &every_other));
    OK(MPI_Type_commit(&every_other));
    const MPI_Aint o_ints = offsetof(struct area, ints), o_dbls = offsetof(struct area, dbls),
                   o_chars = offsetof(struct area, chars),
                   o_strided = offsetof(struct area, strided), o_repl = offsetof(struct area, repl);
    OK(MPI_Win_lock_all(0, win));
    for (int r = 0; r < ROUNDS; r++) {
        POLL(MPI_Accumulate(ints, N, MPI_INT32_T, 0, o_ints, N, MPI_INT32_T, MPI_SUM, win));
        POLL(MPI_Accumulate(dbls, N, MPI_DOUBLE, 0, o_dbls, N, MPI_DOUBLE, MPI_SUM, win));
        POLL(MPI_Accumulate(chars, N, MPI_SIGNED_CHAR, 0, o_chars, N, MPI_SIGNED_CHAR, MPI_SUM,
                            win));
        /* Contiguous origin into the strided target; then the strided origin (ints[0], [2],
         * ...) into the same places. */
        POLL(MPI_Accumulate(ints, N, MPI_INT32_T, 0, o_strided, 1, pairs, MPI_SUM, win));
        POLL(MPI_Accumulate(ints, 1, every_other, 0, o_strided, 1, pairs, MPI_SUM, win));
    }
    OK(MPI_Win_unlock_all(win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) {
        long tri = (long)size * (size + 1) / 2; /* the sum of (r + 1) over the ranks */
        int bad = 0;
        for (int i = 0; i < N && !bad; i++) {
            int32_t want = (int32_t)(ROUNDS * tri * (i % 97));
            if (z->ints[i] != want) {
                CHECK(0, "ints[%d] = %d, want %d", i, z->ints[i], want);
                bad = 1;
            }
            if (z->dbls[i] != (double)(ROUNDS * tri * (i % 13))) {
                CHECK(0, "dbls[%d] = %g", i, z->dbls[i]);
                bad = 1;
            }
            long c = 0;
            for (int q = 0; q < size; q++) c += q + 1 + i % 5;
            if (z->chars[i] != (signed char)(ROUNDS * c)) {
                CHECK(0, "chars[%d] = %d, want %d", i, z->chars[i], (signed char)(ROUNDS * c));
                bad = 1;
            }
        }
        CHECK(!bad, "long contiguous sums");
        bad = 0;
        for (int i = 0; i < 3 * N / 2 && !bad; i++) {
            /* Place i: pair i / 3, member i % 3 (2 is the gap). */
            int k = 2 * (i / 3) + i % 3; /* the origin element landing here */
            int32_t want = 0;
            if (i % 3 != 2) {
                /* The strided origin reads ints[2k]: the second half of ints is -1. */
                for (int q = 0; q < size; q++)
                    want += (q + 1) * (k % 97) + (2 * k < N ? (q + 1) * ((2 * k) % 97) : -1);
                want *= ROUNDS;
            }
            if (z->strided[i] != want) {
                CHECK(0, "strided[%d] = %d, want %d", i, z->strided[i], want);
                bad = 1;
            }
        }
        CHECK(!bad, "strided target, contiguous and strided origins");
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));

    /* Each rank in turn (exclusive lock): replace rank 0's run, fetching the previous
     * contents, contiguous and strided; then a NO_OP fetch and a strided get. */
    for (int turn = 0; turn < size; turn++) {
        if (turn == rank) {
            OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
            int32_t *prev = malloc(sizeof(int32_t) * 2 * N);
            for (int i = 0; i < 2 * N; i++) prev[i] = -7;
            OK(MPI_Get_accumulate(ints, N, MPI_INT32_T, prev, 1, every_other, 0, o_repl, N,
                                  MPI_INT32_T, MPI_REPLACE, win));
            OK(MPI_Win_flush(0, win));
            int bad = 0;
            for (int i = 0; i < N && !bad; i++) {
                int32_t want = turn == 0 ? 0 : turn * (i % 97); /* the previous rank's */
                if (prev[2 * i] != want || prev[2 * i + 1] != -7) {
                    CHECK(0, "get_accumulate's strided result [%d] = %d, want %d", i,
                          prev[2 * i], want);
                    bad = 1;
                }
            }
            OK(MPI_Get_accumulate(NULL, 0, MPI_INT32_T, got, N, MPI_INT32_T, 0, o_repl, N,
                                  MPI_INT32_T, MPI_NO_OP, win));
            for (int i = 0; i < 2 * N; i++) prev[i] = -7;
            OK(MPI_Get(prev, 1, every_other, 0, o_repl, N, MPI_INT32_T, win));
            OK(MPI_Win_unlock(0, win));
            for (int i = 0; i < N && !bad; i++) {
                if (got[i] != ints[i] || prev[2 * i] != ints[i] || prev[2 * i + 1] != -7) {
                    CHECK(0, "fetched back [%d]: %d and %d, want %d", i, got[i], prev[2 * i],
                          ints[i]);
                    bad = 1;
                }
            }
            CHECK(!bad, "replace, NO_OP fetch and strided get over %d ints", N);
            free(prev);
        }
        OK(MPI_Barrier(MPI_COMM_WORLD));
    }

    /* A put whose origin is this rank's own part of the shared window. */
    OK(MPI_Win_lock_all(0, win));
    OK(MPI_Put(a->spare, N, MPI_INT32_T, right(), offsetof(struct area, ints), N, MPI_INT32_T,
               win));
    OK(MPI_Win_unlock_all(win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    int bad = 0;
    for (int i = 0; i < N && !bad; i++) {
        if (a->ints[i] != 1000 * left() + i) {
            CHECK(0, "put from window memory: ints[%d] = %d", i, a->ints[i]);
            bad = 1;
        }
    }
    CHECK(!bad, "a put from the window's own memory");
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Type_free(&pairs));
    OK(MPI_Type_free(&every_other));
    free(ints);
    free(got);
    free(dbls);
    free(chars);
    OK(MPI_Win_free(&win));
}

/* 64 KiB accumulates on an MPI_Win_allocate window (osc-sm's wide loops: the C library's
 * fast path, one run under the target's lock, 32-byte vectors where the CPU has AVX2), every
 * rank into rank 0 at once, ROUNDS times, checked exactly: MPI_CHAR sums (OSU's
 * osu_acc_latency, wrapping), MPI_Get_accumulate with MPI_MAX on ints (every fetched element
 * 0 or one rank's), MPI_BXOR on 64-bit words, MPI_PROD on doubles, and a run that starts one
 * byte into the window and ends mid-vector (MPI_UNSIGNED_CHAR sums). */
static void wide(void) {
    enum { KB64 = 65536, ROUNDS = 3 };
    struct area {
        char chars[KB64];
        int32_t imax[KB64 / 4];
        uint64_t bx[KB64 / 8];
        double prod[KB64 / 8];
        unsigned char odd[KB64 + 40];
    } *z = NULL;
    MPI_Win win;
    MPI_Aint bytes = rank == 0 ? (MPI_Aint)sizeof *z : 0;
    OK(MPI_Win_allocate(bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &z, &win));
    if (rank == 0) {
        memset(z, 0, sizeof *z);
        for (int i = 0; i < KB64 / 8; i++) z->prod[i] = 1.0;
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));
    char *chars = malloc(KB64);
    int32_t *ints = malloc(KB64), *old = malloc(KB64);
    uint64_t *bits = malloc(KB64);
    double *dbls = malloc(KB64);
    unsigned char *odd = malloc(KB64 + 3);
    for (int i = 0; i < KB64; i++) chars[i] = (char)(rank + 1 + i % 7);
    for (int i = 0; i < KB64 / 4; i++) ints[i] = 100000 * (rank + 1) + i;
    for (int i = 0; i < KB64 / 8; i++) {
        bits[i] = (uint64_t)(rank + 1) << (i % 50);
        dbls[i] = (i % 3 == 0) ? 2.0 : 1.0;
    }
    for (int i = 0; i < KB64 + 3; i++) odd[i] = (unsigned char)(rank + i % 11);
    const MPI_Aint o_chars = offsetof(struct area, chars), o_imax = offsetof(struct area, imax),
                   o_bx = offsetof(struct area, bx), o_prod = offsetof(struct area, prod),
                   o_odd = offsetof(struct area, odd) + 1;
    int fetched_bad = 0;
    OK(MPI_Win_lock_all(0, win));
    for (int r = 0; r < ROUNDS; r++) {
        POLL(MPI_Accumulate(chars, KB64, MPI_CHAR, 0, o_chars, KB64, MPI_CHAR, MPI_SUM, win));
        POLL(MPI_Win_flush(0, win));
        for (int i = 0; i < KB64 / 4; i++) old[i] = -5;
        POLL(MPI_Get_accumulate(ints, KB64 / 4, MPI_INT32_T, old, KB64 / 4, MPI_INT32_T, 0,
                                o_imax, KB64 / 4, MPI_INT32_T, MPI_MAX, win));
        POLL(MPI_Win_flush(0, win));
        for (int i = 0; i < KB64 / 4; i++)
            if (old[i] != 0 && (old[i] % 100000 != i || old[i] / 100000 > size)) fetched_bad++;
        POLL(MPI_Accumulate(bits, KB64 / 8, MPI_UINT64_T, 0, o_bx, KB64 / 8, MPI_UINT64_T,
                            MPI_BXOR, win));
        POLL(MPI_Accumulate(dbls, KB64 / 8, MPI_DOUBLE, 0, o_prod, KB64 / 8, MPI_DOUBLE, MPI_PROD,
                            win));
        POLL(MPI_Accumulate(odd, KB64 + 3, MPI_UNSIGNED_CHAR, 0, o_odd, KB64 + 3,
                            MPI_UNSIGNED_CHAR, MPI_SUM, win));
        POLL(MPI_Win_flush(0, win));
    }
    OK(MPI_Win_unlock_all(win));
    CHECK(!fetched_bad, "64 KiB get_accumulate MAX fetched %d elements no rank put there",
          fetched_bad);
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) {
        int bad = 0;
        for (int i = 0; i < KB64 && !bad; i++) {
            long c = 0;
            for (int q = 0; q < size; q++) c += q + 1 + i % 7;
            if (z->chars[i] != (char)(ROUNDS * c)) {
                CHECK(0, "chars[%d] = %d, want %d", i, z->chars[i], (char)(ROUNDS * c));
                bad = 1;
            }
        }
        for (int i = 0; i < KB64 / 4 && !bad; i++) {
            if (z->imax[i] != 100000 * size + i) {
                CHECK(0, "imax[%d] = %d, want %d", i, z->imax[i], 100000 * size + i);
                bad = 1;
            }
        }
        for (int i = 0; i < KB64 / 8 && !bad; i++) {
            uint64_t want = 0;
            for (int q = 0; q < size; q++)
                if (ROUNDS % 2) want ^= (uint64_t)(q + 1) << (i % 50);
            double p = 1.0;
            for (int k = 0; k < ROUNDS * size; k++) p *= (i % 3 == 0) ? 2.0 : 1.0;
            if (z->bx[i] != want || z->prod[i] != p) {
                CHECK(0, "bx[%d] = %llx (want %llx), prod %g (want %g)", i,
                      (unsigned long long)z->bx[i], (unsigned long long)want, z->prod[i], p);
                bad = 1;
            }
        }
        for (int i = 0; i < KB64 + 40 && !bad; i++) {
            long c = 0;
            if (i >= 1 && i < KB64 + 4)
                for (int q = 0; q < size; q++) c += q + (i - 1) % 11;
            if (z->odd[i] != (unsigned char)(ROUNDS * c)) {
                CHECK(0, "odd[%d] = %d, want %d", i, z->odd[i], (unsigned char)(ROUNDS * c));
                bad = 1;
            }
        }
        CHECK(!bad, "64 KiB accumulates from %d ranks", size);
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));
    free(chars);
    free(ints);
    free(old);
    free(bits);
    free(dbls);
    free(odd);
    OK(MPI_Win_free(&win));
}

/* Bad input: the RMA error classes, nothing written at the target. */
static void bad_input(void) {
    int *mem = NULL;
    MPI_Win win;
    OK(MPI_Win_allocate_shared(4 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mem,
                               &win));
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    for (int i = 0; i < 4; i++) mem[i] = 42;
    int v[8] = {1, 2, 3, 4, 5, 6, 7, 8}, got[8], old = 0, one = 1;
    CHECK(MPI_Put(v, 1, MPI_INT, right(), 0, 1, MPI_INT, win) == MPI_ERR_RMA_SYNC,
          "a put outside an epoch");
    OK(MPI_Win_fence(0, win));
    CHECK(MPI_Put(v, 5, MPI_INT, right(), 0, 5, MPI_INT, win) == MPI_ERR_RMA_RANGE,
          "a put past the end");
    CHECK(MPI_Put(v, 2, MPI_INT, right(), 3, 2, MPI_INT, win) == MPI_ERR_RMA_RANGE,
          "a put straddling the end");
    CHECK(MPI_Put(v, 1, MPI_INT, right(), -1, 1, MPI_INT, win) == MPI_ERR_RMA_RANGE,
          "a put before the start");
    CHECK(MPI_Get(got, 8, MPI_INT, right(), 0, 8, MPI_INT, win) == MPI_ERR_RMA_RANGE,
          "a get past the end");
    CHECK(MPI_Accumulate(v, 2, MPI_INT, right(), 3, 2, MPI_INT, MPI_SUM, win) ==
              MPI_ERR_RMA_RANGE,
          "an accumulate straddling the end");
    CHECK(MPI_Fetch_and_op(&one, &old, MPI_INT, right(), 4, MPI_SUM, win) == MPI_ERR_RMA_RANGE,
          "fetch_and_op past the end");
    CHECK(MPI_Compare_and_swap(&one, &old, &old, MPI_INT, right(), 9, win) == MPI_ERR_RMA_RANGE,
          "compare_and_swap past the end");
    CHECK(MPI_Put(v, 1, MPI_INT, size, 0, 1, MPI_INT, win) == MPI_ERR_RANK, "rank = size");
    OK(MPI_Win_fence(0, win));
    for (int i = 0; i < 4; i++) CHECK(mem[i] == 42, "nothing written: [%d] = %d", i, mem[i]);
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
    CHECK(MPI_Win_unlock(right(), win) == MPI_ERR_RMA_SYNC, "unlock without lock");
    CHECK(MPI_Win_complete(win) == MPI_ERR_RMA_SYNC, "complete without start");
    CHECK(MPI_Win_flush_all(win) == MPI_ERR_RMA_SYNC, "flush without lock");
    CHECK(MPI_Win_attach(win, v, sizeof v) == MPI_ERR_RMA_FLAVOR, "attach to a shared window");
    CHECK(MPI_Win_flush(right(), win) == MPI_ERR_RMA_SYNC, "flush without lock");
    CHECK(MPI_Win_flush_local(right(), win) == MPI_ERR_RMA_SYNC, "flush_local without lock");
    OK(MPI_Win_lock(MPI_LOCK_SHARED, right(), 0, win));
    CHECK(MPI_Win_lock(MPI_LOCK_SHARED, right(), 0, win) == MPI_ERR_RMA_SYNC, "locked twice");
    CHECK(MPI_Win_fence(0, win) == MPI_ERR_RMA_SYNC, "fence inside a lock epoch");
    OK(MPI_Win_unlock(right(), win));

    /* The C library's fast path of MPI_Put/MPI_Get/MPI_Win_flush (predefined types, osc-sm)
     * hands every doubtful call to the general path: each still gets its error class, and
     * nothing is written. */
    OK(MPI_Win_lock_all(0, win));
    CHECK(MPI_Put(v, 2, MPI_INT, right(), 0, 1, MPI_INT, win) == MPI_ERR_TYPE,
          "a put of 8 bytes into 4");
    CHECK(MPI_Put(v, 1, MPI_INT, right(), 0, 4, MPI_CHAR, win) == MPI_SUCCESS,
          "a put of 4 bytes as 4 chars");
    CHECK(MPI_Put(NULL, 1, MPI_INT, right(), 0, 1, MPI_INT, win) == MPI_ERR_BUFFER,
          "a put from NULL");
    CHECK(MPI_Put(v, -1, MPI_INT, right(), 0, -1, MPI_INT, win) == MPI_ERR_COUNT,
          "a negative count");
    CHECK(MPI_Put(v, 1, MPI_DATATYPE_NULL, right(), 0, 1, MPI_INT, win) == MPI_ERR_TYPE,
          "MPI_DATATYPE_NULL");
    CHECK(MPI_Put(v, 1, MPI_INT, -5, 0, 1, MPI_INT, win) == MPI_ERR_RANK, "rank -5");
    CHECK(MPI_Get(got, 1, MPI_INT, size, 0, 1, MPI_INT, win) == MPI_ERR_RANK, "a get of rank size");
    CHECK(MPI_Put(v, 1, MPI_INT, MPI_PROC_NULL, 0, 1, MPI_INT, win) == MPI_SUCCESS,
          "a put to MPI_PROC_NULL");
    got[0] = -7;
    CHECK(MPI_Get(got, 1, MPI_INT, right(), 4, 1, MPI_INT, win) == MPI_ERR_RMA_RANGE,
          "a get past the end");
    CHECK(got[0] == -7, "a refused get wrote its buffer: %d", got[0]);
    CHECK(MPI_Win_flush(size, win) == MPI_ERR_RANK, "flush of rank size");
    CHECK(MPI_Win_flush_local(-7, win) == MPI_ERR_RANK, "flush_local of rank -7");
    OK(MPI_Win_flush(MPI_PROC_NULL, win));
    OK(MPI_Win_flush(right(), win));
    OK(MPI_Win_unlock_all(win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    /* Only the 4-char put landed (1 from the left neighbour); the rest is untouched. */
    CHECK(mem[0] == 1, "the valid put: [0] = %d", mem[0]);
    for (int i = 1; i < 4; i++) CHECK(mem[i] == 42, "nothing written: [%d] = %d", i, mem[i]);
    OK(MPI_Win_free(&win));

    /* A window whose members exceed the node is refused; MPI_COMM_SELF always fits. */
    MPI_Win self;
    int *p = NULL;
    OK(MPI_Win_allocate_shared(0, 1, MPI_INFO_NULL, MPI_COMM_SELF, &p, &self));
    OK(MPI_Win_set_errhandler(self, MPI_ERRORS_RETURN));
    OK(MPI_Win_fence(0, self));
    CHECK(MPI_Put(v, 1, MPI_BYTE, 0, 0, 1, MPI_BYTE, self) == MPI_ERR_RMA_RANGE,
          "a put into a member of size 0");
    OK(MPI_Win_fence(0, self));
    OK(MPI_Win_free(&self));
}

/* The C library's fast path of the small accumulates (MPI_Accumulate, MPI_Get_accumulate,
 * MPI_Fetch_and_op, MPI_Compare_and_swap with a predefined datatype and operation on an
 * osc-sm window): every operation and element type it takes gives the value the general
 * path gives. Each rank updates its right neighbour's part only, so the values are exact. */
static void fast_values(void) {
    struct slots {
        int32_t sum, prod, min, max, band, bor, bxor, land, lor, rep;
        double dsum, dmax;
        int64_t fop, cas64;
        int32_t cas32;
        int16_t cas16;
        uint8_t umax, cas8;
        char csum[4];
    } *s = NULL;
    MPI_Win win;
    OK(MPI_Win_allocate_shared((MPI_Aint)sizeof *s, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &s, &win));
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    memset(s, 0, sizeof *s);
    s->prod = 3;
    s->min = 10;
    s->max = 10;
    s->band = 0xff;
    s->bor = 0x10;
    s->bxor = 0x0f;
    s->land = 1;
    s->dmax = 1.5;
    s->fop = 100;
    s->cas64 = 5;
    s->cas32 = 6;
    s->cas16 = 7;
    s->cas8 = 8;
    s->umax = 200;
    for (int i = 0; i < 4; i++) s->csum[i] = 120;
    OK(MPI_Barrier(MPI_COMM_WORLD));
    const int t = right();
#define AT(f) ((MPI_Aint)offsetof(struct slots, f))
    int32_t two = 2, five = 5, twenty = 20, bits = 0x3c, zero = 0, got = -1;
    double d = 2.25;
    char c4[4] = {10, 10, 10, 10}, cold[4] = {0};
    uint8_t u = 250;
    OK(MPI_Win_lock_all(0, win));
    OK(MPI_Accumulate(&two, 1, MPI_INT32_T, t, AT(sum), 1, MPI_INT32_T, MPI_SUM, win));
    OK(MPI_Accumulate(&two, 1, MPI_INT32_T, t, AT(sum), 1, MPI_INT32_T, MPI_SUM, win));
    OK(MPI_Accumulate(&five, 1, MPI_INT32_T, t, AT(prod), 1, MPI_INT32_T, MPI_PROD, win));
    OK(MPI_Accumulate(&five, 1, MPI_INT32_T, t, AT(min), 1, MPI_INT32_T, MPI_MIN, win));
    OK(MPI_Accumulate(&twenty, 1, MPI_INT32_T, t, AT(max), 1, MPI_INT32_T, MPI_MAX, win));
    OK(MPI_Accumulate(&bits, 1, MPI_INT32_T, t, AT(band), 1, MPI_INT32_T, MPI_BAND, win));
    OK(MPI_Accumulate(&bits, 1, MPI_INT32_T, t, AT(bor), 1, MPI_INT32_T, MPI_BOR, win));
    OK(MPI_Accumulate(&bits, 1, MPI_INT32_T, t, AT(bxor), 1, MPI_INT32_T, MPI_BXOR, win));
    OK(MPI_Accumulate(&zero, 1, MPI_INT32_T, t, AT(land), 1, MPI_INT32_T, MPI_LAND, win));
    OK(MPI_Accumulate(&five, 1, MPI_INT32_T, t, AT(lor), 1, MPI_INT32_T, MPI_LOR, win));
    OK(MPI_Accumulate(&twenty, 1, MPI_INT32_T, t, AT(rep), 1, MPI_INT32_T, MPI_REPLACE, win));
    OK(MPI_Accumulate(&d, 1, MPI_DOUBLE, t, AT(dsum), 1, MPI_DOUBLE, MPI_SUM, win));
    OK(MPI_Accumulate(&d, 1, MPI_DOUBLE, t, AT(dmax), 1, MPI_DOUBLE, MPI_MAX, win));
    OK(MPI_Accumulate(&u, 1, MPI_UINT8_T, t, AT(umax), 1, MPI_UINT8_T, MPI_MAX, win));
    /* MPI_CHAR sums as C's char, wrapping (120 + 10). */
    OK(MPI_Get_accumulate(c4, 4, MPI_CHAR, cold, 4, MPI_CHAR, t, AT(csum), 4, MPI_CHAR, MPI_SUM,
                          win));
    OK(MPI_Win_flush(t, win));
    CHECK(cold[0] == 120 && cold[3] == 120, "get_accumulate's old chars %d %d", cold[0], cold[3]);
    /* MPI_NO_OP ignores the origin (NULL here). */
    OK(MPI_Get_accumulate(NULL, 0, MPI_INT32_T, &got, 1, MPI_INT32_T, t, AT(sum), 1, MPI_INT32_T,
                          MPI_NO_OP, win));
    OK(MPI_Win_flush(t, win));
    CHECK(got == 4, "MPI_NO_OP fetch of the sum: %d", got);
    int64_t inc = 7, old64 = -1;
    OK(MPI_Fetch_and_op(&inc, &old64, MPI_INT64_T, t, AT(fop), MPI_SUM, win));
    OK(MPI_Win_flush(t, win));
    CHECK(old64 == 100, "fetch_and_op's old value %ld", (long)old64);
    OK(MPI_Fetch_and_op(NULL, &old64, MPI_INT64_T, t, AT(fop), MPI_NO_OP, win));
    OK(MPI_Win_flush(t, win));
    CHECK(old64 == 107, "fetch_and_op MPI_NO_OP %ld", (long)old64);
    /* Compare-and-swap at every width: a miss leaves the target, a hit swaps. */
    int64_t v64 = 50, c64 = 4, r64 = -1;
    OK(MPI_Compare_and_swap(&v64, &c64, &r64, MPI_INT64_T, t, AT(cas64), win));
    OK(MPI_Win_flush(t, win));
    CHECK(r64 == 5, "CAS miss returns %ld", (long)r64);
    c64 = 5;
    OK(MPI_Compare_and_swap(&v64, &c64, &r64, MPI_INT64_T, t, AT(cas64), win));
    OK(MPI_Win_flush(t, win));
    CHECK(r64 == 5, "CAS hit returns %ld", (long)r64);
    int32_t v32 = 60, c32 = 6, r32 = -1;
    OK(MPI_Compare_and_swap(&v32, &c32, &r32, MPI_INT32_T, t, AT(cas32), win));
    int16_t v16 = 70, c16 = 7, r16 = -1;
    OK(MPI_Compare_and_swap(&v16, &c16, &r16, MPI_INT16_T, t, AT(cas16), win));
    uint8_t v8 = 80, c8 = 8, r8 = 0;
    OK(MPI_Compare_and_swap(&v8, &c8, &r8, MPI_BYTE, t, AT(cas8), win));
    OK(MPI_Win_flush(t, win));
    CHECK(r32 == 6 && r16 == 7 && r8 == 8, "CAS olds %d %d %d", r32, r16, r8);
    /* The result may alias the origin for compare-and-swap (both are copied first). */
    int64_t same = 50;
    OK(MPI_Compare_and_swap(&same, &same, &same, MPI_INT64_T, t, AT(cas64), win));
    OK(MPI_Win_flush(t, win));
    CHECK(same == 50, "CAS with aliased buffers %ld", (long)same);
    OK(MPI_Win_unlock_all(win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    CHECK(s->sum == 4 && s->prod == 15 && s->min == 5 && s->max == 20,
          "int sum %d prod %d min %d max %d", s->sum, s->prod, s->min, s->max);
    CHECK(s->band == 0x3c && s->bor == 0x3c && s->bxor == 0x33, "bitwise %#x %#x %#x", s->band,
          s->bor, s->bxor);
    CHECK(s->land == 0 && s->lor == 1 && s->rep == 20, "logical %d %d, replace %d", s->land, s->lor,
          s->rep);
    CHECK(s->dsum == 2.25 && s->dmax == 2.25 && s->umax == 250, "double %g %g, uint8 max %d",
          s->dsum, s->dmax, s->umax);
    CHECK(s->csum[0] == (char)130 && s->csum[3] == (char)130, "char sums %d %d", s->csum[0],
          s->csum[3]);
    CHECK(s->fop == 107, "fetch_and_op sum %ld", (long)s->fop);
    CHECK(s->cas64 == 50 && s->cas32 == 60 && s->cas16 == 70 && s->cas8 == 80, "CAS %ld %d %d %d",
          (long)s->cas64, s->cas32, s->cas16, s->cas8);
#undef AT
    OK(MPI_Win_free(&win));
}

static void user_sum(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    for (int i = 0; i < *len; i++) ((int *)inout)[i] += ((int *)in)[i];
}

/* Bad input on the small accumulates' fast path: each call gets the general path's error
 * class, and neither the target nor a result buffer is written. */
static void fast_bad_input(void) {
    int *mem = NULL;
    MPI_Win win;
    OK(MPI_Win_allocate_shared(4 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mem,
                               &win));
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    for (int i = 0; i < 4; i++) mem[i] = 42;
    OK(MPI_Barrier(MPI_COMM_WORLD));
    const int t = right();
    int v[2] = {1, 2}, res[2] = {-7, -7};
    float f = 1.0f;
    double dv = 1.0;
    MPI_Op user;
    OK(MPI_Op_create(user_sum, 1, &user));
    CHECK(MPI_Accumulate(v, 1, MPI_INT, t, 0, 1, MPI_INT, MPI_SUM, win) == MPI_ERR_RMA_SYNC,
          "an accumulate outside an epoch");
    CHECK(MPI_Fetch_and_op(v, res, MPI_INT, t, 0, MPI_SUM, win) == MPI_ERR_RMA_SYNC,
          "fetch_and_op outside an epoch");
    CHECK(MPI_Compare_and_swap(v, v, res, MPI_INT, t, 0, win) == MPI_ERR_RMA_SYNC,
          "compare_and_swap outside an epoch");
    OK(MPI_Win_lock_all(0, win));
    CHECK(MPI_Accumulate(v, 1, MPI_INT, t, 4, 1, MPI_INT, MPI_SUM, win) == MPI_ERR_RMA_RANGE,
          "an accumulate past the end");
    CHECK(MPI_Accumulate(v, 1, MPI_INT, t, -1, 1, MPI_INT, MPI_SUM, win) == MPI_ERR_RMA_RANGE,
          "an accumulate before the start");
    CHECK(MPI_Accumulate(v, 2, MPI_INT, t, 0, 1, MPI_INT, MPI_SUM, win) == MPI_ERR_TYPE,
          "an accumulate of 2 ints into 1");
    CHECK(MPI_Accumulate(&f, 1, MPI_FLOAT, t, 0, 1, MPI_INT, MPI_SUM, win) == MPI_ERR_TYPE,
          "an accumulate of a float into an int");
    CHECK(MPI_Accumulate(v, 1, MPI_INT, t, 0, 1, MPI_INT, MPI_NO_OP, win) == MPI_ERR_OP,
          "MPI_NO_OP in MPI_Accumulate");
    CHECK(MPI_Accumulate(v, 1, MPI_INT, t, 0, 1, MPI_INT, MPI_MINLOC, win) == MPI_ERR_OP,
          "MPI_MINLOC on an int");
    CHECK(MPI_Accumulate(&dv, 1, MPI_DOUBLE, t, 0, 1, MPI_DOUBLE, MPI_BAND, win) == MPI_ERR_OP,
          "MPI_BAND on a double");
    CHECK(MPI_Accumulate(v, 4, MPI_BYTE, t, 0, 4, MPI_BYTE, MPI_SUM, win) == MPI_ERR_OP,
          "MPI_SUM on MPI_BYTE");
    CHECK(MPI_Accumulate(v, 1, MPI_INT, t, 0, 1, MPI_INT, user, win) == MPI_ERR_OP,
          "a user operation");
    CHECK(MPI_Accumulate(v, 1, MPI_INT, t, 0, 1, MPI_INT, MPI_OP_NULL, win) == MPI_ERR_OP,
          "MPI_OP_NULL");
    CHECK(MPI_Accumulate(NULL, 1, MPI_INT, t, 0, 1, MPI_INT, MPI_SUM, win) == MPI_ERR_BUFFER,
          "an accumulate from NULL");
    CHECK(MPI_Accumulate(v, -1, MPI_INT, t, 0, -1, MPI_INT, MPI_SUM, win) == MPI_ERR_COUNT,
          "a negative count");
    CHECK(MPI_Accumulate(v, 1, MPI_INT, size, 0, 1, MPI_INT, MPI_SUM, win) == MPI_ERR_RANK,
          "an accumulate to rank size");
    CHECK(MPI_Accumulate(v, 1, MPI_INT, MPI_PROC_NULL, 0, 1, MPI_INT, MPI_SUM, win) ==
              MPI_SUCCESS,
          "an accumulate to MPI_PROC_NULL");
    CHECK(MPI_Get_accumulate(v, 1, MPI_INT, NULL, 1, MPI_INT, t, 0, 1, MPI_INT, MPI_SUM, win) ==
              MPI_ERR_BUFFER,
          "a get_accumulate into NULL");
    CHECK(MPI_Get_accumulate(v, 1, MPI_INT, res, 2, MPI_INT, t, 0, 1, MPI_INT, MPI_SUM, win) ==
              MPI_ERR_TYPE,
          "a get_accumulate result of 2 ints for 1");
    CHECK(MPI_Get_accumulate(v, 1, MPI_INT, res, 1, MPI_INT, t, 3, 1, MPI_INT, MPI_SUM, win) ==
              MPI_SUCCESS,
          "a valid get_accumulate at the last int");
    OK(MPI_Win_flush(t, win));
    CHECK(res[0] == 42, "its old value %d", res[0]);
    res[0] = -7;
    CHECK(MPI_Get_accumulate(v, 1, MPI_INT, res, 1, MPI_INT, t, 4, 1, MPI_INT, MPI_SUM, win) ==
              MPI_ERR_RMA_RANGE,
          "a get_accumulate past the end");
    CHECK(MPI_Fetch_and_op(v, res, MPI_INT, t, 4, MPI_SUM, win) == MPI_ERR_RMA_RANGE,
          "fetch_and_op past the end");
    CHECK(MPI_Fetch_and_op(v, res, MPI_INT, t, 0, MPI_MAXLOC, win) == MPI_ERR_OP,
          "fetch_and_op MPI_MAXLOC on an int");
    CHECK(MPI_Fetch_and_op(v, res, MPI_INT, -5, 0, MPI_SUM, win) == MPI_ERR_RANK,
          "fetch_and_op to rank -5");
    CHECK(MPI_Fetch_and_op(v, NULL, MPI_INT, t, 0, MPI_SUM, win) == MPI_ERR_BUFFER,
          "fetch_and_op into NULL");
    CHECK(MPI_Fetch_and_op(v, res, MPI_DATATYPE_NULL, t, 0, MPI_SUM, win) == MPI_ERR_TYPE,
          "fetch_and_op on MPI_DATATYPE_NULL");
    CHECK(MPI_Fetch_and_op(v, res, MPI_INT, MPI_PROC_NULL, 0, MPI_SUM, win) == MPI_SUCCESS,
          "fetch_and_op to MPI_PROC_NULL");
    CHECK(res[0] == -7 && res[1] == -7, "a refused fetch wrote its result: %d %d", res[0], res[1]);
    CHECK(MPI_Compare_and_swap(&dv, &dv, &dv, MPI_DOUBLE, t, 0, win) == MPI_ERR_TYPE,
          "compare_and_swap on a double");
    CHECK(MPI_Compare_and_swap(v, NULL, res, MPI_INT, t, 0, win) == MPI_ERR_BUFFER,
          "compare_and_swap with a NULL compare");
    CHECK(MPI_Compare_and_swap(v, v, res, MPI_INT, t, 4, win) == MPI_ERR_RMA_RANGE,
          "compare_and_swap past the end");
    CHECK(MPI_Compare_and_swap(v, v, res, MPI_INT, size, 0, win) == MPI_ERR_RANK,
          "compare_and_swap to rank size");
    CHECK(res[0] == -7, "a refused compare_and_swap wrote its result: %d", res[0]);
    OK(MPI_Win_unlock_all(win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    /* Only the valid get_accumulate (+1 at [3]) landed. */
    for (int i = 0; i < 3; i++) CHECK(mem[i] == 42, "nothing written: [%d] = %d", i, mem[i]);
    CHECK(mem[3] == 43, "the valid get_accumulate: [3] = %d", mem[3]);
    OK(MPI_Op_free(&user));
    OK(MPI_Win_free(&win));
}

/* The C library's direct view of an osc-sm window (its small MPI_Put/MPI_Get and every
 * MPI_Win_flush form go through it with no call into the window) follows the epochs: each
 * synchronization that opens or closes one is seen by the next call, which either moves the
 * bytes or gets the general path's error with nothing written. */
static void fast_epochs(void) {
    int *mem = NULL;
    MPI_Win win;
    OK(MPI_Win_allocate_shared(4 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mem,
                               &win));
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    for (int i = 0; i < 4; i++) mem[i] = 42;
    OK(MPI_Barrier(MPI_COMM_WORLD));
    const int t = right(), l = left();
    int v[4] = {1, 2, 3, 4}, got[4] = {-7, -7, -7, -7};
    /* A fence epoch, then closed by MPI_MODE_NOSUCCEED: the put after it is refused. */
    OK(MPI_Win_fence(0, win));
    OK(MPI_Put(&v[0], 1, MPI_INT, t, 0, 1, MPI_INT, win));
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
    CHECK(MPI_Put(&v[1], 1, MPI_INT, t, 1, 1, MPI_INT, win) == MPI_ERR_RMA_SYNC,
          "a put after the last fence");
    CHECK(MPI_Get(got, 1, MPI_INT, t, 0, 1, MPI_INT, win) == MPI_ERR_RMA_SYNC,
          "a get after the last fence");
    CHECK(MPI_Win_flush_local_all(win) == MPI_ERR_RMA_SYNC, "flush_local_all without lock");
    /* A lock of the right neighbour only: the others are refused, flushes of them too. */
    OK(MPI_Win_lock(MPI_LOCK_SHARED, t, 0, win));
    OK(MPI_Get(got, 1, MPI_INT, t, 0, 1, MPI_INT, win));
    OK(MPI_Win_flush_local(t, win));
    CHECK(got[0] == 1, "the get in a lock epoch: %d", got[0]);
    OK(MPI_Win_flush_all(win));
    OK(MPI_Win_flush_local_all(win));
    CHECK(MPI_Put(v, 1, MPI_INT, t, 4, 1, MPI_INT, win) == MPI_ERR_RMA_RANGE,
          "a put past the end in a lock epoch");
    CHECK(MPI_Put(v, 2, MPI_INT, t, 3, 2, MPI_INT, win) == MPI_ERR_RMA_RANGE,
          "a put straddling the end in a lock epoch");
    CHECK(MPI_Get(got, 1, MPI_INT, t, -1, 1, MPI_INT, win) == MPI_ERR_RMA_RANGE,
          "a get before the start in a lock epoch");
    CHECK(MPI_Put(v, 1, MPI_INT, t, (MPI_Aint)1 << 62, 1, MPI_INT, win) == MPI_ERR_RMA_RANGE,
          "a put at a displacement whose byte offset overflows");
    if (l != t) {
        CHECK(MPI_Put(v, 1, MPI_INT, l, 0, 1, MPI_INT, win) == MPI_ERR_RMA_SYNC,
              "a put to a rank not locked");
        CHECK(MPI_Win_flush(l, win) == MPI_ERR_RMA_SYNC, "a flush of a rank not locked");
    }
    OK(MPI_Win_unlock(t, win));
    CHECK(MPI_Put(v, 1, MPI_INT, t, 1, 1, MPI_INT, win) == MPI_ERR_RMA_SYNC,
          "a put after the unlock");
    CHECK(MPI_Win_flush(t, win) == MPI_ERR_RMA_SYNC, "a flush after the unlock");
    /* lock_all: puts of 1 to 4 ints and chars to every byte, then unlock_all closes all. */
    OK(MPI_Win_lock_all(0, win));
    OK(MPI_Put(&v[1], 3, MPI_INT, t, 1, 3, MPI_INT, win));
    OK(MPI_Win_flush(t, win));
    OK(MPI_Get(got, 4, MPI_INT, t, 0, 4, MPI_INT, win));
    OK(MPI_Win_flush_local(t, win));
    for (int i = 0; i < 4; i++) CHECK(got[i] == v[i], "got[%d] = %d", i, got[i]);
    OK(MPI_Win_unlock_all(win));
    CHECK(MPI_Get(got, 1, MPI_INT, t, 0, 1, MPI_INT, win) == MPI_ERR_RMA_SYNC,
          "a get after unlock_all");
    CHECK(MPI_Win_flush_all(win) == MPI_ERR_RMA_SYNC, "flush_all after unlock_all");
    OK(MPI_Barrier(MPI_COMM_WORLD));
    for (int i = 0; i < 4; i++) CHECK(mem[i] == v[i], "[%d] = %d", i, mem[i]);
    OK(MPI_Win_free(&win));
}

/* MPI_Win_post and MPI_Win_start naming other groups from one epoch to the next (the C
 * library keeps each one's last group per window, by its members): groups made afresh every
 * epoch and freed, so that their handles come back naming other members, the neighbour put to
 * alternating; a group with a process outside the window's group refused every time, nothing
 * kept of it. */
static void pscw_groups(void) {
    int *mem = NULL;
    MPI_Win win;
    OK(MPI_Win_allocate_shared(4 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mem,
                               &win));
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    for (int i = 0; i < 4; i++) mem[i] = -1;
    OK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_Group world;
    OK(MPI_Comm_group(MPI_COMM_WORLD, &world));
    const int r = right(), l = left();
    for (int e = 0; e < 6; e++) {
        /* Even epochs: everyone puts to its right neighbour; odd ones: to its left. */
        int to_rank = e % 2 ? l : r, from_rank = e % 2 ? r : l;
        MPI_Group to, from;
        OK(MPI_Group_incl(world, 1, &from_rank, &from));
        OK(MPI_Group_incl(world, 1, &to_rank, &to));
        OK(MPI_Win_post(from, 0, win));
        OK(MPI_Win_start(to, 0, win));
        int v = 100 * e + rank;
        OK(MPI_Put(&v, 1, MPI_INT, to_rank, e % 4, 1, MPI_INT, win));
        if (l != r)
            CHECK(MPI_Put(&v, 1, MPI_INT, from_rank, 0, 1, MPI_INT, win) == MPI_ERR_RMA_SYNC,
                  "epoch %d: a put to a rank outside the start's group", e);
        OK(MPI_Win_complete(win));
        OK(MPI_Win_wait(win));
        CHECK(mem[e % 4] == 100 * e + from_rank, "epoch %d: [%d] = %d", e, e % 4, mem[e % 4]);
        OK(MPI_Group_free(&from));
        OK(MPI_Group_free(&to));
    }
    OK(MPI_Win_free(&win));
    /* A window of this process alone: a group naming a neighbour is not in its group. */
    int *own = NULL;
    OK(MPI_Win_allocate(sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_SELF, &own, &win));
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    *own = -1;
    if (size > 1) {
        MPI_Group other;
        OK(MPI_Group_incl(world, 1, &r, &other));
        for (int i = 0; i < 2; i++) {
            CHECK(MPI_Win_post(other, 0, win) == MPI_ERR_GROUP, "post to a rank outside (%d)", i);
            CHECK(MPI_Win_start(other, 0, win) == MPI_ERR_GROUP, "start of a rank outside (%d)", i);
        }
        OK(MPI_Group_free(&other));
    }
    MPI_Group me;
    OK(MPI_Group_incl(world, 1, &rank, &me));
    for (int e = 0; e < 2; e++) {
        OK(MPI_Win_post(me, 0, win));
        OK(MPI_Win_start(me, 0, win));
        int v = 10 + e;
        OK(MPI_Put(&v, 1, MPI_INT, 0, 0, 1, MPI_INT, win));
        OK(MPI_Win_complete(win));
        OK(MPI_Win_wait(win));
        CHECK(*own == 10 + e, "a put to itself in epoch %d: %d", e, *own);
    }
    OK(MPI_Group_free(&me));
    OK(MPI_Group_free(&world));
    OK(MPI_Win_free(&win));
}

/* A pause between a read and the write that depends on it: an exclusion that fails lets
 * another rank in there. */
static void pause_a_little(void) {
    for (volatile int k = 0; k < 200; k++) {
    }
}

/* Passive-target locks through the C library's fast path (osc-sm: an uncontended lock is one
 * atomic on the target's lock word, a contended one is the general path's wait) still
 * exclude: every rank increments rank 0's two counters ROUNDS times, each by a get, a flush
 * and a put in an exclusive epoch, a pause between the get and the put; readers in shared
 * epochs (MPI_Win_lock and MPI_Win_lock_all) must never see the counters differ, and the
 * totals are exact. Then the misuses of lock and unlock get their errors, with the fast
 * path in front of them. */
static void fast_locks(void) {
    int64_t *c = NULL;
    MPI_Win win;
    OK(MPI_Win_allocate_shared(rank == 0 ? 2 * sizeof(int64_t) : 0, sizeof(int64_t),
                               MPI_INFO_NULL, MPI_COMM_WORLD, &c, &win));
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    MPI_Aint sz;
    int du;
    OK(MPI_Win_shared_query(win, 0, &sz, &du, &c));
    if (rank == 0) c[0] = c[1] = 0;
    OK(MPI_Barrier(MPI_COMM_WORLD));
    const int rounds = 400;
    int torn = 0;
    for (int i = 0; i < rounds; i++) {
        int64_t x[2] = {0, 0};
        POLL(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
        POLL(MPI_Get(x, 2, MPI_INT64_T, 0, 0, 2, MPI_INT64_T, win));
        POLL(MPI_Win_flush(0, win));
        pause_a_little();
        x[0]++;
        POLL(MPI_Put(&x[0], 1, MPI_INT64_T, 0, 0, 1, MPI_INT64_T, win));
        POLL(MPI_Win_flush(0, win));
        pause_a_little();
        x[1]++;
        POLL(MPI_Put(&x[1], 1, MPI_INT64_T, 0, 1, 1, MPI_INT64_T, win));
        POLL(MPI_Win_unlock(0, win));
        int64_t y[2] = {0, -1};
        if (i % 2 == 0) {
            POLL(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
            POLL(MPI_Get(y, 2, MPI_INT64_T, 0, 0, 2, MPI_INT64_T, win));
            POLL(MPI_Win_unlock(0, win));
        } else {
            POLL(MPI_Win_lock_all(0, win));
            POLL(MPI_Get(y, 2, MPI_INT64_T, 0, 0, 2, MPI_INT64_T, win));
            POLL(MPI_Win_unlock_all(win));
        }
        torn += y[0] != y[1];
    }
    CHECK(torn == 0, "%d shared epochs saw an exclusive one half done", torn);
    OK(MPI_Barrier(MPI_COMM_WORLD));
    int64_t total = (int64_t)rounds * size;
    if (rank == 0)
        CHECK(c[0] == total && c[1] == total, "exclusive increments %ld %ld of %ld", (long)c[0],
              (long)c[1], (long)total);
    OK(MPI_Barrier(MPI_COMM_WORLD));

    /* Misuse: each its error class, the epochs as they were. */
    const int64_t v = 5;
    CHECK(MPI_Win_unlock(0, win) == MPI_ERR_RMA_SYNC, "unlock without lock");
    CHECK(MPI_Win_unlock_all(win) == MPI_ERR_RMA_SYNC, "unlock_all without lock_all");
    CHECK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE + MPI_LOCK_SHARED, 0, 0, win) == MPI_ERR_LOCKTYPE,
          "a lock type that is neither");
    CHECK(MPI_Win_lock(MPI_LOCK_SHARED, size, 0, win) == MPI_ERR_RANK, "lock of rank size");
    CHECK(MPI_Win_unlock(-7, win) == MPI_ERR_RANK, "unlock of rank -7");
    OK(MPI_Win_lock(MPI_LOCK_SHARED, MPI_PROC_NULL, 0, win));
    OK(MPI_Win_unlock(MPI_PROC_NULL, win));
    OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
    CHECK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win) == MPI_ERR_RMA_SYNC, "locked twice");
    CHECK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win) == MPI_ERR_RMA_SYNC, "locked twice (shared)");
    CHECK(MPI_Win_lock_all(0, win) == MPI_ERR_RMA_SYNC, "lock_all inside a lock epoch");
    CHECK(MPI_Win_unlock_all(win) == MPI_ERR_RMA_SYNC, "unlock_all inside a lock epoch");
    if (size > 1) {
        CHECK(MPI_Win_unlock(1, win) == MPI_ERR_RMA_SYNC, "unlock of a rank not locked");
        CHECK(MPI_Put(&v, 1, MPI_INT64_T, 1, 0, 1, MPI_INT64_T, win) == MPI_ERR_RMA_SYNC,
              "a put to a rank not locked");
    }
    OK(MPI_Win_unlock(0, win));
    CHECK(MPI_Put(&v, 1, MPI_INT64_T, 0, 0, 1, MPI_INT64_T, win) == MPI_ERR_RMA_SYNC,
          "a put after the unlock");
    CHECK(MPI_Win_unlock(0, win) == MPI_ERR_RMA_SYNC, "unlocked twice");
    OK(MPI_Win_lock_all(0, win));
    CHECK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win) == MPI_ERR_RMA_SYNC, "lock inside lock_all");
    CHECK(MPI_Win_unlock(0, win) == MPI_ERR_RMA_SYNC, "unlock inside lock_all");
    CHECK(MPI_Win_lock_all(0, win) == MPI_ERR_RMA_SYNC, "lock_all twice");
    OK(MPI_Win_unlock_all(win));
    CHECK(MPI_Win_flush_all(win) == MPI_ERR_RMA_SYNC, "flush_all after unlock_all");
    OK(MPI_Barrier(MPI_COMM_WORLD));
    /* MPI_MODE_NOCHECK (no other rank locks meanwhile: between barriers), exclusive and
     * lock_all: the operations go, and the epoch closes. */
    if (rank == 0) {
        OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, MPI_MODE_NOCHECK, win));
        OK(MPI_Put(&v, 1, MPI_INT64_T, 0, 1, 1, MPI_INT64_T, win));
        OK(MPI_Win_unlock(0, win));
        OK(MPI_Win_lock_all(MPI_MODE_NOCHECK, win));
        OK(MPI_Put(&v, 1, MPI_INT64_T, 0, 0, 1, MPI_INT64_T, win));
        OK(MPI_Win_unlock_all(win));
        CHECK(c[0] == 5 && c[1] == 5, "puts under NOCHECK: %ld %ld", (long)c[0], (long)c[1]);
        CHECK(MPI_Put(&v, 1, MPI_INT64_T, 0, 0, 1, MPI_INT64_T, win) == MPI_ERR_RMA_SYNC,
              "a put after a NOCHECK epoch");
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));
    /* A fence epoch, then a lock: the lock closes nothing it should not and works. */
    OK(MPI_Win_fence(0, win));
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
    OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
    int64_t got = -1;
    OK(MPI_Get(&got, 1, MPI_INT64_T, 0, 0, 1, MPI_INT64_T, win));
    OK(MPI_Win_unlock(0, win));
    CHECK(got == 5, "a get in a lock epoch after fences: %ld", (long)got);
    OK(MPI_Win_free(&win));
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    load_store();
    every_call(1);
    every_call(0);
    contention();
    bulk();
    wide();
    bad_input();
    fast_values();
    fast_bad_input();
    fast_epochs();
    fast_locks();
    pscw_groups();
    int rc = summary("rma_shared");
    MPI_Finalize();
    return rc;
}
