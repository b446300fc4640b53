/* Point-to-point extras: matched probes (Mprobe/Improbe/Mrecv/Imrecv, eager and
 * rendezvous sizes, a matched message not stolen by a later wildcard receive,
 * MPI_MESSAGE_NO_PROC), Isendrecv(_replace) rings, the large-count _c forms, partitioned
 * send/receive (partitions readied in reverse order, Pready_range/list, Parrived, restarts),
 * generalized requests in a Waitall with point-to-point requests, and bad input. */
#include "check.h"

static int me, np;

/* ---- matched probes ---- */

static void fill(unsigned char *b, size_t n, int seed) {
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)((i * 7 + (size_t)seed) % 251);
}

static int same(const unsigned char *b, size_t n, int seed) {
    for (size_t i = 0; i < n; i++)
        if (b[i] != (unsigned char)((i * 7 + (size_t)seed) % 251)) return 0;
    return 1;
}

static void matched_probes(void) {
    int right = (me + 1) % np, left = (me + np - 1) % np;
    size_t sizes[2] = {100, 1 << 20}; /* eager and rendezvous */
    for (int k = 0; k < 2; k++) {
        size_t n = sizes[k];
        unsigned char *out = malloc(n), *in = malloc(n);
        fill(out, n, me + k);
        memset(in, 0, n);
        MPI_Request sr;
        OK(MPI_Isend(out, (int)n, MPI_BYTE, right, 10 + k, MPI_COMM_WORLD, &sr));
        MPI_Message msg = MPI_MESSAGE_NULL;
        MPI_Status st;
        OK(MPI_Mprobe(left, MPI_ANY_TAG, MPI_COMM_WORLD, &msg, &st));
        CHECK(msg != MPI_MESSAGE_NULL && msg != MPI_MESSAGE_NO_PROC, "a message");
        int count = -1;
        OK(MPI_Get_count(&st, MPI_BYTE, &count));
        CHECK(st.MPI_SOURCE == left && st.MPI_TAG == 10 + k && count == (int)n,
              "probe status %d %d %d", st.MPI_SOURCE, st.MPI_TAG, count);
        /* Taken out of matching: no probe sees it any more. */
        int flag = 1;
        OK(MPI_Iprobe(left, 10 + k, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE));
        CHECK(!flag, "a matched message is not probed again");
        if (k == 0) {
            OK(MPI_Mrecv(in, (int)n, MPI_BYTE, &msg, &st));
        } else {
            MPI_Request rr;
            OK(MPI_Imrecv(in, (int)n, MPI_BYTE, &msg, &rr));
            OK(MPI_Wait(&rr, &st));
        }
        CHECK(msg == MPI_MESSAGE_NULL, "the message handle is spent");
        OK(MPI_Get_count(&st, MPI_BYTE, &count));
        CHECK(count == (int)n && st.MPI_SOURCE == left, "received %d from %d", count, st.MPI_SOURCE);
        CHECK(same(in, n, left + k), "%zu bytes from the matched message", n);
        OK(MPI_Wait(&sr, MPI_STATUS_IGNORE));
        free(out);
        free(in);
    }

    /* Improbe polling, then a wildcard Irecv posted after the matched probe takes the
     * NEXT message, not the matched one. */
    int a = 1000 + me, b = 2000 + me, got_a = 0, got_b = 0, flag = 0;
    OK(MPI_Send(&a, 1, MPI_INT, right, 20, MPI_COMM_WORLD));
    MPI_Message msg;
    MPI_Status st;
    int polls = 0;
    do {
        POLL(MPI_Improbe(MPI_ANY_SOURCE, 20, MPI_COMM_WORLD, &flag, &msg, &st));
        polls++;
    } while (!flag);
    CHECK(st.MPI_SOURCE == left && st.MPI_TAG == 20, "improbe status");
    MPI_Request rr;
    OK(MPI_Irecv(&got_b, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &rr));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Send(&b, 1, MPI_INT, right, 21, MPI_COMM_WORLD));
    OK(MPI_Wait(&rr, &st));
    CHECK(got_b == 2000 + left && st.MPI_TAG == 21, "the wildcard receive got %d tag %d", got_b, st.MPI_TAG);
    OK(MPI_Mrecv(&got_a, 1, MPI_INT, &msg, &st));
    CHECK(got_a == 1000 + left && st.MPI_TAG == 20, "the matched message kept %d", got_a);

    /* A matched message longer than the buffer: truncated. */
    int three[3] = {1, 2, 3}, two[2] = {0, 0};
    OK(MPI_Send(three, 3, MPI_INT, right, 22, MPI_COMM_WORLD));
    OK(MPI_Mprobe(left, 22, MPI_COMM_WORLD, &msg, MPI_STATUS_IGNORE));
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int rc = MPI_Mrecv(two, 2, MPI_INT, &msg, &st);
    int cls = -1;
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_TRUNCATE, "truncated Mrecv class %d", cls);
    CHECK(two[0] == 1 && two[1] == 2, "the part that fits");

    /* MPI_PROC_NULL: MPI_MESSAGE_NO_PROC, received at once. */
    OK(MPI_Mprobe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &msg, &st));
    CHECK(msg == MPI_MESSAGE_NO_PROC && st.MPI_SOURCE == MPI_PROC_NULL, "no proc");
    OK(MPI_Mrecv(NULL, 0, MPI_INT, &msg, &st));
    CHECK(msg == MPI_MESSAGE_NULL && st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG, "no proc recv");
    OK(MPI_Improbe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &flag, &msg, &st));
    CHECK(flag && msg == MPI_MESSAGE_NO_PROC, "improbe no proc");
    OK(MPI_Imrecv(NULL, 0, MPI_INT, &msg, &rr));
    OK(MPI_Wait(&rr, &st));
    CHECK(st.MPI_SOURCE == MPI_PROC_NULL, "imrecv no proc");

    /* Bad input. */
    msg = MPI_MESSAGE_NULL;
    rc = MPI_Mrecv(&got_a, 1, MPI_INT, &msg, &st);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_REQUEST, "Mrecv of MPI_MESSAGE_NULL: class %d", cls);
    rc = MPI_Mprobe(np + 3, 0, MPI_COMM_WORLD, &msg, &st);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_RANK, "Mprobe bad rank: class %d", cls);
    rc = MPI_Improbe(0, -7, MPI_COMM_WORLD, &flag, &msg, &st);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_TAG, "Improbe bad tag: class %d", cls);
    rc = MPI_Improbe(0, 0, MPI_COMM_NULL, &flag, &msg, &st);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_COMM, "Improbe bad comm: class %d", cls);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    OK(MPI_Barrier(MPI_COMM_WORLD));
}

