/* MPI_Isend/MPI_Irecv queued for the process lock's holder at MPI_THREAD_MULTIPLE (the
 * library's handoff, bindings/c/src/handoff.rs), 2 ranks.
 * 1. A call made while another thread holds the lock returns at once and reports what it
 *    would have refused at completion: while a thread of rank 1 blocks in MPI_Recv (it holds
 *    the lock and drives the progress), another thread's MPI_Isend to a rank out of range
 *    returns MPI_SUCCESS and its MPI_Wait returns MPI_ERR_RANK (on MPI_ERRORS_RETURN); a
 *    queued MPI_Irecv from MPI_PROC_NULL completes with the empty status. (Taking the lock in
 *    every call, MPI_Isend itself returned MPI_ERR_RANK.)
 * 2. A thread's later call does not overtake its queued one: rank 0's thread alternates
 *    MPI_Isend and MPI_Send on one communicator and tag for 300 ms while another thread polls
 *    with MPI_Iprobe (the lock busy and handed from call to call); rank 1 receives them in
 *    order.
 * 3. Stress: four threads per rank; thread t of rank 0 sends MSGS numbered messages to thread t
 *    of rank 1, each on the shared communicator (tag t) or on its own one (tag 0), both sides
 *    choosing with the same seeded generator, of 1 to 4096 ints (some past the eager size);
 *    posted by MPI_Isend (MPI_Issend, MPI_Send now and then) in windows completed by a random
 *    mix of MPI_Wait, MPI_Waitall, MPI_Test polling and MPI_Testall. Rank 1 receives by
 *    MPI_Irecv windows, MPI_Iprobe + MPI_Recv, and cancels receives of a tag nobody sends.
 *    Each message must carry the sequence number its receive expects (per-thread order on
 *    each communicator), every request handle live at once must be distinct across threads
 *    (handles issued without the lock), and every request completes exactly once (the handle
 *    becomes MPI_REQUEST_NULL, a count of completions per thread matches its posts). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

#include "tcheck.h"

#define NT 4
#define MSGS 1200
#define WIN 16
#define MAXN 4096
#define NOTAG 999

static int me;

/* ---- 1. a queued call's error is raised at completion ---- */

static MPI_Comm hold_comm, err_comm;

static void *holder(void *arg) {
    (void)arg;
    int v = 0;
    /* Blocks (holding the lock and driving) until rank 0 is told the other thread is done. */
    TCHECK(MPI_Recv(&v, 1, MPI_INT, 0, 7, hold_comm, MPI_STATUS_IGNORE) == MPI_SUCCESS && v == 7,
           "holder %d", v);
    return NULL;
}

static void errors_at_completion(void) {
    MPI_Comm_dup(MPI_COMM_WORLD, &hold_comm);
    MPI_Comm_dup(MPI_COMM_WORLD, &err_comm);
    MPI_Comm_set_errhandler(err_comm, MPI_ERRORS_RETURN);
    if (me == 0) {
        int go = 0, v = 7;
        MPI_Recv(&go, 1, MPI_INT, 1, 8, err_comm, MPI_STATUS_IGNORE);
        MPI_Send(&v, 1, MPI_INT, 1, 7, hold_comm);
    } else {
        pthread_t h;
        pthread_create(&h, NULL, holder, NULL);
        usleep(50 * 1000); /* the holder is in its receive */
        int queued = 0, x = 0, y[2] = {5, 5}, tries = 0;
        for (; tries < 50 && !queued; tries++) {
            MPI_Request r;
            int rc = MPI_Isend(&x, 1, MPI_INT, 42, 0, err_comm, &r);
            int cls = -1;
            if (rc == MPI_SUCCESS) {
                /* Queued: the refusal comes with the completion, once. */
                queued = 1;
                MPI_Status st;
                rc = MPI_Wait(&r, &st);
                MPI_Error_class(rc, &cls);
                TCHECK(cls == MPI_ERR_RANK && r == MPI_REQUEST_NULL,
                       "a queued send to rank 42 completed with class %d", cls);
                MPI_Request pn;
                TCHECK(MPI_Irecv(y, 2, MPI_INT, MPI_PROC_NULL, 3, err_comm, &pn) == MPI_SUCCESS,
                       "irecv from MPI_PROC_NULL");
                int count = -1;
                TCHECK(MPI_Wait(&pn, &st) == MPI_SUCCESS && st.MPI_SOURCE == MPI_PROC_NULL &&
                           MPI_Get_count(&st, MPI_INT, &count) == MPI_SUCCESS && count == 0 &&
                           y[0] == 5,
                       "MPI_PROC_NULL receive: source %d count %d", st.MPI_SOURCE, count);
            } else {
                MPI_Error_class(rc, &cls);
                TCHECK(cls == MPI_ERR_RANK, "a refused send to rank 42: class %d", cls);
                usleep(1000);
            }
        }
        TCHECK(queued, "no MPI_Isend of %d made while another thread blocks in MPI_Recv "
                       "returned at once: each waited for the lock",
               tries);
        int go = 1;
        MPI_Send(&go, 1, MPI_INT, 0, 8, err_comm);
        pthread_join(h, NULL);
    }
    MPI_Comm_free(&hold_comm);
    MPI_Comm_free(&err_comm);
}

