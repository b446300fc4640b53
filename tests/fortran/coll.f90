! Collectives through `use mpi`: bcast, gather/scatter/allgather/alltoall, and reductions on
! the Fortran types: MPI_SUM/PROD/MAX/MIN on INTEGER, REAL, DOUBLE PRECISION, INTEGER8;
! MPI_SUM and MPI_PROD on COMPLEX and DOUBLE COMPLEX; MPI_LAND/LOR/LXOR on LOGICAL;
! MPI_MAXLOC/MINLOC on MPI_2INTEGER and MPI_2DOUBLE_PRECISION; MPI_IN_PLACE; a user
! operation (MPI_Op_create with a Fortran subroutine). Prints "ok coll:" on rank 0.
module coll_ops
  implicit none
contains
  ! inout(i) = 2 * in(i) + inout(i), on INTEGERs: not commutative.
  subroutine twice_plus(in, inout, len, datatype)
    integer, intent(in) :: len, datatype
    integer, intent(in) :: in(len)
    integer, intent(inout) :: inout(len)
    integer :: i
    if (datatype < 0) return
    do i = 1, len
      inout(i) = 2 * in(i) + inout(i)
    end do
  end subroutine
end module coll_ops

program coll
  use mpi
  use coll_ops
  implicit none
  integer :: rank, size, ierr, i, r, errors, root, op, expect
  integer :: ivec(4), iout(4), iall(64), iscat(2)
  real :: rv(2), rout(2)
  double precision :: dv(2), dout(2)
  integer(kind=8) :: lv, lout
  complex :: cv(2), cout(2), cexp(2)
  double complex :: zv, zout, zexp
  logical :: lg(3), lgout(3)
  integer :: pair(2), pairout(2)
  double precision :: dpair(2), dpairout(2)

  errors = 0
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, size, ierr)

  ! Bcast from the last rank.
  root = size - 1
  ivec = 0
  if (rank == root) ivec = [4, 3, 2, 1]
  call MPI_Bcast(ivec, 4, MPI_INTEGER, root, MPI_COMM_WORLD, ierr)
  if (any(ivec /= [4, 3, 2, 1])) call fail('bcast')

  ! Gather, scatter, allgather, alltoall.
  call MPI_Gather([rank, -rank], 2, MPI_INTEGER, iall, 2, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
  if (rank == 0) then
    do r = 0, size - 1
      if (iall(2 * r + 1) /= r .or. iall(2 * r + 2) /= -r) call fail('gather')
    end do
  end if
  if (rank == 0) iall(1:2 * size) = [(i, i = 1, 2 * size)]
  call MPI_Scatter(iall, 2, MPI_INTEGER, iscat, 2, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
  if (any(iscat /= [2 * rank + 1, 2 * rank + 2])) call fail('scatter')
  call MPI_Allgather(rank * 10, 1, MPI_INTEGER, iall, 1, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  if (any(iall(1:size) /= [(10 * r, r = 0, size - 1)])) call fail('allgather')
  iall(1:size) = [(100 * rank + r, r = 0, size - 1)]
  call MPI_Alltoall(MPI_IN_PLACE, 1, MPI_INTEGER, iall, 1, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  if (any(iall(1:size) /= [(100 * r + rank, r = 0, size - 1)])) call fail('alltoall in place')

  ! Arithmetic reductions.
  ivec = [rank, 1, -rank, rank + 2]
  call MPI_Allreduce(ivec, iout, 4, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (any(iout /= [size * (size - 1) / 2, size, -size * (size - 1) / 2, &
                   size * (size - 1) / 2 + 2 * size])) call fail('integer sum')
  call MPI_Reduce(ivec, iout, 4, MPI_INTEGER, MPI_MAX, 0, MPI_COMM_WORLD, ierr)
  if (rank == 0 .and. any(iout /= [size - 1, 1, 0, size + 1])) call fail('integer max')
  rv = [real(rank) + 0.5, -1.0]
  call MPI_Allreduce(rv, rout, 2, MPI_REAL, MPI_MIN, MPI_COMM_WORLD, ierr)
  if (any(rout /= [0.5, -1.0])) call fail('real min')
  dv = [2.0d0, dble(rank + 1)]
  call MPI_Allreduce(dv, dout, 2, MPI_DOUBLE_PRECISION, MPI_PROD, MPI_COMM_WORLD, ierr)
  if (dout(1) /= 2.0d0 ** size .or. dout(2) /= product([(dble(r), r = 1, size)])) &
    call fail('double prod')
  lv = int(rank, 8) * 3000000000_8
  call MPI_Allreduce(lv, lout, 1, MPI_INTEGER8, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (lout /= 3000000000_8 * (size * (size - 1) / 2)) call fail('integer8 sum')

  ! Complex sums and products.
  cv = [cmplx(rank, 1), cmplx(0, 1)]
  call MPI_Allreduce(cv, cout, 2, MPI_COMPLEX, MPI_SUM, MPI_COMM_WORLD, ierr)
  cexp = [cmplx(size * (size - 1) / 2, size), cmplx(0, size)]
  if (any(cout /= cexp)) call fail('complex sum')
  call MPI_Allreduce(cv(2), cout(2), 1, MPI_COMPLEX, MPI_PROD, MPI_COMM_WORLD, ierr)
  if (cout(2) /= cmplx(0, 1) ** size) call fail('complex prod')
  zv = dcmplx(1.0d0, dble(rank))
  call MPI_Allreduce(zv, zout, 1, MPI_DOUBLE_COMPLEX, MPI_PROD, MPI_COMM_WORLD, ierr)
  zexp = (1.0d0, 0.0d0)
  do r = 0, size - 1
    zexp = zexp * dcmplx(1.0d0, dble(r))
  end do
  if (abs(zout - zexp) > 1.0d-12 * abs(zexp)) call fail('double complex prod')

  ! Logical reductions on Fortran LOGICALs.
  lg = [.true., rank == 0, mod(rank, 2) == 1]
  call MPI_Allreduce(lg, lgout, 3, MPI_LOGICAL, MPI_LAND, MPI_COMM_WORLD, ierr)
  if (.not. lgout(1) .or. (lgout(2) .neqv. (size == 1)) .or. lgout(3)) call fail('logical and')
  call MPI_Allreduce(lg, lgout, 3, MPI_LOGICAL, MPI_LOR, MPI_COMM_WORLD, ierr)
  if (.not. lgout(1) .or. .not. lgout(2) .or. (lgout(3) .neqv. (size > 1))) &
    call fail('logical or')
  call MPI_Allreduce(lg, lgout, 3, MPI_LOGICAL, MPI_LXOR, MPI_COMM_WORLD, ierr)
  if ((lgout(1) .neqv. (mod(size, 2) == 1)) .or. .not. lgout(2) .or. &
      (lgout(3) .neqv. (mod(size / 2, 2) == 1))) call fail('logical xor')

  ! MAXLOC / MINLOC on pairs.
  pair = [mod(rank, 2) * 10, rank]
  call MPI_Allreduce(pair, pairout, 1, MPI_2INTEGER, MPI_MAXLOC, MPI_COMM_WORLD, ierr)
  expect = merge(1, 0, size > 1)
  if (pairout(1) /= expect * 10 .or. pairout(2) /= expect) call fail('maxloc 2integer')
  dpair = [-dble(rank), dble(rank)]
  call MPI_Allreduce(dpair, dpairout, 1, MPI_2DOUBLE_PRECISION, MPI_MINLOC, MPI_COMM_WORLD, ierr)
  if (dpairout(1) /= -dble(size - 1) .or. dpairout(2) /= dble(size - 1)) &
    call fail('minloc 2double_precision')

  ! In place, and a user operation combined in rank order.
  iout(1) = rank + 1
  call MPI_Allreduce(MPI_IN_PLACE, iout, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (iout(1) /= size * (size + 1) / 2) call fail('allreduce in place')
  call MPI_Op_create(twice_plus, .false., op, ierr)
  call check(ierr, 'op_create')
  call MPI_Reduce([1], iout, 1, MPI_INTEGER, op, 0, MPI_COMM_WORLD, ierr)
  ! ((1*2 + 1)*2 + 1)...: rank order gives 2^size - 1.
  if (rank == 0 .and. iout(1) /= 2 ** size - 1) call fail('user op')
  call MPI_Op_free(op, ierr)
  if (op /= MPI_OP_NULL) call fail('op_free')
  call MPI_Scan(1, iout, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (iout(1) /= rank + 1) call fail('scan')

  call MPI_Allreduce(MPI_IN_PLACE, errors, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0 .and. errors == 0) print '(a,i0,a)', 'ok coll: ', size, ' ranks'
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
end program coll
