/* MPI_Comm_idup / MPI_Comm_idup_with_info: non-blocking (a rank idups while another first
 * does point-to-point or other collectives and waits later), several outstanding, next to
 * blocking constructors, in different orders on different communicators, on an
 * intercommunicator; what the duplicate inherits; and persistent collectives matched by the
 * order of their inits, not of their starts (MPICH's coll/p_order). Bad input under
 * MPI_ERRORS_RETURN. */
#include "check.h"

static int rank, size;

/* The communicator works and is its own matching space: an allreduce gives the size, and a
 * message sent on `c` is not seen on `other`. */
static void works(MPI_Comm c, MPI_Comm other, const char *what) {
    int one = 1, sum = 0, cmp = -1;
    OK(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, c));
    CHECK(sum == size, "%s: allreduce gives %d, size %d", what, sum, size);
    OK(MPI_Comm_compare(c, MPI_COMM_WORLD, &cmp));
    CHECK(cmp == MPI_CONGRUENT, "%s: compare with world %d", what, cmp);
    if (other != MPI_COMM_NULL) {
        int v = 42, got = 0, flag = 1;
        MPI_Request r;
        OK(MPI_Isend(&v, 1, MPI_INT, rank, 77, c, &r));
        OK(MPI_Iprobe(rank, 77, other, &flag, MPI_STATUS_IGNORE));
        CHECK(!flag, "%s: a message on it is seen on another communicator", what);
        OK(MPI_Recv(&got, 1, MPI_INT, rank, 77, c, MPI_STATUS_IGNORE));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        CHECK(got == 42, "%s: got %d", what, got);
    }
}

static int copies;
static int copy_fn(MPI_Comm old, int key, void *extra, void *in, void *out, int *flag) {
    (void) old;
    (void) key;
    (void) extra;
    copies++;
    *(void **) out = (char *) in + 1;
    *flag = 1;
    return MPI_SUCCESS;
}

static int failing_copy(MPI_Comm old, int key, void *extra, void *in, void *out, int *flag) {
    (void) old;
    (void) key;
    (void) extra;
    (void) in;
    (void) out;
    *flag = 0;
    return MPI_ERR_OTHER;
}

/* A copy callback failing fails the call (newcomm is MPI_COMM_NULL, no request); the
 * agreement the members started runs on to its end without a request, and the next idup
 * still works. */
