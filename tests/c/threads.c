/* MPI from several threads. `threads` (no argument): MPI_THREAD_MULTIPLE, NT threads per rank,
 * each on its own duplicate of MPI_COMM_WORLD, running the same seeded random sequence of
 * operations as its namesakes on the other ranks (so that collectives and pairs of
 * point-to-point operations line up): blocking and non-blocking sends and receives around
 * the ring, probes and matched probes, iprobe and MPI_Test polling, cancelled receives,
 * MPI_Waitany/Waitsome/Waitall, allreduce, bcast, barrier and a non-blocking allreduce,
 * every payload checked. The thread-support calls answer truthfully from every thread.
 * `threads funneled` / `threads single`: a call from a thread other than the main one is
 * refused with MPI_ERR_OTHER (and the level named in the log), nothing crashes, the main
 * thread goes on. `threads serialized`: threads call MPI one after the other. */
#include <pthread.h>
#include <stdatomic.h>

#include "check.h"

#define NT 4
#ifndef ROUNDS /* -DROUNDS=1000 for a longer hammering by hand */
#define ROUNDS 200
#endif
#define MAXN 3000 /* ints: 12 KB, past the eager limits, so rendezvous runs too */

static int me, np, left, right;
static MPI_Comm comms[NT];
static atomic_int t_failed, t_run;

