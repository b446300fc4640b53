! The Fortran layer's instructions per call (bench/fortran/instructions.sh): N times an
! MPI_Send to and an MPI_Recv from MPI_PROC_NULL (MPI_STATUS_IGNORE, no IERROR) through
! `use mpi_f08`, in rmca_fortran_loop, the function callgrind counts. proc_null_loop.c is the
! same loop in C.
subroutine ploop(n) bind(C, name="rmca_fortran_loop")
  use, intrinsic :: iso_c_binding, only : c_int
  use mpi_f08
  implicit none
  integer(c_int), value :: n
  integer(kind=8) :: buf
  integer :: i
  buf = 0
  do i = 1, n
    call MPI_Send(buf, 8, MPI_BYTE, MPI_PROC_NULL, 1, MPI_COMM_WORLD)
    call MPI_Recv(buf, 8, MPI_BYTE, MPI_PROC_NULL, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE)
  end do
end subroutine
program main
  use mpi_f08
  interface
    subroutine ploop(n) bind(C, name="rmca_fortran_loop")
      use, intrinsic :: iso_c_binding, only : c_int
      integer(c_int), value :: n
    end subroutine
  end interface
  character(len=32) :: arg
  integer :: n
  call get_command_argument(1, arg)
  read (arg, *) n
  call MPI_Init()
  call ploop(n)
  call MPI_Finalize()
end program
