/* Error handling and environment: the Comm_get_errhandler .. Errhandler_free idiom,
 * MPI_ERRORS_ABORT's identity, error classes, codes and strings the program adds (and
 * MPI_LASTUSEDCODE), handlers of other kinds (MPI_FILE_NULL's), status setters, request
 * status over arrays, info hints on communicators, MPI_Info_create_env, MPI_Alloc_mem,
 * buffered-send buffers with MPI_Count sizes and flushes, the ABI queries, bad input. */
#include "check.h"

static int handler_calls, handler_code;
static MPI_Comm handler_comm;

static void comm_handler(MPI_Comm *comm, int *code, ...) {
    handler_calls++;
    handler_code = *code;
    handler_comm = *comm;
}

static int file_calls, file_code;
static MPI_File file_seen;

static void file_handler(MPI_File *file, int *code, ...) {
    file_calls++;
    file_code = *code;
    file_seen = *file;
}

static void win_handler(MPI_Win *win, int *code, ...) {
    (void)win;
    (void)code;
}

static void session_handler(MPI_Session *session, int *code, ...) {
    (void)session;
    (void)code;
}

static void errhandlers(void) {
    /* The save / replace / restore / free idiom: the saved handler is predefined. */
    MPI_Errhandler saved, now;
    OK(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &saved));
    CHECK(saved == MPI_ERRORS_RETURN, "world's handler is ERRORS_RETURN (set by main)");
    MPI_Comm dup;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    OK(MPI_Comm_set_errhandler(dup, MPI_ERRORS_ARE_FATAL));
    OK(MPI_Comm_get_errhandler(dup, &saved));
    OK(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN));
    CHECK(MPI_Send(NULL, -1, MPI_INT, 0, 0, dup) == MPI_ERR_COUNT, "returned under the swap");
    OK(MPI_Comm_set_errhandler(dup, saved));
    OK(MPI_Errhandler_free(&saved));
    CHECK(saved == MPI_ERRHANDLER_NULL, "freed handle is MPI_ERRHANDLER_NULL");
    OK(MPI_Comm_get_errhandler(dup, &now));
    CHECK(now == MPI_ERRORS_ARE_FATAL, "fatal restored");
    OK(MPI_Errhandler_free(&now));

    /* MPI_ERRORS_ABORT keeps its identity. */
    OK(MPI_Comm_set_errhandler(dup, MPI_ERRORS_ABORT));
    OK(MPI_Comm_get_errhandler(dup, &now));
    CHECK(now == MPI_ERRORS_ABORT, "ERRORS_ABORT reads back as itself (got %p)", (void *)now);
    /* And a duplicate inherits it. */
    MPI_Comm dup2;
    OK(MPI_Comm_dup(dup, &dup2));
    OK(MPI_Comm_get_errhandler(dup2, &now));
    CHECK(now == MPI_ERRORS_ABORT, "inherited ERRORS_ABORT");
    OK(MPI_Comm_free(&dup2));
    OK(MPI_Comm_free(&dup));

    /* Bad handles. */
    MPI_Errhandler null = MPI_ERRHANDLER_NULL;
    CHECK(MPI_Errhandler_free(&null) == MPI_ERR_ARG, "freeing MPI_ERRHANDLER_NULL");
    CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRHANDLER_NULL) == MPI_ERR_ARG,
          "setting MPI_ERRHANDLER_NULL");
    CHECK(MPI_Errhandler_free(NULL) == MPI_ERR_ARG, "NULL");

    /* Handlers of the other kinds are objects of their kind. */
    MPI_Errhandler weh, seh, feh;
    OK(MPI_Win_create_errhandler(win_handler, &weh));
    OK(MPI_Session_create_errhandler(session_handler, &seh));
    OK(MPI_File_create_errhandler(file_handler, &feh));
    CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, weh) == MPI_ERR_ARG,
          "a window handler on a communicator");
    CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, feh) == MPI_ERR_ARG,
          "a file handler on a communicator");
    OK(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &now));
    CHECK(now == MPI_ERRORS_RETURN, "a refused set changes nothing");
    CHECK(MPI_Win_create_errhandler(NULL, &now) == MPI_ERR_ARG, "NULL function");

    /* MPI_FILE_NULL: ERRORS_RETURN by default, settable; its handler gets file errors. */
    OK(MPI_File_get_errhandler(MPI_FILE_NULL, &now));
    CHECK(now == MPI_ERRORS_RETURN, "file default is MPI_ERRORS_RETURN");
    OK(MPI_File_set_errhandler(MPI_FILE_NULL, feh));
    OK(MPI_File_get_errhandler(MPI_FILE_NULL, &now));
    CHECK(now == feh, "file handler set");
    OK(MPI_File_call_errhandler(MPI_FILE_NULL, MPI_ERR_IO));
    CHECK(file_calls == 1 && file_code == MPI_ERR_IO && file_seen == MPI_FILE_NULL,
          "file handler called %d times with %d", file_calls, file_code);
    CHECK(MPI_File_set_errhandler(MPI_FILE_NULL, weh) == MPI_ERR_ARG,
          "a window handler on a file");
    CHECK(file_calls == 2 && file_code == MPI_ERR_ARG, "the refusal went to the file handler");
    /* MPI-IO is not implemented: MPI_File_open's refusal goes to MPI_FILE_NULL's handler. */
    MPI_File fh = MPI_FILE_NULL;
    CHECK(MPI_File_open(MPI_COMM_WORLD, "/tmp/rmca-errh-test", MPI_MODE_RDONLY, MPI_INFO_NULL,
                        &fh) == MPI_ERR_UNSUPPORTED_OPERATION,
          "MPI_File_open");
    CHECK(file_calls == 3 && file_code == MPI_ERR_UNSUPPORTED_OPERATION,
          "MPI_File_open's refusal went to the file handler (%d calls, %d)", file_calls,
          file_code);
    OK(MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_RETURN));
    OK(MPI_Errhandler_free(&feh));
    OK(MPI_Errhandler_free(&weh));
    OK(MPI_Errhandler_free(&seh));
}

