/* The sessions model alone (no MPI_Init): info objects before anything is initialized, a
 * communicator from the mpi://WORLD process set, communication on it, a session's own error
 * handler, MPI_Initialized false throughout, and the runtime ended by the last
 * MPI_Session_finalize. */
#include "check.h"

static int session_errors;
static MPI_Session failing_session;

static void on_session_error(MPI_Session *session, int *code, ...) {
    session_errors++;
    failing_session = *session;
    (void)code;
}

int main(void) {
    MPI_Session s, s2;
    MPI_Group g;
    MPI_Comm c;
    int flag = -1, r, n, sum = 0, failed = 0;
    (void)summary; /* it reduces over MPI_COMM_WORLD, which the sessions model does not have */
    /* Info objects work before any initialization (a session takes one). */
    MPI_Info hints;
    char value[32];
    OK(MPI_Info_create(&hints));
    OK(MPI_Info_set(hints, "mpi_thread_support_level", "MPI_THREAD_SINGLE"));
    OK(MPI_Info_get(hints, "mpi_thread_support_level", 31, value, &flag));
    CHECK(flag == 1 && strcmp(value, "MPI_THREAD_SINGLE") == 0, "info before init: %d", flag);
    OK(MPI_Session_init(hints, MPI_ERRORS_RETURN, &s));
    OK(MPI_Info_free(&hints));
    OK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s2));
    MPI_Initialized(&flag);
    CHECK(flag == 0, "MPI_Initialized under sessions: %d", flag);
    OK(MPI_Group_from_session_pset(s, "mpi://WORLD", &g));
    OK(MPI_Comm_create_from_group(g, "rmca.sessions.world", MPI_INFO_NULL, MPI_ERRORS_RETURN, &c));
    MPI_Group_free(&g);
    MPI_Comm_rank(c, &r);
    MPI_Comm_size(c, &n);
    OK(MPI_Allreduce(&r, &sum, 1, MPI_INT, MPI_SUM, c));
    CHECK(sum == n * (n - 1) / 2, "allreduce %d", sum);
    int got = -1;
    OK(MPI_Sendrecv(&r, 1, MPI_INT, (r + 1) % n, 0, &got, 1, MPI_INT, (r + n - 1) % n, 0, c,
                    MPI_STATUS_IGNORE));
    CHECK(got == (r + n - 1) % n, "ring %d", got);
    /* A session's user error handler is called with the session. */
    MPI_Errhandler eh;
    OK(MPI_Session_create_errhandler(on_session_error, &eh));
    OK(MPI_Session_set_errhandler(s2, eh));
    char pset[64];
    int len = sizeof pset;
    CHECK(MPI_Session_get_nth_pset(s2, MPI_INFO_NULL, 1000, &len, pset) != MPI_SUCCESS,
          "pset 1000 exists");
    OK(MPI_Session_call_errhandler(s2, MPI_ERR_OTHER));
    CHECK(session_errors == 2 && failing_session == s2, "session handler ran %d times",
          session_errors);
    OK(MPI_Errhandler_free(&eh));
    /* One session ends: the other keeps the runtime. */
    OK(MPI_Session_finalize(&s2));
    OK(MPI_Barrier(c));
    MPI_Allreduce(&checks_failed, &failed, 1, MPI_INT, MPI_SUM, c);
    if (r == 0 && failed == 0) printf("ok comm2_sessions: %d checks per rank\n", checks_run);
    fflush(stdout);
    OK(MPI_Comm_free(&c));
    OK(MPI_Session_finalize(&s));
    MPI_Finalized(&flag);
    return failed == 0 && flag == 1 ? 0 : 1;
}
