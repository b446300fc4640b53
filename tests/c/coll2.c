/* Collectives, second part: the non-blocking v-collectives, reduce-scatters and scans
 * (each against its blocking form, with point-to-point traffic in flight), persistent
 * collectives started several times over changed buffers, the large-count _c forms,
 * MPI_Reduce_local (predefined and user operations, commutative or not), MPI_Op_create_c,
 * arithmetic on the char types, a user operation on 128-byte elements called on whole
 * buffers, MINLOC/MAXLOC on MPI_LONG_DOUBLE_INT, and bad input under MPI_ERRORS_RETURN. */
#include "check.h"

static int rank, size;

/* 2x2 integer matrices: an associative, non-commutative product (rank order matters). */
static void matmul(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    long *a = in, *b = inout;
    for (int k = 0; k < *len; k++, a += 4, b += 4) {
        long r[4] = {a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3],
                     a[2] * b[0] + a[3] * b[2], a[2] * b[1] + a[3] * b[3]};
        memcpy(b, r, sizeof r);
    }
}

/* The same product with an MPI_Count length (MPI_Op_create_c). */
static void matmul_c(void *in, void *inout, MPI_Count *len, MPI_Datatype *dt) {
    int n = (int)*len;
    matmul(in, inout, &n, dt);
}

static void rank_matrix(int r, long m[4]) {
    m[0] = r + 1;
    m[1] = 1;
    m[2] = r % 2;
    m[3] = 2;
}

/* Ring traffic in flight while a collective runs: an Isend to the right, an Irecv from the
 * left, completed with the collective's request in one MPI_Waitall. */
static int ring_out, ring_in;
static void ring_start(MPI_Request *reqs, int tag) {
    ring_out = rank * 100 + tag;
    ring_in = -1;
    OK(MPI_Irecv(&ring_in, 1, MPI_INT, (rank + size - 1) % size, tag, MPI_COMM_WORLD, &reqs[0]));
    OK(MPI_Isend(&ring_out, 1, MPI_INT, (rank + 1) % size, tag, MPI_COMM_WORLD, &reqs[1]));
}
static void ring_check(int tag) {
    CHECK(ring_in == ((rank + size - 1) % size) * 100 + tag, "ring message %d: got %d", tag,
          ring_in);
}

/* Wait for a collective request together with the ring's two. */
static void wait_with_ring(MPI_Request coll, MPI_Request ring[2], int tag) {
    MPI_Request all[3] = {ring[0], coll, ring[1]};
    OK(MPI_Waitall(3, all, MPI_STATUSES_IGNORE));
    ring_check(tag);
}

static int cmp_ints(const int *a, const int *b, int n) {
    int bad = 0;
    for (int i = 0; i < n; i++) bad += a[i] != b[i];
    return bad;
}

/* ------------------------------------------------------------ non-blocking v-collectives */

