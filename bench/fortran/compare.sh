#!/usr/bin/env bash
# The cost of the Fortran layer: pingpong.f90 (use mpi_f08, through libmpifort) against
# pingpong.c (the C library directly), 8-byte one-way latency, 2 ranks bound one per core,
# RUNS alternating runs of each in the same invocation; prints every figure, the medians and
# their ratio, and the load. Each run also times 10^6 MPI_Send to MPI_PROC_NULL on rank 0:
# the call's own cost, where the Fortran layer's share is not hidden by the transport. Needs the release build (mpicc, mpifort, rmca-run, libmpi.so,
# libmpifort.so).
#   bench/fortran/compare.sh [RUNS]   (default 11)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
R=$ROOT/target/release
RUNS=${1:-11}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"$R/mpicc" -O2 "$ROOT/bench/fortran/pingpong.c" -o "$W/pp_c"
"$R/mpifort" -O2 -J"$W" "$ROOT/bench/fortran/pingpong.f90" -o "$W/pp_f"
echo "load before: $(uptime)"
c=() f=() cn=() fn=()
for i in $(seq "$RUNS"); do
  read -r a b < <("$R/rmca-run" -n 2 --bind-to core "$W/pp_c" | awk '{print $5, $NF}')
  c+=("$a") cn+=("$b")
  read -r a b < <("$R/rmca-run" -n 2 --bind-to core "$W/pp_f" | awk '{print $5, $NF}')
  f+=("$a") fn+=("$b")
done
echo "load after: $(uptime)"
python3 - "${c[*]}" "${f[*]}" "${cn[*]}" "${fn[*]}" <<'PY'
import statistics, sys
c, f, cn, fn = ([float(x) for x in a.split()] for a in sys.argv[1:5])
for what, unit, x, y in (("8 B one-way latency", "us", c, f),
                         ("MPI_Send to MPI_PROC_NULL", "ns", cn, fn)):
    print(f"{what}:")
    print(f"  C       {unit}:", " ".join(f"{v:.3f}" for v in x))
    print(f"  Fortran {unit}:", " ".join(f"{v:.3f}" for v in y))
    mx, my = statistics.median(x), statistics.median(y)
    print(f"  median C {mx:.3f} [{min(x):.3f}..{max(x):.3f}], Fortran {my:.3f} "
          f"[{min(y):.3f}..{max(y):.3f}], Fortran/C {my / mx:.3f}")
PY
