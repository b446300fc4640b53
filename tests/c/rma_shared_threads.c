/* The small one-sided operations from several threads at MPI_THREAD_MULTIPLE on an osc-sm
 * window (the C library's fast path: fetch-and-op, accumulate, a compare-and-swap increment
 * retried until it wins, each with its flush), THREADS threads on every rank updating rank
 * 0's counters at once: the counts add up exactly, so no update was lost between threads
 * or processes, whichever of osc-sm's accumulate paths (lock word or CPU atomics) runs. */
#include <pthread.h>
#include <stdint.h>

#include "check.h"

#define THREADS 3
#define ROUNDS 500

static MPI_Win win;
static int failed_calls;

static void *worker(void *arg) {
    (void)arg;
    int64_t one = 1, old = 0;
    int32_t ione = 1;
    for (int i = 0; i < ROUNDS; i++) {
        int rc = MPI_Fetch_and_op(&one, &old, MPI_INT64_T, 0, 0, MPI_SUM, win);
        rc |= MPI_Accumulate(&ione, 1, MPI_INT32_T, 0, 8, 1, MPI_INT32_T, MPI_SUM, win);
        int64_t seen = 0, was = -1, next;
        rc |= MPI_Fetch_and_op(NULL, &seen, MPI_INT64_T, 0, 16, MPI_NO_OP, win);
        rc |= MPI_Win_flush(0, win);
        for (;;) {
            next = seen + 1;
            rc |= MPI_Compare_and_swap(&next, &seen, &was, MPI_INT64_T, 0, 16, win);
            rc |= MPI_Win_flush(0, win);
            if (rc != MPI_SUCCESS || was == seen) break;
            seen = was;
        }
        if (rc != MPI_SUCCESS) {
            __atomic_add_fetch(&failed_calls, 1, __ATOMIC_RELAXED);
            break;
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    int provided = 0, rank, size;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(provided == MPI_THREAD_MULTIPLE, "thread level %d", provided);
    int64_t *c = NULL;
    OK(MPI_Win_allocate_shared(rank == 0 ? 24 : 0, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &c, &win));
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    MPI_Aint sz;
    int du;
    OK(MPI_Win_shared_query(win, 0, &sz, &du, &c));
    if (rank == 0) c[0] = c[1] = c[2] = 0;
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Win_lock_all(0, win));
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, worker, NULL) == 0, "thread %d", i);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    OK(MPI_Win_unlock_all(win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    CHECK(failed_calls == 0, "%d threads saw a call fail", failed_calls);
    const int64_t want = (int64_t)ROUNDS * THREADS * size;
    int32_t acc;
    memcpy(&acc, &c[1], sizeof acc);
    CHECK(c[0] == want, "fetch_and_op counter %ld of %ld", (long)c[0], (long)want);
    CHECK(acc == want, "accumulate counter %d of %ld", acc, (long)want);
    CHECK(c[2] == want, "compare_and_swap counter %ld of %ld", (long)c[2], (long)want);
    OK(MPI_Win_free(&win));
    int rc = summary("rma_shared_threads");
    MPI_Finalize();
    return rc;
}
