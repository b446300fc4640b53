/* The asynchronous progress thread (mpi_async_progress), from C.
 *
 *   async_progress on|off|session
 *
 * "session" (run with the parameter set) starts MPI by MPI_Session_init alone: the thread
 * serves the world model only, so none may run (the library warns that it is ignored, which
 * the test runner checks), and a session's point-to-point still works.
 *
 * "on" runs with the parameter set, "off" without (the launcher passes it): the program checks
 * that exactly one thread named rmca-progress runs (none when off), that the thread level
 * asked for is the one reported, and that none is left after MPI_Finalize. Then the overlap,
 * timed with CLOCK_MONOTONIC (one clock for every process of the node):
 *  - rank 0 starts an MPI_Isend of 1 MiB (a rendezvous: the launcher turns single-copy reads
 *    off, so the data moves only when rank 0's side progresses) to rank 1 and computes
 *    without calling MPI; rank 1's blocking MPI_Recv must return while rank 0 still computes
 *    ("on"), and cannot before rank 0 calls MPI again ("off": the control that shows the
 *    measurement fails without the thread);
 *  - the same with an MPI_Iallreduce of 1 MiB on every rank, rank 0 computing after starting
 *    it and the others waiting for it.
 * How long rank 0 computes: "on", until every peer has said it is done (a file each peer
 * makes, polled by rank 0 between rounds of computing: no MPI call), or DEADLINE_S at most;
 * "off", COMPUTE_S. So a loaded machine that schedules the progress thread late only makes
 * rank 0 compute longer, while without the thread the peers cannot finish before rank 0
 * calls MPI whatever the wait, and "on" then fails at the deadline.
 */
#define _GNU_SOURCE
#include "check.h"

#include <dirent.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

/* "off": how long rank 0 computes. */
#define COMPUTE_S 0.4
/* "on": the longest rank 0 computes waiting for the peers to say they are done. */
#define DEADLINE_S 20.0
#define N (1 << 17) /* doubles: 1 MiB */

static int on;
static long job_key; /* rank 0's pid: names this job's files */

/* The file peer `rank` makes once done with operation `what`. */
static void done_path(char *path, size_t len, const char *what, int rank) {
    snprintf(path, len, "/tmp/rmca-async-progress-%ld-%s-%d", job_key, what, rank);
}

/* A peer says it is done (written aside, then renamed: rank 0 sees it whole or not at all). */
static void say_done(const char *what, int rank) {
    char path[200], tmp[210];
    done_path(path, sizeof path, what, rank);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f || fclose(f) != 0 || rename(tmp, path) != 0) CHECK(0, "cannot make %s", path);
}

/* Whether peers from..to-1 all said they are done with `what`. */
static int all_done(const char *what, int from, int to) {
    for (int p = from; p < to; p++) {
        char path[200];
        done_path(path, sizeof path, what, p);
        if (access(path, F_OK) != 0) return 0;
    }
    return 1;
}

static void remove_done(const char *what, int from, int to) {
    for (int p = from; p < to; p++) {
        char path[200];
        done_path(path, sizeof path, what, p);
        unlink(path);
    }
}

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

/* Rank 0 computes (no MPI): "off", COMPUTE_S; "on", until peers from..to-1 said they are
 * done with `what` (checked every millisecond), DEADLINE_S at most. */
static double compute(const char *what, int from, int to) {
    volatile double x = 1.0;
    double start = now(), until = start + (on ? DEADLINE_S : COMPUTE_S), next_look = start;
    for (double t = start; t < until; t = now()) {
        if (on && t >= next_look) {
            if (all_done(what, from, to)) break;
            next_look = t + 1e-3;
        }
        for (int i = 0; i < 1000; i++) x = x * 1.0000001 + 1e-9;
    }
    return x;
}

static double *buf, *res;

