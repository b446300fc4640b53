/* MPI objects are the process's, not a thread's: a datatype, a user op, a group, an info
 * object, an attribute keyval, a window, a matched message and a request made on one thread
 * are used on a second one and freed on a third (the threads one after another: at
 * MPI_THREAD_MULTIPLE by default, at MPI_THREAD_SERIALIZED with -DSERIALIZED). At MULTIPLE,
 * two threads then use the same datatype, op, group and info at once, each on its own
 * duplicate of the world. An info object made on another thread before MPI_Init is used
 * after it, and one is made, read and freed on another thread after MPI_Finalize (the calls
 * MPI allows outside init .. finalize). With -DFUNNELED, a thread other than the main one
 * that names objects the main thread made is refused (MPI_ERR_OTHER), never served. */
#include <pthread.h>

#include "check.h"

/* (The MPI_THREAD_* constants may be enumerators: the preprocessor tests these.) */
#if defined(SERIALIZED)
#define LEVEL MPI_THREAD_SERIALIZED
#define LEVEL_NAME "MPI_THREAD_SERIALIZED"
#define AREA "threads_tables serialized"
#elif defined(FUNNELED)
#define LEVEL MPI_THREAD_FUNNELED
#define LEVEL_NAME "MPI_THREAD_FUNNELED"
#define AREA "threads_tables funneled"
#else
#define MULTIPLE
#define LEVEL MPI_THREAD_MULTIPLE
#define LEVEL_NAME "MPI_THREAD_MULTIPLE"
#define AREA "threads_tables"
#endif

#define N 4 /* elements of the vector type: every other int of 2N */
#define CONC_ROUNDS 50

static int me, np, left, right;

/* The objects, made by one thread, used and freed by others. */
static MPI_Datatype vec;
static MPI_Op op;
static MPI_Group grp;
static MPI_Info info, info_before;
static int keyval = MPI_KEYVAL_INVALID;
static MPI_Win win;
static MPI_Request req;
static MPI_Message msg;
static int winbuf[2];
static int in[2 * N], attr_value = 42;

/* A user op, associative but not commutative: the decimal digits of a, then those of b. */
static int concat(int a, int b) {
    for (int d = b; d > 0; d /= 10) a *= 10;
    return a + b;
}

static void concat_op(void *invec, void *inoutvec, int *len, MPI_Datatype *dt) {
    (void)dt;
    int *a = invec, *b = inoutvec;
    for (int i = 0; i < *len; i++) b[i] = concat(a[i], b[i]);
}

/* What the reduction of me + 1 over the ranks gives: 1, 12, 123, ... */
static int concat_all(void) {
    int want = 1;
    for (int k = 1; k < np; k++) want = concat(want, k + 1);
    return want;
}

