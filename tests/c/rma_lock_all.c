/* MPI_Win_lock_all / MPI_Win_unlock_all on a created window (osc-rdma's lent path when every
 * member is on the node): every rank puts to and gets from its right neighbour in a
 * lock_all epoch of its own each, CALLS times, the data checked every time; an exclusive
 * lock of rank 0's counter (read, flush, write the increment, unlock) alternates with a
 * lock_all in which two reads of the counter, a flush and a pause apart, must agree (no
 * exclusive holder can write between them), and no increment may be lost; misuse inside
 * and outside a lock_all epoch is MPI_ERR_RMA_SYNC with nothing changed. The Rust side
 * (c_rma_rdma.rs) reads the profile's osc.rdma.lent_locks: each lock_all taken on the lent
 * path counts one. */
#include "check.h"

#define CALLS 500
#define SLOTS 8

static void pause_a_little(void) {
    volatile int x = 0;
    for (int i = 0; i < 200; i++) x += i;
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int mem[4 * SLOTS + 2];
    for (int i = 0; i < 4 * SLOTS + 2; i++) mem[i] = -1;
    mem[4 * SLOTS] = 0; /* the counter (rank 0's) */
    MPI_Win win;
    OK(MPI_Win_create(mem, (4 * SLOTS + 1) * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    int right = (rank + 1) % size;
    int out[4], in[4];
    /* The first epoch by the module (the members' words arrive meanwhile). */
    OK(MPI_Win_lock_all(0, win));
    OK(MPI_Win_unlock_all(win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    for (int i = 0; i < CALLS; i++) {
        int at = 4 * (i % SLOTS);
        for (int k = 0; k < 4; k++) out[k] = rank * 100000 + i * 4 + k;
        OK(MPI_Win_lock_all(0, win));
        OK(MPI_Put(out, 4, MPI_INT, right, at, 4, MPI_INT, win));
        OK(MPI_Win_unlock_all(win));
        OK(MPI_Win_lock_all(i % 2 ? MPI_MODE_NOCHECK : 0, win));
        OK(MPI_Get(in, 4, MPI_INT, right, at, 4, MPI_INT, win));
        OK(MPI_Win_unlock_all(win));
        CHECK(memcmp(in, out, sizeof in) == 0, "lock_all call %d: got %d %d %d %d", i, in[0], in[1], in[2], in[3]);
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));
    /* Exclusive increments of rank 0's counter against shared lock_all readers. */
    int one, two, cnt;
    for (int i = 0; i < CALLS / 5; i++) {
        OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
        OK(MPI_Get(&cnt, 1, MPI_INT, 0, 4 * SLOTS, 1, MPI_INT, win));
        OK(MPI_Win_flush(0, win));
        cnt++;
        OK(MPI_Put(&cnt, 1, MPI_INT, 0, 4 * SLOTS, 1, MPI_INT, win));
        OK(MPI_Win_unlock(0, win));
        OK(MPI_Win_lock_all(0, win));
        OK(MPI_Get(&one, 1, MPI_INT, 0, 4 * SLOTS, 1, MPI_INT, win));
        OK(MPI_Win_flush(0, win));
        pause_a_little();
        OK(MPI_Get(&two, 1, MPI_INT, 0, 4 * SLOTS, 1, MPI_INT, win));
        OK(MPI_Win_flush(0, win));
        OK(MPI_Win_unlock_all(win));
        CHECK(one == two && one >= i + 1, "round %d: the counter moved under lock_all: %d then %d", i, one, two);
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) {
        OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
        CHECK(mem[4 * SLOTS] == size * (CALLS / 5), "the counter: %d for %d increments", mem[4 * SLOTS], size * (CALLS / 5));
        OK(MPI_Win_unlock(0, win));
    }
    /* Misuse: refused with MPI_ERR_RMA_SYNC, the epoch as it was. */
    int cls = -1;
    OK(MPI_Win_lock_all(0, win));
    MPI_Error_class(MPI_Win_unlock(right, win), &cls);
    CHECK(cls == MPI_ERR_RMA_SYNC, "MPI_Win_unlock in a lock_all epoch: class %d", cls);
    MPI_Error_class(MPI_Win_lock(MPI_LOCK_SHARED, right, 0, win), &cls);
    CHECK(cls == MPI_ERR_RMA_SYNC, "MPI_Win_lock in a lock_all epoch: class %d", cls);
    MPI_Error_class(MPI_Win_lock_all(0, win), &cls);
    CHECK(cls == MPI_ERR_RMA_SYNC, "a second MPI_Win_lock_all: class %d", cls);
    MPI_Error_class(MPI_Win_fence(0, win), &cls);
    CHECK(cls == MPI_ERR_RMA_SYNC, "MPI_Win_fence in a lock_all epoch: class %d", cls);
    out[0] = 42;
    OK(MPI_Put(out, 1, MPI_INT, right, 0, 1, MPI_INT, win));
    OK(MPI_Win_unlock_all(win));
    MPI_Error_class(MPI_Win_unlock_all(win), &cls);
    CHECK(cls == MPI_ERR_RMA_SYNC, "MPI_Win_unlock_all without lock_all: class %d", cls);
    OK(MPI_Win_lock_all(0, win));
    MPI_Error_class(MPI_Put(out, 4, MPI_INT, right, 4 * SLOTS - 2, 4, MPI_INT, win), &cls);
    CHECK(cls == MPI_ERR_RMA_RANGE, "a put outside the window: class %d", cls);
    OK(MPI_Win_unlock_all(win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win));
    CHECK(mem[0] == 42, "the put of the refused epoch: %d", mem[0]);
    CHECK(mem[4 * SLOTS - 1] != 42 && mem[4 * SLOTS + 1] == -1, "the put outside wrote: %d %d", mem[4 * SLOTS - 1], mem[4 * SLOTS + 1]);
    OK(MPI_Win_unlock(rank, win));
    OK(MPI_Win_free(&win));
    int r = summary("rma_lock_all");
    MPI_Finalize();
    return r;
}
