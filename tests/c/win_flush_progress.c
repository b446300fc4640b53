/* MPI's progress rule in a loop of MPI_Put/MPI_Win_flush alone on a created window
 * (osc-rdma: a put to a member of the node and its flush are one CMA call made by the flush,
 * with no progress pass of the runtime): rank 0 posts a receive of a rendezvous-sized
 * message, then spins on put+flush to rank 1, waiting for a flag rank 1 puts into rank 0's
 * window once its MPI_Send returned. The send completes only when rank 0's runtime matches
 * it, and rank 0 makes no other MPI call meanwhile: its flushes must progress
 * point-to-point traffic. Without that the loop gives up after its time bound and the job
 * fails (never hangs). */
#include "check.h"

#define BIG (1 << 20) /* above btl-shm's eager limit: a rendezvous */
#define SPIN_SECONDS 10.0

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int me, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int mem[4] = {0, 0, 0, 0};
    MPI_Win win;
    OK(MPI_Win_create(mem, sizeof mem, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    char *buf = malloc(BIG);
    CHECK(buf != NULL, "malloc");
    MPI_Barrier(MPI_COMM_WORLD);
    if (n >= 2 && me == 0) {
        MPI_Request r;
        OK(MPI_Irecv(buf, BIG, MPI_CHAR, 1, 7, MPI_COMM_WORLD, &r));
        double until = MPI_Wtime() + SPIN_SECONDS;
        long spins = 0;
        int seen = 0;
        OK(MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win));
        while (!seen && MPI_Wtime() < until) {
            int v = (int)spins;
            POLL(MPI_Put(&v, 1, MPI_INT, 1, 1, 1, MPI_INT, win));
            POLL(MPI_Win_flush(1, win));
            seen = ((volatile int *)mem)[0];
            spins++;
        }
        OK(MPI_Win_unlock(1, win));
        CHECK(seen, "no flag after %ld put/flush pairs in %.0f s: the flushes did not "
                    "progress the rendezvous", spins, SPIN_SECONDS);
        if (!seen) MPI_Abort(MPI_COMM_WORLD, 3); /* rank 1 waits in MPI_Send forever */
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        CHECK(buf[0] == 1 && buf[BIG - 1] == 2, "payload %d..%d", buf[0], buf[BIG - 1]);
    } else if (me == 1) {
        memset(buf, 0, BIG);
        buf[0] = 1;
        buf[BIG - 1] = 2;
        OK(MPI_Send(buf, BIG, MPI_CHAR, 0, 7, MPI_COMM_WORLD));
        int one = 1;
        OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
        OK(MPI_Put(&one, 1, MPI_INT, 0, 0, 1, MPI_INT, win));
        OK(MPI_Win_unlock(0, win));
    }
    free(buf);
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_Win_free(&win));
    int rc = summary("win_flush_progress");
    MPI_Finalize();
    return rc;
}
