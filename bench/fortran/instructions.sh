#!/usr/bin/env bash
# The Fortran layer's cost in instructions (callgrind: deterministic, unlike timings on a loaded
# machine): an MPI_Send to and an MPI_Recv from MPI_PROC_NULL, through `use mpi_f08`
# (proc_null_loop.f90) and in C (proc_null_loop.c), counted in the loop function only, at
# 1000 and 2000 iterations; the difference per iteration cancels what runs once. Each DIR
# holds libmpi.so, libmpifort.so and the mpi_f08.mod of that libmpifort (copies of builds to
# compare; the C loop is built against the first DIR's libmpi.so).
#   bench/fortran/instructions.sh DIR [DIR...]
set -euo pipefail
(($#)) || { echo "usage: instructions.sh DIR [DIR...]" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "instructions.sh: valgrind is not installed" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
R=$ROOT/target/release
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
count() { # BINARY LIBDIR FUNCTION N
  LD_LIBRARY_PATH=$2 RMCA_MCA_btl=self valgrind --tool=callgrind --callgrind-out-file=/dev/null \
    --toggle-collect="$3" "$1" "$4" 2>&1 | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
per_iteration() { # BINARY LIBDIR FUNCTION
  local a b
  a=$(count "$1" "$2" "$3" 1000)
  b=$(count "$1" "$2" "$3" 2000)
  awk -v a="$a" -v b="$b" 'BEGIN { printf "%.1f", (b - a) / 1000 }'
}
first=$(cd "$1" && pwd)
RMCA_CC_LIBDIR=$first "$R/mpicc" -O2 "$ROOT/bench/fortran/proc_null_loop.c" -o "$W/c"
echo "C: $(per_iteration "$W/c" "$first" rmca_c_loop) instructions per send + receive"
for d in "$@"; do
  d=$(cd "$d" && pwd)
  b=$W/f$RANDOM
  mkdir -p "$b.mod"
  RMCA_FC_INCLUDE=$d RMCA_CC_LIBDIR=$d "$R/mpifort" -O2 -J"$b.mod" \
    "$ROOT/bench/fortran/proc_null_loop.f90" -o "$b"
  echo "Fortran ($d): $(per_iteration "$b" "$d" rmca_fortran_loop) instructions per send + receive"
done
