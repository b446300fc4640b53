! Error handlers and mpif.h in fixed source form: MPI_ERRORS_RETURN and the error classes
! of bad input (a bad rank, a bad count), MPI_Error_class/MPI_Error_string, a user error
! handler written in Fortran (MPI_Comm_create_errhandler) called by a failing call and by
! MPI_Comm_call_errhandler, and a call the library does not implement (MPI_File_open)
! returning MPI_ERR_UNSUPPORTED_OPERATION as in C. Also a ring and a reduction through
! mpif.h. Prints "ok errhan:" on rank 0.
      SUBROUTINE MYHANDLER(COMM, CODE)
      INCLUDE 'mpif.h'
      INTEGER COMM, CODE, CALLS, LAST
      COMMON /HCOUNT/ CALLS, LAST
      IF (COMM .EQ. MPI_COMM_NULL) RETURN
      CALLS = CALLS + 1
      LAST = CODE
      END

      PROGRAM ERRHAN
      INCLUDE 'mpif.h'
      INTEGER RANK, NPROCS, IERR, ERRS, ICLASS, RLEN, EH, OLD
      INTEGER CALLS, LAST, FH, IBUF, IOUT
      INTEGER STATUS(MPI_STATUS_SIZE)
      CHARACTER*(MPI_MAX_ERROR_STRING) MSG
      EXTERNAL MYHANDLER
      COMMON /HCOUNT/ CALLS, LAST
      CALLS = 0
      LAST = 0
      ERRS = 0
      CALL MPI_INIT(IERR)
      CALL MPI_COMM_RANK(MPI_COMM_WORLD, RANK, IERR)
      CALL MPI_COMM_SIZE(MPI_COMM_WORLD, NPROCS, IERR)

! A ring and a sum through mpif.h.
      CALL MPI_SENDRECV(RANK, 1, MPI_INTEGER, MOD(RANK+1, NPROCS), 0,
     &     IBUF, 1, MPI_INTEGER, MOD(RANK-1+NPROCS, NPROCS), 0,
     &     MPI_COMM_WORLD, STATUS, IERR)
      IF (IBUF .NE. MOD(RANK-1+NPROCS, NPROCS))
     &     CALL FAILED('ring', ERRS)
      IF (STATUS(MPI_TAG) .NE. 0) CALL FAILED('status tag', ERRS)
      CALL MPI_ALLREDUCE(RANK, IOUT, 1, MPI_INTEGER, MPI_SUM,
     &     MPI_COMM_WORLD, IERR)
      IF (IOUT .NE. NPROCS*(NPROCS-1)/2) CALL FAILED('sum', ERRS)

! Errors returned.
      CALL MPI_COMM_GET_ERRHANDLER(MPI_COMM_WORLD, OLD, IERR)
      IF (OLD .NE. MPI_ERRORS_ARE_FATAL) CALL FAILED('default', ERRS)
      CALL MPI_COMM_SET_ERRHANDLER(MPI_COMM_WORLD, MPI_ERRORS_RETURN,
     &     IERR)
      CALL MPI_SEND(IBUF, 1, MPI_INTEGER, NPROCS, 0, MPI_COMM_WORLD,
     &     IERR)
      CALL MPI_ERROR_CLASS(IERR, ICLASS, IERR)
      IF (ICLASS .NE. MPI_ERR_RANK) CALL FAILED('bad rank', ERRS)
      CALL MPI_SEND(IBUF, -1, MPI_INTEGER, 0, 0, MPI_COMM_WORLD, IERR)
      IF (IERR .NE. MPI_ERR_COUNT) CALL FAILED('bad count', ERRS)
      CALL MPI_ERROR_STRING(IERR, MSG, RLEN, IERR)
      IF (RLEN .LE. 0 .OR. RLEN .GT. MPI_MAX_ERROR_STRING)
     &     CALL FAILED('error string length', ERRS)
      IF (INDEX(MSG, 'count') .EQ. 0) CALL FAILED('error string', ERRS)

! A Fortran error handler.
      CALL MPI_COMM_CREATE_ERRHANDLER(MYHANDLER, EH, IERR)
      CALL MPI_COMM_SET_ERRHANDLER(MPI_COMM_WORLD, EH, IERR)
      CALL MPI_SEND(IBUF, 1, MPI_INTEGER, -7, 0, MPI_COMM_WORLD, IERR)
      IF (CALLS .NE. 1 .OR. LAST .NE. MPI_ERR_RANK)
     &     CALL FAILED('user handler', ERRS)
      CALL MPI_COMM_CALL_ERRHANDLER(MPI_COMM_WORLD, MPI_ERR_OTHER, IERR)
      IF (CALLS .NE. 2 .OR. LAST .NE. MPI_ERR_OTHER)
     &     CALL FAILED('call_errhandler', ERRS)
      CALL MPI_COMM_SET_ERRHANDLER(MPI_COMM_WORLD, MPI_ERRORS_RETURN,
     &     IERR)
      CALL MPI_ERRHANDLER_FREE(EH, IERR)
      IF (EH .NE. MPI_ERRHANDLER_NULL) CALL FAILED('eh free', ERRS)

! Not implemented: the same class as from C, through the same handler
! (rmca raises it on the call's communicator).
      CALL MPI_COMM_SET_ERRHANDLER(MPI_COMM_SELF, MPI_ERRORS_RETURN,
     &     IERR)
      CALL MPI_FILE_OPEN(MPI_COMM_SELF, 'x.dat', MPI_MODE_RDONLY,
     &     MPI_INFO_NULL, FH, IERR)
      IF (IERR .NE. MPI_ERR_UNSUPPORTED_OPERATION)
     &     CALL FAILED('file_open', ERRS)

      CALL MPI_ALLREDUCE(MPI_IN_PLACE, ERRS, 1, MPI_INTEGER, MPI_SUM,
     &     MPI_COMM_WORLD, IERR)
      IF (RANK .EQ. 0 .AND. ERRS .EQ. 0)
     &     PRINT '(A,I0,A)', 'ok errhan: ', NPROCS, ' ranks'
      CALL MPI_FINALIZE(IERR)
      IF (ERRS .NE. 0) STOP 1
      END

      SUBROUTINE FAILED(WHAT, ERRS)
      CHARACTER*(*) WHAT
      INTEGER ERRS
      PRINT *, 'FAILED ', WHAT
      ERRS = ERRS + 1
      END
