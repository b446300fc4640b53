! 8-byte ping-pong between ranks 0 and 1 through `use mpi_f08` (blocking MPI_Send/MPI_Recv,
! MPI_STATUS_IGNORE): prints the one-way latency in microseconds, then the time of one
! MPI_Send to MPI_PROC_NULL (the call's own cost, nothing moved) in nanoseconds. pingpong.c is the same
! loop in C; bench/fortran/compare.sh runs them alternately.
program pingpong
  use mpi_f08
  implicit none
  integer, parameter :: warmup = 2000, iters = 50000, calls = 1000000
  integer(kind=8) :: buf
  integer :: rank, i
  double precision :: t0, t1, t2
  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  buf = 0
  do i = 1, warmup + iters
    if (i == warmup + 1) then
      call MPI_Barrier(MPI_COMM_WORLD)
      t0 = MPI_Wtime()
    end if
    if (rank == 0) then
      call MPI_Send(buf, 8, MPI_BYTE, 1, 1, MPI_COMM_WORLD)
      call MPI_Recv(buf, 8, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE)
    else if (rank == 1) then
      call MPI_Recv(buf, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE)
      call MPI_Send(buf, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD)
    end if
  end do
  t1 = MPI_Wtime()
  ! The layer's own cost: a call that moves nothing (a send to MPI_PROC_NULL).
  if (rank == 0) then
    do i = 1, calls
      call MPI_Send(buf, 8, MPI_BYTE, MPI_PROC_NULL, 1, MPI_COMM_WORLD)
    end do
    t2 = MPI_Wtime()
    print '(a,f8.3,a,f8.2)', 'fortran 8B latency us: ', (t1 - t0) * 1.0d6 / (2 * iters), &
      ' proc_null send ns: ', (t2 - t1) * 1.0d9 / calls
  end if
  call MPI_Finalize()
end program pingpong
