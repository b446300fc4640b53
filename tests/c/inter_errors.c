/* Intercommunicator constructors refused by one group: every process of BOTH groups gets an
 * error through its communicator's error handler (MPI_ERRORS_RETURN here), nobody waits for
 * a group that has returned, and later calls on the parents still work. Each case hangs (the
 * harness's timeout fails it) when one group returns alone:
 *   1. MPI_Intercomm_create where one process of group B passes a local_leader out of range
 *      (3 ranks; B's leader, which named itself, tells group A);
 *   2. MPI_Intercomm_create where one process of group B passes another tag (3 ranks);
 *   3. MPI_Intercomm_create where the processes of group B name different leaders (3 ranks);
 *   4. MPI_Comm_create on an intercommunicator where the processes of group B pass different
 *      groups (3 ranks; before, they got inconsistent communicators);
 *   5. MPI_Comm_split on an intercommunicator whose exchange one group rejects (the length of
 *      what the other sent: it called MPI_Comm_create, an erroneous program);
 *   6. MPI_Intercomm_merge likewise (the other group called MPI_Comm_create).
 * Group A is world rank 0, group B the others; at 1 rank there is no intercommunicator.
 * Not covered, since no process may use what it passed there: a group in which no process
 * named itself the leader (every local_leader out of range: peer_comm and remote_leader are
 * significant at the leader only) cannot tell the other group, which then waits for it.
 * An argument k runs case k alone (to see each one hang without its fix). */
#include "check.h"

static int me, np, in_a, lrank, lsize, only; /* only: one case (argv[1]), 0 = all */
static MPI_Comm local;

/* The error class of `rc`, which must be an error. */
static int err_class(int rc) {
    int cls = MPI_SUCCESS;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
    return cls;
}

/* A working intercommunicator between the groups (tag `tag`): the parents still serve. */
static void good_inter(int tag, MPI_Comm *ic) {
    OK(MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, in_a ? 1 : 0, tag, ic));
    OK(MPI_Comm_set_errhandler(*ic, MPI_ERRORS_RETURN));
    int rsize = -1;
    OK(MPI_Comm_remote_size(*ic, &rsize));
    CHECK(rsize == (in_a ? np - 1 : 1), "remote size %d", rsize);
    OK(MPI_Barrier(*ic));
}

/* A refused MPI_Intercomm_create: an error on this process, no communicator. */
static void refused_create(const char *what, int rc, MPI_Comm ic, int want_class) {
    CHECK(rc != MPI_SUCCESS, "%s: succeeded on world rank %d", what, me);
    CHECK(ic == MPI_COMM_NULL, "%s: a communicator came back", what);
    if (want_class != MPI_SUCCESS)
        CHECK(err_class(rc) == want_class, "%s: error class %d, want %d", what, err_class(rc),
              want_class);
}

#define RUN(k) (only == 0 || only == (k))

static void cases(void);

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    only = argc > 1 ? atoi(argv[1]) : 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    if (np >= 2) cases();
    int rc = summary("inter_errors");
    MPI_Finalize();
    return rc;
}