/* ---- 2. a thread's later call does not overtake its queued one ---- */

#define ORDER_MS 300
static MPI_Comm order_comm, poll_comm;
static atomic_int order_done;

static void *poller(void *arg) {
    (void)arg;
    int flag;
    /* Short calls back to back: the lock is mostly held, and handed from one call to the next. */
    while (!atomic_load(&order_done))
        MPI_Iprobe(1, 0, poll_comm, &flag, MPI_STATUS_IGNORE);
    return NULL;
}

/* Rank 0's thread sends MPI_Isend (queued when the poller holds the lock) then MPI_Send,
 * both on one communicator and tag, for ORDER_MS while another thread polls, then -1; rank 1
 * receives them in order. The MPI_Send takes the lock and must start the queued MPI_Isend
 * first. (On a core shared by the two threads the poller is caught inside a call at the
 * scheduler's ticks: the loop runs for a time, not a count.) */
static void order_behind_queued(void) {
    MPI_Comm_dup(MPI_COMM_WORLD, &order_comm);
    MPI_Comm_dup(MPI_COMM_WORLD, &poll_comm);
    if (me == 0) {
        pthread_t p;
        atomic_store(&order_done, 0);
        pthread_create(&p, NULL, poller, NULL);
        static int seq[64];
        MPI_Request r[32];
        double end = MPI_Wtime() + ORDER_MS * 1e-3;
        int k = 0;
        for (; k % 32 != 0 || MPI_Wtime() < end; k++) {
            int *v = &seq[2 * (k % 32)];
            v[0] = 2 * k;
            v[1] = 2 * k + 1;
            MPI_Isend(&v[0], 1, MPI_INT, 1, 0, order_comm, &r[k % 32]);
            MPI_Send(&v[1], 1, MPI_INT, 1, 0, order_comm);
            if (k % 32 == 31) MPI_Waitall(32, r, MPI_STATUSES_IGNORE);
        }
        int last = -1;
        MPI_Send(&last, 1, MPI_INT, 1, 0, order_comm);
        atomic_store(&order_done, 1);
        pthread_join(p, NULL);
    } else {
        int bad = 0, first = -1, k = 0;
        for (;; k++) {
            int v = -2;
            MPI_Recv(&v, 1, MPI_INT, 0, 0, order_comm, MPI_STATUS_IGNORE);
            if (v == -1) break;
            if (v != k && bad++ == 0) first = k;
        }
        TCHECK(bad == 0 && k > 0,
               "%d of %d messages out of order (first: receive %d): a blocking send overtook "
               "the same thread's queued MPI_Isend",
               bad, k, first);
    }
    MPI_Comm_free(&order_comm);
    MPI_Comm_free(&poll_comm);
}

/* ---- 3. stress ---- */

static MPI_Comm shared, own[NT];
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static MPI_Request live[NT][WIN + 1];

