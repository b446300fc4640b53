/* One-sided communication (MPI-3 RMA): windows made by MPI_Win_create, _allocate and
 * _create_dynamic, and _allocate_shared (with _shared_query); put, get, every predefined
 * accumulate operation (MPI_REPLACE, MPI_NO_OP, MINLOC/MAXLOC on pairs included),
 * get-accumulate, fetch-and-op, compare-and-swap and the request-based forms; every synchronization (fence, post/start/complete/wait/test, lock/unlock shared and
 * exclusive, lock_all, flush(_all)(_local), sync); derived datatypes on both sides; window
 * attributes, name, group, info and error handlers; bad input answered with the RMA error
 * classes and nothing written at the target. Runs on any number of ranks (1 included). */
#include <complex.h>
#include <float.h>
#include <stdint.h>

#include "check.h"

static int rank, size;

static int left(void) { return (rank + size - 1) % size; }
static int right(void) { return (rank + 1) % size; }

/* Fence epochs on a window over the program's memory: put, get, accumulate with every
 * predefined operation on int, a few on double, get_accumulate with MPI_NO_OP. */
static void fence_epochs(void) {
    int buf[16];
    for (int i = 0; i < 16; i++) buf[i] = -1;
    MPI_Win win;
    OK(MPI_Win_create(buf, sizeof buf, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    OK(MPI_Win_fence(0, win));
    int mine = 100 + rank;
    OK(MPI_Put(&mine, 1, MPI_INT, right(), 0, 1, MPI_INT, win));
    OK(MPI_Win_fence(0, win));
    CHECK(buf[0] == 100 + left(), "put from the left neighbour: %d", buf[0]);
    int got = 0;
    OK(MPI_Get(&got, 1, MPI_INT, left(), 0, 1, MPI_INT, win));
    OK(MPI_Win_fence(0, win));
    CHECK(got == 100 + (rank + size - 2) % size, "get of the left's cell: %d", got);

    /* Every predefined operation on int: cell 2 + k of rank 0 starts at a known value and
     * every rank combines its own value. */
    MPI_Op ops[] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX, MPI_BAND, MPI_BOR,
                    MPI_BXOR, MPI_LAND, MPI_LOR, MPI_LXOR, MPI_REPLACE};
    int nops = (int)(sizeof ops / sizeof ops[0]);
    int start = 6; /* 0b110 */
    if (rank == 0)
        for (int k = 0; k < nops; k++) buf[2 + k] = start;
    OK(MPI_Win_fence(0, win));
    int v = rank + 1;
    for (int k = 0; k < nops; k++)
        OK(MPI_Accumulate(&v, 1, MPI_INT, 0, 2 + k, 1, MPI_INT, ops[k], win));
    OK(MPI_Win_fence(0, win));
    if (rank == 0) {
        int sum = start, prod = start, mn = start, mx = start, band = start, bor = start,
            bxor = start, land = 1, lor = 1, lxor = 1;
        for (int r = 0; r < size; r++) {
            int x = r + 1;
            sum += x, prod *= x, mn = x < mn ? x : mn, mx = x > mx ? x : mx;
            band &= x, bor |= x, bxor ^= x;
            land = land && x, lor = lor || x, lxor = !lxor != !x;
        }
        int want[] = {sum, prod, mn, mx, band, bor, bxor, land, lor, lxor};
        for (int k = 0; k < nops - 1; k++)
            CHECK(buf[2 + k] == want[k], "op %d: %d, want %d", k, buf[2 + k], want[k]);
        CHECK(buf[2 + nops - 1] >= 1 && buf[2 + nops - 1] <= size, "replace: one rank's value");
    }
    /* get_accumulate with MPI_NO_OP reads; with MPI_SUM returns the old value. */
    int old = -5;
    OK(MPI_Get_accumulate(NULL, 0, MPI_INT, &old, 1, MPI_INT, 0, 2, 1, MPI_INT, MPI_NO_OP, win));
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
    if (rank == 0) CHECK(old == buf[2], "no_op fetch: %d vs %d", old, buf[2]);
    OK(MPI_Win_free(&win));
    CHECK(win == MPI_WIN_NULL, "free sets MPI_WIN_NULL");

    /* Doubles. */
    double d[2] = {1.5, -1.0};
    OK(MPI_Win_create(d, sizeof d, sizeof(double), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    OK(MPI_Win_fence(MPI_MODE_NOPRECEDE, win));
    double one = 1.0, big = (double)rank;
    OK(MPI_Accumulate(&one, 1, MPI_DOUBLE, 0, 0, 1, MPI_DOUBLE, MPI_SUM, win));
    OK(MPI_Accumulate(&big, 1, MPI_DOUBLE, 0, 1, 1, MPI_DOUBLE, MPI_MAX, win));
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
    if (rank == 0)
        CHECK(d[0] == 1.5 + size && d[1] == (double)(size - 1), "double sum/max: %g %g", d[0],
              d[1]);
    OK(MPI_Win_free(&win));

    /* long double sums and complex products: the C library's own arithmetic at the target. */
    long double ld = 0.5L;
    double _Complex zc = 1.0;
    MPI_Win wl, wz;
    OK(MPI_Win_create(&ld, sizeof ld, sizeof ld, MPI_INFO_NULL, MPI_COMM_WORLD, &wl));
    OK(MPI_Win_create(&zc, sizeof zc, sizeof zc, MPI_INFO_NULL, MPI_COMM_WORLD, &wz));
    OK(MPI_Win_fence(0, wl));
    OK(MPI_Win_fence(0, wz));
    long double add = 0.25L;
    double _Complex mul = 1.0 * _Complex_I; /* i */
    OK(MPI_Accumulate(&add, 1, MPI_LONG_DOUBLE, 0, 0, 1, MPI_LONG_DOUBLE, MPI_SUM, wl));
    OK(MPI_Accumulate(&mul, 1, MPI_C_DOUBLE_COMPLEX, 0, 0, 1, MPI_C_DOUBLE_COMPLEX, MPI_PROD,
                      wz));
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, wl));
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, wz));
    if (rank == 0) {
        CHECK(ld == 0.5L + 0.25L * size, "long double sum: %Lg", ld);
        double _Complex want = 1.0;
        for (int r = 0; r < size; r++) want *= 1.0 * _Complex_I;
        CHECK(zc == want, "complex product: %g%+gi", creal(zc), cimag(zc));
    }
    OK(MPI_Win_free(&wl));
    OK(MPI_Win_free(&wz));

    /* MPI_MINLOC / MPI_MAXLOC on pairs, MPI_DOUBLE_INT with its C padding included. */
    struct {
        int v, i;
    } ii[1] = {{1000, -1}};
    struct {
        double v;
        int i;
    } di[2] = {{-1.0, -1}, {-1.0, -1}};
    MPI_Win wi, wd;
    OK(MPI_Win_create(ii, sizeof ii, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &wi));
    OK(MPI_Win_create(di, sizeof di, sizeof di[0], MPI_INFO_NULL, MPI_COMM_WORLD, &wd));
    OK(MPI_Win_fence(0, wi));
    OK(MPI_Win_fence(0, wd));
    struct {
        int v, i;
    } mine2 = {size - rank, rank};
    OK(MPI_Accumulate(&mine2, 1, MPI_2INT, 0, 0, 1, MPI_2INT, MPI_MINLOC, wi));
    struct {
        double v;
        int i;
    } mined[2] = {{(double)(rank % 2), rank}, {0.5, rank}};
    OK(MPI_Accumulate(mined, 2, MPI_DOUBLE_INT, 0, 0, 2, MPI_DOUBLE_INT, MPI_MAXLOC, wd));
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, wi));
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, wd));
    if (rank == 0) {
        CHECK(ii[0].v == 1 && ii[0].i == size - 1, "minloc: %d at %d", ii[0].v, ii[0].i);
        CHECK(di[0].v == (size > 1 ? 1.0 : 0.0) && di[0].i == (size > 1 ? 1 : 0),
              "maxloc: %g at %d", di[0].v, di[0].i);
        CHECK(di[1].v == 0.5 && di[1].i == 0, "maxloc ties keep the lowest index: %g at %d",
              di[1].v, di[1].i);
    }
    OK(MPI_Win_free(&wi));
    OK(MPI_Win_free(&wd));
}

