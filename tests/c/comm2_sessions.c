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
    MPI_Comm_rank(c, &r);
    MPI_Comm_size(c, &n);
    /* A communicator of all but one process (MPI 4.0's example 10.8 as MPICH's
     * session_mod_group runs it): the one left out passes MPI_GROUP_EMPTY and gets
     * MPI_COMM_NULL at once, a local call, while the others create theirs. */
    if (n > 1) {
        MPI_Group most;
        int out = n - 2;
        MPI_Comm sub = MPI_COMM_WORLD;
        OK(MPI_Group_excl(g, 1, &out, &most));
        if (r == out) {
            OK(MPI_Comm_create_from_group(MPI_GROUP_EMPTY, "rmca.sessions.most", MPI_INFO_NULL,
                                          MPI_ERRORS_RETURN, &sub));
            CHECK(sub == MPI_COMM_NULL, "left out of the group: not MPI_COMM_NULL");
        } else {
            OK(MPI_Comm_create_from_group(most, "rmca.sessions.most", MPI_INFO_NULL,
                                          MPI_ERRORS_RETURN, &sub));
            int subsize = 0, subsum = 0, subrank = -1;
            MPI_Comm_size(sub, &subsize);
            MPI_Comm_rank(sub, &subrank);
            OK(MPI_Allreduce(&subrank, &subsum, 1, MPI_INT, MPI_SUM, sub));
            CHECK(subsize == n - 1 && subsum == (n - 1) * (n - 2) / 2, "most: size %d sum %d",
                  subsize, subsum);
            OK(MPI_Comm_free(&sub));
        }
        MPI_Group_free(&most);
    }
    MPI_Group_free(&g);
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
