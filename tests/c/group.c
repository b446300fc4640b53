/* Groups, communicators made from them, communicator comparison and cancelling requests,
 * checked against what the ranks compute themselves; then bad input under
 * MPI_ERRORS_RETURN. Any number of ranks. */
#include "check.h"

static void groups(int rank, int n) {
    MPI_Group world, evens, odds, rev, u, i, d;
    int size = -1, r = -1, cmp = -1;
    OK(MPI_Comm_group(MPI_COMM_WORLD, &world));
    OK(MPI_Group_size(world, &size));
    OK(MPI_Group_rank(world, &r));
    CHECK(size == n && r == rank, "world group size %d rank %d", size, r);

    int ev[64], ne = 0, od[64], no = 0, all[64];
    for (int k = 0; k < n; k++) {
        if (k % 2 == 0) ev[ne++] = k; else od[no++] = k;
        all[k] = n - 1 - k;
    }
    OK(MPI_Group_incl(world, ne, ev, &evens));
    OK(MPI_Group_excl(world, ne, ev, &odds));
    OK(MPI_Group_size(evens, &size));
    CHECK(size == ne, "evens size %d", size);
    OK(MPI_Group_size(odds, &size));
    CHECK(size == no, "odds size %d", size);
    OK(MPI_Group_rank(evens, &r));
    CHECK(r == (rank % 2 == 0 ? rank / 2 : MPI_UNDEFINED), "rank in evens %d", r);

    OK(MPI_Group_incl(world, n, all, &rev));
    OK(MPI_Group_compare(world, rev, &cmp));
    CHECK(cmp == (n == 1 ? MPI_IDENT : MPI_SIMILAR), "world vs reversed %d", cmp);
    OK(MPI_Group_compare(world, world, &cmp));
    CHECK(cmp == MPI_IDENT, "world vs world %d", cmp);
    OK(MPI_Group_union(odds, evens, &u));
    OK(MPI_Group_compare(u, world, &cmp));
    CHECK(cmp == (n <= 1 ? MPI_IDENT : MPI_SIMILAR), "odds+evens vs world %d", cmp);
    OK(MPI_Group_intersection(evens, odds, &i));
    OK(MPI_Group_size(i, &size));
    CHECK(size == 0, "evens & odds size %d", size);
    OK(MPI_Group_compare(i, MPI_GROUP_EMPTY, &cmp));
    CHECK(cmp == MPI_IDENT, "empty intersection vs MPI_GROUP_EMPTY %d", cmp);
    CHECK(i == MPI_GROUP_EMPTY, "an empty intersection is MPI_GROUP_EMPTY");
    OK(MPI_Group_difference(world, odds, &d));
    OK(MPI_Group_compare(d, evens, &cmp));
    CHECK(cmp == MPI_IDENT, "world - odds vs evens %d", cmp);

    /* Translate every world rank into the reversed group and into evens. */
    int in[65], out[65];
    for (int k = 0; k < n; k++) in[k] = k;
    in[n] = MPI_PROC_NULL;
    OK(MPI_Group_translate_ranks(world, n + 1, in, rev, out));
    for (int k = 0; k < n; k++) CHECK(out[k] == n - 1 - k, "translate %d -> %d in reversed", k, out[k]);
    CHECK(out[n] == MPI_PROC_NULL, "MPI_PROC_NULL translates to itself");
    OK(MPI_Group_translate_ranks(world, n, in, evens, out));
    for (int k = 0; k < n; k++) CHECK(out[k] == (k % 2 ? MPI_UNDEFINED : k / 2), "translate %d -> %d in evens", k, out[k]);
    OK(MPI_Group_translate_ranks(world, no, od, odds, out));
    for (int k = 0; k < no; k++) CHECK(out[k] == k, "translate odd %d -> %d in odds", od[k], out[k]);

    /* A communicator of the evens: they talk in it, the odds get MPI_COMM_NULL. */
    MPI_Comm ce;
    OK(MPI_Comm_create(MPI_COMM_WORLD, evens, &ce));
    if (rank % 2) {
        CHECK(ce == MPI_COMM_NULL, "odd rank got a communicator");
    } else {
        int cs = -1, cr = -1, sum = 0;
        MPI_Comm_size(ce, &cs);
        MPI_Comm_rank(ce, &cr);
        CHECK(cs == ne && cr == rank / 2, "evens comm size %d rank %d", cs, cr);
        OK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, ce));
        int want = 0;
        for (int k = 0; k < n; k += 2) want += k;
        CHECK(sum == want, "sum over the evens %d, want %d", sum, want);
        OK(MPI_Comm_compare(ce, MPI_COMM_WORLD, &cmp));
        CHECK(cmp == (n == 1 ? MPI_CONGRUENT : MPI_UNEQUAL), "evens vs world %d", cmp);
        OK(MPI_Comm_free(&ce));
    }
    /* MPI 2.2: each rank passes its own part of a partition (evens or odds): one call, one
     * communicator per part. */
    MPI_Comm cp;
    OK(MPI_Comm_create(MPI_COMM_WORLD, rank % 2 ? odds : evens, &cp));
    {
        int cs = -1, cr2 = -1, sum = 0, want = 0;
        MPI_Comm_size(cp, &cs);
        MPI_Comm_rank(cp, &cr2);
        CHECK(cs == (rank % 2 ? no : ne) && cr2 == rank / 2, "parity comm size %d rank %d", cs,
              cr2);
        OK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, cp));
        for (int k = rank % 2; k < n; k += 2) want += k;
        CHECK(sum == want, "sum over my parity %d, want %d", sum, want);
        OK(MPI_Comm_free(&cp));
    }
    /* The reversed order as a communicator: similar to the world. */
    MPI_Comm cr;
    OK(MPI_Comm_create(MPI_COMM_WORLD, rev, &cr));
    int crr = -1;
    MPI_Comm_rank(cr, &crr);
    CHECK(crr == n - 1 - rank, "rank in the reversed communicator %d", crr);
    OK(MPI_Comm_compare(cr, MPI_COMM_WORLD, &cmp));
    CHECK(cmp == (n == 1 ? MPI_CONGRUENT : MPI_SIMILAR), "reversed vs world %d", cmp);
    OK(MPI_Comm_compare(MPI_COMM_WORLD, MPI_COMM_WORLD, &cmp));
    CHECK(cmp == MPI_IDENT, "world vs world %d", cmp);
    MPI_Comm dup;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    OK(MPI_Comm_compare(dup, MPI_COMM_WORLD, &cmp));
    CHECK(cmp == MPI_CONGRUENT, "dup vs world %d", cmp);
    OK(MPI_Comm_free(&dup));
    OK(MPI_Comm_free(&cr));

    MPI_Group gs[] = {world, evens, odds, rev, u, i, d};
    for (unsigned k = 0; k < sizeof gs / sizeof gs[0]; k++) OK(MPI_Group_free(&gs[k]));
    CHECK(gs[0] == MPI_GROUP_NULL, "MPI_Group_free sets MPI_GROUP_NULL");
}

