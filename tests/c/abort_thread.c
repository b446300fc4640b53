/* MPI_Abort from a thread other than the main one while the main thread waits in MPI_Recv
 * for a message that never comes: the job must end with the abort's code, whatever the
 * thread level. argv[1]: "funneled" (the aborting thread is one the level does not let into
 * MPI) or "multiple"; argv[2]: the error code. Every rank's main thread blocks; world rank
 * 0's second thread aborts. Reaching the end prints "MPI_Abort returned" or "recv returned",
 * which the test refuses. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int code;

static void *aborter(void *arg) {
    (void)arg;
    /* Let the main threads block in their receives first. */
    struct timespec pause = {0, 300 * 1000 * 1000};
    nanosleep(&pause, NULL);
    MPI_Abort(MPI_COMM_WORLD, code);
    printf("MPI_Abort returned\n");
    fflush(stdout);
    return NULL;
}

int main(int argc, char **argv) {
    int want = argc > 1 && strcmp(argv[1], "multiple") == 0 ? MPI_THREAD_MULTIPLE
                                                              : MPI_THREAD_FUNNELED;
    code = argc > 2 ? atoi(argv[2]) : 7;
    int provided = -1, me = -1, x = 0;
    MPI_Init_thread(&argc, &argv, want, &provided);
    if (provided < want) {
        printf("level %d provided, %d asked\n", provided, want);
        MPI_Finalize();
        return 2;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    pthread_t t;
    if (me == 0 && pthread_create(&t, NULL, aborter, NULL) != 0) return 3;
    MPI_Recv(&x, 1, MPI_INT, MPI_ANY_SOURCE, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    printf("recv returned on rank %d\n", me);
    MPI_Finalize();
    return 0;
}