static void failing_copy_callback(void) {
    MPI_Comm parent, dup = MPI_COMM_WORLD;
    MPI_Request r = MPI_REQUEST_NULL;
    int key = MPI_KEYVAL_INVALID, v = 1;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &parent));
    OK(MPI_Comm_set_errhandler(parent, MPI_ERRORS_RETURN));
    OK(MPI_Comm_create_keyval(failing_copy, MPI_COMM_NULL_DELETE_FN, &key, NULL));
    OK(MPI_Comm_set_attr(parent, key, &v));
    int rc = MPI_Comm_idup(parent, &dup, &r);
    CHECK(rc == MPI_ERR_OTHER, "a failing copy callback: %d", rc);
    CHECK(dup == MPI_COMM_NULL, "newcomm is MPI_COMM_NULL");
    CHECK(r == MPI_REQUEST_NULL, "no request");
    OK(MPI_Comm_delete_attr(parent, key));
    OK(MPI_Comm_idup(parent, &dup, &r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    works(dup, parent, "idup after a failed one");
    OK(MPI_Comm_free(&dup));
    OK(MPI_Comm_free(&parent));
    OK(MPI_Comm_free_keyval(&key));
}

/* idup then point-to-point before the wait (MPICH comm/comm_idup): rank 0 receives from
 * every other rank before it calls idup, the others idup then send synchronously. */
static void idup_then_p2p(void) {
    MPI_Comm dup;
    MPI_Request r;
    int buf = -1;
    if (rank == 0) {
        for (int i = 1; i < size; i++) {
            OK(MPI_Recv(&buf, 1, MPI_INT, i, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK(buf == i, "got %d from %d", buf, i);
        }
        OK(MPI_Comm_idup(MPI_COMM_WORLD, &dup, &r));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    } else {
        OK(MPI_Comm_idup(MPI_COMM_WORLD, &dup, &r));
        buf = rank;
        OK(MPI_Ssend(&buf, 1, MPI_INT, 0, 0, MPI_COMM_WORLD));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    }
    CHECK(r == MPI_REQUEST_NULL, "the request is freed");
    works(dup, MPI_COMM_WORLD, "idup then p2p");
    OK(MPI_Comm_free(&dup));
}

/* The agreement advances while a member is blocked elsewhere: rank 1 blocks in a receive
 * that rank 0 satisfies only once its own idup completed. */
static void progress_while_blocked(void) {
    MPI_Comm dup;
    MPI_Request r;
    int v = 0;
    OK(MPI_Comm_idup(MPI_COMM_WORLD, &dup, &r));
    if (rank == 0) {
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        v = 5;
        if (size > 1) OK(MPI_Send(&v, 1, MPI_INT, 1, 9, MPI_COMM_WORLD));
    } else {
        if (rank == 1) {
            OK(MPI_Recv(&v, 1, MPI_INT, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK(v == 5, "got %d", v);
        }
        int flag = 0;
        while (!flag) POLL(MPI_Test(&r, &flag, MPI_STATUS_IGNORE));
    }
    works(dup, MPI_COMM_WORLD, "progress while blocked");
    OK(MPI_Comm_free(&dup));
}

/* Several idups outstanding, mixed with non-blocking collectives, a blocking dup and split
 * made while they are pending; each duplicate distinct. */
static void outstanding_and_blocking(void) {
    enum { N = 4 };
    MPI_Comm dups[N], blocking, half;
    MPI_Request rs[2 * N];
    int in[N], out[N];
    for (int i = 0; i < N; i++) {
        in[i] = i + 1;
        OK(MPI_Iallreduce(&in[i], &out[i], 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &rs[2 * i]));
        OK(MPI_Comm_idup(MPI_COMM_WORLD, &dups[i], &rs[2 * i + 1]));
    }
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &blocking));
    OK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half));
    works(blocking, MPI_COMM_WORLD, "blocking dup next to idups");
    OK(MPI_Waitall(2 * N, rs, MPI_STATUSES_IGNORE));
    for (int i = 0; i < N; i++) {
        CHECK(out[i] == (i + 1) * size, "iallreduce %d gives %d", i, out[i]);
        works(dups[i], i ? dups[i - 1] : blocking, "outstanding idup");
        int cmp = -1;
        OK(MPI_Comm_compare(dups[i], blocking, &cmp));
        CHECK(cmp == MPI_CONGRUENT, "idup %d vs blocking dup: %d", i, cmp);
    }
    /* The blocking dup and the idups never share a matching space. */
    for (int i = 0; i < N; i++) works(blocking, dups[i], "blocking dup apart");
    int hsize = 0, hsum = 0, one = 1;
    OK(MPI_Comm_size(half, &hsize));
    OK(MPI_Allreduce(&one, &hsum, 1, MPI_INT, MPI_SUM, half));
    CHECK(hsum == hsize, "split next to idups: %d of %d", hsum, hsize);
    for (int i = 0; i < N; i++) OK(MPI_Comm_free(&dups[i]));
    OK(MPI_Comm_free(&blocking));
    OK(MPI_Comm_free(&half));
}

/* Two communicators idup'ed in opposite orders on even and odd ranks (MPICH
 * comm/idup_with_info), twice with the info freed before completion. */
static void opposite_orders(void) {
    MPI_Comm a, b, da, db;
    MPI_Request rs[2];
    MPI_Info info;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &a));
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &b));
    OK(MPI_Info_create(&info));
    OK(MPI_Info_set(info, "mpi_assert_no_any_tag", "true"));
    OK(MPI_Info_set(info, "not_a_hint", "x"));
    for (int round = 0; round < 3; round++) {
        if (rank % 2 == 0) {
            OK(MPI_Comm_idup_with_info(a, info, &da, &rs[0]));
            OK(MPI_Comm_idup_with_info(b, info, &db, &rs[1]));
        } else {
            OK(MPI_Comm_idup_with_info(b, info, &db, &rs[0]));
            OK(MPI_Comm_idup_with_info(a, info, &da, &rs[1]));
        }
        if (round == 2) OK(MPI_Info_free(&info));
        OK(MPI_Waitall(2, rs, MPI_STATUSES_IGNORE));
        works(da, db, "opposite orders (a)");
        works(db, da, "opposite orders (b)");
        MPI_Info used;
        char v[MPI_MAX_INFO_VAL + 1];
        int flag = 0, nkeys = -1;
        OK(MPI_Comm_get_info(da, &used));
        OK(MPI_Info_get(used, "mpi_assert_no_any_tag", MPI_MAX_INFO_VAL, v, &flag));
        CHECK(flag && strcmp(v, "true") == 0, "the hint is kept");
        OK(MPI_Info_get_nkeys(used, &nkeys));
        CHECK(nkeys == 1, "only the hint MPI defines is kept: %d keys", nkeys);
        OK(MPI_Info_free(&used));
        OK(MPI_Comm_free(&da));
        OK(MPI_Comm_free(&db));
    }
    OK(MPI_Comm_free(&a));
    OK(MPI_Comm_free(&b));
}