static void error_codes(void) {
    int *last = NULL, flag = 0, before;
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &last, &flag));
    CHECK(flag && last && *last >= MPI_ERR_UNSUPPORTED_OPERATION, "MPI_LASTUSEDCODE");
    before = *last;

    int cls, code, c2, got, len;
    char text[MPI_MAX_ERROR_STRING];
    OK(MPI_Add_error_class(&cls));
    CHECK(cls > before, "new class %d above the last used %d", cls, before);
    CHECK(*last >= cls, "MPI_LASTUSEDCODE follows (%d, class %d)", *last, cls);
    OK(MPI_Add_error_code(cls, &code));
    CHECK(code != cls && *last >= code, "new code %d", code);
    OK(MPI_Error_class(code, &got));
    CHECK(got == cls, "class of the code %d", got);
    OK(MPI_Error_class(cls, &got));
    CHECK(got == cls, "a class is its own class");
    OK(MPI_Error_string(cls, text, &len));
    CHECK(len == 0 && text[0] == 0, "no string yet: empty");
    OK(MPI_Add_error_string(code, "a user error code"));
    OK(MPI_Add_error_string(cls, "a user error class"));
    OK(MPI_Error_string(code, text, &len));
    CHECK(strcmp(text, "a user error code") == 0 && len == 17, "code string '%s'", text);
    OK(MPI_Error_string(cls, text, &len));
    CHECK(strcmp(text, "a user error class") == 0, "class string '%s'", text);
    /* A code of a predefined class. */
    OK(MPI_Add_error_code(MPI_ERR_ARG, &c2));
    OK(MPI_Error_class(c2, &got));
    CHECK(got == MPI_ERR_ARG, "code of MPI_ERR_ARG");

    /* A user handler receives the added code. */
    MPI_Errhandler mine;
    MPI_Comm dup;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    OK(MPI_Comm_create_errhandler(comm_handler, &mine));
    OK(MPI_Comm_set_errhandler(dup, mine));
    OK(MPI_Errhandler_free(&mine));
    OK(MPI_Comm_call_errhandler(dup, code));
    CHECK(handler_calls == 1 && handler_code == code && handler_comm == dup,
          "handler got code %d", handler_code);
    OK(MPI_Comm_free(&dup));

    /* Bad input. */
    CHECK(MPI_Add_error_string(MPI_ERR_ARG, "x") == MPI_ERR_ARG, "predefined string");
    CHECK(MPI_Add_error_code(before + 100000, &got) == MPI_ERR_ARG, "code of no class");
    CHECK(MPI_Error_class(before + 100000, &got) == MPI_ERR_ARG, "no such code");
    CHECK(MPI_Add_error_class(NULL) == MPI_ERR_ARG, "NULL class");
    char longer[MPI_MAX_ERROR_STRING + 8];
    memset(longer, 'x', sizeof longer - 1);
    longer[sizeof longer - 1] = 0;
    CHECK(MPI_Add_error_string(code, longer) == MPI_ERR_ARG, "string too long");

    /* Removing (MPI 4.1): strings, then codes, then classes. */
    CHECK(MPI_Remove_error_class(cls) == MPI_ERR_ARG, "class with a code");
    CHECK(MPI_Remove_error_code(code) == MPI_ERR_ARG, "code with a string");
    OK(MPI_Remove_error_string(code));
    CHECK(MPI_Remove_error_string(code) == MPI_ERR_ARG, "no string left");
    OK(MPI_Remove_error_code(code));
    CHECK(MPI_Error_class(code, &got) == MPI_ERR_ARG, "removed code");
    OK(MPI_Remove_error_string(cls));
    OK(MPI_Remove_error_class(cls));
    CHECK(MPI_Error_class(cls, &got) == MPI_ERR_ARG, "removed class");
    OK(MPI_Remove_error_code(c2));
    CHECK(MPI_Remove_error_class(MPI_ERR_ARG) == MPI_ERR_ARG, "a predefined class");
}

