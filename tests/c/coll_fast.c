/* The C library's fast path for small collectives (MPI_Allreduce, MPI_Reduce, MPI_Bcast on
 * predefined datatypes and operations in contiguous buffers) against the general path it
 * falls back to: every predefined arithmetic, logical and bitwise operation on several
 * types, in place and not, at every root, at sizes either side of the fast path's in-place
 * limit (256 B), on misaligned buffers (the general path), the _c forms; and bad input
 * (an operation MPI does not define on the type, invalid handles, counts, buffers, roots,
 * aliased buffers) refused with its error class under MPI_ERRORS_RETURN. */
#include <stdint.h>

#include "check.h"

static int rank, size;

#define DEFINE(NAME, T)                                                                     \
    static void to_##NAME(void *b, int i, long long v) { ((T *)b)[i] = (T)v; }              \
    static long long from_##NAME(const void *b, int i) { return (long long)((const T *)b)[i]; }
DEFINE(int, int)
DEFINE(double, double)
DEFINE(float, float)
DEFINE(llong, long long)
DEFINE(uchar, unsigned char)
DEFINE(short, short)
DEFINE(u64, uint64_t)
DEFINE(bool, _Bool)

struct type {
    const char *name;
    MPI_Datatype dt;
    size_t size;
    void (*to)(void *, int, long long);
    long long (*from)(const void *, int);
    int integer, logical;
};

enum kind { ARITH, ORDER, LOGIC, BITS };
struct op {
    const char *name;
    MPI_Op op;
    enum kind kind;
};

static const struct op ops[] = {
    {"MPI_SUM", MPI_SUM, ARITH},   {"MPI_PROD", MPI_PROD, ARITH}, {"MPI_MIN", MPI_MIN, ORDER},
    {"MPI_MAX", MPI_MAX, ORDER},   {"MPI_LAND", MPI_LAND, LOGIC}, {"MPI_LOR", MPI_LOR, LOGIC},
    {"MPI_LXOR", MPI_LXOR, LOGIC}, {"MPI_BAND", MPI_BAND, BITS},  {"MPI_BOR", MPI_BOR, BITS},
    {"MPI_BXOR", MPI_BXOR, BITS},
};

/* Does MPI define the operation on the type (MPI 5.0 section 6.9.2)? */
static int defined(const struct type *t, const struct op *o) {
    if (t->logical) return o->kind == LOGIC;
    return o->kind == ARITH || o->kind == ORDER || t->integer;
}

/* Rank r's element i for operations of kind k: small enough for every type's exact range. */
static long long value(enum kind k, int r, int i) {
    switch (k) {
    case LOGIC: return (r + i) % 2;
    case BITS: return (1LL << ((r + i) % 7)) | (i % 2);
    default: return (r + i) % 3 + 1;
    }
}

static long long combine(MPI_Op op, long long a, long long b) {
    if (op == MPI_SUM) return a + b;
    if (op == MPI_PROD) return a * b;
    if (op == MPI_MIN) return a < b ? a : b;
    if (op == MPI_MAX) return a > b ? a : b;
    if (op == MPI_LAND) return a && b;
    if (op == MPI_LOR) return a || b;
    if (op == MPI_LXOR) return !a != !b;
    if (op == MPI_BAND) return a & b;
    if (op == MPI_BOR) return a | b;
    return a ^ b;
}

static long long expected(const struct op *o, int i) {
    long long acc = value(o->kind, 0, i);
    for (int r = 1; r < size; r++) acc = combine(o->op, acc, value(o->kind, r, i));
    return acc;
}

#define MAXN 64
/* Aligned for every type; one more element's room for the misaligned case. */
static _Alignas(16) unsigned char sendb[MAXN * 8 + 16], recvb[MAXN * 8 + 16];

static int wrong(const struct type *t, const struct op *o, const unsigned char *buf, int n) {
    int bad = 0;
    for (int i = 0; i < n; i++) {
        long long want = expected(o, i);
        if (t->logical) want = want != 0;
        bad += t->from(buf, i) != want;
    }
    return bad;
}

/* Fill `buf` (aligned or not) with this rank's values, through an aligned staging area. */
static void fill(const struct type *t, const struct op *o, unsigned char *buf, int n) {
    _Alignas(16) unsigned char tmp[MAXN * 8];
    for (int i = 0; i < n; i++) t->to(tmp, i, value(o->kind, rank, i));
    memcpy(buf, tmp, (size_t)n * t->size);
}

