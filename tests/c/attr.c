/* Attribute caching: keyvals on communicators and datatypes (and window keyvals), copy
 * callbacks at MPI_Comm_dup/_idup/_dup_with_info and MPI_Type_dup (MPI_*_DUP_FN,
 * MPI_*_NULL_COPY_FN, the program's), delete callbacks at free, overwrite, delete_attr and
 * MPI_Finalize (MPI_COMM_SELF's first, free to call MPI), keyvals freed lazily, callbacks
 * failing, the deprecated MPI-1 calls, and bad input. */
#include "check.h"

static int copies, deletes;
static int last_deleted;

/* Counts, and copies the value plus 1000 (so a copy is recognisable). */
static int copy_fn(MPI_Comm comm, int keyval, void *extra, void *in, void *out, int *flag) {
    (void)comm;
    (void)keyval;
    copies++;
    CHECK(extra == (void *)&copies, "extra_state passed to the copy callback");
    *(void **)out = (void *)((char *)in + 1000);
    *flag = 1;
    return MPI_SUCCESS;
}

static int delete_fn(MPI_Comm comm, int keyval, void *val, void *extra) {
    (void)comm;
    (void)keyval;
    (void)extra;
    deletes++;
    last_deleted = (int)(size_t)val;
    return MPI_SUCCESS;
}

static int failing_copy(MPI_Comm comm, int keyval, void *extra, void *in, void *out, int *flag) {
    (void)comm;
    (void)keyval;
    (void)extra;
    (void)in;
    (void)out;
    *flag = 0;
    return MPI_ERR_OTHER;
}

static int fail_deletes = 1;

static int failing_delete(MPI_Comm comm, int keyval, void *val, void *extra) {
    (void)comm;
    (void)keyval;
    (void)val;
    (void)extra;
    return fail_deletes ? MPI_ERR_ARG : MPI_SUCCESS;
}

static int type_copies, type_deletes;

static int type_copy(MPI_Datatype t, int keyval, void *extra, void *in, void *out, int *flag) {
    (void)t;
    (void)keyval;
    (void)extra;
    type_copies++;
    *(void **)out = in;
    *flag = 1;
    return MPI_SUCCESS;
}

static int type_delete(MPI_Datatype t, int keyval, void *val, void *extra) {
    (void)t;
    (void)keyval;
    (void)val;
    (void)extra;
    type_deletes++;
    return MPI_SUCCESS;
}

/* MPI_Finalize's order: MPI_COMM_SELF's delete callback first, and it may call MPI (as
 * mpi4py's clean-up does: it frees a communicator kept in the attribute). */
static int finalize_order[2], finalize_seen, self_callback_ok;

static int self_delete(MPI_Comm comm, int keyval, void *val, void *extra) {
    (void)keyval;
    (void)extra;
    int finalized = 1;
    MPI_Comm kept = *(MPI_Comm *)val;
    self_callback_ok = comm == MPI_COMM_SELF && MPI_Finalized(&finalized) == MPI_SUCCESS &&
                       !finalized && MPI_Comm_free(&kept) == MPI_SUCCESS && kept == MPI_COMM_NULL;
    finalize_order[finalize_seen++ % 2] = 1;
    return MPI_SUCCESS;
}

static int world_delete(MPI_Comm comm, int keyval, void *val, void *extra) {
    (void)comm;
    (void)keyval;
    (void)val;
    (void)extra;
    finalize_order[finalize_seen++ % 2] = 2;
    return MPI_SUCCESS;
}

