/* The asynchronous progress thread (mpi_async_progress), from C.
 *
 *   async_progress on|off
 *
 * "on" runs with the parameter set, "off" without (the launcher passes it): the program checks
 * that exactly one thread named rmca-progress runs (none when off), that the thread level
 * asked for is the one reported, and that none is left after MPI_Finalize. Then the overlap,
 * timed with CLOCK_MONOTONIC (one clock for every process of the node):
 *  - rank 0 starts an MPI_Isend of 1 MiB (a rendezvous: the launcher turns single-copy reads
 *    off, so the data moves only when rank 0's side progresses) to rank 1 and computes for
 *    COMPUTE_S seconds without calling MPI; rank 1's blocking MPI_Recv must return while
 *    rank 0 still computes ("on"), and cannot before rank 0 calls MPI again ("off": the
 *    control that shows the measurement fails without the thread);
 *  - the same with an MPI_Iallreduce of 1 MiB on every rank, rank 0 computing after starting
 *    it and the others waiting for it.
 */
#define _GNU_SOURCE
#include "check.h"

#include <dirent.h>
#include <time.h>

#define COMPUTE_S 0.4
/* "on": the peer must be done this long before rank 0 stops computing. */
#define EARLY_S 0.1
#define N (1 << 17) /* doubles: 1 MiB */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Threads of this process named rmca-progress. */
static int progress_threads(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[300], name[64] = {0};
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (fgets(name, sizeof name, f) && strncmp(name, "rmca-progress", 13) == 0) n++;
        fclose(f);
    }
    closedir(d);
    return n;
}

/* Compute (no MPI) until `until`; a value the compiler cannot drop. */
static double compute_until(double until) {
    volatile double x = 1.0;
    while (now() < until)
        for (int i = 0; i < 1000; i++) x = x * 1.0000001 + 1e-9;
    return x;
}

static double *buf, *res;

/* Rank 0: the operation started by `start`, then compute; the time it stopped computing. */
static double isend_overlap(int me) {
    double t_end = 0;
    if (me == 0) {
        MPI_Request r;
        OK(MPI_Isend(buf, N, MPI_DOUBLE, 1, 1, MPI_COMM_WORLD, &r));
        compute_until(now() + COMPUTE_S);
        t_end = now();
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    } else if (me == 1) {
        OK(MPI_Recv(res, N, MPI_DOUBLE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        t_end = now();
        CHECK(res[0] == 0.0 && res[N - 1] == (double)(N - 1), "received %g .. %g", res[0], res[N - 1]);
    }
    return t_end;
}

static double iallreduce_overlap(int me, int np) {
    double t_end;
    MPI_Request r;
    for (int i = 0; i < N; i++) buf[i] = (double)(me + i % 7);
    OK(MPI_Iallreduce(buf, res, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r));
    if (me == 0) {
        compute_until(now() + COMPUTE_S);
        t_end = now();
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    } else {
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        t_end = now();
    }
    double want = (double)(np * (np - 1) / 2) + (double)np * (double)((N - 1) % 7);
    CHECK(res[N - 1] == want, "iallreduce gave %g, want %g", res[N - 1], want);
    return t_end;
}

/* Rank 0 compares the peers' completion times `done` with its end of computing. */
static void judge(const char *what, int on, double t_end, const double *done, int from, int to) {
    for (int p = from; p < to; p++) {
        double early = t_end - done[p];
        if (on)
            CHECK(early > EARLY_S,
                  "%s: rank %d completed %.1f ms before rank 0 stopped computing (want > %.0f ms: the progress thread moves it)",
                  what, p, 1e3 * early, 1e3 * EARLY_S);
        else
            CHECK(early < 0.005,
                  "%s: rank %d completed %.1f ms before rank 0 stopped computing without a progress thread",
                  what, p, 1e3 * early);
        printf("async_progress %s %s: rank %d done %.1f ms before rank 0 stopped computing (%.0f ms)\n",
               on ? "on" : "off", what, p, 1e3 * early, 1e3 * COMPUTE_S);
    }
}

int main(int argc, char **argv) {
    if (argc != 2 || (strcmp(argv[1], "on") && strcmp(argv[1], "off"))) {
        fprintf(stderr, "usage: async_progress on|off\n");
        return 2;
    }
    int on = strcmp(argv[1], "on") == 0;
    int provided = -1, me, np, main_thread = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    CHECK(provided == MPI_THREAD_FUNNELED, "provided %d", provided);
    OK(MPI_Query_thread(&provided));
    CHECK(provided == MPI_THREAD_FUNNELED, "the thread does not change the level: %d", provided);
    OK(MPI_Is_thread_main(&main_thread));
    CHECK(main_thread, "the main thread is still the main one");
    /* The thread names itself as it starts: give it a moment to. */
    int threads = progress_threads();
    for (int i = 0; i < 100 && threads != (on ? 1 : 0); i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
        threads = progress_threads();
    }
    CHECK(threads == (on ? 1 : 0), "%d progress threads with the parameter %s", threads, argv[1]);

    buf = malloc(sizeof(double) * N);
    res = malloc(sizeof(double) * N);
    for (int i = 0; i < N; i++) buf[i] = (double)i;
    double *done = calloc((size_t)np, sizeof(double));

    if (np >= 2) {
        OK(MPI_Barrier(MPI_COMM_WORLD));
        double t = isend_overlap(me);
        OK(MPI_Gather(&t, 1, MPI_DOUBLE, done, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
        if (me == 0) judge("isend", on, done[0], done, 1, 2);
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));
    double t = iallreduce_overlap(me, np);
    OK(MPI_Gather(&t, 1, MPI_DOUBLE, done, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    if (me == 0 && np >= 2) judge("iallreduce", on, done[0], done, 1, np);

    int rc = summary(on ? "async_progress on" : "async_progress off");
    MPI_Finalize();
    /* Joined by MPI_Finalize: the task may take a moment to leave /proc after its exit. */
    int left = progress_threads();
    for (int i = 0; i < 100 && left != 0; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
        left = progress_threads();
    }
    if (left != 0) {
        fprintf(stderr, "FAIL rank %d: %d progress threads after MPI_Finalize\n", me, left);
        rc = 1;
    }
    free(buf);
    free(res);
    free(done);
    return rc;
}