/* `n` elements of `t` reduced with `o` in every form the fast path decides. */
static void reduce_forms(const struct type *t, const struct op *o, int n) {
    _Alignas(16) unsigned char got[MAXN * 8];
    size_t len = (size_t)n * t->size;
    /* Allreduce, out of place and in place; then Allreduce_c. */
    fill(t, o, sendb, n);
    memset(recvb, 0x5a, len);
    OK(MPI_Allreduce(sendb, recvb, n, t->dt, o->op, MPI_COMM_WORLD));
    CHECK(!wrong(t, o, recvb, n), "allreduce %s %s n=%d", o->name, t->name, n);
    fill(t, o, recvb, n);
    OK(MPI_Allreduce(MPI_IN_PLACE, recvb, n, t->dt, o->op, MPI_COMM_WORLD));
    CHECK(!wrong(t, o, recvb, n), "in-place allreduce %s %s n=%d", o->name, t->name, n);
    memset(recvb, 0x5a, len);
    OK(MPI_Allreduce_c(sendb, recvb, n, t->dt, o->op, MPI_COMM_WORLD));
    CHECK(!wrong(t, o, recvb, n), "allreduce_c %s %s n=%d", o->name, t->name, n);
    /* Misaligned buffers (the general path), when the type has alignment to miss. */
    if (t->size > 1) {
        fill(t, o, sendb + 1, n);
        OK(MPI_Allreduce(sendb + 1, recvb + 1, n, t->dt, o->op, MPI_COMM_WORLD));
        memcpy(got, recvb + 1, len);
        CHECK(!wrong(t, o, got, n), "misaligned allreduce %s %s n=%d", o->name, t->name, n);
        fill(t, o, recvb + 3, n);
        OK(MPI_Allreduce(MPI_IN_PLACE, recvb + 3, n, t->dt, o->op, MPI_COMM_WORLD));
        memcpy(got, recvb + 3, len);
        CHECK(!wrong(t, o, got, n), "misaligned in-place allreduce %s %s n=%d", o->name,
              t->name, n);
    }
    /* Reduce to every root, out of place and (at the root) in place. */
    for (int root = 0; root < size; root++) {
        fill(t, o, sendb, n);
        memset(recvb, 0x5a, len);
        OK(MPI_Reduce(sendb, rank == root ? recvb : NULL, n, t->dt, o->op, root,
                      MPI_COMM_WORLD));
        if (rank == root) CHECK(!wrong(t, o, recvb, n), "reduce %s %s n=%d root %d", o->name,
                                t->name, n, root);
        fill(t, o, rank == root ? recvb : sendb, n);
        OK(MPI_Reduce(rank == root ? MPI_IN_PLACE : (const void *)sendb, recvb, n, t->dt, o->op,
                      root, MPI_COMM_WORLD));
        if (rank == root) CHECK(!wrong(t, o, recvb, n), "in-place reduce %s %s n=%d root %d",
                                o->name, t->name, n, root);
        fill(t, o, sendb, n);
        OK(MPI_Reduce_c(sendb, recvb, n, t->dt, o->op, root, MPI_COMM_WORLD));
        if (rank == root) CHECK(!wrong(t, o, recvb, n), "reduce_c %s %s n=%d root %d",
                                o->name, t->name, n, root);
    }
}

static void broadcasts(const struct type *t) {
    static const int counts[] = {0, 1, 7, MAXN};
    for (int c = 0; c < 4; c++) {
        int n = counts[c];
        for (int root = 0; root < size; root++) {
            for (int off = 0; off < (t->size > 1 ? 2 : 1); off++) {
                unsigned char *buf = recvb + off;
                _Alignas(16) unsigned char tmp[MAXN * 8];
                for (int i = 0; i < n; i++) t->to(tmp, i, rank == root ? (i * 7 + root) % 100 : 0);
                memcpy(buf, tmp, (size_t)n * t->size);
                OK(MPI_Bcast(buf, n, t->dt, root, MPI_COMM_WORLD));
                memcpy(tmp, buf, (size_t)n * t->size);
                int bad = 0;
                for (int i = 0; i < n; i++) {
                    long long want = (i * 7 + root) % 100;
                    bad += t->from(tmp, i) != (t->logical ? want != 0 : want);
                }
                CHECK(!bad, "bcast %s n=%d root %d offset %d: %d wrong", t->name, n, root, off,
                      bad);
            }
        }
    }
}

static int error_class(int rc) {
    int cls = -1;
    MPI_Error_class(rc, &cls);
    return cls;
}