static void comm_attributes(void) {
    int key, flag = -1;
    void *val = NULL;
    OK(MPI_Comm_create_keyval(copy_fn, delete_fn, &key, &copies));
    CHECK(key != MPI_KEYVAL_INVALID, "a keyval");
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, key, &val, &flag));
    CHECK(flag == 0, "not set yet");
    OK(MPI_Comm_set_attr(MPI_COMM_WORLD, key, (void *)7));
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, key, &val, &flag));
    CHECK(flag == 1 && val == (void *)7, "get after set: flag %d val %p", flag, val);

    /* Overwriting deletes the old value. */
    deletes = 0;
    OK(MPI_Comm_set_attr(MPI_COMM_WORLD, key, (void *)8));
    CHECK(deletes == 1 && last_deleted == 7, "overwrite deleted %d (value %d)", deletes, last_deleted);

    /* Dup copies through the callback, free deletes. */
    MPI_Comm dup;
    copies = deletes = 0;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    CHECK(copies == 1, "copy callback ran %d times", copies);
    OK(MPI_Comm_get_attr(dup, key, &val, &flag));
    CHECK(flag == 1 && val == (void *)1008, "dup's value %p", val);
    /* The predefined attributes are there on a duplicate too. */
    int *ub = NULL;
    OK(MPI_Comm_get_attr(dup, MPI_TAG_UB, &ub, &flag));
    CHECK(flag == 1 && ub && *ub >= 32767, "MPI_TAG_UB on a dup");
    OK(MPI_Comm_free(&dup));
    CHECK(deletes == 1 && last_deleted == 1008, "free deleted %d (value %d)", deletes, last_deleted);

    /* delete_attr runs the callback; deleting what is not set is no error. */
    deletes = 0;
    OK(MPI_Comm_delete_attr(MPI_COMM_WORLD, key));
    CHECK(deletes == 1 && last_deleted == 8, "delete_attr deleted %d", deletes);
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, key, &val, &flag));
    CHECK(flag == 0, "gone after delete_attr");
    OK(MPI_Comm_delete_attr(MPI_COMM_WORLD, key));
    CHECK(deletes == 1, "nothing to delete: no callback");

    /* MPI_COMM_DUP_FN and MPI_COMM_NULL_COPY_FN. */
    int dupkey, nullkey;
    OK(MPI_Comm_create_keyval(MPI_COMM_DUP_FN, MPI_COMM_NULL_DELETE_FN, &dupkey, NULL));
    OK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_fn, &nullkey, NULL));
    OK(MPI_Comm_set_attr(MPI_COMM_WORLD, dupkey, (void *)21));
    OK(MPI_Comm_set_attr(MPI_COMM_WORLD, nullkey, (void *)22));
    deletes = 0;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    OK(MPI_Comm_get_attr(dup, dupkey, &val, &flag));
    CHECK(flag == 1 && val == (void *)21, "MPI_COMM_DUP_FN copies the value");
    OK(MPI_Comm_get_attr(dup, nullkey, &val, &flag));
    CHECK(flag == 0, "MPI_COMM_NULL_COPY_FN does not copy");
    /* The attribute of one communicator is not another's. */
    OK(MPI_Comm_set_attr(dup, nullkey, (void *)23));
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, nullkey, &val, &flag));
    CHECK(flag == 1 && val == (void *)22, "world's value stays");
    OK(MPI_Comm_free(&dup));
    CHECK(deletes == 1 && last_deleted == 23, "dup's delete");

    /* Comm_idup and Comm_dup_with_info copy too. */
    MPI_Request req;
    OK(MPI_Comm_idup(MPI_COMM_WORLD, &dup, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(req == MPI_REQUEST_NULL, "idup's request freed");
    OK(MPI_Comm_get_attr(dup, dupkey, &val, &flag));
    CHECK(flag == 1 && val == (void *)21, "idup copies");
    int rank, size, sum = 0;
    MPI_Comm_rank(dup, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    OK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, dup));
    CHECK(sum == size * (size - 1) / 2, "the idup'd communicator works");
    OK(MPI_Comm_free(&dup));
    OK(MPI_Comm_dup_with_info(MPI_COMM_WORLD, MPI_INFO_NULL, &dup));
    OK(MPI_Comm_get_attr(dup, dupkey, &val, &flag));
    CHECK(flag == 1 && val == (void *)21, "dup_with_info copies");
    OK(MPI_Comm_free(&dup));

    /* Keyvals are freed lazily: an attribute keeps its keyval (and callbacks) alive. */
    int saved = nullkey;
    OK(MPI_Comm_free_keyval(&nullkey));
    CHECK(nullkey == MPI_KEYVAL_INVALID, "free_keyval sets MPI_KEYVAL_INVALID");
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, saved, &val, &flag));
    CHECK(flag == 1 && val == (void *)22, "the attribute outlives its keyval's free");
    deletes = 0;
    OK(MPI_Comm_delete_attr(MPI_COMM_WORLD, saved));
    CHECK(deletes == 1, "the freed keyval's delete callback still runs");
    CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, saved, &val, &flag) == MPI_ERR_KEYVAL,
          "the keyval is gone with its last attribute");
    OK(MPI_Comm_delete_attr(MPI_COMM_WORLD, dupkey));
    OK(MPI_Comm_free_keyval(&dupkey));
    CHECK(MPI_Comm_free_keyval(&saved) == MPI_ERR_KEYVAL, "double free of a keyval");

    /* A failing copy callback fails the dup with its code; a failing delete callback
     * fails the delete and leaves the attribute. */
    int badkey;
    OK(MPI_Comm_create_keyval(failing_copy, failing_delete, &badkey, NULL));
    OK(MPI_Comm_set_attr(MPI_COMM_WORLD, badkey, (void *)13));
    dup = MPI_COMM_WORLD;
    CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup) == MPI_ERR_OTHER, "copy callback's error");
    CHECK(MPI_Comm_delete_attr(MPI_COMM_WORLD, badkey) == MPI_ERR_ARG, "delete callback's error");
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, badkey, &val, &flag));
    CHECK(flag == 1 && val == (void *)13, "kept after a failed delete");
    CHECK(MPI_Comm_set_attr(MPI_COMM_WORLD, badkey, (void *)14) == MPI_ERR_ARG,
          "overwrite with a failing delete");
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, badkey, &val, &flag));
    CHECK(flag == 1 && val == (void *)13, "kept after a failed overwrite");
    fail_deletes = 0;
    OK(MPI_Comm_delete_attr(MPI_COMM_WORLD, badkey));
    OK(MPI_Comm_free_keyval(&badkey));

    /* The deprecated MPI-1 calls. */
    int oldkey;
    OK(MPI_Keyval_create(MPI_DUP_FN, MPI_NULL_DELETE_FN, &oldkey, NULL));
    OK(MPI_Attr_put(MPI_COMM_WORLD, oldkey, (void *)31));
    OK(MPI_Attr_get(MPI_COMM_WORLD, oldkey, &val, &flag));
    CHECK(flag == 1 && val == (void *)31, "Attr_get");
    OK(MPI_Attr_delete(MPI_COMM_WORLD, oldkey));
    OK(MPI_Attr_get(MPI_COMM_WORLD, oldkey, &val, &flag));
    CHECK(flag == 0, "Attr_delete");
    OK(MPI_Keyval_free(&oldkey));
    CHECK(oldkey == MPI_KEYVAL_INVALID, "Keyval_free");

    /* Bad input. */
    CHECK(MPI_Comm_set_attr(MPI_COMM_WORLD, MPI_TAG_UB, (void *)1) == MPI_ERR_KEYVAL,
          "a predefined key cannot be set");
    CHECK(MPI_Comm_delete_attr(MPI_COMM_WORLD, MPI_TAG_UB) == MPI_ERR_KEYVAL,
          "nor deleted");
    CHECK(MPI_Comm_set_attr(MPI_COMM_WORLD, 12345, (void *)1) == MPI_ERR_KEYVAL, "bad keyval");
    CHECK(MPI_Comm_set_attr(MPI_COMM_NULL, key, (void *)1) == MPI_ERR_COMM, "MPI_COMM_NULL");
    CHECK(MPI_Comm_create_keyval(copy_fn, delete_fn, NULL, NULL) == MPI_ERR_ARG, "NULL keyval");
    CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, key, NULL, &flag) == MPI_ERR_ARG, "NULL value");
    int tkey;
    OK(MPI_Type_create_keyval(MPI_TYPE_DUP_FN, MPI_TYPE_NULL_DELETE_FN, &tkey, NULL));
    CHECK(MPI_Comm_set_attr(MPI_COMM_WORLD, tkey, (void *)1) == MPI_ERR_KEYVAL,
          "a datatype keyval on a communicator");
    OK(MPI_Type_free_keyval(&tkey));
    OK(MPI_Comm_free_keyval(&key));

    /* Window keyvals exist (windows do not yet). */
    int wkey;
    OK(MPI_Win_create_keyval(MPI_WIN_DUP_FN, MPI_WIN_NULL_DELETE_FN, &wkey, NULL));
    CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, wkey, &val, &flag) == MPI_ERR_KEYVAL,
          "a window keyval on a communicator");
    OK(MPI_Win_free_keyval(&wkey));
    CHECK(wkey == MPI_KEYVAL_INVALID, "Win_free_keyval");
}

