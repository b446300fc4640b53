/* Collectives on an intercommunicator (between even and odd world ranks: uneven groups at 3
 * ranks): the blocking v-forms, Alltoallw and the reduce-scatters; every non-blocking
 * collective (one overlapped with blocking point-to-point that needs it to progress, two
 * outstanding at once), the large-count forms, persistent collectives, MPI_Comm_split_type,
 * and the refusals (prefix reductions, MPI_IN_PLACE, bad roots). */
#include "check.h"

static int me, np, color, lrank, lsize, rsize;
static MPI_Comm inter;

/* World ranks of local rank i and remote rank j. */
static int lw(int i) { return 2 * i + color; }
static int rw(int j) { return 2 * j + 1 - color; }

/* Root arguments of a rooted collective whose root is local rank 0 of group `root_color`. */
static int root_arg(int root_color) {
    if (color == root_color) return lrank == 0 ? MPI_ROOT : MPI_PROC_NULL;
    return 0;
}

static void blocking(void) {
    /* Allgatherv: remote rank j sends rw(j)+1 ints, placed with a gap of one. */
    {
        int send[8], recv[64], counts[8], displs[8], at = 0;
        for (int k = 0; k <= me; k++) send[k] = me * 100 + k;
        for (int j = 0; j < rsize; j++) {
            counts[j] = rw(j) + 1;
            displs[j] = at;
            at += counts[j] + 1;
        }
        for (int i = 0; i < 64; i++) recv[i] = -1;
        OK(MPI_Allgatherv(send, me + 1, MPI_INT, recv, counts, displs, MPI_INT, inter));
        for (int j = 0; j < rsize; j++)
            for (int k = 0; k < counts[j]; k++)
                CHECK(recv[displs[j] + k] == rw(j) * 100 + k, "allgatherv from %d [%d]: %d", j, k,
                      recv[displs[j] + k]);
        CHECK(recv[displs[0] + counts[0]] == -1, "allgatherv wrote the gap");
    }
    /* Gatherv and Scatterv, root: local rank 0 of the evens. */
    {
        int send[8], recv[64], counts[8], displs[8], at = 0, root = root_arg(0);
        for (int j = 0; j < rsize; j++) {
            counts[j] = j + 1;
            displs[j] = at;
            at += j + 1;
        }
        for (int k = 0; k < 8; k++) send[k] = me * 10 + k;
        for (int i = 0; i < 64; i++) recv[i] = -1;
        OK(MPI_Gatherv(send, lrank + 1, MPI_INT, recv, counts, displs, MPI_INT, root, inter));
        if (root == MPI_ROOT)
            for (int j = 0; j < rsize; j++)
                for (int k = 0; k <= j; k++)
                    CHECK(recv[displs[j] + k] == rw(j) * 10 + k, "gatherv %d/%d", j, k);
        int whole[64], mine[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
        for (int i = 0; i < 64; i++) whole[i] = 500 + i;
        OK(MPI_Scatterv(whole, counts, displs, MPI_INT, mine, lrank + 1, MPI_INT, root, inter));
        if (color == 1) {
            int first = lrank * (lrank + 1) / 2;
            for (int k = 0; k <= lrank; k++)
                CHECK(mine[k] == 500 + first + k, "scatterv [%d]: %d", k, mine[k]);
        } else {
            CHECK(mine[0] == -1, "scatterv wrote the root's group");
        }
    }
    /* Alltoallw: to remote rank j, j+1 ints (bytes displacements); received as j'... */
    {
        int send[16], recv[16], sc[8], sd[8], rc[8], rd[8];
        MPI_Datatype st[8], rt[8];
        for (int j = 0, at = 0; j < rsize; j++) {
            sc[j] = (lrank + j) % 2 + 1; /* what I send to j */
            rc[j] = (j + lrank) % 2 + 1; /* what j sends me */
            sd[j] = at * (int)sizeof(int);
            rd[j] = at * (int)sizeof(int);
            at += 2;
            st[j] = rt[j] = MPI_INT;
            for (int k = 0; k < 2; k++) send[2 * j + k] = me * 1000 + rw(j) * 10 + k;
        }
        for (int i = 0; i < 16; i++) recv[i] = -1;
        OK(MPI_Alltoallw(send, sc, sd, st, recv, rc, rd, rt, inter));
        for (int j = 0; j < rsize; j++)
            for (int k = 0; k < rc[j]; k++)
                CHECK(recv[2 * j + k] == rw(j) * 1000 + me * 10 + k, "alltoallw from %d [%d]: %d", j,
                      k, recv[2 * j + k]);
    }
    /* Reduce_scatter: 6 ints in all in each group, dealt by local rank; each gets its part of
     * the sum over the remote group. Reduce_scatter_block: 6 / lsize each. */
    {
        int send[6], recv[6], counts[8], first = 0;
        for (int i = 0; i < lsize; i++) counts[i] = i + 1 == lsize ? 6 - (lsize - 1) * (6 / lsize) : 6 / lsize;
        for (int i = 0; i < lrank; i++) first += counts[i];
        for (int k = 0; k < 6; k++) send[k] = me * 10 + k;
        for (int k = 0; k < 6; k++) recv[k] = -1;
        OK(MPI_Reduce_scatter(send, recv, counts, MPI_INT, MPI_SUM, inter));
        for (int k = 0; k < counts[lrank]; k++) {
            int want = 0;
            for (int j = 0; j < rsize; j++) want += rw(j) * 10 + first + k;
            CHECK(recv[k] == want, "reduce_scatter [%d]: %d, want %d", k, recv[k], want);
        }
        int rc = 6 / lsize;
        for (int k = 0; k < 6; k++) recv[k] = -1;
        OK(MPI_Reduce_scatter_block(send, recv, rc, MPI_INT, MPI_SUM, inter));
        for (int k = 0; k < rc; k++) {
            int want = 0;
            for (int j = 0; j < rsize; j++) want += rw(j) * 10 + lrank * rc + k;
            CHECK(recv[k] == want, "reduce_scatter_block [%d]: %d, want %d", k, recv[k], want);
        }
        MPI_Count rcc = rc;
        for (int k = 0; k < 6; k++) recv[k] = -1;
        OK(MPI_Reduce_scatter_block_c(send, recv, rcc, MPI_INT, MPI_MAX, inter));
        int want = 0;
        for (int j = 0; j < rsize; j++)
            if (rw(j) * 10 + lrank * rc > want) want = rw(j) * 10 + lrank * rc;
        CHECK(recv[0] == want, "reduce_scatter_block_c max: %d, want %d", recv[0], want);
    }
    /* A large-count form past the old int limit's path: Allreduce_c, Bcast_c. */
    {
        int v = me, sum = -1, want = 0;
        for (int j = 0; j < rsize; j++) want += rw(j);
        OK(MPI_Allreduce_c(&v, &sum, (MPI_Count)1, MPI_INT, MPI_SUM, inter));
        CHECK(sum == want, "allreduce_c %d, want %d", sum, want);
        int b[3] = {color == 1 && lrank == 0 ? 7 : 0, 8, 9};
        if (color == 0) b[1] = b[2] = 0;
        OK(MPI_Bcast_c(b, (MPI_Count)3, MPI_INT, root_arg(1), inter));
        if (color == 0) CHECK(b[0] == 7 && b[1] == 8 && b[2] == 9, "bcast_c %d %d %d", b[0], b[1], b[2]);
    }
}

static void nonblocking(void) {
    MPI_Request rq[4];
    /* An Ibcast from the odds' leader that the evens' leader must forward within its group
     * while it blocks in MPI_Recv for a message its group sends only once the broadcast has
     * arrived: completes only if the collective progresses during point-to-point. */
    {
        double b[4] = {0, 0, 0, 0};
        if (color == 1 && lrank == 0)
            for (int k = 0; k < 4; k++) b[k] = 1.5 * k + 1;
        OK(MPI_Ibcast(b, 4, MPI_DOUBLE, root_arg(1), inter, &rq[0]));
        if (color == 0 && lrank == 0) {
            for (int i = 1; i < lsize; i++) {
                double got = -1;
                OK(MPI_Recv(&got, 1, MPI_DOUBLE, lw(i), 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
                CHECK(got == 4.0, "forwarded bcast seen by local %d: %g", i, got);
            }
            OK(MPI_Wait(&rq[0], MPI_STATUS_IGNORE));
        } else if (color == 0) {
            int done = 0;
            while (!done) POLL(MPI_Test(&rq[0], &done, MPI_STATUS_IGNORE));
            OK(MPI_Send(&b[2], 1, MPI_DOUBLE, lw(0), 5, MPI_COMM_WORLD));
        } else {
            OK(MPI_Wait(&rq[0], MPI_STATUS_IGNORE));
        }
        if (color == 0)
            for (int k = 0; k < 4; k++) CHECK(b[k] == 1.5 * k + 1, "ibcast [%d]: %g", k, b[k]);
    }
    /* Two outstanding at once (an Iallreduce and an Ireduce to the odds' leader), with
     * point-to-point in between; completed in reverse order. */
    {
        long v = me + 1, sum = -1, red = -1, want = 0, wantred = 0;
        for (int j = 0; j < rsize; j++) want += rw(j) + 1;
        for (int i = 0; i < lsize; i++) wantred += (long)lw(i) * lw(i);
        long sq = (long)me * me;
        OK(MPI_Iallreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, inter, &rq[0]));
        OK(MPI_Ireduce(&sq, &red, 1, MPI_LONG, MPI_SUM, root_arg(1), inter, &rq[1]));
        int token = me, got = -1;
        OK(MPI_Sendrecv(&token, 1, MPI_INT, (me + 1) % np, 9, &got, 1, MPI_INT, (me + np - 1) % np,
                        9, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(got == (me + np - 1) % np, "ring token %d", got);
        OK(MPI_Wait(&rq[1], MPI_STATUS_IGNORE));
        OK(MPI_Wait(&rq[0], MPI_STATUS_IGNORE));
        CHECK(sum == want, "iallreduce %ld, want %ld", sum, want);
        long wanted_sq = 0;
        for (int j = 0; j < rsize; j++) wanted_sq += (long)rw(j) * rw(j);
        if (color == 1 && lrank == 0) CHECK(red == wanted_sq, "ireduce %ld, want %ld", red, wanted_sq);
        if (color == 0) CHECK(red == -1, "ireduce wrote a non-root: %ld", red);
        (void)wantred;
    }
    /* Igather / Iscatter (root: the evens' leader), Iallgather, Ialltoall, Ibarrier: all
     * outstanding together, in one Waitall. */
    {
        int gs = me * 3, gr[8], ss[8], sr = -1, ag[8], as[8], ar[8];
        for (int j = 0; j < 8; j++) gr[j] = ag[j] = ar[j] = -1;
        for (int j = 0; j < rsize; j++) ss[j] = 40 + j;
        for (int j = 0; j < rsize; j++) as[j] = me * 100 + rw(j);
        int root = root_arg(0);
        MPI_Request r5[5];
        OK(MPI_Igather(&gs, 1, MPI_INT, gr, 1, MPI_INT, root, inter, &r5[0]));
        OK(MPI_Iscatter(ss, 1, MPI_INT, &sr, 1, MPI_INT, root, inter, &r5[1]));
        OK(MPI_Iallgather(&me, 1, MPI_INT, ag, 1, MPI_INT, inter, &r5[2]));
        OK(MPI_Ialltoall(as, 1, MPI_INT, ar, 1, MPI_INT, inter, &r5[3]));
        OK(MPI_Ibarrier(inter, &r5[4]));
        OK(MPI_Waitall(5, r5, MPI_STATUSES_IGNORE));
        if (root == MPI_ROOT)
            for (int j = 0; j < rsize; j++) CHECK(gr[j] == rw(j) * 3, "igather %d: %d", j, gr[j]);
        if (color == 1) CHECK(sr == 40 + lrank, "iscatter %d", sr);
        for (int j = 0; j < rsize; j++) {
            CHECK(ag[j] == rw(j), "iallgather %d: %d", j, ag[j]);
            CHECK(ar[j] == rw(j) * 100 + me, "ialltoall %d: %d", j, ar[j]);
        }
    }
    /* The v-forms and the reduce-scatters, non-blocking and large-count. */
    {
        int send[8], recv[64], counts[8], displs[8], at = 0;
        for (int k = 0; k < 8; k++) send[k] = me * 100 + k;
        for (int j = 0; j < rsize; j++) {
            counts[j] = rw(j) % 3 + 1;
            displs[j] = at;
            at += counts[j];
        }
        for (int i = 0; i < 64; i++) recv[i] = -1;
        OK(MPI_Iallgatherv(send, me % 3 + 1, MPI_INT, recv, counts, displs, MPI_INT, inter, &rq[0]));
        OK(MPI_Wait(&rq[0], MPI_STATUS_IGNORE));
        for (int j = 0; j < rsize; j++)
            for (int k = 0; k < counts[j]; k++)
                CHECK(recv[displs[j] + k] == rw(j) * 100 + k, "iallgatherv %d/%d", j, k);

        /* Igatherv_c to the odds' leader, Iscatterv back from it. */
        MPI_Count cc[8];
        MPI_Aint cd[8];
        int root = root_arg(1);
        for (int j = 0; j < rsize; j++) {
            cc[j] = 2;
            cd[j] = 3 * j;
        }
        for (int i = 0; i < 64; i++) recv[i] = -1;
        OK(MPI_Igatherv_c(send, 2, MPI_INT, recv, cc, cd, MPI_INT, root, inter, &rq[0]));
        OK(MPI_Wait(&rq[0], MPI_STATUS_IGNORE));
        if (root == MPI_ROOT)
            for (int j = 0; j < rsize; j++)
                CHECK(recv[3 * j] == rw(j) * 100 && recv[3 * j + 1] == rw(j) * 100 + 1 &&
                          recv[3 * j + 2] == -1,
                      "igatherv_c %d", j);
        int mine[2] = {-1, -1};
        OK(MPI_Iscatterv(recv, (int[]){2, 2, 2, 2, 2, 2, 2, 2}, (int[]){0, 3, 6, 9, 12, 15, 18, 21},
                         MPI_INT, mine, 2, MPI_INT, root, inter, &rq[0]));
        OK(MPI_Wait(&rq[0], MPI_STATUS_IGNORE));
        if (color == 0) CHECK(mine[0] == me * 100 && mine[1] == me * 100 + 1, "iscatterv %d %d", mine[0], mine[1]);

        /* Ialltoallv and Ialltoallw: remote rank j gets j+1 ints. */
        int sc[8], sd[8], rc[8], rd[8], sdb[8], rdb[8];
        MPI_Datatype ty[8];
        int out[64], in[64];
        for (int j = 0, so = 0, ro = 0; j < rsize; j++) {
            sc[j] = j + 1;
            sd[j] = so;
            sdb[j] = so * (int)sizeof(int);
            rc[j] = lrank + 1;
            rd[j] = ro;
            rdb[j] = ro * (int)sizeof(int);
            ty[j] = MPI_INT;
            for (int k = 0; k <= j; k++) out[so + k] = me * 100 + rw(j) * 10 + k;
            so += sc[j];
            ro += rc[j];
        }
        for (int i = 0; i < 64; i++) in[i] = -1;
        OK(MPI_Ialltoallv(out, sc, sd, MPI_INT, in, rc, rd, MPI_INT, inter, &rq[0]));
        OK(MPI_Wait(&rq[0], MPI_STATUS_IGNORE));
        for (int j = 0; j < rsize; j++)
            for (int k = 0; k <= lrank; k++)
                CHECK(in[rd[j] + k] == rw(j) * 100 + me * 10 + k, "ialltoallv %d/%d: %d", j, k,
                      in[rd[j] + k]);
        for (int i = 0; i < 64; i++) in[i] = -1;
        OK(MPI_Ialltoallw(out, sc, sdb, ty, in, rc, rdb, ty, inter, &rq[0]));
        OK(MPI_Wait(&rq[0], MPI_STATUS_IGNORE));
        for (int j = 0; j < rsize; j++)
            CHECK(in[rd[j] + lrank] == rw(j) * 100 + me * 10 + lrank, "ialltoallw %d", j);

        /* Ireduce_scatter_block (6 in all per group) and Ireduce_scatter with MPI_MAX. */
        int in6[6], res[6] = {-1, -1, -1, -1, -1, -1}, rcb = 6 / lsize, rcs[8];
        for (int k = 0; k < 6; k++) in6[k] = me * 10 + k;
        OK(MPI_Ireduce_scatter_block(in6, res, rcb, MPI_INT, MPI_SUM, inter, &rq[0]));
        OK(MPI_Wait(&rq[0], MPI_STATUS_IGNORE));
        for (int k = 0; k < rcb; k++) {
            int want = 0;
            for (int j = 0; j < rsize; j++) want += rw(j) * 10 + lrank * rcb + k;
            CHECK(res[k] == want, "ireduce_scatter_block [%d] %d, want %d", k, res[k], want);
        }
        for (int i = 0; i < lsize; i++) rcs[i] = i == 0 ? 6 - (lsize - 1) : 1;
        OK(MPI_Ireduce_scatter(in6, res, rcs, MPI_INT, MPI_MAX, inter, &rq[0]));
        OK(MPI_Wait(&rq[0], MPI_STATUS_IGNORE));
        int first = lrank == 0 ? 0 : 6 - (lsize - 1) + (lrank - 1);
        int maxw = 0;
        for (int j = 0; j < rsize; j++)
            if (rw(j) > maxw) maxw = rw(j);
        CHECK(res[0] == maxw * 10 + first, "ireduce_scatter max %d, want %d", res[0], maxw * 10 + first);
    }
}

static void persistent(void) {
    /* Allreduce_init and Bcast_init on the intercommunicator, each started twice. */
    int v = 0, sum = 0, b[2] = {0, 0};
    MPI_Request ar, br;
    OK(MPI_Allreduce_init(&v, &sum, 1, MPI_INT, MPI_SUM, inter, MPI_INFO_NULL, &ar));
    OK(MPI_Bcast_init(b, 2, MPI_INT, root_arg(0), inter, MPI_INFO_NULL, &br));
    for (int round = 0; round < 2; round++) {
        v = me + round;
        sum = -1;
        b[0] = color == 0 && lrank == 0 ? 11 + round : 0;
        b[1] = color == 0 && lrank == 0 ? 22 + round : 0;
        OK(MPI_Start(&ar));
        OK(MPI_Start(&br));
        OK(MPI_Wait(&br, MPI_STATUS_IGNORE));
        OK(MPI_Wait(&ar, MPI_STATUS_IGNORE));
        int want = 0;
        for (int j = 0; j < rsize; j++) want += rw(j) + round;
        CHECK(sum == want, "persistent allreduce round %d: %d, want %d", round, sum, want);
        if (color == 1) CHECK(b[0] == 11 + round && b[1] == 22 + round, "persistent bcast %d", round);
    }
    OK(MPI_Request_free(&ar));
    OK(MPI_Request_free(&br));
}

static void split_type(void) {
    /* Every process runs on one node here: the split keeps both whole groups. */
    MPI_Comm part;
    int flag = 0, r = -1, s = -1;
    OK(MPI_Comm_split_type(inter, MPI_COMM_TYPE_SHARED, -me, MPI_INFO_NULL, &part));
    CHECK(part != MPI_COMM_NULL, "split_type on an intercommunicator gave MPI_COMM_NULL");
    if (part == MPI_COMM_NULL) return;
    OK(MPI_Comm_test_inter(part, &flag));
    CHECK(flag == 1, "split_type of an intercommunicator is an intercommunicator");
    OK(MPI_Comm_remote_size(part, &r));
    OK(MPI_Comm_size(part, &s));
    CHECK(r == rsize && s == lsize, "split sizes %d/%d", s, r);
    /* Key -me: the local order is reversed. */
    OK(MPI_Comm_rank(part, &r));
    CHECK(r == lsize - 1 - lrank, "split rank %d", r);
    int v = me, sum = -1, want = 0;
    for (int j = 0; j < rsize; j++) want += rw(j);
    OK(MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, part));
    CHECK(sum == want, "allreduce on the split %d", sum);
    OK(MPI_Comm_free(&part));
    OK(MPI_Comm_split_type(inter, MPI_UNDEFINED, 0, MPI_INFO_NULL, &part));
    CHECK(part == MPI_COMM_NULL, "MPI_UNDEFINED split");
}

static void refusals(void) {
    int v = me, out = 0, cls = 0;
    MPI_Request rq = MPI_REQUEST_NULL;
    OK(MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN));
    int e = MPI_Scan(&v, &out, 1, MPI_INT, MPI_SUM, inter);
    MPI_Error_class(e, &cls);
    CHECK(cls == MPI_ERR_COMM, "MPI_Scan on an intercommunicator: class %d", cls);
    e = MPI_Iexscan(&v, &out, 1, MPI_INT, MPI_SUM, inter, &rq);
    MPI_Error_class(e, &cls);
    CHECK(cls == MPI_ERR_COMM && rq == MPI_REQUEST_NULL, "MPI_Iexscan: class %d", cls);
    e = MPI_Scan_init(&v, &out, 1, MPI_INT, MPI_SUM, inter, MPI_INFO_NULL, &rq);
    MPI_Error_class(e, &cls);
    CHECK(cls == MPI_ERR_COMM, "MPI_Scan_init: class %d", cls);
    e = MPI_Iallreduce(MPI_IN_PLACE, &out, 1, MPI_INT, MPI_SUM, inter, &rq);
    MPI_Error_class(e, &cls);
    CHECK(cls == MPI_ERR_BUFFER, "MPI_IN_PLACE on an intercommunicator: class %d", cls);
    e = MPI_Ibcast(&v, 1, MPI_INT, rsize, inter, &rq);
    MPI_Error_class(e, &cls);
    CHECK(cls == MPI_ERR_ROOT, "Ibcast root past the remote group: class %d", cls);
    e = MPI_Ireduce_scatter(&v, &out, NULL, MPI_INT, MPI_SUM, inter, &rq);
    MPI_Error_class(e, &cls);
    CHECK(cls == MPI_ERR_ARG, "Ireduce_scatter NULL counts: class %d", cls);
    e = MPI_Ialltoall(&v, -1, MPI_INT, &out, 1, MPI_INT, inter, &rq);
    MPI_Error_class(e, &cls);
    CHECK(cls == MPI_ERR_COUNT, "Ialltoall negative count: class %d", cls);
    e = MPI_Iallgather(&v, 1, MPI_INT, &out, 1, MPI_DATATYPE_NULL, inter, &rq);
    MPI_Error_class(e, &cls);
    CHECK(cls == MPI_ERR_TYPE, "Iallgather null type: class %d", cls);
    e = MPI_Iallreduce(&v, &out, 1, MPI_INT, MPI_OP_NULL, inter, &rq);
    MPI_Error_class(e, &cls);
    CHECK(cls == MPI_ERR_OP, "Iallreduce null op: class %d", cls);
    /* Still usable afterwards. */
    int sum = -1, want = 0;
    for (int j = 0; j < rsize; j++) want += rw(j);
    OK(MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, inter));
    CHECK(sum == want, "allreduce after the refusals %d", sum);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    if (np >= 2) {
        MPI_Comm local;
        color = me % 2;
        OK(MPI_Comm_split(MPI_COMM_WORLD, color, me, &local));
        MPI_Comm_rank(local, &lrank);
        MPI_Comm_size(local, &lsize);
        OK(MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, 1 - color, 3, &inter));
        OK(MPI_Comm_remote_size(inter, &rsize));
        blocking();
        nonblocking();
        persistent();
        split_type();
        refusals();
        OK(MPI_Comm_free(&inter));
        OK(MPI_Comm_free(&local));
    }
    int r = summary("inter2");
    MPI_Finalize();
    return r;
}
