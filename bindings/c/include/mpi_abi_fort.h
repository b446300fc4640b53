/* mpi_abi_fort.h: what C code mixed with Fortran needs of rmca's MPI (crate rmca-mpifort,
 * bindings/fortran; this file belongs to it).
 *
 * The MPI 5.0 standard ABI's mpi.h leaves out the C side of the Fortran interface: MPI_Fint,
 * MPI_F08_status, the MPI_<Handle>_c2f/_f2c and MPI_Status_* conversions and the Fortran
 * status constants (C code that only wants an integer for a handle has MPI_<Handle>_toint /
 * _fromint). As MPICH does in its ABI build, they are declared here and defined by the Fortran
 * library, libmpifort.so, not by libmpi.so: a C program that includes this header links
 * -lmpifort before -lmpi (mpifort does; mpicc -mpi-fortran does, and also includes this header
 * in every file, for code that includes mpi.h only, as C code mixed with Fortran has always
 * done). MPI_Fint is gfortran's default INTEGER, as in libmpifort's build. Every function is
 * exported under its MPI_ and its PMPI_ name; tests/tests/fortran.rs checks that this header
 * declares exactly the C functions and variables libmpifort exports.
 */
#ifndef RMCA_MPI_ABI_FORT_H
#define RMCA_MPI_ABI_FORT_H

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A Fortran default INTEGER (gfortran: 4 bytes); a Fortran handle of `use mpi` and mpif.h,
 * and each element of a Fortran status (INTEGER STATUS(MPI_STATUS_SIZE)). */
typedef int MPI_Fint;

/* A `use mpi_f08` TYPE(MPI_Status), laid out as MPI_Status (MPI_F_STATUS_SIZE integers; the
 * public fields at MPI_F_SOURCE, MPI_F_TAG, MPI_F_ERROR, as in mpi.h). */
typedef struct {
    MPI_Fint MPI_SOURCE;
    MPI_Fint MPI_TAG;
    MPI_Fint MPI_ERROR;
    MPI_Fint MPI_internal[5];
} MPI_F08_status;

/* The Fortran MPI_STATUS_IGNORE and MPI_STATUSES_IGNORE as C sees them: the addresses the
 * Fortran interface recognises (its common blocks), to pass where a Fortran routine takes a
 * status. Not valid arguments of MPI_Status_f2c / f082c (they return MPI_ERR_ARG). */
extern MPI_Fint *MPI_F_STATUS_IGNORE;
extern MPI_Fint *MPI_F_STATUSES_IGNORE;
extern MPI_F08_status *MPI_F08_STATUS_IGNORE;
extern MPI_F08_status *MPI_F08_STATUSES_IGNORE;

/* Status conversions: MPI_SUCCESS, or MPI_ERR_ARG for a null pointer, MPI_STATUS_IGNORE or a
 * Fortran status-ignore constant (they may be called before MPI_Init). */
int MPI_Status_c2f(const MPI_Status *c_status, MPI_Fint *f_status);
int MPI_Status_f2c(const MPI_Fint *f_status, MPI_Status *c_status);
int MPI_Status_c2f08(const MPI_Status *c_status, MPI_F08_status *f08_status);
int MPI_Status_f082c(const MPI_F08_status *f08_status, MPI_Status *c_status);
int MPI_Status_f2f08(const MPI_Fint *f_status, MPI_F08_status *f08_status);
int MPI_Status_f082f(const MPI_F08_status *f08_status, MPI_Fint *f_status);

/* Handle conversions: the same integers as MPI_<Handle>_toint / _fromint. */
MPI_Fint MPI_Comm_c2f(MPI_Comm comm);
MPI_Comm MPI_Comm_f2c(MPI_Fint comm);
MPI_Fint MPI_Errhandler_c2f(MPI_Errhandler errhandler);
MPI_Errhandler MPI_Errhandler_f2c(MPI_Fint errhandler);
MPI_Fint MPI_File_c2f(MPI_File file);
MPI_File MPI_File_f2c(MPI_Fint file);
MPI_Fint MPI_Group_c2f(MPI_Group group);
MPI_Group MPI_Group_f2c(MPI_Fint group);
MPI_Fint MPI_Info_c2f(MPI_Info info);
MPI_Info MPI_Info_f2c(MPI_Fint info);
MPI_Fint MPI_Message_c2f(MPI_Message message);
MPI_Message MPI_Message_f2c(MPI_Fint message);
MPI_Fint MPI_Op_c2f(MPI_Op op);
MPI_Op MPI_Op_f2c(MPI_Fint op);
MPI_Fint MPI_Request_c2f(MPI_Request request);
MPI_Request MPI_Request_f2c(MPI_Fint request);
MPI_Fint MPI_Session_c2f(MPI_Session session);
MPI_Session MPI_Session_f2c(MPI_Fint session);
MPI_Fint MPI_Type_c2f(MPI_Datatype datatype);
MPI_Datatype MPI_Type_f2c(MPI_Fint datatype);
MPI_Fint MPI_Win_c2f(MPI_Win win);
MPI_Win MPI_Win_f2c(MPI_Fint win);

/* The profiling interface's names of the same functions. */
int PMPI_Status_c2f(const MPI_Status *c_status, MPI_Fint *f_status);
int PMPI_Status_f2c(const MPI_Fint *f_status, MPI_Status *c_status);
int PMPI_Status_c2f08(const MPI_Status *c_status, MPI_F08_status *f08_status);
int PMPI_Status_f082c(const MPI_F08_status *f08_status, MPI_Status *c_status);
int PMPI_Status_f2f08(const MPI_Fint *f_status, MPI_F08_status *f08_status);
int PMPI_Status_f082f(const MPI_F08_status *f08_status, MPI_Fint *f_status);
MPI_Fint PMPI_Comm_c2f(MPI_Comm comm);
MPI_Comm PMPI_Comm_f2c(MPI_Fint comm);
MPI_Fint PMPI_Errhandler_c2f(MPI_Errhandler errhandler);
MPI_Errhandler PMPI_Errhandler_f2c(MPI_Fint errhandler);
MPI_Fint PMPI_File_c2f(MPI_File file);
MPI_File PMPI_File_f2c(MPI_Fint file);
MPI_Fint PMPI_Group_c2f(MPI_Group group);
MPI_Group PMPI_Group_f2c(MPI_Fint group);
MPI_Fint PMPI_Info_c2f(MPI_Info info);
MPI_Info PMPI_Info_f2c(MPI_Fint info);
MPI_Fint PMPI_Message_c2f(MPI_Message message);
MPI_Message PMPI_Message_f2c(MPI_Fint message);
MPI_Fint PMPI_Op_c2f(MPI_Op op);
MPI_Op PMPI_Op_f2c(MPI_Fint op);
MPI_Fint PMPI_Request_c2f(MPI_Request request);
MPI_Request PMPI_Request_f2c(MPI_Fint request);
MPI_Fint PMPI_Session_c2f(MPI_Session session);
MPI_Session PMPI_Session_f2c(MPI_Fint session);
MPI_Fint PMPI_Type_c2f(MPI_Datatype datatype);
MPI_Datatype PMPI_Type_f2c(MPI_Fint datatype);
MPI_Fint PMPI_Win_c2f(MPI_Win win);
MPI_Win PMPI_Win_f2c(MPI_Fint win);

#ifdef __cplusplus
}
#endif

#endif /* RMCA_MPI_ABI_FORT_H */
