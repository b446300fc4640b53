#!/usr/bin/env bash
# Instructions per message of OSU's windowed loops (osu_bw, osu_bibw: 64 MPI_Isend +
# MPI_Waitall with statuses against 64 pre-posted MPI_Irecv + MPI_Waitall with statuses),
# two ranks, for rmca's C library and the peers (Open MPI, MPICH), counted by callgrind on
# each rank: load-independent, so runtimes can be compared on a busy machine where OSU's
# timings cannot. bench/osu_window.c hands over between the ranks outside MPI, so that the
# counts do not depend on timing: all receives are posted before the first send, the whole
# window is sent before the receiver's Waitall, and only the window's MPI calls are counted
# (the reply and the hand-over are not). Sender column: MPI_Isend x 64 + MPI_Waitall, per
# message; receiver: MPI_Irecv x 64 + MPI_Waitall, per message; bibw: each rank does both.
# STYLES lists how the windows are completed (bench/osu_window.c: waitall, testall,
# waitsome, waitany, wait, test, testsome, testany, each also with -ignore for
# MPI_STATUS(ES)_IGNORE); default OSU's waitall; STYLES=all runs the sixteen.
# A runtime whose sends cannot complete before the receiver progresses (Open MPI's vader past
# its fast boxes, MPICH) makes the peer wait out a 2 s timeout: such a row is marked
# "(waited)", its counts hold spinning, not the cost.
#   bench/osu-instructions.sh [SIZES]      default SIZES "1 8 64"
#   RUNTIMES="rmca ompi" MODES=bw ROUNDS=20 bench/osu-instructions.sh 8
#   STYLES="waitall waitall-ignore testall" bench/osu-instructions.sh 8
#   RMCA_LIB=/tmp/old/target/release bench/osu-instructions.sh   rmca's program run on another
#   build's libmpi.so (LD_LIBRARY_PATH; the program's RUNPATH is target/release)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rel=$root/target/release
sizes=${1:-1 8 64}
runtimes=${RUNTIMES:-rmca ompi mpich}
modes=${MODES:-bw bibw}
rounds=${ROUNDS:-20}
styles=${STYLES:-waitall}
all_styles="waitall waitall-ignore testall testall-ignore waitsome waitsome-ignore waitany waitany-ignore wait wait-ignore test test-ignore testsome testsome-ignore testany testany-ignore"
[[ $styles == all ]] && styles=$all_styles
for st in $styles; do
  [[ " $all_styles " == *" $st "* ]] || { echo "STYLES are some of: $all_styles (or all), not '$st'" >&2; exit 2; }
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS must be a positive integer, not '$rounds'" >&2; exit 2; }
for s in $sizes; do
  [[ $s =~ ^[0-9]+$ ]] || { echo "sizes are byte counts (e.g. \"1 8 64\"), not '$s'" >&2; exit 2; }
done
for m in $modes; do
  [[ $m == bw || $m == bibw ]] || { echo "MODES are bw and bibw, not '$m'" >&2; exit 2; }
done
command -v valgrind >/dev/null || { echo "osu-instructions.sh: valgrind is not installed (scripts/install-deps.sh)" >&2; exit 2; }
[ -f /usr/include/valgrind/callgrind.h ] || { echo "osu-instructions.sh: valgrind/callgrind.h missing (Debian valgrind)" >&2; exit 2; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for rt in $runtimes; do
  case $rt in
  rmca) cc=$rel/mpicc ;;
  ompi) cc=mpicc.openmpi ;;
  mpich) cc=mpicc.mpich ;;
  *) echo "unknown runtime '$rt' (valid: rmca ompi mpich)" >&2; exit 2 ;;
  esac
  command -v "$cc" >/dev/null || { echo "$rt: $cc not found" >&2; exit 2; }
  "$cc" -O2 "$root/bench/osu_window.c" -o "$scratch/ow_$rt"
done
# The launcher line and the variable holding the rank, per runtime (2 ranks bound to cores).
launch() {
  case $1 in
  rmca) echo "$rel/rmca-run -n 2 --bind-to core" ;;
  ompi) echo "mpirun.openmpi -n 2 --bind-to core --allow-run-as-root --oversubscribe" ;;
  mpich) echo "mpiexec.mpich -n 2 -bind-to core" ;;
  esac
}
rank_var() { case $1 in ompi) echo OMPI_COMM_WORLD_RANK ;; *) echo PMI_RANK ;; esac; }
echo "\$ bench/osu-instructions.sh $sizes  (RUNTIMES='$runtimes' MODES='$modes' STYLES='$styles' ROUNDS=$rounds${RMCA_LIB:+ RMCA_LIB=$RMCA_LIB})"
echo "commit: $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo ' + uncommitted changes'); $(date -u '+%Y-%m-%d %H:%M UTC'); load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-5s %-15s %6s %-6s %16s %16s\n' mode style size rt "rank0 instr/msg" "rank1 instr/msg"
for mode in $modes; do
 for style in $styles; do
  for size in $sizes; do
    for rt in $runtimes; do
      d=$scratch/run
      rm -rf "$d" && mkdir "$d"
      head -c 4096 /dev/zero >"$d/flags"
      rv=$(rank_var "$rt")
      env=()
      [[ $rt == rmca && -n ${RMCA_LIB:-} ]] && env=(env "LD_LIBRARY_PATH=$RMCA_LIB")
      # shellcheck disable=SC2046 # the launcher line is words on purpose
      "${env[@]}" $(launch "$rt") valgrind --tool=callgrind --collect-atstart=no \
        "--callgrind-out-file=$d/cg.%q{$rv}" "$scratch/ow_$rt" "$rounds" "$size" "$d/flags" "$mode" "$style" \
        >"$d/out" 2>"$d/err" || { echo "$rt $mode $style $size failed:" >&2; tail -5 "$d/err" >&2; continue; }
      cells=()
      for r in 0 1; do
        total=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$d/cg.$r" | head -1)
        cell=$(awk -v t="$total" -v n=$((rounds * 64)) 'BEGIN { printf "%.1f", t / n }')
        # One rank timed out waiting: the other spun in MPI meanwhile, so neither count is
        # the cost.
        grep -q ": late" "$d/err" && cell="$cell (waited)"
        cells+=("$cell")
      done
      printf '%-5s %-15s %6s %-6s %16s %16s\n' "$mode" "$style" "$size" "$rt" "${cells[0]}" "${cells[1]}"
    done
  done
 done
done