/* ---- Isendrecv ---- */

static void isendrecv_rings(void) {
    int right = (me + 1) % np, left = (me + np - 1) % np;
    int out[4], in[4] = {0};
    for (int i = 0; i < 4; i++) out[i] = me * 10 + i;
    MPI_Request r[2];
    OK(MPI_Isendrecv(out, 4, MPI_INT, right, 30, in, 4, MPI_INT, left, 30, MPI_COMM_WORLD, &r[0]));
    int buf[3] = {me, me + 100, me + 200};
    OK(MPI_Isendrecv_replace(buf, 3, MPI_INT, right, 31, left, 31, MPI_COMM_WORLD, &r[1]));
    /* The replace copied its data out: overwriting the buffer now changes nothing sent. */
    MPI_Status st[2];
    OK(MPI_Waitall(2, r, st));
    CHECK(r[0] == MPI_REQUEST_NULL && r[1] == MPI_REQUEST_NULL, "freed");
    CHECK(in[0] == left * 10 && in[3] == left * 10 + 3, "isendrecv ring %d %d", in[0], in[3]);
    CHECK(st[0].MPI_SOURCE == left && st[0].MPI_TAG == 30, "isendrecv status");
    int count = -1;
    MPI_Get_count(&st[1], MPI_INT, &count);
    CHECK(buf[0] == left && buf[2] == left + 200 && count == 3, "isendrecv_replace ring %d", buf[0]);

    /* Large messages, and Test polling. */
    size_t n = 300000;
    unsigned char *big = malloc(n), *bin = malloc(n);
    fill(big, n, me);
    MPI_Request q;
    OK(MPI_Isendrecv_c(big, (MPI_Count)n, MPI_BYTE, right, 32, bin, (MPI_Count)n, MPI_BYTE, left, 32, MPI_COMM_WORLD, &q));
    int flag = 0;
    while (!flag) POLL(MPI_Test(&q, &flag, MPI_STATUS_IGNORE));
    CHECK(same(bin, n, left), "large isendrecv");
    OK(MPI_Isendrecv_replace_c(big, (MPI_Count)n, MPI_BYTE, right, 33, left, 33, MPI_COMM_WORLD, &q));
    OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    fill(bin, n, right);
    /* After the replace, big holds left's data: compare with left's pattern. */
    CHECK(same(big, n, left), "large isendrecv_replace");
    free(big);
    free(bin);

    /* PROC_NULL halves. */
    int x = 5, y = 9;
    OK(MPI_Isendrecv(&x, 1, MPI_INT, MPI_PROC_NULL, 0, &y, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &q));
    MPI_Status s1;
    OK(MPI_Wait(&q, &s1));
    CHECK(y == 9 && s1.MPI_SOURCE == MPI_PROC_NULL, "proc null isendrecv");

    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int cls = -1;
    MPI_Error_class(MPI_Isendrecv(&x, -1, MPI_INT, right, 0, &y, 1, MPI_INT, left, 0, MPI_COMM_WORLD, &q), &cls);
    CHECK(cls == MPI_ERR_COUNT, "negative count: %d", cls);
    MPI_Error_class(MPI_Isendrecv(&x, 1, MPI_INT, np, 0, &y, 1, MPI_INT, left, 0, MPI_COMM_WORLD, &q), &cls);
    CHECK(cls == MPI_ERR_RANK, "bad rank: %d", cls);
    MPI_Error_class(MPI_Isendrecv_replace(&x, 1, MPI_INT, right, -2, left, 0, MPI_COMM_WORLD, &q), &cls);
    CHECK(cls == MPI_ERR_TAG, "bad tag: %d", cls);
    MPI_Error_class(MPI_Isendrecv(&x, 1, MPI_INT, right, 0, &y, 1, MPI_INT, left, 0, MPI_COMM_WORLD, NULL), &cls);
    CHECK(cls == MPI_ERR_ARG, "NULL request: %d", cls);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    OK(MPI_Barrier(MPI_COMM_WORLD));
}

