! The Fortran half of mixed.c (C main, Fortran subroutines, and back): C passes handles it
! converted with MPI_*_c2f and statuses converted with MPI_Status_c2f / c2f08; these routines
! use them through `use mpi` and `use mpi_f08` and hand back handles and statuses that C
! converts with MPI_*_f2c and MPI_Status_f2c / f082c. Each returns its number of failures in
! ERRS (and says what failed on standard error).

! `use mpi`: STATUS is the status of the C ring exchange (tag 7, one element of DTYPE from
! rank LEFT), converted by MPI_Status_c2f; it is checked, then overwritten by this routine's
! own exchange (tag 8). NEWCOMM (split by parity, key -rank) and NEWTYPE (vector of 3
! INTEGERs, stride 2) are made here for C. REQ is a receive C posted (tag 10, one INTEGER
! from LEFT into the C buffer); this routine sends its match and completes it.
subroutine rmca_mixed_f90(comm, dtype, left, right, status, newcomm, newtype, req, errs) &
    bind(C, name="rmca_mixed_f90")
  use, intrinsic :: iso_c_binding, only : c_int
  use mpi
  implicit none
  integer(c_int), intent(in) :: comm, dtype, left, right
  integer(c_int), intent(inout) :: status(MPI_STATUS_SIZE), req
  integer(c_int), intent(out) :: newcomm, newtype, errs
  integer :: rank, count, ierr, sendbuf(2), recvbuf(2), token
  integer :: wstatus(MPI_STATUS_SIZE)

  errs = 0
  call MPI_Comm_rank(comm, rank, ierr)
  if (status(MPI_SOURCE) /= left .or. status(MPI_TAG) /= 7) then
    write (0, *) 'f90: C status came as source', status(MPI_SOURCE), 'tag', status(MPI_TAG)
    errs = errs + 1
  end if
  call MPI_Get_count(status, dtype, count, ierr)
  if (ierr /= MPI_SUCCESS .or. count /= 1) then
    write (0, *) 'f90: MPI_Get_count on the C status with the C datatype:', count, ierr
    errs = errs + 1
  end if

  sendbuf = (/ rank, 1000 + rank /)
  recvbuf = -1
  call MPI_Sendrecv(sendbuf, 1, dtype, right, 8, recvbuf, 1, dtype, left, 8, comm, &
                    status, ierr)
  if (ierr /= MPI_SUCCESS .or. recvbuf(1) /= left .or. recvbuf(2) /= 1000 + left) then
    write (0, *) 'f90: ring exchange with the C communicator and datatype got', recvbuf
    errs = errs + 1
  end if

  call MPI_Comm_split(comm, mod(rank, 2), -rank, newcomm, ierr)
  call MPI_Type_vector(3, 1, 2, MPI_INTEGER, newtype, ierr)
  call MPI_Type_commit(newtype, ierr)

  token = 10 * rank + 3
  call MPI_Send(token, 1, MPI_INTEGER, right, 10, comm, ierr)
  call MPI_Wait(req, wstatus, ierr)
  if (ierr /= MPI_SUCCESS .or. wstatus(MPI_SOURCE) /= left .or. wstatus(MPI_TAG) /= 10) then
    write (0, *) 'f90: MPI_Wait on the C request:', ierr, wstatus(MPI_SOURCE), wstatus(MPI_TAG)
    errs = errs + 1
  end if
end subroutine rmca_mixed_f90

! `use mpi`: a receive (tag 11, one INTEGER from LEFT) into STATUS, which C passes as
! MPI_F_STATUS_IGNORE: the library must recognise it and leave it unwritten.
subroutine rmca_mixed_ignore(comm, left, right, status, errs) bind(C, name="rmca_mixed_ignore")
  use, intrinsic :: iso_c_binding, only : c_int
  use mpi
  implicit none
  integer(c_int), intent(in) :: comm, left, right
  integer(c_int), intent(inout) :: status(MPI_STATUS_SIZE)
  integer(c_int), intent(out) :: errs
  integer :: rank, got, ierr

  errs = 0
  call MPI_Comm_rank(comm, rank, ierr)
  got = -1
  call MPI_Sendrecv(rank, 1, MPI_INTEGER, right, 11, got, 1, MPI_INTEGER, left, 11, comm, &
                    status, ierr)
  if (ierr /= MPI_SUCCESS .or. got /= left) then
    write (0, *) 'ignore: exchange with MPI_F_STATUS_IGNORE got', got, ierr
    errs = errs + 1
  end if
end subroutine rmca_mixed_ignore

