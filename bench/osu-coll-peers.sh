#!/usr/bin/env bash
# OSU's own blocking collective benchmarks, built for rmca and for the MPI peers, run in one
# sweep with the runtimes alternating, at several rank counts on this node. Runtimes: rmca
# (its default coll stack: coll-sm on one node), rmca-base (`--mca coll base`: coll-base's
# point-to-point schedules), ompi (Open MPI's default, coll/tuned), ompi-han (coll/han
# forced), ompi-sm (coll/sm forced), mpich. Ranks are bound to cores while they fit the
# cores, else unbound (every runtime alike). The table holds each runtime's median latency
# over the rounds at every size, [min..max], rmca's median over the best peer's (below 1 is
# better) and rmca-base's over rmca's.
#   bench/osu-coll-peers.sh OSU_SRC [OUT] [ROUNDS]
#     OSU_SRC  an OSU micro-benchmarks 7.x tree with its generated configure (e.g. /tmp/osu),
#              or a bare git repository of one (HEAD is extracted)
#     OUT      default /tmp/osu-coll: builds in OUT/build-{rmca,ompi,mpich}, raw output in
#              OUT/raw, the tables in OUT/tables.txt, one JSON object per row in OUT/rows.json
#     ROUNDS   default 3
#   BENCHES="osu_barrier osu_allreduce" (default: osu_barrier osu_bcast osu_reduce
#   osu_allreduce osu_allgather), RANKS="2 4" (default), MAXSIZE=65536 (default),
#   RUNTIMES="rmca rmca-base ompi ompi-han ompi-sm mpich" (default) restrict the sweep;
#   ITERS=200 passes OSU `-i 200 -x 20` (default: OSU's own counts; oversubscribed MPICH
#   takes milliseconds per collective, so its 4-rank runs need fewer).
# Needs target/release/{mpicc,rmca-run,libmpi.so} and the peers (scripts/install-deps.sh --bench).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src=${1:?usage: osu-coll-peers.sh OSU_SRC [OUT] [ROUNDS]}
out=${2:-/tmp/osu-coll}
rounds=${3:-3}
benches=${BENCHES:-osu_barrier osu_bcast osu_reduce osu_allreduce osu_allgather}
ranks_list=${RANKS:-2 4}
maxsize=${MAXSIZE:-65536}
iters=${ITERS:-}
runtimes=${RUNTIMES:-rmca rmca-base ompi ompi-han ompi-sm mpich}
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
  rmca | rmca-base) echo rmca ;;
  ompi | ompi-han | ompi-sm) echo ompi ;;
  mpich) echo mpich ;;
  *) echo "unknown runtime '$1' (valid: rmca rmca-base ompi ompi-han ompi-sm mpich)" >&2; exit 2 ;;
  esac
}
cc_of() {
  case $1 in
  rmca) echo "$rel/mpicc" ;;
  ompi) echo mpicc.openmpi ;;
  mpich) echo mpicc.mpich ;;
  esac
}
# The launcher line of a runtime on $2 ranks: bound to cores while they fit.
launch_of() {
  local n=$2 bind=none
  ((n <= cores)) && bind=core
  case $1 in
  rmca) echo "$rel/rmca-run -n $n --bind-to $bind" ;;
  rmca-base) echo "$rel/rmca-run -n $n --bind-to $bind --mca coll base" ;;
  ompi) echo "mpirun.openmpi -n $n --bind-to $bind --allow-run-as-root --oversubscribe" ;;
  ompi-han) echo "mpirun.openmpi -n $n --bind-to $bind --allow-run-as-root --oversubscribe --mca coll_han_priority 100" ;;
  ompi-sm) echo "mpirun.openmpi -n $n --bind-to $bind --allow-run-as-root --oversubscribe --mca coll_sm_priority 100" ;;
  mpich) echo "mpiexec.mpich -n $n -bind-to $bind" ;;
  esac
}
builds=$(for rt in $runtimes; do build_of "$rt"; done | sort -u)
for b in $builds; do
  command -v "$(cc_of "$b")" >/dev/null || { echo "$b: $(cc_of "$b") not found" >&2; exit 2; }
done

