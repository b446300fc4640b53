/* The profiling interface: this program defines its own MPI_Send, MPI_Recv, MPI_Init and
 * MPI_Allreduce, each counting its calls and forwarding to the PMPI_ name, as a tool (mpiP,
 * Score-P) does. Its definitions must take precedence over the library's, and the library's
 * PMPI_ functions must run the real implementation (not call back into these wrappers). Then
 * a function rmca does not implement yet links and returns MPI_ERR_UNSUPPORTED_OPERATION
 * through the error handler. Any number of ranks. */
#include "check.h"

static int sends, recvs, inits, allreduces, handler_calls, handler_code;

int MPI_Init(int *argc, char ***argv) {
    inits++;
    return PMPI_Init(argc, argv);
}

int MPI_Send(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm) {
    sends++;
    return PMPI_Send(buf, count, datatype, dest, tag, comm);
}

int MPI_Recv(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
             MPI_Status *status) {
    recvs++;
    return PMPI_Recv(buf, count, datatype, source, tag, comm, status);
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                  MPI_Comm comm) {
    allreduces++;
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

static void on_error(MPI_Comm *comm, int *code, ...) {
    (void)comm;
    handler_calls++;
    handler_code = *code;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    CHECK(inits == 1, "MPI_Init wrapper ran %d times", inits);

    /* A ring through the wrappers: each rank sends once and receives once. */
    int token = rank, got = -1;
    if (n > 1) {
        if (rank == 0) {
            OK(MPI_Send(&token, 1, MPI_INT, 1, 7, MPI_COMM_WORLD));
            OK(MPI_Recv(&got, 1, MPI_INT, n - 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK(got == n - 1, "ring token %d", got);
        } else {
            OK(MPI_Recv(&got, 1, MPI_INT, rank - 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK(got == rank - 1, "ring token %d", got);
            OK(MPI_Send(&token, 1, MPI_INT, (rank + 1) % n, 7, MPI_COMM_WORLD));
        }
        CHECK(sends == 1 && recvs == 1, "wrapper counts: %d sends, %d recvs", sends, recvs);
    }
    /* Calls made inside the library (a sendrecv, a barrier) do not go through the program's
     * MPI_Send/MPI_Recv: the counts stay. */
    OK(MPI_Sendrecv(&token, 1, MPI_INT, rank, 1, &got, 1, MPI_INT, rank, 1, MPI_COMM_WORLD,
                    MPI_STATUS_IGNORE));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    CHECK(sends == (n > 1) && recvs == (n > 1), "library-internal traffic counted: %d %d", sends,
          recvs);

    /* A function rmca does not implement yet: linked, and refused through the handler. */
    MPI_Errhandler eh;
    OK(MPI_Comm_create_errhandler(on_error, &eh));
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, eh));
    MPI_Comm joined = MPI_COMM_NULL;
    int rc = MPI_Comm_join(-1, &joined);
    CHECK(rc == MPI_ERR_UNSUPPORTED_OPERATION, "MPI_Comm_join returned %d", rc);
    CHECK(handler_calls == 1 && handler_code == MPI_ERR_UNSUPPORTED_OPERATION,
          "handler ran %d times with %d", handler_calls, handler_code);
    rc = PMPI_Comm_join(-1, &joined);
    CHECK(rc == MPI_ERR_UNSUPPORTED_OPERATION, "PMPI_Comm_join returned %d", rc);
    /* MPI-IO's refusals go to the file errors' handler (MPI_FILE_NULL's, ERRORS_RETURN),
     * not to the communicator's. */
    MPI_File fh = MPI_FILE_NULL;
    int comm_handler_calls = handler_calls;
    rc = MPI_File_open(MPI_COMM_WORLD, "/tmp/rmca-pmpi-test", MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    CHECK(rc == MPI_ERR_UNSUPPORTED_OPERATION, "MPI_File_open returned %d", rc);
    CHECK(handler_calls == comm_handler_calls, "MPI_File_open's error reached the communicator's handler");
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    OK(MPI_Errhandler_free(&eh));

    /* Handle integers of the standard ABI round-trip. */
    CHECK(MPI_Comm_fromint(MPI_Comm_toint(MPI_COMM_WORLD)) == MPI_COMM_WORLD, "comm toint");
    CHECK(MPI_Type_fromint(MPI_Type_toint(MPI_DOUBLE)) == MPI_DOUBLE, "type toint");
    MPI_Request req;
    OK(MPI_Irecv(&got, 1, MPI_INT, rank, 3, MPI_COMM_WORLD, &req));
    CHECK(MPI_Request_fromint(MPI_Request_toint(req)) == req, "request toint");
    OK(MPI_Send(&token, 1, MPI_INT, rank, 3, MPI_COMM_WORLD));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    char a[16];
    CHECK(MPI_Aint_diff(MPI_Aint_add((MPI_Aint)a, 5), (MPI_Aint)a) == 5, "Aint arithmetic");

    int result = summary("pmpi");
    CHECK(allreduces == 1, "the summary's allreduce went through the wrapper (%d)", allreduces);
    if (allreduces != 1) result = 1;
    MPI_Finalize();
    return result;
}
