/* Non-blocking collectives, checked against a serial computation, on MPI_COMM_WORLD and a
 * reversed split of it: every root, MPI_IN_PLACE, derived datatypes, user and pair
 * operations, several outstanding at once, completed by every completion call (mixed with
 * point-to-point requests), MPI_Request_free and MPI_Request_get_status, and bad input under
 * MPI_ERRORS_RETURN. */
#include "check.h"
#include <stdint.h>

#define N 200

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

static void rank_matrix(int r, long m[4]) {
    m[0] = r + 1;
    m[1] = 1;
    m[2] = r % 2;
    m[3] = 2;
}

/* Wait for `req` by polling MPI_Test (the collective progresses in the polls). */
static void test_until_done(MPI_Request *req) {
    int flag = 0;
    while (!flag) POLL(MPI_Test(req, &flag, MPI_STATUS_IGNORE));
    CHECK(*req == MPI_REQUEST_NULL, "a completed request is freed");
}

static void test_comm(MPI_Comm comm) {
    int rank, size, bad;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    MPI_Request req;
    MPI_Status st;

    OK(MPI_Ibarrier(comm, &req));
    OK(MPI_Wait(&req, &st));
    CHECK(req == MPI_REQUEST_NULL, "ibarrier request freed");

    /* Ibcast from every root; a large one completed by MPI_Test. */
    for (int r = 0; r < size; r++) {
        double b[N];
        for (int i = 0; i < N; i++) b[i] = rank == r ? r * 1000 + i : -1;
        OK(MPI_Ibcast(b, N, MPI_DOUBLE, r, comm, &req));
        OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        bad = 0;
        for (int i = 0; i < N; i++) bad += b[i] != r * 1000 + i;
        CHECK(bad == 0, "ibcast root %d: %d wrong", r, bad);
    }
    int big = 1 << 17;
    int *bb = malloc(big * sizeof(int));
    for (int i = 0; i < big; i++) bb[i] = rank == size - 1 ? i ^ 0x3c3c : 0;
    OK(MPI_Ibcast(bb, big, MPI_INT, size - 1, comm, &req));
    test_until_done(&req);
    bad = 0;
    for (int i = 0; i < big; i++) bad += bb[i] != (i ^ 0x3c3c);
    CHECK(bad == 0, "large ibcast: %d wrong", bad);
    free(bb);

    /* Iallreduce, plain and in place. */
    int iv[N], ir[N];
    for (int i = 0; i < N; i++) iv[i] = rank * 3 + i;
    OK(MPI_Iallreduce(iv, ir, N, MPI_INT, MPI_SUM, comm, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    bad = 0;
    for (int i = 0; i < N; i++) bad += ir[i] != size * i + 3 * size * (size - 1) / 2;
    CHECK(bad == 0, "iallreduce sum: %d wrong", bad);
    for (int i = 0; i < N; i++) ir[i] = rank - i;
    OK(MPI_Iallreduce(MPI_IN_PLACE, ir, N, MPI_INT, MPI_MAX, comm, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(ir[9] == size - 1 - 9, "in-place iallreduce max %d", ir[9]);

    /* Ireduce to every root, plain and in place at the root. */
    for (int r = 0; r < size; r++) {
        double dv[3] = {rank, 1.5, -rank}, dr[3] = {0, 0, 0};
        OK(MPI_Ireduce(dv, rank == r ? dr : NULL, 3, MPI_DOUBLE, MPI_SUM, r, comm, &req));
        OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        if (rank == r) {
            double s = size * (size - 1) / 2.0;
            CHECK(dr[0] == s && dr[1] == 1.5 * size && dr[2] == -s, "ireduce root %d: %g %g %g",
                  r, dr[0], dr[1], dr[2]);
        }
        long lv[2] = {rank + 1, 2};
        if (rank == r) {
            OK(MPI_Ireduce(MPI_IN_PLACE, lv, 2, MPI_LONG, MPI_PROD, r, comm, &req));
        } else {
            OK(MPI_Ireduce(lv, NULL, 2, MPI_LONG, MPI_PROD, r, comm, &req));
        }
        OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        if (rank == r) {
            long f = 1;
            for (int i = 1; i <= size; i++) f *= i;
            CHECK(lv[0] == f && lv[1] == 1L << size, "in-place ireduce root %d: %ld %ld", r,
                  lv[0], lv[1]);
        }
    }

    /* A non-commutative user operation combines in rank order; MINLOC on pairs. */
    MPI_Op mm;
    OK(MPI_Op_create(matmul, 0, &mm));
    MPI_Datatype mat;
    OK(MPI_Type_contiguous(4, MPI_LONG, &mat));
    OK(MPI_Type_commit(&mat));
    long mine[4], prod[4], want[4] = {1, 0, 0, 1};
    rank_matrix(rank, mine);
    for (int r = 0; r < size; r++) {
        long m[4], t[4];
        rank_matrix(r, m);
        memcpy(t, want, sizeof t);
        int len = 1;
        matmul(t, m, &len, &mat); /* m = want * m */
        memcpy(want, m, sizeof want);
    }
    OK(MPI_Iallreduce(mine, prod, 1, mat, mm, comm, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(memcmp(prod, want, sizeof want) == 0, "iallreduce user op: %ld %ld %ld %ld", prod[0],
          prod[1], prod[2], prod[3]);
    memset(prod, 0, sizeof prod);
    OK(MPI_Ireduce(mine, prod, 1, mat, mm, 0, comm, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    if (rank == 0)
        CHECK(memcmp(prod, want, sizeof want) == 0, "ireduce user op: %ld %ld", prod[0],
              prod[1]);
    struct {
        int v, i;
    } pin = {(rank * 7) % size, rank}, pout = {-1, -1};
    OK(MPI_Iallreduce(&pin, &pout, 1, MPI_2INT, MPI_MINLOC, comm, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(pout.v == 0 && pout.i == 0, "iallreduce minloc: %d at %d", pout.v, pout.i);
    OK(MPI_Type_free(&mat));
    OK(MPI_Op_free(&mm));

    /* Igather and Iscatter from every root, plain and in place at the root. */
    for (int r = 0; r < size; r++) {
        int g[2] = {rank, rank * rank}, all[2 * 8];
        for (int i = 0; i < 2 * size; i++) all[i] = -1;
        OK(MPI_Igather(g, 2, MPI_INT, all, 2, MPI_INT, r, comm, &req));
        OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        if (rank == r) {
            bad = 0;
            for (int i = 0; i < size; i++) bad += all[2 * i] != i || all[2 * i + 1] != i * i;
            CHECK(bad == 0, "igather root %d: %d wrong", r, bad);
            for (int i = 0; i < 2 * size; i++) all[i] = -1;
            all[2 * r] = r;
            all[2 * r + 1] = r * r;
            OK(MPI_Igather(MPI_IN_PLACE, 2, MPI_INT, all, 2, MPI_INT, r, comm, &req));
        } else {
            OK(MPI_Igather(g, 2, MPI_INT, NULL, 0, MPI_INT, r, comm, &req));
        }
        OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        if (rank == r) {
            bad = 0;
            for (int i = 0; i < size; i++) bad += all[2 * i] != i || all[2 * i + 1] != i * i;
            CHECK(bad == 0, "in-place igather root %d: %d wrong", r, bad);
        }

        int src[3 * 8], got[3] = {-1, -1, -1};
        for (int i = 0; i < 3 * size; i++) src[i] = rank == r ? 100 * r + i : -7;
        OK(MPI_Iscatter(src, 3, MPI_INT, got, 3, MPI_INT, r, comm, &req));
        OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        CHECK(got[0] == 100 * r + 3 * rank && got[2] == 100 * r + 3 * rank + 2,
              "iscatter root %d: %d %d", r, got[0], got[2]);
        if (rank == r) {
            OK(MPI_Iscatter(src, 3, MPI_INT, MPI_IN_PLACE, 3, MPI_INT, r, comm, &req));
        } else {
            got[0] = got[2] = -1;
            OK(MPI_Iscatter(NULL, 0, MPI_INT, got, 3, MPI_INT, r, comm, &req));
        }
        OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        CHECK(got[0] == 100 * r + 3 * rank && got[2] == 100 * r + 3 * rank + 2,
              "in-place iscatter root %d: %d %d", r, got[0], got[2]);
        if (rank == r)
            CHECK(src[3 * r] == 100 * r + 3 * r, "in-place iscatter keeps the root's block");
    }

    /* Iallgather and Ialltoall, plain and in place. */
    short sg = (short)(rank + 40), sall[8];
    OK(MPI_Iallgather(&sg, 1, MPI_SHORT, sall, 1, MPI_SHORT, comm, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    bad = 0;
    for (int i = 0; i < size; i++) bad += sall[i] != i + 40;
    CHECK(bad == 0, "iallgather: %d wrong", bad);
    for (int i = 0; i < size; i++) sall[i] = i == rank ? (short)(rank - 40) : 0;
    OK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, sall, 1, MPI_SHORT, comm, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    bad = 0;
    for (int i = 0; i < size; i++) bad += sall[i] != i - 40;
    CHECK(bad == 0, "in-place iallgather: %d wrong", bad);
    int a2a_s[2 * 8], a2a_r[2 * 8];
    for (int i = 0; i < size; i++) {
        a2a_s[2 * i] = rank * 100 + i;
        a2a_s[2 * i + 1] = -(rank * 100 + i);
    }
    OK(MPI_Ialltoall(a2a_s, 2, MPI_INT, a2a_r, 2, MPI_INT, comm, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    bad = 0;
    for (int i = 0; i < size; i++)
        bad += a2a_r[2 * i] != i * 100 + rank || a2a_r[2 * i + 1] != -(i * 100 + rank);
    CHECK(bad == 0, "ialltoall: %d wrong", bad);
    OK(MPI_Ialltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, a2a_s, 2, MPI_INT, comm, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(memcmp(a2a_s, a2a_r, 2 * size * sizeof(int)) == 0, "in-place ialltoall");

    /* A derived datatype (every other double) staged and unpacked at completion. */
    MPI_Datatype every2;
    OK(MPI_Type_vector(4, 1, 2, MPI_DOUBLE, &every2));
    OK(MPI_Type_commit(&every2));
    double sp[8], rp[8];
    for (int i = 0; i < 8; i++) {
        sp[i] = rank + i;
        rp[i] = -1;
    }
    OK(MPI_Iallreduce(sp, rp, 1, every2, MPI_SUM, comm, &req));
    OK(MPI_Wait(&req, &st));
    bad = 0;
    for (int i = 0; i < 8; i++)
        bad += rp[i] != (i % 2 ? -1 : size * i + size * (size - 1) / 2.0);
    CHECK(bad == 0, "iallreduce on a vector type: %d wrong", bad);
    for (int i = 0; i < 8; i++) rp[i] = rank == 0 ? 10 + i : -1;
    OK(MPI_Ibcast(rp, 1, every2, 0, comm, &req));
    MPI_Request pair[2] = {req, MPI_REQUEST_NULL};
    OK(MPI_Waitall(2, pair, MPI_STATUSES_IGNORE));
    bad = 0;
    for (int i = 0; i < 8; i++) bad += rp[i] != (i % 2 && rank != 0 ? -1 : 10 + i);
    CHECK(bad == 0, "ibcast on a vector type: %d wrong", bad);
    OK(MPI_Type_free(&every2));

    /* Several outstanding at once, mixed with point-to-point requests, completed by the
     * wait and test families. */
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    for (int round = 0; round < 6; round++) {
        MPI_Request rs[5];
        int s1 = rank + round, r1 = rank == 0 ? 77 + round : -1, tok = rank * 10 + round, got = -1, sum = -1;
        int gathered[8];
        OK(MPI_Iallreduce(&s1, &sum, 1, MPI_INT, MPI_SUM, comm, &rs[0]));
        OK(MPI_Irecv(&got, 1, MPI_INT, left, 7, comm, &rs[1]));
        OK(MPI_Iallgather(&s1, 1, MPI_INT, gathered, 1, MPI_INT, comm, &rs[2]));
        OK(MPI_Isend(&tok, 1, MPI_INT, right, 7, comm, &rs[3]));
        OK(MPI_Ibcast(&r1, 1, MPI_INT, 0, comm, &rs[4]));
        MPI_Status sts[5];
        int idx, flag, outc, ids[5], done = 0;
        switch (round) {
        case 0:
            OK(MPI_Waitall(5, rs, sts));
            CHECK(sts[1].MPI_SOURCE == left && sts[1].MPI_TAG == 7, "waitall p2p status");
            break;
        case 1:
            OK(MPI_Waitall(5, rs, MPI_STATUSES_IGNORE));
            break;
        case 2:
            for (flag = 0; !flag;) POLL(MPI_Testall(5, rs, &flag, sts));
            break;
        case 3:
            for (int k = 0; k < 5; k++) {
                OK(MPI_Waitany(5, rs, &idx, &st));
                CHECK(idx >= 0 && idx < 5 && rs[idx] == MPI_REQUEST_NULL, "waitany %d", idx);
            }
            OK(MPI_Waitany(5, rs, &idx, &st));
            CHECK(idx == MPI_UNDEFINED, "waitany on no active request: %d", idx);
            break;
        case 4:
            while (done < 5) {
                POLL(MPI_Testany(5, rs, &idx, &flag, &st));
                if (flag && idx != MPI_UNDEFINED) done++;
            }
            break;
        default:
            while (done < 5) {
                if (round % 2)
                    POLL(MPI_Waitsome(5, rs, &outc, ids, sts));
                else
                    POLL(MPI_Testsome(5, rs, &outc, ids, sts));
                if (outc != MPI_UNDEFINED) done += outc;
            }
            break;
        }
        bad = 0;
        for (int k = 0; k < 5; k++) bad += rs[k] != MPI_REQUEST_NULL;
        CHECK(bad == 0, "round %d: %d requests not freed", round, bad);
        int want_sum = size * round + size * (size - 1) / 2;
        CHECK(sum == want_sum, "round %d: iallreduce %d, want %d", round, sum, want_sum);
        CHECK(got == left * 10 + round, "round %d: irecv got %d", round, got);
        CHECK(r1 == 77 + round, "round %d: ibcast got %d", round, r1);
        bad = 0;
        for (int i = 0; i < size; i++) bad += gathered[i] != i + round;
        CHECK(bad == 0, "round %d: iallgather %d wrong", round, bad);
    }

    /* MPI_Request_get_status leaves the request; MPI_Request_free lets it complete in the
     * background (here: finished by the collectives after it). */
    int x = rank, y = -1;
    OK(MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_BOR, comm, &req));
    for (int flag = 0; !flag;) POLL(MPI_Request_get_status(req, &flag, &st));
    CHECK(req != MPI_REQUEST_NULL, "get_status keeps the handle");
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    int bor = 0;
    for (int i = 0; i < size; i++) bor |= i;
    CHECK(y == bor, "iallreduce bor after get_status: %d", y);
    static int freed_in = 3, freed_out;
    OK(MPI_Iallreduce(&freed_in, &freed_out, 1, MPI_INT, MPI_SUM, comm, &req));
    OK(MPI_Request_free(&req));
    CHECK(req == MPI_REQUEST_NULL, "request_free sets MPI_REQUEST_NULL");
    OK(MPI_Ibarrier(comm, &req));
    OK(MPI_Request_free(&req));
    OK(MPI_Barrier(comm));
    int after = 1, total = 0;
    OK(MPI_Allreduce(&after, &total, 1, MPI_INT, MPI_SUM, comm));
    CHECK(total == size, "a collective after freed ones: %d", total);
}

/* Bad input: the class through MPI_ERRORS_RETURN, and nothing started (every rank refuses
 * the same call, so the collectives after it still match). */
static void bad_input(void) {
    MPI_Comm comm;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    OK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    int size, v = 1, w = 0;
    MPI_Comm_size(comm, &size);
    MPI_Request req = MPI_REQUEST_NULL;
    CHECK(MPI_Ibcast(&v, 1, MPI_INT, size, comm, &req) == MPI_ERR_ROOT, "ibcast bad root");
    CHECK(MPI_Ireduce(&v, &w, 1, MPI_INT, MPI_SUM, -1, comm, &req) == MPI_ERR_ROOT,
          "ireduce bad root");
    CHECK(MPI_Iallreduce(&v, &w, -2, MPI_INT, MPI_SUM, comm, &req) == MPI_ERR_COUNT,
          "iallreduce negative count");
    CHECK(MPI_Iallreduce(&v, &w, 1, MPI_INT, MPI_MINLOC, comm, &req) == MPI_ERR_OP,
          "iallreduce minloc on int");
    CHECK(MPI_Iallreduce(&v, &w, 1, MPI_DATATYPE_NULL, MPI_SUM, comm, &req) == MPI_ERR_TYPE,
          "iallreduce null type");
    CHECK(MPI_Iallgather(&v, 1, MPI_INT, &w, 1, MPI_INT, comm, NULL) == MPI_ERR_ARG,
          "iallgather NULL request");
    /* An invalid communicator's error goes to MPI_COMM_WORLD's handler. */
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CHECK(MPI_Ibarrier(MPI_COMM_NULL, &req) == MPI_ERR_COMM, "ibarrier MPI_COMM_NULL");
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    CHECK(req == MPI_REQUEST_NULL, "no request made by a refused call");
    /* Still in step: a collective after the refused ones. */
    OK(MPI_Iallreduce(&v, &w, 1, MPI_INT, MPI_SUM, comm, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(w == size, "iallreduce after bad input: %d", w);
    OK(MPI_Comm_free(&comm));
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 8) {
        if (rank == 0) printf("nbc.c runs on at most 8 ranks\n");
        MPI_Finalize();
        return 1;
    }
    test_comm(MPI_COMM_WORLD);
    MPI_Comm rev;
    OK(MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &rev));
    test_comm(rev);
    OK(MPI_Comm_free(&rev));
    bad_input();
    int rc = summary("nbc");
    MPI_Finalize();
    return rc;
}