/* MPI_MINLOC / MPI_MAXLOC on every C pair type (MPI_LONG_DOUBLE_INT included: 20 bytes of
 * data in a 32-byte struct), on a created and an allocated window: strided accumulates
 * from every rank to every target (the lower index wins ties), then get-accumulate,
 * fetch-and-op, replace and the request-based forms on them; and the operations MPI does
 * not define on pairs refused with nothing written. Window elements: 0, 2, 4 take MINLOC,
 * 1, 3, 5 MAXLOC. */
#define PAIR_BLOCK(NAME, TV, MPIT)                                                          \
    static void pairs_##NAME(int allocate) {                                                \
        typedef struct {                                                                    \
            TV v;                                                                           \
            int i;                                                                          \
        } P;                                                                                \
        P *w, mem[6];                                                                       \
        MPI_Win win;                                                                        \
        if (allocate) {                                                                     \
            OK(MPI_Win_allocate(sizeof mem, sizeof(P), MPI_INFO_NULL, MPI_COMM_WORLD, &w,  \
                                &win));                                                     \
        } else {                                                                            \
            w = mem;                                                                        \
            OK(MPI_Win_create(w, sizeof mem, sizeof(P), MPI_INFO_NULL, MPI_COMM_WORLD,     \
                              &win));                                                       \
        }                                                                                   \
        OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, win));                                 \
        for (int k = 0; k < 6; k++) w[k] = (P){k % 2 ? -50 : 50, 99};                       \
        OK(MPI_Win_unlock(rank, win));                                                      \
        OK(MPI_Barrier(MPI_COMM_WORLD));                                                    \
        MPI_Datatype every_other;                                                           \
        OK(MPI_Type_vector(3, 1, 2, MPIT, &every_other));                                   \
        OK(MPI_Type_commit(&every_other));                                                  \
        /* MINLOC: the least value (1 at 0), a tie (5: index 10), the least (1 at size-1);  \
         * MAXLOC: the greatest (size at size-1), a tie above the target (60: index 20),    \
         * values below the target's (it stays -50 at 99). */                               \
        P lo[3] = {{rank + 1, rank}, {5, 10 + rank}, {size - rank, rank}};                  \
        P hi[3] = {{rank + 1, rank}, {60, 20 + rank}, {-60 - rank, rank}};                  \
        OK(MPI_Win_lock_all(0, win));                                                       \
        for (int t = 0; t < size; t++) {                                                    \
            OK(MPI_Accumulate(lo, 3, MPIT, t, 0, 1, every_other, MPI_MINLOC, win));         \
            OK(MPI_Accumulate(hi, 3, MPIT, t, 1, 1, every_other, MPI_MAXLOC, win));         \
        }                                                                                   \
        OK(MPI_Win_unlock_all(win));                                                        \
        OK(MPI_Barrier(MPI_COMM_WORLD));                                                    \
        P want[6] = {{1, 0}, {size, size - 1}, {5, 10}, {60, 20}, {1, size - 1}, {-50, 99}};\
        P got[6];                                                                           \
        OK(MPI_Win_lock(MPI_LOCK_SHARED, right(), 0, win));                                 \
        OK(MPI_Get_accumulate(NULL, 0, MPIT, got, 6, MPIT, right(), 0, 6, MPIT, MPI_NO_OP,  \
                              win));                                                        \
        OK(MPI_Win_unlock(right(), win));                                                   \
        for (int k = 0; k < 6; k++)                                                         \
            CHECK(got[k].v == want[k].v && got[k].i == want[k].i,                           \
                  #MPIT " %s element %d: %g at %d, not %g at %d",                           \
                  allocate ? "allocated" : "created", k, (double)got[k].v, got[k].i,        \
                  (double)want[k].v, want[k].i);                                            \
        OK(MPI_Barrier(MPI_COMM_WORLD));                                                    \
        /* Each rank alone on its right neighbour: fetch-and-op MINLOC (0 wins), a          \
         * get-accumulate MAXLOC that loses (the old value stays), replace by the request  \
         * forms. */                                                                        \
        P zero = {0, 1000 + rank}, old, low = {-7, 3}, old2[2], sub[2] = {{2, 77}, {3, 88}};\
        MPI_Request req[2];                                                                 \
        OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, right(), 0, win));                              \
        OK(MPI_Fetch_and_op(&zero, &old, MPIT, right(), 0, MPI_MINLOC, win));               \
        OK(MPI_Get_accumulate(&low, 1, MPIT, old2, 1, MPIT, right(), 3, 1, MPIT,            \
                              MPI_MAXLOC, win));                                            \
        OK(MPI_Win_flush(right(), win));                                                    \
        CHECK(old2[0].v == 60 && old2[0].i == 20, #MPIT " get-accumulate fetched %g at %d", \
              (double)old2[0].v, old2[0].i);                                                \
        OK(MPI_Rget_accumulate(sub, 2, MPIT, old2, 2, MPIT, right(), 4, 2, MPIT,            \
                               MPI_REPLACE, win, &req[0]));                                 \
        OK(MPI_Raccumulate(&zero, 1, MPIT, right(), 2, 1, MPIT, MPI_MAXLOC, win, &req[1])); \
        OK(MPI_Waitall(2, req, MPI_STATUSES_IGNORE));                                       \
        OK(MPI_Win_unlock(right(), win));                                                   \
        CHECK(old.v == 1 && old.i == 0, #MPIT " fetch-and-op fetched %g at %d",             \
              (double)old.v, old.i);                                                        \
        CHECK(old2[0].v == 1 && old2[0].i == size - 1 && old2[1].v == -50 &&                \
                  old2[1].i == 99,                                                          \
              #MPIT " rget-accumulate fetched %g at %d, %g at %d", (double)old2[0].v,       \
              old2[0].i, (double)old2[1].v, old2[1].i);                                     \
        /* Not defined on pairs: refused, nothing written. */                               \
        OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));                                 \
        OK(MPI_Win_lock(MPI_LOCK_SHARED, right(), 0, win));                                 \
        CHECK(MPI_Accumulate(&low, 1, MPIT, right(), 0, 1, MPIT, MPI_SUM, win) == MPI_ERR_OP,\
              #MPIT " MPI_SUM");                                                            \
        CHECK(MPI_Fetch_and_op(&low, &old, MPIT, right(), 0, MPI_MAX, win) == MPI_ERR_OP,   \
              #MPIT " fetch-and-op MPI_MAX");                                               \
        CHECK(MPI_Compare_and_swap(&low, &zero, &old, MPIT, right(), 0, win) ==             \
                  MPI_ERR_TYPE,                                                             \
              #MPIT " compare-and-swap");                                                   \
        OK(MPI_Win_unlock(right(), win));                                                   \
        OK(MPI_Barrier(MPI_COMM_WORLD));                                                    \
        OK(MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win));                                    \
        P end[6] = {{0, 1000 + left()}, {size, size - 1}, {5, 10}, {60, 20}, {2, 77},       \
                    {3, 88}};                                                               \
        for (int k = 0; k < 6; k++)                                                         \
            CHECK(w[k].v == end[k].v && w[k].i == end[k].i,                                 \
                  #MPIT " %s element %d at the end: %g at %d, not %g at %d",                \
                  allocate ? "allocated" : "created", k, (double)w[k].v, w[k].i,            \
                  (double)end[k].v, end[k].i);                                              \
        OK(MPI_Win_unlock(rank, win));                                                      \
        OK(MPI_Type_free(&every_other));                                                    \
        OK(MPI_Win_free(&win));                                                             \
    }
PAIR_BLOCK(float_int, float, MPI_FLOAT_INT)
PAIR_BLOCK(double_int, double, MPI_DOUBLE_INT)
PAIR_BLOCK(long_int, long, MPI_LONG_INT)
PAIR_BLOCK(two_int, int, MPI_2INT)
PAIR_BLOCK(short_int, short, MPI_SHORT_INT)
PAIR_BLOCK(long_double_int, long double, MPI_LONG_DOUBLE_INT)

static void pair_types(void) {
    for (int allocate = 0; allocate < 2; allocate++) {
        pairs_float_int(allocate);
        pairs_double_int(allocate);
        pairs_long_int(allocate);
        pairs_two_int(allocate);
        pairs_short_int(allocate);
        pairs_long_double_int(allocate);
    }
    /* long double values closer than a double resolves: compared as long doubles. */
    struct {
        long double v;
        int i;
    } ld = {1.0L, 5}, more = {1.0L + LDBL_EPSILON, 7}, old;
    MPI_Win win;
    OK(MPI_Win_create(&ld, sizeof ld, sizeof ld, MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, win));
    OK(MPI_Fetch_and_op(&more, &old, MPI_LONG_DOUBLE_INT, rank, 0, MPI_MAXLOC, win));
    OK(MPI_Win_unlock(rank, win));
    CHECK(old.v == 1.0L && old.i == 5 && ld.v == 1.0L + LDBL_EPSILON && ld.i == 7,
          "MAXLOC on long doubles 1 ulp apart: %Lg at %d", ld.v, ld.i);
    OK(MPI_Win_free(&win));
}

/* Derived datatypes: a strided target (vector) filled from a contiguous origin, and read
 * back into a strided origin. */
static void derived(void) {
    int buf[12];
    for (int i = 0; i < 12; i++) buf[i] = 0;
    MPI_Win win;
    OK(MPI_Win_create(buf, sizeof buf, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    MPI_Datatype every3;
    OK(MPI_Type_vector(4, 1, 3, MPI_INT, &every3));
    OK(MPI_Type_commit(&every3));
    int src[4] = {rank * 10 + 1, rank * 10 + 2, rank * 10 + 3, rank * 10 + 4};
    OK(MPI_Win_fence(0, win));
    OK(MPI_Put(src, 4, MPI_INT, right(), 0, 1, every3, win));
    OK(MPI_Win_fence(0, win));
    int l = left() * 10;
    CHECK(buf[0] == l + 1 && buf[3] == l + 2 && buf[6] == l + 3 && buf[9] == l + 4 &&
              buf[1] == 0 && buf[2] == 0,
          "vector target: %d %d %d %d", buf[0], buf[3], buf[6], buf[9]);
    int back[12] = {0};
    OK(MPI_Get(back, 1, every3, right(), 0, 1, every3, win));
    /* Accumulate through the vector too. */
    int ones[4] = {1, 1, 1, 1};
    OK(MPI_Win_fence(0, win));
    CHECK(back[0] == rank * 10 + 1 && back[9] == rank * 10 + 4 && back[1] == 0,
          "vector origin of a get: %d %d", back[0], back[9]);
    OK(MPI_Accumulate(ones, 4, MPI_INT, right(), 0, 1, every3, MPI_SUM, win));
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
    CHECK(buf[0] == l + 2 && buf[9] == l + 5, "vector accumulate: %d %d", buf[0], buf[9]);
    OK(MPI_Type_free(&every3));
    OK(MPI_Win_free(&win));
}

/* A transposing put and get on a created window (MPICH's transpose1 and transpose7 at a
 * quarter of their size): the target layout is N*N runs of one int, so an RDMA transfer per
 * run is a quarter million of them (the test's time limit catches a library that slows
 * down with their number). */
enum { XN = 512 };
static void transposed(void) {
    int *mine = malloc(sizeof(int) * XN * XN), *got = malloc(sizeof(int) * XN * XN);
    CHECK(mine && got, "allocating two %d x %d matrices", XN, XN);
    if (!mine || !got) return;
    for (int i = 0; i < XN * XN; i++) mine[i] = -1;
    MPI_Win win;
    OK(MPI_Win_create(mine, sizeof(int) * XN * XN, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD,
                      &win));
    MPI_Datatype column, xpose;
    OK(MPI_Type_vector(XN, 1, XN, MPI_INT, &column));
    OK(MPI_Type_create_hvector(XN, 1, sizeof(int), column, &xpose));
    OK(MPI_Type_commit(&xpose));
    for (int i = 0; i < XN * XN; i++) got[i] = rank * XN * XN + i;
    OK(MPI_Win_fence(0, win));
    OK(MPI_Put(got, XN * XN, MPI_INT, right(), 0, 1, xpose, win));
    OK(MPI_Win_fence(0, win));
    int bad = 0;
    for (int i = 0; i < XN && !bad; i++)
        for (int j = 0; j < XN; j++)
            if (mine[j * XN + i] != left() * XN * XN + i * XN + j) {
                bad = 1;
                CHECK(0, "transposed put: [%d][%d] = %d", j, i, mine[j * XN + i]);
                break;
            }
    /* Read the right neighbour's matrix (which holds this rank's, transposed) back through
     * the transposing type: this rank's own values come back in order. */
    for (int i = 0; i < XN * XN; i++) got[i] = -2;
    OK(MPI_Win_fence(0, win));
    OK(MPI_Get(got, XN * XN, MPI_INT, right(), 0, 1, xpose, win));
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
    for (int i = 0; i < XN * XN; i++)
        if (got[i] != rank * XN * XN + i) {
            CHECK(0, "transposed get: [%d] = %d", i, got[i]);
            break;
        }
    OK(MPI_Type_free(&column));
    OK(MPI_Type_free(&xpose));
    OK(MPI_Win_free(&win));
    free(mine);
    free(got);
}

/* Passive target on an allocated window: exclusive locks serialize fetch-and-add on rank 0's
 * counter; compare-and-swap; shared locks; lock_all with flushes and request-based calls. */
static void passive(void) {
    int64_t *mem = NULL;
    MPI_Win win;
    OK(MPI_Win_allocate(4 * sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, MPI_COMM_WORLD,
                        &mem, &win));
    CHECK(mem != NULL, "allocated memory");
    for (int i = 0; i < 4; i++) mem[i] = 0;
    OK(MPI_Barrier(MPI_COMM_WORLD));
    int64_t add = rank + 1, old = -1;
    OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
    OK(MPI_Fetch_and_op(&add, &old, MPI_INT64_T, 0, 0, MPI_SUM, win));
    OK(MPI_Win_unlock(0, win));
    int64_t *olds = malloc(sizeof(int64_t) * size);
    OK(MPI_Allgather(&old, 1, MPI_INT64_T, olds, 1, MPI_INT64_T, MPI_COMM_WORLD));
    /* The fetched values are the partial sums of one order: distinct. */
    for (int a = 0; a < size; a++)
        for (int b = a + 1; b < size; b++)
            CHECK(olds[a] != olds[b], "fetched %lld twice", (long long)olds[a]);
    free(olds);
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) {
        OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
        CHECK(mem[0] == (int64_t)size * (size + 1) / 2, "counter %lld", (long long)mem[0]);
        OK(MPI_Win_unlock(0, win));
    }
    /* Compare-and-swap: only one rank wins cell 1 (0 -> rank + 1). */
    int64_t cmp = 0, mine = rank + 1, was = -1;
    OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
    OK(MPI_Compare_and_swap(&mine, &cmp, &was, MPI_INT64_T, 0, 1, win));
    OK(MPI_Win_unlock(0, win));
    int won = was == 0, winners = 0;
    OK(MPI_Allreduce(&won, &winners, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(winners == 1, "one compare-and-swap wins: %d", winners);

    /* lock_all: request-based calls, flushes. */
    OK(MPI_Win_lock_all(0, win));
    int64_t val = 1000 + rank, got = 0, fetched = 0, inc = 1;
    MPI_Request reqs[4];
    OK(MPI_Rput(&val, 1, MPI_INT64_T, right(), 2, 1, MPI_INT64_T, win, &reqs[0]));
    OK(MPI_Raccumulate(&inc, 1, MPI_INT64_T, 0, 3, 1, MPI_INT64_T, MPI_SUM, win, &reqs[1]));
    OK(MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE));
    OK(MPI_Win_flush(right(), win));
    OK(MPI_Rget(&got, 1, MPI_INT64_T, right(), 2, 1, MPI_INT64_T, win, &reqs[2]));
    OK(MPI_Wait(&reqs[2], MPI_STATUS_IGNORE));
    CHECK(got == 1000 + rank, "rget after flush: %lld", (long long)got);
    OK(MPI_Rget_accumulate(&inc, 1, MPI_INT64_T, &fetched, 1, MPI_INT64_T, 0, 3, 1, MPI_INT64_T,
                           MPI_SUM, win, &reqs[3]));
    int done = 0;
    while (!done) POLL(MPI_Test(&reqs[3], &done, MPI_STATUS_IGNORE));
    CHECK(fetched >= 1 && fetched < 2 * size, "rget_accumulate fetched %lld", (long long)fetched);
    OK(MPI_Win_flush_local_all(win));
    OK(MPI_Win_flush_all(win));
    OK(MPI_Win_flush_local(0, win));
    OK(MPI_Win_sync(win));
    OK(MPI_Win_unlock_all(win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    CHECK(mem[2] == 1000 + left(), "rput from the left: %lld", (long long)mem[2]);
    if (rank == 0) CHECK(mem[3] == 2 * size, "two increments per rank: %lld", (long long)mem[3]);
    OK(MPI_Win_free(&win));
}

/* MPI_Win_create windows (osc-rdma under ob1, osc-am under dr): read-modify-write by get and
 * put under an exclusive lock, serialized however late each grant comes (a lock request does
 * not wait for its grant: the target holds what follows it, and osc-rdma's transfers wait),
 * on a block above osc_rdma_small_limit (moved by RDMA under ob1) and on one counter (by
 * messages). */
static void created_locks(void) {
    enum { N = 1024, ROUNDS = 20 };
    int64_t *mem = calloc(N + 1, sizeof(int64_t)), *buf = malloc(N * sizeof(int64_t));
    CHECK(mem != NULL && buf != NULL, "allocated memory");
    MPI_Win win;
    OK(MPI_Win_create(mem, (N + 1) * sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL,
                      MPI_COMM_WORLD, &win));
    for (int r = 0; r < ROUNDS; r++) {
        OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
        OK(MPI_Get(buf, N, MPI_INT64_T, 0, 0, N, MPI_INT64_T, win));
        OK(MPI_Win_flush(0, win));
        for (int i = 0; i < N; i++) buf[i] += i + 1;
        OK(MPI_Put(buf, N, MPI_INT64_T, 0, 0, N, MPI_INT64_T, win));
        int64_t c = -1;
        OK(MPI_Get(&c, 1, MPI_INT64_T, 0, N, 1, MPI_INT64_T, win));
        OK(MPI_Win_flush(0, win));
        c += 1;
        OK(MPI_Put(&c, 1, MPI_INT64_T, 0, N, 1, MPI_INT64_T, win));
        OK(MPI_Win_unlock(0, win));
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) {
        OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
        int bad = -1;
        for (int i = 0; i < N && bad < 0; i++)
            if (mem[i] != (int64_t)ROUNDS * size * (i + 1)) bad = i;
        CHECK(bad < 0, "locked get/put cycles lost an update at element %d: %lld", bad,
              bad < 0 ? 0LL : (long long)mem[bad]);
        CHECK(mem[N] == (int64_t)ROUNDS * size, "locked counter %lld, expected %lld",
              (long long)mem[N], (long long)ROUNDS * size);
        OK(MPI_Win_unlock(0, win));
    }
    OK(MPI_Win_free(&win));
    free(mem);
    free(buf);
}

/* Many small puts and gets to one target in one passive epoch, then a flush: adjacent in
 * both address spaces (OSU's put_bw and get_bw: osc-rdma moves such a run as one transfer),
 * adjacent at the target only (the origin backwards), and of an odd size; every byte lands
 * where it belongs. An origin buffer reused after MPI_Win_flush_local leaves the first
 * put's value at the target (the transfers start by then, not at the unlock). */
static void small_transfers(void) {
    enum { N = 512, ODD = 3, K = 100 };
    const MPI_Aint half = N * sizeof(int64_t), odd_at = 2 * half;
    size_t bytes = 2 * half + ODD * K + 2 * sizeof(int64_t);
    char *mem = calloc(bytes, 1), *odd = malloc(ODD * K), *back = malloc(ODD * K);
    int64_t *src = malloc(half), *dst = malloc(2 * half);
    CHECK(mem != NULL && odd != NULL && back != NULL && src != NULL && dst != NULL,
          "allocated memory");
    MPI_Win win;
    OK(MPI_Win_create(mem, (MPI_Aint)bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    int t = right();
    for (int i = 0; i < N; i++) src[i] = (int64_t)rank * 100000 + i;
    for (int i = 0; i < ODD * K; i++) odd[i] = (char)(rank * 7 + i);
    OK(MPI_Win_lock(MPI_LOCK_SHARED, t, 0, win));
    for (int i = 0; i < N; i++)
        OK(MPI_Put(&src[i], 1, MPI_INT64_T, t, i * 8, 1, MPI_INT64_T, win));
    for (int i = 0; i < N; i++)
        OK(MPI_Put(&src[N - 1 - i], 1, MPI_INT64_T, t, half + i * 8, 1, MPI_INT64_T, win));
    for (int i = 0; i < K; i++)
        OK(MPI_Put(odd + ODD * i, ODD, MPI_CHAR, t, odd_at + ODD * i, ODD, MPI_CHAR, win));
    OK(MPI_Win_flush(t, win));
    for (int i = 0; i < 2 * N; i++) dst[i] = -1;
    for (int i = 0; i < 2 * N; i++)
        OK(MPI_Get(&dst[i], 1, MPI_INT64_T, t, i * 8, 1, MPI_INT64_T, win));
    for (int i = 0; i < K; i++)
        OK(MPI_Get(back + ODD * i, ODD, MPI_CHAR, t, odd_at + ODD * i, ODD, MPI_CHAR, win));
    OK(MPI_Win_flush(t, win));
    int bad = -1;
    for (int i = 0; i < N && bad < 0; i++)
        if (dst[i] != src[i] || dst[N + i] != src[N - 1 - i]) bad = i;
    CHECK(bad < 0, "small puts and gets: element %d is %lld and %lld", bad,
          bad < 0 ? 0LL : (long long)dst[bad], bad < 0 ? 0LL : (long long)dst[N + bad]);
    CHECK(memcmp(back, odd, ODD * K) == 0, "puts and gets of %d bytes", ODD);
    int64_t tmp = 7;
    OK(MPI_Put(&tmp, 1, MPI_INT64_T, t, odd_at + ODD * K, 1, MPI_INT64_T, win));
    OK(MPI_Win_flush_local(t, win));
    tmp = 8;
    OK(MPI_Put(&tmp, 1, MPI_INT64_T, t, odd_at + ODD * K + 8, 1, MPI_INT64_T, win));
    OK(MPI_Win_unlock(t, win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    int64_t last[2];
    memcpy(last, mem + odd_at + ODD * K, sizeof last);
    CHECK(last[0] == 7 && last[1] == 8, "an origin reused after flush_local: %lld %lld",
          (long long)last[0], (long long)last[1]);
    OK(MPI_Win_free(&win));
    free(mem);
    free(odd);
    free(back);
    free(src);
    free(dst);
}

/* Every rank hammers one counter window over rank 0's memory (MPI_Win_create) with
 * lock / accumulate / fetch-and-op / unlock, shared and exclusive locks alternating, plus a
 * get-increment-put under the exclusive ones (correct only if they exclude each other): no
 * update may be lost, and the fetch-and-op results are each value 0..n-1 once (their sum is
 * checked), whichever path (messages, RDMA) each operation took. */
static void locked_sums(void) {
    enum { ROUNDS = 300 };
    int64_t *mem = calloc(3, sizeof(int64_t));
    CHECK(mem != NULL, "allocated memory");
    MPI_Win win;
    OK(MPI_Win_create(mem, 3 * sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, MPI_COMM_WORLD,
                      &win));
    int64_t one = 1, fetched = 0, got_sum = 0, mine_excl = 0;
    for (int r = 0; r < ROUNDS; r++) {
        int excl = (r + rank) % 2 == 0;
        OK(MPI_Win_lock(excl ? MPI_LOCK_EXCLUSIVE : MPI_LOCK_SHARED, 0, 0, win));
        OK(MPI_Accumulate(&one, 1, MPI_INT64_T, 0, 0, 1, MPI_INT64_T, MPI_SUM, win));
        OK(MPI_Fetch_and_op(&one, &fetched, MPI_INT64_T, 0, 1, MPI_SUM, win));
        if (excl) {
            int64_t v = -1;
            OK(MPI_Get(&v, 1, MPI_INT64_T, 0, 2, 1, MPI_INT64_T, win));
            OK(MPI_Win_flush(0, win));
            v += 1;
            OK(MPI_Put(&v, 1, MPI_INT64_T, 0, 2, 1, MPI_INT64_T, win));
            mine_excl++;
        }
        OK(MPI_Win_unlock(0, win));
        got_sum += fetched;
    }
    int64_t sums[2] = {got_sum, mine_excl}, total[2] = {0, 0};
    OK(MPI_Reduce(sums, total, 2, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) {
        int64_t n = (int64_t)ROUNDS * size;
        OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
        CHECK(mem[0] == n, "locked accumulates: %lld, expected %lld", (long long)mem[0],
              (long long)n);
        CHECK(mem[1] == n, "locked fetch-and-ops: %lld, expected %lld", (long long)mem[1],
              (long long)n);
        CHECK(total[0] == n * (n - 1) / 2, "fetch-and-op results sum to %lld, expected %lld",
              (long long)total[0], (long long)(n * (n - 1) / 2));
        CHECK(mem[2] == total[1], "exclusive get/put increments: %lld, expected %lld",
              (long long)mem[2], (long long)total[1]);
        OK(MPI_Win_unlock(0, win));
    }
    OK(MPI_Win_free(&win));
    free(mem);
}

/* MPI_Accumulate, MPI_Fetch_and_op and MPI_Compare_and_swap from every rank at once on
 * one counter of a window over the program's memory, each target in turn (the caller's own
 * included), under MPI_Win_lock_all with a flush after each operation and under shared
 * locks: each operation adds one (the compare-and-swap retries until its swap took), so
 * the counters end exact only if no update is lost however each travels (osc-rdma: applied
 * by the origin itself by CMA within a node, by the target when it came as a message);
 * each rank's fetch-and-ops see its counter grow (accumulate_ordering). */
static void atomic_counters(void) {
    enum { ROUNDS = 150 };
    int64_t *mem = calloc(2, sizeof(int64_t));
    CHECK(mem != NULL, "allocated memory");
    MPI_Win win;
    OK(MPI_Win_create(mem, 2 * sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, MPI_COMM_WORLD,
                      &win));
    const int64_t one = 1;
    int64_t last[2][64], disorder = 0, retries = 0;
    for (int i = 0; i < 64; i++) last[0][i] = last[1][i] = -1;
    for (int mode = 0; mode < 2; mode++) {
        if (mode == 0) OK(MPI_Win_lock_all(0, win));
        for (int r = 0; r < ROUNDS; r++) {
            int t = r % size;
            if (mode == 1) OK(MPI_Win_lock(MPI_LOCK_SHARED, t, 0, win));
            int64_t f = -1, old = -1, seen = -1;
            OK(MPI_Accumulate(&one, 1, MPI_INT64_T, t, mode, 1, MPI_INT64_T, MPI_SUM, win));
            OK(MPI_Fetch_and_op(&one, &f, MPI_INT64_T, t, mode, MPI_SUM, win));
            OK(MPI_Win_flush(t, win));
            if (t < 64) {
                disorder += f <= last[mode][t];
                last[mode][t] = f;
            }
            OK(MPI_Fetch_and_op(NULL, &seen, MPI_INT64_T, t, mode, MPI_NO_OP, win));
            OK(MPI_Win_flush(t, win));
            for (;;) {
                int64_t next = seen + 1;
                OK(MPI_Compare_and_swap(&next, &seen, &old, MPI_INT64_T, t, mode, win));
                OK(MPI_Win_flush(t, win));
                if (old == seen) break;
                seen = old;
                retries++;
            }
            if (mode == 1) OK(MPI_Win_unlock(t, win));
        }
        if (mode == 0) OK(MPI_Win_unlock_all(win));
    }
    CHECK(disorder == 0, "%lld fetch-and-ops saw a counter no greater than before",
          (long long)disorder);
    OK(MPI_Barrier(MPI_COMM_WORLD));
    int64_t per = 0;
    for (int r = 0; r < ROUNDS; r++) per += r % size == rank;
    OK(MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win));
    for (int mode = 0; mode < 2; mode++)
        CHECK(mem[mode] == 3 * size * per,
              "rank %d's %s counter: %lld, expected %lld (%lld compare-and-swap retries)", rank,
              mode == 0 ? "flushed" : "locked", (long long)mem[mode],
              (long long)(3 * size * per), (long long)retries);
    OK(MPI_Win_unlock(rank, win));
    OK(MPI_Win_free(&win));
    free(mem);
}

/* Exclusive locks on a window over the program's memory exclude each other however they are
 * taken (osc-rdma: an atomic on the target's lock word within a node, messages otherwise),
 * on every target in turn, the caller's own included: each rank increments each target's
 * counter by a get, a pause and a put under MPI_LOCK_EXCLUSIVE, so two holders let in at
 * once lose an update; and under MPI_Win_lock_all two reads of a counter, a pause apart,
 * agree (no exclusive holder inside a shared epoch). */
static void exclusive_counters(void) {
    enum { ROUNDS = 240 };
    int64_t *mem = calloc(1, sizeof(int64_t));
    CHECK(mem != NULL, "allocated memory");
    MPI_Win win;
    OK(MPI_Win_create(mem, sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, MPI_COMM_WORLD,
                      &win));
    int torn = 0;
    for (int r = 0; r < ROUNDS; r++) {
        int t = (r + rank) % size;
        OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, t, 0, win));
        int64_t v = -1;
        OK(MPI_Get(&v, 1, MPI_INT64_T, t, 0, 1, MPI_INT64_T, win));
        OK(MPI_Win_flush(t, win));
        for (volatile int spin = 0; spin < 3000; spin++) {
        }
        v += 1;
        OK(MPI_Put(&v, 1, MPI_INT64_T, t, 0, 1, MPI_INT64_T, win));
        OK(MPI_Win_unlock(t, win));
        if (r % 8 == 0) {
            int64_t a = -1, b = -2;
            OK(MPI_Win_lock_all(0, win));
            OK(MPI_Get(&a, 1, MPI_INT64_T, t, 0, 1, MPI_INT64_T, win));
            OK(MPI_Win_flush(t, win));
            for (volatile int spin = 0; spin < 3000; spin++) {
            }
            OK(MPI_Get(&b, 1, MPI_INT64_T, t, 0, 1, MPI_INT64_T, win));
            OK(MPI_Win_unlock_all(win));
            torn += a != b;
        }
    }
    CHECK(torn == 0, "%d shared epochs saw an exclusive holder write", torn);
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win));
    CHECK(*mem == ROUNDS, "exclusive get/put increments of rank %d's counter: %lld, expected %d",
          rank, (long long)*mem, ROUNDS);
    OK(MPI_Win_unlock(rank, win));
    OK(MPI_Win_free(&win));
    free(mem);
}

/* Post/start/complete/wait: each rank exposes to its left neighbour and accesses its right;
 * MPI_Win_test polls the exposure epoch. */
static void pscw(void) {
    int buf[2] = {0, 0};
    MPI_Win win;
    OK(MPI_Win_create(buf, sizeof buf, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    MPI_Group world, from, to;
    OK(MPI_Comm_group(MPI_COMM_WORLD, &world));
    int l = left(), r = right();
    OK(MPI_Group_incl(world, 1, &l, &from));
    OK(MPI_Group_incl(world, 1, &r, &to));
    for (int round = 0; round < 3; round++) {
        OK(MPI_Win_post(from, 0, win));
        OK(MPI_Win_start(to, 0, win));
        int v = rank * 100 + round;
        OK(MPI_Put(&v, 1, MPI_INT, r, round % 2, 1, MPI_INT, win));
        OK(MPI_Win_complete(win));
        if (round == 2) {
            int flag = 0;
            while (!flag) POLL(MPI_Win_test(win, &flag));
        } else {
            OK(MPI_Win_wait(win));
        }
        CHECK(buf[round % 2] == l * 100 + round, "round %d: %d", round, buf[round % 2]);
    }
    OK(MPI_Group_free(&from));
    OK(MPI_Group_free(&to));
    OK(MPI_Group_free(&world));
    OK(MPI_Win_free(&win));
}

/* A dynamic window: memory attached, its address shared, put and get, detached. */
static void dynamic(void) {
    MPI_Win win;
    OK(MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    int region[4] = {rank, rank, rank, rank};
    OK(MPI_Win_attach(win, region, sizeof region));
    MPI_Aint mine, *addrs = malloc(sizeof(MPI_Aint) * size);
    OK(MPI_Get_address(region, &mine));
    OK(MPI_Allgather(&mine, 1, MPI_AINT, addrs, 1, MPI_AINT, MPI_COMM_WORLD));
    int flavor_flag = 0, *flavor = NULL;
    OK(MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &flavor_flag));
    CHECK(flavor_flag && *flavor == MPI_WIN_FLAVOR_DYNAMIC, "dynamic flavor");
    OK(MPI_Win_fence(0, win));
    int v = 7 + rank, got = -1;
    OK(MPI_Put(&v, 1, MPI_INT, right(), addrs[right()] + sizeof(int), 1, MPI_INT, win));
    OK(MPI_Get(&got, 1, MPI_INT, right(), addrs[right()], 1, MPI_INT, win));
    OK(MPI_Win_fence(0, win));
    CHECK(region[1] == 7 + left(), "dynamic put: %d", region[1]);
    CHECK(got == right(), "dynamic get: %d", got);
    /* Outside the attached memory: only the target knows; its refusal comes back at the
     * fence that sees it arrive (this one or the next). Nothing is written. */
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    OK(MPI_Put(&v, 1, MPI_INT, right(), addrs[right()] + 64 * (MPI_Aint)sizeof(int), 1, MPI_INT,
               win));
    int e1 = MPI_Win_fence(0, win);
    int e2 = MPI_Win_fence(MPI_MODE_NOSUCCEED, win);
    CHECK((e1 == MPI_ERR_RMA_RANGE) != (e2 == MPI_ERR_RMA_RANGE), "outside the attached memory: %d %d", e1, e2);
    OK(MPI_Win_detach(win, region));
    CHECK(MPI_Win_detach(win, region) == MPI_ERR_RMA_ATTACH, "detached twice");
    free(addrs);
    OK(MPI_Win_free(&win));
}

/* MPI_Win_allocate_shared on the node's ranks: every member's part reached by load and
 * store through MPI_Win_shared_query, and by RMA calls too. */
static void shared(void) {
    MPI_Comm node;
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    int me, n;
    MPI_Comm_rank(node, &me);
    MPI_Comm_size(node, &n);
    int *mine = NULL;
    MPI_Win win;
    OK(MPI_Win_allocate_shared((MPI_Aint)sizeof(int) * (me + 1), sizeof(int), MPI_INFO_NULL,
                               node, &mine, &win));
    for (int i = 0; i <= me; i++) mine[i] = me * 10 + i;
    OK(MPI_Win_fence(0, win));
    for (int r = 0; r < n; r++) {
        MPI_Aint sz = 0;
        int du = 0, *p = NULL;
        OK(MPI_Win_shared_query(win, r, &sz, &du, &p));
        CHECK(sz == (MPI_Aint)sizeof(int) * (r + 1) && du == (int)sizeof(int), "query %d", r);
        for (int i = 0; i <= r; i++) CHECK(p[i] == r * 10 + i, "load of %d's [%d]", r, i);
    }
    OK(MPI_Win_fence(0, win));
    int v = 99 + me;
    OK(MPI_Put(&v, 1, MPI_INT, (me + 1) % n, 0, 1, MPI_INT, win));
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
    CHECK(mine[0] == 99 + (me + n - 1) % n, "a put into shared memory: %d", mine[0]);
    int *flavor = NULL, flag = 0;
    OK(MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &flag));
    CHECK(flag && *flavor == MPI_WIN_FLAVOR_SHARED, "shared flavor");
    MPI_Win plain;
    int buf[1];
    OK(MPI_Win_create(buf, sizeof buf, 1, MPI_INFO_NULL, node, &plain));
    OK(MPI_Win_set_errhandler(plain, MPI_ERRORS_RETURN));
    MPI_Aint sz;
    int du, *p;
    /* Another flavor (MPI 4.1): this process's memory only. */
    OK(MPI_Win_shared_query(plain, me, &sz, &du, &p));
    CHECK(p == buf && sz == (MPI_Aint)sizeof buf && du == 1, "own memory of a created window");
    if (n > 1) {
        OK(MPI_Win_shared_query(plain, (me + 1) % n, &sz, &du, &p));
        CHECK(p == NULL && sz == 0, "another's memory of a created window");
    }
    CHECK(MPI_Win_shared_query(plain, n, &sz, &du, &p) == MPI_ERR_RANK, "rank = size");
    OK(MPI_Win_free(&plain));
    OK(MPI_Win_free(&win));
    OK(MPI_Comm_free(&node));
}

static int handled;
static void win_handler(MPI_Win *win, int *code, ...) {
    (void)win;
    handled = *code;
}

/* Attributes, name, group, info, error handlers. */
static void queries(void) {
    char buf[40];
    MPI_Win win;
    OK(MPI_Win_create(buf, sizeof buf, 4, MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    void *base = NULL;
    MPI_Aint *sz = NULL;
    int *du = NULL, *model = NULL, *flavor = NULL, flag = 0;
    OK(MPI_Win_get_attr(win, MPI_WIN_BASE, &base, &flag));
    CHECK(flag && base == buf, "MPI_WIN_BASE");
    OK(MPI_Win_get_attr(win, MPI_WIN_SIZE, &sz, &flag));
    CHECK(flag && *sz == 40, "MPI_WIN_SIZE");
    OK(MPI_Win_get_attr(win, MPI_WIN_DISP_UNIT, &du, &flag));
    CHECK(flag && *du == 4, "MPI_WIN_DISP_UNIT");
    OK(MPI_Win_get_attr(win, MPI_WIN_MODEL, &model, &flag));
    CHECK(flag && *model == MPI_WIN_UNIFIED, "MPI_WIN_MODEL");
    OK(MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &flag));
    CHECK(flag && *flavor == MPI_WIN_FLAVOR_CREATE, "MPI_WIN_CREATE_FLAVOR");
    int key;
    static int value = 42;
    OK(MPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, MPI_WIN_NULL_DELETE_FN, &key, NULL));
    OK(MPI_Win_set_attr(win, key, &value));
    int *back = NULL;
    OK(MPI_Win_get_attr(win, key, &back, &flag));
    CHECK(flag && back == &value, "a keyval's attribute");
    OK(MPI_Win_delete_attr(win, key));
    OK(MPI_Win_get_attr(win, key, &back, &flag));
    CHECK(!flag, "deleted");
    OK(MPI_Win_free_keyval(&key));

    char name[MPI_MAX_OBJECT_NAME];
    int len = -1;
    OK(MPI_Win_get_name(win, name, &len));
    CHECK(len == 0, "no name yet");
    OK(MPI_Win_set_name(win, "halo"));
    OK(MPI_Win_get_name(win, name, &len));
    CHECK(len == 4 && strcmp(name, "halo") == 0, "name: %s", name);
    OK(MPI_Win_get_name(MPI_WIN_NULL, name, &len));
    CHECK(strcmp(name, "MPI_WIN_NULL") == 0, "the null window's name: %s", name);

    MPI_Group g, world;
    int cmp;
    OK(MPI_Win_get_group(win, &g));
    OK(MPI_Comm_group(MPI_COMM_WORLD, &world));
    OK(MPI_Group_compare(g, world, &cmp));
    CHECK(cmp == MPI_IDENT, "the window's group is the world's");
    OK(MPI_Group_free(&g));
    OK(MPI_Group_free(&world));

    MPI_Info info;
    OK(MPI_Info_create(&info));
    OK(MPI_Info_set(info, "accumulate_ordering", "none"));
    OK(MPI_Win_set_info(win, info));
    OK(MPI_Info_free(&info));
    OK(MPI_Win_get_info(win, &info));
    char v[MPI_MAX_INFO_VAL + 1];
    OK(MPI_Info_get(info, "accumulate_ordering", MPI_MAX_INFO_VAL, v, &flag));
    CHECK(flag && strcmp(v, "none") == 0, "accumulate_ordering set: %s", v);
    OK(MPI_Info_free(&info));

    MPI_Errhandler eh, got;
    OK(MPI_Win_get_errhandler(win, &got));
    CHECK(got == MPI_ERRORS_ARE_FATAL, "windows start with MPI_ERRORS_ARE_FATAL");
    OK(MPI_Win_create_errhandler(win_handler, &eh));
    OK(MPI_Win_set_errhandler(win, eh));
    OK(MPI_Win_get_errhandler(win, &got));
    CHECK(got == eh, "the handler set");
    handled = 0;
    OK(MPI_Win_call_errhandler(win, MPI_ERR_OTHER));
    CHECK(handled == MPI_ERR_OTHER, "the user handler ran: %d", handled);
    handled = 0;
    CHECK(MPI_Win_fence(0, win) == MPI_SUCCESS, "fence");
    int x = 0;
    CHECK(MPI_Put(&x, 1, MPI_INT, size, 0, 1, MPI_INT, win) == MPI_ERR_RANK, "bad rank");
    CHECK(handled == MPI_ERR_RANK, "the handler saw it: %d", handled);
    OK(MPI_Errhandler_free(&eh));
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
    OK(MPI_Win_free(&win));
}

/* Bad input: the class through the window's handler, nothing written at the target. */
static void errors(void) {
    int buf[4] = {0, 0, 0, 0};
    MPI_Win win;
    OK(MPI_Win_create(buf, sizeof buf, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    int v[8] = {9, 9, 9, 9, 9, 9, 9, 9};
    CHECK(MPI_Put(v, 1, MPI_INT, right(), 0, 1, MPI_INT, win) == MPI_ERR_RMA_SYNC,
          "put outside an epoch");
    CHECK(MPI_Win_unlock(0, win) == MPI_ERR_RMA_SYNC, "unlock without lock");
    CHECK(MPI_Win_complete(win) == MPI_ERR_RMA_SYNC, "complete without start");
    CHECK(MPI_Win_wait(win) == MPI_ERR_RMA_SYNC, "wait without post");
    CHECK(MPI_Win_flush(0, win) == MPI_ERR_RMA_SYNC, "flush outside a lock epoch");
    CHECK(MPI_Win_unlock_all(win) == MPI_ERR_RMA_SYNC, "unlock_all without lock_all");
    CHECK(MPI_Win_lock(12345, 0, 0, win) == MPI_ERR_LOCKTYPE, "bad lock type");
    CHECK(MPI_Win_attach(win, v, sizeof v) == MPI_ERR_RMA_FLAVOR, "attach to a created window");
    OK(MPI_Win_fence(0, win));
    CHECK(MPI_Put(v, 2, MPI_INT, right(), 3, 2, MPI_INT, win) == MPI_ERR_RMA_RANGE,
          "put past the end");
    CHECK(MPI_Put(v, 1, MPI_INT, right(), -1, 1, MPI_INT, win) == MPI_ERR_RMA_RANGE,
          "put before the start");
    CHECK(MPI_Get(v, 5, MPI_INT, right(), 0, 5, MPI_INT, win) == MPI_ERR_RMA_RANGE,
          "get past the end");
    CHECK(MPI_Put(v, 1, MPI_INT, size, 0, 1, MPI_INT, win) == MPI_ERR_RANK, "rank = size");
    CHECK(MPI_Put(v, 1, MPI_INT, -7, 0, 1, MPI_INT, win) == MPI_ERR_RANK, "negative rank");
    CHECK(MPI_Put(v, -1, MPI_INT, right(), 0, 1, MPI_INT, win) == MPI_ERR_COUNT, "count < 0");
    CHECK(MPI_Put(v, 2, MPI_INT, right(), 0, 1, MPI_INT, win) == MPI_ERR_TYPE,
          "signatures differ");
    CHECK(MPI_Put(v, 1, MPI_DATATYPE_NULL, right(), 0, 1, MPI_INT, win) == MPI_ERR_TYPE,
          "null datatype");
    double d = 1.0;
    CHECK(MPI_Accumulate(&d, 1, MPI_DOUBLE, right(), 0, 1, MPI_DOUBLE, MPI_BAND, win) ==
              MPI_ERR_OP,
          "BAND on doubles");
    CHECK(MPI_Accumulate(v, 1, MPI_INT, right(), 0, 1, MPI_INT, MPI_OP_NULL, win) == MPI_ERR_OP,
          "MPI_OP_NULL");
    CHECK(MPI_Accumulate(v, 1, MPI_INT, right(), 0, 1, MPI_INT, MPI_NO_OP, win) == MPI_ERR_OP,
          "MPI_NO_OP without fetching");
    MPI_Datatype pair;
    OK(MPI_Type_contiguous(2, MPI_INT, &pair));
    OK(MPI_Type_commit(&pair));
    CHECK(MPI_Accumulate(&d, 1, MPI_DOUBLE, right(), 0, 1, pair, MPI_SUM, win) == MPI_ERR_TYPE,
          "origin and target built of different types");
    OK(MPI_Type_free(&pair));
    /* MPI_PROC_NULL: nothing happens. */
    OK(MPI_Put(v, 1, MPI_INT, MPI_PROC_NULL, 0, 1, MPI_INT, win));
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
    CHECK(buf[0] == 0 && buf[1] == 0 && buf[2] == 0 && buf[3] == 0,
          "nothing was written: %d %d %d %d", buf[0], buf[1], buf[2], buf[3]);
    OK(MPI_Win_free(&win));

    /* An invalid window handle: MPI_ERR_WIN on MPI_COMM_WORLD's handler. */
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_Win stale = win;
    CHECK(MPI_Win_fence(0, stale) == MPI_ERR_WIN, "MPI_WIN_NULL");
    CHECK(MPI_Put(v, 1, MPI_INT, 0, 0, 1, MPI_INT, (MPI_Win)0x7777) == MPI_ERR_WIN,
          "garbage window");
    CHECK(MPI_Win_free(NULL) == MPI_ERR_ARG, "NULL window pointer");
    CHECK(MPI_Win_create(buf, -4, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win) == MPI_ERR_ARG,
          "negative size");
    CHECK(MPI_Win_create(buf, 4, 0, MPI_INFO_NULL, MPI_COMM_WORLD, &win) == MPI_ERR_ARG,
          "disp_unit 0");
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
}

/* A process waiting for a flag in its own window, polling it between MPI_Win_sync and a
 * flush to itself (mpi4py's util.sync does so), sees another process's accumulate arrive:
 * those calls progress the library, so the operation is applied while the target polls. */
static void polled_flag(void) {
    int *mem = NULL;
    MPI_Win win;
    OK(MPI_Win_allocate(sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win));
    *mem = 0;
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Win_lock_all(0, win));
    if (size > 1 && rank == 0) {
        OK(MPI_Win_sync(win));
        long polls = 0;
        while (*(volatile int *)mem == 0 && polls < 200000000L) {
            polls++;
            POLL(MPI_Win_flush(rank, win));
            POLL(MPI_Win_sync(win));
        }
        CHECK(*mem == 42, "flag set by rank 1 while polling: %d after %ld polls", *mem, polls);
    } else if (size > 1 && rank == 1) {
        int v = 42;
        OK(MPI_Accumulate(&v, 1, MPI_INT, 0, 0, 1, MPI_INT, MPI_REPLACE, win));
        OK(MPI_Win_flush(0, win));
    }
    OK(MPI_Win_unlock_all(win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Win_free(&win));
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    fence_epochs();
    pair_types();
    derived();
    transposed();
    passive();
    created_locks();
    small_transfers();
    locked_sums();
    atomic_counters();
    exclusive_counters();
    pscw();
    dynamic();
    shared();
    queries();
    errors();
    polled_flag();
    int rc = summary("rma");
    MPI_Finalize();
    return rc;
}