/* What the duplicate inherits: the error handler, the attributes copy callbacks copy (at
 * the call), the parent's hints; and not its name. */
static void inherits(void) {
    MPI_Comm parent, dup;
    MPI_Request r;
    int key = MPI_KEYVAL_INVALID, flag = 0;
    static char value[4];
    void *got = NULL;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &parent));
    OK(MPI_Comm_set_errhandler(parent, MPI_ERRORS_RETURN));
    OK(MPI_Comm_set_name(parent, "parent"));
    OK(MPI_Comm_create_keyval(copy_fn, MPI_COMM_NULL_DELETE_FN, &key, NULL));
    OK(MPI_Comm_set_attr(parent, key, value));
    copies = 0;
    OK(MPI_Comm_idup(parent, &dup, &r));
    CHECK(copies == 1, "the copy callback ran at the call: %d", copies);
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    OK(MPI_Comm_get_attr(dup, key, &got, &flag));
    CHECK(flag && got == value + 1, "the copied attribute");
    MPI_Errhandler eh;
    OK(MPI_Comm_get_errhandler(dup, &eh));
    CHECK(eh == MPI_ERRORS_RETURN, "the error handler is inherited");
    OK(MPI_Errhandler_free(&eh));
    char name[MPI_MAX_OBJECT_NAME];
    int len = -1;
    OK(MPI_Comm_get_name(dup, name, &len));
    CHECK(len == 0, "the name is not inherited: \"%s\"", name);
    /* An error on the duplicate goes to its (inherited) handler and returns. */
    int v = 0;
    CHECK(MPI_Send(&v, 1, MPI_INT, size, 0, dup) == MPI_ERR_RANK, "bad rank on the dup");
    OK(MPI_Comm_free(&dup));
    OK(MPI_Comm_free(&parent));
    OK(MPI_Comm_free_keyval(&key));
}

/* An intercommunicator (even and odd ranks) duplicated without blocking: rank 0 of each
 * group receives from the other group's other ranks first (MPICH comm/comm_idup). */
static void intercomm(void) {
    if (size < 2) return;
    MPI_Comm local, ic, dup;
    MPI_Request r;
    int lrank, rsize, buf = 0;
    OK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &local));
    OK(MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, rank == 0 ? 1 : 0, 12, &ic));
    OK(MPI_Comm_rank(ic, &lrank));
    OK(MPI_Comm_remote_size(ic, &rsize));
    if (lrank == 0) {
        for (int i = 1; i < rsize; i++)
            OK(MPI_Recv(&buf, 1, MPI_INT, i, 0, ic, MPI_STATUS_IGNORE));
        OK(MPI_Comm_idup(ic, &dup, &r));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    } else {
        OK(MPI_Comm_idup(ic, &dup, &r));
        OK(MPI_Ssend(&lrank, 1, MPI_INT, 0, 0, ic));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    }
    int inter = 0, rs = -1, sum = -1;
    OK(MPI_Comm_test_inter(dup, &inter));
    OK(MPI_Comm_remote_size(dup, &rs));
    CHECK(inter && rs == rsize, "the duplicate is an intercommunicator (%d, %d)", inter, rs);
    OK(MPI_Allreduce(&lrank, &sum, 1, MPI_INT, MPI_SUM, dup));
    CHECK(sum == rsize * (rsize - 1) / 2, "inter allreduce on the dup gives %d", sum);
    /* Apart from the parent: a message to remote rank 0 on the dup is not seen on ic. */
    int flag = 1, v = 3;
    if (lrank == 0) OK(MPI_Send(&v, 1, MPI_INT, 0, 5, dup));
    OK(MPI_Barrier(dup));
    if (lrank == 0) {
        OK(MPI_Iprobe(0, 5, ic, &flag, MPI_STATUS_IGNORE));
        CHECK(!flag, "the dup's message is seen on the parent");
        OK(MPI_Recv(&v, 1, MPI_INT, 0, 5, dup, MPI_STATUS_IGNORE));
    }
    OK(MPI_Comm_free(&dup));
    OK(MPI_Comm_free(&ic));
    OK(MPI_Comm_free(&local));
}

