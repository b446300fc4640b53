/* What the Fortran wrappers share (libmpifort): the Fortran integer, the special addresses
 * of the Fortran interface and the string conversions. */
#ifndef RMCAF_H
#define RMCAF_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A default Fortran INTEGER (gfortran: 4 bytes; a LOGICAL is as large, .TRUE. is 1). */
typedef int MPI_Fint;

/* Handle arrays up to this length are translated on the stack. */
#define RMCAF_STACK 16

/* The special addresses: Fortran common blocks (/rmcaf_bottom/ ...), one copy in the
 * process whichever of mpif.h, `use mpi` or `use mpi_f08` declared them. */
extern MPI_Fint rmcaf_bottom_, rmcaf_in_place_, rmcaf_buffer_automatic_;
extern MPI_Fint rmcaf_status_ignore_[8], rmcaf_statuses_ignore_[8];
extern MPI_Fint rmcaf_errcodes_ignore_[1], rmcaf_unweighted_[1], rmcaf_weights_empty_[1];
extern char rmcaf_argv_null_[1], rmcaf_argvs_null_[1];

static inline void *rmcaf_buf(void *p)
{
    if (p == (void *)&rmcaf_bottom_) return MPI_BOTTOM;
    if (p == (void *)&rmcaf_in_place_) return MPI_IN_PLACE;
    if (p == (void *)&rmcaf_buffer_automatic_) return MPI_BUFFER_AUTOMATIC;
    return p;
}
#define RMCAF_BUF(p) rmcaf_buf((void *)(p))
#define RMCAF_STATUS(p) \
    ((p) == rmcaf_status_ignore_ || (p) == rmcaf_statuses_ignore_ ? MPI_STATUS_IGNORE : (MPI_Status *)(p))
#define RMCAF_STATUSES(p) \
    ((p) == rmcaf_statuses_ignore_ || (p) == rmcaf_status_ignore_ ? MPI_STATUSES_IGNORE : (MPI_Status *)(p))
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