#define REFUSED(call, want)                                                                 \
    do {                                                                                    \
        int rc_ = (call);                                                                   \
        CHECK(rc_ != MPI_SUCCESS && error_class(rc_) == (want), "%s: class %d, want %s (%d)", \
              #call, rc_ == MPI_SUCCESS ? 0 : error_class(rc_), #want, want);               \
    } while (0)

/* Bad input, the same on every rank (each call fails before it communicates). */
static void bad_input(void) {
    double d[4] = {1, 2, 3, 4}, e[4];
    float f = 1;
    int i = 1;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    REFUSED(MPI_Allreduce(&i, &e, 1, MPI_BYTE, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_OP);
    REFUSED(MPI_Allreduce(d, e, 1, MPI_DOUBLE, MPI_BAND, MPI_COMM_WORLD), MPI_ERR_OP);
    REFUSED(MPI_Allreduce(d, e, 1, MPI_DOUBLE, MPI_MINLOC, MPI_COMM_WORLD), MPI_ERR_OP);
    REFUSED(MPI_Allreduce(d, e, 1, MPI_DOUBLE, MPI_REPLACE, MPI_COMM_WORLD), MPI_ERR_OP);
    REFUSED(MPI_Allreduce(MPI_IN_PLACE, &f, 1, MPI_FLOAT, MPI_LXOR, MPI_COMM_WORLD), MPI_ERR_OP);
    REFUSED(MPI_Reduce(&f, e, 1, MPI_FLOAT, MPI_BOR, 0, MPI_COMM_WORLD), MPI_ERR_OP);
    REFUSED(MPI_Allreduce(d, e, 1, MPI_DOUBLE, MPI_OP_NULL, MPI_COMM_WORLD), MPI_ERR_OP);
    REFUSED(MPI_Allreduce(d, e, 1, MPI_DATATYPE_NULL, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_TYPE);
    REFUSED(MPI_Allreduce(d, e, -1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_COUNT);
    REFUSED(MPI_Allreduce(d, NULL, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    REFUSED(MPI_Allreduce(NULL, e, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    REFUSED(MPI_Allreduce(d, d + 1, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    REFUSED(MPI_Reduce(d, e, 1, MPI_DOUBLE, MPI_SUM, size, MPI_COMM_WORLD), MPI_ERR_ROOT);
    REFUSED(MPI_Reduce(d, e, 1, MPI_DOUBLE, MPI_SUM, -1, MPI_COMM_WORLD), MPI_ERR_ROOT);
    REFUSED(MPI_Bcast(d, 1, MPI_DOUBLE, size, MPI_COMM_WORLD), MPI_ERR_ROOT);
    REFUSED(MPI_Bcast(d, 1, MPI_DATATYPE_NULL, 0, MPI_COMM_WORLD), MPI_ERR_TYPE);
    REFUSED(MPI_Bcast(NULL, 1, MPI_INT, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    REFUSED(MPI_Bcast(d, -1, MPI_INT, 0, MPI_COMM_WORLD), MPI_ERR_COUNT);
    /* The communicator still works. */
    OK(MPI_Allreduce(&i, &f, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    int sum = 0;
    OK(MPI_Allreduce(&i, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(sum == size, "allreduce after the refusals: %d", sum);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const struct type types[] = {
        {"MPI_INT", MPI_INT, sizeof(int), to_int, from_int, 1, 0},
        {"MPI_DOUBLE", MPI_DOUBLE, sizeof(double), to_double, from_double, 0, 0},
        {"MPI_FLOAT", MPI_FLOAT, sizeof(float), to_float, from_float, 0, 0},
        {"MPI_LONG_LONG", MPI_LONG_LONG, sizeof(long long), to_llong, from_llong, 1, 0},
        {"MPI_UNSIGNED_CHAR", MPI_UNSIGNED_CHAR, 1, to_uchar, from_uchar, 1, 0},
        {"MPI_SHORT", MPI_SHORT, sizeof(short), to_short, from_short, 1, 0},
        {"MPI_UINT64_T", MPI_UINT64_T, 8, to_u64, from_u64, 1, 0},
        {"MPI_C_BOOL", MPI_C_BOOL, sizeof(_Bool), to_bool, from_bool, 0, 1},
    };
    /* 1 element, a few, and past the in-place stack limit (256 B) for the wider types. */
    static const int counts[] = {1, 5, 40, MAXN};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
            if (!defined(&types[t], &ops[o])) continue;
            for (int c = 0; c < 4; c++) reduce_forms(&types[t], &ops[o], counts[c]);
        }
        broadcasts(&types[t]);
    }
    bad_input();
    int rc = summary("coll_fast");
    MPI_Finalize();
    return rc;
}
