/* MPI's progress rule in a loop of MPI_Win_lock/MPI_Win_unlock alone: rank 0 posts a
 * receive of a rendezvous-sized message, then spins on lock/unlock of its own osc-sm window
 * (the uncontended lock's fast path), waiting for a flag rank 1 puts there once its MPI_Send
 * returned. The send completes only when rank 0's runtime matches it, and rank 0 makes no
 * other MPI call meanwhile: its lock/unlock calls must progress point-to-point traffic.
 * Without that the loop gives up after its time bound and the job fails (never hangs).
 * With the argument "create": an MPI_Win_create window (osc-rdma), rank 0 spinning on
 * lock, get and unlock of rank 1 (the lent path's lock, get and unlock), rank 1 setting the
 * flag in its own memory under lock_all. */
#include "check.h"

#define BIG (1 << 20) /* above btl-shm's eager limit: a rendezvous */
#define SPIN_SECONDS 10.0

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int me, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int create = argc > 1 && strcmp(argv[1], "create") == 0;
    int *flag = NULL, mine = 0;
    MPI_Win win;
    if (create) {
        flag = &mine;
        OK(MPI_Win_create(flag, sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    } else {
        OK(MPI_Win_allocate_shared(me == 0 ? sizeof(int) : 0, sizeof(int), MPI_INFO_NULL,
                                   MPI_COMM_WORLD, &flag, &win));
        if (me == 0) *flag = 0;
    }
    char *buf = malloc(BIG);
    CHECK(buf != NULL, "malloc");
    MPI_Barrier(MPI_COMM_WORLD);
    if (n >= 2 && me == 0) {
        MPI_Request r;
        OK(MPI_Irecv(buf, BIG, MPI_CHAR, 1, 7, MPI_COMM_WORLD, &r));
        double until = MPI_Wtime() + SPIN_SECONDS;
        long spins = 0;
        int seen = 0;
        while (!seen && MPI_Wtime() < until) {
            if (create) {
                POLL(MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win));
                POLL(MPI_Get(&seen, 1, MPI_INT, 1, 0, 1, MPI_INT, win));
                POLL(MPI_Win_unlock(1, win));
            } else {
                POLL(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
                seen = *(volatile int *)flag;
                POLL(MPI_Win_unlock(0, win));
            }
            spins++;
        }
        CHECK(seen, "no flag after %ld lock/unlock pairs in %.0f s: the lock calls did not "
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
        if (create) {
            /* Shared with rank 0's locks: an exclusive one could wait on its spinning. */
            OK(MPI_Win_lock_all(0, win));
            *(volatile int *)flag = 1;
            OK(MPI_Win_sync(win));
            OK(MPI_Win_unlock_all(win));
        } else {
            OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
            OK(MPI_Put(&one, 1, MPI_INT, 0, 0, 1, MPI_INT, win));
            OK(MPI_Win_unlock(0, win));
        }
    }
    free(buf);
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_Win_free(&win));
    int rc = summary("win_lock_progress");
    MPI_Finalize();
    return rc;
}
