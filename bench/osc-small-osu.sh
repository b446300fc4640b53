#!/usr/bin/env bash
# OSU 7.4's small one-sided benchmarks on `-w allocate` windows (osc-sm in rmca) against the
# peers, 2 ranks bound one per core, in both passive-target modes (`-s flush`: lock + a flush
# per operation, or per window of 64 operations for the bandwidths, OSU's default; `-s lock`:
# lock/unlock per operation or window). BENCHES (default osu_acc_latency,
# osu_get_acc_latency, osu_fop_latency, osu_cas_latency, osu_put_latency) at MIN-MAX bytes
# (default 1-64; fop and cas: their one element); the bandwidths (put_bw, get_bw, put_bibw;
# put_bibw's modes are flush-less: `-s fence` and `-s pscw`) too. For every (benchmark,
# mode) and round the runtimes run one after the other: rmca, [before,] Open MPI, MPICH.
# MODES (default: the two above) names any of OSU's modes instead (flush flush_local lock
# lock_all pscw fence); put_bibw runs those of them it takes (fence, pscw).
# B: a directory with OSU's one-sided binaries built per MPI in B/rmca, B/ompi, B/mpich
# (`bench/osu-trees.sh osc` makes them, in /tmp/oscsm-osu). BEFORE=DIR (a
# directory holding an older build's libmpi.so) adds that library as runtime "before",
# the same rmca binaries; UCX=1 adds Open MPI over UCX (ompi-ucx). Prints, per (benchmark,
# mode, size), the median over ROUNDS of each runtime's figure (latency in us, bandwidth in
# MB/s), rmca's cost against the best peer (latency / best latency, or best bandwidth /
# bandwidth: below 1, rmca is faster), and the spread of rmca's rounds.
#   B=/tmp/oscsm-osu ROUNDS=3 bench/osc-small-osu.sh
#   BENCHES='put_bw get_bw put_bibw' BEFORE=/tmp/old-lib bench/osc-small-osu.sh
#   BENCHES='put_latency get_latency' MAX=65536 TIMEOUT=120 bench/osc-small-osu.sh
#   BENCHES=put_bw MIN=32768 MAX=32768 ROUNDS=5 bench/osc-small-osu.sh   one size's cells again
#   MODES='flush_local lock_all pscw fence' BENCHES='put_latency fop_latency' bench/osc-small-osu.sh
set -uo pipefail
rel=$(cd "$(dirname "$0")/.." && pwd)/target/release
B=${B:-/tmp/oscsm-osu}
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-2000}
MIN=${MIN:-1}
MAX=${MAX:-64}
TIMEOUT=${TIMEOUT:-60}
BEFORE=${BEFORE:-}
UCX=${UCX:-0}
BENCHES=${BENCHES:-acc_latency get_acc_latency fop_latency cas_latency put_latency}
MODES=${MODES:-}
for m in $MODES; do
  case $m in flush | flush_local | lock | lock_all | pscw | fence) ;;
  *) echo "osc-small-osu.sh: MODES: unknown mode $m (flush flush_local lock lock_all pscw fence)" >&2; exit 2 ;;
  esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for rt in rmca ompi mpich; do
  for b in $BENCHES; do
    [[ -x $B/$rt/osu_$b ]] || { echo "osc-small-osu.sh: $B/$rt/osu_$b is missing (bench/osu-trees.sh osc makes it)" >&2; exit 2; }
  done
done
if [[ -n $BEFORE && ! -e $BEFORE/libmpi.so ]]; then
  echo "osc-small-osu.sh: BEFORE=$BEFORE holds no libmpi.so" >&2
  exit 2
