/* Multi-threaded message rate (issue 30): each of T threads per rank has its own
 * duplicated communicator and runs windows of 64 MPI_Isend (rank 0) / MPI_Irecv (rank 1)
 * of 8 bytes, then a zero-byte acknowledgement back; the rate is messages per second per
 * rank, all threads together, timed on rank 0 from a barrier to the last thread's end.
 * Usage: mt_rate [threads=1] [windows=2000]; 2 ranks; MPI_THREAD_MULTIPLE. */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define WINDOW 64
#define SIZE 8

static int rank, windows;
static MPI_Comm comms[64];
static pthread_barrier_t start;

static void run(MPI_Comm comm, int n)
{
    char buf[WINDOW][SIZE];
    MPI_Request req[WINDOW];
    for (int w = 0; w < n; w++) {
        for (int i = 0; i < WINDOW; i++) {
            if (rank == 0)
                MPI_Isend(buf[i], SIZE, MPI_CHAR, 1, 1, comm, &req[i]);
            else
                MPI_Irecv(buf[i], SIZE, MPI_CHAR, 0, 1, comm, &req[i]);
        }
        MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
        if (rank == 0)
            MPI_Recv(NULL, 0, MPI_CHAR, 1, 2, comm, MPI_STATUS_IGNORE);
        else
            MPI_Send(NULL, 0, MPI_CHAR, 0, 2, comm);
    }
}

static void *worker(void *arg)
{
    MPI_Comm comm = comms[(long)arg];
    run(comm, windows / 10 + 1); /* warm-up */
    pthread_barrier_wait(&start);
    run(comm, windows);
    return NULL;
}

int main(int argc, char **argv)
{
    int provided, size;
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    windows = argc > 2 ? atoi(argv[2]) : 2000;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (provided != MPI_THREAD_MULTIPLE || size != 2 || threads < 1 || threads > 64 || windows < 1) {
        if (rank == 0)
            fprintf(stderr, "mt_rate: needs 2 ranks, MPI_THREAD_MULTIPLE (got %d), 1..64 threads\n",
                    provided);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (int t = 0; t < threads; t++)
        MPI_Comm_dup(MPI_COMM_WORLD, &comms[t]);
    pthread_t tid[64];
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    for (long t = 0; t < threads; t++)
        pthread_create(&tid[t], NULL, worker, (void *)t);
    /* The main thread joins the barrier after the workers' warm-up, then the timed part. */
    pthread_barrier_wait(&start);
    double t0 = MPI_Wtime();
    for (int t = 0; t < threads; t++)
        pthread_join(tid[t], NULL);
    double t1 = MPI_Wtime();
    if (rank == 0)
        printf("mt_rate threads %d windows %d rate %.0f msg/s\n", threads, windows,
               (double)threads * windows * WINDOW / (t1 - t0));
    for (int t = 0; t < threads; t++)
        MPI_Comm_free(&comms[t]);
    pthread_barrier_destroy(&start);
    MPI_Finalize();
    return 0;
}
