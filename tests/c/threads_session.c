/* The sessions model at MPI_THREAD_MULTIPLE (no MPI_Init): a session asking for it with the
 * "thread_level" info key starts the runtime at that level and says so in
 * MPI_Session_get_info; a communicator made from the world process set, and a duplicate per
 * thread, then serve two threads at once (each exchanging with the ring neighbours on its
 * own), and the objects made on the main thread serve them (a derived datatype). Prints
 * "ok threads_session: N checks" on rank 0. */
#include <pthread.h>

#include "check.h"

#define NT 2
#define ROUNDS 100

static int me, np;
static MPI_Comm comms[NT];
static MPI_Datatype pair;
static int failed[NT];

static void *work(void *arg) {
    int t = (int)(long)arg, right = (me + 1) % np, left = (me + np - 1) % np;
    for (int r = 0; r < ROUNDS; r++) {
        int out[2] = {me, r + t}, in[2] = {-1, -1};
        failed[t] += MPI_Sendrecv(out, 1, pair, right, r, in, 1, pair, left, r, comms[t],
                                  MPI_STATUS_IGNORE) != MPI_SUCCESS;
        failed[t] += in[0] != left || in[1] != r + t;
    }
    return NULL;
}

int main(void) {
    (void)summary; /* check.h's verdict is over MPI_COMM_WORLD: this one is over `comm` */
    MPI_Session s = MPI_SESSION_NULL;
    MPI_Info info, got;
    char value[64] = "";
    int flag = 0;
    MPI_Info_create(&info);
    MPI_Info_set(info, "thread_level", "MPI_THREAD_MULTIPLE");
    int rc = MPI_Session_init(info, MPI_ERRORS_RETURN, &s);
    MPI_Info_free(&info);
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "FAIL: MPI_Session_init at MPI_THREAD_MULTIPLE: %d\n", rc);
        return 1;
    }
    MPI_Session_get_info(s, &got);
    MPI_Info_get(got, "thread_level", sizeof value - 1, value, &flag);
    MPI_Info_free(&got);
    MPI_Group g;
    MPI_Comm comm;
    rc = MPI_Group_from_session_pset(s, "mpi://WORLD", &g);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_create_from_group(g, "threads_session", MPI_INFO_NULL,
                                                            MPI_ERRORS_RETURN, &comm);
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "FAIL: a communicator from the world process set: %d\n", rc);
        return 1;
    }
    MPI_Group_free(&g);
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &np);
    CHECK(flag && !strcmp(value, "MPI_THREAD_MULTIPLE"), "the session's thread_level: '%s'",
          value);
    OK(MPI_Type_contiguous(2, MPI_INT, &pair));
    OK(MPI_Type_commit(&pair));
    for (int t = 0; t < NT; t++) OK(MPI_Comm_dup(comm, &comms[t]));
    pthread_t th[NT];
    for (int t = 0; t < NT; t++)
        CHECK(pthread_create(&th[t], NULL, work, (void *)(long)t) == 0, "pthread_create");
    for (int t = 0; t < NT; t++) {
        pthread_join(th[t], NULL);
        CHECK(failed[t] == 0, "thread %d: %d failures", t, failed[t]);
        OK(MPI_Comm_free(&comms[t]));
    }
    OK(MPI_Type_free(&pair));
    int all = 0;
    OK(MPI_Allreduce(&checks_failed, &all, 1, MPI_INT, MPI_SUM, comm));
    if (me == 0) {
        if (all == 0)
            printf("ok threads_session: %d checks per rank\n", checks_run);
        else
            printf("FAILED threads_session: %d failed checks\n", all);
        fflush(stdout);
    }
    OK(MPI_Comm_free(&comm));
    OK(MPI_Session_finalize(&s));
    return all == 0 ? 0 : 1;
}