/* CHECK for the worker threads (atomic counters, added to check.h's at the end). */
#define TCHECK(cond, ...)                                                                 \
    do {                                                                                  \
        atomic_fetch_add(&t_run, 1);                                                      \
        if (!(cond)) {                                                                    \
            atomic_fetch_add(&t_failed, 1);                                               \
            fprintf(stderr, "FAIL rank %d thread %d %s:%d: %s: ", me, t, __FILE__, __LINE__, \
                    #cond);                                                               \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fprintf(stderr, "\n");                                                        \
        }                                                                                 \
    } while (0)
#define TOK(call) TCHECK((call) == MPI_SUCCESS, "%s", #call)

/* xorshift: the same sequence on every rank for a thread index and seed. */
static unsigned next_rand(unsigned *s) {
    unsigned x = *s;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return *s = x;
}

/* Element k of the message that rank `from` sends in round r of thread t. */
static int value(int from, int t, int r, int k) { return from * 1000003 + t * 10007 + r * 101 + k; }

static void fill(int *b, int n, int from, int t, int r) {
    for (int k = 0; k < n; k++) b[k] = value(from, t, r, k);
}

/* Index of the first wrong element, or -1. */
static int wrong(const int *b, int n, int from, int t, int r) {
    for (int k = 0; k < n; k++)
        if (b[k] != value(from, t, r, k)) return k;
    return -1;
}

static void check_status(int t, const MPI_Status *st, int n, int tag, const char *how) {
    int count = -1;
    MPI_Get_count(st, MPI_INT, &count);
    TCHECK(st->MPI_SOURCE == left && st->MPI_TAG == tag && count == n,
           "%s: source %d tag %d count %d (want %d %d %d)", how, st->MPI_SOURCE, st->MPI_TAG,
           count, left, tag, n);
}

struct worker {
    int t;
    unsigned seed;
};

static void *work(void *arg) {
    struct worker *w = arg;
    int t = w->t;
    unsigned s = w->seed;
    MPI_Comm c = comms[t];
    int *out = malloc(MAXN * sizeof(int)), *in = malloc(MAXN * sizeof(int));
    int flag = -1, level = -1;
    TOK(MPI_Is_thread_main(&flag));
    TCHECK(flag == 0, "a worker thread is not the main one: %d", flag);
    TOK(MPI_Query_thread(&level));
    TCHECK(level == MPI_THREAD_MULTIPLE, "Query_thread from a worker: %d", level);
    for (int r = 0; r < ROUNDS; r++) {
        int op = (int)(next_rand(&s) % 10);
        int n = (int)(next_rand(&s) % 4 == 0 ? next_rand(&s) % MAXN : next_rand(&s) % 64);
        int tag = r % 50;
        MPI_Request rq[2];
        MPI_Status st, sts[2];
        fill(out, n, me, t, r);
        memset(in, 0xff, (size_t)n * sizeof(int));
        switch (op) {
        case 0: /* MPI_Recv posted first as a request, blocking MPI_Send, MPI_Wait */
            TOK(MPI_Irecv(in, n, MPI_INT, left, tag, c, &rq[0]));
            TOK(MPI_Send(out, n, MPI_INT, right, tag, c));
            TOK(MPI_Wait(&rq[0], &st));
            check_status(t, &st, n, tag, "send/wait");
            break;
        case 1: /* isend + blocking recv */
            TOK(MPI_Isend(out, n, MPI_INT, right, tag, c, &rq[0]));
            TOK(MPI_Recv(in, n, MPI_INT, left, tag, c, &st));
            check_status(t, &st, n, tag, "recv");
            TOK(MPI_Wait(&rq[0], MPI_STATUS_IGNORE));
            break;
        case 2: { /* probe, then receive what it found; Waitany for the send */
            int idx = -1, count = -1;
            TOK(MPI_Isend(out, n, MPI_INT, right, tag, c, &rq[0]));
            TOK(MPI_Probe(left, tag, c, &st));
            MPI_Get_count(&st, MPI_INT, &count);
            TCHECK(count == n, "probe count %d want %d", count, n);
            TOK(MPI_Recv(in, n, MPI_INT, left, tag, c, &st));
            check_status(t, &st, n, tag, "probe+recv");
            TOK(MPI_Waitany(1, rq, &idx, MPI_STATUS_IGNORE));
            TCHECK(idx == 0, "waitany index %d", idx);
            break;
        }
        case 3: { /* iprobe polling, then a matched probe's receive */
            int found = 0;
            MPI_Message m;
            TOK(MPI_Isend(out, n, MPI_INT, right, tag, c, &rq[0]));
            while (!found) TOK(MPI_Iprobe(left, tag, c, &found, &st));
            TOK(MPI_Mprobe(left, tag, c, &m, &st));
            TOK(MPI_Mrecv(in, n, MPI_INT, &m, &st));
            check_status(t, &st, n, tag, "mprobe");
            TOK(MPI_Wait(&rq[0], MPI_STATUS_IGNORE));
            break;
        }
        case 4: { /* a receive nobody matches, cancelled; then a normal exchange */
            int cancelled = 0;
            MPI_Request dead;
            TOK(MPI_Irecv(in, n, MPI_INT, left, 999, c, &dead));
            TOK(MPI_Cancel(&dead));
            TOK(MPI_Wait(&dead, &st));
            TOK(MPI_Test_cancelled(&st, &cancelled));
            TCHECK(cancelled, "cancelled receive not reported cancelled");
            TOK(MPI_Irecv(in, n, MPI_INT, left, tag, c, &rq[0]));
            TOK(MPI_Isend(out, n, MPI_INT, right, tag, c, &rq[1]));
            TOK(MPI_Waitall(2, rq, sts));
            check_status(t, &sts[0], n, tag, "waitall");
            break;
        }
        case 5: { /* MPI_Test polling */
            int done0 = 0, done1 = 0;
            TOK(MPI_Irecv(in, n, MPI_INT, left, tag, c, &rq[0]));
            TOK(MPI_Isend(out, n, MPI_INT, right, tag, c, &rq[1]));
            while (!done0 || !done1) {
                if (!done0) {
                    TOK(MPI_Test(&rq[0], &done0, &st));
                    if (done0) check_status(t, &st, n, tag, "test");
                }
                if (!done1) TOK(MPI_Test(&rq[1], &done1, MPI_STATUS_IGNORE));
            }
            break;
        }
        case 6: { /* Waitsome until both completed */
            int left_ = 2, outn = 0, idx[2];
            TOK(MPI_Irecv(in, n, MPI_INT, left, tag, c, &rq[0]));
            TOK(MPI_Isend(out, n, MPI_INT, right, tag, c, &rq[1]));
            while (left_ > 0) {
                TOK(MPI_Waitsome(2, rq, &outn, idx, sts));
                for (int i = 0; i < outn; i++)
                    if (idx[i] == 0) check_status(t, &sts[i], n, tag, "waitsome");
                left_ -= outn;
            }
            break;
        }
        case 7: { /* allreduce and bcast */
            int mine[4], sum[4], root = r % np;
            for (int k = 0; k < 4; k++) mine[k] = me * (t + 1) + r + k;
            TOK(MPI_Allreduce(mine, sum, 4, MPI_INT, MPI_SUM, c));
            for (int k = 0; k < 4; k++) {
                int want = (np * (np - 1) / 2) * (t + 1) + np * (r + k);
                TCHECK(sum[k] == want, "allreduce[%d] = %d want %d", k, sum[k], want);
            }
            if (me == root)
                fill(in, n, root, t, r);
            TOK(MPI_Bcast(in, n, MPI_INT, root, c));
            int bad = wrong(in, n, root, t, r);
            TCHECK(bad < 0, "bcast element %d", bad);
            continue; /* nothing from `left` to check */
        }
        case 8: { /* barrier, and a non-blocking allreduce waited for with MPI_Wait */
            int one = 1, total = 0;
            TOK(MPI_Barrier(c));
            TOK(MPI_Iallreduce(&one, &total, 1, MPI_INT, MPI_SUM, c, &rq[0]));
            TOK(MPI_Wait(&rq[0], MPI_STATUS_IGNORE));
            TCHECK(total == np, "iallreduce %d want %d", total, np);
            continue;
        }
        default: /* sendrecv */
            TOK(MPI_Sendrecv(out, n, MPI_INT, right, tag, in, n, MPI_INT, left, tag, c, &st));
            check_status(t, &st, n, tag, "sendrecv");
            break;
        }
        int bad = wrong(in, n, left, t, r);
        TCHECK(bad < 0, "round %d op %d: payload element %d of %d", r, op, bad, n);
    }
    free(out);
    free(in);
    return NULL;
}

static void multiple(void) {
    int provided = -1, flag = -1;
    OK(MPI_Query_thread(&provided));
    CHECK(provided == MPI_THREAD_MULTIPLE, "Query_thread: %d", provided);
    OK(MPI_Is_thread_main(&flag));
    CHECK(flag == 1, "the initializing thread is the main one: %d", flag);
    for (int t = 0; t < NT; t++) OK(MPI_Comm_dup(MPI_COMM_WORLD, &comms[t]));
    unsigned seed = 12345;
    OK(MPI_Bcast(&seed, 1, MPI_UNSIGNED, 0, MPI_COMM_WORLD));
    pthread_t th[NT];
    struct worker w[NT];
    for (int t = 0; t < NT; t++) {
        w[t].t = t;
        w[t].seed = seed * 2654435761u + (unsigned)t * 40503u + 1;
        CHECK(pthread_create(&th[t], NULL, work, &w[t]) == 0, "pthread_create");
    }
    for (int t = 0; t < NT; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < NT; t++) OK(MPI_Comm_free(&comms[t]));
}

/* The calls of a thread other than the main one at SINGLE or FUNNELED. */
struct refused {
    int size_rc, send_rc, main_rc, main_flag, query_rc, query_level, init_rc, init_flag;
};

static void *refused_calls(void *arg) {
    struct refused *r = arg;
    int n = -1, x = 0;
    r->size_rc = MPI_Comm_size(MPI_COMM_WORLD, &n);
    r->send_rc = MPI_Send(&x, 1, MPI_INT, me, 0, MPI_COMM_WORLD);
    r->main_rc = MPI_Is_thread_main(&r->main_flag);
    r->query_rc = MPI_Query_thread(&r->query_level);
    r->init_rc = MPI_Initialized(&r->init_flag);
    return NULL;
}

static void not_main(int level) {
    int provided = -1;
    OK(MPI_Query_thread(&provided));
    CHECK(provided == level, "Query_thread: %d want %d", provided, level);
    struct refused r = {-1, -1, -1, -1, -1, -1, -1, -1};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, refused_calls, &r) == 0, "pthread_create");
    pthread_join(th, NULL);
    CHECK(r.size_rc == MPI_ERR_OTHER, "Comm_size from another thread: %d", r.size_rc);
    CHECK(r.send_rc == MPI_ERR_OTHER, "Send from another thread: %d", r.send_rc);
    CHECK(r.main_rc == MPI_SUCCESS && r.main_flag == 0, "Is_thread_main: %d %d", r.main_rc,
          r.main_flag);
    CHECK(r.query_rc == MPI_SUCCESS && r.query_level == level, "Query_thread: %d %d",
          r.query_rc, r.query_level);
    CHECK(r.init_rc == MPI_SUCCESS && r.init_flag == 1, "Initialized: %d %d", r.init_rc,
          r.init_flag);
    /* The main thread goes on: nothing was sent (the refused send never reached the PML). */
    int flag = 1;
    OK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE));
    CHECK(flag == 0, "a refused send was sent");
    OK(MPI_Barrier(MPI_COMM_WORLD));
}

