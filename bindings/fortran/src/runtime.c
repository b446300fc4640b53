/* The hand-written part of libmpifort: the special addresses, string conversions, and the
 * calls the generator's rules do not cover (procedure arguments, attribute values, calls
 * without an error code, C-only arguments). Every Fortran name is exported as mpi_x_,
 * pmpi_x_ and, for `use mpi_f08`, mpi_x_f08_ (gfortran's external names). */
#include "rmcaf.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

/* ------------------------------------------------------------- special addresses */
/* Aligned as gfortran aligns common blocks (up to 32), so a program's block and this definition
 * agree; the program's copy, if it has one, is the one every reference uses. */
#define RMCAF_COMMON __attribute__((aligned(32)))
MPI_Fint rmcaf_buf_[3] RMCAF_COMMON;
MPI_Fint rmcaf_status_[16] RMCAF_COMMON;
MPI_Fint rmcaf_errcodes_ignore_[1] RMCAF_COMMON, rmcaf_unweighted_[1] RMCAF_COMMON,
    rmcaf_weights_empty_[1] RMCAF_COMMON;
char rmcaf_argv_null_[1] RMCAF_COMMON, rmcaf_argvs_null_[1] RMCAF_COMMON;

/* ------------------------------------------------------------- strings */
char *rmcaf_str_in(const char *f, size_t len)
{
    while (len > 0 && f[len - 1] == ' ') len--;
    char *c = malloc(len + 1);
    if (c == NULL) return NULL;
    memcpy(c, f, len);
    c[len] = '\0';
    return c;
}

char *rmcaf_str_tmp(size_t len)
{
    /* The longest string the library writes is MPI_MAX_LIBRARY_VERSION_STRING. */
    return calloc(len + MPI_MAX_LIBRARY_VERSION_STRING + 1, 1);
}

void rmcaf_str_out(char *f, size_t len, const char *c)
{
    if (c == NULL) return;
    size_t n = strlen(c);
    if (n > len) n = len;
    memcpy(f, c, n);
    memset(f + n, ' ', len - n);
}

int rmcaf_peer_count(MPI_Comm comm, int which)
{
    int n = 0, inter = 0, topo = MPI_UNDEFINED;
    if (which == 0) {
        if (MPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS) return 0;
        if (inter) MPI_Comm_remote_size(comm, &n);
        else MPI_Comm_size(comm, &n);
        return n;
    }
    if (MPI_Topo_test(comm, &topo) != MPI_SUCCESS) return 0;
    if (topo == MPI_CART) {
        MPI_Cartdim_get(comm, &n);
        return 2 * n;
    }
    if (topo == MPI_GRAPH) {
        int rank;
        MPI_Comm_rank(comm, &rank);
        MPI_Graph_neighbors_count(comm, rank, &n);
        return n;
    }
    if (topo == MPI_DIST_GRAPH) {
        int indeg, outdeg, weighted;
        MPI_Dist_graph_neighbors_count(comm, &indeg, &outdeg, &weighted);
        return which == 1 ? outdeg : indeg;
    }
    return 0;
}