static void test_nb_vcoll(void) {
    MPI_Request ring[2], req;
    int counts[8], displs[8], total = 0;
    for (int r = 0; r < size; r++) {
        counts[r] = r + 1;
        displs[r] = total + r; /* a one-int gap before each block */
        total += counts[r] + r;
    }
    int mine[8], a[64], b[64];
    for (int i = 0; i < rank + 1; i++) mine[i] = rank * 10 + i;

    /* Igatherv at every root, and in place at the root. */
    for (int root = 0; root < size; root++) {
        for (int i = 0; i < 64; i++) a[i] = b[i] = -7;
        OK(MPI_Gatherv(mine, rank + 1, MPI_INT, a, counts, displs, MPI_INT, root, MPI_COMM_WORLD));
        ring_start(ring, 1);
        OK(MPI_Igatherv(mine, rank + 1, MPI_INT, b, counts, displs, MPI_INT, root, MPI_COMM_WORLD,
                        &req));
        wait_with_ring(req, ring, 1);
        if (rank == root) CHECK(cmp_ints(a, b, total) == 0, "igatherv root %d", root);
        for (int i = 0; i < 64; i++) b[i] = -7;
        if (rank == root) memcpy(b + displs[rank], mine, (rank + 1) * sizeof(int));
        OK(MPI_Igatherv(rank == root ? MPI_IN_PLACE : mine, rank + 1, MPI_INT, b, counts, displs,
                        MPI_INT, root, MPI_COMM_WORLD, &req));
        OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        if (rank == root) CHECK(cmp_ints(a, b, total) == 0, "igatherv in place root %d", root);
    }

    /* Iscatterv at every root. */
    int src[64];
    for (int i = 0; i < 64; i++) src[i] = 1000 + i;
    for (int root = 0; root < size; root++) {
        int ra[8] = {0}, rb[8] = {0};
        OK(MPI_Scatterv(src, counts, displs, MPI_INT, ra, rank + 1, MPI_INT, root, MPI_COMM_WORLD));
        ring_start(ring, 2);
        OK(MPI_Iscatterv(src, counts, displs, MPI_INT, rb, rank + 1, MPI_INT, root,
                         MPI_COMM_WORLD, &req));
        wait_with_ring(req, ring, 2);
        CHECK(cmp_ints(ra, rb, rank + 1) == 0 && rb[0] == 1000 + displs[rank],
              "iscatterv root %d", root);
    }

    /* Iallgatherv into a strided receive type (unpacked at completion). */
    MPI_Datatype pair;
    OK(MPI_Type_vector(1, 1, 2, MPI_INT, &pair));
    MPI_Datatype spaced;
    OK(MPI_Type_create_resized(pair, 0, 2 * sizeof(int), &spaced));
    OK(MPI_Type_commit(&spaced));
    for (int i = 0; i < 64; i++) a[i] = b[i] = -7;
    OK(MPI_Allgatherv(mine, rank + 1, MPI_INT, a, counts, displs, spaced, MPI_COMM_WORLD));
    ring_start(ring, 3);
    OK(MPI_Iallgatherv(mine, rank + 1, MPI_INT, b, counts, displs, spaced, MPI_COMM_WORLD, &req));
    wait_with_ring(req, ring, 3);
    CHECK(cmp_ints(a, b, 64) == 0, "iallgatherv (strided type)");
    CHECK(b[2 * displs[size - 1]] == (size - 1) * 10 && b[1] == -7, "iallgatherv layout");
    /* In place. */
    for (int i = 0; i < 64; i++) b[i] = -7;
    for (int i = 0; i <= rank; i++) b[2 * (displs[rank] + i)] = mine[i];
    OK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b, counts, displs, spaced,
                       MPI_COMM_WORLD, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(cmp_ints(a, b, 64) == 0, "iallgatherv in place");
    OK(MPI_Type_free(&spaced));
    OK(MPI_Type_free(&pair));

    /* Ialltoallv: rank i sends (i + 2j) % 3 + 1 ints to rank j. */
    int sc[8], sd[8], rc[8], rd[8], st = 0, rt = 0;
    for (int j = 0; j < size; j++) {
        sc[j] = (rank + 2 * j) % 3 + 1;
        rc[j] = (j + 2 * rank) % 3 + 1;
        sd[j] = st;
        rd[j] = rt + 1;
        st += sc[j];
        rt += rc[j] + 1;
    }
    int sbuf[64];
    for (int i = 0; i < st; i++) sbuf[i] = rank * 1000 + i;
    for (int i = 0; i < 64; i++) a[i] = b[i] = -7;
    OK(MPI_Alltoallv(sbuf, sc, sd, MPI_INT, a, rc, rd, MPI_INT, MPI_COMM_WORLD));
    ring_start(ring, 4);
    OK(MPI_Ialltoallv(sbuf, sc, sd, MPI_INT, b, rc, rd, MPI_INT, MPI_COMM_WORLD, &req));
    wait_with_ring(req, ring, 4);
    CHECK(cmp_ints(a, b, 64) == 0, "ialltoallv");
    int off0 = 0; /* where rank 0's block for this rank starts in its send buffer */
    for (int j = 0; j < rank; j++) off0 += (2 * j) % 3 + 1;
    CHECK(b[rd[0]] == off0 && b[0] == -7, "ialltoallv: rank 0's block at %d: %d", rd[0], b[rd[0]]);

    /* Ialltoallw: per-peer byte displacements, MPI_INT and MPI_SHORT pairs alternating by
     * peer (sender and receiver agree: the type of peer j's block is chosen by j + rank). */
    MPI_Datatype types[8];
    int wsd[8], wrd[8], wsc[8], wrc[8];
    for (int j = 0; j < size; j++) {
        types[j] = MPI_INT;
        wsc[j] = wrc[j] = 2;
        wsd[j] = j * 2 * (int)sizeof(int);
        wrd[j] = (size - 1 - j) * 2 * (int)sizeof(int);
    }
    for (int i = 0; i < 2 * size; i++) sbuf[i] = rank * 100 + i;
    for (int i = 0; i < 64; i++) a[i] = b[i] = -7;
    OK(MPI_Alltoallw(sbuf, wsc, wsd, types, a, wrc, wrd, types, MPI_COMM_WORLD));
    ring_start(ring, 5);
    OK(MPI_Ialltoallw(sbuf, wsc, wsd, types, b, wrc, wrd, types, MPI_COMM_WORLD, &req));
    wait_with_ring(req, ring, 5);
    CHECK(cmp_ints(a, b, 64) == 0, "ialltoallw");
    CHECK(b[2 * (size - 1)] == 0 * 100 + 2 * rank, "ialltoallw: rank 0's block lands last");
}

/* ------------------------------------------------------------ reduce-scatters and scans */