static void cases(void) {
    in_a = me == 0;
    OK(MPI_Comm_split(MPI_COMM_WORLD, in_a ? 0 : 1, me, &local));
    OK(MPI_Comm_set_errhandler(local, MPI_ERRORS_RETURN));
    MPI_Comm_rank(local, &lrank);
    MPI_Comm_size(local, &lsize);
    int rl = in_a ? 1 : 0; /* the remote leader's world rank */

    /* 1. World rank 2 (in B) names a local leader B does not have, B's leader names itself:
     * MPI_ERR_RANK on world rank 2, an error on every other process. */
    if (RUN(1) && np >= 3) {
        MPI_Comm ic = MPI_COMM_NULL;
        int rc = MPI_Intercomm_create(local, me == 2 ? lsize : 0, MPI_COMM_WORLD, rl, 11, &ic);
        refused_create("bad local_leader on one process of B", rc, ic,
                       me == 2 ? MPI_ERR_RANK : MPI_ERR_ARG);
        /* The same tag again: nothing of the refused call was left behind to be matched. */
        good_inter(11, &ic);
        OK(MPI_Comm_free(&ic));
    }
    /* 2. One process of B passes a negative tag, its leader and group A a valid one:
     * MPI_ERR_TAG on that process, an error on every other. */
    if (RUN(2) && np >= 3) {
        MPI_Comm ic = MPI_COMM_NULL;
        int tag = me == 2 ? -5 : 12;
        int rc = MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, rl, tag, &ic);
        refused_create("a bad tag on one process of B", rc, ic,
                       me == 2 ? MPI_ERR_TAG : MPI_ERR_ARG);
        good_inter(12, &ic);
        OK(MPI_Comm_free(&ic));
    }
    /* 3. The processes of B name different local leaders (both valid ranks). */
    if (RUN(3) && np >= 3) {
        MPI_Comm ic = MPI_COMM_NULL;
        int ll = me == 2 ? 1 : 0;
        int rc = MPI_Intercomm_create(local, ll, MPI_COMM_WORLD, rl, 13, &ic);
        refused_create("inconsistent local_leader in B", rc, ic, MPI_ERR_ARG);
        good_inter(13, &ic);
        OK(MPI_Comm_free(&ic));
    }
    /* 4. MPI_Comm_create on an intercommunicator, the processes of B passing different groups
     * (B's leader its whole local group, world rank 2 the empty group). */
    if (RUN(4) && np >= 3) {
        MPI_Comm ic, c = MPI_COMM_NULL;
        MPI_Group g;
        good_inter(14, &ic);
        if (me == 2)
            g = MPI_GROUP_EMPTY;
        else
            OK(MPI_Comm_group(local, &g));
        int rc = MPI_Comm_create(ic, g, &c);
        CHECK(rc != MPI_SUCCESS && c == MPI_COMM_NULL, "inconsistent groups in B: rc %d", rc);
        CHECK(err_class(rc) == MPI_ERR_ARG, "inconsistent groups: class %d", err_class(rc));
        if (g != MPI_GROUP_EMPTY) OK(MPI_Group_free(&g));
        /* The parent still works, and a consistent create succeeds on it. */
        OK(MPI_Barrier(ic));
        OK(MPI_Comm_group(local, &g));
        OK(MPI_Comm_create(ic, g, &c));
        CHECK(c != MPI_COMM_NULL, "consistent create after the refused one");
        if (c != MPI_COMM_NULL) {
            OK(MPI_Barrier(c));
            OK(MPI_Comm_free(&c));
        }
        OK(MPI_Group_free(&g));
        OK(MPI_Comm_free(&ic));
    }
    /* 5. A calls MPI_Comm_split (color 1, key 0), B MPI_Comm_create with the empty group:
     * B accepts A's two words as a subgroup, A rejects B's one word as the wrong length. */
    if (RUN(5)) {
        MPI_Comm ic, c = MPI_COMM_NULL;
        good_inter(15, &ic);
        int rc = in_a ? MPI_Comm_split(ic, 1, 0, &c) : MPI_Comm_create(ic, MPI_GROUP_EMPTY, &c);
        CHECK(rc != MPI_SUCCESS && c == MPI_COMM_NULL, "split rejected by A: rc %d", rc);
        OK(MPI_Barrier(ic));
        OK(MPI_Comm_split(ic, 0, me, &c));
        CHECK(c != MPI_COMM_NULL, "split after the refused one");
        if (c != MPI_COMM_NULL) OK(MPI_Comm_free(&c));
        OK(MPI_Comm_free(&ic));
    }
    /* 6. A calls MPI_Intercomm_merge (high), B MPI_Comm_create with its local group: B accepts
     * A's one word as an empty subgroup, A's merge rejects B's words as too long. */
    if (RUN(6)) {
        MPI_Comm ic, c = MPI_COMM_NULL;
        MPI_Group g = MPI_GROUP_NULL;
        good_inter(16, &ic);
        if (!in_a) OK(MPI_Comm_group(local, &g));
        int rc = in_a ? MPI_Intercomm_merge(ic, 1, &c) : MPI_Comm_create(ic, g, &c);
        CHECK(rc != MPI_SUCCESS && c == MPI_COMM_NULL, "merge rejected by A: rc %d", rc);
        if (g != MPI_GROUP_NULL) OK(MPI_Group_free(&g));
        OK(MPI_Barrier(ic));
        OK(MPI_Intercomm_merge(ic, in_a, &c));
        int r = -1;
        if (c != MPI_COMM_NULL) {
            MPI_Comm_rank(c, &r);
            OK(MPI_Comm_free(&c));
        }
        CHECK(r == (in_a ? np - 1 : me - 1), "merged rank %d", r);
        OK(MPI_Comm_free(&ic));
    }
    OK(MPI_Comm_free(&local));
}