static void statuses(void) {
    MPI_Status st;
    int v, flag;
    memset(&st, 0, sizeof st);
    OK(MPI_Status_set_source(&st, 3));
    OK(MPI_Status_set_tag(&st, 44));
    OK(MPI_Status_set_error(&st, MPI_ERR_TAG));
    OK(MPI_Status_get_source(&st, &v));
    CHECK(v == 3 && st.MPI_SOURCE == 3, "source");
    OK(MPI_Status_get_tag(&st, &v));
    CHECK(v == 44 && st.MPI_TAG == 44, "tag");
    OK(MPI_Status_get_error(&st, &v));
    CHECK(v == MPI_ERR_TAG && st.MPI_ERROR == MPI_ERR_TAG, "error");
    OK(MPI_Status_set_cancelled(&st, 1));
    OK(MPI_Test_cancelled(&st, &flag));
    CHECK(flag == 1, "set cancelled");
    OK(MPI_Status_set_cancelled(&st, 0));
    OK(MPI_Test_cancelled(&st, &flag));
    CHECK(flag == 0, "cleared cancelled");
    CHECK(MPI_Status_get_tag(NULL, &v) == MPI_ERR_ARG, "NULL status");

    /* Request status over arrays leaves the requests alone. */
    int in[2] = {0, 0}, out[2] = {5, 6}, idx[3], n;
    MPI_Request r[3];
    MPI_Status sts[3];
    OK(MPI_Irecv(&in[0], 1, MPI_INT, 0, 1, MPI_COMM_SELF, &r[0]));
    r[1] = MPI_REQUEST_NULL;
    OK(MPI_Irecv(&in[1], 1, MPI_INT, 0, 2, MPI_COMM_SELF, &r[2]));
    OK(MPI_Request_get_status_all(3, r, &flag, sts));
    CHECK(flag == 0, "nothing received yet");
    OK(MPI_Request_get_status_any(3, r, &idx[0], &flag, &sts[0]));
    CHECK(flag == 0, "none complete");
    OK(MPI_Request_get_status_some(3, r, &n, idx, sts));
    CHECK(n == 0, "none complete: %d", n);
    OK(MPI_Send(&out[1], 1, MPI_INT, 0, 2, MPI_COMM_SELF));
    /* Completion may need progress: poll. */
    for (int i = 0; i < 100000; i++) {
        POLL(MPI_Request_get_status_any(3, r, &idx[0], &flag, &sts[0]));
        if (flag) break;
    }
    CHECK(flag == 1 && idx[0] == 2 && sts[0].MPI_TAG == 2, "any: index %d", idx[0]);
    CHECK(r[2] != MPI_REQUEST_NULL, "get_status_any keeps the request");
    OK(MPI_Request_get_status_some(3, r, &n, idx, sts));
    CHECK(n == 1 && idx[0] == 2, "some: %d", n);
    OK(MPI_Send(&out[0], 1, MPI_INT, 0, 1, MPI_COMM_SELF));
    for (int i = 0; i < 100000; i++) {
        POLL(MPI_Request_get_status_all(3, r, &flag, sts));
        if (flag) break;
    }
    CHECK(flag == 1 && sts[0].MPI_TAG == 1 && sts[2].MPI_TAG == 2, "all complete");
    OK(MPI_Waitall(3, r, MPI_STATUSES_IGNORE));
    CHECK(in[0] == 5 && in[1] == 6, "received %d %d", in[0], in[1]);
    MPI_Request nulls[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    OK(MPI_Request_get_status_some(2, nulls, &n, idx, sts));
    CHECK(n == MPI_UNDEFINED, "some on nulls");
    OK(MPI_Request_get_status_any(2, nulls, &idx[0], &flag, MPI_STATUS_IGNORE));
    CHECK(flag == 1 && idx[0] == MPI_UNDEFINED, "any on nulls");
    CHECK(MPI_Request_get_status_all(-1, nulls, &flag, sts) == MPI_ERR_COUNT, "negative count");
}

static void comm_info(void) {
    MPI_Info info, used;
    MPI_Comm dup;
    char value[64];
    int flag, nkeys;
    OK(MPI_Info_create(&info));
    OK(MPI_Info_set(info, "mpi_assert_no_any_tag", "true"));
    OK(MPI_Info_set(info, "not_a_hint_of_rmca", "1"));
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    OK(MPI_Comm_get_info(dup, &used));
    OK(MPI_Info_get_nkeys(used, &nkeys));
    CHECK(nkeys == 0, "no hints yet: %d", nkeys);
    OK(MPI_Info_free(&used));
    OK(MPI_Comm_set_info(dup, info));
    OK(MPI_Comm_get_info(dup, &used));
    OK(MPI_Info_get(used, "mpi_assert_no_any_tag", 63, value, &flag));
    CHECK(flag && strcmp(value, "true") == 0, "hint read back");
    OK(MPI_Info_get(used, "not_a_hint_of_rmca", 63, value, &flag));
    CHECK(!flag, "an unknown key is ignored");
    OK(MPI_Info_free(&used));
    MPI_Comm dup2;
    OK(MPI_Comm_dup(dup, &dup2));
    OK(MPI_Comm_get_info(dup2, &used));
    OK(MPI_Info_get(used, "mpi_assert_no_any_tag", 63, value, &flag));
    CHECK(flag, "Comm_dup inherits the hints");
    OK(MPI_Info_free(&used));
    OK(MPI_Comm_free(&dup2));
    MPI_Info other;
    OK(MPI_Info_create(&other));
    OK(MPI_Info_set(other, "mpi_assert_exact_length", "true"));
    OK(MPI_Comm_dup_with_info(dup, other, &dup2));
    OK(MPI_Comm_get_info(dup2, &used));
    OK(MPI_Info_get(used, "mpi_assert_no_any_tag", 63, value, &flag));
    CHECK(!flag, "dup_with_info replaces the hints");
    OK(MPI_Info_get(used, "mpi_assert_exact_length", 63, value, &flag));
    CHECK(flag, "dup_with_info's hint");
    OK(MPI_Info_free(&used));
    OK(MPI_Comm_free(&dup2));
    MPI_Request req;
    OK(MPI_Comm_idup_with_info(dup, other, &dup2, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    OK(MPI_Comm_get_info(dup2, &used));
    OK(MPI_Info_get(used, "mpi_assert_exact_length", 63, value, &flag));
    CHECK(flag, "idup_with_info's hint");
    OK(MPI_Info_free(&used));
    OK(MPI_Barrier(dup2));
    OK(MPI_Comm_free(&dup2));
    OK(MPI_Comm_free(&dup));
    OK(MPI_Info_free(&other));
    MPI_Info stale = info;
    OK(MPI_Info_free(&info));
    CHECK(MPI_Comm_set_info(MPI_COMM_NULL, MPI_INFO_NULL) == MPI_ERR_COMM, "MPI_COMM_NULL");
    CHECK(MPI_Comm_get_info(MPI_COMM_WORLD, NULL) == MPI_ERR_ARG, "NULL info_used");
    CHECK(MPI_Comm_dup_with_info(MPI_COMM_WORLD, stale, &dup) == MPI_ERR_INFO, "freed info");
}

static void environment(char *argv0) {
    char *args[] = {argv0, "-x", "y", NULL};
    MPI_Info env;
    char value[256];
    int flag;
    OK(MPI_Info_create_env(3, args, &env));
    OK(MPI_Info_get(env, "command", 255, value, &flag));
    CHECK(flag && strcmp(value, argv0) == 0, "command '%s'", value);
    OK(MPI_Info_get(env, "argv", 255, value, &flag));
    CHECK(flag && strcmp(value, "-x y") == 0, "argv '%s'", value);
    /* maxprocs: the size the launcher gave (rmca-run sets PMI_SIZE). */
    OK(MPI_Info_get(env, "maxprocs", 255, value, &flag));
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (getenv("PMI_SIZE")) CHECK(flag && atoi(value) == size, "maxprocs '%s'", value);
    OK(MPI_Info_get(env, "host", 255, value, &flag));
    char host[MPI_MAX_PROCESSOR_NAME];
    int hlen;
    OK(MPI_Get_processor_name(host, &hlen));
    CHECK(flag && strcmp(value, host) == 0, "host '%s', processor name '%s'", value, host);
    OK(MPI_Info_free(&env));

    OK(MPI_Pcontrol(1));
    OK(MPI_Pcontrol(0));

    double *mem = NULL;
    OK(MPI_Alloc_mem(64 * sizeof(double), MPI_INFO_NULL, &mem));
    CHECK(mem != NULL, "Alloc_mem");
    for (int i = 0; i < 64; i++) mem[i] = i;
    OK(MPI_Free_mem(mem));
    CHECK(MPI_Free_mem(mem) == MPI_ERR_BASE, "double Free_mem");
    CHECK(MPI_Alloc_mem(-1, MPI_INFO_NULL, &mem) == MPI_ERR_ARG, "negative size");

    /* Buffered sends through an MPI_Count-sized buffer, flushed. */
    static char buf[4096];
    int rank, x = 9, y = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    OK(MPI_Buffer_attach_c(buf, (MPI_Count)sizeof buf));
    OK(MPI_Bsend(&x, 1, MPI_INT, 0, 7, MPI_COMM_SELF));
    OK(MPI_Buffer_flush());
    MPI_Request req;
    OK(MPI_Bsend(&x, 1, MPI_INT, 0, 8, MPI_COMM_SELF));
    OK(MPI_Buffer_iflush(&req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    OK(MPI_Recv(&y, 1, MPI_INT, 0, 7, MPI_COMM_SELF, MPI_STATUS_IGNORE));
    OK(MPI_Recv(&y, 1, MPI_INT, 0, 8, MPI_COMM_SELF, MPI_STATUS_IGNORE));
    CHECK(y == 9, "buffered");
    void *addr;
    MPI_Count n;
    OK(MPI_Buffer_detach_c(&addr, &n));
    CHECK(addr == buf && n == (MPI_Count)sizeof buf, "detach_c");
    CHECK(MPI_Buffer_detach_c(&addr, &n) == MPI_ERR_BUFFER, "nothing attached");
    CHECK(MPI_Buffer_attach_c(buf, -1) == MPI_ERR_COUNT, "negative size");
    OK(MPI_Buffer_attach_c(MPI_BUFFER_AUTOMATIC, 0));
    OK(MPI_Bsend(&x, 1, MPI_INT, 0, 9, MPI_COMM_SELF));
    OK(MPI_Recv(&y, 1, MPI_INT, 0, 9, MPI_COMM_SELF, MPI_STATUS_IGNORE));
    OK(MPI_Buffer_detach_c(&addr, &n));
    CHECK(addr == MPI_BUFFER_AUTOMATIC && n == 0, "automatic detached");

    /* The ABI queries; rmca has no Fortran, so nothing Fortran is set. */
    MPI_Info abi;
    OK(MPI_Abi_get_info(&abi));
    OK(MPI_Info_get(abi, "mpi_aint_size", 255, value, &flag));
    CHECK(flag && atoi(value) == (int)sizeof(MPI_Aint), "mpi_aint_size '%s'", value);
    OK(MPI_Info_get(abi, "mpi_count_size", 255, value, &flag));
    CHECK(flag && atoi(value) == (int)sizeof(MPI_Count), "mpi_count_size");
    OK(MPI_Info_get(abi, "mpi_offset_size", 255, value, &flag));
    CHECK(flag && atoi(value) == (int)sizeof(MPI_Offset), "mpi_offset_size");
    OK(MPI_Info_free(&abi));
    OK(MPI_Abi_get_fortran_info(&abi));
    CHECK(abi == MPI_INFO_NULL, "no Fortran info");
    int t = 0, f = 0, is_set = -1;
    OK(MPI_Abi_get_fortran_booleans(4, &t, &f, &is_set));
    CHECK(is_set == 0, "booleans not set");
    int yes = 1, no = 0;
    OK(MPI_Abi_set_fortran_booleans(4, &yes, &no));
    CHECK(MPI_Abi_set_fortran_booleans(4, &yes, &no) == MPI_ERR_ABI, "set once");
    OK(MPI_Abi_get_fortran_booleans(4, &t, &f, &is_set));
    CHECK(is_set == 1 && t == 1 && f == 0, "booleans %d %d", t, f);
    CHECK(MPI_Abi_get_fortran_booleans(8, &t, &f, &is_set) == MPI_ERR_ABI, "wrong size");
    MPI_Info hw;
    OK(MPI_Get_hw_resource_info(&hw));
    CHECK(hw != MPI_INFO_NULL, "an info");
    OK(MPI_Info_free(&hw));
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    errhandlers();
    error_codes();
    statuses();
    comm_info();
    environment(argv[0]);
    int rc = summary("errh");
    MPI_Finalize();
    return rc;
}
