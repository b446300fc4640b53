/* Self-checking helpers of the C test programs: CHECK counts failures and prints each one
 * with its line; SUMMARY prints "ok <area>: N checks" on rank 0 (or the failures) and is the
 * program's exit code. */
#ifndef RMCA_C_TEST_CHECK_H
#define RMCA_C_TEST_CHECK_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int checks_run, checks_failed;

#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        checks_run++;                                                                 \
        if (!(cond)) {                                                                \
            int r_ = -1;                                                              \
            MPI_Comm_rank(MPI_COMM_WORLD, &r_);                                       \
            checks_failed++;                                                          \
            fprintf(stderr, "FAIL rank %d %s:%d: %s: ", r_, __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                             \
            fprintf(stderr, "\n");                                                    \
        }                                                                             \
    } while (0)

/* An MPI call that must succeed. */
#define OK(call) CHECK((call) == MPI_SUCCESS, "%s", #call)

/* An MPI call in a polling loop: counted as a check only when it fails. */
#define POLL(call)                                                    \
    do {                                                              \
        if ((call) != MPI_SUCCESS) CHECK(0, "%s failed", #call);      \
    } while (0)

/* Every rank's failures summed; rank 0 prints the verdict; the exit code. */
static int summary(const char *area) {
    int failed = 0, me = 0;
    MPI_Allreduce(&checks_failed, &failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (me == 0) {
        if (failed == 0)
            printf("ok %s: %d checks per rank\n", area, checks_run);
        else
            printf("FAILED %s: %d failed checks\n", area, failed);
        fflush(stdout);
    }
    return failed == 0 ? 0 : 1;
}

#endif
