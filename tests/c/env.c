/* The environment: init/finalize queries, versions, time, names, communicator management,
 * attributes and error handlers. */
#include "check.h"
#include <pthread.h>

/* What another thread than the initializing one sees: MPI is initialized (process-wide), and
 * it is not the main thread (MPI_THREAD_MULTIPLE, asked for and provided). */
static int other_initialized = -1, other_is_main = -1;
static void *other_thread(void *arg) {
    (void)arg;
    MPI_Initialized(&other_initialized);
    MPI_Is_thread_main(&other_is_main);
    return NULL;
}

static int handler_calls, handler_code;
static MPI_Comm handler_comm;
static void my_handler(MPI_Comm *comm, int *code, ...) {
    handler_calls++;
    handler_code = *code;
    handler_comm = *comm;
}

int main(int argc, char **argv) {
    int flag = -1, provided = -1, rank, size, len;
    /* Callable before MPI_Init. */
    MPI_Initialized(&flag);
    int before_init = flag;
    MPI_Finalized(&flag);
    int before_fin = flag;
    int v = 0, sv = -1, amaj = -1, amin = -1;
    MPI_Get_version(&v, &sv);
    MPI_Abi_get_version(&amaj, &amin);
    /* MPI_Info_create_env's object does not depend on MPI's state (MPICH's infocreateenv). */
    MPI_Info env_before = MPI_INFO_NULL;
    int env_rc = MPI_Info_create_env(argc, argv, &env_before);

    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) return 2;
    CHECK(env_rc == MPI_SUCCESS, "MPI_Info_create_env before MPI_Init: %d", env_rc);
    {
        MPI_Info env_after;
        int nb = -1, na = -2;
        OK(MPI_Info_create_env(argc, argv, &env_after));
        OK(MPI_Info_get_nkeys(env_before, &nb));
        OK(MPI_Info_get_nkeys(env_after, &na));
        CHECK(nb == na && nb >= 3, "env keys before %d, after %d", nb, na);
        for (int i = 0; i < nb && nb == na; i++) {
            char key[MPI_MAX_INFO_KEY + 1], vb[256], va[256];
            int fb = 0, fa = 0;
            OK(MPI_Info_get_nthkey(env_before, i, key));
            OK(MPI_Info_get(env_before, key, 255, vb, &fb));
            OK(MPI_Info_get(env_after, key, 255, va, &fa));
            CHECK(fb && fa && strcmp(vb, va) == 0, "env %s: '%s' before init, '%s' after", key, vb,
                  fa ? va : "(none)");
        }
        OK(MPI_Info_free(&env_after));
        OK(MPI_Info_free(&env_before));
    }
    CHECK(before_init == 0 && before_fin == 0, "before init: initialized %d finalized %d", before_init, before_fin);
    CHECK(v == 5 && sv == 0, "version %d.%d", v, sv);
    CHECK(amaj == 1 && amin == 0, "abi %d.%d", amaj, amin);
    CHECK(provided == MPI_THREAD_MULTIPLE, "provided %d", provided);
    OK(MPI_Query_thread(&provided));
    CHECK(provided == MPI_THREAD_MULTIPLE, "query %d", provided);
    OK(MPI_Is_thread_main(&flag));
    CHECK(flag == 1, "is_thread_main %d", flag);
    OK(MPI_Initialized(&flag));
    CHECK(flag == 1, "initialized %d", flag);
    pthread_t other;
    CHECK(pthread_create(&other, NULL, other_thread, NULL) == 0, "pthread_create");
    pthread_join(other, NULL);
    CHECK(other_initialized == 1 && other_is_main == 0, "another thread: initialized %d, is_thread_main %d",
          other_initialized, other_is_main);
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(rank >= 0 && rank < size, "rank %d size %d", rank, size);

    /* ABI layout. */
    CHECK(sizeof(MPI_Status) == 8 * sizeof(int), "status size %zu", sizeof(MPI_Status));
    CHECK(sizeof(MPI_Comm) == sizeof(void *), "handle size");

    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    OK(MPI_Get_library_version(lib, &len));
    CHECK(strncmp(lib, "rmca", 4) == 0 && (int)strlen(lib) == len, "library version '%s' len %d", lib, len);
    char host[MPI_MAX_PROCESSOR_NAME];
    OK(MPI_Get_processor_name(host, &len));
    CHECK(len > 0 && (int)strlen(host) == len, "processor name '%s'", host);

    double t0 = MPI_Wtime(), tick = MPI_Wtick();
    CHECK(tick > 0 && tick < 1e-3, "wtick %g", tick);
    double t1;
    do { t1 = MPI_Wtime(); } while (t1 - t0 < 0.01);
    CHECK(t1 - t0 >= 0.01 && t1 - t0 < 5, "wtime advanced %g", t1 - t0);

    /* Attributes. */
    int *val = NULL;
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &val, &flag));
    CHECK(flag && val && *val >= 32767, "tag_ub %d", val ? *val : -1);
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_WTIME_IS_GLOBAL, &val, &flag));
    CHECK(flag && val && (*val == 0 || *val == 1), "wtime_is_global");
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &val, &flag));
    CHECK(flag && val && *val == size, "universe size %d", val ? *val : -1);
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_HOST, &val, &flag));
    CHECK(flag && *val == MPI_PROC_NULL, "host");

    /* Names. */
    char name[MPI_MAX_OBJECT_NAME];
    OK(MPI_Comm_get_name(MPI_COMM_WORLD, name, &len));
    CHECK(strcmp(name, "MPI_COMM_WORLD") == 0, "world name '%s'", name);
    OK(MPI_Comm_get_name(MPI_COMM_SELF, name, &len));
    CHECK(strcmp(name, "MPI_COMM_SELF") == 0, "self name '%s'", name);

    /* Communicators. */
    int sz = -1, r = -1, cmp = -1;
    OK(MPI_Comm_size(MPI_COMM_SELF, &sz));
    OK(MPI_Comm_rank(MPI_COMM_SELF, &r));
    CHECK(sz == 1 && r == 0, "self %d %d", sz, r);
    MPI_Comm dup = MPI_COMM_NULL, half = MPI_COMM_NULL, rev = MPI_COMM_NULL, none = MPI_COMM_WORLD;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    OK(MPI_Comm_set_name(dup, "my dup"));
    OK(MPI_Comm_get_name(dup, name, &len));
    CHECK(strcmp(name, "my dup") == 0 && len == 6, "dup name '%s'", name);
    OK(MPI_Comm_compare(MPI_COMM_WORLD, MPI_COMM_WORLD, &cmp));
    CHECK(cmp == MPI_IDENT, "ident %d", cmp);
    OK(MPI_Comm_compare(MPI_COMM_WORLD, dup, &cmp));
    CHECK(cmp == MPI_CONGRUENT, "congruent %d", cmp);
    OK(MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &rev));
    OK(MPI_Comm_rank(rev, &r));
    CHECK(r == size - 1 - rank, "reversed rank %d", r);
    OK(MPI_Comm_compare(MPI_COMM_WORLD, rev, &cmp));
    CHECK(cmp == (size == 1 ? MPI_CONGRUENT : MPI_SIMILAR), "similar %d", cmp);
    OK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half));
    OK(MPI_Comm_size(half, &sz));
    CHECK(sz == (size + 1 - rank % 2) / 2, "half size %d", sz);
    if (size > 1) {
        OK(MPI_Comm_compare(MPI_COMM_WORLD, half, &cmp));
        CHECK(cmp == MPI_UNEQUAL, "unequal %d", cmp);
    }
    OK(MPI_Comm_split(MPI_COMM_WORLD, MPI_UNDEFINED, 0, &none));
    CHECK(none == MPI_COMM_NULL, "undefined color gives MPI_COMM_NULL");
    /* Traffic on the derived communicators stays in them. */
    int token = rank, sum = 0;
    OK(MPI_Allreduce(&token, &sum, 1, MPI_INT, MPI_SUM, half));
    int want = 0;
    for (int i = rank % 2; i < size; i += 2) want += i;
    CHECK(sum == want, "sum on half %d want %d", sum, want);
    OK(MPI_Comm_free(&dup));
    CHECK(dup == MPI_COMM_NULL, "freed dup is null");
    OK(MPI_Comm_free(&half));
    OK(MPI_Comm_free(&rev));
    OK(MPI_Comm_test_inter(MPI_COMM_WORLD, &flag));
    CHECK(flag == 0, "intra");

    /* Error handlers: fatal by default, then return, then a user handler. */
    MPI_Errhandler eh;
    OK(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &eh));
    CHECK(eh == MPI_ERRORS_ARE_FATAL, "default handler");
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    OK(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &eh));
    CHECK(eh == MPI_ERRORS_RETURN, "return handler");
    int rc = MPI_Comm_free(&dup); /* MPI_COMM_NULL */
    CHECK(rc == MPI_ERR_COMM, "freeing MPI_COMM_NULL: %d", rc);
    MPI_Comm world = MPI_COMM_WORLD;
    rc = MPI_Comm_free(&world);
    CHECK(rc == MPI_ERR_COMM, "freeing world: %d", rc);
    int cls = -1;
    OK(MPI_Error_class(MPI_ERR_RANK, &cls));
    CHECK(cls == MPI_ERR_RANK, "class %d", cls);
    char msg[MPI_MAX_ERROR_STRING];
    OK(MPI_Error_string(MPI_ERR_COMM, msg, &len));
    CHECK(strstr(msg, "MPI_ERR_COMM") != NULL && strstr(msg, "cannot be freed") != NULL, "error string '%s'", msg);
    OK(MPI_Error_string(MPI_SUCCESS, msg, &len));
    CHECK(len > 0, "success string");
    rc = MPI_Error_class(-5, &cls);
    CHECK(rc == MPI_ERR_ARG, "bad code class: %d", rc);

    MPI_Errhandler mine;
    OK(MPI_Comm_create_errhandler(my_handler, &mine));
    MPI_Comm d2;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &d2));
    OK(MPI_Comm_get_errhandler(d2, &eh));
    CHECK(eh == MPI_ERRORS_RETURN, "dup inherits the handler");
    OK(MPI_Comm_set_errhandler(d2, mine));
    rc = MPI_Send(&token, 1, MPI_INT, size + 7, 0, d2);
    CHECK(rc == MPI_ERR_RANK && handler_calls == 1 && handler_code == MPI_ERR_RANK && handler_comm == d2,
          "user handler: rc %d calls %d code %d", rc, handler_calls, handler_code);
    OK(MPI_Comm_call_errhandler(d2, MPI_ERR_OTHER));
    CHECK(handler_calls == 2 && handler_code == MPI_ERR_OTHER, "call_errhandler");
    OK(MPI_Errhandler_free(&mine));
    CHECK(mine == MPI_ERRHANDLER_NULL, "errhandler freed");
    rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, (MPI_Errhandler)0x12345);
    CHECK(rc == MPI_ERR_ARG, "bad errhandler: %d", rc);
    OK(MPI_Comm_free(&d2));

    int code = summary("env");
    OK(MPI_Finalize());
    MPI_Finalized(&flag);
    if (!flag) {
        fprintf(stderr, "FAIL: not finalized after MPI_Finalize\n");
        code = 1;
    }
    return code;
}