#define EXPORT4(f, target)                  \
    RMCAF_ALIAS(mpi_##f##_, target)         \
    RMCAF_ALIAS(pmpi_##f##_, target)        \
    RMCAF_ALIAS(mpi_##f##_f08_, target)     \
    RMCAF_ALIAS(pmpi_##f##_f08_, target)

/* ------------------------------------------------------------- start-up, time */

/* The wrappers convert handles other than requests without calling the library
 * (RMCAF_F2C): refuse to run on a library whose integers are not its handles. */
static void check_handle_integers(void)
{
#define SAME(Kind, h)                                                                   \
    if (MPI_##Kind##_toint(h) != RMCAF_C2F(h) ||                                        \
        MPI_##Kind##_fromint(RMCAF_C2F(h)) != (h)) {                                    \
        fprintf(stderr, "libmpifort: %s's integer is not the handle itself: this "      \
                "libmpifort does not match this libmpi (rebuild both)\n", #h);          \
        MPI_Abort(MPI_COMM_WORLD, MPI_ERR_INTERN);                                      \
    }
    SAME(Comm, MPI_COMM_WORLD) SAME(Comm, MPI_COMM_SELF) SAME(Type, MPI_DOUBLE_PRECISION)
    SAME(Type, MPI_INTEGER) SAME(Group, MPI_GROUP_EMPTY) SAME(Op, MPI_SUM)
    SAME(Info, MPI_INFO_ENV) SAME(Errhandler, MPI_ERRORS_RETURN) SAME(Win, MPI_WIN_NULL)
    SAME(File, MPI_FILE_NULL) SAME(Session, MPI_SESSION_NULL)
    SAME(Message, MPI_MESSAGE_NO_PROC)
#undef SAME
}

/* Tell the C library what this Fortran layer's types are (MPI 5.0's ABI: C code asks
 * MPI_Abi_get_fortran_booleans/_info), once per process: gfortran's LOGICAL is an MPI_Fint
 * with .TRUE. = 1 and .FALSE. = 0. */
static void register_fortran_abi(void)
{
    MPI_Fint yes = 1, no = 0, t, f;
    int is_set = 0;
    if (MPI_Abi_get_fortran_booleans((int)sizeof(MPI_Fint), &t, &f, &is_set) == MPI_SUCCESS &&
        !is_set)
        MPI_Abi_set_fortran_booleans((int)sizeof(MPI_Fint), &yes, &no);
    MPI_Info have = MPI_INFO_NULL;
    if (MPI_Abi_get_fortran_info(&have) != MPI_SUCCESS) return;
    if (have != MPI_INFO_NULL) {
        MPI_Info_free(&have);
        return;
    }
    MPI_Info info;
    if (MPI_Info_create(&info) != MPI_SUCCESS) return;
    char v[8];
    snprintf(v, sizeof v, "%zu", sizeof(MPI_Fint));
    MPI_Info_set(info, "mpi_logical_size", v);
    MPI_Info_set(info, "mpi_integer_size", v);
    snprintf(v, sizeof v, "%zu", sizeof(float));
    MPI_Info_set(info, "mpi_real_size", v);
    snprintf(v, sizeof v, "%zu", sizeof(double));
    MPI_Info_set(info, "mpi_double_precision_size", v);
    MPI_Abi_set_fortran_info(info);
    MPI_Info_free(&info);
}

static void rmcaf_init(MPI_Fint *ierr)
{
    int rc = MPI_Init(NULL, NULL);
    if (rc == MPI_SUCCESS) {
        check_handle_integers();
        register_fortran_abi();
    }
    if (ierr) *ierr = rc;
}
EXPORT4(init, rmcaf_init)

static void rmcaf_init_thread(MPI_Fint *required, MPI_Fint *provided, MPI_Fint *ierr)
{
    int rc = MPI_Init_thread(NULL, NULL, *required, provided);
    if (rc == MPI_SUCCESS) {
        check_handle_integers();
        register_fortran_abi();
    }
    if (ierr) *ierr = rc;
}
EXPORT4(init_thread, rmcaf_init_thread)

static void rmcaf_info_create_env(MPI_Fint *info, MPI_Fint *ierr)
{
    MPI_Info c = MPI_INFO_NULL;
    int rc = MPI_Info_create_env(0, NULL, &c);
    *info = MPI_Info_toint(c);
    if (ierr) *ierr = rc;
}
EXPORT4(info_create_env, rmcaf_info_create_env)

static double rmcaf_wtime(void) { return MPI_Wtime(); }
RMCAF_ALIAS(mpi_wtime_, rmcaf_wtime)
RMCAF_ALIAS(pmpi_wtime_, rmcaf_wtime)
static double rmcaf_wtick(void) { return MPI_Wtick(); }
RMCAF_ALIAS(mpi_wtick_, rmcaf_wtick)
RMCAF_ALIAS(pmpi_wtick_, rmcaf_wtick)
static MPI_Aint rmcaf_aint_add(MPI_Aint *base, MPI_Aint *disp) { return MPI_Aint_add(*base, *disp); }
RMCAF_ALIAS(mpi_aint_add_, rmcaf_aint_add)
RMCAF_ALIAS(pmpi_aint_add_, rmcaf_aint_add)
static MPI_Aint rmcaf_aint_diff(MPI_Aint *a, MPI_Aint *b) { return MPI_Aint_diff(*a, *b); }
RMCAF_ALIAS(mpi_aint_diff_, rmcaf_aint_diff)
RMCAF_ALIAS(pmpi_aint_diff_, rmcaf_aint_diff)

/* MPI_PCONTROL(LEVEL): no error argument in Fortran. */
static void rmcaf_pcontrol(MPI_Fint *level) { MPI_Pcontrol(*level); }
EXPORT4(pcontrol, rmcaf_pcontrol)

/* MPI_F_SYNC_REG(BUF): only makes the compiler assume BUF is used; nothing to do. */
static void rmcaf_f_sync_reg(void *buf) { (void)buf; }
EXPORT4(f_sync_reg, rmcaf_f_sync_reg)

/* ------------------------------------------------------------- user operations */
/* The C library calls a C function with an MPI_Datatype; a Fortran one takes an INTEGER.
 * Each operation made from Fortran gets one of RMCAF_SLOTS trampolines, which knows its
 * Fortran function. (f08's TYPE(C_PTR), VALUE buffers and f77's buffers by reference are
 * the same address at the call.) */
#define RMCAF_SLOTS 64
typedef void (*rmcaf_user_fn)(void *, void *, MPI_Fint *, MPI_Fint *);
static rmcaf_user_fn op_fns[RMCAF_SLOTS];
static int op_slots;

/* Trampoline NN (two octal-like digits, 0..77) serves slot (NN / 10) * 8 + NN % 10. */
#define OP_TRAMPOLINE(i)                                                               \
    static void op_tramp_##i(void *in, void *inout, int *len, MPI_Datatype *dt)       \
    {                                                                                  \
        MPI_Fint f = MPI_Type_toint(*dt);                                              \
        op_fns[(i / 10) * 8 + i % 10](in, inout, len, &f);                                                 \
    }
#define OP8(a) OP_TRAMPOLINE(a##0) OP_TRAMPOLINE(a##1) OP_TRAMPOLINE(a##2) OP_TRAMPOLINE(a##3) \
    OP_TRAMPOLINE(a##4) OP_TRAMPOLINE(a##5) OP_TRAMPOLINE(a##6) OP_TRAMPOLINE(a##7)
OP8() OP8(1) OP8(2) OP8(3) OP8(4) OP8(5) OP8(6) OP8(7)
#define OPT8(a) op_tramp_##a##0, op_tramp_##a##1, op_tramp_##a##2, op_tramp_##a##3, \
    op_tramp_##a##4, op_tramp_##a##5, op_tramp_##a##6, op_tramp_##a##7
static MPI_User_function *const op_tramps[RMCAF_SLOTS] = {
    OPT8(), OPT8(1), OPT8(2), OPT8(3), OPT8(4), OPT8(5), OPT8(6), OPT8(7)};

/* A trampoline for fn: the one it already has, else the next free one (-1 when all are
 * taken: the caller then passes the C library a null function, which it refuses through the
 * error handler, and this says why first). */
static int slot_for(void **fns, int *used, void *fn, const char *call)
{
    for (int i = 0; i < *used; i++)
        if (fns[i] == fn) return i;
    if (*used == RMCAF_SLOTS) {
        fprintf(stderr,
                "libmpifort: %s: this program passed more than %d distinct Fortran procedures "
                "to %s; rmca's Fortran layer keeps %d (the same procedure again is fine)\n",
                call, RMCAF_SLOTS, call, RMCAF_SLOTS);
        return -1;
    }
    fns[*used] = fn;
    return (*used)++;
}

static void rmcaf_op_create(rmcaf_user_fn fn, MPI_Fint *commute, MPI_Fint *op, MPI_Fint *ierr)
{
    int s = slot_for((void **)op_fns, &op_slots, (void *)fn, "MPI_OP_CREATE");
    MPI_Op c = MPI_OP_NULL;
    /* All slots taken: the C library names the problem (a null function is MPI_ERR_ARG). */
    int rc = MPI_Op_create(s < 0 ? NULL : op_tramps[s], *commute != 0, &c);
    *op = MPI_Op_toint(c);
    if (ierr) *ierr = rc;
}
EXPORT4(op_create, rmcaf_op_create)

/* ------------------------------------------------------------- error handlers */
typedef void (*rmcaf_eh_fn)(MPI_Fint *, MPI_Fint *);
#define EH_KIND(kind, Ctype, toint)                                                     \
    static rmcaf_eh_fn kind##_eh_fns[RMCAF_SLOTS];                                      \
    static int kind##_eh_slots;                                                         \
    static void kind##_eh_call(int i, Ctype *h, int *code)                              \
    {                                                                                   \
        MPI_Fint f = toint(*h), c = *code;                                              \
        kind##_eh_fns[i](&f, &c);                                                       \
    }
EH_KIND(comm, MPI_Comm, MPI_Comm_toint)
EH_KIND(win, MPI_Win, MPI_Win_toint)
EH_KIND(file, MPI_File, MPI_File_toint)
EH_KIND(session, MPI_Session, MPI_Session_toint)

#define EH_TRAMP(kind, Ctype, i) \
    static void kind##_eh_tramp_##i(Ctype *h, int *code, ...) { kind##_eh_call((i / 10) * 8 + i % 10, h, code); }
#define EH_TRAMP8(kind, Ctype, a) EH_TRAMP(kind, Ctype, a##0) EH_TRAMP(kind, Ctype, a##1) \
    EH_TRAMP(kind, Ctype, a##2) EH_TRAMP(kind, Ctype, a##3) EH_TRAMP(kind, Ctype, a##4)   \
    EH_TRAMP(kind, Ctype, a##5) EH_TRAMP(kind, Ctype, a##6) EH_TRAMP(kind, Ctype, a##7)
#define EH_TRAMPS(kind, Ctype) EH_TRAMP8(kind, Ctype, ) EH_TRAMP8(kind, Ctype, 1) \
    EH_TRAMP8(kind, Ctype, 2) EH_TRAMP8(kind, Ctype, 3) EH_TRAMP8(kind, Ctype, 4)  \
    EH_TRAMP8(kind, Ctype, 5) EH_TRAMP8(kind, Ctype, 6) EH_TRAMP8(kind, Ctype, 7)
#define EHT8(kind, a) kind##_eh_tramp_##a##0, kind##_eh_tramp_##a##1, kind##_eh_tramp_##a##2, \
    kind##_eh_tramp_##a##3, kind##_eh_tramp_##a##4, kind##_eh_tramp_##a##5,                    \
    kind##_eh_tramp_##a##6, kind##_eh_tramp_##a##7
#define EH_TABLE(kind, Ftype)                                                           \
    static Ftype *const kind##_eh_tramps[RMCAF_SLOTS] = {EHT8(kind, ), EHT8(kind, 1),   \
        EHT8(kind, 2), EHT8(kind, 3), EHT8(kind, 4), EHT8(kind, 5), EHT8(kind, 6),      \
        EHT8(kind, 7)};
#define EH_CREATE(kind, Ftype, create)                                                  \
    static void rmcaf_##kind##_create_errhandler(rmcaf_eh_fn fn, MPI_Fint *eh, MPI_Fint *ierr) \
    {                                                                                   \
        int s = slot_for((void **)kind##_eh_fns, &kind##_eh_slots, (void *)fn,          \
                         "MPI_" #kind "_CREATE_ERRHANDLER");                            \
        MPI_Errhandler c = MPI_ERRHANDLER_NULL;                                         \
        int rc = create(s < 0 ? NULL : kind##_eh_tramps[s], &c);                        \
        *eh = MPI_Errhandler_toint(c);                                                  \
        if (ierr) *ierr = rc;                                                           \
    }                                                                                   \
    EXPORT4(kind##_create_errhandler, rmcaf_##kind##_create_errhandler)

EH_TRAMPS(comm, MPI_Comm)
EH_TABLE(comm, MPI_Comm_errhandler_function)
EH_CREATE(comm, MPI_Comm_errhandler_function, MPI_Comm_create_errhandler)
EH_TRAMPS(win, MPI_Win)
EH_TABLE(win, MPI_Win_errhandler_function)
EH_CREATE(win, MPI_Win_errhandler_function, MPI_Win_create_errhandler)
EH_TRAMPS(file, MPI_File)
EH_TABLE(file, MPI_File_errhandler_function)
EH_CREATE(file, MPI_File_errhandler_function, MPI_File_create_errhandler)
EH_TRAMPS(session, MPI_Session)
EH_TABLE(session, MPI_Session_errhandler_function)
EH_CREATE(session, MPI_Session_errhandler_function, MPI_Session_create_errhandler)

/* ------------------------------------------------------------- attributes */
/* The predefined attribute callbacks, callable from Fortran as the standard's procedures
 * and recognised by address when a keyval is created. */
typedef void (*rmcaf_copy_fn)(MPI_Fint *, MPI_Fint *, MPI_Aint *, MPI_Aint *, MPI_Aint *,
                              MPI_Fint *, MPI_Fint *);
typedef void (*rmcaf_delete_fn)(MPI_Fint *, MPI_Fint *, MPI_Aint *, MPI_Aint *, MPI_Fint *);
typedef void (*rmcaf_copy10_fn)(MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *,
                                MPI_Fint *, MPI_Fint *);
typedef void (*rmcaf_delete10_fn)(MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *);

static void rmcaf_null_copy(MPI_Fint *h, MPI_Fint *k, MPI_Aint *e, MPI_Aint *in, MPI_Aint *out,
                            MPI_Fint *flag, MPI_Fint *ierr)
{
    (void)h; (void)k; (void)e; (void)in; (void)out;
    *flag = 0;
    *ierr = MPI_SUCCESS;
}
static void rmcaf_dup_copy(MPI_Fint *h, MPI_Fint *k, MPI_Aint *e, MPI_Aint *in, MPI_Aint *out,
                           MPI_Fint *flag, MPI_Fint *ierr)
{
    (void)h; (void)k; (void)e;
    *out = *in;
    *flag = 1;
    *ierr = MPI_SUCCESS;
}
static void rmcaf_null_delete(MPI_Fint *h, MPI_Fint *k, MPI_Aint *v, MPI_Aint *e, MPI_Fint *ierr)
{
    (void)h; (void)k; (void)v; (void)e;
    *ierr = MPI_SUCCESS;
}
static void rmcaf_null_copy10(MPI_Fint *h, MPI_Fint *k, MPI_Fint *e, MPI_Fint *in,
                              MPI_Fint *out, MPI_Fint *flag, MPI_Fint *ierr)
{
    (void)h; (void)k; (void)e; (void)in; (void)out;
    *flag = 0;
    *ierr = MPI_SUCCESS;
}
static void rmcaf_dup_copy10(MPI_Fint *h, MPI_Fint *k, MPI_Fint *e, MPI_Fint *in,
                             MPI_Fint *out, MPI_Fint *flag, MPI_Fint *ierr)
{
    (void)h; (void)k; (void)e;
    *out = *in;
    *flag = 1;
    *ierr = MPI_SUCCESS;
}
static void rmcaf_null_delete10(MPI_Fint *h, MPI_Fint *k, MPI_Fint *v, MPI_Fint *e,
                                MPI_Fint *ierr)
{
    (void)h; (void)k; (void)v; (void)e;
    *ierr = MPI_SUCCESS;
}
#define EXPORT2(f, target) RMCAF_ALIAS(mpi_##f##_, target) RMCAF_ALIAS(pmpi_##f##_, target)
EXPORT2(comm_null_copy_fn, rmcaf_null_copy)
EXPORT2(type_null_copy_fn, rmcaf_null_copy)
EXPORT2(win_null_copy_fn, rmcaf_null_copy)
EXPORT2(comm_dup_fn, rmcaf_dup_copy)
EXPORT2(type_dup_fn, rmcaf_dup_copy)
EXPORT2(win_dup_fn, rmcaf_dup_copy)
EXPORT2(comm_null_delete_fn, rmcaf_null_delete)
EXPORT2(type_null_delete_fn, rmcaf_null_delete)
EXPORT2(win_null_delete_fn, rmcaf_null_delete)
EXPORT2(null_copy_fn, rmcaf_null_copy10)
EXPORT2(dup_fn, rmcaf_dup_copy10)
EXPORT2(null_delete_fn, rmcaf_null_delete10)
EXPORT2(conversion_fn_null, rmcaf_null_delete10)

/* Attribute values and the language that set them (MPI 4.1, 19.3.7): a value set from
 * Fortran reads in C as a pointer to it (to an MPI_Aint, or to an INTEGER for MPI_ATTR_PUT),
 * a value set from C reads in Fortran as the pointer's integer. The C library stores a
 * void *, so a value set from Fortran is stored as the address of a slot holding it, and a
 * Fortran get tells the slots from C pointers by address (never dereferencing a C value).
 * Slots live in chunks of this layer's own (64, 128, 256... slots), a freed slot goes back to
 * a free list. A slot is freed by the delete callback of a keyval made from Fortran; one
 * under a keyval made in C (whose C callbacks get the slot's address, as C reads it) stays
 * until the end of the job. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "an MPI_ATTR_PUT value is read in C as the INTEGER at the slot's address: little-endian only"
#endif
struct attr_slot {
    MPI_Aint value; /* first: what C reads at the slot's address */
    struct attr_slot *next_free;
    int live;
};
#define ATTR_CHUNKS 40
static struct attr_slot *attr_chunks[ATTR_CHUNKS];
static size_t attr_chunk_len[ATTR_CHUNKS];
static int attr_nchunks;
static struct attr_slot *attr_free_list;
static pthread_mutex_t attr_lock = PTHREAD_MUTEX_INITIALIZER;

/* A slot holding v (NULL when out of memory). */
static struct attr_slot *attr_box(MPI_Aint v)
{
    pthread_mutex_lock(&attr_lock);
    if (attr_free_list == NULL && attr_nchunks < ATTR_CHUNKS) {
        size_t n = (size_t)64 << (attr_nchunks < 16 ? attr_nchunks : 16);
        struct attr_slot *c = calloc(n, sizeof *c);
        if (c != NULL) {
            for (size_t i = n; i-- > 0;) {
                c[i].next_free = attr_free_list;
                attr_free_list = &c[i];
            }
            attr_chunks[attr_nchunks] = c;
            attr_chunk_len[attr_nchunks++] = n;
        }
    }
    struct attr_slot *s = attr_free_list;
    if (s != NULL) {
        attr_free_list = s->next_free;
        s->value = v;
        s->live = 1;
    }
    pthread_mutex_unlock(&attr_lock);
    return s;
}

/* The live slot at p, or NULL when p is not one (a value set from C). */
static struct attr_slot *attr_slot_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    struct attr_slot *found = NULL;
    pthread_mutex_lock(&attr_lock);
    for (int i = 0; i < attr_nchunks && found == NULL; i++) {
        uintptr_t lo = (uintptr_t)attr_chunks[i];
        if (a >= lo && a < lo + attr_chunk_len[i] * sizeof(struct attr_slot) &&
            (a - lo) % sizeof(struct attr_slot) == 0 && ((struct attr_slot *)p)->live)
            found = (struct attr_slot *)p;
    }
    pthread_mutex_unlock(&attr_lock);
    return found;
}

static void attr_unbox(struct attr_slot *s)
{
    pthread_mutex_lock(&attr_lock);
    s->live = 0;
    s->next_free = attr_free_list;
    attr_free_list = s;
    pthread_mutex_unlock(&attr_lock);
}

/* A keyval made from Fortran: its C extra state is this box (never freed: a keyval's
 * callbacks may run until the end of the job, after MPI_*_free_keyval). */
struct rmcaf_keyval {
    void *copy, *delete;
    MPI_Aint extra; /* the Fortran extra state (INTEGER for the MPI-1 calls) */
    int mpi1;        /* attribute values are default INTEGERs (MPI_Keyval_create) */
};

#define KEYVAL_KIND(kind, Ctype, toint)                                                 \
    /* The copy keeps the language of the value: a slot's value is copied into a new    \
     * slot, a C value stays a C value. */                                              \
    static int kind##_copy_tramp(Ctype h, int keyval, void *extra, void *in, void *out, \
                                 int *flag)                                             \
    {                                                                                   \
        struct rmcaf_keyval *b = extra;                                                 \
        struct attr_slot *slot = attr_slot_of(in);                                      \
        MPI_Aint vin = slot != NULL ? slot->value : (MPI_Aint)in, vout = 0;             \
        MPI_Fint fh = toint(h), fk = keyval, fflag = 0, ierr = MPI_SUCCESS;             \
        if (b->mpi1) {                                                                  \
            MPI_Fint e = (MPI_Fint)b->extra, fin = (MPI_Fint)vin, fout = 0;             \
            ((rmcaf_copy10_fn)b->copy)(&fh, &fk, &e, &fin, &fout, &fflag, &ierr);       \
            vout = fout;                                                                \
        } else {                                                                        \
            ((rmcaf_copy_fn)b->copy)(&fh, &fk, &b->extra, &vin, &vout, &fflag, &ierr);  \
        }                                                                               \
        *flag = fflag != 0;                                                             \
        if (*flag) {                                                                    \
            if (slot == NULL) {                                                         \
                *(void **)out = (void *)vout;                                           \
            } else {                                                                    \
                struct attr_slot *copy = attr_box(vout);                                \
                if (copy == NULL) {                                                     \
                    *flag = 0;                                                          \
                    return MPI_ERR_NO_MEM;                                              \
                }                                                                       \
                *(void **)out = copy;                                                   \
            }                                                                           \
        }                                                                               \
        return ierr;                                                                    \
    }                                                                                   \
    static int kind##_delete_tramp(Ctype h, int keyval, void *val, void *extra)         \
    {                                                                                   \
        struct rmcaf_keyval *b = extra;                                                 \
        struct attr_slot *slot = attr_slot_of(val);                                     \
        MPI_Aint v = slot != NULL ? slot->value : (MPI_Aint)val;                        \
        MPI_Fint fh = toint(h), fk = keyval, ierr = MPI_SUCCESS;                        \
        if (b->mpi1) {                                                                  \
            MPI_Fint e = (MPI_Fint)b->extra, v1 = (MPI_Fint)v;                          \
            ((rmcaf_delete10_fn)b->delete)(&fh, &fk, &v1, &e, &ierr);                   \
        } else {                                                                        \
            ((rmcaf_delete_fn)b->delete)(&fh, &fk, &v, &b->extra, &ierr);               \
        }                                                                               \
        /* The C library deletes the attribute whatever the callback says. */           \
        if (slot != NULL) attr_unbox(slot);                                             \
        return ierr;                                                                    \
    }

KEYVAL_KIND(comm, MPI_Comm, MPI_Comm_toint)
KEYVAL_KIND(type, MPI_Datatype, MPI_Type_toint)
KEYVAL_KIND(win, MPI_Win, MPI_Win_toint)

/* The C copy callback for a Fortran one: the C library's own "no copy" (0) for the
 * predefined null procedures, else the trampoline (also for the DUP procedures: a value set
 * from Fortran is copied into a slot of its own). The delete callback is always the
 * trampoline, which frees the slot of a value set from Fortran. */
#define PICK_COPY(fn, tramp, Ctype)                                                     \
    ((void *)(fn) == (void *)rmcaf_null_copy || (void *)(fn) == (void *)rmcaf_null_copy10 \
         ? (Ctype *)0                                                                   \
         : tramp)


static struct rmcaf_keyval *box(void *copy, void *delete, MPI_Aint extra, int mpi1)
{
    struct rmcaf_keyval *b = malloc(sizeof *b);
    if (b != NULL) *b = (struct rmcaf_keyval){copy, delete, extra, mpi1};
    return b;
}

#define KEYVAL_CREATE(kind, prefix, Copy)                                               \
    static void rmcaf_##kind##_create_keyval(void *copy, void *del, MPI_Fint *keyval,   \
                                             MPI_Aint *extra, MPI_Fint *ierr)           \
    {                                                                                   \
        struct rmcaf_keyval *b = box(copy, del, *extra, 0);                             \
        int k = MPI_KEYVAL_INVALID, rc = MPI_ERR_NO_MEM;                                \
        if (b != NULL)                                                                  \
            rc = prefix##_create_keyval(PICK_COPY(copy, kind##_copy_tramp, Copy),       \
                                        kind##_delete_tramp, &k, b);                    \
        *keyval = k;                                                                    \
        if (ierr) *ierr = rc;                                                           \
    }                                                                                   \
    EXPORT4(kind##_create_keyval, rmcaf_##kind##_create_keyval)

KEYVAL_CREATE(comm, MPI_Comm, MPI_Comm_copy_attr_function)
KEYVAL_CREATE(type, MPI_Type, MPI_Type_copy_attr_function)
KEYVAL_CREATE(win, MPI_Win, MPI_Win_copy_attr_function)

static void rmcaf_keyval_create(void *copy, void *del, MPI_Fint *keyval, MPI_Fint *extra,
                                MPI_Fint *ierr)
{
    struct rmcaf_keyval *b = box(copy, del, *extra, 1);
    int k = MPI_KEYVAL_INVALID, rc = MPI_ERR_NO_MEM;
    if (b != NULL)
        rc = MPI_Keyval_create(
            (MPI_Copy_function *)PICK_COPY(copy, comm_copy_tramp, MPI_Comm_copy_attr_function),
            (MPI_Delete_function *)comm_delete_tramp, &k, b);
    *keyval = k;
    if (ierr) *ierr = rc;
}
EXPORT4(keyval_create, rmcaf_keyval_create)

/* An attribute's value as Fortran sees it: the predefined attributes are pointers to
 * their values in C (MPI_WIN_BASE is the address itself), a program's are the value. */
static MPI_Aint attr_value(int keyval, void *v, int is_win)
{
    if (is_win) {
        switch (keyval) {
        case MPI_WIN_BASE: return (MPI_Aint)v;
        case MPI_WIN_SIZE: return *(MPI_Aint *)v;
        case MPI_WIN_DISP_UNIT:
        case MPI_WIN_CREATE_FLAVOR:
        case MPI_WIN_MODEL: return *(int *)v;
        default: return (MPI_Aint)v;
        }
    }
    switch (keyval) {
    case MPI_TAG_UB:
    case MPI_IO:
    case MPI_HOST:
    case MPI_WTIME_IS_GLOBAL:
    case MPI_APPNUM:
    case MPI_LASTUSEDCODE:
    case MPI_UNIVERSE_SIZE: return *(int *)v;
    default: return (MPI_Aint)v;
    }
}

/* A value as Fortran reads it: a slot's value (set from Fortran), else as attr_value. */
static MPI_Aint attr_get_value(int keyval, void *v, int is_win)
{
    struct attr_slot *slot = attr_slot_of(v);
    return slot != NULL ? slot->value : attr_value(keyval, v, is_win);
}

#define GET_ATTR(kind, Kind, is_win)                                                    \
    static void rmcaf_##kind##_get_attr(MPI_Fint *h, MPI_Fint *keyval, MPI_Aint *val,   \
                                        MPI_Fint *flag, MPI_Fint *ierr)                 \
    {                                                                                   \
        void *v = NULL;                                                                 \
        int f = 0;                                                                      \
        int rc = MPI_##Kind##_get_attr(MPI_##Kind##_fromint(*h), *keyval, &v, &f);      \
        *flag = f;                                                                      \
        if (rc == MPI_SUCCESS && f) *val = attr_get_value(*keyval, v, is_win);          \
        if (ierr) *ierr = rc;                                                           \
    }                                                                                   \
    EXPORT4(kind##_get_attr, rmcaf_##kind##_get_attr)
GET_ATTR(comm, Comm, 0)
GET_ATTR(type, Type, 0)
GET_ATTR(win, Win, 1)

static void rmcaf_attr_get(MPI_Fint *comm, MPI_Fint *keyval, MPI_Fint *val, MPI_Fint *flag,
                           MPI_Fint *ierr)
{
    void *v = NULL;
    int f = 0;
    int rc = MPI_Attr_get(MPI_Comm_fromint(*comm), *keyval, &v, &f);
    *flag = f;
    if (rc == MPI_SUCCESS && f) *val = (MPI_Fint)attr_get_value(*keyval, v, 0);
    if (ierr) *ierr = rc;
}
EXPORT4(attr_get, rmcaf_attr_get)

/* Setting from Fortran stores a slot holding the value (an INTEGER sign-extended: C reads
 * its low half, the INTEGER, at the slot's address). */
#define SET_ATTR(kind, Kind, Ftype)                                                     \
    static void rmcaf_##kind(MPI_Fint *h, MPI_Fint *keyval, Ftype *val, MPI_Fint *ierr) \
    {                                                                                   \
        struct attr_slot *slot = attr_box((MPI_Aint)*val);                              \
        int rc = MPI_ERR_NO_MEM;                                                        \
        if (slot != NULL) {                                                             \
            rc = MPI_##Kind(h_of_##kind(*h), *keyval, slot);                            \
            if (rc != MPI_SUCCESS) attr_unbox(slot);                                    \
        }                                                                               \
        if (ierr) *ierr = rc;                                                           \
    }                                                                                   \
    EXPORT4(kind, rmcaf_##kind)
#define h_of_attr_put(f) RMCAF_F2C_COMM(f)
#define h_of_comm_set_attr(f) RMCAF_F2C_COMM(f)
#define h_of_type_set_attr(f) RMCAF_F2C_DATATYPE(f)
#define h_of_win_set_attr(f) RMCAF_F2C_WIN(f)
SET_ATTR(attr_put, Attr_put, MPI_Fint)
SET_ATTR(comm_set_attr, Comm_set_attr, MPI_Aint)
SET_ATTR(type_set_attr, Type_set_attr, MPI_Aint)
SET_ATTR(win_set_attr, Win_set_attr, MPI_Aint)

/* ------------------------------------------------------------- C <-> Fortran handles */
/* What mpi_abi_fort.h declares, for C code mixed with Fortran: MPI-4's MPI_X_c2f/f2c (the
 * standard ABI has MPI_X_toint/fromint instead; these are the same conversions), the status
 * conversions and the Fortran status-ignore constants. Each function is defined under its
 * PMPI_ name, the MPI_ name an alias (a profiling tool may define its own MPI_ one). */
#define C2F(Kind, Ctype)                                                                \
    MPI_Fint PMPI_##Kind##_c2f(Ctype h) { return MPI_##Kind##_toint(h); }               \
    Ctype PMPI_##Kind##_f2c(MPI_Fint f) { return MPI_##Kind##_fromint(f); }             \
    RMCAF_ALIAS(MPI_##Kind##_c2f, PMPI_##Kind##_c2f)                                    \
    RMCAF_ALIAS(MPI_##Kind##_f2c, PMPI_##Kind##_f2c)
C2F(Comm, MPI_Comm)
C2F(Type, MPI_Datatype)
C2F(Group, MPI_Group)
C2F(Win, MPI_Win)
C2F(File, MPI_File)
C2F(Session, MPI_Session)
C2F(Message, MPI_Message)
C2F(Info, MPI_Info)
C2F(Errhandler, MPI_Errhandler)
C2F(Request, MPI_Request)
C2F(Op, MPI_Op)

/* The common blocks of mpif.h, `use mpi` and `use mpi_f08` (the same blocks for both status
 * forms): a program's own copy of a block, if it has one, is the one these point to (the
 * symbols are resolved at load time, as every other reference to them). */
MPI_Fint *MPI_F_STATUS_IGNORE = RMCAF_STATUS_IGNORE;
MPI_Fint *MPI_F_STATUSES_IGNORE = RMCAF_STATUSES_IGNORE;
MPI_F08_status *MPI_F08_STATUS_IGNORE = (MPI_F08_status *)RMCAF_STATUS_IGNORE;
MPI_F08_status *MPI_F08_STATUSES_IGNORE = (MPI_F08_status *)RMCAF_STATUSES_IGNORE;

/* All three statuses are the C one, integer for integer (MPI_F_STATUS_SIZE = 8, the same
 * field order): a conversion is a copy. A Fortran status-ignore constant is no status to
 * read (MPI_STATUS_IGNORE is the null pointer here, refused with the others). */
_Static_assert(sizeof(MPI_Status) == 8 * sizeof(MPI_Fint), "a Fortran status is a C status");
_Static_assert(sizeof(MPI_F08_status) == sizeof(MPI_Status), "an f08 status is a C status");

static int is_f_ignore(const void *p)
{
    /* Any status overlapping the two constants. */
    return RMCAF_IN((const char *)p + sizeof(MPI_Status) - 1, rmcaf_status_,
                    sizeof rmcaf_status_ + sizeof(MPI_Status) - 1);
}

static int status_copy(const void *from, void *to)
{
    if (from == NULL || to == NULL || is_f_ignore(from) || is_f_ignore(to)) return MPI_ERR_ARG;
    memmove(to, from, sizeof(MPI_Status));
    return MPI_SUCCESS;
}

int PMPI_Status_c2f(const MPI_Status *c, MPI_Fint *f) { return status_copy(c, f); }
int PMPI_Status_f2c(const MPI_Fint *f, MPI_Status *c) { return status_copy(f, c); }
int PMPI_Status_c2f08(const MPI_Status *c, MPI_F08_status *f08) { return status_copy(c, f08); }
int PMPI_Status_f082c(const MPI_F08_status *f08, MPI_Status *c) { return status_copy(f08, c); }
int PMPI_Status_f2f08(const MPI_Fint *f, MPI_F08_status *f08) { return status_copy(f, f08); }
int PMPI_Status_f082f(const MPI_F08_status *f08, MPI_Fint *f) { return status_copy(f08, f); }
RMCAF_ALIAS(MPI_Status_c2f, PMPI_Status_c2f)
RMCAF_ALIAS(MPI_Status_f2c, PMPI_Status_f2c)
RMCAF_ALIAS(MPI_Status_c2f08, PMPI_Status_c2f08)
RMCAF_ALIAS(MPI_Status_f082c, PMPI_Status_f082c)
RMCAF_ALIAS(MPI_Status_f2f08, PMPI_Status_f2f08)
RMCAF_ALIAS(MPI_Status_f082f, PMPI_Status_f082f)

/* ------------------------------------------------------------- generalized requests */
/* The Fortran callbacks and extra state of one generalized request; freed by its free
 * callback (the C library calls it once, when the request is freed). */
struct rmcaf_greq {
    void (*query)(MPI_Aint *, MPI_Fint *, MPI_Fint *);
    void (*free)(MPI_Aint *, MPI_Fint *);
    void (*cancel)(MPI_Aint *, MPI_Fint *, MPI_Fint *);
    /* The program's own variable, as MPICH passes it: a callback's change to its extra
     * state is seen by the program (MPICH's test/mpi f77/pt2pt/greqf relies on it). */
    MPI_Aint *extra;
};

static int greq_query(void *extra, MPI_Status *status)
{
    struct rmcaf_greq *g = extra;
    MPI_Fint ierr = MPI_SUCCESS;
    /* A Fortran status is the C one, integer for integer. */
    g->query(g->extra, (MPI_Fint *)status, &ierr);
    return ierr;
}

static int greq_free(void *extra)
{
    struct rmcaf_greq *g = extra;
    MPI_Fint ierr = MPI_SUCCESS;
    g->free(g->extra, &ierr);
    free(g);
    return ierr;
}

static int greq_cancel(void *extra, int complete)
{
    struct rmcaf_greq *g = extra;
    MPI_Fint ierr = MPI_SUCCESS, c = complete != 0;
    g->cancel(g->extra, &c, &ierr);
    return ierr;
}

static void rmcaf_grequest_start(void *query, void *freefn, void *cancel, MPI_Aint *extra,
                                 MPI_Fint *request, MPI_Fint *ierr)
{
    struct rmcaf_greq *g = malloc(sizeof *g);
    MPI_Request r = MPI_REQUEST_NULL;
    int rc = MPI_ERR_NO_MEM;
    if (g != NULL) {
        g->query = (void (*)(MPI_Aint *, MPI_Fint *, MPI_Fint *))query;
        g->free = (void (*)(MPI_Aint *, MPI_Fint *))freefn;
        g->cancel = (void (*)(MPI_Aint *, MPI_Fint *, MPI_Fint *))cancel;
        g->extra = extra;
        rc = MPI_Grequest_start(greq_query, greq_free, greq_cancel, g, &r);
        if (rc != MPI_SUCCESS) free(g);
    }
    *request = MPI_Request_toint(r);
    if (ierr) *ierr = rc;
}
EXPORT4(grequest_start, rmcaf_grequest_start)

/* ------------------------------------------------------------- info strings */
/* MPI_INFO_GET_STRING: Fortran's BUFLEN counts characters (C's counts the terminating
 * null too), and a BUFLEN of 0 asks for the length only: VALUE is left alone. */
static void rmcaf_info_get_string(MPI_Fint *info, char *key, MPI_Fint *buflen, char *value,
                                  MPI_Fint *flag, MPI_Fint *ierr, size_t key_len,
                                  size_t value_len)
{
    char *k = rmcaf_str_in(key, key_len);
    int want = *buflen > 0 ? *buflen : 0;
    int cl = want > 0 ? want + 1 : 0;
    char *v = calloc((size_t)cl + 1, 1);
    int f = 0, rc = MPI_ERR_NO_MEM;
    if (k != NULL && v != NULL) {
        rc = MPI_Info_get_string(MPI_Info_fromint(*info), k, &cl, v, &f);
        *flag = f;
        if (rc == MPI_SUCCESS && f) {
            if (want > 0) rmcaf_str_out(value, value_len, v);
            *buflen = cl > 0 ? cl - 1 : 0;
        }
    }
    free(k);
    free(v);
    if (ierr) *ierr = rc;
}
EXPORT4(info_get_string, rmcaf_info_get_string)
