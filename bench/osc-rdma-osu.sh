#!/usr/bin/env bash
# OSU 7.4 one-sided on `-w create` windows (MPI_Win_create: osc-rdma in rmca, osc-am with
# `--mca osc am`), 2 ranks bound one per core, runtimes alternating per benchmark; B: a
# directory with OSU's one-sided binaries built per MPI in B/rmca, B/ompi, B/mpich
# (bench/RESULTS.md, "One-sided communication").
#   MODE=transfers (default): put/get latency and bandwidth, one round (rmca osc-rdma, rmca
#     osc-am, Open MPI, MPICH); writes BENCH.RUNTIME files (OSU's output) in the current
#     directory.
#   MODE=small: put, get, acc, get_acc latency at 1-MAX bytes (default 64) and fop, cas, in
#     both passive-target modes (`-s flush`, `-s lock`), ROUNDS rounds (default 3) of rmca
#     (default components), rmca `--mca osc am`, Open MPI, MPICH; prints per (benchmark,
#     mode, size) the median of each runtime's latency (us; put_bw, get_bw, put_bibw: MB/s)
#     and rmca's cost against the best peer's (below 1: rmca better). AM=0 skips osc-am.
#     MODES: OSU's synchronization modes (default "flush lock"; any of flush flush_local lock
#     lock_all pscw fence; put_bibw takes fence and pscw only: it is skipped in the others,
#     and runs in those two when BENCHES names it); ALT: rmca options of the second
#     column in place of `--mca osc am` (e.g. "--mca osc_rdma_lock_words 0"), ALT_NAME its
#     heading. UCX=1 adds Open MPI over UCX (`--mca pml ucx --mca osc ucx`, its devices and
#     transports unrestricted: shared memory here) as the column ompi-ucx, a peer like the
#     others in rmca/best.
rel=$(cd "$(dirname "$0")/.." && pwd)/target/release
B=${B:-/tmp/oscsm-osu}
MODE=${MODE:-transfers}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "load before: $(uptime)"
if [[ $MODE == transfers ]]; then
  for bench in osu_put_latency osu_get_latency osu_put_bw osu_get_bw; do
    case $bench in *latency) a="-m 1:65536 -i 1000 -x 100";; *) a="-m 1:262144 -i 50 -x 5";; esac
    timeout 120 $rel/rmca-run -n 2 --bind-to core --mca osc rdma $B/rmca/$bench -w create $a > $bench.rdma 2>&1
    timeout 120 $rel/rmca-run -n 2 --bind-to core --mca osc am $B/rmca/$bench -w create $a > $bench.am 2>&1
    timeout 120 mpirun.openmpi -n 2 --bind-to core --allow-run-as-root --oversubscribe $B/ompi/$bench -w create $a > $bench.ompi 2>&1
    timeout 120 mpiexec.mpich -n 2 -bind-to core $B/mpich/$bench -w create $a > $bench.mpich 2>&1
  done
  echo "load after: $(uptime)"
  exit 0
fi
ROUNDS=${ROUNDS:-3} ITERS=${ITERS:-2000} MAX=${MAX:-64} TIMEOUT=${TIMEOUT:-60} AM=${AM:-1}
MODES=${MODES:-flush lock} ALT=${ALT:---mca osc am} ALT_NAME=${ALT_NAME:-osc-am} UCX=${UCX:-0}
ompi_ucx=(--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any --mca osc ucx)
BENCHES=${BENCHES:-put_latency get_latency acc_latency get_acc_latency fop_latency cas_latency}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Does OSU's benchmark B take synchronization mode M? (put_bibw: fence and pscw only.)
takes() {
  case $1 in put_bibw) [[ $2 == fence || $2 == pscw ]] ;; *) true ;; esac
}
for r in $(seq "$ROUNDS"); do
  for b in $BENCHES; do
    for mode in $MODES; do
      takes "$b" "$mode" || continue
      a="-w create -s $mode -i $ITERS -x $((ITERS / 10))"
      case $b in fop_latency | cas_latency) ;; *) a="$a -m 1:$MAX" ;; esac
      # shellcheck disable=SC2086 # OSU's options are words on purpose
      {
        timeout "$TIMEOUT" "$rel/rmca-run" -n 2 --bind-to core "$B/rmca/osu_$b" $a >"$out/$b.$mode.rmca.$r" 2>&1
        if ((AM)); then
          timeout "$TIMEOUT" "$rel/rmca-run" -n 2 --bind-to core $ALT "$B/rmca/osu_$b" $a >"$out/$b.$mode.am.$r" 2>&1
        else
          : >"$out/$b.$mode.am.$r"
        fi
        timeout "$TIMEOUT" mpirun.openmpi -n 2 --bind-to core "$B/ompi/osu_$b" $a >"$out/$b.$mode.ompi.$r" 2>&1
        if ((UCX)); then
          timeout "$TIMEOUT" mpirun.openmpi -n 2 --bind-to core "${ompi_ucx[@]}" "$B/ompi/osu_$b" $a >"$out/$b.$mode.ucx.$r" 2>&1
        else
          : >"$out/$b.$mode.ucx.$r"
        fi
        timeout "$TIMEOUT" mpiexec.mpich -n 2 -bind-to core "$B/mpich/osu_$b" $a >"$out/$b.$mode.mpich.$r" 2>&1
      }
    done
  done
done
echo "load after: $(uptime)"
printf '%-16s %-6s %5s %8s %8s %8s %8s %8s %10s\n' benchmark mode size rmca "$ALT_NAME" ompi ompi-ucx mpich rmca/best
for b in $BENCHES; do
  bw=0
  [[ $b == *_bw || $b == *_bibw ]] && bw=1
  for mode in $MODES; do
    takes "$b" "$mode" || continue
    sizes=$(awk '/^[0-9]/ { print $1 }' "$out/$b.$mode.rmca.1")
    for size in ${sizes:-1}; do
      med() { # runtime: the median over the rounds of SIZE's latency
        for r in $(seq "$ROUNDS"); do
          awk -v s="$size" '$1 == s { print $2 }' "$out/$b.$mode.$1.$r"
        done | sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'
      }
      x=$(med rmca) m=$(med am) o=$(med ompi) u=$(med ucx) p=$(med mpich)
      # rmca's cost against the best peer's (below 1: rmca better): a latency over the
      # lowest, the highest bandwidth over rmca's; a peer that printed nothing is left out.
      ratio=$(awk -v x="$x" -v bw="$bw" -v peers="$o $u $p" 'BEGIN {
        n = split(peers, v, " "); best = "-";
        for (i = 1; i <= n; i++) if (v[i] != "-" && (best == "-" || (bw ? v[i] > best : v[i] < best))) best = v[i];
        if (x == "-" || best == "-" || best == 0 || x == 0) print "-";
        else printf "%.2f", bw ? best / x : x / best }')
      printf '%-16s %-6s %5s %8s %8s %8s %8s %8s %10s\n' "$b" "$mode" "$size" "$x" "$m" "$o" "$u" "$p" "$ratio"
    done
  done
done
