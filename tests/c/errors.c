/* Bad input gets its error class through the error handler, never a crash.
 *   errors         MPI_ERRORS_RETURN on MPI_COMM_WORLD: every bad call returns its class,
 *                  and the job still works afterwards.
 *   errors fatal   the default handler (MPI_ERRORS_ARE_FATAL): rank 0's bad send aborts
 *                  the job with a message naming the call and the class.
 * Also checks that mpi.h carries the MPI 5.0 standard ABI's values. */
#include "check.h"
#include <stdint.h>

/* A few of the standard ABI's published values (the header must agree). */
_Static_assert(sizeof(MPI_Status) == 32, "MPI_Status is 8 ints");
_Static_assert(MPI_ANY_SOURCE == -1 && MPI_ANY_TAG == -2 && MPI_PROC_NULL == -3, "sentinels");
_Static_assert(MPI_UNDEFINED == -32766, "MPI_UNDEFINED");
_Static_assert(MPI_ERR_TRUNCATE == 15 && MPI_ERR_IN_STATUS == 19 && MPI_ERR_UNSUPPORTED_OPERATION == 55, "classes");
_Static_assert(MPI_THREAD_FUNNELED == 1024 && MPI_TAG_UB == 501 && MPI_CONGRUENT == 202, "enums");

int main(int argc, char **argv) {
    int rank, size, rc, count;
    MPI_Status st;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK((intptr_t)MPI_COMM_WORLD == 0x101 && (intptr_t)MPI_INT == 0x209 && (intptr_t)MPI_DOUBLE == 0x214 &&
              (intptr_t)MPI_SUM == 0x21 && (intptr_t)MPI_REQUEST_NULL == 0x180 && (intptr_t)MPI_ERRORS_RETURN == 0x143,
          "standard ABI handle values");

    if (argc > 1 && strcmp(argv[1], "fatal") == 0) {
        int x = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) {
            MPI_Send(&x, 1, MPI_INT, size + 3, 0, MPI_COMM_WORLD);
            printf("still alive after a fatal error\n");
        }
        MPI_Finalize();
        return 3;
    }

    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int buf[16] = {0};

