/* Accumulates, fetch-and-ops and compare-and-swaps to a member of the node on a created
 * window, many of them: every rank updates rank 0's counters (rank 0 its own: the self
 * target) under lock_all with a flush after each call, then rank 0 checks the totals. The Rust side (c_rma_rdma.rs) reads
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
    OK(MPI_Win_unlock_all(win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) {
        long want = (long)CALLS * size;
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
