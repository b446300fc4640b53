! Communicators, groups, topologies and attributes through `use mpi_f08`: MPI_Comm_dup,
! split (colour by parity, key reversed), compare, handle == and /=, groups (incl,
! translate_ranks, union), names (strings both ways), a periodic Cartesian ring
! (cart_create, coords, shift), attributes with a Fortran copy callback and the predefined
! MPI_COMM_NULL_COPY_FN, MPI_TAG_UB, MPI_Comm_free. Prints "ok comm:" on rank 0.
module comm_cb
  use mpi_f08
  implicit none
  integer :: copies = 0
contains
  subroutine copy_plus_one(oldcomm, keyval, extra_state, val_in, val_out, flag, ierror)
    type(MPI_Comm) :: oldcomm
    integer :: keyval, ierror
    integer(kind=MPI_ADDRESS_KIND) :: extra_state, val_in, val_out
    logical :: flag
    if (oldcomm == MPI_COMM_NULL .or. keyval < 0) return
    copies = copies + 1
    val_out = val_in + extra_state
    flag = .true.
    ierror = MPI_SUCCESS
  end subroutine
end module comm_cb

program comm
  use mpi_f08
  use comm_cb
  implicit none
  integer :: rank, size, errors, result, srank, ssize, i, rlen, src, dst
  integer :: ranks1(1), ranks2(1), coords(1), key1, key2
  type(MPI_Comm) :: dup, split, ring, dup2
  type(MPI_Group) :: world_group, g0, gu
  character(len=MPI_MAX_OBJECT_NAME) :: name
  integer(kind=MPI_ADDRESS_KIND) :: val
  logical :: flag

  errors = 0
  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, size)

  call MPI_Comm_dup(MPI_COMM_WORLD, dup)
  if (dup == MPI_COMM_WORLD .or. dup == MPI_COMM_NULL) call fail('dup handle')
  call MPI_Comm_compare(MPI_COMM_WORLD, dup, result)
  if (result /= MPI_CONGRUENT) call fail('compare dup')
  call MPI_Comm_set_name(dup, 'my duplicate  ')
  call MPI_Comm_get_name(dup, name, rlen)
  if (name /= 'my duplicate' .or. rlen /= 12) call fail('comm name')
  call MPI_Comm_get_name(MPI_COMM_WORLD, name, rlen)
  if (name /= 'MPI_COMM_WORLD') call fail('world name')

  ! Even and odd ranks, each in reverse order.
  call MPI_Comm_split(MPI_COMM_WORLD, mod(rank, 2), -rank, split)
  call MPI_Comm_size(split, ssize)
  call MPI_Comm_rank(split, srank)
  if (ssize /= (size - mod(rank, 2) + 1) / 2) call fail('split size')
  ! Reversed: ranks of the same parity above this one come first.
  if (srank /= (size - 1 - rank) / 2) call fail('split rank')
  call MPI_Allreduce(MPI_IN_PLACE, srank, 1, MPI_INTEGER, MPI_MAX, split)
  if (srank /= ssize - 1) call fail('split allreduce')
  call MPI_Comm_free(split)
  if (split /= MPI_COMM_NULL) call fail('comm_free handle')

  ! Groups.
  call MPI_Comm_group(MPI_COMM_WORLD, world_group)
  call MPI_Group_incl(world_group, 1, [size - 1], g0)
  ranks1 = [0]
  call MPI_Group_translate_ranks(g0, 1, ranks1, world_group, ranks2)
  if (ranks2(1) /= size - 1) call fail('translate_ranks')
  call MPI_Group_union(g0, world_group, gu)
  call MPI_Group_size(gu, i)
  if (i /= size) call fail('group union')
  call MPI_Group_rank(g0, i)
  if ((rank == size - 1 .and. i /= 0) .or. (rank /= size - 1 .and. i /= MPI_UNDEFINED)) &
    call fail('group rank')
  call MPI_Group_free(g0)
  call MPI_Group_free(gu)
  call MPI_Group_free(world_group)

  ! A periodic ring.
  call MPI_Cart_create(MPI_COMM_WORLD, 1, [size], [.true.], .false., ring)
  call MPI_Cart_coords(ring, rank, 1, coords)
  if (coords(1) /= rank) call fail('cart coords')
  call MPI_Cart_shift(ring, 0, 1, src, dst)
  if (src /= mod(rank - 1 + size, size) .or. dst /= mod(rank + 1, size)) call fail('cart shift')
  call MPI_Comm_free(ring)

  ! Attributes: a Fortran copy callback, and the predefined ones.
  call MPI_Comm_create_keyval(copy_plus_one, MPI_COMM_NULL_DELETE_FN, key1, 5_MPI_ADDRESS_KIND)
  call MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, key2, &
                              0_MPI_ADDRESS_KIND)
  call MPI_Comm_set_attr(dup, key1, 100_MPI_ADDRESS_KIND)
  call MPI_Comm_set_attr(dup, key2, 7_MPI_ADDRESS_KIND)
  call MPI_Comm_dup(dup, dup2)
  call MPI_Comm_get_attr(dup2, key1, val, flag)
  if (.not. flag .or. val /= 105 .or. copies /= 1) call fail('copy callback')
  call MPI_Comm_get_attr(dup2, key2, val, flag)
  if (flag) call fail('null copy copied')
  call MPI_Comm_get_attr(dup, key2, val, flag)
  if (.not. flag .or. val /= 7) call fail('get attr')
  call MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, val, flag)
  if (.not. flag .or. val < 32767) call fail('MPI_TAG_UB')
  call MPI_Comm_free(dup2)
  call MPI_Comm_free(dup)
  call MPI_Comm_free_keyval(key1)
  call MPI_Comm_free_keyval(key2)

  call MPI_Allreduce(MPI_IN_PLACE, errors, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
  if (rank == 0 .and. errors == 0) print '(a,i0,a)', 'ok comm: ', size, ' ranks'
  call MPI_Finalize()
  if (errors /= 0) stop 1
contains
  subroutine fail(what)
    character(len=*), intent(in) :: what
    print '(a,i0,2a)', 'rank ', rank, ': FAILED ', what
    errors = errors + 1
  end subroutine
end program comm