fi
# UCX=1: Open MPI over UCX too (`--mca pml ucx --mca osc ucx`, devices and transports
# unrestricted: shared memory here), column ompi-ucx, a peer in rmca/best like the others.
runtimes="rmca ${BEFORE:+before} ompi $( ((UCX)) && echo ompi-ucx) mpich"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
modes() { # benchmark $1's modes: MODES (put_bibw: those it takes) or by default the two
  # passive-target ones (put_bibw has none: its two active ones)
  if [[ -z $MODES ]]; then
    case $1 in put_bibw) echo "fence pscw" ;; *) echo "flush lock" ;; esac
  elif [[ $1 == put_bibw ]]; then
    for m in $MODES; do [[ $m == fence || $m == pscw ]] && echo "$m"; done
  else
    echo "$MODES"
  fi
}
echo "load before: $(uptime)"
for r in $(seq "$ROUNDS"); do
  for b in $BENCHES; do
    for mode in $(modes "$b"); do
      a="-w allocate -s $mode -i $ITERS -x $((ITERS / 10))"
      case $b in fop_latency | cas_latency) ;; *) a="$a -m $MIN:$MAX" ;; esac
      for rt in $runtimes; do
        # shellcheck disable=SC2086 # OSU's options are words on purpose
        case $rt in
        rmca) timeout "$TIMEOUT" "$rel/rmca-run" -n 2 --bind-to core "$B/rmca/osu_$b" $a ;;
        before) LD_LIBRARY_PATH=$BEFORE timeout "$TIMEOUT" "$rel/rmca-run" -n 2 --bind-to core "$B/rmca/osu_$b" $a ;;
        ompi) timeout "$TIMEOUT" mpirun.openmpi -n 2 --bind-to core "$B/ompi/osu_$b" $a ;;
        ompi-ucx) timeout "$TIMEOUT" mpirun.openmpi -n 2 --bind-to core --mca pml ucx --mca pml_ucx_tls any \
          --mca pml_ucx_devices any --mca osc ucx "$B/ompi/osu_$b" $a ;;
        mpich) timeout "$TIMEOUT" mpiexec.mpich -n 2 -bind-to core "$B/mpich/osu_$b" $a ;;
        esac >"$out/$b.$mode.$rt.$r" 2>&1
      done
    done
  done
done
echo "load after: $(uptime)"
w=6 # the mode column: as wide as the longest mode named
for m in $MODES; do ((${#m} > w)) && w=${#m}; done
printf "%-16s %-${w}s %5s" benchmark mode size
for rt in $runtimes; do printf ' %9s' "$rt"; done
printf ' %10s %16s\n' rmca/best "rmca min-max"
for b in $BENCHES; do
  bw=0
  [[ $b == *_bw || $b == *_bibw ]] && bw=1
  for mode in $(modes "$b"); do
    # The sizes rmca's first round printed (fop and cas: one line).
    sizes=$(awk '/^[0-9]/ { print $1 }' "$out/$b.$mode.rmca.1")
    for size in ${sizes:-1}; do
      vals() { # runtime: SIZE's figure in every round, sorted
        for r in $(seq "$ROUNDS"); do
          # (Numbers only: a crashed run's backtrace has lines that start with a size too.)
          awk -v s="$size" '$1 == s && $2 ~ /^[0-9.]+$/ { print $2 }' "$out/$b.$mode.$1.$r"
        done | sort -g
      }
      med() { vals "$1" | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'; }
      printf "%-16s %-${w}s %5s" "$b" "$mode" "$size"
      for rt in $runtimes; do printf ' %9s' "$(med "$rt")"; done
      x=$(med rmca) peers="$(med ompi) $( ((UCX)) && med ompi-ucx) $(med mpich)"
      spread=$(vals rmca | awk 'NR == 1 { lo = $1 } { hi = $1 } END { if (NR) printf "%s-%s", lo, hi; else print "-" }')
      # The best of the peers that printed a figure.
      ratio=$(awk -v x="$x" -v peers="$peers" -v bw="$bw" 'BEGIN {
        n = split(peers, v, " "); best = "-";
        for (i = 1; i <= n; i++) if (v[i] != "-" && (best == "-" || (bw ? v[i] > best : v[i] < best))) best = v[i];
        if (x == "-" || best == "-" || best == 0 || x == 0) print "-";
        else if (bw) printf "%.2f", best / x;
        else printf "%.2f", x / best }')
      printf ' %10s %16s\n' "$ratio" "$spread"
    done
  done
done