/* ---- large-count forms ---- */

static void large_counts(void) {
    int right = (me + 1) % np, left = (me + np - 1) % np;
    double out[5], in[5];
    for (int i = 0; i < 5; i++) out[i] = me + i * 0.5;
    MPI_Status st;
    MPI_Request r[2];
    /* Every send mode (Bsend_c through an attached buffer). */
    static char bbuf[1024];
    OK(MPI_Buffer_attach(bbuf, sizeof bbuf));
    for (int mode = 0; mode < 4; mode++) {
        memset(in, 0, sizeof in);
        OK(MPI_Irecv_c(in, 5, MPI_DOUBLE, left, 40 + mode, MPI_COMM_WORLD, &r[0]));
        OK(MPI_Barrier(MPI_COMM_WORLD)); /* Rsend needs the receive posted */
        switch (mode) {
        case 0: OK(MPI_Send_c(out, 5, MPI_DOUBLE, right, 40, MPI_COMM_WORLD)); break;
        case 1: OK(MPI_Ssend_c(out, 5, MPI_DOUBLE, right, 41, MPI_COMM_WORLD)); break;
        case 2: OK(MPI_Rsend_c(out, 5, MPI_DOUBLE, right, 42, MPI_COMM_WORLD)); break;
        case 3: OK(MPI_Bsend_c(out, 5, MPI_DOUBLE, right, 43, MPI_COMM_WORLD)); break;
        }
        OK(MPI_Wait(&r[0], &st));
        MPI_Count n = -1;
        int cnt = -1;
        MPI_Get_count(&st, MPI_DOUBLE, &cnt);
        (void)n;
        CHECK(cnt == 5 && in[4] == left + 2.0, "mode %d: %d %g", mode, cnt, in[4]);
    }
    for (int mode = 0; mode < 4; mode++) {
        memset(in, 0, sizeof in);
        OK(MPI_Irecv(in, 5, MPI_DOUBLE, left, 50 + mode, MPI_COMM_WORLD, &r[0]));
        OK(MPI_Barrier(MPI_COMM_WORLD));
        switch (mode) {
        case 0: OK(MPI_Isend_c(out, 5, MPI_DOUBLE, right, 50, MPI_COMM_WORLD, &r[1])); break;
        case 1: OK(MPI_Issend_c(out, 5, MPI_DOUBLE, right, 51, MPI_COMM_WORLD, &r[1])); break;
        case 2: OK(MPI_Irsend_c(out, 5, MPI_DOUBLE, right, 52, MPI_COMM_WORLD, &r[1])); break;
        case 3: OK(MPI_Ibsend_c(out, 5, MPI_DOUBLE, right, 53, MPI_COMM_WORLD, &r[1])); break;
        }
        OK(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));
        CHECK(in[0] == (double)left && in[4] == left + 2.0, "imode %d", mode);
    }
    /* Persistent requests, twice each. */
    for (int mode = 0; mode < 4; mode++) {
        MPI_Request p[2];
        OK(MPI_Recv_init_c(in, 5, MPI_DOUBLE, left, 60 + mode, MPI_COMM_WORLD, &p[0]));
        switch (mode) {
        case 0: OK(MPI_Send_init_c(out, 5, MPI_DOUBLE, right, 60, MPI_COMM_WORLD, &p[1])); break;
        case 1: OK(MPI_Ssend_init_c(out, 5, MPI_DOUBLE, right, 61, MPI_COMM_WORLD, &p[1])); break;
        case 2: OK(MPI_Rsend_init_c(out, 5, MPI_DOUBLE, right, 62, MPI_COMM_WORLD, &p[1])); break;
        case 3: OK(MPI_Bsend_init_c(out, 5, MPI_DOUBLE, right, 63, MPI_COMM_WORLD, &p[1])); break;
        }
        for (int round = 0; round < 2; round++) {
            memset(in, 0, sizeof in);
            OK(MPI_Start(&p[0]));
            OK(MPI_Barrier(MPI_COMM_WORLD));
            OK(MPI_Start(&p[1]));
            OK(MPI_Waitall(2, p, MPI_STATUSES_IGNORE));
            CHECK(in[1] == left + 0.5, "persistent mode %d round %d", mode, round);
        }
        OK(MPI_Request_free(&p[0]));
        OK(MPI_Request_free(&p[1]));
    }
    void *detached;
    int dsize;
    OK(MPI_Buffer_detach(&detached, &dsize));
    /* Recv_c, Sendrecv_c, Sendrecv_replace_c. */
    OK(MPI_Sendrecv_c(out, 5, MPI_DOUBLE, right, 70, in, 5, MPI_DOUBLE, left, 70, MPI_COMM_WORLD, &st));
    CHECK(in[2] == left + 1.0 && st.MPI_SOURCE == left, "sendrecv_c");
    double rep[2] = {me, -me};
    OK(MPI_Sendrecv_replace_c(rep, 2, MPI_DOUBLE, right, 71, left, 71, MPI_COMM_WORLD, &st));
    CHECK(rep[0] == left && rep[1] == -left, "sendrecv_replace_c");
    OK(MPI_Isend(out, 5, MPI_DOUBLE, right, 72, MPI_COMM_WORLD, &r[1]));
    OK(MPI_Recv_c(in, 5, MPI_DOUBLE, left, 72, MPI_COMM_WORLD, &st));
    OK(MPI_Wait(&r[1], MPI_STATUS_IGNORE));
    CHECK(in[3] == left + 1.5, "recv_c");
    /* A matched message received by the _c forms. */
    MPI_Message msg;
    OK(MPI_Send(out, 5, MPI_DOUBLE, right, 73, MPI_COMM_WORLD));
    OK(MPI_Mprobe(left, 73, MPI_COMM_WORLD, &msg, MPI_STATUS_IGNORE));
    OK(MPI_Mrecv_c(in, 5, MPI_DOUBLE, &msg, &st));
    CHECK(in[4] == left + 2.0, "mrecv_c");
    OK(MPI_Send(out, 5, MPI_DOUBLE, right, 74, MPI_COMM_WORLD));
    OK(MPI_Mprobe(left, 74, MPI_COMM_WORLD, &msg, MPI_STATUS_IGNORE));
    OK(MPI_Imrecv_c(in, 5, MPI_DOUBLE, &msg, &r[0]));
    OK(MPI_Wait(&r[0], MPI_STATUS_IGNORE));
    CHECK(in[4] == left + 2.0, "imrecv_c");

    /* Bad counts: negative is MPI_ERR_COUNT. */
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int cls = -1;
    MPI_Error_class(MPI_Send_c(out, -1, MPI_DOUBLE, right, 0, MPI_COMM_WORLD), &cls);
    CHECK(cls == MPI_ERR_COUNT, "Send_c negative: %d", cls);
    MPI_Error_class(MPI_Recv_c(in, (MPI_Count)-5, MPI_DOUBLE, left, 0, MPI_COMM_WORLD, &st), &cls);
    CHECK(cls == MPI_ERR_COUNT, "Recv_c negative: %d", cls);
    MPI_Error_class(MPI_Irecv_c(in, 1, MPI_DATATYPE_NULL, left, 0, MPI_COMM_WORLD, &r[0]), &cls);
    CHECK(cls == MPI_ERR_TYPE, "Irecv_c bad type: %d", cls);
    MPI_Error_class(MPI_Send_init_c(out, (MPI_Count)1 << 62, MPI_DOUBLE, right, 0, MPI_COMM_WORLD, &r[0]), &cls);
    CHECK(cls == MPI_ERR_COUNT, "Send_init_c count beyond the address space: %d", cls);
    MPI_Error_class(MPI_Isend_c(out, 1, MPI_DOUBLE, right, 0, MPI_COMM_WORLD, NULL), &cls);
    CHECK(cls == MPI_ERR_ARG, "Isend_c NULL request: %d", cls);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    OK(MPI_Barrier(MPI_COMM_WORLD));
}

