/* Derived datatypes: the constructors and queries, and data of derived types moved by
 * point-to-point calls (every send mode, non-blocking, exchanges) and the collectives,
 * checked against the same layout computed serially; then bad input under
 * MPI_ERRORS_RETURN. Runs on any number of ranks (a ring; rank 0 is the root). */
#include "check.h"
#include <stddef.h>

#define ROWS 4
#define COLS 5

/* The value rank r puts at (i, j) of its matrix. */
static int val(int r, int i, int j) { return 1000 * (r + 1) + 10 * i + j; }

static void fill(int m[ROWS][COLS], int r) {
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < COLS; j++) m[i][j] = val(r, i, j);
}

struct pair {
    int i;
    double d;
};

static void queries(void) {
    MPI_Datatype t;
    MPI_Aint lb, ext;
    int size;

    OK(MPI_Type_contiguous(3, MPI_INT, &t));
    OK(MPI_Type_size(t, &size));
    OK(MPI_Type_get_extent(t, &lb, &ext));
    CHECK(size == 12 && lb == 0 && ext == 12, "contiguous: size %d lb %ld extent %ld", size, (long)lb, (long)ext);
    OK(MPI_Type_free(&t));
    CHECK(t == MPI_DATATYPE_NULL, "MPI_Type_free sets the handle to MPI_DATATYPE_NULL");

    OK(MPI_Type_vector(3, 1, 4, MPI_DOUBLE, &t));
    OK(MPI_Type_size(t, &size));
    OK(MPI_Type_get_extent(t, &lb, &ext));
    CHECK(size == 24 && ext == 72, "vector: size %d extent %ld", size, (long)ext);
    MPI_Datatype r;
    OK(MPI_Type_create_resized(t, -8, 100, &r));
    OK(MPI_Type_get_extent(r, &lb, &ext));
    CHECK(lb == -8 && ext == 100, "resized: lb %ld extent %ld", (long)lb, (long)ext);
    OK(MPI_Type_get_true_extent(r, &lb, &ext));
    CHECK(lb == 0 && ext == 72, "resized: true lb %ld true extent %ld", (long)lb, (long)ext);
    OK(MPI_Type_free(&r));
    OK(MPI_Type_free(&t));

    int bl[2] = {1, 1};
    MPI_Aint disp[2] = {offsetof(struct pair, i), offsetof(struct pair, d)};
    MPI_Datatype tys[2] = {MPI_INT, MPI_DOUBLE};
    OK(MPI_Type_create_struct(2, bl, disp, tys, &t));
    OK(MPI_Type_size(t, &size));
    OK(MPI_Type_get_extent(t, &lb, &ext));
    CHECK(size == 12 && ext == (MPI_Aint)sizeof(struct pair), "struct: size %d extent %ld", size, (long)ext);
    OK(MPI_Type_free(&t));

    int sizes[2] = {4, 4}, subs[2] = {2, 2}, starts[2] = {1, 1};
    OK(MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &t));
    OK(MPI_Type_size(t, &size));
    OK(MPI_Type_get_extent(t, &lb, &ext));
    CHECK(size == 16 && ext == 64, "subarray: size %d extent %ld", size, (long)ext);
    OK(MPI_Type_get_true_extent(t, &lb, &ext));
    CHECK(lb == 20 && ext == 24, "subarray: true lb %ld true extent %ld", (long)lb, (long)ext);
    OK(MPI_Type_free(&t));

    OK(MPI_Type_size(MPI_DOUBLE, &size));
    OK(MPI_Type_get_extent(MPI_SHORT_INT, &lb, &ext));
    CHECK(size == 8 && ext == 8, "predefined: size %d, MPI_SHORT_INT extent %ld", size, (long)ext);
}

/* Point-to-point: rank r sends column (r % COLS) of its matrix to the next rank, which
 * receives it into column ((r + 1) % COLS) of a zeroed matrix, once per send mode. */
