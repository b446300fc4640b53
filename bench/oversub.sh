#!/bin/sh
# Oversubscribed jobs: bench/oversub.c (latency, barrier, 8 B allreduce, halo exchange) at
# each rank count, rmca and the peers alternating round by round, in the same run; prints the
# median over the rounds and [min..max] for each runtime and benchmark, with the load.
#   bench/oversub.sh [ranks...]            (default: 4 8; ROUNDS=5 ITERS=300)
# Runtimes: rmca (auto wait mode, which blocks when ranks outnumber the CPUs), rmca-spin
# (mpi_wait_mode spin), Open MPI (mpirun --oversubscribe: it then yields when idle) and MPICH
# (mpiexec.mpich: it spins). RUNTIMES overrides the list; RMCA_EXTRA adds --mca flags to rmca.
set -eu
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
ITERS=${ITERS:-300}
RUNTIMES=${RUNTIMES:-"rmca rmca-spin ompi mpich"}
RANKS=${*:-"4 8"}
TMP=$(mktemp -d /tmp/rmca-oversub.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
target/release/mpicc -O2 bench/oversub.c -o "$TMP/rmca"
mpicc.openmpi -O2 bench/oversub.c -o "$TMP/ompi"
mpicc.mpich -O2 -Wno-stringop-overflow bench/oversub.c -o "$TMP/mpich"
run() { # runtime ranks
    case $1 in
    rmca) timeout 300 target/release/rmca-run -n "$2" ${RMCA_EXTRA:-} "$TMP/rmca" "$ITERS" ;;
    rmca-spin) timeout 300 target/release/rmca-run -n "$2" --mca mpi_wait_mode spin ${RMCA_EXTRA:-} "$TMP/rmca" "$ITERS" ;;
    rmca-yield) timeout 300 target/release/rmca-run -n "$2" --mca mpi_wait_mode yield ${RMCA_EXTRA:-} "$TMP/rmca" "$ITERS" ;;
    rmca:*) # rmca:MODE:SPIN:YIELD_US, e.g. rmca:block:0:20 (tuning runs)
        IFS=: read -r _ m sp y <<EOT
$1
EOT
        timeout 300 target/release/rmca-run -n "$2" --mca mpi_wait_mode "$m" --mca mpi_wait_spin_passes "$sp" --mca mpi_wait_yield_us "$y" ${RMCA_EXTRA:-} "$TMP/rmca" "$ITERS" ;;
    ompi) timeout 300 mpirun.openmpi -n "$2" --oversubscribe "$TMP/ompi" "$ITERS" ;;
    mpich) timeout 300 mpiexec.mpich -n "$2" "$TMP/mpich" "$ITERS" ;;
    *) echo "unknown runtime $1 (rmca rmca-spin rmca-yield ompi mpich)" >&2; exit 2 ;;
    esac
}
echo "# $(nproc) CPUs; $(uptime)"
for n in $RANKS; do
    for r in $(seq "$ROUNDS"); do
        for rt in $RUNTIMES; do
            run "$rt" "$n" 2>/dev/null | awk -v rt="$rt" -v n="$n" '{print n, rt, $1, $2}' >>"$TMP/all" || echo "$n $rt failed" >&2
        done
    done
done
echo "# after: $(uptime)"
# ranks runtime bench value -> median [min..max] per (ranks, bench, runtime)
sort -k1,1n -k3,3 -k2,2 "$TMP/all" | awk '
function flush(   i, j, t, med) {
  if (key == "") return
  for (i = 2; i <= c; i++) { t = v[i]; for (j = i - 1; j >= 1 && v[j] > t; j--) v[j + 1] = v[j]; v[j + 1] = t }
  med = (c % 2) ? v[(c + 1) / 2] : (v[c / 2] + v[c / 2 + 1]) / 2
  printf "| %s | %s | %s | %.2f | %.2f..%.2f | %d |\n", kn, kb, kr, med, v[1], v[c], c
}
{ k = $1 " " $3 " " $2; if (k != key) { flush(); key = k; kn = $1; kb = $3; kr = $2; c = 0 } v[++c] = $4 + 0 }
END { flush() }' | { echo "| ranks | benchmark | runtime | median us | min..max | runs |"; echo "|---|---|---|---|---|---|"; cat; }
