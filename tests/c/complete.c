/* The completion calls on windows of point-to-point requests, with statuses (OSU's
 * bandwidth tests call MPI_Waitall with an array of statuses): each status's source, tag,
 * count and MPI_ERROR after MPI_Waitall (requests of the fast paths alone, and mixed with
 * MPI_REQUEST_NULL, MPI_PROC_NULL and derived-datatype requests), MPI_Testall completing a
 * window in two halves (the first half's statuses kept while the second is outstanding) and
 * a window mixed with MPI_REQUEST_NULL and MPI_PROC_NULL (every status written),
 * MPI_Waitsome/Testsome/Waitany/Testany/Wait/Test with and without statuses, and errors:
 * truncation (MPI_ERR_IN_STATUS, each status's MPI_ERROR), stale handles, bad counts. */
#include "check.h"

#define W 32

static int me, np, left, right;

/* Message i of a window: i + 1 ints, tag base + i, values from its sender and index. */
static void fill(int *b, int i, int from) {
    for (int k = 0; k <= i; k++) b[k] = from * 1000 + i * 10 + k;
}

static int arrived(const int *b, int i, int from) {
    for (int k = 0; k <= i; k++)
        if (b[k] != from * 1000 + i * 10 + k) return 0;
    return 1;
}

static int out[W][W], in[W][W];

/* Post W receives (any source, any tag) and W sends; the receive statuses are checked. */
static void post_window(MPI_Request *req, int base) {
    for (int i = 0; i < W; i++) {
        memset(in[i], 0, sizeof in[i]);
        OK(MPI_Irecv(in[i], W, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &req[i]));
    }
    for (int i = 0; i < W; i++) {
        fill(out[i], i, me);
        OK(MPI_Isend(out[i], i + 1, MPI_INT, right, base + i, MPI_COMM_WORLD, &req[W + i]));
    }
}

/* The status of receive i of a window with tags from `base`. */
static void check_recv(const MPI_Status *st, int i, int base, const char *how) {
    int count = -1;
    MPI_Get_count(st, MPI_INT, &count);
    CHECK(st->MPI_SOURCE == left && st->MPI_TAG == base + i && count == i + 1,
          "%s: receive %d: source %d tag %d count %d", how, i, st->MPI_SOURCE, st->MPI_TAG,
          count);
    CHECK(arrived(in[i], i, left), "%s: receive %d: data", how, i);
}

static void waitall_statuses(void) {
    MPI_Request req[2 * W + 1];
    MPI_Status st[2 * W + 1];
    for (int round = 0; round < 3; round++) {
        post_window(req, 100);
        req[2 * W] = MPI_REQUEST_NULL;
        for (int i = 0; i <= 2 * W; i++) st[i].MPI_ERROR = -1;
        OK(MPI_Waitall(2 * W + 1, req, st));
        for (int i = 0; i < W; i++) {
            check_recv(&st[i], i, 100, "waitall");
            CHECK(st[i].MPI_ERROR == MPI_SUCCESS, "waitall: receive %d error %d", i,
                  st[i].MPI_ERROR);
        }
        for (int i = 0; i <= 2 * W; i++)
            CHECK(req[i] == MPI_REQUEST_NULL, "waitall: request %d freed", i);
        /* An empty status for the null request. */
        CHECK(st[2 * W].MPI_SOURCE == MPI_ANY_SOURCE && st[2 * W].MPI_TAG == MPI_ANY_TAG,
              "waitall: null request's status %d %d", st[2 * W].MPI_SOURCE, st[2 * W].MPI_TAG);
    }
    /* Sends alone (done as they started, or not), and a window waited twice. */
    for (int i = 0; i < W; i++) {
        fill(out[i], i, me);
        OK(MPI_Isend(out[i], i + 1, MPI_INT, right, 150 + i, MPI_COMM_WORLD, &req[i]));
    }
    OK(MPI_Waitall(W, req, st));
    for (int i = 0; i < W; i++) {
        OK(MPI_Recv(in[i], W, MPI_INT, left, 150 + i, MPI_COMM_WORLD, &st[i]));
        check_recv(&st[i], i, 150, "sends alone");
    }
    OK(MPI_Waitall(W, req, st));
}