! `use mpi_f08`: COMM is TYPE(MPI_Comm) (C passes the MPI_Fint of MPI_Comm_c2f);
! CSTATUS is a C status of one MPI_INTEGER from LEFT with tag 12, converted by
! MPI_Status_c2f08; FSTATUS gets this routine's own exchange (tag 13, two MPI_INTEGERs), which
! C converts back with MPI_Status_f082c. IGNORED is MPI_F08_STATUS_IGNORE from C.
subroutine rmca_mixed_f08(comm, left, right, cstatus, fstatus, ignored, errs) &
    bind(C, name="rmca_mixed_f08")
  use, intrinsic :: iso_c_binding, only : c_int
  use mpi_f08
  implicit none
  type(MPI_Comm), intent(in) :: comm
  integer(c_int), intent(in) :: left, right
  type(MPI_Status), intent(in) :: cstatus
  type(MPI_Status), intent(out) :: fstatus
  type(MPI_Status), intent(inout) :: ignored
  integer(c_int), intent(out) :: errs
  integer :: rank, count, sendbuf(2), recvbuf(2)

  errs = 0
  call MPI_Comm_rank(comm, rank)
  if (cstatus%MPI_SOURCE /= left .or. cstatus%MPI_TAG /= 12) then
    write (0, *) 'f08: C status came as source', cstatus%MPI_SOURCE, 'tag', cstatus%MPI_TAG
    errs = errs + 1
  end if
  call MPI_Get_count(cstatus, MPI_INTEGER, count)
  if (count /= 1) then
    write (0, *) 'f08: MPI_Get_count on the C status:', count
    errs = errs + 1
  end if

  sendbuf = (/ rank, -rank /)
  recvbuf = 0
  call MPI_Sendrecv(sendbuf, 2, MPI_INTEGER, right, 13, recvbuf, 2, MPI_INTEGER, left, 13, &
                    comm, fstatus)
  if (recvbuf(1) /= left .or. recvbuf(2) /= -left) then
    write (0, *) 'f08: exchange got', recvbuf
    errs = errs + 1
  end if

  recvbuf = 0
  call MPI_Sendrecv(sendbuf, 1, MPI_INTEGER, right, 14, recvbuf, 1, MPI_INTEGER, left, 14, &
                    comm, ignored)
  if (recvbuf(1) /= left) then
    write (0, *) 'f08: exchange with MPI_F08_STATUS_IGNORE got', recvbuf(1)
    errs = errs + 1
  end if
end subroutine rmca_mixed_f08

! Attributes across the languages (MPI's rule: a value set from Fortran reads in C as a
! pointer to it; a value set from C reads in Fortran as the pointer's integer). On COMM: sets
! 5555 under CKEY (a keyval made in C), 42 with MPI_ATTR_PUT under CKEY1 (made in C), and
! -77 under FKEY, a keyval made here with MPI_COMM_DUP_FN (returned for C).
subroutine rmca_mixed_attr_set(comm, ckey, ckey1, fkey, errs) bind(C, name="rmca_mixed_attr_set")
  use, intrinsic :: iso_c_binding, only : c_int
  use mpi
  implicit none
  integer(c_int), intent(in) :: comm, ckey, ckey1
  integer(c_int), intent(out) :: fkey, errs
  integer(kind=MPI_ADDRESS_KIND) :: extra, val
  integer :: ierr
  logical :: flag

  errs = 0
  extra = 0
  call MPI_Comm_set_attr(comm, ckey, 5555_MPI_ADDRESS_KIND, ierr)
  call MPI_Attr_put(comm, ckey1, 42, ierr)
  call MPI_Comm_create_keyval(MPI_COMM_DUP_FN, MPI_COMM_NULL_DELETE_FN, fkey, extra, ierr)
  call MPI_Comm_set_attr(comm, fkey, -77_MPI_ADDRESS_KIND, ierr)
  ! Read back from Fortran: the values themselves.
  call MPI_Comm_get_attr(comm, ckey, val, flag, ierr)
  if (.not. flag .or. val /= 5555) then
    write (0, *) 'attr: Fortran reads its own value as', val, flag
    errs = errs + 1
  end if
end subroutine rmca_mixed_attr_set

! Reads under KEY on COMM what C set there: the address C passed, EXPECTED.
subroutine rmca_mixed_attr_get(comm, key, expected, errs) bind(C, name="rmca_mixed_attr_get")
  use, intrinsic :: iso_c_binding, only : c_int, c_intptr_t
  use mpi
  implicit none
  integer(c_int), intent(in) :: comm, key
  integer(c_intptr_t), intent(in) :: expected
  integer(c_int), intent(out) :: errs
  integer(kind=MPI_ADDRESS_KIND) :: val
  integer :: ierr
  logical :: flag

  errs = 0
  call MPI_Comm_get_attr(comm, key, val, flag, ierr)
  if (.not. flag .or. val /= expected) then
    write (0, *) 'attr: a value set from C reads in Fortran as', val, 'not', expected
    errs = errs + 1
  end if
end subroutine rmca_mixed_attr_get
