/* Process topologies and neighbourhood collectives: Dims_create, Cartesian grids, graphs,
 * distributed graphs, Topo_test, dup keeping the topology; every neighbourhood collective
 * (blocking, non-blocking, persistent, large-count) on each topology; bad input. */
#include "check.h"

static int me, n;
/* The weight sentinels passed as programs pass them: mpi.h declares the weights as pointers, so
 * GCC's -Wstringop-overread (this file is built with -Werror) does not flag these constant
 * addresses as arrays too small. */
#define unweighted MPI_UNWEIGHTED
#define weights_empty MPI_WEIGHTS_EMPTY

/* ---- neighbour lists of any rank, computed independently of the library ---- */

enum kind { RING_PERIODIC, RING_OPEN, GRAPH_RING, DIST_BACK, GRID };

/* The extents of the GRID topology: periodic in dimension 0, not in dimension 1. */
static int gd0, gd1;

/* Sources and destinations of rank s in the test topology k (MPI_PROC_NULL for a missing
 * Cartesian neighbour); returns the count of each (same for both here). */
static int lists(enum kind k, int s, int *src, int *dst) {
    int left = (s - 1 + n) % n, right = (s + 1) % n;
    switch (k) {
    case RING_PERIODIC:
    case GRAPH_RING:
        src[0] = dst[0] = left;
        src[1] = dst[1] = right;
        return 2;
    case RING_OPEN:
        src[0] = dst[0] = s == 0 ? MPI_PROC_NULL : s - 1;
        src[1] = dst[1] = s == n - 1 ? MPI_PROC_NULL : s + 1;
        return 2;
    case GRID: {
        int x = s / gd1, y = s % gd1;
        src[0] = dst[0] = ((x - 1 + gd0) % gd0) * gd1 + y;
        src[1] = dst[1] = ((x + 1) % gd0) * gd1 + y;
        src[2] = dst[2] = y > 0 ? s - 1 : MPI_PROC_NULL;
        src[3] = dst[3] = y < gd1 - 1 ? s + 1 : MPI_PROC_NULL;
        return 4;
    }
    case DIST_BACK:
        /* Edges r+1 -> r: receive from the right, send to the left. */
        src[0] = right;
        dst[0] = left;
        return 1;
    }
    return 0;
}

/* The value element e of the block rank s sends to its destination index i. */
static int val(int s, int i, int e) { return 1000 * s + 10 * i + e + 1; }

/* The destination index of the block that lands in my receive block j, or -1 for an
 * MPI_PROC_NULL source. */
static int sender_index(enum kind k, int j, int *from) {
    int src[4], dst[4], ssrc[4], sdst[4];
    lists(k, me, src, dst);
    int s = src[j];
    *from = s;
    if (s == MPI_PROC_NULL) return -1;
    /* Cartesian: what the neighbour at -1 sent towards +1, and conversely (MPI 4.1), even
     * when both neighbours are one process (a periodic dimension of extent 1 or 2). */
    if (k == RING_PERIODIC || k == RING_OPEN || k == GRID) return j ^ 1;
    int occ = 0;
    for (int q = 0; q < j; q++)
        if (src[q] == s) occ++;
    int cnt = lists(k, s, ssrc, sdst);
    for (int i = 0; i < cnt; i++)
        if (sdst[i] == me && occ-- == 0) return i;
    return -2;
}

#define B 2 /* elements per block */

static void check_blocks(enum kind k, const int *recv, int deg, int same, const char *what) {
    for (int j = 0; j < deg; j++) {
        int s, i = sender_index(k, j, &s);
        for (int e = 0; e < B; e++) {
            int want = i == -1 ? -1 : val(s, same ? 0 : i, e);
            CHECK(recv[j * B + e] == want, "%s kind %d block %d[%d]: %d, want %d", what, k,
                  j, e, recv[j * B + e], want);
        }
    }
}

static void fill(int *send, int deg, int same) {
    for (int i = 0; i < deg; i++)
        for (int e = 0; e < B; e++) send[i * B + e] = val(me, same ? 0 : i, e);
}

static void reset(int *recv) {
    for (int i = 0; i < 4 * B; i++) recv[i] = -1;
}

