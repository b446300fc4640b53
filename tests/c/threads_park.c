/* Waits at MPI_THREAD_MULTIPLE while another thread makes the progress (2 ranks).
 * 1. Parked waits sleep: five threads of rank 1 block at once (MPI_Recv, MPI_Wait, MPI_Waitall,
 *    MPI_Waitany, MPI_Waitsome) on messages rank 0 sends after a pause; one thread makes the
 *    progress, the others must not burn a core meanwhile (each other thread's CPU time under
 *    10% of the pause), and every status and payload, found complete by another thread's test,
 *    is right. (Queued for the process lock in turn, every waiter made progress passes: each
 *    used about as much CPU as the others.) Run with mpi_wait_mode=spin: a wait never sleeps
 *    for want of messages, only when it has nothing to do while another thread progresses.
 * 2. An error of a parked wait is raised on the waiting thread: a truncated receive completed
 *    while another thread drives returns MPI_ERR_TRUNCATE, and the communicator's handler runs
 *    on the thread that called MPI_Wait.
 * 3. Order per thread: four threads of rank 0 send numbered messages (MPI_Send, MPI_Isend,
 *    MPI_Issend), each on its own tag of one shared communicator; four threads of rank 1
 *    receive them by a seeded random mix of MPI_Recv, MPI_Irecv + MPI_Wait, batches completed
 *    by MPI_Waitall, MPI_Waitany, MPI_Waitsome or MPI_Test polling, MPI_Iprobe + MPI_Recv, and
 *    cancelled receives of a tag nobody sends; each thread's messages match in the order its
 *    receives were posted. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "tcheck.h"

#define NW 5          /* part 1: waiting threads */
#define PAUSE_MS 400  /* part 1: how long they wait */
#define NT 4          /* part 3: threads per rank */
#define MSGS 1500     /* part 3: messages per thread */
#define BATCH 8

static int me;