static void type_attributes(void) {
    int key, flag;
    void *val;
    MPI_Datatype vec, dup;
    OK(MPI_Type_create_keyval(type_copy, type_delete, &key, NULL));
    OK(MPI_Type_vector(2, 1, 2, MPI_INT, &vec));
    OK(MPI_Type_set_attr(vec, key, (void *)41));
    OK(MPI_Type_get_attr(vec, key, &val, &flag));
    CHECK(flag == 1 && val == (void *)41, "type attribute");
    type_copies = type_deletes = 0;
    OK(MPI_Type_dup(vec, &dup));
    CHECK(type_copies == 1, "Type_dup copied %d", type_copies);
    OK(MPI_Type_get_attr(dup, key, &val, &flag));
    CHECK(flag == 1 && val == (void *)41, "dup's type attribute");
    OK(MPI_Type_free(&dup));
    CHECK(type_deletes == 1, "Type_free deleted %d", type_deletes);
    /* A new datatype (maybe reusing the handle) has no attributes. */
    OK(MPI_Type_contiguous(3, MPI_INT, &dup));
    OK(MPI_Type_get_attr(dup, key, &val, &flag));
    CHECK(flag == 0, "a new datatype has no attribute");
    OK(MPI_Type_free(&dup));
    OK(MPI_Type_delete_attr(vec, key));
    CHECK(type_deletes == 2, "Type_delete_attr");
    OK(MPI_Type_free(&vec));
    /* Predefined datatypes cache attributes too. */
    OK(MPI_Type_set_attr(MPI_INT, key, (void *)42));
    OK(MPI_Type_get_attr(MPI_INT, key, &val, &flag));
    CHECK(flag == 1 && val == (void *)42, "on MPI_INT");
    OK(MPI_Type_get_attr(MPI_DOUBLE, key, &val, &flag));
    CHECK(flag == 0, "MPI_DOUBLE has none");
    OK(MPI_Type_delete_attr(MPI_INT, key));
    OK(MPI_Type_free_keyval(&key));
    CHECK(MPI_Type_set_attr(MPI_DATATYPE_NULL, key, (void *)1) == MPI_ERR_TYPE,
          "MPI_DATATYPE_NULL");
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    comm_attributes();
    type_attributes();

    int selfkey, worldkey;
    static MPI_Comm kept;
    OK(MPI_Comm_dup(MPI_COMM_SELF, &kept));
    OK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, self_delete, &selfkey, NULL));
    OK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, world_delete, &worldkey, NULL));
    /* Set on world first: the order at finalize must still be self's first. */
    OK(MPI_Comm_set_attr(MPI_COMM_WORLD, worldkey, NULL));
    OK(MPI_Comm_set_attr(MPI_COMM_SELF, selfkey, &kept));
    OK(MPI_Comm_free_keyval(&selfkey));
    OK(MPI_Comm_free_keyval(&worldkey));

    int rc = summary("attr");
    int frc = MPI_Finalize();
    if (frc != MPI_SUCCESS || finalize_seen != 2 || finalize_order[0] != 1 ||
        finalize_order[1] != 2 || !self_callback_ok) {
        fprintf(stderr, "FAIL finalize: rc %d, %d callbacks, order %d %d, self callback %s\n", frc,
                finalize_seen, finalize_order[0], finalize_order[1],
                self_callback_ok ? "ok" : "failed");
        return 1;
    }
    return rc;
}