/* Rank 0: the operation started by `start`, then compute; the time it stopped computing. */
static double isend_overlap(int me) {
    double t_end = 0;
    if (me == 0) {
        MPI_Request r;
        OK(MPI_Isend(buf, N, MPI_DOUBLE, 1, 1, MPI_COMM_WORLD, &r));
        compute("isend", 1, 2);
        t_end = now();
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    } else if (me == 1) {
        OK(MPI_Recv(res, N, MPI_DOUBLE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        t_end = now();
        say_done("isend", me);
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
        compute("iallreduce", 1, np);
        t_end = now();
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    } else {
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        t_end = now();
        say_done("iallreduce", me);
    }
    double want = (double)(np * (np - 1) / 2) + (double)np * (double)((N - 1) % 7);
    CHECK(res[N - 1] == want, "iallreduce gave %g, want %g", res[N - 1], want);
    return t_end;
}

/* Rank 0 compares the peers' completion times `done` with its end of computing. */
static void judge(const char *what, double t_end, const double *done, int from, int to) {
    for (int p = from; p < to; p++) {
        double early = t_end - done[p];
        if (on)
            CHECK(early > 0,
                  "%s: rank %d completed %.1f ms after rank 0 stopped computing (computed %.0f s at most: the progress thread must move it meanwhile)",
                  what, p, -1e3 * early, DEADLINE_S);
        else
            CHECK(early < 0.005,
                  "%s: rank %d completed %.1f ms before rank 0 stopped computing without a progress thread",
                  what, p, 1e3 * early);
        printf("async_progress %s %s: rank %d done %.1f ms before rank 0 stopped computing\n",
               on ? "on" : "off", what, p, 1e3 * early);
    }
}

/* "session": MPI_Session_init without MPI_Init, the parameter set. */
static int session_mode(void) {
    MPI_Session s = MPI_SESSION_NULL;
    MPI_Group g;
    MPI_Comm c;
    int me = -1, np = 0;
    OK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s));
    /* As in the world model, give a thread that would start a moment to name itself. */
    int threads = 0;
    for (int i = 0; i < 20 && threads == 0; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
        threads = progress_threads();
    }
    CHECK(threads == 0, "%d progress threads in the sessions model", threads);
    OK(MPI_Group_from_session_pset(s, "mpi://WORLD", &g));
    OK(MPI_Comm_create_from_group(g, "async_progress session", MPI_INFO_NULL, MPI_ERRORS_RETURN, &c));
    MPI_Comm_rank(c, &me);
    MPI_Comm_size(c, &np);
    int token = me, got = -1;
    OK(MPI_Sendrecv(&token, 1, MPI_INT, (me + 1) % np, 0, &got, 1, MPI_INT, (me + np - 1) % np, 0, c,
                    MPI_STATUS_IGNORE));
    CHECK(got == (me + np - 1) % np, "ring token %d", got);
    int failed = 0;
    OK(MPI_Allreduce(&checks_failed, &failed, 1, MPI_INT, MPI_SUM, c));
    if (me == 0) {
        printf(failed ? "FAILED async_progress session: %d failed checks\n"
                      : "ok async_progress session: %d checks per rank\n",
               failed ? failed : checks_run);
        fflush(stdout);
    }
    OK(MPI_Comm_free(&c));
    OK(MPI_Group_free(&g));
    OK(MPI_Session_finalize(&s));
    return failed == 0 && checks_failed == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc != 2 || (strcmp(argv[1], "on") && strcmp(argv[1], "off") && strcmp(argv[1], "session"))) {
        fprintf(stderr, "usage: async_progress on|off|session\n");
        return 2;
    }
    if (strcmp(argv[1], "session") == 0) return session_mode();
    on = strcmp(argv[1], "on") == 0;
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
    job_key = (long)getpid();
    OK(MPI_Bcast(&job_key, 1, MPI_LONG, 0, MPI_COMM_WORLD));

    if (np >= 2) {
        OK(MPI_Barrier(MPI_COMM_WORLD));
        double t = isend_overlap(me);
        OK(MPI_Gather(&t, 1, MPI_DOUBLE, done, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
        if (me == 0) {
            judge("isend", done[0], done, 1, 2);
            remove_done("isend", 1, 2);
        }
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));
    double t = iallreduce_overlap(me, np);
    OK(MPI_Gather(&t, 1, MPI_DOUBLE, done, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    if (me == 0 && np >= 2) judge("iallreduce", done[0], done, 1, np);
    if (me == 0) remove_done("iallreduce", 1, np);

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