/* Every neighbourhood collective on `comm`, whose topology is `k`. */
static void collectives(MPI_Comm comm, enum kind k) {
    int src[4], dst[4];
    int deg = lists(k, me, src, dst);
    int send[4 * B], recv[4 * B], counts[4], displs[4], rcounts[4], rdispls[4];
    MPI_Aint bsd[4], brd[4];
    MPI_Count ccounts[4], crcounts[4];
    MPI_Aint cdispls[4], crdispls[4];
    MPI_Datatype types[4];
    MPI_Request req;

    fill(send, 1, 1);
    reset(recv);
    OK(MPI_Neighbor_allgather(send, B, MPI_INT, recv, B, MPI_INT, comm));
    check_blocks(k, recv, deg, 1, "allgather");

    reset(recv);
    OK(MPI_Ineighbor_allgather(send, B, MPI_INT, recv, B, MPI_INT, comm, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(req == MPI_REQUEST_NULL, "ineighbor_allgather request freed");
    check_blocks(k, recv, deg, 1, "ineighbor_allgather");

    reset(recv);
    OK(MPI_Neighbor_allgather_c(send, B, MPI_INT, recv, B, MPI_INT, comm));
    check_blocks(k, recv, deg, 1, "allgather_c");

    /* allgatherv: the blocks in reverse order in the receive buffer. */
    for (int j = 0; j < deg; j++) {
        rcounts[j] = B;
        rdispls[j] = (deg - 1 - j) * B;
        crcounts[j] = B;
        crdispls[j] = rdispls[j];
    }
    int rev[4 * B];
    for (int c = 0; c < 2; c++) {
        reset(recv);
        if (c == 0)
            OK(MPI_Neighbor_allgatherv(send, B, MPI_INT, recv, rcounts, rdispls, MPI_INT, comm));
        else
            OK(MPI_Neighbor_allgatherv_c(send, B, MPI_INT, recv, crcounts, crdispls, MPI_INT, comm));
        for (int j = 0; j < deg; j++)
            for (int e = 0; e < B; e++) rev[j * B + e] = recv[rdispls[j] + e];
        check_blocks(k, rev, deg, 1, c ? "allgatherv_c" : "allgatherv");
    }

    fill(send, deg, 0);
    reset(recv);
    OK(MPI_Neighbor_alltoall(send, B, MPI_INT, recv, B, MPI_INT, comm));
    check_blocks(k, recv, deg, 0, "alltoall");

    reset(recv);
    OK(MPI_Ineighbor_alltoall_c(send, B, MPI_INT, recv, B, MPI_INT, comm, &req));
    int done = 0;
    while (!done) POLL(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    check_blocks(k, recv, deg, 0, "ineighbor_alltoall_c");

    /* alltoallv: blocks sent from reversed places, received into reversed places. */
    int sendr[4 * B];
    for (int i = 0; i < deg; i++) {
        counts[i] = B;
        displs[i] = (deg - 1 - i) * B;
        ccounts[i] = B;
        cdispls[i] = displs[i];
        for (int e = 0; e < B; e++) sendr[displs[i] + e] = val(me, i, e);
    }
    for (int c = 0; c < 3; c++) {
        reset(recv);
        if (c == 0)
            OK(MPI_Neighbor_alltoallv(sendr, counts, displs, MPI_INT, recv, rcounts, rdispls,
                                      MPI_INT, comm));
        else if (c == 1)
            OK(MPI_Neighbor_alltoallv_c(sendr, ccounts, cdispls, MPI_INT, recv, crcounts,
                                        crdispls, MPI_INT, comm));
        else {
            OK(MPI_Ineighbor_alltoallv(sendr, counts, displs, MPI_INT, recv, rcounts, rdispls,
                                       MPI_INT, comm, &req));
            OK(MPI_Waitall(1, &req, MPI_STATUSES_IGNORE));
        }
        for (int j = 0; j < deg; j++)
            for (int e = 0; e < B; e++) rev[j * B + e] = recv[rdispls[j] + e];
        check_blocks(k, rev, deg, 0, c == 0 ? "alltoallv" : c == 1 ? "alltoallv_c" : "ialltoallv");
    }

    /* alltoallw: byte displacements, the blocks as one MPI_INT pair type or two MPI_INTs. */
    MPI_Datatype pair;
    OK(MPI_Type_contiguous(B, MPI_INT, &pair));
    OK(MPI_Type_commit(&pair));
    for (int i = 0; i < deg; i++) {
        counts[i] = i % 2 ? 1 : B;
        types[i] = i % 2 ? pair : MPI_INT;
        bsd[i] = (MPI_Aint)(displs[i] * sizeof(int));
        brd[i] = (MPI_Aint)(rdispls[i] * sizeof(int));
        ccounts[i] = counts[i];
    }
    for (int c = 0; c < 2; c++) {
        reset(recv);
        if (c == 0)
            OK(MPI_Neighbor_alltoallw(sendr, counts, bsd, types, recv, counts, brd, types, comm));
        else
            OK(MPI_Neighbor_alltoallw_c(sendr, ccounts, bsd, types, recv, ccounts, brd, types,
                                        comm));
        for (int j = 0; j < deg; j++)
            for (int e = 0; e < B; e++) rev[j * B + e] = recv[rdispls[j] + e];
        check_blocks(k, rev, deg, 0, c ? "alltoallw_c" : "alltoallw");
    }
    OK(MPI_Ineighbor_alltoallw(sendr, counts, bsd, types, recv, counts, brd, types, comm, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    OK(MPI_Type_free(&pair));

    /* Persistent: two starts, the data changed in between. */
    MPI_Request p[2];
    int recv2[4 * B];
    fill(send, deg, 0);
    OK(MPI_Neighbor_alltoall_init(send, B, MPI_INT, recv, B, MPI_INT, comm, MPI_INFO_NULL, &p[0]));
    int one[B];
    for (int e = 0; e < B; e++) one[e] = val(me, 0, e);
    OK(MPI_Neighbor_allgather_init(one, B, MPI_INT, recv2, B, MPI_INT, comm, MPI_INFO_NULL, &p[1]));
    for (int round = 0; round < 2; round++) {
        reset(recv);
        reset(recv2);
        if (round == 0) {
            OK(MPI_Startall(2, p));
        } else {
            /* Started in opposite orders on neighbours: matched by the order of the inits. */
            OK(MPI_Start(&p[me % 2]));
            OK(MPI_Start(&p[1 - me % 2]));
        }
        OK(MPI_Waitall(2, p, MPI_STATUSES_IGNORE));
        CHECK(p[0] != MPI_REQUEST_NULL && p[1] != MPI_REQUEST_NULL, "persistent requests stay");
        check_blocks(k, recv, deg, 0, "alltoall_init");
        check_blocks(k, recv2, deg, 1, "allgather_init");
    }
    OK(MPI_Request_free(&p[0]));
    OK(MPI_Request_free(&p[1]));
    for (int i = 0; i < deg; i++) counts[i] = B;
    OK(MPI_Neighbor_alltoallv_init(sendr, counts, displs, MPI_INT, recv, rcounts, rdispls,
                                   MPI_INT, comm, MPI_INFO_NULL, &req));
    OK(MPI_Request_free(&req));
}

static void dims(void) {
    int d[3];
    d[0] = d[1] = 0;
    OK(MPI_Dims_create(6, 2, d));
    CHECK(d[0] == 3 && d[1] == 2, "6 in 2: %d x %d", d[0], d[1]);
    d[0] = d[1] = 0;
    OK(MPI_Dims_create(7, 2, d));
    CHECK(d[0] == 7 && d[1] == 1, "7 in 2: %d x %d", d[0], d[1]);
    d[0] = d[1] = d[2] = 0;
    OK(MPI_Dims_create(12, 3, d));
    CHECK(d[0] == 3 && d[1] == 2 && d[2] == 2, "12 in 3: %d %d %d", d[0], d[1], d[2]);
    d[0] = 0, d[1] = 3, d[2] = 0;
    OK(MPI_Dims_create(12, 3, d));
    CHECK(d[0] == 2 && d[1] == 3 && d[2] == 2, "12 with 3 fixed: %d %d %d", d[0], d[1], d[2]);
    d[0] = 3, d[1] = 0;
    CHECK(MPI_Dims_create(10, 2, d) == MPI_ERR_DIMS, "3 does not divide 10");
    d[0] = -1, d[1] = 0;
    CHECK(MPI_Dims_create(4, 2, d) == MPI_ERR_DIMS, "negative extent");
    CHECK(MPI_Dims_create(4, -1, d) == MPI_ERR_DIMS, "negative ndims");
    OK(MPI_Dims_create(1, 0, NULL));
}

static void cart(void) {
    int d[2] = {0, 0}, periods[2] = {1, 0}, c[2], r, s, t, nd;
    MPI_Comm grid, dup, sub, part;
    OK(MPI_Dims_create(n, 2, d));
    OK(MPI_Cart_create(MPI_COMM_WORLD, 2, d, periods, 1, &grid));
    OK(MPI_Comm_set_errhandler(grid, MPI_ERRORS_RETURN));
    OK(MPI_Topo_test(grid, &t));
    CHECK(t == MPI_CART, "topo_test %d", t);
    OK(MPI_Cartdim_get(grid, &nd));
    CHECK(nd == 2, "cartdim %d", nd);
    int gd[2], gp[2];
    OK(MPI_Cart_get(grid, 2, gd, gp, c));
    CHECK(gd[0] == d[0] && gd[1] == d[1] && gp[0] == 1 && gp[1] == 0, "cart_get");
    CHECK(c[0] == me / d[1] && c[1] == me % d[1], "my coords %d %d", c[0], c[1]);
    for (int q = 0; q < n; q++) {
        int qc[2];
        OK(MPI_Cart_coords(grid, q, 2, qc));
        OK(MPI_Cart_rank(grid, qc, &r));
        CHECK(r == q, "coords/rank round trip %d -> %d", q, r);
    }
    /* Periodic dimension 0 wraps, dimension 1 ends (MPI_PROC_NULL). */
    OK(MPI_Cart_shift(grid, 0, 1, &s, &t));
    CHECK(s == (me - d[1] + n) % n && t == (me + d[1]) % n, "shift 0: %d %d", s, t);
    OK(MPI_Cart_shift(grid, 1, 1, &s, &t));
    int c1 = me % d[1];
    CHECK(s == (c1 > 0 ? me - 1 : MPI_PROC_NULL) && t == (c1 < d[1] - 1 ? me + 1 : MPI_PROC_NULL),
          "shift 1: %d %d", s, t);
    OK(MPI_Cart_shift(grid, 1, -2, &s, &t));
    CHECK(s == (c1 + 2 < d[1] ? me + 2 : MPI_PROC_NULL) && t == (c1 >= 2 ? me - 2 : MPI_PROC_NULL),
          "shift 1 by -2: %d %d", s, t);
    int wrap[2] = {-1, 0};
    OK(MPI_Cart_rank(grid, wrap, &r));
    CHECK(r == (d[0] - 1) * d[1], "wrapped rank %d", r);
    int out[2] = {0, d[1]};
    CHECK(MPI_Cart_rank(grid, out, &r) == MPI_ERR_ARG, "outside a non-periodic dimension");
    CHECK(MPI_Cart_coords(grid, n, 2, c) == MPI_ERR_RANK, "coords of rank n");
    CHECK(MPI_Cart_shift(grid, 2, 1, &s, &t) == MPI_ERR_ARG, "shift along dimension 2");
    /* A dup keeps the topology. */
    OK(MPI_Comm_dup(grid, &dup));
    OK(MPI_Topo_test(dup, &t));
    CHECK(t == MPI_CART, "dup topo_test %d", t);
    OK(MPI_Cart_get(dup, 2, gd, gp, c));
    CHECK(gd[0] == d[0] && gp[0] == 1, "dup cart_get");
    OK(MPI_Comm_free(&dup));
    /* Sub-grids: dimension 0 alone (all ranks), dimension 1 alone (one rank each). */
    int keep0[2] = {1, 0}, keep1[2] = {0, 1};
    OK(MPI_Cart_sub(grid, keep0, &sub));
    OK(MPI_Comm_size(sub, &s));
    OK(MPI_Cartdim_get(sub, &nd));
    CHECK(s == d[0] && nd == 1, "sub 0: size %d, dims %d", s, nd);
    OK(MPI_Comm_free(&sub));
    OK(MPI_Cart_sub(grid, keep1, &sub));
    OK(MPI_Comm_size(sub, &s));
    CHECK(s == d[1], "sub 1: size %d", s);
    OK(MPI_Comm_free(&sub));
    gd0 = d[0], gd1 = d[1];
    collectives(grid, GRID);
    OK(MPI_Comm_free(&grid));

    /* A 1-D grid of n - 1 ranks: the last one is left out. */
    if (n > 1) {
        int m = n - 1, per = 0;
        OK(MPI_Cart_create(MPI_COMM_WORLD, 1, &m, &per, 0, &part));
        CHECK((me == n - 1) == (part == MPI_COMM_NULL), "rank %d of a grid of %d", me, m);
        if (part != MPI_COMM_NULL) OK(MPI_Comm_free(&part));
        OK(MPI_Cart_map(MPI_COMM_WORLD, 1, &m, &per, &r));
        CHECK(r == (me < m ? me : MPI_UNDEFINED), "cart_map %d", r);
    }
    int big = n + 1, per = 0, zero = 0;
    CHECK(MPI_Cart_create(MPI_COMM_WORLD, 1, &big, &per, 0, &part) == MPI_ERR_ARG, "too big");
    CHECK(MPI_Cart_create(MPI_COMM_WORLD, 1, &zero, &per, 0, &part) == MPI_ERR_DIMS, "extent 0");
    CHECK(MPI_Cart_create(MPI_COMM_WORLD, -1, &zero, &per, 0, &part) == MPI_ERR_DIMS, "ndims -1");

    /* The 1-D rings for the collectives. */
    for (int p = 1; p >= 0; p--) {
        MPI_Comm ring;
        OK(MPI_Cart_create(MPI_COMM_WORLD, 1, &n, &p, 0, &ring));
        collectives(ring, p ? RING_PERIODIC : RING_OPEN);
        OK(MPI_Comm_free(&ring));
    }
}

static void graph(void) {
    int index[8], edges[16], t, cnt, nb[4], nn, ne;
    for (int i = 0; i < n; i++) {
        index[i] = 2 * (i + 1);
        edges[2 * i] = (i - 1 + n) % n;
        edges[2 * i + 1] = (i + 1) % n;
    }
    MPI_Comm g;
    OK(MPI_Graph_create(MPI_COMM_WORLD, n, index, edges, 0, &g));
    OK(MPI_Comm_set_errhandler(g, MPI_ERRORS_RETURN));
    OK(MPI_Topo_test(g, &t));
    CHECK(t == MPI_GRAPH, "graph topo_test %d", t);
    OK(MPI_Graphdims_get(g, &nn, &ne));
    CHECK(nn == n && ne == 2 * n, "graphdims %d %d", nn, ne);
    int gi[8], ge[16];
    OK(MPI_Graph_get(g, n, 2 * n, gi, ge));
    CHECK(gi[n - 1] == 2 * n && ge[1] == 1 % n, "graph_get");
    OK(MPI_Graph_neighbors_count(g, me, &cnt));
    CHECK(cnt == 2, "neighbours count %d", cnt);
    OK(MPI_Graph_neighbors(g, me, 4, nb));
    CHECK(nb[0] == (me - 1 + n) % n && nb[1] == (me + 1) % n, "neighbours %d %d", nb[0], nb[1]);
    CHECK(MPI_Graph_neighbors_count(g, n, &cnt) == MPI_ERR_RANK, "node n");
    int s_, d_;
    CHECK(MPI_Cart_shift(g, 0, 1, &s_, &d_) == MPI_ERR_TOPOLOGY, "cart_shift on a graph");
    OK(MPI_Graph_map(MPI_COMM_WORLD, n, index, edges, &t));
    CHECK(t == me, "graph_map %d", t);
    collectives(g, GRAPH_RING);
    OK(MPI_Comm_free(&g));
    int bad_index[2] = {2, 1};
    if (n >= 2)
        CHECK(MPI_Graph_create(MPI_COMM_WORLD, 2, bad_index, edges, 0, &g) == MPI_ERR_ARG,
              "decreasing index");
}

static void dist_graph(void) {
    int in, out, weighted, srcs[4], sw[4], dsts[4], dw[4];
    MPI_Comm dg;
    int left = (me - 1 + n) % n, right = (me + 1) % n;

    /* Adjacent, weighted: receive from the left, send to the right. */
    int aw = 10 + me, bw = 20 + me;
    OK(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, &left, &aw, 1, &right, &bw,
                                      MPI_INFO_NULL, 0, &dg));
    OK(MPI_Topo_test(dg, &weighted));
    CHECK(weighted == MPI_DIST_GRAPH, "dist graph topo_test %d", weighted);
    OK(MPI_Dist_graph_neighbors_count(dg, &in, &out, &weighted));
    CHECK(in == 1 && out == 1 && weighted, "adjacent counts %d %d %d", in, out, weighted);
    OK(MPI_Dist_graph_neighbors(dg, 4, srcs, sw, 4, dsts, dw));
    CHECK(srcs[0] == left && sw[0] == aw && dsts[0] == right && dw[0] == bw, "adjacent lists");
    OK(MPI_Comm_free(&dg));

    /* Any rank gives any edge: rank r gives r+1 -> r (weight r). */
    int src = right, deg = 1, dst = me, w = me;
    OK(MPI_Dist_graph_create(MPI_COMM_WORLD, 1, &src, &deg, &dst, &w, MPI_INFO_NULL, 0, &dg));
    OK(MPI_Comm_set_errhandler(dg, MPI_ERRORS_RETURN));
    OK(MPI_Dist_graph_neighbors_count(dg, &in, &out, &weighted));
    CHECK(in == 1 && out == 1 && weighted, "create counts %d %d %d", in, out, weighted);
    OK(MPI_Dist_graph_neighbors(dg, 4, srcs, sw, 4, dsts, dw));
    CHECK(srcs[0] == right && sw[0] == me && dsts[0] == left && dw[0] == left,
          "create lists: %d(%d) %d(%d)", srcs[0], sw[0], dsts[0], dw[0]);
    CHECK(MPI_Dist_graph_neighbors(dg, 0, srcs, sw, 0, dsts, dw) == MPI_ERR_ARG, "too small");
    int nbs;
    CHECK(MPI_Graph_neighbors_count(dg, 0, &nbs) == MPI_ERR_TOPOLOGY, "graph call on a dist graph");
    collectives(dg, DIST_BACK);
    OK(MPI_Comm_free(&dg));

    /* Unweighted, all edges given by rank 0. */
    int srcs0[8], degs0[8], dsts0[8];
    for (int i = 0; i < n; i++) {
        srcs0[i] = (i + 1) % n;
        degs0[i] = 1;
        dsts0[i] = i;
    }
    OK(MPI_Dist_graph_create(MPI_COMM_WORLD, me == 0 ? n : 0, srcs0, degs0, dsts0,
                             unweighted, MPI_INFO_NULL, 0, &dg));
    OK(MPI_Dist_graph_neighbors_count(dg, &in, &out, &weighted));
    CHECK(in == 1 && out == 1 && !weighted, "unweighted counts %d %d %d", in, out, weighted);
    OK(MPI_Dist_graph_neighbors(dg, 1, srcs, unweighted, 1, dsts, unweighted));
    CHECK(srcs[0] == right && dsts[0] == left, "unweighted lists");
    collectives(dg, DIST_BACK);
    OK(MPI_Comm_free(&dg));

    /* An empty neighbourhood. */
    OK(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 0, srcs, weights_empty, 0, dsts,
                                      weights_empty, MPI_INFO_NULL, 0, &dg));
    OK(MPI_Neighbor_allgather(srcs, 1, MPI_INT, dsts, 1, MPI_INT, dg));
    OK(MPI_Comm_free(&dg));
    CHECK(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, &n, unweighted, 0, dsts,
                                         unweighted, MPI_INFO_NULL, 0, &dg) == MPI_ERR_RANK,
          "source rank n");
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    int t, s, d, x = 0, y[4];
    OK(MPI_Topo_test(MPI_COMM_WORLD, &t));
    CHECK(t == MPI_UNDEFINED, "world has no topology: %d", t);
    CHECK(MPI_Cart_shift(MPI_COMM_WORLD, 0, 1, &s, &d) == MPI_ERR_TOPOLOGY, "shift on world");
    CHECK(MPI_Neighbor_allgather(&x, 1, MPI_INT, y, 1, MPI_INT, MPI_COMM_WORLD) == MPI_ERR_TOPOLOGY,
          "neighbour collective on world");
    CHECK(MPI_Cartdim_get(MPI_COMM_NULL, &t) == MPI_ERR_COMM, "cartdim of MPI_COMM_NULL");

    dims();
    cart();
    graph();
    dist_graph();
    int rc = summary("topo");
    MPI_Finalize();
    return rc;
}
