/* What the Fortran wrappers share (libmpifort): the Fortran integer, the special addresses
 * of the Fortran interface and the string conversions. */
#ifndef RMCAF_H
#define RMCAF_H

#include <mpi.h>
/* MPI_Fint, MPI_F08_status and the C conversions, as C code mixed with Fortran sees them:
 * runtime.c's definitions are compiled against these declarations. */
#include <mpi_abi_fort.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* MPI_Fint (mpi_abi_fort.h) is gfortran's default INTEGER: 4 bytes; a LOGICAL is as large,
 * .TRUE. is 1. */

/* Handle arrays up to this length are translated on the stack. */
#define RMCAF_STACK 16

/* The special addresses: Fortran common blocks, one copy in the process whichever of mpif.h,
 * `use mpi` or `use mpi_f08` declared them. /rmcaf_buf/ is MPI_BOTTOM, MPI_IN_PLACE,
 * MPI_BUFFER_AUTOMATIC (one INTEGER each), /rmcaf_status/ MPI_STATUS_IGNORE and
 * MPI_STATUSES_IGNORE (one status each): one range check per argument on a wrapper's path. */
extern MPI_Fint rmcaf_buf_[3];
extern MPI_Fint rmcaf_status_[16];
#define RMCAF_STATUS_IGNORE (&rmcaf_status_[0])
#define RMCAF_STATUSES_IGNORE (&rmcaf_status_[8])
extern MPI_Fint rmcaf_errcodes_ignore_[1], rmcaf_unweighted_[1], rmcaf_weights_empty_[1];
extern char rmcaf_argv_null_[1], rmcaf_argvs_null_[1];

/* Whether p lies in the n bytes at block (an unsigned difference: one compare). */
#define RMCAF_IN(p, block, n) ((uintptr_t)(p) - (uintptr_t)(block) < (uintptr_t)(n))

static inline void *rmcaf_buf(void *p)
{
    if (__builtin_expect(RMCAF_IN(p, rmcaf_buf_, sizeof rmcaf_buf_), 0)) {
        static void *const special[3] = {MPI_BOTTOM, MPI_IN_PLACE, MPI_BUFFER_AUTOMATIC};
        return special[((uintptr_t)p - (uintptr_t)rmcaf_buf_) / sizeof(MPI_Fint)];
    }
    return p;
}
#define RMCAF_BUF(p) rmcaf_buf((void *)(p))
#define RMCAF_STATUS(p) \
    (RMCAF_IN(p, rmcaf_status_, sizeof rmcaf_status_) ? MPI_STATUS_IGNORE : (MPI_Status *)(p))
#define RMCAF_STATUSES(p) \
    (RMCAF_IN(p, rmcaf_status_, sizeof rmcaf_status_) ? MPI_STATUSES_IGNORE : (MPI_Status *)(p))
#define RMCAF_WEIGHTS(p) \
    ((p) == rmcaf_unweighted_ ? MPI_UNWEIGHTED : (p) == rmcaf_weights_empty_ ? MPI_WEIGHTS_EMPTY : (p))
#define RMCAF_ERRCODES(p) ((p) == rmcaf_errcodes_ignore_ ? MPI_ERRCODES_IGNORE : (p))

/* rmca's handles other than requests are their own integers (small values below 2^31:
 * bindings/c/src/ffi/handles.rs), so a Fortran handle converts without a call into the
 * library (each call there checks the calling thread: 3 calls per MPI_SEND doubled the
 * cost of the Fortran layer). Requests carry a generation above bit 32 and go through
 * MPI_Request_fromint/toint. MPI_INIT checks the equality on the predefined handles. */
#define RMCAF_F2C(Ctype, f) ((Ctype)(intptr_t)(f))
#define RMCAF_C2F(h) ((MPI_Fint)(intptr_t)(h))
#define RMCAF_F2C_COMM(f) RMCAF_F2C(MPI_Comm, f)
#define RMCAF_F2C_DATATYPE(f) RMCAF_F2C(MPI_Datatype, f)
#define RMCAF_F2C_GROUP(f) RMCAF_F2C(MPI_Group, f)
#define RMCAF_F2C_WIN(f) RMCAF_F2C(MPI_Win, f)
#define RMCAF_F2C_FILE(f) RMCAF_F2C(MPI_File, f)
#define RMCAF_F2C_SESSION(f) RMCAF_F2C(MPI_Session, f)
#define RMCAF_F2C_MESSAGE(f) RMCAF_F2C(MPI_Message, f)
#define RMCAF_F2C_INFO(f) RMCAF_F2C(MPI_Info, f)
#define RMCAF_F2C_ERRHANDLER(f) RMCAF_F2C(MPI_Errhandler, f)
#define RMCAF_F2C_OP(f) RMCAF_F2C(MPI_Op, f)

/* The end of a wrapper with nothing to do after its C call: without IERROR (absent from an
 * mpi_f08 call, a null pointer) the call is in tail position, so the compiler makes it a
 * jump and the C function returns to the program directly. */
#define RMCAF_RETURN(ierr, call)   \
    do {                           \
        if ((ierr) == NULL) {      \
            (void)(call);          \
            return;                \
        }                          \
        *(ierr) = (call);          \
    } while (0)

/* One more exported name for a wrapper (mpi_x_, pmpi_x_, mpi_x_f08_ ...). */
#define RMCAF_ALIAS(name, target) \
    extern __typeof__(target) name __attribute__((alias(#target), visibility("default")));

/* A Fortran string argument as a C string (trailing blanks removed; malloc'ed). */
char *rmcaf_str_in(const char *f, size_t len);
/* A C buffer for a string the library writes, large enough for any of its strings. */
char *rmcaf_str_tmp(size_t len);
/* Copy a C string into a Fortran one, blank-padded (truncated to its length). */
void rmcaf_str_out(char *f, size_t len, const char *c);
/* How many datatypes an alltoallw-shaped call reads: 0 (remote) size, 1 out-degree,
 * 2 in-degree of the communicator's topology. */
int rmcaf_peer_count(MPI_Comm comm, int which);

#endif