#define EXPECT(call, cls)                                                            \
    do {                                                                             \
        rc = (call);                                                                 \
        CHECK(rc == (cls), "%s returned %d, expected %s (%d)", #call, rc, #cls, cls); \
    } while (0)

    EXPECT(MPI_Send(buf, -1, MPI_INT, 0, 0, MPI_COMM_WORLD), MPI_ERR_COUNT);
    EXPECT(MPI_Send(buf, 1, MPI_DATATYPE_NULL, 0, 0, MPI_COMM_WORLD), MPI_ERR_TYPE);
    EXPECT(MPI_Send(buf, 1, (MPI_Datatype)0x9999, 0, 0, MPI_COMM_WORLD), MPI_ERR_TYPE);
    EXPECT(MPI_Send(buf, 1, MPI_INT, size, 0, MPI_COMM_WORLD), MPI_ERR_RANK);
    EXPECT(MPI_Send(buf, 1, MPI_INT, -7, 0, MPI_COMM_WORLD), MPI_ERR_RANK);
    EXPECT(MPI_Send(buf, 1, MPI_INT, MPI_ANY_SOURCE, 0, MPI_COMM_WORLD), MPI_ERR_RANK);
    EXPECT(MPI_Send(buf, 1, MPI_INT, 0, -5, MPI_COMM_WORLD), MPI_ERR_TAG);
    EXPECT(MPI_Send(buf, 1, MPI_INT, 0, MPI_ANY_TAG, MPI_COMM_WORLD), MPI_ERR_TAG);
    EXPECT(MPI_Send(NULL, 5, MPI_INT, 0, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    EXPECT(MPI_Send(buf, 1, MPI_INT, 0, 0, MPI_COMM_NULL), MPI_ERR_COMM);
    EXPECT(MPI_Send(buf, 1, MPI_INT, 0, 0, (MPI_Comm)0x7777), MPI_ERR_COMM);
    EXPECT(MPI_Recv(buf, 1, MPI_INT, 0, -7, MPI_COMM_WORLD, &st), MPI_ERR_TAG);
    EXPECT(MPI_Recv(buf, 1, MPI_INT, size + 1, 0, MPI_COMM_WORLD, &st), MPI_ERR_RANK);
    EXPECT(MPI_Recv(buf, -3, MPI_INT, 0, 0, MPI_COMM_WORLD, &st), MPI_ERR_COUNT);
    MPI_Request req;
    EXPECT(MPI_Isend(buf, 1, MPI_INT, size, 0, MPI_COMM_WORLD, &req), MPI_ERR_RANK);
    EXPECT(MPI_Irecv(buf, 1, MPI_INT, 0, -9, MPI_COMM_WORLD, &req), MPI_ERR_TAG);
    /* The per-message fast paths (a predefined datatype, the buffer used in place) refuse
     * what the general path refuses, with the same classes. */
    EXPECT(MPI_Send(MPI_IN_PLACE, 1, MPI_INT, 0, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    EXPECT(MPI_Ssend(buf, 1, MPI_INT, 0, MPI_ANY_TAG, MPI_COMM_WORLD), MPI_ERR_TAG);
    EXPECT(MPI_Recv(MPI_IN_PLACE, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, &st), MPI_ERR_BUFFER);
    EXPECT(MPI_Recv(NULL, 2, MPI_INT, 0, 0, MPI_COMM_WORLD, &st), MPI_ERR_BUFFER);
    EXPECT(MPI_Recv(buf, 1, MPI_INT, 0, 0, MPI_COMM_NULL, &st), MPI_ERR_COMM);
    EXPECT(MPI_Recv(buf, 1, (MPI_Datatype)0x2ff, 0, 0, MPI_COMM_WORLD, &st), MPI_ERR_TYPE);
    EXPECT(MPI_Recv(buf, 1, MPI_INT, -5, 0, MPI_COMM_WORLD, &st), MPI_ERR_RANK);
    EXPECT(MPI_Isend(NULL, 3, MPI_INT, 0, 0, MPI_COMM_WORLD, &req), MPI_ERR_BUFFER);
    EXPECT(MPI_Isend(MPI_IN_PLACE, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, &req), MPI_ERR_BUFFER);
    EXPECT(MPI_Isend(buf, -2, MPI_INT, 0, 0, MPI_COMM_WORLD, &req), MPI_ERR_COUNT);
    EXPECT(MPI_Isend(buf, 1, MPI_INT, 0, MPI_ANY_TAG, MPI_COMM_WORLD, &req), MPI_ERR_TAG);
    EXPECT(MPI_Isend(buf, 1, MPI_INT, 0, 0, (MPI_Comm)0x7777, &req), MPI_ERR_COMM);
    EXPECT(MPI_Isend(buf, 1, MPI_DATATYPE_NULL, 0, 0, MPI_COMM_WORLD, &req), MPI_ERR_TYPE);
    EXPECT(MPI_Issend(buf, 1, MPI_INT, -7, 0, MPI_COMM_WORLD, &req), MPI_ERR_RANK);
    EXPECT(MPI_Irsend(buf, 1, MPI_INT, size + 2, 0, MPI_COMM_WORLD, &req), MPI_ERR_RANK);
    EXPECT(MPI_Irecv(NULL, 3, MPI_INT, 0, 0, MPI_COMM_WORLD, &req), MPI_ERR_BUFFER);
    EXPECT(MPI_Irecv(MPI_IN_PLACE, 3, MPI_INT, 0, 0, MPI_COMM_WORLD, &req), MPI_ERR_BUFFER);
    EXPECT(MPI_Irecv(buf, -1, MPI_INT, 0, 0, MPI_COMM_WORLD, &req), MPI_ERR_COUNT);
    EXPECT(MPI_Irecv(buf, 1, MPI_INT, size, 0, MPI_COMM_WORLD, &req), MPI_ERR_RANK);
    EXPECT(MPI_Irecv(buf, 1, MPI_INT, 0, 0, MPI_COMM_NULL, &req), MPI_ERR_COMM);
    EXPECT(MPI_Irecv(buf, 1, (MPI_Datatype)0x9999, 0, 0, MPI_COMM_WORLD, &req), MPI_ERR_TYPE);
    EXPECT(MPI_Probe(size, 0, MPI_COMM_WORLD, &st), MPI_ERR_RANK);
    /* MPI_DATATYPE_NULL with a count of 0 is an empty message, as MPICH takes it (its
     * pt2pt/recvnull receives one from MPI_PROC_NULL); with data it is refused (above). */
    {
        int me, got = -1;
        MPI_Comm_rank(MPI_COMM_WORLD, &me);
        OK(MPI_Irecv(NULL, 0, MPI_DATATYPE_NULL, MPI_PROC_NULL, 10, MPI_COMM_WORLD, &req));
        OK(MPI_Wait(&req, &st));
        CHECK(st.MPI_SOURCE == MPI_PROC_NULL, "source %d after an empty receive from MPI_PROC_NULL", st.MPI_SOURCE);
        OK(MPI_Recv(NULL, 0, MPI_DATATYPE_NULL, MPI_PROC_NULL, 10, MPI_COMM_WORLD, &st));
        CHECK(st.MPI_SOURCE == MPI_PROC_NULL, "source %d after an empty receive from MPI_PROC_NULL", st.MPI_SOURCE);
        OK(MPI_Irecv(NULL, 0, MPI_DATATYPE_NULL, me, 11, MPI_COMM_WORLD, &req));
        OK(MPI_Send(NULL, 0, MPI_DATATYPE_NULL, me, 11, MPI_COMM_WORLD));
        OK(MPI_Wait(&req, &st));
        OK(MPI_Get_count(&st, MPI_INT, &got));
        CHECK(st.MPI_SOURCE == me && st.MPI_TAG == 11 && got == 0, "empty self message: source %d tag %d count %d",
              st.MPI_SOURCE, st.MPI_TAG, got);
        EXPECT(MPI_Recv(buf, 1, MPI_DATATYPE_NULL, MPI_PROC_NULL, 10, MPI_COMM_WORLD, &st), MPI_ERR_TYPE);
        EXPECT(MPI_Irecv_c(buf, 2, MPI_DATATYPE_NULL, me, 11, MPI_COMM_WORLD, &req), MPI_ERR_TYPE);
    }
    /* A NULL request pointer is refused before anything starts: no message leaves, and no
     * receive is left posted to take one. */
    {
        int me, flag = -1, v = 5;
        MPI_Comm_rank(MPI_COMM_WORLD, &me);
        EXPECT(MPI_Isend(&v, 1, MPI_INT, me, 77, MPI_COMM_WORLD, NULL), MPI_ERR_ARG);
        EXPECT(MPI_Issend(&v, 1, MPI_INT, me, 77, MPI_COMM_WORLD, NULL), MPI_ERR_ARG);
        for (int i = 0; i < 1000 && flag != 1; i++) MPI_Iprobe(me, 77, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
        CHECK(flag == 0, "a send refused for its NULL request was sent anyway");
        if (flag) MPI_Recv(&v, 1, MPI_INT, me, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        EXPECT(MPI_Irecv(buf, 1, MPI_INT, me, 78, MPI_COMM_WORLD, NULL), MPI_ERR_ARG);
        MPI_Send(&v, 1, MPI_INT, me, 78, MPI_COMM_WORLD);
        flag = 0;
        for (int i = 0; i < 1000000 && !flag; i++) MPI_Iprobe(me, 78, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
        CHECK(flag == 1, "a receive refused for its NULL request took the message");
        if (flag) MPI_Recv(&v, 1, MPI_INT, me, 78, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    MPI_Comm freed;
    MPI_Comm_dup(MPI_COMM_WORLD, &freed);
    /* Used for messages first: the library keeps the last communicator it looked up. */
    OK(MPI_Send(buf, 1, MPI_INT, rank, 5, freed));
    OK(MPI_Recv(buf + 1, 1, MPI_INT, rank, 5, freed, MPI_STATUS_IGNORE));
    MPI_Comm stale = freed;
    MPI_Comm_free(&freed);
    EXPECT(MPI_Send(buf, 1, MPI_INT, 0, 0, stale), MPI_ERR_COMM);
    EXPECT(MPI_Recv(buf, 1, MPI_INT, 0, 0, stale, MPI_STATUS_IGNORE), MPI_ERR_COMM);
    EXPECT(MPI_Barrier(stale), MPI_ERR_COMM);
    /* The next communicator may reuse the freed handle: messages on it are its own (one rank
     * each here, so rank 1 is refused whatever the world's size). */
    {
        MPI_Comm alone;
        OK(MPI_Comm_split(MPI_COMM_WORLD, rank, 0, &alone));
        OK(MPI_Send(buf, 1, MPI_INT, 0, 6, alone));
        OK(MPI_Recv(buf + 1, 1, MPI_INT, 0, 6, alone, MPI_STATUS_IGNORE));
        EXPECT(MPI_Send(buf, 1, MPI_INT, 1, 6, alone), MPI_ERR_RANK);
        EXPECT(MPI_Recv(buf, 1, MPI_INT, 1, 6, alone, MPI_STATUS_IGNORE), MPI_ERR_RANK);
        MPI_Comm_free(&alone);
    }

    req = (MPI_Request)0x4242;
    EXPECT(MPI_Wait(&req, &st), MPI_ERR_REQUEST);
    MPI_Request nonpersistent;
    MPI_Irecv(buf, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &nonpersistent);
    EXPECT(MPI_Start(&nonpersistent), MPI_ERR_REQUEST);
    MPI_Wait(&nonpersistent, MPI_STATUS_IGNORE);
    /* A bad MPI_Start goes to the handler of the request's communicator: errors return on
     * `ret` even while MPI_COMM_WORLD's handler is fatal (a fatal handler would end the job). */
    {
        MPI_Comm ret;
        MPI_Comm_dup(MPI_COMM_WORLD, &ret);
        MPI_Comm_set_errhandler(ret, MPI_ERRORS_RETURN);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
        MPI_Request other;
        MPI_Irecv(buf, 1, MPI_INT, MPI_PROC_NULL, 0, ret, &other);
        EXPECT(MPI_Start(&other), MPI_ERR_REQUEST);
        MPI_Wait(&other, MPI_STATUS_IGNORE);
        /* So do the per-message fast paths' errors. */
        EXPECT(MPI_Send(buf, 1, MPI_INT, size, 0, ret), MPI_ERR_RANK);
        EXPECT(MPI_Recv(buf, 1, MPI_INT, 0, -4, ret, &st), MPI_ERR_TAG);
        EXPECT(MPI_Isend(buf, 1, MPI_INT, 0, -1, ret, &other), MPI_ERR_TAG);
        EXPECT(MPI_Irecv(buf, 1, MPI_INT, size + 5, 0, ret, &other), MPI_ERR_RANK);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_free(&ret);
    }

    EXPECT(MPI_Bcast(buf, 1, MPI_INT, size, MPI_COMM_WORLD), MPI_ERR_ROOT);
    EXPECT(MPI_Bcast(buf, 1, MPI_INT, -1, MPI_COMM_WORLD), MPI_ERR_ROOT);
    EXPECT(MPI_Reduce(buf, buf + 4, 1, MPI_INT, MPI_SUM, size + 2, MPI_COMM_WORLD), MPI_ERR_ROOT);
    EXPECT(MPI_Allreduce(buf, buf + 4, 1, MPI_INT, (MPI_Op)0x5555, MPI_COMM_WORLD), MPI_ERR_OP);
    EXPECT(MPI_Allreduce(buf, buf + 4, 1, MPI_INT, MPI_OP_NULL, MPI_COMM_WORLD), MPI_ERR_OP);
    EXPECT(MPI_Allreduce(buf, buf + 4, 1, MPI_BYTE, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_OP);
    EXPECT(MPI_Allreduce(buf, buf + 4, 1, MPI_DOUBLE, MPI_BAND, MPI_COMM_WORLD), MPI_ERR_OP);
    EXPECT(MPI_Allreduce(buf, buf + 4, 1, MPI_DOUBLE, MPI_MAXLOC, MPI_COMM_WORLD), MPI_ERR_OP);
    EXPECT(MPI_Allreduce(buf, buf + 1, 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    EXPECT(MPI_Allreduce(buf, buf + 4, -1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_COUNT);
    EXPECT(MPI_Sendrecv(buf, 4, MPI_INT, 0, 0, buf + 2, 4, MPI_INT, 0, 0, MPI_COMM_WORLD, &st), MPI_ERR_BUFFER);

    /* Mismatched type signatures every rank can see. */
    int gbuf[64];
    EXPECT(MPI_Allgather(buf, 2, MPI_INT, gbuf, 1, MPI_INT, MPI_COMM_WORLD), MPI_ERR_COUNT);
    EXPECT(MPI_Alltoall(buf, 1, MPI_INT, gbuf, 1, MPI_SHORT, MPI_COMM_WORLD), MPI_ERR_COUNT);
    EXPECT(MPI_Alltoall(buf, 1, MPI_INT, gbuf, 1, (MPI_Datatype)0x2ff, MPI_COMM_WORLD), MPI_ERR_TYPE);

    MPI_Comm nc;
    EXPECT(MPI_Comm_split(MPI_COMM_WORLD, -4, 0, &nc), MPI_ERR_ARG);
    int *attr, flag;
    EXPECT(MPI_Comm_get_attr(MPI_COMM_WORLD, 9999, &attr, &flag), MPI_ERR_KEYVAL);
    EXPECT(MPI_Bsend(buf, 1, MPI_INT, 0, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    char small[64];
    MPI_Buffer_attach(small, sizeof small);
    EXPECT(MPI_Bsend(buf, 1, MPI_INT, 0, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER); /* < overhead */
    void *det;
    int dsz;
    MPI_Buffer_detach(&det, &dsz);
    EXPECT(MPI_Init(&argc, &argv), MPI_ERR_OTHER);

    /* Truncation: the receive gets what fits and MPI_ERR_TRUNCATE, blocking and not. */
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int ten[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, five[5] = {0};
    MPI_Request sr, rr[2];
    MPI_Isend(ten, 10, MPI_INT, next, 1, MPI_COMM_WORLD, &sr);
    EXPECT(MPI_Recv(five, 5, MPI_INT, prev, 1, MPI_COMM_WORLD, &st), MPI_ERR_TRUNCATE);
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(count == 5 && five[4] == 4 && st.MPI_SOURCE == prev, "truncated recv: count %d", count);
    MPI_Wait(&sr, MPI_STATUS_IGNORE);
    char msg[MPI_MAX_ERROR_STRING];
    int len;
    MPI_Error_string(MPI_ERR_TRUNCATE, msg, &len);
    CHECK(strstr(msg, "truncated") != NULL, "truncate string '%s'", msg);
    MPI_Isend(ten, 10, MPI_INT, next, 2, MPI_COMM_WORLD, &sr);
    MPI_Irecv(five, 5, MPI_INT, prev, 2, MPI_COMM_WORLD, &rr[0]);
    MPI_Irecv(buf, 1, MPI_INT, MPI_PROC_NULL, 2, MPI_COMM_WORLD, &rr[1]);
    MPI_Status sts[2];
    EXPECT(MPI_Waitall(2, rr, sts), MPI_ERR_IN_STATUS);
    CHECK(sts[0].MPI_ERROR == MPI_ERR_TRUNCATE && sts[1].MPI_ERROR == MPI_SUCCESS, "statuses %d %d",
          sts[0].MPI_ERROR, sts[1].MPI_ERROR);
    MPI_Wait(&sr, MPI_STATUS_IGNORE);

    /* The job still works. */
    int one = 1, sum = 0;
    OK(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(sum == size, "allreduce after errors %d", sum);
    int code = summary("errors");
    MPI_Finalize();
    return code;
}
