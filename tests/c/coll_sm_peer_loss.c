/* A member of a coll-sm communicator dies (SIGKILL) before or while the others are in one of
 * its collectives: the survivors must get an error through the communicator's error handler
 * (class MPI_ERR_PROC_ABORTED, a peer process failed), never hang. Run under rmca-run
 * --keep-going, so that the launcher lets the survivors finish.
 *
 * Usage: coll_sm_peer_loss barrier|allreduce|bcast|allgather|alltoall|reduce_scatter|gather|scatter|
 *        allreduce_user|reduce_user before|inside
 * (the _user forms reduce with an operation of MPI_Op_create, which coll-sm serves too)
 * The last rank is the victim (the root of the bcast and the scatter; rank 0 gathers). "before": it dies at once, the others
 * enter the collective whenever they get there; "inside": it dies 300 ms late, when the others
 * have long been waiting (asleep, in block mode). Each survivor prints
 * "rank R: <op> failed: class C, handler calls H, after M ms" and exits 0 without finalizing
 * (the job has a dead member). */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int handler_calls, handler_class = -1;

/* The communicator's error handler: records the class and lets the call return the code. */
static void on_error(MPI_Comm *comm, int *code, ...) {
    (void)comm;
    handler_calls++;
    MPI_Error_class(*code, &handler_class);
}

/* A user operation: elementwise sum of longs. */
static void lsum(void *invec, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    for (int i = 0; i < *len; i++) ((long *)inout)[i] += ((const long *)invec)[i];
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int me, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc != 3 || n < 2) {
        if (me == 0) fprintf(stderr, "usage: coll_sm_peer_loss barrier|allreduce|bcast|allgather|alltoall|reduce_scatter|gather|scatter before|inside (2+ ranks)\n");
        MPI_Finalize();
        return 2;
    }
    const char *op = argv[1];
    int inside = strcmp(argv[2], "inside") == 0;
    MPI_Errhandler eh;
    MPI_Comm_create_errhandler(on_error, &eh);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, eh);

    /* The segment is made and used: the failure below is coll-sm's, not its set-up's. */
    long in = me + 1, sum = 0;
    int rc = MPI_Barrier(MPI_COMM_WORLD);
    if (rc == MPI_SUCCESS) rc = MPI_Allreduce(&in, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS || sum != (long)n * (n + 1) / 2) {
        printf("rank %d: warm-up failed (rc %d, sum %ld)\n", me, rc, sum);
        return 1;
    }
    int victim = n - 1;
    if (me == victim) {
        fflush(stdout);
        if (inside) {
            struct timespec late = {0, 300 * 1000 * 1000};
            nanosleep(&late, NULL);
        }
        raise(SIGKILL);
    }
    double t0 = now_ms();
    char buf[64] = {0};
    long all[64] = {0}, each[64] = {0};
    if (strcmp(op, "barrier") == 0) {
        rc = MPI_Barrier(MPI_COMM_WORLD);
    } else if (strcmp(op, "allreduce") == 0) {
        rc = MPI_Allreduce(&in, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    } else if (strcmp(op, "allreduce_user") == 0) {
        MPI_Op uop;
        MPI_Op_create(lsum, 1, &uop);
        rc = MPI_Allreduce(&in, &sum, 1, MPI_LONG, uop, MPI_COMM_WORLD);
    } else if (strcmp(op, "reduce_user") == 0) {
        /* Rank 0 reduces: it waits for the victim's part. */
        MPI_Op uop;
        MPI_Op_create(lsum, 1, &uop);
        rc = MPI_Reduce(&in, &sum, 1, MPI_LONG, uop, 0, MPI_COMM_WORLD);
    } else if (strcmp(op, "allgather") == 0 && n <= 64) {
        rc = MPI_Allgather(&in, 1, MPI_LONG, all, 1, MPI_LONG, MPI_COMM_WORLD);
    } else if (strcmp(op, "alltoall") == 0 && n <= 64) {
        rc = MPI_Alltoall(each, 1, MPI_LONG, all, 1, MPI_LONG, MPI_COMM_WORLD);
    } else if (strcmp(op, "reduce_scatter") == 0 && n <= 64) {
        rc = MPI_Reduce_scatter_block(each, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    } else if (strcmp(op, "gather") == 0 && n <= 64) {
        /* Rank 0 gathers: it waits for the victim's block. */
        rc = MPI_Gather(&in, 1, MPI_LONG, all, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    } else if (strcmp(op, "scatter") == 0 && n <= 64) {
        /* The victim scatters: everyone waits for its blocks. */
        rc = MPI_Scatter(each, 1, MPI_LONG, &sum, 1, MPI_LONG, victim, MPI_COMM_WORLD);
    } else {
        rc = MPI_Bcast(buf, (int)sizeof buf, MPI_CHAR, victim, MPI_COMM_WORLD);
    }
    double ms = now_ms() - t0;
    int class = -1;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &class);
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (rc != MPI_SUCCESS) MPI_Error_string(rc, text, &len);
    printf("rank %d: %s failed: class %d, handler calls %d (class %d), after %.0f ms: %s\n", me,
           op, class, handler_calls, handler_class, ms, text);
    fflush(stdout);
    _exit(rc != MPI_SUCCESS && class == MPI_ERR_PROC_ABORTED && handler_calls == 1 ? 0 : 1);
}
