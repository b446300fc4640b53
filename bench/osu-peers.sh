#!/usr/bin/env bash
# OSU's own binaries, built for rmca and for the MPI peers, run in one sweep with the runtimes
# alternating (rmca's `rmca-bench osu_*` reimplements OSU's loops; this runs OSU itself, so
# nothing can hide behind a reimplementation). The one runner of OSU sweeps:
# bench/osu-coll-peers.sh is this with the collectives' defaults. For each round, each
# benchmark runs once per rank count and runtime; ranks are bound to cores while they fit the
# cores, else unbound (every runtime alike). The table holds each runtime's median over the
# rounds at every size, [min..max], and rmca's median over the best peer's (rates: above 1 is
# better; latencies: below 1), and with rmca-base, coll-base's median over rmca's.
#   bench/osu-peers.sh OSU_SRC [OUT] [ROUNDS]
#     OSU_SRC  an OSU micro-benchmarks 7.x tree with its generated configure, or a bare git
#              repository of one (HEAD is extracted): `bench/osu-trees.sh osu` makes one
#              (github:johnpzh/osu-micro-benchmarks-7.4-ext at 6a641d0, in /tmp/osu)
#     OUT      default /tmp/osu-peers: builds in OUT/build-{rmca,ompi,mpich}, raw output in
#              OUT/raw, the tables in OUT/tables.txt and one JSON object per row in OUT/rows.json
#     ROUNDS   default 5
#   BENCHES="osu_bw osu_latency" bench/osu-peers.sh ...   a subset (default: osu_latency osu_bw
#   osu_bibw osu_mbw_mr); RUNTIMES="rmca ompi" likewise (default: rmca ompi mpich; valid: rmca
#   rmca2 rmca-base ompi ompi-han ompi-sm mpich).
#   RANKS="2 4" rank counts (default 2); MAXSIZE=65536 the largest size (default 1048576);
#   ITERS=200 passes OSU `-i 200 -x 20` (default: OSU's own counts).
#   OSU_DIR=c/mpi/one-sided OSU_ARGS="-w create" BENCHES="osu_put_latency osu_get_bw" ...
#   another OSU directory and extra arguments of every run (one-sided: window and sync kind);
#   RMCA_ARGS="--mca osc am" extra rmca-run options (RUNTIMES="rmca rmca2": a second rmca
#   column run with RMCA2_ARGS instead, e.g. to compare two components in the same sweep);
#   RMCA_LIB=DIR, RMCA2_LIB=DIR run that column's OSU binaries on the libmpi.so in DIR
#   (LD_LIBRARY_PATH; e.g. a copy of an earlier build, for a before/after in one sweep);
#   rmca-base is rmca with `--mca coll base`, ompi-han and ompi-sm Open MPI with coll/han or
#   coll/sm forced.
# Needs target/release/{mpicc,rmca-run,libmpi.so} and the peers (scripts/install-deps.sh --bench).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src=${1:?usage: osu-peers.sh OSU_SRC [OUT] [ROUNDS]}
out=${2:-/tmp/osu-peers}
rounds=${3:-5}
benches=${BENCHES:-osu_latency osu_bw osu_bibw osu_mbw_mr}
osu_dir=${OSU_DIR:-c/mpi/pt2pt/standard}
osu_args=${OSU_ARGS:-}
runtimes=${RUNTIMES:-rmca ompi mpich}
ranks_list=${RANKS:-2}
maxsize=${MAXSIZE:-1048576}
iters=${ITERS:-}
rel=$root/target/release
cores=$(nproc)
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS must be a positive integer, not '$rounds'" >&2; exit 2; }
[[ $maxsize =~ ^[1-9][0-9]*$ ]] || { echo "MAXSIZE must be a positive integer, not '$maxsize'" >&2; exit 2; }
[[ -z $iters || $iters =~ ^[1-9][0-9]*$ ]] || { echo "ITERS must be a positive integer, not '$iters'" >&2; exit 2; }
for n in $ranks_list; do
  [[ $n =~ ^[1-9][0-9]*$ && $n -ge 2 ]] || { echo "RANKS: '$n' is not a rank count of at least 2" >&2; exit 2; }
done

# The build a runtime's binaries come from.
build_of() {
  case $1 in
  rmca | rmca2 | rmca-base) echo rmca ;;
  ompi | ompi-han | ompi-sm) echo ompi ;;
  mpich) echo mpich ;;
  *) echo "unknown runtime '$1' (valid: rmca rmca2 rmca-base ompi ompi-han ompi-sm mpich)" >&2; exit 2 ;;
  esac
}
# shellcheck source=bench/osu-build.sh
source "$(dirname "$0")/osu-build.sh"
# The launcher line of a runtime on $2 ranks: bound to cores while they fit.
launch_of() {
  local n=$2 bind=none
  ((n <= cores)) && bind=core
  local ompi="mpirun.openmpi -n $n --bind-to $bind --allow-run-as-root --oversubscribe"
  case $1 in
  rmca) echo "env ${RMCA_LIB:+LD_LIBRARY_PATH=$RMCA_LIB} $rel/rmca-run -n $n --bind-to $bind ${RMCA_ARGS:-}" ;;
  rmca2) echo "env ${RMCA2_LIB:+LD_LIBRARY_PATH=$RMCA2_LIB} $rel/rmca-run -n $n --bind-to $bind ${RMCA2_ARGS:-}" ;;
  rmca-base) echo "env ${RMCA_LIB:+LD_LIBRARY_PATH=$RMCA_LIB} $rel/rmca-run -n $n --bind-to $bind --mca coll base ${RMCA_ARGS:-}" ;;
  ompi) echo "$ompi" ;;
  ompi-han) echo "$ompi --mca coll_han_priority 100" ;;
  ompi-sm) echo "$ompi --mca coll_sm_priority 100" ;;
  mpich) echo "mpiexec.mpich -n $n -bind-to $bind" ;;
  esac
}
builds=$(for rt in $runtimes; do build_of "$rt"; done | sort -u)
for b in $builds; do
  command -v "$(cc_of "$b")" >/dev/null || { echo "$b: $(cc_of "$b") not found" >&2; exit 2; }
