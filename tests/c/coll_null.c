/* Collectives accept MPI_DATATYPE_NULL where the count that goes with it is 0 (or, for the
 * v and w forms, every count of that side on this rank is 0), as MPICH does
 * (pmodels/mpich#6323: MPI_Alltoallw with MPI_DATATYPE_NULL for the peers a rank exchanges
 * nothing with) and as point-to-point already does: bcast, gather(v), scatter(v),
 * allgather(v), alltoall(v)(w), the reductions with count 0, and their non-blocking forms,
 * with data moving beside the empty parts (checked) where the form allows it. With data,
 * the null type stays an error (MPI_ERR_TYPE). Errors return (MPI_ERRORS_RETURN), so a
 * refusal is a failed check, not an abort. */
#include "check.h"

#define NUL MPI_DATATYPE_NULL
#define MAXR 16

/* An empty call that must succeed (blocking, or its request waited for). */
#define EMPTY(call) CHECK((call) == MPI_SUCCESS, "%s refused", #call)
#define EMPTY_NB(call)                                                                    \
    do {                                                                                  \
        MPI_Request rq_ = MPI_REQUEST_NULL;                                               \
        int rc_ = (call);                                                                 \
        if (rc_ == MPI_SUCCESS) rc_ = MPI_Wait(&rq_, MPI_STATUS_IGNORE);                  \
        CHECK(rc_ == MPI_SUCCESS, "%s refused", #call);                                   \
    } while (0)
#define RQ &rq_

static int me, n;

/* Rank r's value i for peer q. */
static int val(int r, int q, int i) { return 1000 * r + 100 * q + i; }

/* Every collective with nothing to move and MPI_DATATYPE_NULL for the datatypes. */
static void all_empty(MPI_Comm comm) {
    int z[MAXR] = {0}, d[MAXR] = {0};
    MPI_Datatype zt[MAXR];
    for (int q = 0; q < MAXR; q++) zt[q] = NUL;
    int root = n - 1;
    EMPTY(MPI_Bcast(NULL, 0, NUL, root, comm));
    EMPTY(MPI_Gather(NULL, 0, NUL, NULL, 0, NUL, root, comm));
    EMPTY(MPI_Scatter(NULL, 0, NUL, NULL, 0, NUL, root, comm));
    EMPTY(MPI_Allgather(NULL, 0, NUL, NULL, 0, NUL, comm));
    EMPTY(MPI_Alltoall(NULL, 0, NUL, NULL, 0, NUL, comm));
    EMPTY(MPI_Gatherv(NULL, 0, NUL, NULL, z, d, NUL, root, comm));
    EMPTY(MPI_Scatterv(NULL, z, d, NUL, NULL, 0, NUL, root, comm));
    EMPTY(MPI_Allgatherv(NULL, 0, NUL, NULL, z, d, NUL, comm));
    EMPTY(MPI_Alltoallv(NULL, z, d, NUL, NULL, z, d, NUL, comm));
    EMPTY(MPI_Alltoallw(NULL, z, d, zt, NULL, z, d, zt, comm));
    EMPTY(MPI_Reduce(NULL, NULL, 0, NUL, MPI_SUM, root, comm));
    EMPTY(MPI_Allreduce(NULL, NULL, 0, NUL, MPI_SUM, comm));
    EMPTY(MPI_Reduce_scatter_block(NULL, NULL, 0, NUL, MPI_SUM, comm));
    EMPTY(MPI_Reduce_scatter(NULL, NULL, z, NUL, MPI_SUM, comm));
    EMPTY(MPI_Scan(NULL, NULL, 0, NUL, MPI_SUM, comm));
    EMPTY(MPI_Exscan(NULL, NULL, 0, NUL, MPI_SUM, comm));
    EMPTY_NB(MPI_Ibcast(NULL, 0, NUL, root, comm, RQ));
    EMPTY_NB(MPI_Igather(NULL, 0, NUL, NULL, 0, NUL, root, comm, RQ));
    EMPTY_NB(MPI_Iscatter(NULL, 0, NUL, NULL, 0, NUL, root, comm, RQ));
    EMPTY_NB(MPI_Iallgather(NULL, 0, NUL, NULL, 0, NUL, comm, RQ));
    EMPTY_NB(MPI_Ialltoall(NULL, 0, NUL, NULL, 0, NUL, comm, RQ));
    EMPTY_NB(MPI_Igatherv(NULL, 0, NUL, NULL, z, d, NUL, root, comm, RQ));
    EMPTY_NB(MPI_Iscatterv(NULL, z, d, NUL, NULL, 0, NUL, root, comm, RQ));
    EMPTY_NB(MPI_Iallgatherv(NULL, 0, NUL, NULL, z, d, NUL, comm, RQ));
    EMPTY_NB(MPI_Ialltoallv(NULL, z, d, NUL, NULL, z, d, NUL, comm, RQ));
    EMPTY_NB(MPI_Ialltoallw(NULL, z, d, zt, NULL, z, d, zt, comm, RQ));
    EMPTY_NB(MPI_Ireduce(NULL, NULL, 0, NUL, MPI_SUM, root, comm, RQ));
    EMPTY_NB(MPI_Iallreduce(NULL, NULL, 0, NUL, MPI_SUM, comm, RQ));
    EMPTY_NB(MPI_Ireduce_scatter_block(NULL, NULL, 0, NUL, MPI_SUM, comm, RQ));
    EMPTY_NB(MPI_Ireduce_scatter(NULL, NULL, z, NUL, MPI_SUM, comm, RQ));
    EMPTY_NB(MPI_Iscan(NULL, NULL, 0, NUL, MPI_SUM, comm, RQ));
    EMPTY_NB(MPI_Iexscan(NULL, NULL, 0, NUL, MPI_SUM, comm, RQ));
}

/* Rank r contributes r ints (rank 0 none, with MPI_DATATYPE_NULL) to a gatherv and an
 * allgatherv, and gets them back by a scatterv; the blocks arrive where they belong. */
static void varying(MPI_Comm comm, int nb) {
    int counts[MAXR], displs[MAXR], total = 0;
    for (int q = 0; q < n; q++) {
        counts[q] = q;
        displs[q] = total;
        total += q;
    }
    int mine[MAXR], all[MAXR * MAXR], back[MAXR];
    for (int i = 0; i < me; i++) mine[i] = val(me, 0, i);
    MPI_Datatype st = me == 0 ? NUL : MPI_INT;
    int root = 0, bad = 0, rc;
    MPI_Request rq;
    /* The root (rank 0) contributes nothing: its send type is null, its receive type real. */
    memset(all, 0, sizeof all);
    rc = nb ? MPI_Igatherv(mine, me, st, all, counts, displs, MPI_INT, root, comm, &rq)
            : MPI_Gatherv(mine, me, st, all, counts, displs, MPI_INT, root, comm);
    if (nb && rc == MPI_SUCCESS) rc = MPI_Wait(&rq, MPI_STATUS_IGNORE);
    CHECK(rc == MPI_SUCCESS, "%sgatherv with rank 0's null send type: rc %d", nb ? "i" : "", rc);
    if (me == root)
        for (int q = 0; q < n; q++)
            for (int i = 0; i < q; i++) bad += all[displs[q] + i] != val(q, 0, i);
    CHECK(bad == 0, "gatherv: %d wrong", bad);
    memset(all, 0, sizeof all);
    rc = nb ? MPI_Iallgatherv(mine, me, st, all, counts, displs, MPI_INT, comm, &rq)
            : MPI_Allgatherv(mine, me, st, all, counts, displs, MPI_INT, comm);
    if (nb && rc == MPI_SUCCESS) rc = MPI_Wait(&rq, MPI_STATUS_IGNORE);
    CHECK(rc == MPI_SUCCESS, "%sallgatherv with rank 0's null send type: rc %d", nb ? "i" : "",
          rc);
    bad = 0;
    for (int q = 0; q < n; q++)
        for (int i = 0; i < q; i++) bad += all[displs[q] + i] != val(q, 0, i);
    CHECK(bad == 0, "allgatherv: %d wrong", bad);
    /* Back out: rank 0's receive type null (it gets nothing). */
    memset(back, 0, sizeof back);
    rc = nb ? MPI_Iscatterv(all, counts, displs, MPI_INT, back, me, st, root, comm, &rq)
            : MPI_Scatterv(all, counts, displs, MPI_INT, back, me, st, root, comm);
    if (nb && rc == MPI_SUCCESS) rc = MPI_Wait(&rq, MPI_STATUS_IGNORE);
    CHECK(rc == MPI_SUCCESS, "%sscatterv with rank 0's null receive type: rc %d", nb ? "i" : "",
          rc);
    bad = 0;
    for (int i = 0; i < me; i++) bad += back[i] != val(me, 0, i);
    CHECK(bad == 0, "scatterv: %d wrong", bad);
}

/* MPI_Alltoallw where rank r exchanges one int with q only when r + q is odd, naming
 * MPI_DATATYPE_NULL for every other peer (pmodels/mpich#6323's case). */
static void alltoallw(MPI_Comm comm, int nb) {
    int sc[MAXR], sd[MAXR], rc_[MAXR], rd[MAXR];
    MPI_Datatype st[MAXR], rt[MAXR];
    int out[MAXR], in[MAXR];
    for (int q = 0; q < n; q++) {
        int k = (me + q) % 2;
        sc[q] = rc_[q] = k;
        sd[q] = rd[q] = q * (int)sizeof(int);
        st[q] = rt[q] = k ? MPI_INT : NUL;
        out[q] = val(me, q, 0);
        in[q] = -1;
    }
    MPI_Request rq;
    int rc = nb ? MPI_Ialltoallw(out, sc, sd, st, in, rc_, rd, rt, comm, &rq)
                : MPI_Alltoallw(out, sc, sd, st, in, rc_, rd, rt, comm);
    if (nb && rc == MPI_SUCCESS) rc = MPI_Wait(&rq, MPI_STATUS_IGNORE);
    CHECK(rc == MPI_SUCCESS, "%salltoallw with null types for empty peers: rc %d",
          nb ? "i" : "", rc);
    int bad = 0;
    for (int q = 0; q < n; q++) bad += in[q] != ((me + q) % 2 ? val(q, me, 0) : -1);
    CHECK(bad == 0, "alltoallw: %d wrong", bad);
}

/* With data, the null type is still refused. */
static void refused(MPI_Comm comm) {
    int x = 0;
    int rc = MPI_Bcast(&x, 1, NUL, 0, comm);
    int class = -1;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &class);
    CHECK(class == MPI_ERR_TYPE, "bcast of 1 element of MPI_DATATYPE_NULL: class %d", class);
    rc = MPI_Allreduce(&x, &x, 1, NUL, MPI_SUM, comm);
    class = -1;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &class);
    CHECK(class == MPI_ERR_TYPE, "allreduce of 1 element of MPI_DATATYPE_NULL: class %d", class);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (n > MAXR) {
        if (me == 0) fprintf(stderr, "at most %d ranks\n", MAXR);
        MPI_Finalize();
        return 2;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    all_empty(MPI_COMM_WORLD);
    for (int nb = 0; nb < 2; nb++) {
        varying(MPI_COMM_WORLD, nb);
        alltoallw(MPI_COMM_WORLD, nb);
    }
    refused(MPI_COMM_WORLD);
    /* Still in step: a collective with data afterwards. */
    int one = 1, sum = 0;
    OK(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(sum == n, "allreduce after: %d", sum);
    int rc = summary("coll_null");
    MPI_Finalize();
    return rc;
}