/* Requests of the general paths in the same array: a derived datatype, MPI_PROC_NULL. */
static void waitall_mixed(void) {
    MPI_Datatype pair;
    OK(MPI_Type_contiguous(2, MPI_INT, &pair));
    OK(MPI_Type_commit(&pair));
    MPI_Request req[2 * W + 2];
    MPI_Status st[2 * W + 2];
    post_window(req, 300);
    int pin[2] = {0, 0}, pout[2] = {me, -me};
    OK(MPI_Irecv(pin, 1, pair, left, 399, MPI_COMM_WORLD, &req[2 * W]));
    OK(MPI_Irecv(NULL, 0, MPI_INT, MPI_PROC_NULL, 7, MPI_COMM_WORLD, &req[2 * W + 1]));
    OK(MPI_Send(pout, 1, pair, right, 399, MPI_COMM_WORLD));
    OK(MPI_Waitall(2 * W + 2, req, st));
    for (int i = 0; i < W; i++) check_recv(&st[i], i, 300, "mixed");
    int count = -1;
    MPI_Get_count(&st[2 * W], pair, &count);
    CHECK(count == 1 && st[2 * W].MPI_SOURCE == left && pin[0] == left && pin[1] == -left,
          "mixed: derived receive count %d source %d data %d %d", count, st[2 * W].MPI_SOURCE,
          pin[0], pin[1]);
    MPI_Get_count(&st[2 * W + 1], MPI_INT, &count);
    CHECK(st[2 * W + 1].MPI_SOURCE == MPI_PROC_NULL && st[2 * W + 1].MPI_TAG == MPI_ANY_TAG &&
              count == 0,
          "mixed: proc null status %d %d %d", st[2 * W + 1].MPI_SOURCE, st[2 * W + 1].MPI_TAG,
          count);
    OK(MPI_Type_free(&pair));
}

/* MPI_Testall on a window whose second half is sent only once the receiver says so: the
 * tests before find part of the window complete (flag 0: the completed receives keep their
 * statuses), the last the whole window (every status). */