/* Persistent collectives matched by their inits: rank 0 starts the broadcast first, the
 * others the barrier first (MPICH coll/p_order), several times, with ordinary non-blocking
 * collectives started between. */
static void persistent_order(void) {
    MPI_Request rs[3];
    int v = 0, x = 0, y = 0;
    OK(MPI_Bcast_init(&v, 1, MPI_INT, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &rs[0]));
    OK(MPI_Barrier_init(MPI_COMM_WORLD, MPI_INFO_NULL, &rs[1]));
    for (int it = 0; it < 5; it++) {
        v = rank == 0 ? 100 + it : -1;
        x = rank;
        if (rank == 0) {
            OK(MPI_Start(&rs[0]));
            OK(MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &rs[2]));
            OK(MPI_Start(&rs[1]));
        } else {
            OK(MPI_Start(&rs[1]));
            OK(MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &rs[2]));
            OK(MPI_Start(&rs[0]));
        }
        OK(MPI_Waitall(3, rs, MPI_STATUSES_IGNORE));
        CHECK(v == 100 + it, "iteration %d: bcast gives %d", it, v);
        CHECK(y == size - 1, "iteration %d: iallreduce gives %d", it, y);
        CHECK(rs[0] != MPI_REQUEST_NULL && rs[1] != MPI_REQUEST_NULL, "persistent stay");
    }
    /* Started together by Startall in opposite array orders. */
    MPI_Request pair[2];
    for (int it = 0; it < 3; it++) {
        v = rank == 0 ? 7 * it : -1;
        pair[0] = rs[rank == 0 ? 0 : 1];
        pair[1] = rs[rank == 0 ? 1 : 0];
        OK(MPI_Startall(2, pair));
        OK(MPI_Waitall(2, pair, MPI_STATUSES_IGNORE));
        CHECK(v == 7 * it, "startall %d: bcast gives %d", it, v);
    }
    OK(MPI_Request_free(&rs[0]));
    OK(MPI_Request_free(&rs[1]));
}

static void bad_input(void) {
    MPI_Comm dup = MPI_COMM_NULL;
    MPI_Request r = MPI_REQUEST_NULL;
    MPI_Info bad = (MPI_Info) (intptr_t) 0x7777;
    CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &dup, NULL) == MPI_ERR_ARG, "NULL request");
    CHECK(MPI_Comm_idup(MPI_COMM_WORLD, NULL, &r) == MPI_ERR_ARG, "NULL newcomm");
    CHECK(MPI_Comm_idup(MPI_COMM_NULL, &dup, &r) == MPI_ERR_COMM, "MPI_COMM_NULL");
    CHECK(MPI_Comm_idup_with_info(MPI_COMM_WORLD, bad, &dup, &r) == MPI_ERR_INFO, "bad info");
    CHECK(r == MPI_REQUEST_NULL, "no request made by a refused call");
    /* A running idup cannot be freed (its communicator is handed out at completion). */
    OK(MPI_Comm_idup(MPI_COMM_WORLD, &dup, &r));
    int rc = MPI_Request_free(&r);
    CHECK(rc == MPI_ERR_REQUEST, "request free of a running idup: %d", rc);
    {
        char msg[MPI_MAX_ERROR_STRING];
        int mlen = 0;
        OK(MPI_Error_string(rc, msg, &mlen));
        CHECK(strstr(msg, "MPI_Comm_idup") != NULL, "the refusal names the idup: %s", msg);
    }
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    works(dup, MPI_COMM_WORLD, "idup after a refused free");
    OK(MPI_Comm_free(&dup));
    CHECK(MPI_Barrier_init(MPI_COMM_WORLD, MPI_INFO_NULL, NULL) == MPI_ERR_ARG, "NULL request");
    CHECK(MPI_Bcast_init(&rc, 1, MPI_INT, size, MPI_COMM_WORLD, MPI_INFO_NULL, &r) == MPI_ERR_ROOT,
          "bad root");
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    idup_then_p2p();
    progress_while_blocked();
    outstanding_and_blocking();
    opposite_orders();
    inherits();
    failing_copy_callback();
    intercomm();
    persistent_order();
    bad_input();
    /* Every rank got here: nothing is left running. */
    OK(MPI_Barrier(MPI_COMM_WORLD));
    int rc = summary("idup");
    MPI_Finalize();
    return rc;
}