static uint64_t next_rand(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Record request `r` live in thread t's place `i`: no other thread's live request has it. */
static void mark_live(int t, int i, MPI_Request r) {
    pthread_mutex_lock(&live_mu);
    for (int u = 0; u < NT; u++)
        for (int j = 0; j <= WIN; j++)
            if ((u != t || j != i) && live[u][j] == r)
                TCHECK(0, "request %#lx handed to thread %d while thread %d holds it",
                       (unsigned long)(uintptr_t)r, t, u);
    live[t][i] = r;
    pthread_mutex_unlock(&live_mu);
}

static void unmark(int t, int i) {
    pthread_mutex_lock(&live_mu);
    live[t][i] = MPI_REQUEST_NULL;
    pthread_mutex_unlock(&live_mu);
}

/* Message k of thread t: its communicator (the same generator on both ranks), tag, size. */
struct plan {
    MPI_Comm comm;
    int tag, n;
};

static struct plan plan_of(int t, uint64_t *s) {
    uint64_t x = next_rand(s);
    struct plan p;
    p.comm = (x & 1) ? shared : own[t];
    p.tag = (x & 1) ? t : 0;
    p.n = (x >> 8) % 16 == 0 ? 1 + (int)((x >> 16) % MAXN) : 1 + (int)((x >> 16) % 8);
    return p;
}

static int *bufs[NT][WIN];

static void fill(int *b, int t, int k, int n) {
    for (int i = 0; i < n; i++) b[i] = (i == 0) ? k : t * 1000003 + k + i;
}

static void check_payload(int t, int k, const int *b, int n, const MPI_Status *st,
                          const struct plan *p) {
    int count = -1;
    MPI_Get_count(st, MPI_INT, &count);
    TCHECK(b[0] == k && count == n && st->MPI_SOURCE == 0 && st->MPI_TAG == p->tag &&
               b[n - 1] == (n == 1 ? k : t * 1000003 + k + n - 1),
           "thread %d: receive %d got message %d (count %d of %d, tag %d): out of order", t, k,
           b[0], count, n, st->MPI_TAG);
}

/* Complete the window `r[0..n)` (MPI_REQUEST_NULL for sends that were blocking) by a random
 * mix; `completions` counts the requests completed. */
static void complete_window(int t, MPI_Request *r, int n, uint64_t *s, int *completions,
                            MPI_Status *st) {
    int was[WIN], live_n = 0;
    for (int i = 0; i < n; i++) live_n += was[i] = r[i] != MPI_REQUEST_NULL;
    switch (next_rand(s) % 4) {
    case 0:
        TCHECK(MPI_Waitall(n, r, st) == MPI_SUCCESS, "waitall");
        break;
    case 1:
        for (int i = 0; i < n; i++)
            if (was[i])
                TCHECK(MPI_Wait(&r[i], &st[i]) == MPI_SUCCESS, "wait");
        break;
    case 2: {
        int left = live_n;
        while (left > 0)
            for (int i = 0; i < n; i++) {
                if (r[i] == MPI_REQUEST_NULL) continue;
                int flag = 0;
                TCHECK(MPI_Test(&r[i], &flag, &st[i]) == MPI_SUCCESS, "test");
                if (flag) {
                    TCHECK(r[i] == MPI_REQUEST_NULL, "a completed test left its request");
                    left--;
                }
            }
        break;
    }
    default: {
        int flag = 0;
        while (!flag) TCHECK(MPI_Testall(n, r, &flag, st) == MPI_SUCCESS, "testall");
    }
    }
    for (int i = 0; i < n; i++) {
        TCHECK(r[i] == MPI_REQUEST_NULL, "thread %d: request %d of the window left", t, i);
        if (was[i]) {
            unmark(t, i);
            (*completions)++;
        }
    }
}

static void *stress(void *arg) {
    int t = (int)(long)arg;
    uint64_t same = 0x9E3779B97F4A7C15ull * (uint64_t)(t + 1), mine = same ^ (uint64_t)(me + 77);
    MPI_Request r[WIN];
    MPI_Status st[WIN];
    struct plan p[WIN];
    int posts = 0, completions = 0;
    for (int k = 0; k < MSGS;) {
        int n = 1 + (int)(next_rand(&mine) % WIN);
        if (n > MSGS - k) n = MSGS - k;
        if (me == 0) {
            for (int i = 0; i < n; i++) {
                p[i] = plan_of(t, &same);
                fill(bufs[t][i], t, k + i, p[i].n);
                int how = (int)(next_rand(&mine) % 16);
                if (how == 0) {
                    /* Blocking: after the window's earlier sends on the same communicator. */
                    TCHECK(MPI_Send(bufs[t][i], p[i].n, MPI_INT, 1, p[i].tag, p[i].comm) ==
                               MPI_SUCCESS,
                           "send");
                    r[i] = MPI_REQUEST_NULL;
                    continue;
                }
                int rc = how == 1 ? MPI_Issend(bufs[t][i], p[i].n, MPI_INT, 1, p[i].tag,
                                               p[i].comm, &r[i])
                                  : MPI_Isend(bufs[t][i], p[i].n, MPI_INT, 1, p[i].tag,
                                              p[i].comm, &r[i]);
                TCHECK(rc == MPI_SUCCESS && r[i] != MPI_REQUEST_NULL, "isend");
                mark_live(t, i, r[i]);
                posts++;
            }
            /* A blocking send completed at once: count it as done for the window's mix. */
            for (int i = 0; i < n; i++)
                if (r[i] == MPI_REQUEST_NULL) {
                    posts++;
                    completions++;
                }
            complete_window(t, r, n, &mine, &completions, st);
        } else if (next_rand(&mine) % 8 == 0) {
            /* Probe, then receive: one message at a time. */
            n = 1;
            p[0] = plan_of(t, &same);
            int flag = 0;
            MPI_Status ps;
            while (!flag)
                TCHECK(MPI_Iprobe(0, p[0].tag, p[0].comm, &flag, &ps) == MPI_SUCCESS, "iprobe");
            int count = -1;
            MPI_Get_count(&ps, MPI_INT, &count);
            TCHECK(count == p[0].n, "thread %d: probed %d ints, message %d has %d", t, count, k,
                   p[0].n);
            TCHECK(MPI_Recv(bufs[t][0], MAXN, MPI_INT, 0, p[0].tag, p[0].comm, &st[0]) ==
                       MPI_SUCCESS,
                   "recv");
            check_payload(t, k, bufs[t][0], p[0].n, &st[0], &p[0]);
            posts++;
            completions++;
        } else {
            for (int i = 0; i < n; i++) {
                p[i] = plan_of(t, &same);
                bufs[t][i][0] = -1;
                TCHECK(MPI_Irecv(bufs[t][i], MAXN, MPI_INT, 0, p[i].tag, p[i].comm, &r[i]) ==
                           MPI_SUCCESS &&
                           r[i] != MPI_REQUEST_NULL,
                       "irecv");
                mark_live(t, i, r[i]);
                posts++;
            }
            if (next_rand(&mine) % 4 == 0) {
                /* A receive nobody matches, cancelled: completes once, cancelled. */
                MPI_Request c;
                int dummy, flag = 0;
                MPI_Status cs;
                TCHECK(MPI_Irecv(&dummy, 1, MPI_INT, 0, NOTAG, own[t], &c) == MPI_SUCCESS,
                       "irecv to cancel");
                mark_live(t, WIN, c);
                TCHECK(MPI_Cancel(&c) == MPI_SUCCESS, "cancel");
                TCHECK(MPI_Wait(&c, &cs) == MPI_SUCCESS && c == MPI_REQUEST_NULL, "wait cancel");
                unmark(t, WIN);
                MPI_Test_cancelled(&cs, &flag);
                TCHECK(flag, "thread %d: the cancelled receive was not cancelled", t);
            }
            complete_window(t, r, n, &mine, &completions, st);
            for (int i = 0; i < n; i++) check_payload(t, k + i, bufs[t][i], p[i].n, &st[i], &p[i]);
        }
        k += n;
    }
    TCHECK(posts == MSGS && completions == MSGS,
           "thread %d: %d posted, %d completed, of %d messages", t, posts, completions, MSGS);
    return NULL;
}

static void stress_all(void) {
    MPI_Comm_dup(MPI_COMM_WORLD, &shared);
    for (int t = 0; t < NT; t++) {
        MPI_Comm_dup(MPI_COMM_WORLD, &own[t]);
        for (int i = 0; i < WIN; i++) bufs[t][i] = malloc(MAXN * sizeof(int));
        for (int j = 0; j <= WIN; j++) live[t][j] = MPI_REQUEST_NULL;
    }
    pthread_t th[NT];
    for (long t = 0; t < NT; t++) pthread_create(&th[t], NULL, stress, (void *)t);
    for (int t = 0; t < NT; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < NT; t++) {
        MPI_Comm_free(&own[t]);
        for (int i = 0; i < WIN; i++) free(bufs[t][i]);
    }
    MPI_Comm_free(&shared);
}

int main(int argc, char **argv) {
    int provided = -1;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    CHECK(provided == MPI_THREAD_MULTIPLE, "provided %d", provided);
    errors_at_completion();
    MPI_Barrier(MPI_COMM_WORLD);
    order_behind_queued();
    MPI_Barrier(MPI_COMM_WORLD);
    stress_all();
    tcheck_merge();
    int rc = summary("threads_handoff");
    MPI_Finalize();
    return rc;
}
