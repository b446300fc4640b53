/* The MPI tool information interface: MPI_T before MPI_Init and after MPI_Finalize, control
 * variables (rmca's MCA parameters: names, types, enumerations, values from the job's --mca
 * flags, writes before init that init honours and refusals after), performance variables
 * (profiling counters that grow with traffic; sessions, handles, reset and write),
 * categories, the absent events and the one event source, and the error codes of bad
 * indices, names and handles.
 *
 * Usage: tool <pml in use> <expected value of the 'pml' parameter, or - for empty>
 *             <expected value of btl_shm_eager_limit> */
#include "check.h"

#include <stdint.h>

/* CHECK for phases where MPI is not running (CHECK asks MPI for the rank). */
#define TCHECK(cond, ...)                                                    \
    do {                                                                     \
        checks_run++;                                                        \
        if (!(cond)) {                                                       \
            checks_failed++;                                                 \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);  \
            fprintf(stderr, __VA_ARGS__);                                    \
            fprintf(stderr, "\n");                                           \
        }                                                                    \
    } while (0)
#define TOK(call) TCHECK((call) == MPI_SUCCESS, "%s", #call)
#define CODE(call, code)                                                      \
    do {                                                                      \
        int c_ = (call);                                                      \
        TCHECK(c_ == (code), "%s returned %d, expected %s", #call, c_, #code); \
    } while (0)

static int cvar_index(const char *name) {
    int i = -1;
    int rc = MPI_T_cvar_get_index(name, &i);
    TCHECK(rc == MPI_SUCCESS, "cvar %s not found (%d)", name, rc);
    return i;
}

/* Read a string control variable into buf (of cap characters). */
static void read_string(const char *name, char *buf, int cap) {
    MPI_T_cvar_handle h;
    int count = 0;
    buf[0] = 0;
    int i = cvar_index(name);
    if (i < 0) return;
    TOK(MPI_T_cvar_handle_alloc(i, NULL, &h, &count));
    TCHECK(count >= 1, "count %d", count);
    char *tmp = malloc((size_t)count);
    TOK(MPI_T_cvar_read(h, tmp));
    snprintf(buf, (size_t)cap, "%s", tmp);
    free(tmp);
    TOK(MPI_T_cvar_handle_free(&h));
    TCHECK(h == MPI_T_CVAR_HANDLE_NULL, "handle not reset");
}

static int read_int(const char *name) {
    MPI_T_cvar_handle h;
    int count = 0, v = -1;
    int i = cvar_index(name);
    if (i < 0) return -1;
    TOK(MPI_T_cvar_handle_alloc(i, NULL, &h, &count));
    TCHECK(count == 1, "count %d", count);
    TOK(MPI_T_cvar_read(h, &v));
    TOK(MPI_T_cvar_handle_free(&h));
    return v;
}

static unsigned long long read_ull(const char *name) {
    MPI_T_cvar_handle h;
    int count = 0;
    unsigned long long v = 0;
    int i = cvar_index(name);
    if (i < 0) return 0;
    TOK(MPI_T_cvar_handle_alloc(i, NULL, &h, &count));
    TOK(MPI_T_cvar_read(h, &v));
    TOK(MPI_T_cvar_handle_free(&h));
    return v;
}

/* Write an int control variable; the code. */
static int write_int(const char *name, int v) {
    MPI_T_cvar_handle h;
    int count = 0;
    int i = cvar_index(name);
    if (i < 0) return -1;
    TOK(MPI_T_cvar_handle_alloc(i, NULL, &h, &count));
    int rc = MPI_T_cvar_write(h, &v);
    TOK(MPI_T_cvar_handle_free(&h));
    return rc;
}

/* The value of word `word` of the enumeration of `name`, checking the enumeration. */
static int enum_value(const char *name, const char *word) {
    int i = cvar_index(name), num = 0, found = -1, dt_ok;
    MPI_Datatype dt;
    MPI_T_enum e = MPI_T_ENUM_NULL;
    TOK(MPI_T_cvar_get_info(i, NULL, NULL, NULL, &dt, &e, NULL, NULL, NULL, NULL));
    dt_ok = dt == MPI_INT;
    TCHECK(dt_ok && e != MPI_T_ENUM_NULL, "%s is not an enumeration", name);
    if (e == MPI_T_ENUM_NULL) return -1;
    char ename[64];
    int elen = sizeof ename;
    TOK(MPI_T_enum_get_info(e, &num, ename, &elen));
    TCHECK(strcmp(ename, name) == 0 && elen == (int)strlen(name) + 1, "enum name %s", ename);
    for (int k = 0; k < num; k++) {
        char w[64];
        int wl = sizeof w, v = -1;
        TOK(MPI_T_enum_get_item(e, k, &v, w, &wl));
        if (strcmp(w, word) == 0) found = v;
    }
    int v;
    CODE(MPI_T_enum_get_item(e, num, &v, NULL, NULL), MPI_T_ERR_INVALID_ITEM);
    CODE(MPI_T_enum_get_info(MPI_T_ENUM_NULL, &num, NULL, NULL), MPI_T_ERR_INVALID_HANDLE);
    return found;
}

/* Before MPI_Init: the parameters as init will see them; writes for init. */
static void before_init(const char *want_pml, const char *want_eager, int *updates) {
    int provided = -1, n = 0, d;
    CODE(MPI_T_cvar_get_num(&n), MPI_T_ERR_NOT_INITIALIZED);
    CODE(MPI_T_finalize(), MPI_T_ERR_NOT_INITIALIZED);
    TOK(MPI_T_init_thread(MPI_THREAD_SINGLE, &provided));
    TCHECK(provided == MPI_THREAD_SINGLE, "provided %d", provided);
    TOK(MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided)); /* reference counted */
    TCHECK(provided == MPI_THREAD_MULTIPLE, "provided %d", provided);

    TOK(MPI_T_cvar_get_num(&n));
    TCHECK(n > 20, "only %d control variables", n);
    int shm = 0, pml = -1;
    for (int i = 0; i < n; i++) {
        char name[256], desc[1024];
        int nl = sizeof name, dl = sizeof desc, verb, bind, scope;
        MPI_Datatype dt;
        MPI_T_enum e;
        TOK(MPI_T_cvar_get_info(i, name, &nl, &verb, &dt, &e, desc, &dl, &bind, &scope));
        TCHECK(nl == (int)strlen(name) + 1 && nl > 1, "name length %d of %s", nl, name);
        TCHECK(dl > 1, "%s has no description", name);
        TCHECK(bind == MPI_T_BIND_NO_OBJECT, "bind %d", bind);
        TCHECK(dt == MPI_INT || dt == MPI_LONG_LONG || dt == MPI_UNSIGNED_LONG_LONG || dt == MPI_CHAR,
               "%s: unexpected datatype", name);
        TCHECK(verb == MPI_T_VERBOSITY_USER_BASIC || verb == MPI_T_VERBOSITY_TUNER_BASIC ||
                   verb == MPI_T_VERBOSITY_MPIDEV_BASIC,
               "%s: verbosity %d", name, verb);
        TCHECK(scope == MPI_T_SCOPE_LOCAL || scope == MPI_T_SCOPE_ALL_EQ || scope == MPI_T_SCOPE_READONLY,
               "%s: scope %d", name, scope);
        if (strncmp(name, "btl_shm_", 8) == 0) shm++;
        if (strcmp(name, "pml") == 0) {
            pml = i;
            TCHECK(dt == MPI_CHAR, "pml is a string");
        }
        if (strcmp(name, "btl_shm_eager_limit") == 0)
            TCHECK(dt == MPI_UNSIGNED_LONG_LONG, "a size is an unsigned long long");
        if (strcmp(name, "coll_bcast_algorithm") == 0)
            TCHECK(scope == MPI_T_SCOPE_ALL_EQ && e != MPI_T_ENUM_NULL, "job-wide enumeration");
        if (strcmp(name, "rte_pmi_timeout") == 0)
            TCHECK(scope == MPI_T_SCOPE_READONLY && dt == MPI_INT, "read before the parameters");
    }
    TCHECK(shm > 5, "%d btl_shm_ parameters", shm);
    TCHECK(pml == cvar_index("pml"), "index of pml");

    /* Strings: length queries and truncation. */
    int len = 0;
    TOK(MPI_T_cvar_get_info(pml, NULL, &len, NULL, NULL, NULL, NULL, NULL, NULL, NULL));
    TCHECK(len == 4, "length of 'pml' with its null: %d", len);
    int bi = cvar_index("btl_shm_eager_limit");
    char small[5];
    len = sizeof small;
    TOK(MPI_T_cvar_get_info(bi, small, &len, NULL, NULL, NULL, NULL, NULL, NULL, NULL));
    TCHECK(len == 5 && strcmp(small, "btl_") == 0, "truncated to '%s' (%d)", small, len);

    /* Values as the job's --mca flags set them. */
    char v[256];
    read_string("pml", v, sizeof v);
    TCHECK(strcmp(v, want_pml) == 0, "pml is '%s', expected '%s'", v, want_pml);
    unsigned long long eager = read_ull("btl_shm_eager_limit");
    TCHECK(eager == strtoull(want_eager, NULL, 10), "btl_shm_eager_limit %llu", eager);

    /* Writes before init: checked, and handed to MPI_Init. */
    int off = enum_value("btl_shm_single_copy", "off");
    TCHECK(off > 0, "'off' is item %d", off);
    TOK(write_int("btl_shm_single_copy", off));
    TCHECK(read_int("btl_shm_single_copy") == off, "the write reads back");
    CODE(write_int("btl_shm_single_copy", 99), MPI_T_ERR_INVALID);
    /* Turns on ob1's traffic counters: seen counting after init. */
    TCHECK(read_int("profile") == 0, "profile is off by default");
    TOK(write_int("profile", 1));
    CODE(write_int("rte_pmi_timeout", 10), MPI_T_ERR_CVAR_SET_NEVER);
    TCHECK(read_int("rte_pmi_timeout") == 600, "rte_pmi_timeout unchanged");

    /* No counters before init: they belong to the PML and BTLs init selects. */
    TOK(MPI_T_pvar_get_num(&n));
    TCHECK(n == 0, "%d performance variables before init", n);
    TOK(MPI_T_category_changed(updates));

    /* Bad input. */
    TOK(MPI_T_cvar_get_num(&n));
    CODE(MPI_T_cvar_get_info(n, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
         MPI_T_ERR_INVALID_INDEX);
    CODE(MPI_T_cvar_get_info(-1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
         MPI_T_ERR_INVALID_INDEX);
    CODE(MPI_T_cvar_get_index("btl_shm_no_such_thing", &d), MPI_T_ERR_INVALID_NAME);
    CODE(MPI_T_cvar_get_index(NULL, &d), MPI_T_ERR_INVALID);
    MPI_T_cvar_handle h, freed;
    int count;
    CODE(MPI_T_cvar_handle_alloc(n, NULL, &h, &count), MPI_T_ERR_INVALID_INDEX);
    TOK(MPI_T_cvar_handle_alloc(pml, NULL, &h, &count));
    freed = h;
    TOK(MPI_T_cvar_handle_free(&h));
    CODE(MPI_T_cvar_handle_free(&freed), MPI_T_ERR_INVALID_HANDLE);
    CODE(MPI_T_cvar_read(freed, v), MPI_T_ERR_INVALID_HANDLE);
    CODE(MPI_T_cvar_write(MPI_T_CVAR_HANDLE_NULL, v), MPI_T_ERR_INVALID_HANDLE);
    TOK(MPI_T_finalize()); /* one of the two */
}

/* The value of pvar `name` read through a new handle in `s`; its handle in *h. */
static unsigned long long pvar_handle(MPI_T_pvar_session s, const char *name, int cls,
                                      MPI_T_pvar_handle *h) {
    int i = -1, count = 0;
    unsigned long long v = 0;
    int rc = MPI_T_pvar_get_index(name, cls, &i);
    CHECK(rc == MPI_SUCCESS, "pvar %s: %d", name, rc);
    if (rc != MPI_SUCCESS) return 0;
    OK(MPI_T_pvar_handle_alloc(s, i, NULL, h, &count));
    CHECK(count == 1, "count %d", count);
    OK(MPI_T_pvar_read(s, *h, &v));
    return v;
}

static void traffic(int rank, int size, int rounds) {
    int peer = size > 1 ? (rank ^ 1) : rank;
    if (peer >= size) peer = rank;
    for (int k = 0; k < rounds; k++) {
        int out = k, in = -1;
        OK(MPI_Sendrecv(&out, 1, MPI_INT, peer, 5, &in, 1, MPI_INT, peer, 5, MPI_COMM_WORLD,
                        MPI_STATUS_IGNORE));
        CHECK(in == k, "got %d", in);
    }
}

static void running(const char *pml_in_use, int updates_before) {
    int rank, size, n = 0, provided;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    OK(MPI_T_init_thread(MPI_THREAD_SINGLE, &provided)); /* again: 2 users */

    /* The write before init reached the components: the runtime's own parameters. */
    int off = enum_value("btl_shm_single_copy", "off");
    CHECK(read_int("btl_shm_single_copy") == off, "init took the write");
    CODE(write_int("btl_shm_single_copy", 0), MPI_T_ERR_CVAR_SET_NOT_NOW);
    CHECK(read_int("profile") == 1, "init took the write of profile");
    int scope = -1;
    OK(MPI_T_cvar_get_info(cvar_index("btl_shm_eager_limit"), NULL, NULL, NULL, NULL, NULL, NULL,
                           NULL, NULL, &scope));
    CHECK(scope == MPI_T_SCOPE_READONLY, "read-only once MPI runs: scope %d", scope);

    /* Counters: there now, and growing with traffic. */
    OK(MPI_T_pvar_get_num(&n));
    CHECK(n > 5, "%d performance variables", n);
    int updates = -1;
    OK(MPI_T_category_changed(&updates));
    CHECK(updates != updates_before, "categories changed at init");
    for (int i = 0; i < n; i++) {
        char name[256];
        int nl = sizeof name, verb, cls, bind, ro, cont, atomic;
        MPI_Datatype dt;
        MPI_T_enum e;
        OK(MPI_T_pvar_get_info(i, name, &nl, &verb, &cls, &dt, &e, NULL, NULL, &bind, &ro, &cont,
                               &atomic));
        CHECK(dt == MPI_UNSIGNED_LONG_LONG && cont == 1 && bind == MPI_T_BIND_NO_OBJECT &&
                  e == MPI_T_ENUM_NULL,
              "%s", name);
        CHECK(cls == MPI_T_PVAR_CLASS_COUNTER ? !ro : ro, "%s: only counters can be written", name);
    }
    /* Messages to a peer go over shared memory, to oneself over the self BTL. */
    const char *sent_name = size > 1 ? "btl.shm.frags_sent" : "btl.self.sends";
    char peak_name[64];
    snprintf(peak_name, sizeof peak_name, "pml.%s.memory_peak", pml_in_use);
    MPI_T_pvar_session s, s2;
    MPI_T_pvar_handle h, hp, h2;
    OK(MPI_T_pvar_session_create(&s));
    OK(MPI_T_pvar_session_create(&s2));
    unsigned long long v0 = pvar_handle(s, sent_name, MPI_T_PVAR_CLASS_COUNTER, &h), v1 = 0, v2 = 0;
    CHECK(v0 < 4, "a counter starts at 0 at allocation (%llu)", v0);
    traffic(rank, size, 20);
    OK(MPI_T_pvar_read(s, h, &v1));
    CHECK(v1 >= v0 + 20, "%s grew from %llu to %llu over 20 messages", sent_name, v0, v1);
    if (strcmp(pml_in_use, "ob1") == 0) {
        /* Counted only with 'profile' on, which the write before init turned on. */
        MPI_T_pvar_handle he;
        unsigned long long e0 = pvar_handle(s, "pml.ob1.eager", MPI_T_PVAR_CLASS_COUNTER, &he), e1 = 0;
        traffic(rank, size, 10);
        OK(MPI_T_pvar_read(s, he, &e1));
        CHECK(e1 >= e0 + 10, "pml.ob1.eager from %llu to %llu over 10 messages", e0, e1);
        OK(MPI_T_pvar_handle_free(s, &he));
        OK(MPI_T_pvar_read(s, h, &v1));
    }
    OK(MPI_T_pvar_readreset(s, h, &v2));
    CHECK(v2 >= v1, "readreset %llu", v2);
    OK(MPI_T_pvar_read(s, h, &v2));
    CHECK(v2 < v1, "after the reset %llu", v2);
    unsigned long long w = 1000000;
    OK(MPI_T_pvar_write(s, h, &w));
    traffic(rank, size, 3);
    OK(MPI_T_pvar_read(s, h, &v2));
    CHECK(v2 >= w + 3 && v2 < w + 1000, "written then counted on: %llu", v2);
    OK(MPI_T_pvar_reset(s, MPI_T_PVAR_ALL_HANDLES));
    OK(MPI_T_pvar_read(s, h, &v2));
    CHECK(v2 < 1000, "reset all: %llu", v2);
    /* Continuous: start and stop are refused, except for all handles. */
    CODE(MPI_T_pvar_start(s, h), MPI_T_ERR_PVAR_NO_STARTSTOP);
    CODE(MPI_T_pvar_stop(s, h), MPI_T_ERR_PVAR_NO_STARTSTOP);
    OK(MPI_T_pvar_start(s, MPI_T_PVAR_ALL_HANDLES));
    OK(MPI_T_pvar_stop(s, MPI_T_PVAR_ALL_HANDLES));
    /* A peak is measured: read-only. */
    unsigned long long peak = pvar_handle(s, peak_name, MPI_T_PVAR_CLASS_HIGHWATERMARK, &hp);
    (void)peak;
    CODE(MPI_T_pvar_write(s, hp, &w), MPI_T_ERR_PVAR_NO_WRITE);
    CODE(MPI_T_pvar_reset(s, hp), MPI_T_ERR_PVAR_NO_WRITE);
    CODE(MPI_T_pvar_readreset(s, hp, &w), MPI_T_ERR_PVAR_NO_WRITE);
    /* Sessions and handles do not mix. */
    (void)pvar_handle(s2, sent_name, MPI_T_PVAR_CLASS_COUNTER, &h2);
    CODE(MPI_T_pvar_read(s2, h, &v2), MPI_T_ERR_INVALID_HANDLE);
    CODE(MPI_T_pvar_read(s, MPI_T_PVAR_ALL_HANDLES, &v2), MPI_T_ERR_INVALID_HANDLE);
    CODE(MPI_T_pvar_read(MPI_T_PVAR_SESSION_NULL, h, &v2), MPI_T_ERR_INVALID_SESSION);
    int i;
    CODE(MPI_T_pvar_get_index(sent_name, MPI_T_PVAR_CLASS_LEVEL, &i), MPI_T_ERR_INVALID_NAME);
    CODE(MPI_T_pvar_handle_alloc(s, n, NULL, &h2, &i), MPI_T_ERR_INVALID_INDEX);
    CODE(MPI_T_pvar_get_info(n, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                             NULL),
         MPI_T_ERR_INVALID_INDEX);
    OK(MPI_T_pvar_handle_free(s, &hp));
    CHECK(hp == MPI_T_PVAR_HANDLE_NULL, "handle reset");
    CODE(MPI_T_pvar_handle_free(s, &hp), MPI_T_ERR_INVALID_HANDLE);
    OK(MPI_T_pvar_session_free(&s2)); /* frees h2 too */
    CHECK(s2 == MPI_T_PVAR_SESSION_NULL, "session reset");
    CODE(MPI_T_pvar_read(s2, h2, &v2), MPI_T_ERR_INVALID_SESSION);
    OK(MPI_T_pvar_session_free(&s));

    /* Categories: one per framework, one per component. */
    int nc = 0, shm = -1, btl = -1, pmlc = -1;
    char pml_cat[64];
    snprintf(pml_cat, sizeof pml_cat, "pml_%s", pml_in_use);
    OK(MPI_T_category_get_num(&nc));
    CHECK(nc > 4, "%d categories", nc);
    OK(MPI_T_category_get_index("btl_shm", &shm));
    OK(MPI_T_category_get_index("btl", &btl));
    OK(MPI_T_category_get_index(pml_cat, &pmlc));
    CODE(MPI_T_category_get_index("no_such_category", &i), MPI_T_ERR_INVALID_NAME);
    char cname[64], cdesc[256];
    int cl = sizeof cname, dl = sizeof cdesc, ncv = 0, npv = 0, nsub = 0;
    OK(MPI_T_category_get_info(shm, cname, &cl, cdesc, &dl, &ncv, &npv, &nsub));
    CHECK(strcmp(cname, "btl_shm") == 0 && ncv > 5 && nsub == 0, "%s: %d cvars", cname, ncv);
    int *idx = calloc((size_t)ncv + 1, sizeof(int));
    OK(MPI_T_category_get_cvars(shm, ncv, idx));
    int eager = cvar_index("btl_shm_eager_limit"), has = 0;
    for (int k = 0; k < ncv; k++) has |= idx[k] == eager;
    CHECK(has, "btl_shm holds btl_shm_eager_limit");
    free(idx);
    OK(MPI_T_category_get_info(btl, NULL, NULL, NULL, NULL, NULL, NULL, &nsub));
    int subs[64] = {0};
    OK(MPI_T_category_get_categories(btl, 64, subs));
    has = 0;
    for (int k = 0; k < nsub && k < 64; k++) has |= subs[k] == shm;
    CHECK(has, "btl holds btl_shm");
    OK(MPI_T_category_get_info(pmlc, NULL, NULL, NULL, NULL, NULL, &npv, NULL));
    CHECK(npv > 0, "%s has %d performance variables", pml_cat, npv);
    int ne = -1;
    OK(MPI_T_category_get_num_events(pmlc, &ne));
    CHECK(ne == 0, "events %d", ne);
    OK(MPI_T_category_get_events(pmlc, 4, subs));
    CODE(MPI_T_category_get_info(nc, NULL, NULL, NULL, NULL, NULL, NULL, NULL), MPI_T_ERR_INVALID_INDEX);
    CODE(MPI_T_category_get_cvars(-1, 0, NULL), MPI_T_ERR_INVALID_INDEX);

    /* No events; one source, a clock. */
    OK(MPI_T_event_get_num(&ne));
    CHECK(ne == 0, "%d events", ne);
    CODE(MPI_T_event_get_info(0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
         MPI_T_ERR_INVALID_INDEX);
    MPI_T_event_registration reg;
    CODE(MPI_T_event_handle_alloc(0, NULL, MPI_INFO_NULL, &reg), MPI_T_ERR_INVALID_INDEX);
    CODE(MPI_T_event_get_index("anything", &i), MPI_T_ERR_INVALID_NAME);
    int ns = 0;
    OK(MPI_T_source_get_num(&ns));
    CHECK(ns == 1, "%d sources", ns);
    MPI_Count tps = 0, t0 = 0, t1 = 0;
    MPI_T_source_order ord = MPI_T_SOURCE_UNORDERED;
    OK(MPI_T_source_get_info(0, NULL, NULL, NULL, NULL, &ord, &tps, NULL, NULL));
    CHECK(ord == MPI_T_SOURCE_ORDERED && tps == 1000000000, "ticks per second %lld", (long long)tps);
    OK(MPI_T_source_get_timestamp(0, &t0));
    OK(MPI_T_source_get_timestamp(0, &t1));
    CHECK(t1 >= t0 && t0 > 0, "timestamps %lld %lld", (long long)t0, (long long)t1);
    CODE(MPI_T_source_get_timestamp(1, &t0), MPI_T_ERR_INVALID_INDEX);
    OK(MPI_T_finalize());
}

/* After MPI_Finalize: the interface still answers, nothing can be written or counted. */
static void after_finalize(void) {
    int provided, n = 0;
    TOK(MPI_T_init_thread(MPI_THREAD_SINGLE, &provided));
    TOK(MPI_T_cvar_get_num(&n));
    TCHECK(n > 20, "%d control variables after finalize", n);
    int off = enum_value("btl_shm_single_copy", "off");
    TCHECK(read_int("btl_shm_single_copy") == off, "value kept");
    CODE(write_int("btl_shm_single_copy", 0), MPI_T_ERR_CVAR_SET_NEVER);
    MPI_T_pvar_session s;
    MPI_T_pvar_handle h;
    int count;
    unsigned long long v;
    TOK(MPI_T_pvar_session_create(&s));
    TOK(MPI_T_pvar_handle_alloc(s, 0, NULL, &h, &count));
    CODE(MPI_T_pvar_read(s, h, &v), MPI_T_ERR_NOT_ACCESSIBLE);
    TOK(MPI_T_finalize());
    TOK(MPI_T_finalize()); /* the user from before MPI_Init */
    CODE(MPI_T_finalize(), MPI_T_ERR_NOT_INITIALIZED);
    CODE(MPI_T_pvar_read(s, h, &v), MPI_T_ERR_NOT_INITIALIZED);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: tool <pml in use> <pml parameter or -> <btl_shm_eager_limit>\n");
        return 2;
    }
    const char *want_pml = strcmp(argv[2], "-") == 0 ? "" : argv[2];
    int updates = -1;
    before_init(want_pml, argv[3], &updates);
    MPI_Init(&argc, &argv);
    running(argv[1], updates);
    int rc = summary("tool");
    MPI_Finalize();
    int before = checks_failed;
    after_finalize();
    if (checks_failed != before) {
        printf("FAILED tool after MPI_Finalize\n");
        return 1;
    }
    return rc;
}