/* ---- partitioned ---- */

static void partitioned(void) {
    int right = (me + 1) % np, left = (me + np - 1) % np;
    enum { PARTS = 8, PER = 1000 };
    int *out = calloc(PARTS * PER, sizeof(int)), *in = calloc(PARTS * PER, sizeof(int));
    MPI_Request ps, pr;
    OK(MPI_Psend_init(out, PARTS, PER, MPI_INT, right, 80, MPI_COMM_WORLD, MPI_INFO_NULL, &ps));
    OK(MPI_Precv_init(in, PARTS, PER, MPI_INT, left, 80, MPI_COMM_WORLD, MPI_INFO_NULL, &pr));
    for (int round = 0; round < 3; round++) {
        memset(in, 0, sizeof(int) * PARTS * PER);
        OK(MPI_Start(&pr));
        OK(MPI_Start(&ps));
        int flag = 1;
        OK(MPI_Parrived(pr, 0, &flag));
        /* Nothing is sent before every partition is ready (the partner readies after the
         * barrier): nothing can have arrived. */
        CHECK(!flag, "round %d: arrived before any partition was ready", round);
        OK(MPI_Barrier(MPI_COMM_WORLD));
        /* Fill and ready the partitions in reverse order, by three calls. */
        for (int p = PARTS - 1; p >= 0; p--) {
            for (int i = 0; i < PER; i++) out[p * PER + i] = me * 100000 + round * 10000 + p * PER + i;
            if (p >= 5) OK(MPI_Pready(p, ps));
        }
        OK(MPI_Pready_range(2, 4, ps));
        int rest[2] = {1, 0};
        OK(MPI_Pready_list(2, rest, ps));
        /* Parrived until the last partition is there. */
        flag = 0;
        while (!flag) POLL(MPI_Parrived(pr, PARTS - 1, &flag));
        MPI_Request both[2] = {ps, pr};
        MPI_Status st[2];
        OK(MPI_Waitall(2, both, st));
        CHECK(both[0] == ps && both[1] == pr, "persistent: the handles stay");
        int good = 1;
        for (int i = 0; i < PARTS * PER; i++)
            if (in[i] != left * 100000 + round * 10000 + i) good = 0;
        CHECK(good, "round %d: partitioned data", round);
        CHECK(st[1].MPI_SOURCE == left && st[1].MPI_TAG == 80, "partitioned status");
        OK(MPI_Barrier(MPI_COMM_WORLD));
    }
    /* Requests of one peer and tag match in the order they were initialized, whatever
     * the order their partitions are ready in; a wildcard receive posted meanwhile takes
     * none of their data. */
    {
        int s0[4], s1[4], r0[4] = {0}, r1[4] = {0}, stray = -1, wflag = 1;
        for (int i = 0; i < 4; i++) {
            s0[i] = me * 10 + i;
            s1[i] = me * 10 + 5 + i;
        }
        MPI_Request q[4], w;
        OK(MPI_Psend_init(s0, 2, 2, MPI_INT, right, 81, MPI_COMM_WORLD, MPI_INFO_NULL, &q[0]));
        OK(MPI_Psend_init(s1, 2, 2, MPI_INT, right, 81, MPI_COMM_WORLD, MPI_INFO_NULL, &q[1]));
        OK(MPI_Precv_init(r0, 2, 2, MPI_INT, left, 81, MPI_COMM_WORLD, MPI_INFO_NULL, &q[2]));
        OK(MPI_Precv_init(r1, 2, 2, MPI_INT, left, 81, MPI_COMM_WORLD, MPI_INFO_NULL, &q[3]));
        OK(MPI_Irecv(&stray, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &w));
        OK(MPI_Startall(4, q));
        OK(MPI_Pready_range(0, 1, q[1]));
        OK(MPI_Wait(&q[1], MPI_STATUS_IGNORE));
        OK(MPI_Pready_list(2, (int[]){1, 0}, q[0]));
        OK(MPI_Waitall(4, q, MPI_STATUSES_IGNORE));
        CHECK(r0[0] == left * 10 && r0[3] == left * 10 + 3 && r1[0] == left * 10 + 5,
              "init order: %d %d", r0[0], r1[0]);
        OK(MPI_Test(&w, &wflag, MPI_STATUS_IGNORE));
        CHECK(!wflag, "a wildcard receive took partitioned data");
        OK(MPI_Barrier(MPI_COMM_WORLD));
        OK(MPI_Send(&me, 1, MPI_INT, right, 82, MPI_COMM_WORLD));
        OK(MPI_Wait(&w, MPI_STATUS_IGNORE));
        CHECK(stray == left, "the wildcard receive got %d", stray);
        for (int i = 0; i < 4; i++) OK(MPI_Request_free(&q[i]));
    }
    /* Non-contiguous datatypes on both sides (as MPICH's part/parrived_strided): a strided
     * send into a differently strided receive, the types freed once the requests exist
     * (the requests keep them), the receive buffer's holes untouched, two rounds. */
    {
        enum { P = 4, N = 2, E = P * N };
        MPI_Datatype svec, pair, rvec;
        OK(MPI_Type_vector(2, 1, 3, MPI_INT, &svec)); /* ints 0 and 3 of each 4 */
        OK(MPI_Type_commit(&svec));
        OK(MPI_Type_contiguous(2, MPI_INT, &pair));
        OK(MPI_Type_create_resized(pair, 0, 5 * sizeof(int), &rvec)); /* ints 0, 1 of each 5 */
        OK(MPI_Type_commit(&rvec));
        OK(MPI_Type_free(&pair));
        int sbuf[E * 4], rbuf[E * 5];
        MPI_Request q[2];
        OK(MPI_Psend_init(sbuf, P, N, svec, right, 83, MPI_COMM_WORLD, MPI_INFO_NULL, &q[0]));
        OK(MPI_Precv_init(rbuf, P, N, rvec, left, 83, MPI_COMM_WORLD, MPI_INFO_NULL, &q[1]));
        OK(MPI_Type_free(&svec));
        OK(MPI_Type_free(&rvec));
        for (int round = 0; round < 2; round++) {
            for (int i = 0; i < E * 4; i++) sbuf[i] = -1;
            for (int i = 0; i < E * 5; i++) rbuf[i] = -7;
            OK(MPI_Startall(2, q));
            int order[P] = {3, 1, 0, 2};
            for (int k = 0; k < P; k++) {
                int p = order[k];
                for (int e = p * N; e < (p + 1) * N; e++) {
                    sbuf[e * 4] = me * 1000 + round * 100 + 2 * e;
                    sbuf[e * 4 + 3] = me * 1000 + round * 100 + 2 * e + 1;
                }
                OK(MPI_Pready(p, q[0]));
            }
            int flag = 0;
            while (!flag) POLL(MPI_Parrived(q[1], 0, &flag));
            /* Arrived means in the program's layout already. */
            CHECK(rbuf[0] == left * 1000 + round * 100 && rbuf[1] == left * 1000 + round * 100 + 1,
                  "round %d: strided partition 0 arrived as %d %d", round, rbuf[0], rbuf[1]);
            OK(MPI_Waitall(2, q, MPI_STATUSES_IGNORE));
            int good = 1;
            for (int e = 0; e < E; e++)
                for (int j = 0; j < 5; j++) {
                    int want = j < 2 ? left * 1000 + round * 100 + 2 * e + j : -7;
                    if (rbuf[e * 5 + j] != want) good = 0;
                }
            CHECK(good, "round %d: strided partitioned data", round);
        }
        for (int i = 0; i < 2; i++) OK(MPI_Request_free(&q[i]));
        OK(MPI_Barrier(MPI_COMM_WORLD));
    }

    /* Bad input. */
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int cls = -1;
    MPI_Error_class(MPI_Pready(0, ps), &cls); /* inactive */
    CHECK(cls == MPI_ERR_REQUEST, "Pready inactive: %d", cls);
    OK(MPI_Start(&ps));
    MPI_Error_class(MPI_Pready(PARTS, ps), &cls);
    CHECK(cls == MPI_ERR_ARG, "Pready out of range: %d", cls);
    MPI_Error_class(MPI_Pready_range(3, 1, ps), &cls);
    CHECK(cls == MPI_ERR_ARG, "Pready_range empty: %d", cls);
    MPI_Error_class(MPI_Pready(0, pr), &cls);
    CHECK(cls == MPI_ERR_REQUEST, "Pready on a receive: %d", cls);
    int flag;
    MPI_Error_class(MPI_Parrived(ps, 0, &flag), &cls);
    CHECK(cls == MPI_ERR_REQUEST, "Parrived on a send: %d", cls);
    MPI_Request bad;
    MPI_Error_class(MPI_Psend_init(out, 0, PER, MPI_INT, right, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &bad), &cls);
    CHECK(cls == MPI_ERR_ARG, "zero partitions: %d", cls);
    MPI_Error_class(MPI_Psend_init(out, 2, -1, MPI_INT, right, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &bad), &cls);
    CHECK(cls == MPI_ERR_COUNT, "negative count: %d", cls);
    MPI_Error_class(MPI_Precv_init(in, 2, 1, MPI_INT, MPI_ANY_SOURCE, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &bad), &cls);
    CHECK(cls == MPI_ERR_RANK, "ANY_SOURCE: %d", cls);
    MPI_Error_class(MPI_Precv_init(in, 2, 1, MPI_INT, left, MPI_ANY_TAG, MPI_COMM_WORLD, MPI_INFO_NULL, &bad), &cls);
    CHECK(cls == MPI_ERR_TAG, "ANY_TAG: %d", cls);
    /* Finish the started round (a PROC_NULL-free round: ready all, matched by a receive). */
    OK(MPI_Start(&pr));
    OK(MPI_Pready_range(0, PARTS - 1, ps));
    MPI_Request both[2] = {ps, pr};
    OK(MPI_Waitall(2, both, MPI_STATUSES_IGNORE));
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    OK(MPI_Request_free(&ps));
    OK(MPI_Request_free(&pr));
    CHECK(ps == MPI_REQUEST_NULL && pr == MPI_REQUEST_NULL, "freed");
    free(out);
    free(in);
    OK(MPI_Barrier(MPI_COMM_WORLD));
}

