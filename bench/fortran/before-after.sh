#!/usr/bin/env bash
# Two builds of the Fortran layer in one run: pingpong.f90 built against BEFORE and against
# AFTER (each a directory with libmpi.so, libmpifort.so and the mpi_f08.mod of that
# libmpifort, e.g. copies made before and after a change), and pingpong.c against AFTER's
# libmpi.so, RUNS alternating runs of the three (2 ranks bound one per core); prints every
# figure, the medians and the ratios, and the load. The same libmpi.so in both directories
# isolates the Fortran layer.
#   bench/fortran/before-after.sh BEFORE_DIR AFTER_DIR [RUNS]   (default 11)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
R=$ROOT/target/release
BEFORE=$(cd "${1:?usage: before-after.sh BEFORE_DIR AFTER_DIR [RUNS]}" && pwd)
AFTER=$(cd "${2:?usage: before-after.sh BEFORE_DIR AFTER_DIR [RUNS]}" && pwd)
RUNS=${3:-11}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
RMCA_CC_LIBDIR=$AFTER "$R/mpicc" -O2 "$ROOT/bench/fortran/pingpong.c" -o "$W/pp_c"
for b in BEFORE AFTER; do
  d=${!b}
  mkdir -p "$W/$b"
  RMCA_FC_INCLUDE=$d RMCA_CC_LIBDIR=$d "$R/mpifort" -O2 -J"$W/$b" \
    "$ROOT/bench/fortran/pingpong.f90" -o "$W/pp_$b"
done
echo "load before: $(uptime)"
c=() fb=() fa=() cn=() fbn=() fan=()
for i in $(seq "$RUNS"); do
  read -r a b < <("$R/rmca-run" -n 2 --bind-to core "$W/pp_c" | awk '{print $5, $NF}')
  c+=("$a") cn+=("$b")
  read -r a b < <("$R/rmca-run" -n 2 --bind-to core "$W/pp_BEFORE" | awk '{print $5, $NF}')
  fb+=("$a") fbn+=("$b")
  read -r a b < <("$R/rmca-run" -n 2 --bind-to core "$W/pp_AFTER" | awk '{print $5, $NF}')
  fa+=("$a") fan+=("$b")
done
echo "load after: $(uptime)"
python3 - "${c[*]}" "${fb[*]}" "${fa[*]}" "${cn[*]}" "${fbn[*]}" "${fan[*]}" <<'PY'
import statistics, sys
c, fb, fa, cn, fbn, fan = ([float(x) for x in a.split()] for a in sys.argv[1:7])
for what, unit, cols in (("8 B one-way latency", "us", (c, fb, fa)),
                         ("MPI_Send to MPI_PROC_NULL", "ns", (cn, fbn, fan))):
    print(f"{what} ({unit}), median [min..max]:")
    meds = []
    for name, x in zip(("C", "Fortran before", "Fortran after"), cols):
        m = statistics.median(x)
        meds.append(m)
        print(f"  {name:15s} {m:8.3f} [{min(x):.3f}..{max(x):.3f}]  ", " ".join(f"{v:.3f}" for v in x))
    print(f"  before/C {meds[1] / meds[0]:.3f}, after/C {meds[2] / meds[0]:.3f}, "
          f"after/before {meds[2] / meds[1]:.3f}")
PY