done

mkdir -p "$out/raw"
# shellcheck disable=SC2086 # the build list is words on purpose
osu_build "$out" "$src" "$osu_dir" "$benches" $builds || exit 1

echo "\$ bench/osu-peers.sh $src $out $rounds  (BENCHES='$benches' RUNTIMES='$runtimes' RANKS='$ranks_list' MAXSIZE=$maxsize ITERS='$iters' OSU_DIR='$osu_dir' OSU_ARGS='$osu_args' RMCA_ARGS='${RMCA_ARGS:-}' RMCA2_ARGS='${RMCA2_ARGS:-}' RMCA_LIB='${RMCA_LIB:-}' RMCA2_LIB='${RMCA2_LIB:-}')" >"$out/tables.txt"
echo "commit: $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo ' + uncommitted changes')" >>"$out/tables.txt"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'), $cores cores" >>"$out/tables.txt"
echo "load before: $(uptime)" >>"$out/tables.txt"
for ((r = 1; r <= rounds; r++)); do
  for n in $ranks_list; do
    for bench in $benches; do
      # osu_barrier has no sizes.
      args=(-m "1:$maxsize")
      [[ $bench == osu_barrier || $bench == osu_ibarrier ]] && args=()
      [[ -n $iters ]] && args+=(-i "$iters" -x "$((iters / 10 + 1))")
      for rt in $runtimes; do
        echo "round $r/$rounds: $bench on $n ranks of $rt" >&2
        # shellcheck disable=SC2046,SC2086 # the launcher line and OSU_ARGS are words on purpose
        timeout 600 $(launch_of "$rt" "$n") "$out/build-$(build_of "$rt")/$osu_dir/$bench" "${args[@]}" $osu_args \
          >"$out/raw/$bench.$n.$rt.$r" 2>"$out/raw/$bench.$n.$rt.$r.err" ||
          echo "$bench on $n ranks of $rt, round $r failed (see $out/raw/$bench.$n.$rt.$r.err)" >&2
      done
    done
  done
done
echo "load after:  $(uptime)" >>"$out/tables.txt"

OSU_RAW_DIR=$(dirname "$0") python3 - "$out" "$rounds" "$benches" "$ranks_list" "$runtimes" "$cores" <<'EOF' | tee -a "$out/tables.txt"
import json, os, statistics, sys

sys.path.insert(0, os.environ["OSU_RAW_DIR"])
from osu_raw import figure, read_raw  # noqa: E402

out, rounds = sys.argv[1], int(sys.argv[2])
benches, ranks_list, runtimes = sys.argv[3].split(), sys.argv[4].split(), sys.argv[5].split()
cores = int(sys.argv[6])
# Bandwidths and message rates: higher is better; every other OSU figure is a latency.
higher_better = {b for b in benches if b.endswith(("_bw", "_bibw", "_mbw_mr"))}
rows = open(os.path.join(out, "rows.json"), "w")
for bench in benches:
    for n in ranks_list:
        vals = read_raw(out, bench, n, runtimes, rounds)
        sizes = sorted({s for (_, s) in vals})
        higher = bench in higher_better
        unit = "MB/s, higher is better" if higher else "us, lower is better"
        peers = [p for p in runtimes if not p.startswith("rmca")]
        bound = "bound to cores" if int(n) <= cores else f"unbound, {cores} cores"
        print(f"\n# {bench}, {n} ranks ({bound}): {unit}; median [min..max] of {rounds} rounds")
        head = f"{'size':>8}" + "".join(f"{rt:>26}" for rt in runtimes)
        if "rmca" in runtimes and peers:
            head += f"{'rmca/best peer':>16}"
        if "rmca" in runtimes and "rmca-base" in runtimes:
            head += f"{'base/rmca':>10}"
        print(head)
        for s in sizes:
            line = f"{s:>8}"
            med = {}
            for rt in runtimes:
                v = vals.get((rt, s))
                if not v:
                    line += f"{'-':>26}"
                    continue
                med[rt] = statistics.median(v)
                line += f"{f'{figure(med[rt])} [{figure(min(v))}..{figure(max(v))}]':>26}"
            ratio = None
            have = [med[p] for p in peers if p in med]
            if "rmca" in runtimes and peers:
                best = (max(have) if higher else min(have)) if have else 0
                if "rmca" in med and best > 0:
                    ratio = med["rmca"] / best
                    line += f"{ratio:>16.2f}"
                else:
                    line += f"{'-':>16}"
            base = None
            if "rmca" in runtimes and "rmca-base" in runtimes:
                if med.get("rmca") and "rmca-base" in med:
                    base = med["rmca-base"] / med["rmca"]
                    line += f"{base:>10.2f}"
                else:
                    line += f"{'-':>10}"
            print(line)
            rows.write(json.dumps({"benchmark": bench, "ranks": int(n), "size": s, "medians": med,
                                   "runs": {rt: vals.get((rt, s), []) for rt in runtimes},
                                   "rmca_over_best_peer": ratio, "base_over_rmca": base}) + "\n")
EOF