static void *make(void *arg) {
    (void)arg;
    OK(MPI_Type_vector(N, 1, 2, MPI_INT, &vec));
    OK(MPI_Type_commit(&vec));
    OK(MPI_Op_create(concat_op, 0, &op));
    MPI_Group world;
    OK(MPI_Comm_group(MPI_COMM_WORLD, &world));
    int ranks[64];
    for (int k = 0; k < np && k < 64; k++) ranks[k] = np - 1 - k;
    OK(MPI_Group_incl(world, np, ranks, &grp)); /* the ranks in reverse order */
    OK(MPI_Group_free(&world));
    OK(MPI_Info_create(&info));
    OK(MPI_Info_set(info, "made_by", "another thread"));
    OK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &keyval, NULL));
    OK(MPI_Comm_set_attr(MPI_COMM_WORLD, keyval, &attr_value));
    winbuf[0] = winbuf[1] = -1;
    OK(MPI_Win_create(winbuf, sizeof winbuf, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    /* A receive on the derived type, completed by a send from the user thread. */
    for (int i = 0; i < 2 * N; i++) in[i] = -1;
    OK(MPI_Irecv(in, 1, vec, left, 5, MPI_COMM_WORLD, &req));
    /* A message matched here, received by the user thread. */
    int x = 100 + me;
    OK(MPI_Send(&x, 1, MPI_INT, right, 6, MPI_COMM_WORLD));
    OK(MPI_Mprobe(left, 6, MPI_COMM_WORLD, &msg, MPI_STATUS_IGNORE));
    return NULL;
}

static void *use(void *arg) {
    (void)arg;
    int size = -1;
    OK(MPI_Type_size(vec, &size));
    CHECK(size == N * (int)sizeof(int), "the vector type's size: %d", size);
    int out[2 * N];
    for (int i = 0; i < 2 * N; i++) out[i] = 10 * me + i;
    OK(MPI_Send(out, 1, vec, right, 5, MPI_COMM_WORLD));
    MPI_Status st;
    OK(MPI_Wait(&req, &st));
    CHECK(req == MPI_REQUEST_NULL, "the request made on another thread completed");
    for (int i = 0; i < 2 * N; i++) {
        int want = i % 2 == 0 ? 10 * left + i : -1;
        CHECK(in[i] == want, "received element %d: %d want %d", i, in[i], want);
    }
    int y = -1;
    OK(MPI_Mrecv(&y, 1, MPI_INT, &msg, MPI_STATUS_IGNORE));
    CHECK(y == 100 + left && msg == MPI_MESSAGE_NULL, "the matched message: %d", y);
    /* The user op, applied in rank order. */
    int v = me + 1, r = -1;
    OK(MPI_Allreduce(&v, &r, 1, MPI_INT, op, MPI_COMM_WORLD));
    CHECK(r == concat_all(), "allreduce with the user op: %d want %d", r, concat_all());
    int commute = -1;
    OK(MPI_Op_commutative(op, &commute));
    CHECK(commute == 0, "the op is not commutative: %d", commute);
    int gsize = -1, grank = -2;
    OK(MPI_Group_size(grp, &gsize));
    OK(MPI_Group_rank(grp, &grank));
    CHECK(gsize == np, "group size %d", gsize);
    CHECK(grank == np - 1 - me, "group rank %d", grank);
    char value[64] = "";
    int flag = 0;
    OK(MPI_Info_get(info, "made_by", sizeof value - 1, value, &flag));
    CHECK(flag && !strcmp(value, "another thread"), "info value '%s' (%d)", value, flag);
    OK(MPI_Info_get(info_before, "made", sizeof value - 1, value, &flag));
    CHECK(flag && !strcmp(value, "before MPI_Init"), "info made before init: '%s'", value);
    /* A session started on this thread reports the runtime's thread level. */
    MPI_Session session;
    MPI_Info sinfo;
    OK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &session));
    OK(MPI_Session_get_info(session, &sinfo));
    OK(MPI_Info_get(sinfo, "thread_level", sizeof value - 1, value, &flag));
    CHECK(flag && !strcmp(value, LEVEL_NAME), "the session's thread_level: '%s'", value);
    OK(MPI_Info_free(&sinfo));
    OK(MPI_Session_finalize(&session));
    /* A level that does not exist is refused while MPI runs too, not ignored. */
    MPI_Info bad;
    OK(MPI_Info_create(&bad));
    OK(MPI_Info_set(bad, "thread_level", "MPI_THREAD_SOMETIMES"));
    int bad_rc = MPI_Session_init(bad, MPI_ERRORS_RETURN, &session);
    CHECK(bad_rc == MPI_ERR_ARG, "a session asking for SOMETIMES while MPI runs: %d", bad_rc);
    OK(MPI_Info_free(&bad));
    int *a = NULL;
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, keyval, &a, &flag));
    CHECK(flag && a == &attr_value, "the attribute: %d %p", flag, (void *)a);
    OK(MPI_Win_fence(0, win));
    int pair[2] = {me, 7 * me};
    OK(MPI_Put(pair, 2, MPI_INT, right, 0, 2, MPI_INT, win));
    OK(MPI_Win_fence(0, win));
    CHECK(winbuf[0] == left && winbuf[1] == 7 * left, "put into the window: %d %d", winbuf[0],
          winbuf[1]);
    return NULL;
}

static void *free_all(void *arg) {
    (void)arg;
    OK(MPI_Type_free(&vec));
    CHECK(vec == MPI_DATATYPE_NULL, "the freed type's handle");
    OK(MPI_Op_free(&op));
    CHECK(op == MPI_OP_NULL, "the freed op's handle");
    OK(MPI_Group_free(&grp));
    CHECK(grp == MPI_GROUP_NULL, "the freed group's handle");
    OK(MPI_Info_free(&info));
    OK(MPI_Info_free(&info_before));
    CHECK(info == MPI_INFO_NULL && info_before == MPI_INFO_NULL, "the freed infos' handles");
    OK(MPI_Comm_delete_attr(MPI_COMM_WORLD, keyval));
    OK(MPI_Comm_free_keyval(&keyval));
    CHECK(keyval == MPI_KEYVAL_INVALID, "the freed keyval");
    OK(MPI_Win_free(&win));
    CHECK(win == MPI_WIN_NULL, "the freed window's handle");
    return NULL;
}

/* Made on another thread before MPI_Init; and a session asking for a thread level that does
 * not exist is refused (MPI_ERR_ARG), starting nothing. */
static void *before_init(void *arg) {
    int *rc = arg;
    rc[0] = MPI_Info_create(&info_before);
    if (rc[0] == MPI_SUCCESS) rc[0] = MPI_Info_set(info_before, "made", "before MPI_Init");
    MPI_Info bad;
    MPI_Session s = MPI_SESSION_NULL;
    MPI_Info_create(&bad);
    MPI_Info_set(bad, "thread_level", "MPI_THREAD_SOMETIMES");
    rc[1] = MPI_Session_init(bad, MPI_ERRORS_RETURN, &s);
    MPI_Info_free(&bad);
    return NULL;
}

