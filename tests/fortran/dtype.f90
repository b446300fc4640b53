! Derived datatypes through `use mpi_f08`: a matrix column as MPI_Type_vector, a row block
! as MPI_Type_contiguous, a Fortran derived type described by MPI_Type_create_struct with
! MPI_Get_address and sent from MPI_BOTTOM, MPI_Type_size/get_extent, MPI_Sizeof,
! MPI_Type_create_f90_real/integer, MPI_Type_create_subarray in MPI_ORDER_FORTRAN,
! MPI_Pack/Unpack, optional ierror left out, TYPE(MPI_Status). Prints "ok dtype:" on rank 0.
program dtype
  use mpi_f08
  implicit none
  type particle
    integer :: id
    double precision :: pos(3)
    real :: mass
  end type particle
  integer, parameter :: n = 6
  integer :: rank, size, ierr, errors, i, j, sz, position, right, left, count
  double precision :: a(n, n), col(n), b(n, n)
  type(MPI_Datatype) :: column, block, ptype, rtype, f90r, f90i, sub
  type(MPI_Datatype) :: types(3)
  integer :: blens(3)
  integer(kind=MPI_ADDRESS_KIND) :: disps(3), base, lb, extent
  type(particle) :: p, q
  type(MPI_Status) :: st
  character(len=1) :: packed(256)
  integer :: ivals(3), iback(3)

  errors = 0
  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, size, ierr)
  right = mod(rank + 1, size)
  left = mod(rank - 1 + size, size)

  ! Column j of a is contiguous in Fortran; row i is strided by n.
  do j = 1, n
    do i = 1, n
      a(i, j) = rank * 1000 + i * 10 + j
    end do
  end do
  call MPI_Type_vector(n, 1, n, MPI_DOUBLE_PRECISION, column)
  call MPI_Type_commit(column)
  call MPI_Type_size(column, sz)
  if (sz /= 8 * n) call fail('vector size')
  call MPI_Type_get_extent(column, lb, extent)
  if (lb /= 0 .or. extent /= 8 * ((n - 1) * n + 1)) call fail('vector extent')
  ! Send row 2 (strided), receive it as a contiguous vector.
  call MPI_Sendrecv(a(2, 1), 1, column, right, 1, col, n, MPI_DOUBLE_PRECISION, left, 1, &
                    MPI_COMM_WORLD, st)
  do j = 1, n
    if (col(j) /= left * 1000 + 20 + j) call fail('vector row')
  end do
  if (st%MPI_SOURCE /= left .or. st%MPI_TAG /= 1) call fail('f08 status')
  call MPI_Get_count(st, MPI_DOUBLE_PRECISION, count)
  if (count /= n) call fail('get_count')
  call MPI_Type_free(column)
  if (column /= MPI_DATATYPE_NULL) call fail('type_free did not reset the handle')

  ! Three columns as one contiguous block.
  call MPI_Type_contiguous(3 * n, MPI_DOUBLE_PRECISION, block)
  call MPI_Type_commit(block)
  b = -1
  call MPI_Sendrecv(a(1, 2), 1, block, right, 2, b(1, 2), 1, block, left, 2, &
                    MPI_COMM_WORLD, MPI_STATUS_IGNORE)
  if (any(b(:, 2:4) /= a(:, 2:4) - (rank - left) * 1000) .or. any(b(:, 1) /= -1)) &
    call fail('contiguous block')
  call MPI_Type_free(block)

  ! A Fortran derived type: sent from MPI_BOTTOM with absolute addresses, received with the
  ! same layout relative to the variable.
  p%id = rank
  p%pos = [dble(rank), 2.5d0, -1.0d0]
  p%mass = 0.25 * rank
  call MPI_Get_address(p%id, disps(1))
  call MPI_Get_address(p%pos, disps(2))
  call MPI_Get_address(p%mass, disps(3))
  blens = [1, 3, 1]
  types = [MPI_INTEGER, MPI_DOUBLE_PRECISION, MPI_REAL]
  call MPI_Type_create_struct(3, blens, disps, types, ptype, ierr)
  call MPI_Type_commit(ptype)
  call MPI_Get_address(p, base)
  disps = disps - base
  call MPI_Type_create_struct(3, blens, disps, types, rtype)
  call MPI_Type_commit(rtype)
  q%id = -1
  call MPI_Sendrecv(MPI_BOTTOM, 1, ptype, right, 3, q, 1, rtype, left, 3, MPI_COMM_WORLD, st)
  if (q%id /= left .or. any(q%pos /= [dble(left), 2.5d0, -1.0d0]) .or. q%mass /= 0.25 * left) &
    call fail('struct from MPI_BOTTOM')
  call MPI_Type_free(ptype)
  call MPI_Type_free(rtype)

  ! A 2x3 block of a as a Fortran-order subarray.
  call MPI_Type_create_subarray(2, [n, n], [2, 3], [1, 2], MPI_ORDER_FORTRAN, &
                                MPI_DOUBLE_PRECISION, sub)
  call MPI_Type_commit(sub)
  call MPI_Sendrecv(a, 1, sub, right, 5, col, 6, MPI_DOUBLE_PRECISION, left, 5, &
                    MPI_COMM_WORLD, MPI_STATUS_IGNORE)
  if (any(col /= reshape(a(2:3, 3:5), [6]) - (rank - left) * 1000)) call fail('subarray')
  call MPI_Type_free(sub)

  ! MPI_Sizeof and the f90 parameterized types.
  call MPI_Sizeof(a, sz, ierr)
  if (sz /= 8 .or. ierr /= MPI_SUCCESS) call fail('sizeof double')
  call MPI_Sizeof(p%mass, sz)
  if (sz /= 4) call fail('sizeof real')
  call MPI_Type_create_f90_real(15, 300, f90r)
  call MPI_Type_size(f90r, sz)
  if (sz /= 8) call fail('f90_real(15,300) is not 8 bytes')
  call MPI_Type_create_f90_integer(9, f90i)
  call MPI_Type_size(f90i, sz)
  if (sz /= 4) call fail('f90_integer(9) is not 4 bytes')
  call MPI_Sendrecv(a(1, 1), 1, f90r, right, 6, col, 1, MPI_DOUBLE_PRECISION, left, 6, &
                    MPI_COMM_WORLD, MPI_STATUS_IGNORE)
  if (col(1) /= left * 1000 + 11) call fail('f90 real send')

  ! Pack and unpack.
  ivals = [rank, 7, -rank]
  position = 0
  call MPI_Pack(ivals, 3, MPI_INTEGER, packed, 256, position, MPI_COMM_WORLD)
  if (position /= 12) call fail('pack position')
  position = 0
  call MPI_Unpack(packed, 256, position, iback, 3, MPI_INTEGER, MPI_COMM_WORLD)
  if (any(iback /= ivals)) call fail('unpack')

  call MPI_Allreduce(MPI_IN_PLACE, errors, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
  if (rank == 0 .and. errors == 0) print '(a,i0,a)', 'ok dtype: ', size, ' ranks'
  call MPI_Finalize()
  if (errors /= 0) stop 1
contains
  subroutine fail(what)
    character(len=*), intent(in) :: what
    print '(a,i0,2a)', 'rank ', rank, ': FAILED ', what
    errors = errors + 1
  end subroutine
end program dtype
