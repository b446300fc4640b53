/* Point-to-point: the four send modes, blocking and non-blocking, probes, exchanges, the
 * wait/test families, persistent requests, counts, wildcards and MPI_PROC_NULL. Ranks pair up
 * in a ring: each sends to the next and receives from the previous. */
#include "check.h"

#define N 1000
#define BIG (1 << 20)

static int fill(int rank, int i, int salt) { return rank * 100000 + i * 7 + salt; }

/* MPI_Waitall with MPI_STATUSES_IGNORE, the windowed-transfer loop (its own path in rmca):
 * rounds of a window holding every kind of entry (pending receives, sends complete at start,
 * started and never-started persistent requests, MPI_PROC_NULL, MPI_REQUEST_NULL), so the
 * freed handles are reused round after round; then a failed receive in a window. */
static void waitall_without_statuses(int rank, int next, int prev) {
    enum { W = 16, ROUNDS = 50, LEN = 2 * W + 5 };
    int in[W], out[W], pin = -1, pout = 0, idle_in = 0, null_in = 0;
    MPI_Request reqs[LEN], pers[2], idle;
    MPI_Comm comm;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    OK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    OK(MPI_Recv_init(&pin, 1, MPI_INT, prev, 71, comm, &pers[0]));
    OK(MPI_Send_init(&pout, 1, MPI_INT, next, 71, comm, &pers[1]));
    OK(MPI_Recv_init(&idle_in, 1, MPI_INT, prev, 72, comm, &idle)); /* never started */
    int bad = 0, failed_calls = 0;
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < W; i++) {
            in[i] = -1;
            out[i] = fill(rank, i, round);
        }
        for (int i = 0; i < W; i++) failed_calls += MPI_Irecv(&in[i], 1, MPI_INT, prev, 70, comm, &reqs[i]) != MPI_SUCCESS;
        for (int i = 0; i < W; i++) failed_calls += MPI_Isend(&out[i], 1, MPI_INT, next, 70, comm, &reqs[W + i]) != MPI_SUCCESS;
        pout = round;
        failed_calls += MPI_Start(&pers[0]) != MPI_SUCCESS;
        failed_calls += MPI_Start(&pers[1]) != MPI_SUCCESS;
        reqs[2 * W] = pers[0];
        reqs[2 * W + 1] = pers[1];
        reqs[2 * W + 2] = idle;
        failed_calls += MPI_Irecv(&null_in, 1, MPI_INT, MPI_PROC_NULL, 0, comm, &reqs[2 * W + 3]) != MPI_SUCCESS;
        reqs[2 * W + 4] = MPI_REQUEST_NULL;
        failed_calls += MPI_Waitall(LEN, reqs, MPI_STATUSES_IGNORE) != MPI_SUCCESS;
        for (int i = 0; i < W; i++) bad += in[i] != fill(prev, i, round);
        for (int i = 0; i < 2 * W; i++) bad += reqs[i] != MPI_REQUEST_NULL;
        /* Persistent requests stay allocated (inactive); the others are freed. */
        bad += reqs[2 * W] != pers[0] || reqs[2 * W + 1] != pers[1] || reqs[2 * W + 2] != idle;
        bad += reqs[2 * W + 3] != MPI_REQUEST_NULL || reqs[2 * W + 4] != MPI_REQUEST_NULL;
        bad += pin != round;
    }
    CHECK(failed_calls == 0, "waitall rounds: %d calls failed", failed_calls);
    CHECK(bad == 0, "waitall without statuses: %d wrong", bad);
    /* A receive too small for its message, behind a good one on MPI_COMM_WORLD (whose handler
     * is fatal): the error is raised on the failed request's communicator (errors return),
     * and every request of the window is freed all the same (they are all complete). */
    int two[2] = {fill(rank, 0, 1), fill(rank, 1, 1)}, one = 0, good = 0, good_out = fill(rank, 2, 1);
    OK(MPI_Irecv(&good, 1, MPI_INT, prev, 74, MPI_COMM_WORLD, &reqs[0]));
    OK(MPI_Isend(&good_out, 1, MPI_INT, next, 74, MPI_COMM_WORLD, &reqs[1]));
    OK(MPI_Irecv(&one, 1, MPI_INT, prev, 73, comm, &reqs[2]));
    OK(MPI_Isend(two, 2, MPI_INT, next, 73, comm, &reqs[3]));
    OK(MPI_Irecv(&null_in, 1, MPI_INT, MPI_PROC_NULL, 0, comm, &reqs[4]));
    int rc = MPI_Waitall(5, reqs, MPI_STATUSES_IGNORE);
    CHECK(rc == MPI_ERR_IN_STATUS, "waitall with a truncated receive returned %d", rc);
    int freed = 0;
    for (int i = 0; i < 5; i++) freed += reqs[i] == MPI_REQUEST_NULL;
    CHECK(freed == 5, "a failed waitall frees its requests: %d of 5", freed);
    CHECK(one == fill(prev, 0, 1) && good == fill(prev, 2, 1), "received %d and %d", one, good);
    OK(MPI_Request_free(&pers[0]));
    OK(MPI_Request_free(&pers[1]));
    OK(MPI_Request_free(&idle));
    OK(MPI_Comm_free(&comm));
}