/* After MPI_Finalize, on another thread: an info object made, read and freed. */
static void *after_finalize(void *arg) {
    int *ok = arg, flag = 0;
    MPI_Info i = MPI_INFO_NULL;
    char v[16] = "";
    *ok = MPI_Info_create(&i) == MPI_SUCCESS && MPI_Info_set(i, "k", "v") == MPI_SUCCESS &&
          MPI_Info_get(i, "k", sizeof v - 1, v, &flag) == MPI_SUCCESS && flag &&
          !strcmp(v, "v") && MPI_Info_free(&i) == MPI_SUCCESS && i == MPI_INFO_NULL;
    return NULL;
}

static void in_thread(void *(*f)(void *), void *arg) {
    pthread_t th;
    CHECK(pthread_create(&th, NULL, f, arg) == 0, "pthread_create");
    pthread_join(th, NULL);
}

#ifdef MULTIPLE
/* Two threads at once on the same datatype, op, group and info, each on its own duplicate. */
struct conc {
    MPI_Comm comm;
    MPI_Datatype type;
    MPI_Op op;
    int t, failed;
};

static void *concurrent(void *arg) {
    struct conc *c = arg;
    for (int r = 0; r < CONC_ROUNDS; r++) {
        int out[2 * N], got[2 * N], size = -1, gsize = -1, flag = 0, v = me + 1, red = -1;
        for (int i = 0; i < 2 * N; i++) out[i] = 1000 * c->t + 10 * me + r + i, got[i] = -1;
        c->failed += MPI_Sendrecv(out, 1, c->type, right, r, got, 1, c->type, left, r, c->comm,
                                  MPI_STATUS_IGNORE) != MPI_SUCCESS;
        for (int i = 0; i < 2 * N; i += 2) c->failed += got[i] != 1000 * c->t + 10 * left + r + i;
        c->failed += MPI_Type_size(c->type, &size) != MPI_SUCCESS || size != N * (int)sizeof(int);
        c->failed += MPI_Allreduce(&v, &red, 1, MPI_INT, c->op, c->comm) != MPI_SUCCESS;
        c->failed += red != concat_all();
        c->failed += MPI_Group_size(grp, &gsize) != MPI_SUCCESS || gsize != np;
        char value[64] = "";
        c->failed += MPI_Info_get(info, "made_by", sizeof value - 1, value, &flag) != MPI_SUCCESS ||
                     !flag;
    }
    return NULL;
}

static void at_once(void) {
    struct conc c[2];
    pthread_t th[2];
    for (int t = 0; t < 2; t++) {
        c[t].t = t, c[t].failed = 0, c[t].type = vec, c[t].op = op;
        OK(MPI_Comm_dup(MPI_COMM_WORLD, &c[t].comm));
    }
    for (int t = 0; t < 2; t++)
        CHECK(pthread_create(&th[t], NULL, concurrent, &c[t]) == 0, "pthread_create");
    for (int t = 0; t < 2; t++) {
        pthread_join(th[t], NULL);
        CHECK(c[t].failed == 0, "thread %d: %d failures using the shared objects at once", t,
              c[t].failed);
        OK(MPI_Comm_free(&c[t].comm));
    }
}
#endif

#ifdef FUNNELED
/* A thread other than the main one names objects the main thread made: refused. */
static void *refused(void *arg) {
    int *rc = arg, size = -1;
    rc[0] = MPI_Type_size(vec, &size);
    rc[1] = MPI_Group_size(grp, &size);
    rc[2] = MPI_Op_commutative(op, &size);
    return NULL;
}
#endif

int main(int argc, char **argv) {
    int rc[2] = {-1, -1};
    in_thread(before_init, rc);
    int provided = -1;
    MPI_Init_thread(&argc, &argv, LEVEL, &provided);
    CHECK(rc[0] == MPI_SUCCESS, "MPI_Info_create/set before MPI_Init on another thread: %d", rc[0]);
    CHECK(rc[1] == MPI_ERR_ARG, "a session asking for thread level SOMETIMES: %d", rc[1]);
    CHECK(provided == LEVEL, "provided %d, asked for %d", provided, LEVEL);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    right = (me + 1) % np;
    left = (me + np - 1) % np;
#ifdef FUNNELED
    make(NULL);
    int refusals[3] = {-1, -1, -1};
    in_thread(refused, refusals);
    for (int i = 0; i < 3; i++)
        CHECK(refusals[i] == MPI_ERR_OTHER, "call %d from another thread: %d", i, refusals[i]);
    use(NULL);
    free_all(NULL);
#else
    in_thread(make, NULL);
    in_thread(use, NULL);
#ifdef MULTIPLE
    at_once();
#endif
    in_thread(free_all, NULL);
#endif
    int code = summary(AREA);
    MPI_Finalize();
    int ok = 0;
    in_thread(after_finalize, &ok);
    if (!ok) {
        fprintf(stderr, "FAIL rank %d: MPI_Info_* on another thread after MPI_Finalize\n", me);
        code = 1;
    }
    return code;
}