static void testall_halves(void) {
    MPI_Request req[W], sreq[W], tok[2];
    MPI_Status st[W];
    for (int i = 0; i < W; i++) {
        memset(in[i], 0, sizeof in[i]);
        OK(MPI_Irecv(in[i], W, MPI_INT, left, 500 + i, MPI_COMM_WORLD, &req[i]));
    }
    for (int i = 0; i < W / 2; i++) {
        fill(out[i], i, me);
        OK(MPI_Isend(out[i], i + 1, MPI_INT, right, 500 + i, MPI_COMM_WORLD, &sreq[i]));
    }
    /* A marker after the first half: once it is here, so (in practice) is the first half. */
    int marker = 0, token = 1;
    OK(MPI_Isend(&token, 1, MPI_INT, right, 598, MPI_COMM_WORLD, &tok[0]));
    OK(MPI_Recv(&marker, 1, MPI_INT, left, 598, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    OK(MPI_Wait(&tok[0], MPI_STATUS_IGNORE));
    int flag = 1;
    for (int k = 0; k < 10; k++) {
        POLL(MPI_Testall(W, req, &flag, st));
        CHECK(!flag, "testall: complete before the second half was sent");
    }
    for (int i = 0; i < W; i++) CHECK(req[i] != MPI_REQUEST_NULL, "testall: %d kept", i);
    /* The go-ahead to the left neighbour, who sends this rank its second half. */
    OK(MPI_Isend(&token, 1, MPI_INT, left, 599, MPI_COMM_WORLD, &tok[0]));
    OK(MPI_Irecv(&marker, 1, MPI_INT, right, 599, MPI_COMM_WORLD, &tok[1]));
    OK(MPI_Waitall(2, tok, MPI_STATUSES_IGNORE));
    for (int i = W / 2; i < W; i++) {
        fill(out[i], i, me);
        OK(MPI_Isend(out[i], i + 1, MPI_INT, right, 500 + i, MPI_COMM_WORLD, &sreq[i]));
    }
    for (long k = 0; !flag && k < 100000000; k++) POLL(MPI_Testall(W, req, &flag, st));
    CHECK(flag, "testall: the window completed");
    for (int i = 0; i < W; i++) {
        check_recv(&st[i], i, 500, "testall");
        CHECK(req[i] == MPI_REQUEST_NULL, "testall: request %d freed", i);
    }
    OK(MPI_Waitall(W, sreq, MPI_STATUSES_IGNORE));
}

/* MPI_Testall over a window of sends and receives with MPI_REQUEST_NULL and a receive from
 * MPI_PROC_NULL among them, with statuses: once the flag is set, every status is written (the
 * null request's empty, the MPI_PROC_NULL receive's with source MPI_PROC_NULL, each receive's
 * own, each send's written) and every handle is MPI_REQUEST_NULL. */
static void testall_mixed(void) {
    MPI_Request req[2 * W + 2];
    MPI_Status st[2 * W + 2];
    for (int round = 0; round < 3; round++) {
        post_window(req, 700);
        req[2 * W] = MPI_REQUEST_NULL;
        OK(MPI_Irecv(NULL, 0, MPI_INT, MPI_PROC_NULL, 7, MPI_COMM_WORLD, &req[2 * W + 1]));
        for (int i = 0; i < 2 * W + 2; i++) {
            st[i].MPI_SOURCE = -5;
            st[i].MPI_TAG = -5;
            st[i].MPI_ERROR = -5;
        }
        int flag = 0;
        for (long k = 0; !flag && k < 100000000; k++) POLL(MPI_Testall(2 * W + 2, req, &flag, st));
        CHECK(flag, "testall mixed: the window completed");
        for (int i = 0; i < W; i++) check_recv(&st[i], i, 700, "testall mixed");
        for (int i = 0; i < W; i++)
            CHECK(st[W + i].MPI_ERROR != -5 || st[W + i].MPI_SOURCE != -5,
                  "testall mixed: send %d: no status written", i);
        CHECK(st[2 * W].MPI_SOURCE == MPI_ANY_SOURCE && st[2 * W].MPI_TAG == MPI_ANY_TAG,
              "testall mixed: the null request's status: source %d tag %d",
              st[2 * W].MPI_SOURCE, st[2 * W].MPI_TAG);
        CHECK(st[2 * W + 1].MPI_SOURCE == MPI_PROC_NULL && st[2 * W + 1].MPI_TAG == MPI_ANY_TAG,
              "testall mixed: the MPI_PROC_NULL receive's status: source %d tag %d",
              st[2 * W + 1].MPI_SOURCE, st[2 * W + 1].MPI_TAG);
        for (int i = 0; i < 2 * W + 2; i++)
            CHECK(req[i] == MPI_REQUEST_NULL, "testall mixed: request %d freed", i);
    }
}

/* The one-at-a-time calls over a window, with statuses or without. */
static void some_any_one(void) {
    MPI_Request req[2 * W];
    MPI_Status st[2 * W];
    int idx[2 * W];
    for (int ignore = 0; ignore < 2; ignore++) {
        /* Waitsome until every request is done. */
        post_window(req, 600);
        int done = 0, seen[2 * W] = {0};
        while (done < 2 * W) {
            int n = -1;
            OK(MPI_Waitsome(2 * W, req, &n, idx, ignore ? MPI_STATUSES_IGNORE : st));
            CHECK(n > 0, "waitsome: %d done", n);
            if (n <= 0) break;
            for (int k = 0; k < n; k++) {
                int i = idx[k];
                CHECK(i >= 0 && i < 2 * W && !seen[i], "waitsome: index %d", i);
                seen[i] = 1;
                CHECK(req[i] == MPI_REQUEST_NULL, "waitsome: request %d freed", i);
                if (!ignore && i < W) check_recv(&st[k], i, 600, "waitsome");
            }
            done += n;
        }
        int n = 0;
        OK(MPI_Waitsome(2 * W, req, &n, idx, st));
        CHECK(n == MPI_UNDEFINED, "waitsome: all inactive gives MPI_UNDEFINED (%d)", n);

        /* Testsome. */
        post_window(req, 700);
        done = 0;
        for (long k = 0; done < 2 * W && k < 100000000; k++) {
            POLL(MPI_Testsome(2 * W, req, &n, idx, ignore ? MPI_STATUSES_IGNORE : st));
            for (int j = 0; j < n; j++)
                if (!ignore && idx[j] < W) check_recv(&st[j], idx[j], 700, "testsome");
            done += n;
        }
        CHECK(done == 2 * W, "testsome: %d done", done);

        /* Waitany. */
        post_window(req, 800);
        for (int k = 0; k < 2 * W; k++) {
            int i = -1;
            MPI_Status one;
            OK(MPI_Waitany(2 * W, req, &i, ignore ? MPI_STATUS_IGNORE : &one));
            CHECK(i >= 0 && i < 2 * W && req[i] == MPI_REQUEST_NULL, "waitany: index %d", i);
            if (!ignore && i >= 0 && i < W) check_recv(&one, i, 800, "waitany");
        }
        int i = 0;
        OK(MPI_Waitany(2 * W, req, &i, st));
        CHECK(i == MPI_UNDEFINED, "waitany: all inactive gives MPI_UNDEFINED (%d)", i);

        /* Testany. */
        post_window(req, 900);
        done = 0;
        for (long k = 0; done < 2 * W && k < 100000000; k++) {
            int flag = 0;
            MPI_Status one;
            POLL(MPI_Testany(2 * W, req, &i, &flag, ignore ? MPI_STATUS_IGNORE : &one));
            if (flag && i != MPI_UNDEFINED) {
                if (!ignore && i < W) check_recv(&one, i, 900, "testany");
                done++;
            }
        }
        CHECK(done == 2 * W, "testany: %d done", done);

        /* Test on each in turn, then Wait on each. */
        post_window(req, 1000);
        for (int j = 0; j < 2 * W; j++) {
            int flag = 0;
            MPI_Status one;
            for (long k = 0; !flag && k < 100000000; k++)
                POLL(MPI_Test(&req[j], &flag, ignore ? MPI_STATUS_IGNORE : &one));
            CHECK(flag && req[j] == MPI_REQUEST_NULL, "test: request %d", j);
            if (!ignore && j < W) check_recv(&one, j, 1000, "test");
        }
        post_window(req, 1100);
        for (int j = 2 * W - 1; j >= 0; j--) {
            MPI_Status one;
            OK(MPI_Wait(&req[j], ignore ? MPI_STATUS_IGNORE : &one));
            CHECK(req[j] == MPI_REQUEST_NULL, "wait: request %d", j);
            if (!ignore && j < W) check_recv(&one, j, 1100, "wait");
        }
    }
}

/* Errors under MPI_ERRORS_RETURN. */
static void errors(void) {
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    /* A truncated receive in a window: MPI_ERR_IN_STATUS, MPI_ERR_TRUNCATE in its status and
     * MPI_SUCCESS in the others'. */
    MPI_Request req[4];
    MPI_Status st[4];
    int small = -1, big[2] = {0, 0}, two[2] = {me, me + 1}, one = me;
    OK(MPI_Irecv(&small, 1, MPI_INT, left, 1200, MPI_COMM_WORLD, &req[0]));
    OK(MPI_Irecv(big, 2, MPI_INT, left, 1201, MPI_COMM_WORLD, &req[1]));
    OK(MPI_Isend(two, 2, MPI_INT, right, 1200, MPI_COMM_WORLD, &req[2]));
    OK(MPI_Isend(&one, 1, MPI_INT, right, 1201, MPI_COMM_WORLD, &req[3]));
    for (int i = 0; i < 4; i++) st[i].MPI_ERROR = -1;
    int rc = MPI_Waitall(4, req, st);
    CHECK(rc == MPI_ERR_IN_STATUS, "truncation: Waitall gives %d", rc);
    CHECK(st[0].MPI_ERROR == MPI_ERR_TRUNCATE, "truncation: status error %d", st[0].MPI_ERROR);
    CHECK(st[1].MPI_ERROR == MPI_SUCCESS && big[0] == left, "others: %d %d", st[1].MPI_ERROR,
          big[0]);
    for (int i = 0; i < 4; i++) CHECK(req[i] == MPI_REQUEST_NULL, "truncation: %d freed", i);
    /* The same with MPI_Wait and MPI_Test. */
    OK(MPI_Irecv(&small, 1, MPI_INT, left, 1202, MPI_COMM_WORLD, &req[0]));
    OK(MPI_Isend(two, 2, MPI_INT, right, 1202, MPI_COMM_WORLD, &req[1]));
    rc = MPI_Wait(&req[0], &st[0]);
    CHECK(rc == MPI_ERR_TRUNCATE && req[0] == MPI_REQUEST_NULL, "truncation: Wait gives %d", rc);
    OK(MPI_Wait(&req[1], MPI_STATUS_IGNORE));
    OK(MPI_Irecv(&small, 1, MPI_INT, left, 1203, MPI_COMM_WORLD, &req[0]));
    OK(MPI_Isend(two, 2, MPI_INT, right, 1203, MPI_COMM_WORLD, &req[1]));
    int flag = 0;
    for (long k = 0; !flag && k < 100000000; k++) {
        rc = MPI_Test(&req[0], &flag, &st[0]);
        if (rc != MPI_SUCCESS) break;
    }
    CHECK(rc == MPI_ERR_TRUNCATE && flag, "truncation: Test gives %d", rc);
    OK(MPI_Wait(&req[1], MPI_STATUS_IGNORE));
    /* The same with MPI_Testall, with statuses and without: flag 1 once both completed,
     * MPI_ERR_IN_STATUS, MPI_ERR_TRUNCATE in the truncated receive's status, both freed. */
    for (int ignore = 0; ignore < 2; ignore++) {
        OK(MPI_Irecv(&small, 1, MPI_INT, left, 1206, MPI_COMM_WORLD, &req[0]));
        OK(MPI_Irecv(big, 2, MPI_INT, left, 1207, MPI_COMM_WORLD, &req[1]));
        OK(MPI_Isend(two, 2, MPI_INT, right, 1206, MPI_COMM_WORLD, &req[2]));
        OK(MPI_Isend(&one, 1, MPI_INT, right, 1207, MPI_COMM_WORLD, &req[3]));
        for (int i = 0; i < 4; i++) st[i].MPI_ERROR = -1;
        flag = 0;
        for (long k = 0; !flag && k < 100000000; k++) {
            rc = MPI_Testall(4, req, &flag, ignore ? MPI_STATUSES_IGNORE : st);
            if (rc != MPI_SUCCESS) break;
        }
        CHECK(rc == MPI_ERR_IN_STATUS && flag, "truncation: Testall gives %d flag %d", rc, flag);
        if (!ignore) {
            CHECK(st[0].MPI_ERROR == MPI_ERR_TRUNCATE && st[1].MPI_ERROR == MPI_SUCCESS &&
                      st[1].MPI_SOURCE == left && st[1].MPI_TAG == 1207,
                  "truncation: Testall statuses %d %d (source %d tag %d)", st[0].MPI_ERROR,
                  st[1].MPI_ERROR, st[1].MPI_SOURCE, st[1].MPI_TAG);
        }
        for (int i = 0; i < 4; i++) CHECK(req[i] == MPI_REQUEST_NULL, "Testall: %d freed", i);
    }
    /* MPI_Waitall over a persistent receive (a general request: it stays, inactive) between
     * a truncated receive and a send: the statuses of all three, MPI_ERR_IN_STATUS. */
    MPI_Request pers;
    OK(MPI_Recv_init(big, 2, MPI_INT, left, 1209, MPI_COMM_WORLD, &pers));
    OK(MPI_Start(&pers));
    OK(MPI_Irecv(&small, 1, MPI_INT, left, 1208, MPI_COMM_WORLD, &req[0]));
    req[1] = pers;
    OK(MPI_Isend(two, 2, MPI_INT, right, 1208, MPI_COMM_WORLD, &req[2]));
    OK(MPI_Send(two, 2, MPI_INT, right, 1209, MPI_COMM_WORLD));
    for (int i = 0; i < 3; i++) st[i].MPI_ERROR = -1;
    rc = MPI_Waitall(3, req, st);
    int pcount = -1;
    MPI_Get_count(&st[1], MPI_INT, &pcount);
    CHECK(rc == MPI_ERR_IN_STATUS && st[0].MPI_ERROR == MPI_ERR_TRUNCATE &&
              st[1].MPI_ERROR == MPI_SUCCESS && st[1].MPI_TAG == 1209 && pcount == 2 &&
              st[2].MPI_ERROR == MPI_SUCCESS,
          "persistent in Waitall: %d, errors %d %d %d, tag %d count %d", rc, st[0].MPI_ERROR,
          st[1].MPI_ERROR, st[2].MPI_ERROR, st[1].MPI_TAG, pcount);
    CHECK(req[0] == MPI_REQUEST_NULL && req[1] == pers && req[2] == MPI_REQUEST_NULL,
          "persistent in Waitall: the persistent request stays, the others are freed");
    OK(MPI_Request_free(&pers));
    /* A stale handle (its request completed) next to a live one: refused, the live one
     * still completes. */
    MPI_Request stale;
    OK(MPI_Isend(&one, 1, MPI_INT, right, 1204, MPI_COMM_WORLD, &stale));
    MPI_Request keep = stale;
    OK(MPI_Wait(&stale, MPI_STATUS_IGNORE));
    OK(MPI_Recv(&small, 1, MPI_INT, left, 1204, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    OK(MPI_Irecv(&small, 1, MPI_INT, left, 1205, MPI_COMM_WORLD, &req[0]));
    OK(MPI_Send(&one, 1, MPI_INT, right, 1205, MPI_COMM_WORLD));
    req[1] = keep;
    rc = MPI_Waitall(2, req, st);
    CHECK(rc == MPI_ERR_IN_STATUS && st[1].MPI_ERROR == MPI_ERR_REQUEST,
          "stale handle: Waitall gives %d, status %d", rc, st[1].MPI_ERROR);
    CHECK(req[0] == MPI_REQUEST_NULL && small == left, "stale handle: the other completed");
    int outn = 0, dummy_idx[1];
    rc = MPI_Waitall(-1, req, st);
    CHECK(rc == MPI_ERR_COUNT, "negative count: %d", rc);
    rc = MPI_Waitall(2, NULL, st);
    CHECK(rc == MPI_ERR_ARG, "NULL array: %d", rc);
    rc = MPI_Testall(1, &keep, &flag, st);
    CHECK(rc == MPI_ERR_IN_STATUS || rc == MPI_ERR_REQUEST, "Testall on a stale handle: %d", rc);
    rc = MPI_Waitsome(1, &keep, &outn, dummy_idx, st);
    CHECK(rc == MPI_ERR_REQUEST, "Waitsome on a stale handle: %d", rc);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
}

/* Waitany and Testany answer the lowest completed index (MPI allows any; MPICH and Open MPI
 * answer the lowest, and programs rely on it: mpi4py's test_p2p_obj), whatever an earlier
 * call on another array found. */
static void any_lowest_first(void) {
    int v[3] = {0, 0, 0}, one = 1, idx = -1, flag = 0;
    MPI_Request req[3];
    /* An array whose only completed request is the middle one. */
    OK(MPI_Irecv(&v[0], 1, MPI_INT, left, 1301, MPI_COMM_WORLD, &req[0]));
    OK(MPI_Irecv(&v[1], 1, MPI_INT, left, 1302, MPI_COMM_WORLD, &req[1]));
    OK(MPI_Irecv(&v[2], 1, MPI_INT, left, 1303, MPI_COMM_WORLD, &req[2]));
    OK(MPI_Send(&one, 1, MPI_INT, right, 1302, MPI_COMM_WORLD));
    OK(MPI_Waitany(3, req, &idx, MPI_STATUS_IGNORE));
    CHECK(idx == 1, "waitany: the one completed request is index 1, got %d", idx);
    /* Nobody sends the others before every rank found its middle one. */
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Send(&one, 1, MPI_INT, right, 1301, MPI_COMM_WORLD));
    OK(MPI_Send(&one, 1, MPI_INT, right, 1303, MPI_COMM_WORLD));
    OK(MPI_Waitall(3, req, MPI_STATUSES_IGNORE));
    /* A new array, every request completed: index 0 first, then 1, then 2. */
    for (int i = 0; i < 3; i++)
        OK(MPI_Irecv(&v[i], 1, MPI_INT, left, 1310 + i, MPI_COMM_WORLD, &req[i]));
    for (int i = 0; i < 3; i++) OK(MPI_Send(&one, 1, MPI_INT, right, 1310 + i, MPI_COMM_WORLD));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    do OK(MPI_Testany(3, req, &idx, &flag, MPI_STATUS_IGNORE));
    while (!flag);
    CHECK(idx == 0, "testany: lowest completed index 0, got %d", idx);
    OK(MPI_Waitany(3, req, &idx, MPI_STATUS_IGNORE));
    CHECK(idx == 1, "waitany: lowest completed index 1, got %d", idx);
    OK(MPI_Waitany(3, req, &idx, MPI_STATUS_IGNORE));
    CHECK(idx == 2, "waitany: lowest completed index 2, got %d", idx);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    right = (me + 1) % np;
    left = (me + np - 1) % np;
    waitall_statuses();
    waitall_mixed();
    testall_halves();
    testall_mixed();
    some_any_one();
    any_lowest_first();
    errors();
    int rc = summary("complete");
    MPI_Finalize();
    return rc;
}
