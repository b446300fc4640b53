/* Puts and gets of contiguous buffers to a member of the node on a created window, many of
 * them: every rank writes to and reads back from its right neighbour, CALLS times under
 * lock_all with a flush after each call, and CALLS times in a lock/unlock epoch each; the
 * data is checked every time. Besides: a buffer reused after flush_local, a request-based
 * put, a derived origin datatype, and a put outside the window refused with
 * MPI_ERR_RMA_RANGE and nothing written. The Rust side (c_rma_rdma.rs) reads the PML's RDMA
 * counters from the profile: with osc-rdma's puts and gets by CMA from the origin
 * (osc_rdma_cma_direct) they stay far below the number of calls, by the BTLs they exceed it. */
#include "check.h"

#define CALLS 500
#define SLOTS 8

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int mem[4 * SLOTS + 4];
    for (int i = 0; i < 4 * SLOTS + 4; i++) mem[i] = -1;
    MPI_Win win;
    OK(MPI_Win_create(mem, 4 * SLOTS * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    int right = (rank + 1) % size;
    int out[4], in[4];
    OK(MPI_Win_lock_all(0, win));
    for (int i = 0; i < CALLS; i++) {
        int at = 4 * (i % SLOTS);
        for (int k = 0; k < 4; k++) out[k] = rank * 100000 + i * 4 + k;
        OK(MPI_Put(out, 4, MPI_INT, right, at, 4, MPI_INT, win));
        OK(MPI_Win_flush(right, win));
        OK(MPI_Get(in, 4, MPI_INT, right, at, 4, MPI_INT, win));
        OK(MPI_Win_flush(right, win));
        CHECK(memcmp(in, out, sizeof in) == 0, "lock_all call %d: got %d %d %d %d", i, in[0], in[1], in[2], in[3]);
    }
    /* flush_local: the origin buffer is the program's again, the target has the old bytes. */
    out[0] = 7;
    OK(MPI_Put(out, 1, MPI_INT, right, 0, 1, MPI_INT, win));
    OK(MPI_Win_flush_local(right, win));
    out[0] = 8;
    OK(MPI_Win_flush(right, win));
    OK(MPI_Get(in, 1, MPI_INT, right, 0, 1, MPI_INT, win));
    OK(MPI_Win_flush(right, win));
    CHECK(in[0] == 7, "after flush_local: %d", in[0]);
    /* A request-based put, complete locally when its request is. */
    MPI_Request req;
    out[1] = 11;
    OK(MPI_Rput(&out[1], 1, MPI_INT, right, 1, 1, MPI_INT, win, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    OK(MPI_Win_flush(right, win));
    /* A derived origin type: every other int of `strided` into 2 consecutive ints. */
    int strided[4] = {21, -5, 22, -5};
    MPI_Datatype every_other;
    OK(MPI_Type_vector(2, 1, 2, MPI_INT, &every_other));
    OK(MPI_Type_commit(&every_other));
    OK(MPI_Put(strided, 1, every_other, right, 2, 2, MPI_INT, win));
    OK(MPI_Win_flush(right, win));
    OK(MPI_Type_free(&every_other));
    OK(MPI_Get(in, 4, MPI_INT, right, 0, 4, MPI_INT, win));
    OK(MPI_Win_flush(right, win));
    CHECK(in[0] == 7 && in[1] == 11 && in[2] == 21 && in[3] == 22, "got %d %d %d %d", in[0], in[1], in[2], in[3]);
    /* Outside the window: refused, nothing written (the last slot stays as it was). */
    int bad[4] = {99, 99, 99, 99};
    int rc = MPI_Put(bad, 4, MPI_INT, right, 4 * SLOTS - 2, 4, MPI_INT, win);
    int cls = -1;
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_RMA_RANGE, "a put outside the window: class %d", cls);
    rc = MPI_Get(in, 4, MPI_INT, right, -1, 4, MPI_INT, win);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_RMA_RANGE, "a get before the window: class %d", cls);
    OK(MPI_Win_unlock_all(win));
    /* Lock, put, unlock; lock, get, unlock. */
    for (int i = 0; i < CALLS; i++) {
        int at = 4 * (i % SLOTS);
        for (int k = 0; k < 4; k++) out[k] = -(rank * 100000 + i * 4 + k);
        OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, right, 0, win));
        OK(MPI_Put(out, 4, MPI_INT, right, at, 4, MPI_INT, win));
        OK(MPI_Win_unlock(right, win));
        OK(MPI_Win_lock(MPI_LOCK_SHARED, right, 0, win));
        OK(MPI_Get(in, 4, MPI_INT, right, at, 4, MPI_INT, win));
        OK(MPI_Win_unlock(right, win));
        CHECK(memcmp(in, out, sizeof in) == 0, "lock call %d: got %d %d %d %d", i, in[0], in[1], in[2], in[3]);
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));
    int left = (rank + size - 1) % size;
    OK(MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win));
    for (int s = 0; s < SLOTS; s++) {
        int i = CALLS - SLOTS + s, at = 4 * (i % SLOTS);
        for (int k = 0; k < 4; k++)
            CHECK(mem[at + k] == -(left * 100000 + i * 4 + k), "slot %d int %d: %d", at / 4, k, mem[at + k]);
    }
    CHECK(mem[4 * SLOTS] == -1, "past the window: %d", mem[4 * SLOTS]);
    OK(MPI_Win_unlock(rank, win));
    OK(MPI_Win_free(&win));
    int r = summary("rma_put_count");
    MPI_Finalize();
    return r;
}