static void point_to_point(int rank, int size, MPI_Datatype column) {
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int mine[ROWS][COLS], got[ROWS][COLS];
    fill(mine, rank);
    static char bsend_buf[4096];
    OK(MPI_Buffer_attach(bsend_buf, sizeof bsend_buf));
    for (int mode = 0; mode < 5; mode++) {
        memset(got, 0, sizeof got);
        MPI_Request rq, sq;
        MPI_Status st;
        int scol = rank % COLS, rcol = (rank + 1) % COLS;
        OK(MPI_Irecv(&got[0][rcol], 1, column, prev, mode, MPI_COMM_WORLD, &rq));
        MPI_Barrier(MPI_COMM_WORLD); /* every receive is posted (MPI_Rsend) */
        switch (mode) {
        case 0: OK(MPI_Send(&mine[0][scol], 1, column, next, mode, MPI_COMM_WORLD)); break;
        case 1: OK(MPI_Ssend(&mine[0][scol], 1, column, next, mode, MPI_COMM_WORLD)); break;
        case 2: OK(MPI_Rsend(&mine[0][scol], 1, column, next, mode, MPI_COMM_WORLD)); break;
        case 3: OK(MPI_Bsend(&mine[0][scol], 1, column, next, mode, MPI_COMM_WORLD)); break;
        case 4:
            OK(MPI_Isend(&mine[0][scol], 1, column, next, mode, MPI_COMM_WORLD, &sq));
            OK(MPI_Wait(&sq, MPI_STATUS_IGNORE));
            break;
        }
        OK(MPI_Wait(&rq, &st));
        int n = -1;
        OK(MPI_Get_count(&st, column, &n));
        CHECK(n == 1, "mode %d: MPI_Get_count %d", mode, n);
        int pscol = prev % COLS;
        for (int i = 0; i < ROWS; i++)
            for (int j = 0; j < COLS; j++) {
                int want = j == rcol ? val(prev, i, pscol) : 0;
                CHECK(got[i][j] == want, "mode %d: (%d,%d) = %d, want %d", mode, i, j, got[i][j], want);
            }
    }
    /* Both non-contiguous operations completed by MPI_Waitall without statuses: the staged
     * receive must still be unpacked into the column (and the packed send released). */
    {
        memset(got, 0, sizeof got);
        MPI_Request rqs[2];
        int scol = rank % COLS, rcol = (rank + 1) % COLS;
        OK(MPI_Irecv(&got[0][rcol], 1, column, prev, 9, MPI_COMM_WORLD, &rqs[0]));
        OK(MPI_Isend(&mine[0][scol], 1, column, next, 9, MPI_COMM_WORLD, &rqs[1]));
        OK(MPI_Waitall(2, rqs, MPI_STATUSES_IGNORE));
        CHECK(rqs[0] == MPI_REQUEST_NULL && rqs[1] == MPI_REQUEST_NULL, "waitall: handles freed");
        int pscol = prev % COLS;
        for (int i = 0; i < ROWS; i++)
            for (int j = 0; j < COLS; j++) {
                int want = j == rcol ? val(prev, i, pscol) : 0;
                CHECK(got[i][j] == want, "waitall: (%d,%d) = %d, want %d", i, j, got[i][j], want);
            }
    }
    void *b;
    int bs;
    OK(MPI_Buffer_detach(&b, &bs));

    /* A blocking receive into a column, from a contiguous send of ROWS ints. */
    int row[ROWS], col_in[ROWS][COLS];
    for (int i = 0; i < ROWS; i++) row[i] = val(rank, i, 7);
    memset(col_in, 0, sizeof col_in);
    MPI_Status st;
    OK(MPI_Sendrecv(row, ROWS, MPI_INT, next, 9, &col_in[0][2], 1, column, prev, 9, MPI_COMM_WORLD, &st));
    for (int i = 0; i < ROWS; i++)
        CHECK(col_in[i][2] == val(prev, i, 7) && col_in[i][1] == 0 && col_in[i][3] == 0, "sendrecv into a column, row %d", i);

    /* Structs: one int and one double per element, two elements. */
    struct pair ps[2] = {{rank, rank + 0.5}, {-rank, rank * 2.0}}, pr[2];
    memset(pr, 0, sizeof pr);
    int bl[2] = {1, 1};
    MPI_Aint disp[2] = {offsetof(struct pair, i), offsetof(struct pair, d)};
    MPI_Datatype tys[2] = {MPI_INT, MPI_DOUBLE}, pt;
    OK(MPI_Type_create_struct(2, bl, disp, tys, &pt));
    OK(MPI_Type_commit(&pt));
    OK(MPI_Sendrecv(ps, 2, pt, next, 10, pr, 2, pt, prev, 10, MPI_COMM_WORLD, &st));
    CHECK(pr[0].i == prev && pr[0].d == prev + 0.5 && pr[1].i == -prev && pr[1].d == prev * 2.0,
          "struct exchange: %d %g %d %g", pr[0].i, pr[0].d, pr[1].i, pr[1].d);

    /* Get_elements: 12 + 4 bytes into two struct instances: one whole, plus its int. */
    char raw[16];
    memset(raw, 0, sizeof raw);
    OK(MPI_Sendrecv(raw, 16, MPI_BYTE, next, 11, pr, 2, pt, prev, 11, MPI_COMM_WORLD, &st));
    int cnt = 0, el = 0;
    OK(MPI_Get_count(&st, pt, &cnt));
    OK(MPI_Get_elements(&st, pt, &el));
    CHECK(cnt == MPI_UNDEFINED && el == 3, "16 bytes of {int, double}: count %d elements %d", cnt, el);
    OK(MPI_Type_free(&pt));

    /* Sendrecv_replace on an indexed type: elements 0, 1 and 4 of 6 ints. */
    int blk[2] = {2, 1}, dsp[2] = {0, 4}, v[6];
    MPI_Datatype idx;
    OK(MPI_Type_indexed(2, blk, dsp, MPI_INT, &idx));
    OK(MPI_Type_commit(&idx));
    for (int i = 0; i < 6; i++) v[i] = val(rank, 0, i);
    OK(MPI_Sendrecv_replace(v, 1, idx, next, 12, prev, 12, MPI_COMM_WORLD, &st));
    for (int i = 0; i < 6; i++) {
        int want = (i == 0 || i == 1 || i == 4) ? val(prev, 0, i) : val(rank, 0, i);
        CHECK(v[i] == want, "sendrecv_replace indexed [%d] = %d, want %d", i, v[i], want);
    }
    OK(MPI_Type_free(&idx));

    /* A Fortran-order subarray (the 2 x 2 block at (1, 1) of a 3 x 4 column-major array)
     * sent as 4 contiguous ints. */
    int fs[2] = {3, 4}, fsub[2] = {2, 2}, fst[2] = {1, 1}, arr[12], out[4];
    MPI_Datatype fsa;
    OK(MPI_Type_create_subarray(2, fs, fsub, fst, MPI_ORDER_FORTRAN, MPI_INT, &fsa));
    OK(MPI_Type_commit(&fsa));
    for (int i = 0; i < 12; i++) arr[i] = rank * 100 + i;
    OK(MPI_Sendrecv(arr, 1, fsa, next, 13, out, 4, MPI_INT, prev, 13, MPI_COMM_WORLD, &st));
    /* Column-major: element (i, j) at i + 3 j; the block is (1,1) (2,1) (1,2) (2,2). */
    int want4[4] = {4, 5, 7, 8};
    for (int k = 0; k < 4; k++) CHECK(out[k] == prev * 100 + want4[k], "fortran subarray [%d] = %d", k, out[k]);
    OK(MPI_Type_free(&fsa));
}