static void cancel(int rank, int n) {
    /* A receive nobody sends to: cancelled. */
    int x = -7, flag = -1;
    MPI_Request rq;
    MPI_Status st;
    OK(MPI_Irecv(&x, 1, MPI_INT, MPI_ANY_SOURCE, 4242, MPI_COMM_WORLD, &rq));
    OK(MPI_Cancel(&rq));
    OK(MPI_Wait(&rq, &st));
    OK(MPI_Test_cancelled(&st, &flag));
    CHECK(flag == 1 && x == -7 && rq == MPI_REQUEST_NULL, "cancelled receive: flag %d x %d", flag, x);

    /* A receive matched before the cancel (the synchronous sends into every rank's receive
     * completed before the barrier): the cancel has no effect, the data arrives. */
    int next = (rank + 1) % n, prev = (rank + n - 1) % n, y = -1;
    OK(MPI_Irecv(&y, 1, MPI_INT, prev, 7, MPI_COMM_WORLD, &rq));
    OK(MPI_Ssend(&rank, 1, MPI_INT, next, 7, MPI_COMM_WORLD));
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_Cancel(&rq));
    OK(MPI_Wait(&rq, &st));
    OK(MPI_Test_cancelled(&st, &flag));
    CHECK(flag == 0 && y == prev, "matched receive: flag %d y %d", flag, y);

    /* A send: rmca's PMLs cancel no send (MPI-4 deprecates it), so MPI_Cancel succeeds, the
     * send completes when received, and its status says it was not cancelled. */
    MPI_Request sq;
    int s = 100 + rank, got = -1, cancelled = -1;
    OK(MPI_Issend(&s, 1, MPI_INT, next, 8, MPI_COMM_WORLD, &sq));
    OK(MPI_Cancel(&sq));
    OK(MPI_Recv(&got, 1, MPI_INT, prev, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    OK(MPI_Wait(&sq, &st));
    OK(MPI_Test_cancelled(&st, &cancelled));
    CHECK(cancelled == 0 && got == 100 + prev, "send after MPI_Cancel: cancelled %d, delivered %d", cancelled, got);
}

static void bad_input(int rank, int n) {
    int rc, v = 0, ranks[2] = {0, 0};
    MPI_Group g, world, stale;
#define EXPECT(call, cls)                                                            \
    do {                                                                             \
        rc = (call);                                                                 \
        CHECK(rc == (cls), "%s returned %d, expected %s (%d)", #call, rc, #cls, cls); \
    } while (0)
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    OK(MPI_Comm_group(MPI_COMM_WORLD, &world));
    EXPECT(MPI_Group_size(MPI_GROUP_NULL, &v), MPI_ERR_GROUP);
    EXPECT(MPI_Group_size((MPI_Group)0x3333, &v), MPI_ERR_GROUP);
    EXPECT(MPI_Group_incl(world, 2, ranks, &g), MPI_ERR_RANK);
    ranks[0] = n;
    EXPECT(MPI_Group_incl(world, 1, ranks, &g), MPI_ERR_RANK);
    ranks[0] = -1;
    EXPECT(MPI_Group_excl(world, 1, ranks, &g), MPI_ERR_RANK);
    EXPECT(MPI_Group_incl(world, -1, ranks, &g), MPI_ERR_COUNT);
    EXPECT(MPI_Group_incl(world, 1, NULL, &g), MPI_ERR_ARG);
    ranks[0] = n + 5;
    EXPECT(MPI_Group_translate_ranks(world, 1, ranks, world, ranks + 1), MPI_ERR_RANK);
    MPI_Group empty = MPI_GROUP_EMPTY;
    OK(MPI_Group_free(&empty)); /* as MPICH: empty results are MPI_GROUP_EMPTY */
    CHECK(empty == MPI_GROUP_NULL, "freed MPI_GROUP_EMPTY is not MPI_GROUP_NULL");
    OK(MPI_Group_incl(world, 1, &rank, &stale));
    OK(MPI_Group_free(&stale));
    OK(MPI_Group_incl(world, 1, &rank, &g));
    MPI_Group kept = g;
    OK(MPI_Group_free(&g));
    EXPECT(MPI_Group_rank(kept, &v), MPI_ERR_GROUP);
    MPI_Comm c;
    EXPECT(MPI_Comm_create(MPI_COMM_WORLD, MPI_GROUP_NULL, &c), MPI_ERR_GROUP);
    EXPECT(MPI_Comm_create(MPI_COMM_NULL, world, &c), MPI_ERR_COMM);
    EXPECT(MPI_Comm_group(MPI_COMM_NULL, &g), MPI_ERR_COMM);
    MPI_Request r = MPI_REQUEST_NULL;
    EXPECT(MPI_Cancel(&r), MPI_ERR_REQUEST);
    r = (MPI_Request)0x4545;
    EXPECT(MPI_Cancel(&r), MPI_ERR_REQUEST);
    EXPECT(MPI_Test_cancelled(MPI_STATUS_IGNORE, &v), MPI_ERR_ARG);
    OK(MPI_Group_free(&world));
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
#undef EXPECT
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    groups(rank, size);
    cancel(rank, size);
    bad_input(rank, size);
    int rc = summary("group");
    MPI_Finalize();
    return rc;
}
