/* CHECK for the worker threads of the threaded C tests: atomic counters, added to check.h's
 * by tcheck_merge() before the summary. The program defines `me`, its rank in the world. */
#ifndef RMCA_C_TEST_TCHECK_H
#define RMCA_C_TEST_TCHECK_H

#include <stdatomic.h>

#include "check.h"

static atomic_int t_failed, t_run;

#define TCHECK(cond, ...)                                                                 \
    do {                                                                                  \
        atomic_fetch_add(&t_run, 1);                                                      \
        if (!(cond)) {                                                                    \
            atomic_fetch_add(&t_failed, 1);                                               \
            fprintf(stderr, "FAIL rank %d %s:%d: %s: ", me, __FILE__, __LINE__, #cond);   \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fprintf(stderr, "\n");                                                        \
        }                                                                                 \
    } while (0)

/* The threads' checks counted into check.h's (once every thread was joined). */
static void tcheck_merge(void) {
    checks_run += atomic_load(&t_run);
    checks_failed += atomic_load(&t_failed);
}

#endif
