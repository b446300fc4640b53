/* coll-sm against coll-base: the blocking barrier, bcast, reduce, allreduce, allgather,
 * alltoall, allgatherv, alltoallv, reduce_scatter(_block), gather and scatter (which coll-sm
 * serves on one node up to coll_sm_max_size) must give the bytes of
 * their non-blocking forms
 * (which always run coll-base's schedules), for every type, operation, root and a range of
 * sizes around the thresholds, with MPI_IN_PLACE, on the world, its dup and split
 * sub-communicators used alternately (several segments at once); plus exact references,
 * back-to-back collectives with rotating roots (the slots' reuse), and barrier order. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include <stdint.h>
#include <time.h>

static const int sizes[] = {0,    1,    2,    3,    7,    8,    9,    64,   255,   256,
                            257,  1000, 1023, 1024, 1025, 2047, 2048, 2049, 4096, 4100,
                            8192, 16376, 16384, 16392, 20000};
#define NSIZES ((int)(sizeof sizes / sizeof sizes[0]))
#define MAXB 20008

typedef struct {
    MPI_Datatype dt;
    int size;
    int integer;
    const char *name;
} Type;

static const Type types[] = {
    {MPI_INT, 4, 1, "int"},         {MPI_DOUBLE, 8, 0, "double"},
    {MPI_UNSIGNED_CHAR, 1, 1, "uchar"}, {MPI_INT64_T, 8, 1, "int64"},
    {MPI_FLOAT, 4, 0, "float"},
};
#define NTYPES ((int)(sizeof types / sizeof types[0]))

/* Element i of rank r's input, small so that sums and products are exact in every type. */
static long val(int r, int i, MPI_Op op) {
    if (op == MPI_PROD) return (r + i) % 3 + 1;
    return (r * 7 + i * 3) % 11 + 1;
}

static void put(const Type *t, void *buf, int i, long v) {
    if (t->dt == MPI_INT) ((int *)buf)[i] = (int)v;
    else if (t->dt == MPI_DOUBLE) ((double *)buf)[i] = (double)v;
    else if (t->dt == MPI_UNSIGNED_CHAR) ((unsigned char *)buf)[i] = (unsigned char)v;
    else if (t->dt == MPI_INT64_T) ((int64_t *)buf)[i] = v;
    else ((float *)buf)[i] = (float)v;
}

static long get(const Type *t, const void *buf, int i) {
    if (t->dt == MPI_INT) return ((const int *)buf)[i];
    if (t->dt == MPI_DOUBLE) return (long)((const double *)buf)[i];
    if (t->dt == MPI_UNSIGNED_CHAR) return ((const unsigned char *)buf)[i];
    if (t->dt == MPI_INT64_T) return (long)((const int64_t *)buf)[i];
    return (long)((const float *)buf)[i];
}

static long combine(MPI_Op op, long a, long b) {
    if (op == MPI_SUM) return a + b;
    if (op == MPI_PROD) return a * b;
    if (op == MPI_MAX) return a > b ? a : b;
    if (op == MPI_MIN) return a < b ? a : b;
    return a ^ b;
}

static unsigned char in[MAXB], blk[MAXB], nb[MAXB], inpl[MAXB];
/* Allgather and alltoall buffers: up to 4 ranks of 20008-byte blocks (larger worlds use a
 * smaller block, see exchanges). */
#define MAXX (4 * MAXB)
static unsigned char xin[MAXX], xblk[MAXX], xnb[MAXX];

/* Byte i of the block rank r sends to rank d in exchange number `tag` (d is ignored by
 * allgather, whose block goes to everyone). */
static unsigned char xval(int r, int d, int i, int tag) {
    return (unsigned char)(r * 37 + d * 11 + i * 3 + tag);
}

/* Allgather and alltoall of `bytes`-byte blocks: blocking (coll-sm up to its limits),
 * non-blocking (coll-base) and in place give the same bytes, and those are the reference. */