static void test_nb_reductions(void) {
    MPI_Request ring[2], req;
    int counts[8], total = 0;
    for (int r = 0; r < size; r++) total += counts[r] = r + 1;
    int in[64], a[64], b[64];
    for (int i = 0; i < total; i++) in[i] = rank * 3 + i;

    OK(MPI_Reduce_scatter(in, a, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    ring_start(ring, 6);
    OK(MPI_Ireduce_scatter(in, b, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req));
    wait_with_ring(req, ring, 6);
    CHECK(cmp_ints(a, b, rank + 1) == 0, "ireduce_scatter");
    int off = rank * (rank + 1) / 2;
    CHECK(b[0] == 3 * size * (size - 1) / 2 + size * off, "ireduce_scatter value %d", b[0]);
    /* In place. */
    memcpy(b, in, total * sizeof(int));
    OK(MPI_Ireduce_scatter(MPI_IN_PLACE, b, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(cmp_ints(a, b, rank + 1) == 0, "ireduce_scatter in place");

    /* Block form, with a non-commutative user operation: 2 matrices per rank. */
    MPI_Datatype mat;
    MPI_Op mm;
    OK(MPI_Type_contiguous(4, MPI_LONG, &mat));
    OK(MPI_Type_commit(&mat));
    OK(MPI_Op_create(matmul, 0, &mm));
    long ms[4 * 2 * 8], ma[8], mb[8];
    for (int k = 0; k < 2 * size; k++) rank_matrix(rank + k, ms + 4 * k);
    OK(MPI_Reduce_scatter_block(ms, ma, 2, mat, mm, MPI_COMM_WORLD));
    ring_start(ring, 7);
    OK(MPI_Ireduce_scatter_block(ms, mb, 2, mat, mm, MPI_COMM_WORLD, &req));
    wait_with_ring(req, ring, 7);
    CHECK(memcmp(ma, mb, sizeof ma) == 0, "ireduce_scatter_block (non-commutative)");

    /* Scans: sums of doubles and matrix products, against the blocking forms. */
    double d = rank + 0.5, da = 0, db = 0;
    OK(MPI_Scan(&d, &da, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    ring_start(ring, 8);
    OK(MPI_Iscan(&d, &db, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &req));
    wait_with_ring(req, ring, 8);
    CHECK(da == db && db == rank * (rank + 1) / 2.0 + (rank + 1) * 0.5, "iscan %g %g", da, db);
    long m[4], pa[4] = {0}, pb[4] = {0};
    rank_matrix(rank, m);
    OK(MPI_Scan(m, pa, 1, mat, mm, MPI_COMM_WORLD));
    OK(MPI_Iscan(m, pb, 1, mat, mm, MPI_COMM_WORLD, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(memcmp(pa, pb, sizeof pa) == 0, "iscan (non-commutative)");
    for (int k = 0; k < 4; k++) pa[k] = pb[k] = 99;
    OK(MPI_Exscan(m, pa, 1, mat, mm, MPI_COMM_WORLD));
    ring_start(ring, 9);
    OK(MPI_Iexscan(m, pb, 1, mat, mm, MPI_COMM_WORLD, &req));
    wait_with_ring(req, ring, 9);
    if (rank > 0) CHECK(memcmp(pa, pb, sizeof pa) == 0, "iexscan (non-commutative)");
    int one = 1, ex = -5;
    OK(MPI_Iexscan(&one, &ex, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    if (rank > 0) CHECK(ex == rank, "iexscan sum: %d", ex);
    /* In place. */
    int v = rank + 1;
    OK(MPI_Iscan(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(v == (rank + 1) * (rank + 2) / 2, "iscan in place: %d", v);
    OK(MPI_Op_free(&mm));
    OK(MPI_Type_free(&mat));
}

/* ------------------------------------------------------------ persistent collectives */

static void test_persistent(void) {
    MPI_Request reqs[6];
    int x = 0, sum = 0, bval[4] = {0}, gv[8] = {0}, gathered[64], counts[8], displs[8];
    long rsb_in[16] = {0}, rsb_out[2] = {0};
    double sc_in = 0, sc_out = 0;
    for (int r = 0; r < size; r++) {
        counts[r] = 1;
        displs[r] = size - 1 - r;
    }
    OK(MPI_Allreduce_init(&x, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &reqs[0]));
    OK(MPI_Bcast_init(bval, 4, MPI_INT, size - 1, MPI_COMM_WORLD, MPI_INFO_NULL, &reqs[1]));
    OK(MPI_Gatherv_init(gv, 1, MPI_INT, gathered, counts, displs, MPI_INT, 0, MPI_COMM_WORLD,
                        MPI_INFO_NULL, &reqs[2]));
    OK(MPI_Reduce_scatter_block_init(rsb_in, rsb_out, 2, MPI_LONG, MPI_MAX, MPI_COMM_WORLD,
                                     MPI_INFO_NULL, &reqs[3]));
    OK(MPI_Scan_init(&sc_in, &sc_out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL,
                     &reqs[4]));
    OK(MPI_Barrier_init(MPI_COMM_WORLD, MPI_INFO_NULL, &reqs[5]));
    int flag = 1;
    OK(MPI_Test(&reqs[0], &flag, MPI_STATUS_IGNORE));
    CHECK(flag && reqs[0] != MPI_REQUEST_NULL, "an inactive persistent collective tests done");
    for (int round = 0; round < 3; round++) {
        x = rank * 10 + round;
        for (int i = 0; i < 4; i++) bval[i] = rank == size - 1 ? round * 7 + i : -1;
        gv[0] = rank + 100 * round;
        for (int i = 0; i < 2 * size; i++) rsb_in[i] = (long)((rank + round) % size) * 50 + i;
        sc_in = round + rank;
        if (round == 1) {
            /* One at a time, completed by Wait and Test. */
            for (int k = 0; k < 6; k++) {
                OK(MPI_Start(&reqs[k]));
                if (k % 2)
                    OK(MPI_Wait(&reqs[k], MPI_STATUS_IGNORE));
                else {
                    int done = 0;
                    while (!done) POLL(MPI_Test(&reqs[k], &done, MPI_STATUS_IGNORE));
                }
            }
        } else {
            OK(MPI_Startall(6, reqs));
            OK(MPI_Waitall(6, reqs, MPI_STATUSES_IGNORE));
        }
        CHECK(reqs[0] != MPI_REQUEST_NULL, "a persistent request stays after completion");
        CHECK(sum == 10 * size * (size - 1) / 2 + size * round, "allreduce_init round %d: %d",
              round, sum);
        int bad = 0;
        for (int i = 0; i < 4; i++) bad += bval[i] != round * 7 + i;
        CHECK(bad == 0, "bcast_init round %d", round);
        if (rank == 0) {
            bad = 0;
            for (int r = 0; r < size; r++) bad += gathered[size - 1 - r] != r + 100 * round;
            CHECK(bad == 0, "gatherv_init round %d", round);
        }
        CHECK(rsb_out[0] == (long)(size - 1) * 50 + 2 * rank &&
                  rsb_out[1] == (long)(size - 1) * 50 + 2 * rank + 1,
              "reduce_scatter_block_init round %d: %ld", round, rsb_out[0]);
        CHECK(sc_out == (rank + 1) * round + rank * (rank + 1) / 2.0, "scan_init round %d", round);
    }
    for (int k = 0; k < 6; k++) OK(MPI_Request_free(&reqs[k]));
    CHECK(reqs[0] == MPI_REQUEST_NULL, "Request_free of a persistent collective");

    /* The rest of the family, once each over two starts, against the blocking forms. */
    int a[64], b[64], s[64];
    for (int i = 0; i < 64; i++) s[i] = rank * 64 + i;
    MPI_Request r;
    for (int round = 0; round < 2; round++) {
        s[0] = rank + round;
        OK(MPI_Alltoall(s, 2, MPI_INT, a, 2, MPI_INT, MPI_COMM_WORLD));
        OK(MPI_Alltoall_init(s, 2, MPI_INT, b, 2, MPI_INT, MPI_COMM_WORLD, MPI_INFO_NULL, &r));
        OK(MPI_Start(&r));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        OK(MPI_Request_free(&r));
        CHECK(cmp_ints(a, b, 2 * size) == 0, "alltoall_init");
        OK(MPI_Allgather(s, 3, MPI_INT, a, 3, MPI_INT, MPI_COMM_WORLD));
        OK(MPI_Allgather_init(s, 3, MPI_INT, b, 3, MPI_INT, MPI_COMM_WORLD, MPI_INFO_NULL, &r));
        OK(MPI_Start(&r));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        OK(MPI_Request_free(&r));
        CHECK(cmp_ints(a, b, 3 * size) == 0, "allgather_init");
    }
    s[0] = rank * 64;
    int one[8], cnt[8], dsp[8];
    for (int j = 0; j < size; j++) cnt[j] = 1, dsp[j] = j;
    OK(MPI_Scatter_init(s, 1, MPI_INT, one, 1, MPI_INT, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &r));
    OK(MPI_Start(&r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    OK(MPI_Request_free(&r));
    CHECK(one[0] == rank, "scatter_init");
    OK(MPI_Scatterv_init(s, cnt, dsp, MPI_INT, one, 1, MPI_INT, 0, MPI_COMM_WORLD, MPI_INFO_NULL,
                         &r));
    OK(MPI_Start(&r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    OK(MPI_Request_free(&r));
    CHECK(one[0] == rank, "scatterv_init");
    OK(MPI_Gather_init(&rank, 1, MPI_INT, a, 1, MPI_INT, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &r));
    OK(MPI_Start(&r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    OK(MPI_Request_free(&r));
    if (rank == 0) CHECK(a[size - 1] == size - 1, "gather_init");
    OK(MPI_Allgatherv_init(&rank, 1, MPI_INT, b, cnt, dsp, MPI_INT, MPI_COMM_WORLD, MPI_INFO_NULL,
                           &r));
    OK(MPI_Start(&r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    OK(MPI_Request_free(&r));
    CHECK(b[size - 1] == size - 1, "allgatherv_init");
    OK(MPI_Alltoallv_init(s, cnt, dsp, MPI_INT, b, cnt, dsp, MPI_INT, MPI_COMM_WORLD,
                          MPI_INFO_NULL, &r));
    OK(MPI_Start(&r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    OK(MPI_Request_free(&r));
    CHECK(b[size - 1] == (size - 1) * 64 + rank, "alltoallv_init: %d", b[size - 1]);
    MPI_Datatype tys[8];
    int bd[8];
    for (int j = 0; j < size; j++) tys[j] = MPI_INT, bd[j] = j * (int)sizeof(int);
    OK(MPI_Alltoallw_init(s, cnt, bd, tys, b, cnt, bd, tys, MPI_COMM_WORLD, MPI_INFO_NULL, &r));
    OK(MPI_Start(&r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    OK(MPI_Request_free(&r));
    CHECK(b[size - 1] == (size - 1) * 64 + rank, "alltoallw_init");
    int red = 0, allr = 0, rsv = 0, ex = -1;
    OK(MPI_Reduce_init(&rank, &red, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &r));
    OK(MPI_Start(&r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    OK(MPI_Request_free(&r));
    if (rank == 0) CHECK(red == size - 1, "reduce_init");
    for (int j = 0; j < size; j++) a[j] = j + rank;
    OK(MPI_Reduce_scatter_init(a, &rsv, cnt, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &r));
    OK(MPI_Start(&r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    OK(MPI_Request_free(&r));
    CHECK(rsv == size * rank + size * (size - 1) / 2, "reduce_scatter_init: %d", rsv);
    OK(MPI_Exscan_init(&rank, &ex, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &r));
    OK(MPI_Start(&r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    OK(MPI_Request_free(&r));
    if (rank > 0) CHECK(ex == rank * (rank - 1) / 2, "exscan_init: %d", ex);
    (void)allr;
}

/* ------------------------------------------------------------ large-count forms */

static void test_large_count(void) {
    MPI_Count n = 5;
    int v[5], a[64], b[64];
    for (int i = 0; i < 5; i++) v[i] = rank == 0 ? 40 + i : 0;
    OK(MPI_Bcast_c(v, n, MPI_INT, 0, MPI_COMM_WORLD));
    CHECK(v[4] == 44, "bcast_c");
    int s = rank + 1, t = 0;
    OK(MPI_Allreduce_c(&s, &t, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(t == size * (size + 1) / 2, "allreduce_c");
    t = 0;
    OK(MPI_Reduce_c(&s, &t, 1, MPI_INT, MPI_SUM, size - 1, MPI_COMM_WORLD));
    if (rank == size - 1) CHECK(t == size * (size + 1) / 2, "reduce_c");
    OK(MPI_Gather_c(&s, 1, MPI_INT, a, 1, MPI_INT, 0, MPI_COMM_WORLD));
    if (rank == 0) CHECK(a[size - 1] == size, "gather_c");
    OK(MPI_Allgather_c(&s, 1, MPI_INT, a, 1, MPI_INT, MPI_COMM_WORLD));
    CHECK(a[size - 1] == size, "allgather_c");
    for (int i = 0; i < size; i++) b[i] = rank * 10 + i;
    OK(MPI_Alltoall_c(b, 1, MPI_INT, a, 1, MPI_INT, MPI_COMM_WORLD));
    CHECK(a[size - 1] == (size - 1) * 10 + rank, "alltoall_c");
    OK(MPI_Scatter_c(b, 1, MPI_INT, &t, 1, MPI_INT, 0, MPI_COMM_WORLD));
    CHECK(t == rank, "scatter_c");

    MPI_Count cc[8], sc[8];
    MPI_Aint dd[8];
    int ci[8], di[8];
    for (int r = 0; r < size; r++) {
        cc[r] = ci[r] = 2;
        dd[r] = di[r] = 2 * (size - 1 - r);
        sc[r] = 1;
    }
    int two[2] = {rank, -rank};
    for (int i = 0; i < 64; i++) a[i] = b[i] = -3;
    OK(MPI_Gatherv(two, 2, MPI_INT, a, ci, di, MPI_INT, 0, MPI_COMM_WORLD));
    OK(MPI_Gatherv_c(two, 2, MPI_INT, b, cc, dd, MPI_INT, 0, MPI_COMM_WORLD));
    if (rank == 0) CHECK(cmp_ints(a, b, 2 * size) == 0, "gatherv_c");
    for (int i = 0; i < 64; i++) a[i] = b[i] = -3;
    OK(MPI_Allgatherv_c(two, 2, MPI_INT, b, cc, dd, MPI_INT, MPI_COMM_WORLD));
    OK(MPI_Allgatherv(two, 2, MPI_INT, a, ci, di, MPI_INT, MPI_COMM_WORLD));
    CHECK(cmp_ints(a, b, 2 * size) == 0, "allgatherv_c");
    MPI_Request req;
    for (int i = 0; i < 64; i++) b[i] = -3;
    OK(MPI_Iallgatherv_c(two, 2, MPI_INT, b, cc, dd, MPI_INT, MPI_COMM_WORLD, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(cmp_ints(a, b, 2 * size) == 0, "iallgatherv_c");
    int one;
    OK(MPI_Scatterv_c(a, cc, dd, MPI_INT, two, 2, MPI_INT, 0, MPI_COMM_WORLD));
    CHECK(two[0] == rank, "scatterv_c");
    for (int i = 0; i < size; i++) b[i] = rank * 10 + i;
    MPI_Aint unit[8];
    for (int r = 0; r < size; r++) unit[r] = r;
    OK(MPI_Alltoallv_c(b, sc, unit, MPI_INT, a, sc, unit, MPI_INT, MPI_COMM_WORLD));
    CHECK(a[size - 1] == (size - 1) * 10 + rank, "alltoallv_c");
    for (int i = 0; i < 64; i++) a[i] = -3;
    OK(MPI_Ialltoallv_c(b, sc, unit, MPI_INT, a, sc, unit, MPI_INT, MPI_COMM_WORLD, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(a[size - 1] == (size - 1) * 10 + rank, "ialltoallv_c");
    MPI_Datatype tys[8];
    MPI_Aint bytes[8];
    for (int r = 0; r < size; r++) tys[r] = MPI_INT, bytes[r] = r * (MPI_Aint)sizeof(int);
    OK(MPI_Alltoallw_c(b, sc, bytes, tys, a, sc, bytes, tys, MPI_COMM_WORLD));
    CHECK(a[size - 1] == (size - 1) * 10 + rank, "alltoallw_c");
    for (int i = 0; i < size; i++) b[i] = i + rank;
    OK(MPI_Reduce_scatter_c(b, &one, sc, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(one == size * rank + size * (size - 1) / 2, "reduce_scatter_c");
    OK(MPI_Reduce_scatter_block_c(b, &one, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(one == size * rank + size * (size - 1) / 2, "reduce_scatter_block_c");
    OK(MPI_Ireduce_scatter_c(b, &one, sc, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(one == size * rank + size * (size - 1) / 2, "ireduce_scatter_c");
    OK(MPI_Scan_c(&s, &t, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(t == (rank + 1) * (rank + 2) / 2, "scan_c");
    OK(MPI_Exscan_c(&s, &t, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    if (rank > 0) CHECK(t == rank * (rank + 1) / 2, "exscan_c");
    OK(MPI_Iscan_c(&s, &t, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(t == (rank + 1) * (rank + 2) / 2, "iscan_c");
    t = 0;
    OK(MPI_Iallreduce_c(&s, &t, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(t == size * (size + 1) / 2, "iallreduce_c");
    for (int i = 0; i < 5; i++) v[i] = rank == 0 ? 50 + i : 0;
    OK(MPI_Ibcast_c(v, n, MPI_INT, 0, MPI_COMM_WORLD, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(v[4] == 54, "ibcast_c");
    MPI_Request pr;
    OK(MPI_Allreduce_init_c(&s, &t, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, MPI_INFO_NULL, &pr));
    for (int round = 0; round < 2; round++) {
        s = rank + round * 100;
        OK(MPI_Start(&pr));
        OK(MPI_Wait(&pr, MPI_STATUS_IGNORE));
        CHECK(t == size - 1 + round * 100, "allreduce_init_c round %d", round);
    }
    OK(MPI_Request_free(&pr));
    OK(MPI_Gatherv_init_c(two, 2, MPI_INT, b, cc, dd, MPI_INT, 0, MPI_COMM_WORLD, MPI_INFO_NULL,
                          &pr));
    two[0] = rank;
    two[1] = -rank;
    OK(MPI_Start(&pr));
    OK(MPI_Wait(&pr, MPI_STATUS_IGNORE));
    OK(MPI_Request_free(&pr));
    if (rank == 0) CHECK(b[2 * (size - 1)] == 0 && b[0] == size - 1, "gatherv_init_c");
}

/* ------------------------------------------------------------ local reductions, ops */

static int max_len_seen;
/* 128-byte elements: 16 doubles, summed elementwise; records the longest run it was given. */
static void sum16(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    double *a = in, *b = inout;
    if (*len > max_len_seen) max_len_seen = *len;
    for (int i = 0; i < *len * 16; i++) b[i] += a[i];
}

static void test_local_and_ops(void) {
    int in[4] = {1, 2, 3, 4}, io[4] = {10, 20, 30, 40};
    OK(MPI_Reduce_local(in, io, 4, MPI_INT, MPI_SUM));
    CHECK(io[0] == 11 && io[3] == 44, "reduce_local sum");
    double din[2] = {1.5, -2}, dio[2] = {1, 1};
    OK(MPI_Reduce_local(din, dio, 2, MPI_DOUBLE, MPI_MAX));
    CHECK(dio[0] == 1.5 && dio[1] == 1, "reduce_local max");
    OK(MPI_Reduce_local_c(in, io, (MPI_Count)4, MPI_INT, MPI_PROD));
    CHECK(io[1] == 44 && io[3] == 176, "reduce_local_c prod");
    /* A derived (strided) datatype of ints. */
    MPI_Datatype every2;
    OK(MPI_Type_vector(2, 1, 2, MPI_INT, &every2));
    OK(MPI_Type_commit(&every2));
    int sin[4] = {1, 100, 2, 200}, sio[4] = {5, 7, 6, 8};
    OK(MPI_Reduce_local(sin, sio, 1, every2, MPI_SUM));
    CHECK(sio[0] == 6 && sio[1] == 7 && sio[2] == 8 && sio[3] == 8, "reduce_local strided");
    OK(MPI_Type_free(&every2));

    /* User operations: non-commutative (inoutvec = invec op inoutvec), both forms. */
    MPI_Datatype mat;
    MPI_Op mm, mmc;
    OK(MPI_Type_contiguous(4, MPI_LONG, &mat));
    OK(MPI_Type_commit(&mat));
    OK(MPI_Op_create(matmul, 0, &mm));
    OK(MPI_Op_create_c(matmul_c, 0, &mmc));
    int commute = 1;
    OK(MPI_Op_commutative(mmc, &commute));
    CHECK(commute == 0, "Op_create_c's commutativity");
    long x[8], y[8], want[4];
    rank_matrix(1, x);
    rank_matrix(2, x + 4);
    rank_matrix(3, y);
    rank_matrix(4, y + 4);
    long tmp[4];
    memcpy(tmp, y, sizeof tmp);
    int one = 1;
    matmul(x, tmp, &one, NULL);
    memcpy(want, tmp, sizeof want);
    OK(MPI_Reduce_local(x, y, 2, mat, mm));
    CHECK(memcmp(y, want, sizeof want) == 0, "reduce_local user op: x op y, in that order");
    rank_matrix(3, y);
    rank_matrix(4, y + 4);
    OK(MPI_Reduce_local_c(x, y, 2, mat, mmc));
    CHECK(memcmp(y, want, sizeof want) == 0, "reduce_local_c with an Op_create_c operation");
    /* Op_create_c operations in a collective (non-commutative scan). */
    long m[4], pa[4], pb[4];
    rank_matrix(rank, m);
    OK(MPI_Scan(m, pa, 1, mat, mm, MPI_COMM_WORLD));
    OK(MPI_Scan(m, pb, 1, mat, mmc, MPI_COMM_WORLD));
    CHECK(memcmp(pa, pb, sizeof pa) == 0, "scan with an Op_create_c operation");
    OK(MPI_Op_free(&mm));
    OK(MPI_Op_free(&mmc));
    OK(MPI_Type_free(&mat));

    /* Arithmetic on the char types (OSU's reductions sum MPI_CHAR). */
    char c = (char)(rank + 1), csum = 0;
    OK(MPI_Allreduce(&c, &csum, 1, MPI_CHAR, MPI_SUM, MPI_COMM_WORLD));
    CHECK(csum == size * (size + 1) / 2, "MPI_SUM on MPI_CHAR: %d", csum);
    char cm[3] = {(char)rank, 5, 9}, cmax[3];
    OK(MPI_Allreduce(cm, cmax, 3, MPI_CHAR, MPI_MAX, MPI_COMM_WORLD));
    CHECK(cmax[0] == size - 1 && cmax[2] == 9, "MPI_MAX on MPI_CHAR");
    OK(MPI_Allreduce(cm, cmax, 3, MPI_CHAR, MPI_BOR, MPI_COMM_WORLD));
    CHECK(cmax[1] == 5, "MPI_BOR on MPI_CHAR");
    signed char sc = (signed char)-(rank + 1), smin = 0;
    OK(MPI_Allreduce(&sc, &smin, 1, MPI_SIGNED_CHAR, MPI_MIN, MPI_COMM_WORLD));
    CHECK(smin == -size, "MPI_MIN on MPI_SIGNED_CHAR");
    unsigned char uc = 2, uprod = 0;
    OK(MPI_Allreduce(&uc, &uprod, 1, MPI_UNSIGNED_CHAR, MPI_PROD, MPI_COMM_WORLD));
    CHECK(uprod == (1u << size), "MPI_PROD on MPI_UNSIGNED_CHAR");
    char lin[2] = {3, 4}, lio[2] = {10, 20};
    OK(MPI_Reduce_local(lin, lio, 2, MPI_CHAR, MPI_SUM));
    CHECK(lio[0] == 13 && lio[1] == 24, "reduce_local on MPI_CHAR");

    /* A user operation on 128-byte elements, called on whole buffers. */
    MPI_Datatype big;
    MPI_Op op16;
    OK(MPI_Type_contiguous(16, MPI_DOUBLE, &big));
    OK(MPI_Type_commit(&big));
    OK(MPI_Op_create(sum16, 1, &op16));
    enum { K = 40 };
    double *bs = malloc(K * 16 * sizeof(double)), *br = malloc(K * 16 * sizeof(double));
    for (int i = 0; i < K * 16; i++) bs[i] = rank + i;
    max_len_seen = 0;
    OK(MPI_Allreduce(bs, br, K, big, op16, MPI_COMM_WORLD));
    int bad = 0;
    for (int i = 0; i < K * 16; i++) bad += br[i] != size * (size - 1) / 2.0 + (double)size * i;
    CHECK(bad == 0, "allreduce of 128-byte elements: %d wrong", bad);
    int longest = 0; /* a rank may reduce nothing (recursive doubling folds some ranks) */
    OK(MPI_Allreduce(&max_len_seen, &longest, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (size > 1) CHECK(longest > 1, "the user function got whole runs (%d)", longest);
    MPI_Request req;
    for (int i = 0; i < K * 16; i++) br[i] = -1;
    OK(MPI_Iallreduce(bs, br, K, big, op16, MPI_COMM_WORLD, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    bad = 0;
    for (int i = 0; i < K * 16; i++) bad += br[i] != size * (size - 1) / 2.0 + (double)size * i;
    CHECK(bad == 0, "iallreduce of 128-byte elements: %d wrong", bad);
    for (int i = 0; i < K * 16; i++) br[i] = 1;
    max_len_seen = 0;
    OK(MPI_Reduce_local(bs, br, K, big, op16));
    CHECK(br[17] == rank + 18 && max_len_seen == K, "reduce_local of 128-byte elements");
    free(bs);
    free(br);
    OK(MPI_Op_free(&op16));
    OK(MPI_Type_free(&big));

    /* MINLOC/MAXLOC on MPI_LONG_DOUBLE_INT: values a double cannot tell apart. */
    struct {
        long double v;
        int i;
    } p, lo, hi;
    long double tiny = 1.0L;
    for (int k = 0; k < 60; k++) tiny /= 2;
    p.v = 1.0L + (long double)(size - rank) * tiny;
    p.i = rank;
    OK(MPI_Allreduce(&p, &lo, 1, MPI_LONG_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD));
    OK(MPI_Allreduce(&p, &hi, 1, MPI_LONG_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD));
    CHECK(lo.i == size - 1 && hi.i == 0, "long double minloc %d maxloc %d", lo.i, hi.i);
    p.v = -2.5L;
    OK(MPI_Allreduce(&p, &lo, 1, MPI_LONG_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD));
    CHECK(lo.i == 0 && lo.v == -2.5L, "long double minloc tie: lowest index");
}

/* ------------------------------------------------------------ bad input */

static void test_bad_input(void) {
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int cls, x = 1, y, counts[8], displs[8];
    MPI_Request req;
    for (int r = 0; r < 8; r++) counts[r] = 1, displs[r] = r;
    counts[0] = -1;
#define CLASS(call, want)                                                          \
    do {                                                                           \
        int e_ = (call);                                                           \
        MPI_Error_class(e_, &cls);                                                 \
        CHECK(cls == (want), "%s: class %d, expected %s", #call, cls, #want);      \
    } while (0)
    CLASS(MPI_Igatherv(&x, 1, MPI_INT, &y, counts, displs, MPI_INT, rank, MPI_COMM_WORLD, &req),
          MPI_ERR_COUNT);
    CLASS(MPI_Igatherv(&x, 1, MPI_INT, &y, counts, displs, MPI_INT, size, MPI_COMM_WORLD, &req),
          MPI_ERR_ROOT);
    CLASS(MPI_Iallgatherv(&x, 1, MPI_INT, &y, NULL, displs, MPI_INT, MPI_COMM_WORLD, &req),
          MPI_ERR_ARG);
    CLASS(MPI_Ireduce_scatter(&x, &y, NULL, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req), MPI_ERR_ARG);
    CLASS(MPI_Iscan(&x, &y, 1, MPI_INT, MPI_OP_NULL, MPI_COMM_WORLD, &req), MPI_ERR_OP);
    CLASS(MPI_Iexscan(&x, &y, 1, MPI_DATATYPE_NULL, MPI_SUM, MPI_COMM_WORLD, &req), MPI_ERR_TYPE);
    CLASS(MPI_Iscan(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, NULL), MPI_ERR_ARG);
    CLASS(MPI_Bcast_init(&x, 1, MPI_INT, -1, MPI_COMM_WORLD, MPI_INFO_NULL, &req), MPI_ERR_ROOT);
    CLASS(MPI_Allreduce_init(&x, &y, -2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &req),
          MPI_ERR_COUNT);
    CLASS(MPI_Barrier_init(MPI_COMM_NULL, MPI_INFO_NULL, &req), MPI_ERR_COMM);
    CLASS(MPI_Barrier_init(MPI_COMM_WORLD, MPI_INFO_NULL, NULL), MPI_ERR_ARG);
    CLASS(MPI_Bcast_c(&x, -1, MPI_INT, 0, MPI_COMM_WORLD), MPI_ERR_COUNT);
    CLASS(MPI_Allreduce_c(&x, &y, 1, MPI_INT, MPI_MINLOC, MPI_COMM_WORLD), MPI_ERR_OP);
    CLASS(MPI_Reduce_local(&x, &y, 1, MPI_INT, MPI_MINLOC), MPI_ERR_OP);
    CLASS(MPI_Reduce_local(&x, &y, 1, MPI_DATATYPE_NULL, MPI_SUM), MPI_ERR_TYPE);
    CLASS(MPI_Reduce_local(&x, &y, -1, MPI_INT, MPI_SUM), MPI_ERR_COUNT);
    CLASS(MPI_Reduce_local_c(&x, &y, 1, MPI_INT, MPI_OP_NULL), MPI_ERR_OP);
    CLASS(MPI_Reduce_local(MPI_IN_PLACE, &y, 1, MPI_INT, MPI_SUM), MPI_ERR_BUFFER);
    CLASS(MPI_Op_create_c(NULL, 1, &(MPI_Op){MPI_OP_NULL}), MPI_ERR_ARG);
    counts[0] = 1;
    MPI_Count cc[8];
    for (int r = 0; r < 8; r++) cc[r] = -1;
    CLASS(MPI_Reduce_scatter_c(&x, &y, cc, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_COUNT);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

/* Complex sums: the real and imaginary parts summed (C99 complex types). */
static void test_complex_sum(void) {
    float fc[4], fout[4];
    double dc[2], dout[2];
    for (int i = 0; i < 2; i++) {
        fc[2 * i] = (float)(rank + i);
        fc[2 * i + 1] = (float)(2 * rank - i);
    }
    dc[0] = 0.25 * rank;
    dc[1] = -1.0 * rank;
    OK(MPI_Allreduce(fc, fout, 2, MPI_C_FLOAT_COMPLEX, MPI_SUM, MPI_COMM_WORLD));
    OK(MPI_Allreduce(dc, dout, 1, MPI_C_DOUBLE_COMPLEX, MPI_SUM, MPI_COMM_WORLD));
    double ranks = size * (size - 1) / 2.0;
    for (int i = 0; i < 2; i++) {
        CHECK(fout[2 * i] == (float)(ranks + size * i) &&
                  fout[2 * i + 1] == (float)(2 * ranks - size * i),
              "float complex sum %d: %g %g", i, fout[2 * i], fout[2 * i + 1]);
    }
    CHECK(dout[0] == 0.25 * ranks && dout[1] == -ranks, "double complex sum %g %g", dout[0],
          dout[1]);
    OK(MPI_Reduce_local(dc, dout, 1, MPI_C_DOUBLE_COMPLEX, MPI_SUM));
    CHECK(dout[0] == 0.25 * ranks + dc[0] && dout[1] == -ranks + dc[1], "local complex sum");
}

/* The root's side of a gather or scatter is not looked at on the other ranks: MPICH's tests
 * pass -1 there (MPI: significant only at root). */
static void test_root_only_counts(void) {
    int mine = rank * 3 + 1, all[64] = {0}, got = -1;
    for (int root = 0; root < size; root++) {
        OK(MPI_Gather(&mine, 1, MPI_INT, all, rank == root ? 1 : -1, MPI_INT, root,
                      MPI_COMM_WORLD));
        if (rank == root)
            for (int r = 0; r < size; r++) CHECK(all[r] == r * 3 + 1, "gather %d: %d", r, all[r]);
        for (int r = 0; r < size; r++) all[r] = root * 100 + r;
        OK(MPI_Scatter(all, rank == root ? 1 : -1, MPI_INT, &got, 1, MPI_INT, root,
                       MPI_COMM_WORLD));
        CHECK(got == root * 100 + rank, "scatter from %d: %d", root, got);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    test_nb_vcoll();
    test_nb_reductions();
    test_persistent();
    test_large_count();
    test_local_and_ops();
    test_root_only_counts();
    test_complex_sum();
    test_bad_input();
    int rc = summary("coll2");
    MPI_Finalize();
    return rc;
}
