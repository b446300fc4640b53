/* Communicators created by several threads at once (issue 30): at MPI_THREAD_MULTIPLE,
 * THREADS threads each run ROUNDS rounds of MPI_Comm_dup, _split, _create, _create_group,
 * _idup, MPI_Intercomm_create and _merge on their own duplicate of the world, and check
 * that every communicator they get is whole and isolated: an allreduce over it gives the sum
 * of its ranks, and a ring of messages on it (the same tag on every thread's communicator)
 * arrives from the right neighbour with that communicator's payload. Context ids are agreed
 * by masks and retries (rmca/src/context_id.rs): two constructors of one process must never
 * take one id. Then an intercommunicator create refused by one group (both get the error),
 * and 5000 dups freed one by one: ids given back by MPI_Comm_free are taken again (a process
 * holds at most 4096 at once). */
#include <pthread.h>

#include "check.h"

#ifndef THREADS
#define THREADS 4
#endif
#ifndef ROUNDS
#define ROUNDS 12
#endif

static int me, np;
static MPI_Comm parent[THREADS];
static int errs[THREADS];

#define TCHECK(cond, ...)                                                            \
    do {                                                                             \
        if (!(cond)) {                                                               \
            errs[t]++;                                                               \
            fprintf(stderr, "FAIL rank %d thread %d line %d: %s: ", me, t, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                            \
            fprintf(stderr, "\n");                                                   \
        }                                                                            \
    } while (0)

/* `c` is whole and isolated: allreduce of ranks, and a ring with payload `stamp`. */
static void exercise(int t, MPI_Comm c, int stamp) {
    if (c == MPI_COMM_NULL) return;
    int r, n, inter = 0;
    MPI_Comm_test_inter(c, &inter);
    MPI_Comm_rank(c, &r);
    if (inter) {
        MPI_Comm_remote_size(c, &n);
        int out = stamp, in = -1;
        /* Rank r of each group with rank r of the other, when it exists. */
        if (r < n) {
            TCHECK(MPI_Sendrecv(&out, 1, MPI_INT, r, 5, &in, 1, MPI_INT, r, 5, c, MPI_STATUS_IGNORE) ==
                       MPI_SUCCESS, "intercomm sendrecv");
            TCHECK(in == stamp, "intercomm payload %d, want %d", in, stamp);
        }
        return;
    }
    MPI_Comm_size(c, &n);
    int sum = -1;
    TCHECK(MPI_Allreduce(&r, &sum, 1, MPI_INT, MPI_SUM, c) == MPI_SUCCESS, "allreduce");
    TCHECK(sum == n * (n - 1) / 2, "sum %d of %d ranks", sum, n);
    int out[2] = {stamp, r}, in[2] = {-1, -1};
    int right = (r + 1) % n, left = (r + n - 1) % n;
    TCHECK(MPI_Sendrecv(out, 2, MPI_INT, right, 7, in, 2, MPI_INT, left, 7, c, MPI_STATUS_IGNORE) ==
               MPI_SUCCESS, "ring");
    TCHECK(in[0] == stamp && in[1] == left, "ring got (%d, %d), want (%d, %d)", in[0], in[1], stamp, left);
}

static void *worker(void *arg) {
    int t = (int)(long)arg;
    MPI_Comm in = parent[t];
    MPI_Group g;
    MPI_Comm_group(in, &g);
    for (int round = 0; round < ROUNDS; round++) {
        int stamp = t * 1000 + round;
        MPI_Comm idups[2], c;
        MPI_Request reqs[2];
        for (int i = 0; i < 2; i++) MPI_Comm_idup(in, &idups[i], &reqs[i]);

        TCHECK(MPI_Comm_dup(in, &c) == MPI_SUCCESS, "dup");
        exercise(t, c, stamp);
        MPI_Comm_free(&c);

        TCHECK(MPI_Comm_split(in, me % 2, np - me, &c) == MPI_SUCCESS, "split");
        exercise(t, c, stamp + 1);
        MPI_Comm_free(&c);

        int range[1][3] = {{np / 2, np - 1, 1}};
        MPI_Group high;
        MPI_Group_range_incl(g, 1, range, &high);
        TCHECK(MPI_Comm_create(in, high, &c) == MPI_SUCCESS, "create");
        TCHECK((c != MPI_COMM_NULL) == (me >= np / 2), "create membership");
        exercise(t, c, stamp + 2);
        if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
        MPI_Group_free(&high);

        /* The even ranks alone, tag = the round. */
        int evens[1][3] = {{0, np - 1, 2}};
        MPI_Group even;
        MPI_Group_range_incl(g, 1, evens, &even);
        if (me % 2 == 0) {
            TCHECK(MPI_Comm_create_group(in, even, round, &c) == MPI_SUCCESS, "create_group");
            exercise(t, c, stamp + 7);
            MPI_Comm_free(&c);
        }
        MPI_Group_free(&even);

        if (np >= 2) {
            MPI_Comm local, ic, merged;
            int lo = me < np / 2;
            MPI_Comm_split(in, lo, me, &local);
            int rleader = lo ? np / 2 : 0;
            TCHECK(MPI_Intercomm_create(local, 0, in, rleader, 99, &ic) == MPI_SUCCESS, "intercomm_create");
            exercise(t, ic, stamp + 3);
            TCHECK(MPI_Intercomm_merge(ic, lo, &merged) == MPI_SUCCESS, "merge");
            exercise(t, merged, stamp + 4);
            MPI_Comm_free(&merged);
            MPI_Comm_free(&ic);
            MPI_Comm_free(&local);
        }
        TCHECK(MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE) == MPI_SUCCESS, "idup waitall");
        for (int i = 0; i < 2; i++) {
            exercise(t, idups[i], stamp + 5 + i);
            MPI_Comm_free(&idups[i]);
        }
    }
    MPI_Group_free(&g);
    return NULL;
}