static void exchanges(MPI_Comm comm, int bytes) {
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    if ((size_t)bytes * size > MAXX) bytes = MAXX / size;
    size_t total = (size_t)bytes * size;
    MPI_Request req;
    int bad = 0;

    for (int i = 0; i < bytes; i++) xin[i] = xval(rank, 0, i, bytes);
    memset(xblk, 0xEE, total);
    memset(xnb, 0xDD, total);
    OK(MPI_Allgather(xin, bytes, MPI_BYTE, xblk, bytes, MPI_BYTE, comm));
    OK(MPI_Iallgather(xin, bytes, MPI_BYTE, xnb, bytes, MPI_BYTE, comm, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(memcmp(xblk, xnb, total) == 0, "allgather %d B: sm and base differ", bytes);
    for (int q = 0; q < size; q++)
        for (int i = 0; i < bytes; i++) bad += xblk[(size_t)q * bytes + i] != xval(q, 0, i, bytes);
    CHECK(bad == 0, "allgather %d B: %d bytes wrong", bytes, bad);
    memset(xnb, 0xDD, total);
    memcpy(xnb + (size_t)rank * bytes, xin, bytes);
    OK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, xnb, bytes, MPI_BYTE, comm));
    CHECK(memcmp(xblk, xnb, total) == 0, "allgather in place %d B", bytes);

    for (int d = 0; d < size; d++)
        for (int i = 0; i < bytes; i++) xin[(size_t)d * bytes + i] = xval(rank, d, i, bytes);
    memset(xblk, 0xEE, total);
    memset(xnb, 0xDD, total);
    OK(MPI_Alltoall(xin, bytes, MPI_BYTE, xblk, bytes, MPI_BYTE, comm));
    OK(MPI_Ialltoall(xin, bytes, MPI_BYTE, xnb, bytes, MPI_BYTE, comm, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(memcmp(xblk, xnb, total) == 0, "alltoall %d B: sm and base differ", bytes);
    bad = 0;
    for (int q = 0; q < size; q++)
        for (int i = 0; i < bytes; i++)
            bad += xblk[(size_t)q * bytes + i] != xval(q, rank, i, bytes);
    CHECK(bad == 0, "alltoall %d B: %d bytes wrong", bytes, bad);
    memcpy(xnb, xin, total);
    OK(MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, xnb, bytes, MPI_BYTE, comm));
    CHECK(memcmp(xblk, xnb, total) == 0, "alltoall in place %d B", bytes);
}

/* Bytes rank q sends to rank d in a varying exchange of scale `bytes`: uneven, zero for some
 * pairs; `skew`: rank 0 sends `bytes` to everyone, the others one byte (so that only rank 0's
 * alltoallv input may exceed coll-sm's slot: every member must fall through together). */
static int vcount(int q, int d, int bytes, int skew) {
    if (skew) return q == 0 ? bytes : (bytes > 0);
    return ((q * 3 + d * 5 + bytes) % 4) * bytes / 3;
}

/* Regions of counts[i] bytes in reverse rank order, one byte apart (displacements out of
 * order); the total span. */
static int vlayout(const int *counts, int size, int *displs) {
    int at = 0;
    for (int i = size - 1; i >= 0; i--) {
        at += 1;
        displs[i] = at;
        at += counts[i];
    }
    return at;
}

/* Allgatherv and alltoallv with uneven counts (zeros among them) and displacements out of
 * order: blocking (coll-sm when every block fits), non-blocking (coll-base) and in place give
 * the same bytes, and those are the reference; the gaps are left alone. */
static void vexchanges(MPI_Comm comm, int bytes, int skew) {
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    if ((size_t)(bytes + 1) * size > MAXX) bytes = MAXX / size - 1;
    int sc[64], sd[64], rc[64], rd[64];
    if (size > 64) return;
    MPI_Request req;
    int bad = 0, tag = bytes + 7 * skew;

    for (int q = 0; q < size; q++) rc[q] = vcount(q, 0, bytes, skew);
    int span = vlayout(rc, size, rd);
    for (int i = 0; i < rc[rank]; i++) xin[i] = xval(rank, 0, i, tag);
    memset(xblk, 0xEE, span);
    memset(xnb, 0xDD, span);
    OK(MPI_Allgatherv(xin, rc[rank], MPI_BYTE, xblk, rc, rd, MPI_BYTE, comm));
    OK(MPI_Iallgatherv(xin, rc[rank], MPI_BYTE, xnb, rc, rd, MPI_BYTE, comm, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    for (int q = 0; q < size; q++) {
        xnb[rd[q] - 1] = 0xEE; /* the gaps: each buffer's own filler */
        for (int i = 0; i < rc[q]; i++) bad += xblk[rd[q] + i] != xval(q, 0, i, tag);
        bad += xblk[rd[q] - 1] != 0xEE;
    }
    CHECK(memcmp(xblk, xnb, span) == 0, "allgatherv %d B%s: sm and base differ", bytes,
          skew ? " skewed" : "");
    CHECK(bad == 0, "allgatherv %d B%s: %d bytes wrong", bytes, skew ? " skewed" : "", bad);
    memset(xnb, 0xEE, span);
    memcpy(xnb + rd[rank], xin, rc[rank]);
    OK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, xnb, rc, rd, MPI_BYTE, comm));
    CHECK(memcmp(xblk, xnb, span) == 0, "allgatherv in place %d B", bytes);

    for (int d = 0; d < size; d++) sc[d] = vcount(rank, d, bytes, skew);
    for (int q = 0; q < size; q++) rc[q] = vcount(q, rank, bytes, skew);
    int sspan = vlayout(sc, size, sd);
    span = vlayout(rc, size, rd);
    for (int d = 0; d < size; d++)
        for (int i = 0; i < sc[d]; i++) xin[sd[d] + i] = xval(rank, d, i, tag);
    memset(xblk, 0xEE, span);
    memset(xnb, 0xEE, span);
    OK(MPI_Alltoallv(xin, sc, sd, MPI_BYTE, xblk, rc, rd, MPI_BYTE, comm));
    OK(MPI_Ialltoallv(xin, sc, sd, MPI_BYTE, xnb, rc, rd, MPI_BYTE, comm, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(memcmp(xblk, xnb, span) == 0, "alltoallv %d B%s: sm and base differ", bytes,
          skew ? " skewed" : "");
    bad = 0;
    for (int q = 0; q < size; q++) {
        for (int i = 0; i < rc[q]; i++) bad += xblk[rd[q] + i] != xval(q, rank, i, tag);
        bad += xblk[rd[q] - 1] != 0xEE;
    }
    CHECK(bad == 0, "alltoallv %d B%s: %d bytes wrong", bytes, skew ? " skewed" : "", bad);
    (void)sspan;
}

static void reductions(MPI_Comm comm, const Type *t, MPI_Op op, const char *opname, int bytes) {
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int n = bytes / t->size;
    for (int i = 0; i < n; i++) put(t, in, i, val(rank, i, op));
    size_t len = (size_t)n * t->size;
    MPI_Request req;

    /* Allreduce: blocking (coll-sm), non-blocking (coll-base), in place, reference. */
    memset(blk, 0xEE, len);
    memset(nb, 0xDD, len);
    OK(MPI_Allreduce(in, blk, n, t->dt, op, comm));
    OK(MPI_Iallreduce(in, nb, n, t->dt, op, comm, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(memcmp(blk, nb, len) == 0, "allreduce %s %s n=%d: sm and base differ", t->name,
          opname, n);
    memcpy(inpl, in, len);
    OK(MPI_Allreduce(MPI_IN_PLACE, inpl, n, t->dt, op, comm));
    CHECK(memcmp(blk, inpl, len) == 0, "allreduce in place %s %s n=%d", t->name, opname, n);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        long want = val(0, i, op);
        for (int q = 1; q < size; q++) want = combine(op, want, val(q, i, op));
        if (t->dt == MPI_UNSIGNED_CHAR) want &= 0xff;
        bad += get(t, blk, i) != want;
    }
    CHECK(bad == 0, "allreduce %s %s n=%d: %d elements wrong", t->name, opname, n, bad);

    /* Reduce to every root. */
    for (int root = 0; root < size; root++) {
        memset(blk, 0xEE, len);
        memset(nb, 0xDD, len);
        OK(MPI_Reduce(in, rank == root ? blk : NULL, n, t->dt, op, root, comm));
        OK(MPI_Ireduce(in, rank == root ? nb : NULL, n, t->dt, op, root, comm, &req));
        OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        if (rank == root) {
            CHECK(memcmp(blk, nb, len) == 0, "reduce %s %s n=%d root %d: sm and base differ",
                  t->name, opname, n, root);
            memcpy(inpl, in, len);
            OK(MPI_Reduce(MPI_IN_PLACE, inpl, n, t->dt, op, root, comm));
            CHECK(memcmp(blk, inpl, len) == 0, "reduce in place %s %s n=%d root %d", t->name,
                  opname, n, root);
        } else {
            OK(MPI_Reduce(in, NULL, n, t->dt, op, root, comm));
        }
    }
}

/* Element i of the block form's result at `rank`, or of the v form's at element `at`: the
 * reference over every rank's input. */
static long folded(const Type *t, MPI_Op op, int size, int at) {
    long want = val(0, at, op);
    for (int q = 1; q < size; q++) want = combine(op, want, val(q, at, op));
    if (t->dt == MPI_UNSIGNED_CHAR) want &= 0xff;
    return want;
}

/* MPI_Reduce_scatter_block and MPI_Reduce_scatter (uneven counts, zeros among them): blocking
 * (coll-sm when the whole input fits its slot), non-blocking (coll-base), in place and the
 * reference agree. */
static void rscatters(MPI_Comm comm, const Type *t, MPI_Op op, const char *opname, int bytes) {
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    if (size > 64) return;
    MPI_Request req;
    int k = bytes / t->size / size, total = k * size, bad = 0;
    for (int i = 0; i < total; i++) put(t, in, i, val(rank, i, op));
    size_t len = (size_t)k * t->size;
    memset(blk, 0xEE, len);
    memset(nb, 0xDD, len);
    OK(MPI_Reduce_scatter_block(in, blk, k, t->dt, op, comm));
    OK(MPI_Ireduce_scatter_block(in, nb, k, t->dt, op, comm, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(memcmp(blk, nb, len) == 0, "reduce_scatter_block %s %s k=%d: sm and base differ",
          t->name, opname, k);
    memcpy(inpl, in, (size_t)total * t->size);
    OK(MPI_Reduce_scatter_block(MPI_IN_PLACE, inpl, k, t->dt, op, comm));
    CHECK(memcmp(blk, inpl, len) == 0, "reduce_scatter_block in place %s %s k=%d", t->name,
          opname, k);
    for (int i = 0; i < k; i++) bad += get(t, blk, i) != folded(t, op, size, rank * k + i);
    CHECK(bad == 0, "reduce_scatter_block %s %s k=%d: %d elements wrong", t->name, opname, k, bad);

    int counts[64], start = 0, unit = bytes / t->size / (2 * size);
    total = 0;
    for (int q = 0; q < size; q++) {
        counts[q] = ((q * 3 + bytes) % 4) * unit / 2;
        if (q < rank) start += counts[q];
        total += counts[q];
    }
    for (int i = 0; i < total; i++) put(t, in, i, val(rank, i, op));
    len = (size_t)counts[rank] * t->size;
    memset(blk, 0xEE, len + 1);
    memset(nb, 0xDD, len + 1);
    OK(MPI_Reduce_scatter(in, blk, counts, t->dt, op, comm));
    OK(MPI_Ireduce_scatter(in, nb, counts, t->dt, op, comm, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    nb[len] = 0xEE; /* past the block: each buffer's own filler, untouched */
    CHECK(memcmp(blk, nb, len + 1) == 0, "reduce_scatter %s %s total=%d: sm and base differ",
          t->name, opname, total);
    memcpy(inpl, in, (size_t)total * t->size);
    OK(MPI_Reduce_scatter(MPI_IN_PLACE, inpl, counts, t->dt, op, comm));
    CHECK(memcmp(blk, inpl, len) == 0, "reduce_scatter in place %s %s total=%d", t->name, opname,
          total);
    bad = 0;
    for (int i = 0; i < counts[rank]; i++) bad += get(t, blk, i) != folded(t, op, size, start + i);
    CHECK(bad == 0, "reduce_scatter %s %s total=%d: %d elements wrong", t->name, opname, total,
          bad);
}

/* A non-commutative user operation: composition of affine maps x -> m x + c (mod 1009) on
 * MPI_2INT pairs (m, c); inout = in o inout, `in` from the lower ranks. */
static void affine(void *invec, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    const int *a = invec;
    int *b = inout;
    for (int i = 0; i < *len; i++) {
        int m = a[2 * i] * b[2 * i] % 1009, c = (a[2 * i] * b[2 * i + 1] + a[2 * i + 1]) % 1009;
        b[2 * i] = m;
        b[2 * i + 1] = c;
    }
}

static void affine_val(int r, int i, int *pair) {
    pair[0] = (r + i) % 5 + 1;
    pair[1] = (r * 7 + i) % 13;
}

/* The user operation through allreduce, reduce and reduce_scatter_block: blocking and
 * non-blocking agree, and give the maps composed in rank order. */
static void userops(MPI_Comm comm, MPI_Op uop, int bytes) {
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int n = bytes / 8, k = n / size, bad = 0;
    int *x = (int *)in, *got = (int *)blk, *ref = (int *)inpl;
    for (int i = 0; i < n; i++) affine_val(rank, i, x + 2 * i);
    for (int i = 0; i < n; i++) {
        int acc[2], nx[2];
        affine_val(0, i, acc);
        for (int q = 1; q < size; q++) {
            affine_val(q, i, nx);
            int len = 1;
            affine(acc, nx, &len, NULL);
            acc[0] = nx[0];
            acc[1] = nx[1];
        }
        ref[2 * i] = acc[0];
        ref[2 * i + 1] = acc[1];
    }
    MPI_Request req;
    memset(got, 0xEE, (size_t)n * 8);
    memset(nb, 0xDD, (size_t)n * 8);
    OK(MPI_Allreduce(x, got, n, MPI_2INT, uop, comm));
    OK(MPI_Iallreduce(x, nb, n, MPI_2INT, uop, comm, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(memcmp(got, nb, (size_t)n * 8) == 0 && memcmp(got, ref, (size_t)n * 8) == 0,
          "allreduce of the user op n=%d", n);
    int root = size - 1;
    OK(MPI_Reduce(x, got, n, MPI_2INT, uop, root, comm));
    if (rank == root) CHECK(memcmp(got, ref, (size_t)n * 8) == 0, "reduce of the user op n=%d", n);
    memset(got, 0xEE, (size_t)k * 8);
    OK(MPI_Reduce_scatter_block(x, got, k, MPI_2INT, uop, comm));
    OK(MPI_Ireduce_scatter_block(x, nb, k, MPI_2INT, uop, comm, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    for (int i = 0; i < 2 * k; i++) bad += got[i] != ref[2 * rank * k + i];
    CHECK(bad == 0 && memcmp(got, nb, (size_t)k * 8) == 0,
          "reduce_scatter_block of the user op k=%d: %d wrong", k, bad);
}

/* A commutative user operation: elementwise sum of ints, called with MPI's convention. */
static void usum(void *invec, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    const int *a = invec;
    int *b = inout;
    for (int i = 0; i < *len; i++) b[i] += a[i];
}

/* The commutative user operation through allreduce, reduce (every root), reduce_scatter
 * and reduce_scatter_block: blocking (coll-sm up to its limits), non-blocking and the
 * reference agree. */
static void usums(MPI_Comm comm, MPI_Op sop, int bytes) {
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int n = bytes / 4, k = n / size, bad = 0;
    int *x = (int *)in, *got = (int *)blk, *ref = (int *)inpl;
    for (int i = 0; i < n; i++) x[i] = rank * 31 + i;
    for (int i = 0; i < n; i++) ref[i] = size * i + 31 * size * (size - 1) / 2;
    MPI_Request req;
    memset(got, 0xEE, (size_t)n * 4);
    memset(nb, 0xDD, (size_t)n * 4);
    OK(MPI_Allreduce(x, got, n, MPI_INT, sop, comm));
    OK(MPI_Iallreduce(x, nb, n, MPI_INT, sop, comm, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(memcmp(got, nb, (size_t)n * 4) == 0 && memcmp(got, ref, (size_t)n * 4) == 0,
          "allreduce of the commutative user op n=%d", n);
    for (int root = 0; root < size; root++) {
        memset(got, 0xEE, (size_t)n * 4);
        OK(MPI_Reduce(x, got, n, MPI_INT, sop, root, comm));
        if (rank == root)
            CHECK(memcmp(got, ref, (size_t)n * 4) == 0, "reduce of the commutative user op n=%d root=%d",
                  n, root);
    }
    memset(got, 0xEE, (size_t)k * 4);
    OK(MPI_Reduce_scatter_block(x, got, k, MPI_INT, sop, comm));
    for (int i = 0; i < k; i++) bad += got[i] != ref[rank * k + i];
    CHECK(bad == 0, "reduce_scatter_block of the commutative user op k=%d: %d wrong", k, bad);
    int counts[64], at = 0;
    for (int q = 0; q < size; q++) counts[q] = q % 2 ? k + q % 3 : k / 2;
    for (int q = 0; q < rank; q++) at += counts[q];
    int total = 0;
    for (int q = 0; q < size; q++) total += counts[q];
    if (total <= n && size <= 64) {
        memset(got, 0xEE, (size_t)counts[rank] * 4);
        OK(MPI_Reduce_scatter(x, got, counts, MPI_INT, sop, comm));
        bad = 0;
        for (int i = 0; i < counts[rank]; i++) bad += got[i] != ref[at + i];
        CHECK(bad == 0, "reduce_scatter of the commutative user op total=%d: %d wrong", total, bad);
    }
}

/* Gather and scatter of `bytes`-byte blocks at every root: blocking (coll-sm up to its
 * limits), non-blocking (coll-base), in place and the reference agree. */
static void rooted(MPI_Comm comm, int bytes) {
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    if ((size_t)bytes * size > MAXX) bytes = MAXX / size;
    size_t total = (size_t)bytes * size;
    MPI_Request req;
    for (int root = 0; root < size; root++) {
        int me_root = rank == root, bad = 0, tag = bytes + root;
        for (int i = 0; i < bytes; i++) xin[i] = xval(rank, root, i, tag);
        memset(xblk, 0xEE, total);
        memset(xnb, 0xDD, total);
        OK(MPI_Gather(xin, bytes, MPI_BYTE, xblk, bytes, MPI_BYTE, root, comm));
        OK(MPI_Igather(xin, bytes, MPI_BYTE, xnb, bytes, MPI_BYTE, root, comm, &req));
        OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        if (me_root) {
            CHECK(memcmp(xblk, xnb, total) == 0, "gather %d B root %d: sm and base differ",
                  bytes, root);
            for (int q = 0; q < size; q++)
                for (int i = 0; i < bytes; i++)
                    bad += xblk[(size_t)q * bytes + i] != xval(q, root, i, tag);
            CHECK(bad == 0, "gather %d B root %d: %d bytes wrong", bytes, root, bad);
            memset(xnb, 0xDD, total);
            memcpy(xnb + (size_t)rank * bytes, xin, bytes);
            OK(MPI_Gather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, xnb, bytes, MPI_BYTE, root, comm));
            CHECK(memcmp(xblk, xnb, total) == 0, "gather in place %d B root %d", bytes, root);
        } else {
            OK(MPI_Gather(xin, bytes, MPI_BYTE, NULL, 0, MPI_BYTE, root, comm));
        }

        if (me_root)
            for (int d = 0; d < size; d++)
                for (int i = 0; i < bytes; i++) xin[(size_t)d * bytes + i] = xval(rank, d, i, tag);
        memset(xblk, 0xEE, bytes + 1);
        memset(xnb, 0xDD, bytes + 1);
        OK(MPI_Scatter(xin, bytes, MPI_BYTE, xblk, bytes, MPI_BYTE, root, comm));
        OK(MPI_Iscatter(xin, bytes, MPI_BYTE, xnb, bytes, MPI_BYTE, root, comm, &req));
        OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        xnb[bytes] = 0xEE;
        CHECK(memcmp(xblk, xnb, bytes + 1) == 0, "scatter %d B root %d: sm and base differ",
              bytes, root);
        bad = 0;
        for (int i = 0; i < bytes; i++) bad += xblk[i] != xval(root, rank, i, tag);
        CHECK(bad == 0, "scatter %d B root %d: %d bytes wrong", bytes, root, bad);
        if (me_root) {
            OK(MPI_Scatter(xin, bytes, MPI_BYTE, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, root, comm));
            for (int d = 0; d < size; d++)
                for (int i = 0; i < bytes; i++) bad += xin[(size_t)d * bytes + i] != xval(rank, d, i, tag);
            CHECK(bad == 0, "scatter in place %d B root %d: the input changed", bytes, root);
        } else {
            memset(xnb, 0xDD, bytes);
            OK(MPI_Scatter(NULL, 0, MPI_BYTE, xnb, bytes, MPI_BYTE, root, comm));
            CHECK(memcmp(xblk, xnb, bytes) == 0, "scatter (root in place) %d B root %d", bytes,
                  root);
        }
    }
}

static void bcasts(MPI_Comm comm, int bytes) {
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    for (int root = 0; root < size; root++) {
        for (int i = 0; i < bytes; i++)
            blk[i] = rank == root ? (unsigned char)(root * 31 + i * 7 + bytes) : 0xEE;
        OK(MPI_Bcast(blk, bytes, MPI_BYTE, root, comm));
        int bad = 0;
        for (int i = 0; i < bytes; i++) bad += blk[i] != (unsigned char)(root * 31 + i * 7 + bytes);
        CHECK(bad == 0, "bcast %d B root %d: %d bytes wrong", bytes, root, bad);
    }
}

/* Many short collectives back to back, roots rotating: a rank runs ahead of the others
 * and reuses its slots as soon as the protocol allows. */
static void back_to_back(MPI_Comm comm) {
    int rank, size, bad = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    for (int it = 0; it < 3000; it++) {
        int root = it % size;
        long v[3] = {rank == root ? it : -1, rank == root ? it * 3 : -1, 7};
        MPI_Bcast(v, 3, MPI_LONG, root, comm);
        bad += v[0] != it || v[1] != it * 3;
        long s = rank + it, sum = 0;
        MPI_Allreduce(&s, &sum, 1, MPI_LONG, MPI_SUM, comm);
        bad += sum != (long)size * it + (long)size * (size - 1) / 2;
        long m = 0;
        MPI_Reduce(&s, &m, 1, MPI_LONG, MPI_MAX, root, comm);
        bad += rank == root && m != it + size - 1;
        /* Every member's block, to everyone and to each. */
        long all[8], mine[8], got[8];
        if (size <= 8) {
            MPI_Allgather(&s, 1, MPI_LONG, all, 1, MPI_LONG, comm);
            for (int q = 0; q < size; q++) bad += all[q] != q + it;
            for (int q = 0; q < size; q++) mine[q] = (long)rank * 1000 + q + it;
            MPI_Alltoall(mine, 1, MPI_LONG, got, 1, MPI_LONG, comm);
            for (int q = 0; q < size; q++) bad += got[q] != (long)q * 1000 + rank + it;
        }
        if (size <= 8) {
            /* Rooted and reduce_scatter, rotating roots. */
            long g[8], sc = -1, rs = -1;
            MPI_Gather(&s, 1, MPI_LONG, g, 1, MPI_LONG, root, comm);
            for (int q = 0; rank == root && q < size; q++) bad += g[q] != q + it;
            MPI_Scatter(mine, 1, MPI_LONG, &sc, 1, MPI_LONG, root, comm);
            bad += sc != (long)root * 1000 + rank + it;
            MPI_Reduce_scatter_block(mine, &rs, 1, MPI_LONG, MPI_SUM, comm);
            bad += rs != 1000L * size * (size - 1) / 2 + (long)size * (rank + it);
        }
        if (it % 7 == 0) MPI_Barrier(comm);
    }
    CHECK(bad == 0, "back to back: %d wrong", bad);
}

/* The node's monotonic clock, in seconds (the same in every process, unlike MPI_Wtime). */
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* No rank leaves a barrier before the last one entered it (one node: one clock). */
static void barrier_order(MPI_Comm comm) {
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    for (int late = 0; late < size; late++) {
        double entered = 0;
        if (rank == late) {
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
            entered = now();
        }
        OK(MPI_Barrier(comm));
        double left = now();
        OK(MPI_Bcast(&entered, 1, MPI_DOUBLE, late, comm));
        CHECK(left >= entered, "barrier left at %.6f before rank %d entered at %.6f", left,
              late, entered);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm dup, half, rev;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &rev);
    MPI_Comm comms[] = {MPI_COMM_WORLD, half, dup, rev};
    const MPI_Op ops[] = {MPI_SUM, MPI_MAX, MPI_MIN, MPI_PROD, MPI_BXOR};
    const char *opnames[] = {"sum", "max", "min", "prod", "bxor"};
    MPI_Op uop;
    MPI_Op_create(affine, 0, &uop);
    MPI_Op sop;
    MPI_Op_create(usum, 1, &sop);

    for (int s = 0; s < NSIZES; s++) {
        /* The communicators take turns, so their segments are in use together. */
        for (int c = 0; c < 4; c++) {
            bcasts(comms[c], sizes[s]);
            exchanges(comms[c], sizes[s]);
            vexchanges(comms[c], sizes[s], 0);
            vexchanges(comms[c], sizes[s], 1);
            for (int t = 0; t < NTYPES; t++)
                for (int o = 0; o < 5; o++) {
                    if (o == 4 && !types[t].integer) continue;
                    /* Every op at a few sizes; sum at all of them. */
                    if (o > 0 && s % 4 != 0) continue;
                    reductions(comms[c], &types[t], ops[o], opnames[o], sizes[s]);
                    rscatters(comms[c], &types[t], ops[o], opnames[o], sizes[s]);
                }
            rooted(comms[c], sizes[s]);
            if (s % 2 == 0) userops(comms[c], uop, sizes[s]);
            if (s % 2 == 1) usums(comms[c], sop, sizes[s]);
        }
    }
    for (int c = 0; c < 4; c++) {
        back_to_back(comms[c]);
        barrier_order(comms[c]);
    }
    MPI_Comm_free(&dup);
    MPI_Comm_free(&half);
    MPI_Comm_free(&rev);
    /* A communicator freed and made again gets a fresh segment. */
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    back_to_back(dup);
    MPI_Comm_free(&dup);
    MPI_Op_free(&uop);
    MPI_Op_free(&sop);
    int rc = summary("coll_sm");
    MPI_Finalize();
    return rc;
}