static double now(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- 1. parked waits sleep ---- */

static MPI_Comm wcomm[NW];
static double cpu_used[NW], wall_used[NW];

static void check_msg(int w, const MPI_Status *st, const int *buf, int tag) {
    int count = -1;
    MPI_Get_count(st, MPI_INT, &count);
    TCHECK(st->MPI_SOURCE == 0 && st->MPI_TAG == tag && count == 4 && buf[0] == 1000 * w + tag &&
               buf[3] == tag,
           "waiter %d: source %d tag %d count %d value %d", w, st->MPI_SOURCE, st->MPI_TAG,
           count, buf[0]);
}

static void *waiter(void *arg) {
    int w = (int)(long)arg;
    MPI_Comm c = wcomm[w];
    int buf[2][4] = {{0}};
    MPI_Request r[2];
    MPI_Status st[2];
    int idx = -1, out = 0, ind[2];
    double c0 = now(CLOCK_THREAD_CPUTIME_ID), t0 = now(CLOCK_MONOTONIC);
    switch (w) {
    case 0:
        TCHECK(MPI_Recv(buf[0], 4, MPI_INT, 0, 0, c, &st[0]) == MPI_SUCCESS, "recv");
        check_msg(w, &st[0], buf[0], 0);
        break;
    case 1:
        MPI_Irecv(buf[0], 4, MPI_INT, 0, 0, c, &r[0]);
        TCHECK(MPI_Wait(&r[0], &st[0]) == MPI_SUCCESS && r[0] == MPI_REQUEST_NULL, "wait");
        check_msg(w, &st[0], buf[0], 0);
        break;
    case 2:
        MPI_Irecv(buf[0], 4, MPI_INT, 0, 0, c, &r[0]);
        MPI_Irecv(buf[1], 4, MPI_INT, 0, 1, c, &r[1]);
        TCHECK(MPI_Waitall(2, r, st) == MPI_SUCCESS, "waitall");
        check_msg(w, &st[0], buf[0], 0);
        check_msg(w, &st[1], buf[1], 1);
        break;
    case 3:
        MPI_Irecv(buf[0], 4, MPI_INT, 0, 0, c, &r[0]);
        TCHECK(MPI_Waitany(1, r, &idx, &st[0]) == MPI_SUCCESS && idx == 0, "waitany %d", idx);
        check_msg(w, &st[0], buf[0], 0);
        break;
    default:
        MPI_Irecv(buf[0], 4, MPI_INT, 0, 0, c, &r[0]);
        TCHECK(MPI_Waitsome(1, r, &out, ind, st) == MPI_SUCCESS && out == 1 && ind[0] == 0,
               "waitsome %d", out);
        check_msg(w, &st[0], buf[0], 0);
        break;
    }
    cpu_used[w] = now(CLOCK_THREAD_CPUTIME_ID) - c0;
    wall_used[w] = now(CLOCK_MONOTONIC) - t0;
    return NULL;
}

static void parked_waits_sleep(void) {
    for (int w = 0; w < NW; w++) MPI_Comm_dup(MPI_COMM_WORLD, &wcomm[w]);
    if (me == 0) {
        MPI_Barrier(MPI_COMM_WORLD);
        usleep(PAUSE_MS * 1000);
        for (int w = 0; w < NW; w++)
            for (int tag = 0; tag < (w == 2 ? 2 : 1); tag++) {
                int v[4] = {1000 * w + tag, 0, 0, tag};
                MPI_Send(v, 4, MPI_INT, 1, tag, wcomm[w]);
            }
    } else {
        pthread_t th[NW];
        for (long w = 0; w < NW; w++) pthread_create(&th[w], NULL, waiter, (void *)w);
        /* The waiters are in their calls before rank 0's pause starts (most of it is left). */
        usleep(50 * 1000);
        MPI_Barrier(MPI_COMM_WORLD);
        for (int w = 0; w < NW; w++) pthread_join(th[w], NULL);
        /* One thread drives; the others slept. The busiest is the driver. */
        int busiest = 0;
        for (int w = 1; w < NW; w++)
            if (cpu_used[w] > cpu_used[busiest]) busiest = w;
        for (int w = 0; w < NW; w++) {
            TCHECK(wall_used[w] > PAUSE_MS * 0.5e-3, "waiter %d waited only %.3f s", w,
                   wall_used[w]);
            if (w != busiest)
                TCHECK(cpu_used[w] < 0.1 * PAUSE_MS * 1e-3,
                       "waiter %d used %.1f ms of CPU in a %.1f ms wait while thread %d drove "
                       "(%.1f ms): a waiting thread must sleep while another makes the progress",
                       w, cpu_used[w] * 1e3, wall_used[w] * 1e3, busiest,
                       cpu_used[busiest] * 1e3);
        }
    }
    for (int w = 0; w < NW; w++) MPI_Comm_free(&wcomm[w]);
}

/* ---- 2. an error of a parked wait is raised on the waiting thread ---- */

static MPI_Comm ecomm, dcomm;
static pthread_t handler_thread;
static atomic_int handler_runs;

static void on_error(MPI_Comm *c, int *code, ...) {
    (void)c;
    (void)code;
    handler_thread = pthread_self();
    atomic_fetch_add(&handler_runs, 1);
}

static void *driver(void *arg) {
    (void)arg;
    int v = 0;
    MPI_Status st;
    /* Drives while the other thread's receive is truncated; ends when rank 0 is told. */
    TCHECK(MPI_Recv(&v, 1, MPI_INT, 0, 99, dcomm, &st) == MPI_SUCCESS && v == 99, "driver %d", v);
    return NULL;
}

static void errors_on_the_waiting_thread(void) {
    MPI_Comm_dup(MPI_COMM_WORLD, &ecomm);
    MPI_Comm_dup(MPI_COMM_WORLD, &dcomm);
    if (me == 0) {
        int big[8] = {1, 2, 3, 4, 5, 6, 7, 8}, v = 99, go = 0;
        MPI_Recv(&go, 1, MPI_INT, 1, 6, ecomm, MPI_STATUS_IGNORE);
        usleep(100 * 1000); /* rank 1's MPI_Wait is parked by then */
        MPI_Send(big, 8, MPI_INT, 1, 5, ecomm);
        MPI_Recv(&go, 1, MPI_INT, 1, 6, ecomm, MPI_STATUS_IGNORE);
        MPI_Send(&v, 1, MPI_INT, 1, 99, dcomm);
    } else {
        MPI_Errhandler eh;
        MPI_Comm_create_errhandler(on_error, &eh);
        MPI_Comm_set_errhandler(ecomm, eh);
        pthread_t d;
        pthread_create(&d, NULL, driver, NULL);
        usleep(50 * 1000); /* the driver is in its receive */
        int small[4] = {0}, go = 1;
        MPI_Request r;
        MPI_Status st;
        MPI_Irecv(small, 4, MPI_INT, 0, 5, ecomm, &r);
        MPI_Send(&go, 1, MPI_INT, 0, 6, ecomm);
        int rc = MPI_Wait(&r, &st);
        int cls = -1;
        MPI_Error_class(rc, &cls);
        TCHECK(cls == MPI_ERR_TRUNCATE, "a truncated receive's wait returned class %d", cls);
        TCHECK(atomic_load(&handler_runs) == 1 && pthread_equal(handler_thread, pthread_self()),
               "the error handler ran %d times, on the waiting thread: %d",
               atomic_load(&handler_runs), pthread_equal(handler_thread, pthread_self()));
        MPI_Send(&go, 1, MPI_INT, 0, 6, ecomm);
        pthread_join(d, NULL);
        MPI_Errhandler_free(&eh);
    }
    MPI_Comm_free(&ecomm);
    MPI_Comm_free(&dcomm);
}

/* ---- 3. order per thread ---- */

static MPI_Comm shared;

static unsigned next_rand(unsigned *s) {
    unsigned x = *s;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return *s = x;
}

static void *sender(void *arg) {
    int t = (int)(long)arg;
    unsigned s = 0x9e3779b9u * (unsigned)(t + 1);
    for (int i = 0; i < MSGS; i++) {
        int v[2] = {t, i};
        MPI_Request r;
        switch (next_rand(&s) % 3) {
        case 0:
            MPI_Send(v, 2, MPI_INT, 1, t, shared);
            break;
        case 1:
            MPI_Isend(v, 2, MPI_INT, 1, t, shared, &r);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
            break;
        default:
            MPI_Issend(v, 2, MPI_INT, 1, t, shared, &r);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
            break;
        }
    }
    return NULL;
}

struct rx {
    int t, expect;
};

static void got(struct rx *x, const int *v, const MPI_Status *st, const char *how) {
    TCHECK(v[0] == x->t && v[1] == x->expect && st->MPI_TAG == x->t,
           "thread %d by %s: message %d of thread %d (tag %d), expected %d", x->t, how, v[1],
           v[0], st->MPI_TAG, x->expect);
    x->expect = v[1] + 1;
}

static void *receiver(void *arg) {
    struct rx x = {(int)(long)arg, 0};
    int t = x.t;
    unsigned s = 0x85ebca6bu * (unsigned)(t + 1);
    int buf[BATCH][2];
    MPI_Request r[BATCH];
    MPI_Status st[BATCH];
    while (x.expect < MSGS) {
        int left = MSGS - x.expect;
        int n = 1 + (int)(next_rand(&s) % BATCH);
        if (n > left) n = left;
        switch (next_rand(&s) % 7) {
        case 0:
            MPI_Recv(buf[0], 2, MPI_INT, 0, t, shared, &st[0]);
            got(&x, buf[0], &st[0], "MPI_Recv");
            break;
        case 1:
            MPI_Irecv(buf[0], 2, MPI_INT, 0, t, shared, &r[0]);
            MPI_Wait(&r[0], &st[0]);
            got(&x, buf[0], &st[0], "MPI_Wait");
            break;
        case 2:
            for (int k = 0; k < n; k++) MPI_Irecv(buf[k], 2, MPI_INT, 0, t, shared, &r[k]);
            MPI_Waitall(n, r, st);
            for (int k = 0; k < n; k++) got(&x, buf[k], &st[k], "MPI_Waitall");
            break;
        case 3:
        case 4: {
            /* Completed in any order: checked in the order posted. */
            int done = 0, idx, out, ind[BATCH];
            MPI_Status all[BATCH];
            for (int k = 0; k < n; k++) MPI_Irecv(buf[k], 2, MPI_INT, 0, t, shared, &r[k]);
            while (done < n) {
                if (next_rand(&s) % 2) {
                    MPI_Waitany(n, r, &idx, &st[0]);
                    all[idx] = st[0];
                    done++;
                } else {
                    MPI_Waitsome(n, r, &out, ind, st);
                    for (int k = 0; k < out; k++) all[ind[k]] = st[k];
                    done += out;
                }
            }
            for (int k = 0; k < n; k++) got(&x, buf[k], &all[k], "MPI_Waitany/Waitsome");
            break;
        }
        case 5: {
            int flag = 0;
            MPI_Irecv(buf[0], 2, MPI_INT, 0, t, shared, &r[0]);
            while (!flag) MPI_Test(&r[0], &flag, &st[0]);
            got(&x, buf[0], &st[0], "MPI_Test");
            break;
        }
        default: {
            /* A receive nobody sends to, cancelled; then a probe and the receive. */
            int flag = 0, cancelled = 0;
            MPI_Request c;
            MPI_Irecv(buf[1], 2, MPI_INT, 0, 1000 + t, shared, &c);
            while (!flag) MPI_Iprobe(0, t, shared, &flag, &st[0]);
            MPI_Cancel(&c);
            MPI_Wait(&c, &st[1]);
            MPI_Test_cancelled(&st[1], &cancelled);
            TCHECK(cancelled, "thread %d: a receive of a tag nobody sends was not cancelled", t);
            MPI_Recv(buf[0], 2, MPI_INT, 0, t, shared, &st[0]);
            got(&x, buf[0], &st[0], "MPI_Iprobe + MPI_Recv");
            break;
        }
        }
    }
    return NULL;
}

static void order_per_thread(void) {
    MPI_Comm_dup(MPI_COMM_WORLD, &shared);
    pthread_t th[NT];
    for (long t = 0; t < NT; t++)
        pthread_create(&th[t], NULL, me == 0 ? sender : receiver, (void *)t);
    for (int t = 0; t < NT; t++) pthread_join(th[t], NULL);
    MPI_Comm_free(&shared);
}

int main(int argc, char **argv) {
    int provided = -1, np = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    CHECK(provided == MPI_THREAD_MULTIPLE && np == 2, "provided %d on %d ranks", provided, np);
    if (provided == MPI_THREAD_MULTIPLE && np == 2) {
        parked_waits_sleep();
        MPI_Barrier(MPI_COMM_WORLD);
        errors_on_the_waiting_thread();
        MPI_Barrier(MPI_COMM_WORLD);
        order_per_thread();
    }
    tcheck_merge();
    int rc = summary("threads_park");
    MPI_Finalize();
    return rc;
}
