! Point-to-point through `use mpi`: every Fortran datatype sent and received (INTEGER, REAL,
! DOUBLE PRECISION, COMPLEX, DOUBLE COMPLEX, LOGICAL, CHARACTER, INTEGERn, REALn), statuses
! as INTEGER arrays, MPI_STATUS_IGNORE, MPI_ANY_SOURCE, non-blocking requests completed by
! MPI_Waitall/Waitany (1-based index)/Testall, probes, MPI_Get_count, MPI_Sendrecv and
! MPI_PROC_NULL. Prints "ok p2p:" on rank 0.
program p2p
  use mpi
  use iso_c_binding, only: c_int, c_intptr_t
  implicit none
  integer :: rank, size, ierr, right, left, i, idx, count
  integer :: status(MPI_STATUS_SIZE), statuses(MPI_STATUS_SIZE, 4), reqs(4)
  integer :: ibuf(10), irecv(10)
  real :: rbuf(5), rrecv(5)
  double precision :: dbuf(3), drecv(3)
  complex :: cbuf(2), crecv(2)
  double complex :: zbuf(2), zrecv(2)
  logical :: lbuf(3), lrecv(3), flag
  character(len=16) :: sbuf, srecv
  integer(kind=8) :: i8buf(2), i8recv(2)
  integer(kind=2) :: i2buf(2), i2recv(2)
  real(kind=8) :: r8buf(2), r8recv(2)
  integer :: errors
  integer(c_int) :: ltrue, lfalse, lset
  integer(c_intptr_t) :: cinfo
  integer :: finfo, nkeys
  interface
    ! MPI 5.0's ABI calls, C only: what the Fortran layer told the C library at MPI_Init.
    integer(c_int) function abi_booleans(n, t, f, is_set) &
        bind(C, name='MPI_Abi_get_fortran_booleans')
      import :: c_int
      integer(c_int), value :: n
      integer(c_int) :: t, f, is_set
    end function
    integer(c_int) function abi_info(info) bind(C, name='MPI_Abi_get_fortran_info')
      import :: c_int, c_intptr_t
      integer(c_intptr_t) :: info
    end function
    integer(c_int) function info_toint(info) bind(C, name='MPI_Info_toint')
      import :: c_int, c_intptr_t
      integer(c_intptr_t), value :: info
    end function
  end interface

  errors = 0
  call MPI_Init(ierr)
  call check(ierr, 'init')
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, size, ierr)
  ! The C library knows this layer's LOGICAL (.TRUE. 1, .FALSE. 0, 4 bytes) and type sizes.
  if (abi_booleans(4_c_int, ltrue, lfalse, lset) /= MPI_SUCCESS) call fail('abi booleans')
  if (lset /= 1 .or. ltrue /= 1 .or. lfalse /= 0) call fail('abi booleans not registered')
  if (abi_info(cinfo) /= MPI_SUCCESS) call fail('abi info')
  finfo = info_toint(cinfo)
  if (finfo == MPI_INFO_NULL) then
    call fail('abi info not registered')
  else
    call MPI_Info_get_nkeys(finfo, nkeys, ierr)
    if (nkeys /= 4) call fail('abi info keys')
    call MPI_Info_free(finfo, ierr)
  end if
  right = mod(rank + 1, size)
  left = mod(rank - 1 + size, size)

  ! A ring of every type: send to the right, receive from the left.
  ibuf = [(rank * 100 + i, i = 1, 10)]
  rbuf = [(real(rank) + 0.5 * i, i = 1, 5)]
  dbuf = [(dble(rank) * 1.0d10 + i, i = 1, 3)]
  cbuf = [cmplx(rank, 1), cmplx(2, -rank)]
  zbuf = [dcmplx(rank, 1.5d0), dcmplx(-2.25d0, rank)]
  lbuf = [mod(rank, 2) == 0, .true., .false.]
  write (sbuf, '(a,i4.4)') 'from rank ', rank
  i8buf = [int(rank, 8) * 10000000000_8, -1_8]
  i2buf = [int(rank, 2), -7_2]
  r8buf = [dble(rank) / 3.0d0, 1.0d-300]

  call MPI_Irecv(irecv, 10, MPI_INTEGER, left, 1, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Irecv(rrecv, 5, MPI_REAL, left, 2, MPI_COMM_WORLD, reqs(2), ierr)
  call MPI_Irecv(drecv, 3, MPI_DOUBLE_PRECISION, left, 3, MPI_COMM_WORLD, reqs(3), ierr)
  call MPI_Irecv(crecv, 2, MPI_COMPLEX, MPI_ANY_SOURCE, 4, MPI_COMM_WORLD, reqs(4), ierr)
  call MPI_Send(ibuf, 10, MPI_INTEGER, right, 1, MPI_COMM_WORLD, ierr)
  call MPI_Send(rbuf, 5, MPI_REAL, right, 2, MPI_COMM_WORLD, ierr)
  call MPI_Send(dbuf, 3, MPI_DOUBLE_PRECISION, right, 3, MPI_COMM_WORLD, ierr)
  call MPI_Send(cbuf, 2, MPI_COMPLEX, right, 4, MPI_COMM_WORLD, ierr)
  call MPI_Waitall(4, reqs, statuses, ierr)
  call check(ierr, 'waitall')
  do i = 1, 4
    if (reqs(i) /= MPI_REQUEST_NULL) call fail('waitall left a request')
    if (statuses(MPI_SOURCE, i) /= left .or. statuses(MPI_TAG, i) /= i) &
      call fail('waitall statuses')
  end do
  if (any(irecv /= [(left * 100 + i, i = 1, 10)])) call fail('integer ring')
  if (any(rrecv /= [(real(left) + 0.5 * i, i = 1, 5)])) call fail('real ring')
  if (any(drecv /= [(dble(left) * 1.0d10 + i, i = 1, 3)])) call fail('double ring')
  if (any(crecv /= [cmplx(left, 1), cmplx(2, -left)])) call fail('complex ring')

  call MPI_Sendrecv(zbuf, 2, MPI_DOUBLE_COMPLEX, right, 5, zrecv, 2, MPI_DOUBLE_COMPLEX, &
                    left, 5, MPI_COMM_WORLD, status, ierr)
  if (any(zrecv /= [dcmplx(left, 1.5d0), dcmplx(-2.25d0, left)])) call fail('double complex')
  call MPI_Get_count(status, MPI_DOUBLE_COMPLEX, count, ierr)
  if (count /= 2) call fail('get_count double complex')
  call MPI_Sendrecv(lbuf, 3, MPI_LOGICAL, right, 6, lrecv, 3, MPI_LOGICAL, left, 6, &
                    MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
  if ((lrecv(1) .neqv. (mod(left, 2) == 0)) .or. .not. lrecv(2) .or. lrecv(3)) &
    call fail('logical')
  call MPI_Sendrecv(sbuf, len(sbuf), MPI_CHARACTER, right, 7, srecv, len(srecv), &
                    MPI_CHARACTER, left, 7, MPI_COMM_WORLD, status, ierr)
  write (sbuf, '(a,i4.4)') 'from rank ', left
  if (srecv /= sbuf) call fail('character')
  call MPI_Sendrecv(i8buf, 2, MPI_INTEGER8, right, 8, i8recv, 2, MPI_INTEGER8, left, 8, &
                    MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
  if (i8recv(1) /= int(left, 8) * 10000000000_8 .or. i8recv(2) /= -1_8) call fail('integer8')
  call MPI_Sendrecv(i2buf, 2, MPI_INTEGER2, right, 9, i2recv, 2, MPI_INTEGER2, left, 9, &
                    MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
  if (i2recv(1) /= int(left, 2) .or. i2recv(2) /= -7_2) call fail('integer2')
  call MPI_Sendrecv(r8buf, 2, MPI_REAL8, right, 10, r8recv, 2, MPI_REAL8, left, 10, &
                    MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
  if (r8recv(1) /= dble(left) / 3.0d0 .or. r8recv(2) /= 1.0d-300) call fail('real8')

  ! Waitany: the index is 1-based; the second request (MPI_PROC_NULL) completes first.
  call MPI_Irecv(ibuf, 1, MPI_INTEGER, MPI_PROC_NULL, 0, MPI_COMM_WORLD, reqs(2), ierr)
  call MPI_Irecv(irecv, 1, MPI_INTEGER, left, 11, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Waitany(2, reqs, idx, status, ierr)
  if (idx /= 2 .or. status(MPI_SOURCE) /= MPI_PROC_NULL) call fail('waitany index')
  ! Nobody sends tag 11 before every rank has seen its first completion.
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  call MPI_Send(rank, 1, MPI_INTEGER, right, 11, MPI_COMM_WORLD, ierr)
  call MPI_Waitany(2, reqs, idx, status, ierr)
  if (idx /= 1 .or. irecv(1) /= left) call fail('waitany second')
  call MPI_Waitany(2, reqs, idx, status, ierr)
  if (idx /= MPI_UNDEFINED) call fail('waitany on no active request')

  ! Probe, then receive what it saw; Iprobe/Testall with a LOGICAL flag.
  call MPI_Send(ibuf, 7, MPI_INTEGER, right, 12, MPI_COMM_WORLD, ierr)
  call MPI_Probe(MPI_ANY_SOURCE, 12, MPI_COMM_WORLD, status, ierr)
  call MPI_Get_count(status, MPI_INTEGER, count, ierr)
  if (count /= 7 .or. status(MPI_SOURCE) /= left) call fail('probe')
  call MPI_Recv(irecv, count, MPI_INTEGER, status(MPI_SOURCE), 12, MPI_COMM_WORLD, &
                MPI_STATUS_IGNORE, ierr)
  call MPI_Isend(rank, 1, MPI_INTEGER, right, 13, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Irecv(irecv, 1, MPI_INTEGER, left, 13, MPI_COMM_WORLD, reqs(2), ierr)
  flag = .false.
  do while (.not. flag)
    call MPI_Testall(2, reqs, flag, MPI_STATUSES_IGNORE, ierr)
  end do
  if (irecv(1) /= left) call fail('testall')
  call MPI_Iprobe(MPI_ANY_SOURCE, 99, MPI_COMM_WORLD, flag, status, ierr)
  if (flag) call fail('iprobe found a message nobody sent')

  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  ! The library recognised the status-ignore constants: nothing was written into them.
  if (any(MPI_STATUS_IGNORE /= 0) .or. any(MPI_STATUSES_IGNORE /= 0)) &
    call fail('a status was written into MPI_STATUS_IGNORE or MPI_STATUSES_IGNORE')
  call MPI_Allreduce(MPI_IN_PLACE, errors, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0 .and. errors == 0) print '(a,i0,a)', 'ok p2p: ', size, ' ranks'
  call MPI_Finalize(ierr)
  if (errors /= 0) stop 1
contains
  subroutine check(code, what)
    integer, intent(in) :: code
    character(len=*), intent(in) :: what
    if (code /= MPI_SUCCESS) call fail(what)
  end subroutine
  subroutine fail(what)
    character(len=*), intent(in) :: what
    print '(a,i0,2a)', 'rank ', rank, ': FAILED ', what
    errors = errors + 1
  end subroutine
end program p2p