int main(int argc, char **argv) {
    int rank, size, count, flag;
    MPI_Status st;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int out[N], in[N];
    double *big_out = malloc(BIG * sizeof(double)), *big_in = malloc(BIG * sizeof(double));

    /* Blocking sends of every mode, received in order. Rsend only once the receive is
     * known to be posted: the receiver posts first, then the ring synchronizes. */
    for (int mode = 0; mode < 4; mode++) {
        for (int i = 0; i < N; i++) out[i] = fill(rank, i, mode);
        memset(in, 0, sizeof in);
        MPI_Request r;
        OK(MPI_Irecv(in, N, MPI_INT, prev, 10 + mode, MPI_COMM_WORLD, &r));
        MPI_Barrier(MPI_COMM_WORLD);
        if (mode == 0) OK(MPI_Send(out, N, MPI_INT, next, 10, MPI_COMM_WORLD));
        if (mode == 1) OK(MPI_Ssend(out, N, MPI_INT, next, 11, MPI_COMM_WORLD));
        if (mode == 2) OK(MPI_Rsend(out, N, MPI_INT, next, 12, MPI_COMM_WORLD));
        if (mode == 3) {
            int need = N * sizeof(int) + MPI_BSEND_OVERHEAD;
            void *bbuf = malloc(need);
            OK(MPI_Buffer_attach(bbuf, need));
            OK(MPI_Bsend(out, N, MPI_INT, next, 13, MPI_COMM_WORLD));
            memset(out, 0, sizeof out); /* a buffered send copied the data already */
            void *det;
            int dsize;
            OK(MPI_Wait(&r, &st));
            OK(MPI_Buffer_detach(&det, &dsize));
            CHECK(det == bbuf && dsize == need, "detach gives the buffer back");
            free(bbuf);
        } else {
            OK(MPI_Wait(&r, &st));
        }
        CHECK(r == MPI_REQUEST_NULL, "completed request is nulled");
        CHECK(st.MPI_SOURCE == prev && st.MPI_TAG == 10 + mode, "status %d %d", st.MPI_SOURCE, st.MPI_TAG);
        OK(MPI_Get_count(&st, MPI_INT, &count));
        CHECK(count == N, "count %d", count);
        int bad = 0;
        for (int i = 0; i < N; i++) bad += in[i] != fill(prev, i, mode);
        CHECK(bad == 0, "mode %d: %d wrong elements", mode, bad);
    }

    /* A large message (rendezvous), blocking receive with wildcards. */
    for (int i = 0; i < BIG; i++) big_out[i] = rank + i * 0.5;
    MPI_Request sr;
    OK(MPI_Isend(big_out, BIG, MPI_DOUBLE, next, 20, MPI_COMM_WORLD, &sr));
    OK(MPI_Recv(big_in, BIG, MPI_DOUBLE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
    OK(MPI_Wait(&sr, MPI_STATUS_IGNORE));
    CHECK(st.MPI_SOURCE == prev && st.MPI_TAG == 20, "wildcard status %d %d", st.MPI_SOURCE, st.MPI_TAG);
    int bad = 0;
    for (int i = 0; i < BIG; i++) bad += big_in[i] != prev + i * 0.5;
    CHECK(bad == 0, "big: %d wrong", bad);
    OK(MPI_Get_count(&st, MPI_BYTE, &count));
    CHECK(count == BIG * 8, "bytes %d", count);
    OK(MPI_Get_elements(&st, MPI_DOUBLE, &count));
    CHECK(count == BIG, "elements %d", count);
    OK(MPI_Get_count(&st, MPI_LONG_DOUBLE, &count));
    CHECK(count == BIG / 2, "long double count %d", count);
    OK(MPI_Get_count(&st, MPI_DOUBLE_INT, &count));
    CHECK(count == MPI_UNDEFINED || BIG * 8 % 16 == 0, "undefined count %d", count);

    /* The blocking fast path (a predefined datatype, the buffer in place): a status asked
     * for is filled, every field, whatever it held; none is written through
     * MPI_STATUS_IGNORE; a zero-count message may come with NULL buffers. */
    {
        short s3[3] = {(short)rank, 2, 3}, r3[4] = {-1, -1, -1, -1};
        MPI_Status fs;
        memset(&fs, 0x5a, sizeof fs);
        OK(MPI_Isend(s3, 3, MPI_SHORT, next, 25, MPI_COMM_WORLD, &sr));
        OK(MPI_Recv(r3, 4, MPI_SHORT, prev, 25, MPI_COMM_WORLD, &fs));
        OK(MPI_Wait(&sr, MPI_STATUS_IGNORE));
        OK(MPI_Get_count(&fs, MPI_SHORT, &count));
        CHECK(fs.MPI_SOURCE == prev && fs.MPI_TAG == 25 && count == 3 && r3[0] == prev && r3[2] == 3 && r3[3] == -1,
              "fast recv: source %d tag %d count %d data %d %d %d", fs.MPI_SOURCE, fs.MPI_TAG, count, r3[0], r3[2], r3[3]);
        memset(&fs, 0x5a, sizeof fs);
        OK(MPI_Send(NULL, 0, MPI_INT, next, 26, MPI_COMM_WORLD));
        OK(MPI_Recv(NULL, 0, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &fs));
        OK(MPI_Get_count(&fs, MPI_INT, &count));
        CHECK(fs.MPI_SOURCE == prev && fs.MPI_TAG == 26 && count == 0, "fast empty recv: source %d tag %d count %d",
              fs.MPI_SOURCE, fs.MPI_TAG, count);
        OK(MPI_Send(s3, 2, MPI_SHORT, next, 27, MPI_COMM_WORLD));
        OK(MPI_Recv(r3, 2, MPI_SHORT, prev, 27, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(r3[0] == prev && r3[1] == 2 && r3[2] == 3, "fast recv without status: %d %d", r3[0], r3[1]);
    }

    /* Probe, then receive what was probed; Iprobe until it arrives. */
    for (int i = 0; i < 3; i++) out[i] = fill(rank, i, 30);
    OK(MPI_Issend(out, 3, MPI_INT, next, 30, MPI_COMM_WORLD, &sr));
    OK(MPI_Probe(prev, 30, MPI_COMM_WORLD, &st));
    OK(MPI_Get_count(&st, MPI_INT, &count));
    CHECK(st.MPI_SOURCE == prev && st.MPI_TAG == 30 && count == 3, "probe %d %d %d", st.MPI_SOURCE, st.MPI_TAG, count);
    OK(MPI_Recv(in, count, MPI_INT, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(in[2] == fill(prev, 2, 30), "probed message");
    OK(MPI_Wait(&sr, MPI_STATUS_IGNORE));
    OK(MPI_Isend(out, 1, MPI_INT, next, 31, MPI_COMM_WORLD, &sr));
    flag = 0;
    while (!flag) POLL(MPI_Iprobe(MPI_ANY_SOURCE, 31, MPI_COMM_WORLD, &flag, &st));
    CHECK(st.MPI_SOURCE == prev, "iprobe source %d", st.MPI_SOURCE);
    OK(MPI_Recv(in, 1, MPI_INT, prev, 31, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    OK(MPI_Wait(&sr, MPI_STATUS_IGNORE));

    /* Sendrecv and Sendrecv_replace around the ring. */
    int mine = fill(rank, 0, 40), got = -1;
    OK(MPI_Sendrecv(&mine, 1, MPI_INT, next, 40, &got, 1, MPI_INT, prev, 40, MPI_COMM_WORLD, &st));
    CHECK(got == fill(prev, 0, 40) && st.MPI_SOURCE == prev, "sendrecv %d", got);
    int rep[2] = {rank, -rank};
    OK(MPI_Sendrecv_replace(rep, 2, MPI_INT, next, 41, prev, 41, MPI_COMM_WORLD, &st));
    CHECK(rep[0] == prev && rep[1] == -prev, "replace %d %d", rep[0], rep[1]);

    /* The largest tag MPI_TAG_UB promises. */
    int *tag_ub, tflag;
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &tflag));
    OK(MPI_Sendrecv(&mine, 1, MPI_INT, next, *tag_ub, &got, 1, MPI_INT, prev, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
    CHECK(st.MPI_TAG == *tag_ub && got == mine - rank * 100000 + prev * 100000, "tag_ub %d", st.MPI_TAG);

    /* MPI_PROC_NULL: completes at once with the null status. */
    OK(MPI_Send(out, 5, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD));
    OK(MPI_Recv(in, 5, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st));
    OK(MPI_Get_count(&st, MPI_INT, &count));
    CHECK(st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG && count == 0, "proc null status");
    MPI_Request pr;
    OK(MPI_Irecv(in, 5, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &pr));
    OK(MPI_Test(&pr, &flag, &st));
    CHECK(flag && pr == MPI_REQUEST_NULL && st.MPI_SOURCE == MPI_PROC_NULL, "proc null irecv");
    OK(MPI_Probe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st));
    CHECK(st.MPI_SOURCE == MPI_PROC_NULL, "proc null probe");

    /* Wait/test families over a window of requests, receives posted in reverse tag order. */
    enum { W = 16 };
    MPI_Request reqs[2 * W];
    MPI_Status sts[2 * W];
    int win_in[W], win_out[W];
    for (int i = 0; i < W; i++) {
        win_out[i] = fill(rank, i, 50);
        OK(MPI_Irecv(&win_in[i], 1, MPI_INT, prev, W - 1 - i, MPI_COMM_WORLD, &reqs[i]));
    }
    for (int i = 0; i < W; i++) OK(MPI_Isend(&win_out[i], 1, MPI_INT, next, i, MPI_COMM_WORLD, &reqs[W + i]));
    OK(MPI_Waitall(2 * W, reqs, sts));
    bad = 0;
    for (int i = 0; i < W; i++) {
        bad += win_in[i] != fill(prev, W - 1 - i, 50) || sts[i].MPI_TAG != W - 1 - i;
        bad += reqs[i] != MPI_REQUEST_NULL;
    }
    CHECK(bad == 0, "waitall: %d wrong", bad);
    OK(MPI_Waitall(2 * W, reqs, MPI_STATUSES_IGNORE)); /* all null: returns at once */

    for (int i = 0; i < W; i++) OK(MPI_Irecv(&win_in[i], 1, MPI_INT, prev, 60 + i, MPI_COMM_WORLD, &reqs[i]));
    flag = 1;
    OK(MPI_Testall(W, reqs, &flag, MPI_STATUSES_IGNORE));
    CHECK(flag == 0, "testall before the sends");
    MPI_Barrier(MPI_COMM_WORLD); /* nobody sends before every rank tested */
    for (int i = 0; i < W; i++) OK(MPI_Send(&win_out[i], 1, MPI_INT, next, 60 + i, MPI_COMM_WORLD));
    do POLL(MPI_Testall(W, reqs, &flag, sts)); while (!flag);
    bad = 0;
    for (int i = 0; i < W; i++) bad += win_in[i] != fill(prev, i, 50) || reqs[i] != MPI_REQUEST_NULL;
    CHECK(bad == 0, "testall: %d wrong", bad);

    int idx, seen = 0;
    for (int i = 0; i < W; i++) OK(MPI_Irecv(&win_in[i], 1, MPI_INT, prev, 70 + i, MPI_COMM_WORLD, &reqs[i]));
    for (int i = W - 1; i >= 0; i--) OK(MPI_Send(&win_out[i], 1, MPI_INT, next, 70 + i, MPI_COMM_WORLD));
    for (int k = 0; k < W / 2; k++) {
        OK(MPI_Waitany(W, reqs, &idx, &st));
        seen |= (idx >= 0 && idx < W && st.MPI_TAG == 70 + idx && reqs[idx] == MPI_REQUEST_NULL) << k;
    }
    for (int k = W / 2; k < W; k++) {
        do POLL(MPI_Testany(W, reqs, &idx, &flag, &st)); while (!flag);
        seen |= (idx >= 0 && idx < W && st.MPI_TAG == 70 + idx) << k;
    }
    CHECK(seen == (1 << W) - 1, "waitany/testany %x", seen);
    OK(MPI_Waitany(W, reqs, &idx, &st));
    CHECK(idx == MPI_UNDEFINED, "waitany on null requests: %d", idx);
    OK(MPI_Testany(W, reqs, &idx, &flag, &st));
    CHECK(flag && idx == MPI_UNDEFINED, "testany on null requests");

    int outc, idxs[W], total = 0;
    for (int i = 0; i < W; i++) OK(MPI_Irecv(&win_in[i], 1, MPI_INT, prev, 80 + i, MPI_COMM_WORLD, &reqs[i]));
    for (int i = 0; i < W; i++) OK(MPI_Send(&win_out[i], 1, MPI_INT, next, 80 + i, MPI_COMM_WORLD));
    while (total < W / 2) {
        OK(MPI_Waitsome(W, reqs, &outc, idxs, sts));
        CHECK(outc >= 1, "waitsome completes some");
        total += outc;
    }
    while (total < W) {
        POLL(MPI_Testsome(W, reqs, &outc, idxs, sts));
        total += outc;
    }
    CHECK(total == W, "some: %d", total);
    OK(MPI_Waitsome(W, reqs, &outc, idxs, sts));
    CHECK(outc == MPI_UNDEFINED, "waitsome on null requests");

    /* Persistent requests, restarted; Startall; Request_get_status; Request_free. */
    MPI_Request ps[2];
    int pv_out, pv_in;
    OK(MPI_Recv_init(&pv_in, 1, MPI_INT, prev, 90, MPI_COMM_WORLD, &ps[0]));
    OK(MPI_Send_init(&pv_out, 1, MPI_INT, next, 90, MPI_COMM_WORLD, &ps[1]));
    OK(MPI_Wait(&ps[0], &st)); /* inactive: returns at once with the empty status */
    CHECK(st.MPI_SOURCE == MPI_ANY_SOURCE && st.MPI_TAG == MPI_ANY_TAG, "inactive wait");
    bad = 0;
    for (int round = 0; round < 5; round++) {
        pv_out = fill(rank, round, 90);
        if (round % 2) {
            OK(MPI_Startall(2, ps));
        } else {
            OK(MPI_Start(&ps[0]));
            OK(MPI_Start(&ps[1]));
        }
        OK(MPI_Waitall(2, ps, sts));
        bad += pv_in != fill(prev, round, 90) || ps[0] == MPI_REQUEST_NULL;
    }
    CHECK(bad == 0, "persistent: %d bad rounds", bad);
    OK(MPI_Start(&ps[0]));
    pv_out = 7;
    OK(MPI_Start(&ps[1]));
    do POLL(MPI_Request_get_status(ps[0], &flag, &st)); while (!flag);
    CHECK(ps[0] != MPI_REQUEST_NULL && st.MPI_SOURCE == prev, "get_status leaves the request");
    OK(MPI_Wait(&ps[0], MPI_STATUS_IGNORE));
    OK(MPI_Wait(&ps[1], MPI_STATUS_IGNORE));
    OK(MPI_Request_free(&ps[0]));
    OK(MPI_Request_free(&ps[1]));
    CHECK(ps[0] == MPI_REQUEST_NULL && ps[1] == MPI_REQUEST_NULL, "freed persistent");
    /* An active send freed: it completes in the background. */
    OK(MPI_Isend(out, 1, MPI_INT, next, 95, MPI_COMM_WORLD, &sr));
    OK(MPI_Request_free(&sr));
    OK(MPI_Recv(in, 1, MPI_INT, prev, 95, MPI_COMM_WORLD, MPI_STATUS_IGNORE));

    /* Communicators isolate traffic: the same tag on a dup does not match world's. */
    MPI_Comm dup;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    int a = 1, b = 2, ra = 0, rb = 0;
    MPI_Request q[4];
    OK(MPI_Irecv(&ra, 1, MPI_INT, prev, 5, MPI_COMM_WORLD, &q[0]));
    OK(MPI_Irecv(&rb, 1, MPI_INT, prev, 5, dup, &q[1]));
    OK(MPI_Isend(&b, 1, MPI_INT, next, 5, dup, &q[2]));
    OK(MPI_Isend(&a, 1, MPI_INT, next, 5, MPI_COMM_WORLD, &q[3]));
    OK(MPI_Waitall(4, q, MPI_STATUSES_IGNORE));
    CHECK(ra == 1 && rb == 2, "isolation %d %d", ra, rb);
    OK(MPI_Comm_free(&dup));

    /* Operations still running when their communicator is freed complete normally (MPI),
     * their statuses in that communicator's ranks: here the reverse of world's. */
    for (int ignore = 0; ignore < 2; ignore++) {
        MPI_Comm rev;
        OK(MPI_Comm_split(MPI_COMM_WORLD, 0, size - 1 - rank, &rev));
        int from = -1, to_send = 40 + rank;
        MPI_Status st[2];
        OK(MPI_Irecv(&from, 1, MPI_INT, MPI_ANY_SOURCE, 6, rev, &q[0]));
        OK(MPI_Isend(&to_send, 1, MPI_INT, size - 1 - next, 6, rev, &q[1]));
        OK(MPI_Comm_free(&rev));
        CHECK(rev == MPI_COMM_NULL, "freed communicator handle");
        OK(MPI_Waitall(2, q, ignore ? MPI_STATUSES_IGNORE : st));
        CHECK(from == 40 + prev, "message on a freed communicator: %d", from);
        if (!ignore)
            CHECK(st[0].MPI_SOURCE == size - 1 - prev && st[0].MPI_TAG == 6,
                  "status on a freed communicator: source %d tag %d", st[0].MPI_SOURCE, st[0].MPI_TAG);
    }

    waitall_without_statuses(rank, next, prev);

    free(big_out);
    free(big_in);
    int code = summary("p2p");
    MPI_Finalize();
    return code;
}