/* SERIALIZED: a worker thread calls while the main one waits for it, then the main again. */
static void *serial_calls(void *arg) {
    int *ok = arg, flag = -1, x = me, y = -1;
    MPI_Status st;
    *ok = MPI_Is_thread_main(&flag) == MPI_SUCCESS && flag == 0;
    *ok &= MPI_Sendrecv(&x, 1, MPI_INT, right, 7, &y, 1, MPI_INT, left, 7, MPI_COMM_WORLD,
                        &st) == MPI_SUCCESS;
    *ok &= y == left;
    *ok &= MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS;
    return NULL;
}

static void serialized(void) {
    int provided = -1;
    OK(MPI_Query_thread(&provided));
    CHECK(provided == MPI_THREAD_SERIALIZED, "Query_thread: %d", provided);
    for (int i = 0; i < 3; i++) {
        int ok = 0;
        pthread_t th;
        CHECK(pthread_create(&th, NULL, serial_calls, &ok) == 0, "pthread_create");
        pthread_join(th, NULL);
        CHECK(ok, "round %d: the worker's calls", i);
        int x = me, y = -1;
        OK(MPI_Sendrecv(&x, 1, MPI_INT, right, 8, &y, 1, MPI_INT, left, 8, MPI_COMM_WORLD,
                        MPI_STATUS_IGNORE));
        CHECK(y == left, "round %d: the main thread's exchange: %d", i, y);
    }
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "multiple";
    int required = !strcmp(mode, "funneled")     ? MPI_THREAD_FUNNELED
                   : !strcmp(mode, "serialized") ? MPI_THREAD_SERIALIZED
                   : !strcmp(mode, "single")     ? MPI_THREAD_SINGLE
                                                 : MPI_THREAD_MULTIPLE;
    int provided = -1;
    if (!strcmp(mode, "single"))
        MPI_Init(&argc, &argv), provided = MPI_THREAD_SINGLE;
    else
        MPI_Init_thread(&argc, &argv, required, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    right = (me + 1) % np;
    left = (me + np - 1) % np;
    CHECK(provided == required, "provided %d, asked for %d", provided, required);
    if (required == MPI_THREAD_MULTIPLE)
        multiple();
    else if (required == MPI_THREAD_SERIALIZED)
        serialized();
    else
        not_main(required);
    checks_run += atomic_load(&t_run);
    checks_failed += atomic_load(&t_failed);
    char area[32];
    snprintf(area, sizeof area, "threads %s", mode);
    int rc = summary(area);
    MPI_Finalize();
    return rc;
}
