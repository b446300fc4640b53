/* Fence epochs on a created window, quiet and loud in turn: every rank puts to its right
 * neighbour each round and reads back what it put the round before; in rounds i % 3 == 1
 * rank 0 adds 1 to its neighbour's counter by a contiguous MPI_Accumulate, in rounds
 * i % 3 == 2 by one of a derived datatype (both applied by the origin with
 * osc_rdma_acc_direct, messages without). Every value is checked after every fence. The Rust
 * side (c_rma_rdma.rs) reads `osc.rdma.fences_by_collective` from the profile: the fences
 * every member found quiet end by one collective, the others by osc-am's messages. */
#include "check.h"

#define ROUNDS 300

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    /* 0, 1: put slots (alternating rounds); 2: the contiguous counter; 3 and 5: the
     * derived datatype's counters. */
    int mem[8] = {-1, -1, 0, 0, 0, 0, 0, 0};
    MPI_Win win;
    OK(MPI_Win_create(mem, sizeof mem, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    MPI_Datatype vec;
    OK(MPI_Type_vector(2, 1, 2, MPI_INT, &vec));
    OK(MPI_Type_commit(&vec));
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    int one[2] = {1, 1}, contig = 0, derived = 0, got = -2, val;
    OK(MPI_Win_fence(MPI_MODE_NOPRECEDE, win));
    for (int i = 0; i < ROUNDS; i++) {
        val = rank * 100000 + i;
        OK(MPI_Put(&val, 1, MPI_INT, right, i % 2, 1, MPI_INT, win));
        if (i > 0) OK(MPI_Get(&got, 1, MPI_INT, right, (i + 1) % 2, 1, MPI_INT, win));
        if (rank == 0 && i % 3 == 1)
            OK(MPI_Accumulate(one, 1, MPI_INT, right, 2, 1, MPI_INT, MPI_SUM, win));
        if (rank == 0 && i % 3 == 2)
            OK(MPI_Accumulate(one, 2, MPI_INT, right, 3, 1, vec, MPI_SUM, win));
        OK(MPI_Win_fence(0, win));
        contig += i % 3 == 1;
        derived += i % 3 == 2;
        CHECK(mem[i % 2] == left * 100000 + i, "round %d: put slot %d", i, mem[i % 2]);
        if (i > 0) CHECK(got == rank * 100000 + i - 1, "round %d: got %d", i, got);
        /* A counter is read only when the next round leaves it alone: rank 0 may start
         * that round's accumulate as soon as its own fence returns, and its target applies
         * it whenever it progresses (MPI: once the target called the fence). */
        int c = left == 0 ? contig : 0, d = left == 0 ? derived : 0;
        if (i % 3 != 0) CHECK(mem[2] == c, "round %d: counter %d, expected %d", i, mem[2], c);
        if (i % 3 != 1)
            CHECK(mem[3] == d && mem[5] == d && mem[4] == 0,
                  "round %d: counters %d %d %d, expected %d", i, mem[3], mem[4], mem[5], d);
    }
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
    /* A fence epoch closed by NOSUCCEED: an operation now is refused. */
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    CHECK(MPI_Put(&val, 1, MPI_INT, right, 0, 1, MPI_INT, win) != MPI_SUCCESS,
          "a put after the last fence is refused");
    OK(MPI_Type_free(&vec));
    OK(MPI_Win_free(&win));
    int r = summary("rma_fence_mixed");
    MPI_Finalize();
    return r;
}
