/* Fence epochs from several threads at MPI_THREAD_MULTIPLE, each thread on a window of its
 * own (as MPICH's threads/rma/multifence): every rank's thread t puts its stamp into the
 * next rank's window t between two fences and reads what the previous rank put. A fence
 * waits for the other ranks' thread t; it must let its own rank's other threads call MPI
 * meanwhile, or each rank's waiting fence keeps out the thread another rank waits for.
 * Windows from MPI_Win_allocate (osc-sm) and MPI_Win_create (osc-rdma). */
#include <pthread.h>

#include "check.h"

#define THREADS 4
#define ROUNDS 50
#define COUNT 256

static int rank, size;
static MPI_Win wins[THREADS];
static int *mem[THREADS];
static int bad[THREADS];

static void *worker(void *arg) {
    int t = *(int *)arg;
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int buf[COUNT];
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < COUNT; i++) buf[i] = r * 10000 + rank * 100 + t;
        if (MPI_Win_fence(0, wins[t]) != MPI_SUCCESS) bad[t]++;
        if (MPI_Put(buf, COUNT, MPI_INT, next, 0, COUNT, MPI_INT, wins[t]) != MPI_SUCCESS) bad[t]++;
        if (MPI_Win_fence(0, wins[t]) != MPI_SUCCESS) bad[t]++;
        int want = r * 10000 + prev * 100 + t;
        for (int i = 0; i < COUNT; i++)
            if (mem[t][i] != want) {
                bad[t]++;
                break;
            }
    }
    return NULL;
}

static void run(int created) {
    int *own[THREADS];
    for (int t = 0; t < THREADS; t++) {
        if (created) {
            OK(MPI_Alloc_mem(COUNT * sizeof(int), MPI_INFO_NULL, &own[t]));
            mem[t] = own[t];
            OK(MPI_Win_create(mem[t], COUNT * sizeof(int), sizeof(int), MPI_INFO_NULL,
                              MPI_COMM_WORLD, &wins[t]));
        } else {
            OK(MPI_Win_allocate(COUNT * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD,
                                &mem[t], &wins[t]));
        }
        bad[t] = 0;
    }
    pthread_t th[THREADS];
    int ids[THREADS];
    for (int t = 0; t < THREADS; t++) {
        ids[t] = t;
        CHECK(pthread_create(&th[t], NULL, worker, &ids[t]) == 0, "thread %d", t);
    }
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < THREADS; t++) {
        CHECK(bad[t] == 0, "%s window, thread %d: %d failed calls or wrong rounds",
              created ? "created" : "allocated", t, bad[t]);
        OK(MPI_Win_free(&wins[t]));
        if (created) OK(MPI_Free_mem(own[t]));
    }
}

int main(int argc, char **argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(provided == MPI_THREAD_MULTIPLE, "thread level %d", provided);
    run(0);
    run(1);
    int rc = summary("rma_fence_threads");
    MPI_Finalize();
    return rc;
}