mkdir -p "$out/raw"
for rt in $builds; do
  b=$out/build-$rt
  if [[ -x $b/c/mpi/collective/blocking/osu_allgather && $b/.cc -nt "$(cc_of "$rt" | xargs command -v)" ]]; then
    continue # built before with this compiler
  fi
  rm -rf "$b"
  mkdir -p "$b"
  if [[ -f $src/HEAD && -d $src/objects ]]; then
    git -C "$src" archive HEAD | tar -x -C "$b"
  else
    cp -a "$src/." "$b"
  fi
  (cd "$b" && touch aclocal.m4 configure $(find . -name Makefile.in) 2>/dev/null || true)
  echo "== building OSU collectives for $rt (log $b/build.log)" >&2
  # A copied tree may hold objects built by another compiler: clean them first.
  (cd "$b" && ./configure CC="$(cc_of "$rt")" CXX="$(cc_of "$rt")" && rm -f c/util/*.o &&
    make -C c/mpi/collective/blocking clean &&
    make -C c/mpi/collective/blocking osu_barrier osu_bcast osu_reduce osu_allreduce osu_allgather) \
    >"$b/build.log" 2>&1 || { tail -20 "$b/build.log" >&2; exit 1; }
  cc_of "$rt" >"$b/.cc"
done

echo "\$ bench/osu-coll-peers.sh $src $out $rounds  (BENCHES='$benches' RANKS='$ranks_list' MAXSIZE=$maxsize ITERS='$iters' RUNTIMES='$runtimes')" >"$out/tables.txt"
echo "commit: $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo ' + uncommitted changes')" >>"$out/tables.txt"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'), $cores cores" >>"$out/tables.txt"
echo "load before: $(uptime)" >>"$out/tables.txt"
for ((r = 1; r <= rounds; r++)); do
  for n in $ranks_list; do
    for bench in $benches; do
      args=(-m "1:$maxsize")
      [[ $bench == osu_barrier ]] && args=()
      [[ -n $iters ]] && args+=(-i "$iters" -x "$((iters / 10 + 1))")
      for rt in $runtimes; do
        echo "round $r/$rounds: $bench on $n ranks of $rt" >&2
        # shellcheck disable=SC2046 # the launcher line is words on purpose
        timeout 600 $(launch_of "$rt" "$n") "$out/build-$(build_of "$rt")/c/mpi/collective/blocking/$bench" "${args[@]}" \
          >"$out/raw/$bench.$n.$rt.$r" 2>"$out/raw/$bench.$n.$rt.$r.err" ||
          echo "$bench on $n ranks of $rt, round $r failed (see $out/raw/$bench.$n.$rt.$r.err)" >&2
      done
    done
  done
done
echo "load after:  $(uptime)" >>"$out/tables.txt"

python3 - "$out" "$rounds" "$benches" "$ranks_list" "$runtimes" "$cores" <<'EOF' | tee -a "$out/tables.txt"
import json, os, statistics, sys

out, rounds = sys.argv[1], int(sys.argv[2])
benches, ranks_list, runtimes = sys.argv[3].split(), sys.argv[4].split(), sys.argv[5].split()
cores = int(sys.argv[6])
rows = open(os.path.join(out, "rows.json"), "w")
for bench in benches:
    for n in ranks_list:
        vals = {}  # (runtime, size) -> [values]
        for rt in runtimes:
            for r in range(1, rounds + 1):
                try:
                    lines = open(os.path.join(out, "raw", f"{bench}.{n}.{rt}.{r}")).read().splitlines()
                except FileNotFoundError:
                    continue
                for line in lines:
                    f = line.split()
                    try:
                        if len(f) == 1:  # osu_barrier: the latency alone
                            vals.setdefault((rt, 0), []).append(float(f[0]))
                        elif len(f) >= 2 and f[0].isdigit():
                            vals.setdefault((rt, int(f[0])), []).append(float(f[1]))
                    except ValueError:
                        pass
        sizes = sorted({s for (_, s) in vals})
        peers = [p for p in runtimes if not p.startswith("rmca")]
        bound = "bound to cores" if int(n) <= cores else f"unbound, {cores} cores"
        print(f"\n# {bench}, {n} ranks ({bound}): us, lower is better; median [min..max] of {rounds} rounds")
        head = f"{'size':>7}" + "".join(f"{rt:>24}" for rt in runtimes)
        if "rmca" in runtimes and peers:
            head += f"{'rmca/best peer':>15}"
        if "rmca" in runtimes and "rmca-base" in runtimes:
            head += f"{'base/rmca':>10}"
        print(head)
        for s in sizes:
            line = f"{s:>7}"
            med = {}
            for rt in runtimes:
                v = vals.get((rt, s))
                if not v:
                    line += f"{'-':>24}"
                    continue
                med[rt] = statistics.median(v)
                line += f"{f'{med[rt]:.3g} [{min(v):.3g}..{max(v):.3g}]':>24}"
            ratio = None
            have = [med[p] for p in peers if p in med]
            if "rmca" in runtimes and peers:
                if "rmca" in med and have and min(have) > 0:
                    ratio = med["rmca"] / min(have)
                    line += f"{ratio:>15.2f}"
                else:
                    line += f"{'-':>15}"
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
