#!/usr/bin/env bash
# Instructions per one-sided call on an osc-sm window, counted by callgrind (see
# bench/instructions.sh for why instructions): bench/osc_calls.c, built with each build's
# rmca-cc and run against its libmpi.so, at two round counts; the difference per round is
# the cost of one operation and its flush (getbw: of one get, its share of the flush
# included; lock*, xlock*: of MPI_Win_lock, the operation and MPI_Win_unlock; lockall: of
# MPI_Win_lock_all, a put and MPI_Win_unlock_all; flushlocal: a put and MPI_Win_flush_local;
# fence: a put and MPI_Win_fence; pscw: post, start, a put, complete and wait, the
# window's one rank both sides of it: not in the default LOOPS), what a run does once
# cancelling out. Only the MPI calls of the loop are counted.
# `ompi` and `mpich` in place of a TARGET_DIR count the peers' (Debian's Open MPI and MPICH,
# the same program built with mpicc.openmpi / mpicc.mpich, run as a singleton).
#   bench/osc-instructions.sh TARGET_DIR|ompi|mpich [...]
#   LOOPS="put get" bench/osc-instructions.sh ...   a subset
#   OSC_WIN=create bench/osc-instructions.sh ...    on an MPI_Win_create window (osc-rdma in rmca)
#   OSC_WIN=pair bench/osc-instructions.sh ...      two ranks, one node: rank 0 of bench/osc_pair.c
#     puts/gets/... into rank 1's MPI_Win_create window (osc-rdma over shm's CMA in rmca),
#     valgrind on rank 0 only, its MPI calls of the loop counted as above (callgrind names the
#     exported C entry points `PMPI_*` in rmca: a toggle on the Rust path, e.g.
#     mpi_abi::ffi::win::MPI_Put, would toggle off inside it); loops put get acc fop cas, each
#     +flush, and putlock getlock acclock foplock caslock: each in its own lock/unlock epoch;
#     flushlocal getflushlocal (not in the default LOOPS): a put or a get, +flush_local;
#     SIZE: bytes of each put, get and accumulate (default 8).
#     Loops that wait for the target's answers (lock, acc, fop, cas) include the polls of that
#     wait, which the load moves: read those as a range.
set -euo pipefail
(($#)) || { echo "usage: osc-instructions.sh TARGET_DIR|ompi|mpich [...]" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "osc-instructions.sh: valgrind is not installed (scripts/install-deps.sh)" >&2; exit 2; }
loops=${LOOPS:-put get getbw acc getacc fop cas acc64k acc64ki lockput lockget lockacc lockgetacc lockfop lockcas xlockput lockall}
here=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d)
# Build C source $2 into $3 with the wrapper of $1 (ompi, mpich, or an rmca TARGET_DIR).
build_for() {
  case $1 in
  ompi) mpicc.openmpi -O2 "$2" -o "$3" ;;
  mpich) mpicc.mpich -O2 "$2" -o "$3" ;;
  *) "$1/rmca-cc" -O2 "$2" -o "$3" ;;
  esac
}
trap 'rm -rf "$scratch"' EXIT
count() { # LIBDIR BINARY ROUNDS LOOP
  local lib=$1 bin=$2 rounds=$3 loop=$4 toggles=()
  for f in MPI_Put MPI_Get MPI_Accumulate MPI_Get_accumulate MPI_Fetch_and_op MPI_Compare_and_swap MPI_Win_flush MPI_Win_lock MPI_Win_unlock MPI_Win_lock_all MPI_Win_unlock_all \
    MPI_Win_flush_local MPI_Win_fence MPI_Win_post MPI_Win_start MPI_Win_complete MPI_Win_wait; do
    toggles+=("--toggle-collect=$f" "--toggle-collect=P$f")
  done
  local out
  out=$(LD_LIBRARY_PATH=$lib RMCA_MCA_btl=self OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
    "${toggles[@]}" "$bin" "$rounds" "$loop" 2>&1) || { echo "$out" >&2; exit 1; }
  sed -n 's/.*Collected : \([0-9]*\).*/\1/p' <<<"$out"
}
if [[ ${OSC_WIN:-} == pair ]]; then
  # (Created windows across two processes: see the usage above.)
  loops=${LOOPS:-put get acc fop cas putlock getlock acclock foplock caslock}
  count_pair() { # DIR BINARY ROUNDS LOOP
    local dir=$1 bin=$2 rounds=$3 loop=$4 launch out
    case $dir in
    ompi) launch=(mpirun.openmpi --allow-run-as-root --oversubscribe -n 2) ;;
    mpich) launch=(mpirun.mpich -n 2) ;;
    # (The build's own library, whatever the program's runpath says; a TARGET_DIR without
    # a launcher, e.g. a saved libmpi.so and rmca-cc, borrows target/release's.)
    *) launch=(env LD_LIBRARY_PATH="$dir" "$(if [[ -x $dir/rmca-run ]]; then echo "$dir"; else echo "$here/../target/release"; fi)/rmca-run" -n 2) ;;
    esac
    local toggles=()
    for f in MPI_Put MPI_Get MPI_Accumulate MPI_Get_accumulate MPI_Fetch_and_op MPI_Compare_and_swap MPI_Win_flush MPI_Win_flush_local MPI_Win_lock MPI_Win_unlock; do
      toggles+=("--toggle-collect=$f" "--toggle-collect=P$f")
    done
    # Rank 0 (PMI_RANK: rmca and MPICH; OMPI_COMM_WORLD_RANK: Open MPI) under callgrind.
    out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "${launch[@]}" sh -c \
      'if [ "${PMI_RANK:-$OMPI_COMM_WORLD_RANK}" = 0 ]; then exec valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@"; else shift $(($# - 4)); exec "$@"; fi' \
      sh "${toggles[@]}" "$bin" "$rounds" "$loop" "${SIZE:-8}" 2>&1) || { echo "$out" >&2; exit 1; }
    out=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' <<<"$out")
    [[ -n $out && $out != 0 ]] || { echo "osc-instructions.sh: callgrind collected nothing ($dir $loop)" >&2; exit 1; }
    echo "$out"
  }
  printf '%-40s' build
  for l in $loops; do printf '%14s' "$l"; done
  echo
  for dir in "$@"; do
    bin=$scratch/osc_pair.$RANDOM
    build_for "$dir" "$here/osc_pair.c" "$bin"
    printf '%-40s' "$dir"
    for l in $loops; do
      a=$(count_pair "$dir" "$bin" 200 "$l") b=$(count_pair "$dir" "$bin" 2200 "$l")
      printf '%14s' "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.0f", (b - a) / 2000 }')"
    done
    echo
  done
  exit 0
fi
printf '%-40s' build
for l in $loops; do printf '%11s' "$l"; done
echo
for dir in "$@"; do
  bin=$scratch/osc_calls.$RANDOM
  build_for "$dir" "$here/osc_calls.c" "$bin"
  printf '%-40s' "$dir"
  for l in $loops; do
    case $l in acc64k | acc64ki) small=2 large=12 per=1 ;; getbw) small=10 large=60 per=64 ;; *) small=100 large=1100 per=1 ;; esac
    lib=$dir
    [[ $dir == ompi || $dir == mpich ]] && lib=
    a=$(count "$lib" "$bin" $small "$l") b=$(count "$lib" "$bin" $large "$l")
    printf '%11s' "$(awk -v a="$a" -v b="$b" -v n=$(((large - small) * per)) 'BEGIN { printf "%.0f", (b - a) / n }')"
  done
  echo
done