/* ---- generalized requests ---- */

struct greq_state {
    int queried, freed, cancelled, tag;
};

static int query_fn(void *extra, MPI_Status *status) {
    struct greq_state *g = extra;
    g->queried++;
    status->MPI_SOURCE = MPI_UNDEFINED;
    status->MPI_TAG = g->tag;
    status->MPI_ERROR = MPI_SUCCESS;
    /* The status calls work inside the callback. */
    if (MPI_Status_set_elements(status, MPI_INT, 3) != MPI_SUCCESS) return MPI_ERR_OTHER;
    return MPI_Status_set_cancelled(status, g->tag == 78);
}

static int free_fn(void *extra) {
    struct greq_state *g = extra;
    CHECK(g->queried > 0, "free after query");
    g->freed++;
    return MPI_SUCCESS;
}

static int free_fn_unqueried(void *extra) {
    struct greq_state *g = extra;
    g->freed++;
    return MPI_SUCCESS;
}

static int cancel_fn(void *extra, int complete) {
    struct greq_state *g = extra;
    g->cancelled = complete ? 2 : 1;
    return MPI_SUCCESS;
}

static int failing_query(void *extra, MPI_Status *status) {
    (void)extra;
    (void)status;
    return MPI_ERR_OTHER;
}

static void generalized(void) {
    int right = (me + 1) % np, left = (me + np - 1) % np;
    struct greq_state g[2] = {{0, 0, 0, 77}, {0, 0, 0, 78}};
    MPI_Request r[4];
    OK(MPI_Grequest_start(query_fn, free_fn, cancel_fn, &g[0], &r[0]));
    int x = me, y = -1;
    OK(MPI_Irecv(&y, 1, MPI_INT, left, 90, MPI_COMM_WORLD, &r[1]));
    OK(MPI_Grequest_start(query_fn, free_fn, cancel_fn, &g[1], &r[2]));
    OK(MPI_Isend(&x, 1, MPI_INT, right, 90, MPI_COMM_WORLD, &r[3]));
    int flag = 1;
    OK(MPI_Test(&r[0], &flag, MPI_STATUS_IGNORE));
    CHECK(!flag && g[0].queried == 0, "not complete before Grequest_complete");
    OK(MPI_Cancel(&r[2]));
    CHECK(g[1].cancelled == 1, "cancel_fn told it is not complete");
    OK(MPI_Grequest_complete(r[0]));
    OK(MPI_Grequest_complete(r[2]));
    MPI_Status st[4];
    OK(MPI_Waitall(4, r, st));
    CHECK(r[0] == MPI_REQUEST_NULL && r[2] == MPI_REQUEST_NULL, "freed by Waitall");
    CHECK(g[0].queried == 1 && g[0].freed == 1 && g[1].queried == 1 && g[1].freed == 1,
          "query %d %d free %d %d", g[0].queried, g[1].queried, g[0].freed, g[1].freed);
    CHECK(st[0].MPI_TAG == 77 && st[2].MPI_TAG == 78, "statuses from query_fn: %d %d", st[0].MPI_TAG, st[2].MPI_TAG);
    int cnt = -1, cancelled = -1;
    OK(MPI_Get_count(&st[0], MPI_INT, &cnt));
    CHECK(cnt == 3, "the count query_fn set: %d", cnt);
    OK(MPI_Test_cancelled(&st[2], &cancelled));
    CHECK(cancelled == 1, "the cancel query_fn set");
    OK(MPI_Test_cancelled(&st[0], &cancelled));
    CHECK(cancelled == 0, "not cancelled");
    CHECK(y == left && st[1].MPI_SOURCE == left, "the receive of the same Waitall");

    /* Waitany and Testsome, with MPI_STATUSES_IGNORE Waitall too. */
    struct greq_state h = {0, 0, 0, 5};
    MPI_Request q[2];
    OK(MPI_Grequest_start(query_fn, free_fn, NULL, &h, &q[0]));
    OK(MPI_Isend(&x, 1, MPI_INT, right, 91, MPI_COMM_WORLD, &q[1]));
    OK(MPI_Recv(&y, 1, MPI_INT, left, 91, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    int idx = -1;
    OK(MPI_Waitany(2, q, &idx, MPI_STATUS_IGNORE));
    CHECK(idx == 1, "the send completes first: %d", idx);
    int outcount = -1, indices[2];
    OK(MPI_Testsome(2, q, &outcount, indices, MPI_STATUSES_IGNORE));
    CHECK(outcount == 0, "the generalized request is pending: %d", outcount);
    OK(MPI_Grequest_complete(q[0]));
    OK(MPI_Waitall(2, q, MPI_STATUSES_IGNORE));
    CHECK(h.queried == 1 && h.freed == 1 && q[0] == MPI_REQUEST_NULL, "statuses ignored");

    /* Freed before completed: free_fn runs at MPI_Grequest_complete, no query. */
    struct greq_state f = {0, 0, 0, 6};
    MPI_Request fr, keep = MPI_REQUEST_NULL;
    OK(MPI_Grequest_start(query_fn, free_fn_unqueried, NULL, &f, &fr));
    keep = fr;
    OK(MPI_Request_free(&fr));
    CHECK(fr == MPI_REQUEST_NULL && f.freed == 0, "not freed before completion");
    OK(MPI_Grequest_complete(keep));
    CHECK(f.freed == 1 && f.queried == 0, "free_fn at completion: %d %d", f.freed, f.queried);

    /* A query function's error is the request's. */
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_Request e;
    OK(MPI_Grequest_start(failing_query, NULL, NULL, NULL, &e));
    OK(MPI_Grequest_complete(e));
    MPI_Status es;
    int rc = MPI_Wait(&e, &es);
    CHECK(rc != MPI_SUCCESS, "a failing query fails the wait");
    int cls = -1;
    MPI_Error_class(MPI_Grequest_complete(e), &cls);
    CHECK(cls == MPI_ERR_REQUEST, "complete twice / freed: %d", cls);
    MPI_Error_class(MPI_Grequest_start(query_fn, free_fn, cancel_fn, NULL, NULL), &cls);
    CHECK(cls == MPI_ERR_ARG, "NULL request: %d", cls);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    OK(MPI_Barrier(MPI_COMM_WORLD));
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    matched_probes();
    isendrecv_rings();
    large_counts();
    partitioned();
    generalized();
    int rc = summary("p2p2");
    MPI_Finalize();
    return rc;
}
