/* The sessions model alone (no MPI_Init): a communicator from the mpi://WORLD process set,
 * communication on it, MPI_Initialized false throughout, and the runtime ended by the last
 * MPI_Session_finalize. */
#include "check.h"

int main(void) {
    MPI_Session s, s2;
    MPI_Group g;
    MPI_Comm c;
    int flag = -1, r, n, sum = 0, failed = 0;
    (void)summary; /* it reduces over MPI_COMM_WORLD, which the sessions model does not have */
    OK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s));
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
