/* Accumulates, fetch-and-ops and compare-and-swaps to a member of the node on a created
 * window, many of them: every rank updates rank 0's counters (rank 0 its own: the self
 * target) under lock_all with a flush after each call, tries bad input (refused with its
 * class, nothing written), updates them again with each call in a lock/unlock epoch of its
 * own, then rank 0 checks the totals. The Rust side (c_rma_rdma.rs) reads
 * the PML's message counters from the profile: with osc-rdma's direct accumulates they stay
 * far below the number of calls (the origin applies them by CMA), by messages they exceed it. */
#include "check.h"

#define CALLS 500

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long counters[3] = {0, 0, 0};
    MPI_Win win;
    OK(MPI_Win_create(counters, sizeof counters, sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    OK(MPI_Win_lock_all(0, win));
    {
        long one = 1, old = -1, cmp, swapped;
        for (int i = 0; i < CALLS; i++) {
            OK(MPI_Accumulate(&one, 1, MPI_LONG, 0, 0, 1, MPI_LONG, MPI_SUM, win));
            OK(MPI_Win_flush(0, win));
            OK(MPI_Fetch_and_op(&one, &old, MPI_LONG, 0, 1, MPI_SUM, win));
            OK(MPI_Win_flush(0, win));
            CHECK(old >= 0 && old < (long)CALLS * size, "fetched %ld", old);
            /* MPI_NO_OP reads, by fetch-and-op and by get_accumulate (its origin ignored). */
            long same = -1;
            OK(MPI_Fetch_and_op(NULL, &same, MPI_LONG, 0, 1, MPI_NO_OP, win));
            OK(MPI_Win_flush(0, win));
            OK(MPI_Get_accumulate(&old, 0, MPI_LONG, &same, 1, MPI_LONG, 0, 1, 1, MPI_LONG,
                                  MPI_NO_OP, win));
            OK(MPI_Win_flush(0, win));
            CHECK(same >= 0 && same <= (long)CALLS * size, "read %ld", same);
            /* An increment by compare-and-swap: retried until no other rank came between. */
            do {
                OK(MPI_Fetch_and_op(NULL, &cmp, MPI_LONG, 0, 2, MPI_NO_OP, win));
                OK(MPI_Win_flush(0, win));
                long next = cmp + 1;
                OK(MPI_Compare_and_swap(&next, &cmp, &swapped, MPI_LONG, 0, 2, win));
                OK(MPI_Win_flush(0, win));
            } while (swapped != cmp);
        }
    }
    /* Bad input on those paths (rank 0's window: 3 longs): the class through the window's
     * handler, nothing written (rank 0's totals below stay exact). */
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    {
        long one = 1, old = -1, cmp = 0;
        double d = 1.0, dold = -1.0;
        CHECK(MPI_Compare_and_swap(&one, &cmp, &old, MPI_LONG, 0, 3, win) == MPI_ERR_RMA_RANGE,
              "cas past the end");
        CHECK(MPI_Compare_and_swap(&one, &cmp, &old, MPI_LONG, 0, -1, win) == MPI_ERR_RMA_RANGE,
              "cas before the start");
        CHECK(MPI_Compare_and_swap(&one, &cmp, &old, MPI_LONG, size, 0, win) == MPI_ERR_RANK,
              "cas to rank = size");
        CHECK(MPI_Compare_and_swap(&d, &d, &dold, MPI_DOUBLE, 0, 0, win) == MPI_ERR_TYPE,
              "cas on doubles");
        CHECK(MPI_Fetch_and_op(&one, &old, MPI_LONG, 0, 3, MPI_SUM, win) == MPI_ERR_RMA_RANGE,
              "fetch-and-op past the end");
        long two[2] = {1, 1};
        CHECK(MPI_Accumulate(two, 2, MPI_LONG, 0, 2, 2, MPI_LONG, MPI_SUM, win) ==
                  MPI_ERR_RMA_RANGE,
              "accumulate across the end");
        CHECK(MPI_Get_accumulate(&one, 1, MPI_LONG, &old, 1, MPI_LONG, 0, 3, 1, MPI_LONG,
                                 MPI_REPLACE, win) == MPI_ERR_RMA_RANGE,
              "get_accumulate past the end");
        CHECK(old == -1 && dold == -1.0, "no result written: %ld %g", old, dold);
        OK(MPI_Win_flush_all(win));
    }
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_ARE_FATAL));
    OK(MPI_Win_unlock_all(win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    /* Again, each call in a lock/unlock epoch of its own, exclusive and shared in turn (on
     * osc-rdma the origin's lock word, the operation applied within the call and the word
     * given back: the others' operations and locks meanwhile by every path). */
    {
        long one = 1, old = -1, cmp, swapped;
        for (int i = 0; i < CALLS; i++) {
            int kind = i % 2 ? MPI_LOCK_SHARED : MPI_LOCK_EXCLUSIVE;
            OK(MPI_Win_lock(kind, 0, 0, win));
            OK(MPI_Accumulate(&one, 1, MPI_LONG, 0, 0, 1, MPI_LONG, MPI_SUM, win));
            OK(MPI_Win_unlock(0, win));
            OK(MPI_Win_lock(kind, 0, 0, win));
            OK(MPI_Fetch_and_op(&one, &old, MPI_LONG, 0, 1, MPI_SUM, win));
            OK(MPI_Win_unlock(0, win));
            CHECK(old >= 0 && old < 2L * CALLS * size, "fetched %ld", old);
            do {
                OK(MPI_Win_lock(kind, 0, 0, win));
                OK(MPI_Fetch_and_op(NULL, &cmp, MPI_LONG, 0, 2, MPI_NO_OP, win));
                OK(MPI_Win_unlock(0, win));
                long next = cmp + 1;
                OK(MPI_Win_lock(kind, 0, 0, win));
                OK(MPI_Compare_and_swap(&next, &cmp, &swapped, MPI_LONG, 0, 2, win));
                OK(MPI_Win_unlock(0, win));
            } while (swapped != cmp);
        }
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) {
        long want = 2L * CALLS * size;
        /* The window's memory, read after the epoch: MPI's unified model. */
        OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
        CHECK(counters[0] == want && counters[1] == want && counters[2] == want,
              "counters %ld %ld %ld, want %ld each", counters[0], counters[1], counters[2], want);
        OK(MPI_Win_unlock(0, win));
    }
    OK(MPI_Win_free(&win));
    int rc = summary("rma_acc_count");
    MPI_Finalize();
    return rc;
}