static void collectives(int rank, int size, MPI_Datatype column) {
    int m[ROWS][COLS];
    /* Bcast of column 3 of the root's matrix into column 3 of everyone's. */
    if (rank == 0)
        fill(m, 0);
    else
        memset(m, 0, sizeof m);
    OK(MPI_Bcast(&m[0][3], 1, column, 0, MPI_COMM_WORLD));
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < COLS; j++) {
            int want = (j == 3 || rank == 0) ? val(0, i, j) : 0;
            CHECK(m[i][j] == want, "bcast column (%d,%d) = %d", i, j, m[i][j]);
        }

    /* Gather: rank r's ROWS ints land in column r of the root's ROWS x size matrix, through
     * a column type resized to one int so that blocks are one column apart. */
    int n = size;
    int *g = calloc((size_t)ROWS * n, sizeof(int)), *ag = calloc((size_t)ROWS * n, sizeof(int));
    MPI_Datatype gcol, gcol1;
    OK(MPI_Type_vector(ROWS, 1, n, MPI_INT, &gcol));
    OK(MPI_Type_create_resized(gcol, 0, sizeof(int), &gcol1));
    OK(MPI_Type_commit(&gcol1));
    int mine[ROWS];
    for (int i = 0; i < ROWS; i++) mine[i] = val(rank, i, 0);
    OK(MPI_Gather(mine, ROWS, MPI_INT, g, 1, gcol1, 0, MPI_COMM_WORLD));
    OK(MPI_Allgather(mine, ROWS, MPI_INT, ag, 1, gcol1, MPI_COMM_WORLD));
    for (int i = 0; i < ROWS; i++)
        for (int r = 0; r < n; r++) {
            if (rank == 0) CHECK(g[i * n + r] == val(r, i, 0), "gather (%d,%d) = %d", i, r, g[i * n + r]);
            CHECK(ag[i * n + r] == val(r, i, 0), "allgather (%d,%d) = %d", i, r, ag[i * n + r]);
        }

    /* Scatter: column r of the root's matrix to rank r, received as contiguous ints; and
     * Alltoall: column r of every rank's matrix to rank r, into column (sender) of a matrix. */
    int *src = calloc((size_t)ROWS * n, sizeof(int));
    for (int i = 0; i < ROWS; i++)
        for (int r = 0; r < n; r++) src[i * n + r] = val(rank, i, r);
    int part[ROWS];
    OK(MPI_Scatter(src, 1, gcol1, part, ROWS, MPI_INT, 0, MPI_COMM_WORLD));
    for (int i = 0; i < ROWS; i++) CHECK(part[i] == val(0, i, rank), "scatter [%d] = %d", i, part[i]);
    memset(ag, 0, sizeof(int) * ROWS * n);
    OK(MPI_Alltoall(src, 1, gcol1, ag, 1, gcol1, MPI_COMM_WORLD));
    for (int i = 0; i < ROWS; i++)
        for (int r = 0; r < n; r++) CHECK(ag[i * n + r] == val(r, i, rank), "alltoall (%d,%d) = %d", i, r, ag[i * n + r]);

    /* In place: every rank's column already sits in ag; allgather the rest. */
    for (int i = 0; i < ROWS; i++)
        for (int r = 0; r < n; r++) ag[i * n + r] = r == rank ? val(rank, i, 5) : -1;
    OK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, ag, 1, gcol1, MPI_COMM_WORLD));
    for (int i = 0; i < ROWS; i++)
        for (int r = 0; r < n; r++) CHECK(ag[i * n + r] == val(r, i, 5), "allgather in place (%d,%d) = %d", i, r, ag[i * n + r]);
    OK(MPI_Type_free(&gcol1));
    OK(MPI_Type_free(&gcol));
    free(g);
    free(ag);
    free(src);

    /* Reductions over a column of doubles and a contiguous pair of ints. */
    double dm[ROWS][COLS], dsum[ROWS][COLS];
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < COLS; j++) dm[i][j] = dsum[i][j] = rank + i + 0.25 * j;
    MPI_Datatype dcol;
    OK(MPI_Type_vector(ROWS, 1, COLS, MPI_DOUBLE, &dcol));
    OK(MPI_Type_commit(&dcol));
    OK(MPI_Allreduce(&dm[0][1], &dsum[0][2], 1, dcol, MPI_SUM, MPI_COMM_WORLD));
    double ranks = n * (n - 1) / 2.0;
    for (int i = 0; i < ROWS; i++) {
        CHECK(dsum[i][2] == ranks + n * (i + 0.25), "allreduce column [%d] = %g", i, dsum[i][2]);
        CHECK(dsum[i][1] == rank + i + 0.25 && dsum[i][3] == rank + i + 0.75, "allreduce left row %d alone", i);
    }
    OK(MPI_Allreduce(MPI_IN_PLACE, &dm[0][4], 1, dcol, MPI_MAX, MPI_COMM_WORLD));
    for (int i = 0; i < ROWS; i++) CHECK(dm[i][4] == (n - 1) + i + 1.0 && dm[i][3] == rank + i + 0.75, "allreduce in place [%d]", i);
    OK(MPI_Reduce(rank == 0 ? MPI_IN_PLACE : (void *)&dm[0][0], &dm[0][0], 1, dcol, MPI_MIN, 0, MPI_COMM_WORLD));
    if (rank == 0)
        for (int i = 0; i < ROWS; i++) CHECK(dm[i][0] == i, "reduce in place [%d] = %g", i, dm[i][0]);
    OK(MPI_Type_free(&dcol));
    MPI_Datatype two;
    int x[2] = {rank, 2 * rank}, y[2] = {0, 0};
    OK(MPI_Type_contiguous(2, MPI_INT, &two));
    OK(MPI_Type_commit(&two));
    OK(MPI_Reduce(x, y, 1, two, MPI_SUM, n - 1, MPI_COMM_WORLD));
    if (rank == n - 1) CHECK(y[0] == n * (n - 1) / 2 && y[1] == n * (n - 1), "reduce pair %d %d", y[0], y[1]);
    OK(MPI_Type_free(&two));
}

