/* MPI_Info objects (a key/value store) and the one-sided calls, which rmca does not
 * implement: each returns MPI_ERR_UNSUPPORTED_OPERATION through the error handler with a
 * message naming the call. Also: a stale request handle (kept after its request was freed,
 * its slot reused since) is refused with MPI_ERR_REQUEST instead of naming the new one. */
#include "check.h"

static void info(void) {
    MPI_Info in, copy;
    OK(MPI_Info_create(&in));
    int n = -1, flag = -1, len = -1;
    OK(MPI_Info_get_nkeys(in, &n));
    CHECK(n == 0, "a new info has %d keys", n);
    OK(MPI_Info_set(in, "cb_nodes", "4"));
    OK(MPI_Info_set(in, "striping_unit", "1048576"));
    OK(MPI_Info_set(in, "cb_nodes", "8")); /* replaces, keeps its place */
    OK(MPI_Info_get_nkeys(in, &n));
    CHECK(n == 2, "nkeys %d", n);
    char key[MPI_MAX_INFO_KEY], val[MPI_MAX_INFO_VAL];
    OK(MPI_Info_get_nthkey(in, 0, key));
    CHECK(strcmp(key, "cb_nodes") == 0, "key 0 is %s", key);
    OK(MPI_Info_get_nthkey(in, 1, key));
    CHECK(strcmp(key, "striping_unit") == 0, "key 1 is %s", key);
    OK(MPI_Info_get(in, "cb_nodes", MPI_MAX_INFO_VAL - 1, val, &flag));
    CHECK(flag == 1 && strcmp(val, "8") == 0, "cb_nodes = %s (flag %d)", val, flag);
    OK(MPI_Info_get(in, "striping_unit", 3, val, &flag));
    CHECK(flag == 1 && strcmp(val, "104") == 0, "truncated value %s", val);
    OK(MPI_Info_get_valuelen(in, "striping_unit", &len, &flag));
    CHECK(flag == 1 && len == 7, "valuelen %d", len);
    OK(MPI_Info_get(in, "absent", MPI_MAX_INFO_VAL - 1, val, &flag));
    CHECK(flag == 0, "an absent key has flag %d", flag);
    int buflen = 0;
    OK(MPI_Info_get_string(in, "striping_unit", &buflen, val, &flag));
    CHECK(flag == 1 && buflen == 8, "get_string length query: %d", buflen);
    buflen = (int)sizeof val;
    OK(MPI_Info_get_string(in, "striping_unit", &buflen, val, &flag));
    CHECK(strcmp(val, "1048576") == 0, "get_string %s", val);

    OK(MPI_Info_dup(in, &copy));
    OK(MPI_Info_delete(in, "cb_nodes"));
    OK(MPI_Info_get_nkeys(in, &n));
    CHECK(n == 1, "nkeys after delete %d", n);
    OK(MPI_Info_get_nkeys(copy, &n));
    CHECK(n == 2, "the dup keeps its keys: %d", n);
    OK(MPI_Info_get(copy, "cb_nodes", MPI_MAX_INFO_VAL - 1, val, &flag));
    CHECK(flag == 1 && strcmp(val, "8") == 0, "dup cb_nodes = %s", val);
    OK(MPI_Info_get_nkeys(MPI_INFO_ENV, &n));
    CHECK(n == 0, "MPI_INFO_ENV has %d keys", n);

    /* Bad input. */
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CHECK(MPI_Info_delete(in, "cb_nodes") == MPI_ERR_INFO_NOKEY, "delete an absent key");
    CHECK(MPI_Info_get_nthkey(in, 1, key) == MPI_ERR_ARG, "nthkey past the end");
    CHECK(MPI_Info_set(in, "", "x") == MPI_ERR_INFO_KEY, "empty key");
    char longkey[400];
    memset(longkey, 'k', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = 0;
    CHECK(MPI_Info_set(in, longkey, "x") == MPI_ERR_INFO_KEY, "key too long");
    CHECK(MPI_Info_set(MPI_INFO_ENV, "a", "b") == MPI_ERR_INFO, "MPI_INFO_ENV is read-only");
    CHECK(MPI_Info_get_nkeys(MPI_INFO_NULL, &n) == MPI_ERR_INFO, "MPI_INFO_NULL");
    OK(MPI_Info_free(&in));
    CHECK(in == MPI_INFO_NULL, "free sets MPI_INFO_NULL");
    MPI_Info stale = copy;
    OK(MPI_Info_free(&copy));
    CHECK(MPI_Info_get_nkeys(stale, &n) == MPI_ERR_INFO, "a freed info");
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
}

/* A window's info: the hints set at creation and by MPI_Win_set_info come back from
 * MPI_Win_get_info over the defaults (the one-sided calls themselves: rma.c). */
static void one_sided(void) {
    MPI_Info in, used;
    OK(MPI_Info_create(&in));
    OK(MPI_Info_set(in, "no_locks", "true"));
    int buf[4] = {0};
    MPI_Win win;
    OK(MPI_Win_create(buf, sizeof buf, sizeof(int), in, MPI_COMM_WORLD, &win));
    OK(MPI_Info_free(&in));
    OK(MPI_Win_get_info(win, &used));
    char v[MPI_MAX_INFO_VAL + 1];
    int flag = 0;
    OK(MPI_Info_get(used, "no_locks", MPI_MAX_INFO_VAL, v, &flag));
    CHECK(flag && strcmp(v, "true") == 0, "no_locks as set: %s", v);
    OK(MPI_Info_get(used, "accumulate_ordering", MPI_MAX_INFO_VAL, v, &flag));
    CHECK(flag && strcmp(v, "rar,raw,war,waw") == 0, "the default accumulate_ordering: %s", v);
    OK(MPI_Info_free(&used));
    OK(MPI_Win_free(&win));
    CHECK(win == MPI_WIN_NULL, "MPI_Win_free sets MPI_WIN_NULL");
}

static void stale_request(void) {
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int a = 1, b = 0;
    MPI_Request req, stale;
    OK(MPI_Irecv(&b, 1, MPI_INT, rank, 5, MPI_COMM_WORLD, &req));
    stale = req;
    OK(MPI_Send(&a, 1, MPI_INT, rank, 5, MPI_COMM_WORLD));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(req == MPI_REQUEST_NULL && b == 1, "first receive");
    /* The next request takes the freed slot. */
    int c = 0;
    OK(MPI_Irecv(&c, 1, MPI_INT, rank, 6, MPI_COMM_WORLD, &req));
    CHECK(req != stale, "a new request gets a new handle");
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int flag = -1;
    CHECK(MPI_Test(&stale, &flag, MPI_STATUS_IGNORE) == MPI_ERR_REQUEST, "test a stale handle");
    CHECK(MPI_Request_free(&stale) == MPI_ERR_REQUEST, "free a stale handle");
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    /* The new request is untouched by the refused calls. */
    a = 2;
    OK(MPI_Send(&a, 1, MPI_INT, rank, 6, MPI_COMM_WORLD));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(req == MPI_REQUEST_NULL && c == 2, "second receive got %d", c);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    info();
    one_sided();
    stale_request();
    int rc = summary("info");
    MPI_Finalize();
    return rc;
}