int main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    CHECK(provided == MPI_THREAD_MULTIPLE, "provided %d", provided);
    for (int t = 0; t < THREADS; t++) OK(MPI_Comm_dup(MPI_COMM_WORLD, &parent[t]));
    pthread_t tid[THREADS];
    for (long t = 0; t < THREADS; t++) pthread_create(&tid[t], NULL, worker, (void *)t);
    for (int t = 0; t < THREADS; t++) pthread_join(tid[t], NULL);
    for (int t = 0; t < THREADS; t++) {
        CHECK(errs[t] == 0, "thread %d: %d failures", t, errs[t]);
        OK(MPI_Comm_free(&parent[t]));
    }
    /* MPI_Comm_create on an intercommunicator that one group refuses (its group holds a
     * process of the other): an error in both groups, not the other group waiting for it in
     * the context agreement; the intercommunicator stays usable. */
    if (np >= 2) {
        MPI_Comm local, ic, c = MPI_COMM_NULL;
        MPI_Group g;
        int lo = me < np / 2;
        OK(MPI_Comm_split(MPI_COMM_WORLD, lo, me, &local));
        OK(MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, lo ? np / 2 : 0, 98, &ic));
        OK(MPI_Comm_set_errhandler(ic, MPI_ERRORS_RETURN));
        OK(lo ? MPI_Comm_group(MPI_COMM_WORLD, &g) : MPI_Comm_group(ic, &g));
        CHECK(MPI_Comm_create(ic, g, &c) != MPI_SUCCESS && c == MPI_COMM_NULL,
              "intercomm create refused by the %s group", lo ? "calling" : "other");
        OK(MPI_Group_free(&g));
        OK(MPI_Barrier(ic));
        OK(MPI_Comm_free(&ic));
        OK(MPI_Comm_free(&local));
    }
    /* Many communicators over a life: ids freed are taken again. */
    for (int i = 0; i < 5000; i++) {
        MPI_Comm c;
        if (MPI_Comm_dup(MPI_COMM_WORLD, &c) != MPI_SUCCESS) {
            CHECK(0, "dup %d failed", i);
            break;
        }
        MPI_Comm_free(&c);
    }
    int rc = summary("threads_comm");
    MPI_Finalize();
    return rc;
}
