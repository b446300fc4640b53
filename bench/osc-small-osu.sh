#!/usr/bin/env bash
# Issue 29's 1-64 B gap: OSU 7.4's osu_put_latency and osu_get_latency on `-w allocate`
# windows (osc-sm in rmca), in both passive-target modes (`-s flush`: lock_all + flush per
# operation, OSU's default; `-s lock`: lock/unlock per operation), 1 B-64 KiB, 2 ranks bound
# one per core; for every (benchmark, mode) and round the runtimes run one after the other:
# rmca, Open MPI, MPICH. B: a directory with OSU's one-sided binaries built per MPI in
# B/rmca, B/ompi, B/mpich (bench/results.sh's osc_osu builds them from OSU's src directory).
# Prints, per (benchmark, mode, size), the median over ROUNDS of each runtime's latency (us)
# and rmca / best peer (below 1: rmca faster).
#   B=/tmp/oscsm-osu ROUNDS=3 bench/osc-small-osu.sh
set -uo pipefail
rel=$(cd "$(dirname "$0")/.." && pwd)/target/release
B=${B:-/tmp/oscsm-osu}
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-2000}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "load before: $(uptime)"
for r in $(seq "$ROUNDS"); do
  for b in put_latency get_latency; do
    for mode in flush lock; do
      a="-w allocate -s $mode -m 1:65536 -i $ITERS -x $((ITERS / 10))"
      # shellcheck disable=SC2086 # OSU's options are words on purpose
      {
        timeout 120 "$rel/rmca-run" -n 2 --bind-to core "$B/rmca/osu_$b" $a >"$out/$b.$mode.rmca.$r" 2>&1
        timeout 120 mpirun.openmpi -n 2 --bind-to core "$B/ompi/osu_$b" $a >"$out/$b.$mode.ompi.$r" 2>&1
        timeout 120 mpiexec.mpich -n 2 -bind-to core "$B/mpich/osu_$b" $a >"$out/$b.$mode.mpich.$r" 2>&1
      }
    done
  done
done
echo "load after: $(uptime)"
printf '%-16s %-6s %6s %10s %10s %10s %10s\n' benchmark mode size rmca ompi mpich rmca/best
for b in put_latency get_latency; do
  for mode in flush lock; do
    for size in 1 2 4 8 16 32 64 128 256 512 1024 2048 4096 8192 16384 32768 65536; do
      med() { # runtime: the median over the rounds of SIZE's latency
        for r in $(seq "$ROUNDS"); do
          awk -v s="$size" '$1 == s { print $2 }' "$out/$b.$mode.$1.$r"
        done | sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'
      }
      x=$(med rmca) o=$(med ompi) m=$(med mpich)
      ratio=$(awk -v x="$x" -v o="$o" -v m="$m" 'BEGIN {
        best = (o == "-") ? m : (m == "-" ? o : (o < m ? o : m));
        if (x == "-" || best == "-" || best == 0) print "-"; else printf "%.2f", x / best }')
      printf '%-16s %-6s %6s %10s %10s %10s %10s\n' "$b" "$mode" "$size" "$x" "$o" "$m" "$ratio"
    done
  done
done
