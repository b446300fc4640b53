/* The v-collectives, reduce-scatter, scans, MPI_IN_PLACE for each, user operations
 * (commutative and not) and MINLOC/MAXLOC on the C pair types, checked against the same
 * computation done serially; then bad input under MPI_ERRORS_RETURN. Any number of ranks. */
#include "check.h"

/* Rank r contributes r + 1 values (the v-collectives' varying counts). */
static int cnt(int r) { return r + 1; }
static int val(int r, int k) { return 100 * r + k; }

static void varying(int rank, int n) {
    int *counts = malloc(sizeof(int) * n), *displs = malloc(sizeof(int) * n), total = 0;
    /* Blocks in reverse rank order with a one-element gap, to see displacements apply. */
    for (int r = n - 1; r >= 0; r--) {
        counts[r] = cnt(r);
        displs[r] = total;
        total += cnt(r) + 1;
    }
    int *all = malloc(sizeof(int) * total), mine[64];
    for (int k = 0; k < cnt(rank); k++) mine[k] = val(rank, k);

    for (int i = 0; i < total; i++) all[i] = -1;
    OK(MPI_Gatherv(mine, cnt(rank), MPI_INT, all, counts, displs, MPI_INT, 0, MPI_COMM_WORLD));
    if (rank == 0)
        for (int r = 0; r < n; r++) {
            for (int k = 0; k < cnt(r); k++) CHECK(all[displs[r] + k] == val(r, k), "gatherv r%d k%d = %d", r, k, all[displs[r] + k]);
            CHECK(all[displs[r] + cnt(r)] == -1, "gatherv gap after rank %d written", r);
        }

    for (int i = 0; i < total; i++) all[i] = -1;
    OK(MPI_Allgatherv(mine, cnt(rank), MPI_INT, all, counts, displs, MPI_INT, MPI_COMM_WORLD));
    for (int r = 0; r < n; r++)
        for (int k = 0; k < cnt(r); k++) CHECK(all[displs[r] + k] == val(r, k), "allgatherv r%d k%d", r, k);

    /* In place: my block already sits at displs[rank]. */
    for (int i = 0; i < total; i++) all[i] = -1;
    for (int k = 0; k < cnt(rank); k++) all[displs[rank] + k] = val(rank, k);
    OK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, counts, displs, MPI_INT, MPI_COMM_WORLD));
    for (int r = 0; r < n; r++)
        for (int k = 0; k < cnt(r); k++) CHECK(all[displs[r] + k] == val(r, k), "allgatherv in place r%d k%d", r, k);
    for (int i = 0; i < total; i++) all[i] = rank == 0 ? -1 : -2;
    if (rank == 0)
        for (int k = 0; k < cnt(0); k++) all[displs[0] + k] = val(0, k);
    OK(MPI_Gatherv(rank == 0 ? MPI_IN_PLACE : (void *)mine, cnt(rank), MPI_INT, all, counts, displs, MPI_INT, 0, MPI_COMM_WORLD));
    if (rank == 0)
        for (int r = 0; r < n; r++)
            for (int k = 0; k < cnt(r); k++) CHECK(all[displs[r] + k] == val(r, k), "gatherv in place r%d k%d", r, k);

    /* Scatterv: the root's blocks (values of the receiving rank) to each rank. */
    for (int r = 0; r < n; r++)
        for (int k = 0; k < cnt(r); k++) all[displs[r] + k] = val(r, k) + 7;
    int got[64];
    memset(got, 0, sizeof got);
    OK(MPI_Scatterv(all, counts, displs, MPI_INT, got, cnt(rank), MPI_INT, 0, MPI_COMM_WORLD));
    for (int k = 0; k < cnt(rank); k++) CHECK(got[k] == val(rank, k) + 7, "scatterv k%d = %d", k, got[k]);
    CHECK(got[cnt(rank)] == 0, "scatterv wrote past its block");
    OK(MPI_Scatterv(all, counts, displs, MPI_INT, rank == 0 ? MPI_IN_PLACE : (void *)got, cnt(rank), MPI_INT, 0, MPI_COMM_WORLD));
    free(all);

    /* Reduce_scatter(_block): element i of rank r's input is r + i; rank q gets sums. */
    int in[256], out[64];
    for (int i = 0; i < 3 * n; i++) in[i] = rank + i;
    OK(MPI_Reduce_scatter_block(in, out, 3, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    for (int k = 0; k < 3; k++) CHECK(out[k] == n * (n - 1) / 2 + n * (3 * rank + k), "reduce_scatter_block k%d = %d", k, out[k]);
    OK(MPI_Reduce_scatter_block(MPI_IN_PLACE, in, 3, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    for (int k = 0; k < 3; k++) CHECK(in[k] == (n - 1) + 3 * rank + k, "reduce_scatter_block in place k%d = %d", k, in[k]);
    int tot = 0, first = 0;
    for (int r = 0; r < n; r++) {
        if (r < rank) first += cnt(r);
        tot += cnt(r);
    }
    for (int i = 0; i < tot; i++) in[i] = rank * i;
    OK(MPI_Reduce_scatter(in, out, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    for (int k = 0; k < cnt(rank); k++) CHECK(out[k] == (first + k) * (n * (n - 1) / 2), "reduce_scatter k%d = %d", k, out[k]);
    OK(MPI_Reduce_scatter(MPI_IN_PLACE, in, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    for (int k = 0; k < cnt(rank); k++) CHECK(in[k] == (first + k) * (n * (n - 1) / 2), "reduce_scatter in place k%d = %d", k, in[k]);
    /* Alltoallv of pairs of ints (a contiguous type) received into every other int (a
     * resized vector): rank r sends q + 1 pairs to rank q; then in place. */
    MPI_Datatype pair, strided, strided1;
    OK(MPI_Type_contiguous(2, MPI_INT, &pair));
    OK(MPI_Type_commit(&pair));
    OK(MPI_Type_vector(2, 1, 2, MPI_INT, &strided));
    OK(MPI_Type_create_resized(strided, 0, 4 * sizeof(int), &strided1));
    OK(MPI_Type_commit(&strided1));
    int *sc = malloc(sizeof(int) * n), *sd = malloc(sizeof(int) * n), *rc = malloc(sizeof(int) * n), *rd = malloc(sizeof(int) * n);
    int stot = 0, rtot = 0;
    for (int q = 0; q < n; q++) {
        sc[q] = q + 1, sd[q] = stot, stot += q + 1;
        rc[q] = rank + 1, rd[q] = rtot, rtot += rank + 1;
    }
    int *sv = malloc(sizeof(int) * 2 * stot), *rv = malloc(sizeof(int) * 4 * rtot);
    for (int q = 0; q < n; q++)
        for (int k = 0; k < 2 * sc[q]; k++) sv[2 * sd[q] + k] = 1000 * rank + 10 * q + k;
    for (int i = 0; i < 4 * rtot; i++) rv[i] = -1;
    OK(MPI_Alltoallv(sv, sc, sd, pair, rv, rc, rd, strided1, MPI_COMM_WORLD));
    for (int q = 0; q < n; q++)
        for (int k = 0; k < 2 * rc[q]; k++) {
            int at = 4 * rd[q] + 2 * k;
            CHECK(rv[at] == 1000 * q + 10 * rank + k && rv[at + 1] == -1, "alltoallv from %d [%d] = %d", q, k, rv[at]);
        }
    /* In place, one strided pair per rank: block q holds what this rank sends to q and
     * then what q sent here. */
    for (int q = 0; q < n; q++) {
        rc[q] = 1, rd[q] = q;
        rv[4 * q] = 1000 * rank + q, rv[4 * q + 2] = 2000 * rank + q, rv[4 * q + 1] = -1;
    }
    OK(MPI_Alltoallv(MPI_IN_PLACE, NULL, NULL, MPI_DATATYPE_NULL, rv, rc, rd, strided1, MPI_COMM_WORLD));
    for (int q = 0; q < n; q++)
        CHECK(rv[4 * q] == 1000 * q + rank && rv[4 * q + 2] == 2000 * q + rank && rv[4 * q + 1] == -1,
              "alltoallv in place from %d: %d %d", q, rv[4 * q], rv[4 * q + 2]);
    free(sc), free(sd), free(rc), free(rd), free(sv), free(rv);
    OK(MPI_Type_free(&pair));
    OK(MPI_Type_free(&strided));
    OK(MPI_Type_free(&strided1));
    free(counts);
    free(displs);
}

static void scans(int rank) {
    double x[2] = {rank + 1.0, 2.0 * rank}, y[2] = {-1, -1};
    OK(MPI_Scan(x, y, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    CHECK(y[0] == (rank + 1) * (rank + 2) / 2.0 && y[1] == rank * (rank + 1.0), "scan %g %g", y[0], y[1]);
    long e[1] = {rank + 1}, f[1] = {-5};
    OK(MPI_Exscan(e, f, 1, MPI_LONG, MPI_PROD, MPI_COMM_WORLD));
    long fact = 1;
    for (int r = 1; r <= rank; r++) fact *= r;
    if (rank > 0) CHECK(f[0] == fact, "exscan prod %ld, want %ld", f[0], fact);
    OK(MPI_Scan(MPI_IN_PLACE, x, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    CHECK(x[0] == rank + 1.0 && x[1] == 2.0 * rank, "scan in place max %g %g", x[0], x[1]);
    int i[1] = {rank + 1};
    OK(MPI_Exscan(MPI_IN_PLACE, i, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    if (rank > 0) CHECK(i[0] == rank * (rank + 1) / 2, "exscan in place %d", i[0]);
}

/* 2x2 integer matrix product: associative, not commutative. */
static void matmul(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    long *a = in, *b = inout;
    for (int k = 0; k < *len; k++, a += 4, b += 4) {
        long c[4] = {a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3], a[2] * b[0] + a[3] * b[2], a[2] * b[1] + a[3] * b[3]};
        memcpy(b, c, sizeof c);
    }
}

/* The larger absolute value: a commutative user op on ints. */
static void absmax(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    int *a = in, *b = inout;
    for (int k = 0; k < *len; k++) {
        int x = a[k] < 0 ? -a[k] : a[k], y = b[k] < 0 ? -b[k] : b[k];
        b[k] = x > y ? x : y;
    }
}

static void serial_matmul(long *acc, const long *m) {
    long c[4] = {acc[0] * m[0] + acc[1] * m[2], acc[0] * m[1] + acc[1] * m[3], acc[2] * m[0] + acc[3] * m[2], acc[2] * m[1] + acc[3] * m[3]};
    memcpy(acc, c, sizeof c);
}

static void user_ops(int rank, int n) {
    MPI_Op mm, am;
    int commute = -1;
    OK(MPI_Op_create(matmul, 0, &mm));
    OK(MPI_Op_create(absmax, 1, &am));
    OK(MPI_Op_commutative(mm, &commute));
    CHECK(commute == 0, "matmul commutative %d", commute);
    OK(MPI_Op_commutative(MPI_SUM, &commute));
    CHECK(commute == 1, "MPI_SUM commutative %d", commute);

    /* Rank r's matrix [[1, r], [r, 1]] (not commuting with the others). */
    MPI_Datatype mat;
    OK(MPI_Type_contiguous(4, MPI_LONG, &mat));
    OK(MPI_Type_commit(&mat));
    long m[4] = {1, rank, rank + 1, 1}, res[4] = {0}, want[4] = {1, 0, 0, 1};
    for (int r = 0; r < n; r++) {
        long mr[4] = {1, r, r + 1, 1};
        serial_matmul(want, mr);
    }
    OK(MPI_Allreduce(m, res, 1, mat, mm, MPI_COMM_WORLD));
    CHECK(memcmp(res, want, sizeof want) == 0, "allreduce matmul {%ld %ld %ld %ld}", res[0], res[1], res[2], res[3]);
    memset(res, 0, sizeof res);
    OK(MPI_Reduce(m, res, 1, mat, mm, n - 1, MPI_COMM_WORLD));
    if (rank == n - 1) CHECK(memcmp(res, want, sizeof want) == 0, "reduce matmul");
    long pre[4] = {1, 0, 0, 1};
    for (int r = 0; r <= rank; r++) {
        long mr[4] = {1, r, r + 1, 1};
        serial_matmul(pre, mr);
    }
    OK(MPI_Scan(m, res, 1, mat, mm, MPI_COMM_WORLD));
    CHECK(memcmp(res, pre, sizeof pre) == 0, "scan matmul");
    OK(MPI_Type_free(&mat));

    int v[3] = {rank % 2 ? -rank : rank, -1, 2 * rank - 3 * n}, w[3];
    OK(MPI_Allreduce(v, w, 3, MPI_INT, am, MPI_COMM_WORLD));
    /* Serially: rank 0's values, then absmax with each next rank's. */
    int want3[3] = {0, -1, -3 * n};
    for (int r = 1; r < n; r++) {
        int vr[3] = {r % 2 ? -r : r, -1, 2 * r - 3 * n}, len = 3;
        MPI_Datatype t = MPI_INT;
        absmax(vr, want3, &len, &t);
    }
    CHECK(w[0] == want3[0] && w[1] == want3[1] && w[2] == want3[2], "allreduce absmax %d %d %d", w[0], w[1], w[2]);
    OK(MPI_Op_free(&mm));
    OK(MPI_Op_free(&am));
    CHECK(mm == MPI_OP_NULL, "MPI_Op_free sets MPI_OP_NULL");
}

/* Values with ties: rank r holds value (r % 2) at index r, and -r at index 100 + r. */
static void locs(int rank, int n) {
    struct { int v, i; } a[2] = {{rank % 2, rank}, {-rank, 100 + rank}}, ra[2];
    OK(MPI_Allreduce(a, ra, 2, MPI_2INT, MPI_MAXLOC, MPI_COMM_WORLD));
    CHECK(ra[0].v == (n > 1) && ra[0].i == (n > 1 ? 1 : 0), "2int maxloc %d@%d", ra[0].v, ra[0].i);
    CHECK(ra[1].v == 0 && ra[1].i == 100, "2int maxloc %d@%d", ra[1].v, ra[1].i);
    OK(MPI_Allreduce(a, ra, 2, MPI_2INT, MPI_MINLOC, MPI_COMM_WORLD));
    CHECK(ra[0].v == 0 && ra[0].i == 0, "2int minloc %d@%d", ra[0].v, ra[0].i);
    CHECK(ra[1].v == -(n - 1) && ra[1].i == 100 + n - 1, "2int minloc %d@%d", ra[1].v, ra[1].i);

    struct { double v; int i; } d = {rank == n / 2 ? -1.5 : rank * 1.0, rank}, rd;
    OK(MPI_Allreduce(&d, &rd, 1, MPI_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD));
    CHECK(rd.v == (n == 1 ? -1.5 : -1.5) && rd.i == n / 2, "double_int minloc %g@%d", rd.v, rd.i);
    /* A tie on every rank: the lowest index wins (the index sits before the padding). */
    struct { double v; int i; } tie, rtie;
    memset(&tie, 0x5a + rank, sizeof tie);
    tie.v = 3.0;
    tie.i = n - rank;
    OK(MPI_Allreduce(&tie, &rtie, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD));
    CHECK(rtie.v == 3.0 && rtie.i == 1, "double_int maxloc tie %g@%d", rtie.v, rtie.i);
    struct { float v; int i; } f = {(float)(rank * rank), rank}, rf;
    OK(MPI_Allreduce(&f, &rf, 1, MPI_FLOAT_INT, MPI_MAXLOC, MPI_COMM_WORLD));
    CHECK(rf.v == (float)((n - 1) * (n - 1)) && rf.i == n - 1, "float_int maxloc %g@%d", rf.v, rf.i);
    struct { long v; int i; } l = {5000000000L * (rank % 2), rank}, rl;
    OK(MPI_Reduce(&l, &rl, 1, MPI_LONG_INT, MPI_MAXLOC, 0, MPI_COMM_WORLD));
    if (rank == 0) CHECK(rl.v == (n > 1 ? 5000000000L : 0) && rl.i == (n > 1 ? 1 : 0), "long_int maxloc %ld@%d", rl.v, rl.i);
    struct { short v; int i; } s = {(short)(7 - rank), rank}, rs;
    OK(MPI_Scan(&s, &rs, 1, MPI_SHORT_INT, MPI_MINLOC, MPI_COMM_WORLD));
    CHECK(rs.v == 7 - rank && rs.i == rank, "short_int minloc scan %d@%d", rs.v, rs.i);
}

static void bad_input(int rank, int n) {
    int rc, buf[64] = {0}, counts[64], displs[64];
    for (int r = 0; r < n; r++) counts[r] = 1, displs[r] = r;
#define EXPECT(call, cls)                                                            \
    do {                                                                             \
        rc = (call);                                                                 \
        CHECK(rc == (cls), "%s returned %d, expected %s (%d)", #call, rc, #cls, cls); \
    } while (0)
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Op op = MPI_SUM, stale;
    EXPECT(MPI_Op_free(&op), MPI_ERR_OP);
    EXPECT(MPI_Op_create(NULL, 1, &op), MPI_ERR_ARG);
    OK(MPI_Op_create(absmax, 1, &op));
    stale = op;
    OK(MPI_Op_free(&op));
    EXPECT(MPI_Allreduce(buf, buf + 8, 1, MPI_INT, stale, MPI_COMM_WORLD), MPI_ERR_OP);
    EXPECT(MPI_Op_free(&stale), MPI_ERR_OP);
    EXPECT(MPI_Allreduce(buf, buf + 8, 1, MPI_INT, MPI_MINLOC, MPI_COMM_WORLD), MPI_ERR_OP);
    EXPECT(MPI_Allreduce(buf, buf + 8, 1, MPI_2INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_OP);
    EXPECT(MPI_Allreduce(buf, buf + 8, 1, MPI_INT, (MPI_Op)0x5555, MPI_COMM_WORLD), MPI_ERR_OP);
    EXPECT(MPI_Scan(buf, buf + 8, -1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_COUNT);
    EXPECT(MPI_Exscan(buf, buf + 8, 1, MPI_DATATYPE_NULL, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_TYPE);
    EXPECT(MPI_Reduce_scatter_block(buf, buf + 32, -2, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_COUNT);
    EXPECT(MPI_Reduce_scatter(buf, buf + 32, NULL, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_ARG);
    EXPECT(MPI_Gatherv(buf, 1, MPI_INT, buf + 8, counts, displs, MPI_INT, n, MPI_COMM_WORLD), MPI_ERR_ROOT);
    EXPECT(MPI_Allgatherv(buf, 1, MPI_INT, buf + 8, NULL, displs, MPI_INT, MPI_COMM_WORLD), MPI_ERR_ARG);
    counts[n - 1] = -1;
    EXPECT(MPI_Allgatherv(buf, 1, MPI_INT, buf + 8, counts, displs, MPI_INT, MPI_COMM_WORLD), MPI_ERR_COUNT);
    counts[n - 1] = 1;
    /* Rank's own block holds 2 ints, it sends 1. */
    counts[rank] = 2;
    EXPECT(MPI_Allgatherv(buf, 1, MPI_INT, buf + 8, counts, displs, MPI_INT, MPI_COMM_WORLD), MPI_ERR_COUNT);
    EXPECT(MPI_Scatterv(buf, counts, displs, MPI_INT, buf + 8, 1, MPI_INT, -1, MPI_COMM_WORLD), MPI_ERR_ROOT);
    if (n >= 2 && n <= 16) {
        /* Overlapping receive blocks, in displacement order (checked in one pass) and out of
         * it (checked on a sorted copy): refused before anything moves. */
        int oc[16], od[16], sd[16];
        for (int r = 0; r < n; r++) oc[r] = 1, od[r] = 0, sd[r] = r;
        EXPECT(MPI_Allgatherv(buf, 1, MPI_INT, buf + 8, oc, od, MPI_INT, MPI_COMM_WORLD), MPI_ERR_ARG);
        EXPECT(MPI_Alltoallv(buf, oc, sd, MPI_INT, buf + 32, oc, od, MPI_INT, MPI_COMM_WORLD), MPI_ERR_ARG);
        for (int r = 0; r < n; r++) od[r] = r + 1;
        oc[1] = 2, od[1] = 0, od[0] = 1; /* rank 1's [0, 2) holds rank 0's [1, 2) */
        for (int r = 0, at = 0; r < n; r++) sd[r] = at, at += oc[r];
        EXPECT(MPI_Alltoallv(buf, oc, sd, MPI_INT, buf + 32, oc, od, MPI_INT, MPI_COMM_WORLD), MPI_ERR_ARG);
        if (rank != 1)
            EXPECT(MPI_Allgatherv(buf, 1, MPI_INT, buf + 8, oc, od, MPI_INT, MPI_COMM_WORLD), MPI_ERR_ARG);
    }
    /* MPI_IN_PLACE where the call does not take it: a refusal, not a read of address 1. */
    EXPECT(MPI_Send(MPI_IN_PLACE, 1, MPI_INT, rank, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    if (rank != 0) EXPECT(MPI_Gatherv(MPI_IN_PLACE, 1, MPI_INT, NULL, NULL, NULL, MPI_INT, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
#undef EXPECT
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    varying(rank, size);
    scans(rank);
    user_ops(rank, size);
    locs(rank, size);
    bad_input(rank, size);
    int rc = summary("vcoll");
    MPI_Finalize();
    return rc;
}
