#!/usr/bin/env bash
# Multi-threaded message rate (bench/mt_rate.c) and OSU's osu_latency_mt on rmca, Open MPI
# and MPICH at MPI_THREAD_MULTIPLE, the runtimes alternating inside every round (issue 30).
#   bench/mt-rate-peers.sh [ROUNDS=3] [OSU_LATENCY_MT_DIR]
# mt_rate: 2 ranks, T = 1, 2, 4 threads per rank, each on its own duplicate of the world,
# windows of 64 Isend/Irecv of 8 B; prints one line per run: round runtime threads rate.
# With OSU_LATENCY_MT_DIR (holding osu_latency_mt.{rmca,openmpi,mpich}, built from OSU 7.4
# with each mpicc: `bench/osu-trees.sh mt` makes it), also `osu_latency_mt -t T:T -m 8:8 -i 1000 -x 100` at T = 2 and 4.
# Open MPI: pml ob1, btl self,vader, not bound; MPICH: Debian's ch4, not bound; rmca: defaults
# (rmca-run binds each rank, all its threads, to one core while the ranks fit the cores).
# 2 ranks x (T + 1) threads on 2 cores.
# With RMCA_BEFORE=DIR (a directory holding another build's libmpi.so, e.g. a copy made
# before a change), rmca's program also runs on that library (LD_LIBRARY_PATH; the program's
# RUNPATH is target/release), as runtime "rmca-before", alternating with the others.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-3}
osu=${2:-}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS must be a positive integer, not '$rounds'" >&2; exit 2; }
out=$(mktemp -d /tmp/mt-rate.XXXXXX)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$root/target/release/mpicc" -O2 -std=c11 -pthread "$root/bench/mt_rate.c" -o "$out/mt.rmca"
mpicc.openmpi -O2 -std=c11 -pthread "$root/bench/mt_rate.c" -o "$out/mt.openmpi"
mpicc.mpich -O2 -std=c11 -pthread "$root/bench/mt_rate.c" -o "$out/mt.mpich"
runtimes="rmca${RMCA_BEFORE:+ rmca-before} openmpi mpich"
if [[ -n ${RMCA_BEFORE:-} ]]; then
  [[ -f $RMCA_BEFORE/libmpi.so ]] || { echo "RMCA_BEFORE=$RMCA_BEFORE holds no libmpi.so" >&2; exit 2; }
  ln -s mt.rmca "$out/mt.rmca-before"
  [[ -z $osu ]] || { mkdir -p "$out/osu"; for f in "$osu"/osu_latency_mt.*; do ln -s "$f" "$out/osu/"; done
    ln -s "$osu/osu_latency_mt.rmca" "$out/osu/osu_latency_mt.rmca-before"; osu=$out/osu; }
fi
launch() {
  case $1 in
  rmca) echo "$root/target/release/rmca-run -n 2" ;;
  rmca-before) echo "env LD_LIBRARY_PATH=$RMCA_BEFORE $root/target/release/rmca-run -n 2" ;;
  openmpi) echo "mpirun.openmpi -n 2 --bind-to none --mca pml ob1 --mca btl self,vader" ;;
  mpich) echo "mpiexec.mpich -n 2" ;;
  esac
}
echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
  for t in 1 2 4; do
    for rt in $runtimes; do
      rate=$(timeout 120 $(launch $rt) "$out/mt.$rt" "$t" 2000 2>/dev/null | awk '/^mt_rate/ {print $7}') || true
      echo "mt_rate $r $rt $t ${rate:-failed}"
    done
  done
  if [[ -n $osu ]]; then
    for t in 2 4; do
      for rt in $runtimes; do
        lat=$(timeout 120 $(launch $rt) "$osu/osu_latency_mt.$rt" -t "$t:$t" -m 8:8 -i 1000 -x 100 2>/dev/null |
          awk '$1 == 8 {print $2}') || true
        echo "osu_latency_mt $r $rt $t ${lat:-failed}"
      done
    done
  fi
done
echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
rm -rf "$out"