static void bad_input(int rank) {
    int rc, buf[8] = {0};
    MPI_Datatype t, stale;
#define EXPECT(call, cls)                                                            \
    do {                                                                             \
        rc = (call);                                                                 \
        CHECK(rc == (cls), "%s returned %d, expected %s (%d)", #call, rc, #cls, cls); \
    } while (0)
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    EXPECT(MPI_Type_contiguous(-1, MPI_INT, &t), MPI_ERR_COUNT);
    EXPECT(MPI_Type_vector(2, -3, 4, MPI_INT, &t), MPI_ERR_COUNT);
    EXPECT(MPI_Type_contiguous(2, MPI_DATATYPE_NULL, &t), MPI_ERR_TYPE);
    EXPECT(MPI_Type_contiguous(2, (MPI_Datatype)0x77777, &t), MPI_ERR_TYPE);
    EXPECT(MPI_Type_contiguous(2, MPI_INT, NULL), MPI_ERR_ARG);
    EXPECT(MPI_Type_indexed(2, NULL, NULL, MPI_INT, &t), MPI_ERR_ARG);
    /* A negative extent is allowed (MPI's lb/ub may give one): see dtype2.c. */
    OK(MPI_Type_create_resized(MPI_INT, 0, -4, &t));
    OK(MPI_Type_free(&t));
    int sz[1] = {4}, sub[1] = {3}, st[1] = {2};
    EXPECT(MPI_Type_create_subarray(1, sz, sub, st, MPI_ORDER_C, MPI_INT, &t), MPI_ERR_ARG);
    st[0] = 0;
    EXPECT(MPI_Type_create_subarray(1, sz, sub, st, 77, MPI_INT, &t), MPI_ERR_ARG);
    MPI_Datatype predefined = MPI_INT;
    EXPECT(MPI_Type_free(&predefined), MPI_ERR_TYPE);
    /* A predefined type is committed already: a no-op. */
    OK(MPI_Type_commit(&predefined));

    OK(MPI_Type_contiguous(2, MPI_INT, &t));
    /* Not committed yet: refused by communication, fine for queries. */
    EXPECT(MPI_Send(buf, 1, t, rank, 0, MPI_COMM_WORLD), MPI_ERR_TYPE);
    EXPECT(MPI_Bcast(buf, 1, t, 0, MPI_COMM_WORLD), MPI_ERR_TYPE);
    int size = 0;
    OK(MPI_Type_size(t, &size));
    CHECK(size == 8, "uncommitted size %d", size);
    OK(MPI_Type_commit(&t));
    EXPECT(MPI_Send(buf, -1, t, rank, 0, MPI_COMM_WORLD), MPI_ERR_COUNT);
    EXPECT(MPI_Send(NULL, 1, t, rank, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    stale = t;
    OK(MPI_Type_free(&t));
    EXPECT(MPI_Send(buf, 1, stale, rank, 0, MPI_COMM_WORLD), MPI_ERR_TYPE);
    EXPECT(MPI_Type_size(stale, &size), MPI_ERR_TYPE);
    EXPECT(MPI_Type_free(&stale), MPI_ERR_TYPE);

    /* A reduction over a struct of int and double: no single element type. */
    int bl[2] = {1, 1};
    MPI_Aint disp[2] = {offsetof(struct pair, i), offsetof(struct pair, d)};
    MPI_Datatype tys[2] = {MPI_INT, MPI_DOUBLE};
    struct pair a = {1, 1.0}, b;
    OK(MPI_Type_create_struct(2, bl, disp, tys, &t));
    OK(MPI_Type_commit(&t));
    EXPECT(MPI_Allreduce(&a, &b, 1, t, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_OP);
    OK(MPI_Type_free(&t));
    /* MPI_SUM on a vector of MPI_BYTE: not defined on bytes. */
    OK(MPI_Type_vector(2, 1, 2, MPI_BYTE, &t));
    OK(MPI_Type_commit(&t));
    EXPECT(MPI_Allreduce(buf, buf + 4, 1, t, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_OP);
    OK(MPI_Type_free(&t));
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
#undef EXPECT
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Datatype column;
    OK(MPI_Type_vector(ROWS, 1, COLS, MPI_INT, &column));
    OK(MPI_Type_commit(&column));
    queries();
    point_to_point(rank, size, column);
    collectives(rank, size, column);
    OK(MPI_Type_free(&column));
    bad_input(rank);
    int rc = summary("dtype");
    MPI_Finalize();
    return rc;
}
