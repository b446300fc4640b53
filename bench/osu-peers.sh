#!/usr/bin/env bash
# OSU's own point-to-point binaries, built for rmca and for the MPI peers, run in one sweep with
# the runtimes alternating (rmca's `rmca-bench osu_*` reimplements OSU's loops; this runs OSU
# itself, so nothing can hide behind a reimplementation). For each round, each benchmark runs
# once per runtime, 2 ranks bound to cores 0 and 1; the table holds each runtime's median over
# the rounds at every size, [min..max], and rmca's median over the best peer's (rates: above 1
# is better; latency: below 1).
#   bench/osu-peers.sh OSU_SRC [OUT] [ROUNDS]
#     OSU_SRC  an OSU micro-benchmarks 7.x tree with its generated configure, or a bare git
#              repository of one (HEAD is extracted), e.g. the snapshot `fetch` brings of
#              github:johnpzh/osu-micro-benchmarks-7.4-ext
#     OUT      default /tmp/osu-peers: builds in OUT/build-RUNTIME, raw output in OUT/raw,
#              the tables in OUT/tables.txt and one JSON object per row in OUT/rows.json
#     ROUNDS   default 5
#   BENCHES="osu_bw osu_latency" bench/osu-peers.sh ...   a subset (default: osu_latency osu_bw
#   osu_bibw osu_mbw_mr); RUNTIMES="rmca ompi" likewise (default: rmca ompi mpich).
#   OSU_DIR=c/mpi/one-sided OSU_ARGS="-w create" BENCHES="osu_put_latency osu_get_bw" ...
#   another OSU directory and extra arguments of every run (one-sided: window and sync kind);
#   RMCA_ARGS="--mca osc am" extra rmca-run options (RUNTIMES="rmca rmca2": a second rmca
#   column run with RMCA2_ARGS instead, e.g. to compare two components in the same sweep).
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
rel=$root/target/release
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS must be a positive integer, not '$rounds'" >&2; exit 2; }

cc_of() {
  case $1 in
  rmca | rmca2) echo "$rel/mpicc" ;;
  ompi) echo mpicc.openmpi ;;
  mpich) echo mpicc.mpich ;;
  *) echo "unknown runtime '$1' (valid: rmca ompi mpich)" >&2; exit 2 ;;
  esac
}
# The launcher line of a runtime, 2 ranks bound to cores.
launch_of() {
  case $1 in
  rmca) echo "$rel/rmca-run -n 2 --bind-to core ${RMCA_ARGS:-}" ;;
  rmca2) echo "$rel/rmca-run -n 2 --bind-to core ${RMCA2_ARGS:-}" ;;
  ompi) echo "mpirun.openmpi -n 2 --bind-to core --allow-run-as-root --oversubscribe" ;;
  mpich) echo "mpiexec.mpich -n 2 -bind-to core" ;;
  esac
}
for rt in $runtimes; do
  command -v "$(cc_of "$rt")" >/dev/null || { echo "$rt: $(cc_of "$rt") not found" >&2; exit 2; }
done

mkdir -p "$out/raw"
for rt in $runtimes; do
  if [[ $rt == rmca2 ]]; then # the same binaries as rmca's (listed first)
    ln -sfn build-rmca "$out/build-rmca2"
    continue
  fi
  b=$out/build-$rt
  if [[ -x $b/$osu_dir/${benches%% *} && $b/.cc -nt "$(cc_of "$rt" | xargs command -v)" ]]; then
    continue # built before with this compiler
  fi
  rm -rf "$b"
  mkdir -p "$b"
  if [[ -f $src/HEAD && -d $src/objects ]]; then
    git -C "$src" archive HEAD | tar -x -C "$b"
  else
    cp -a "$src/." "$b"
  fi
  # Timestamps from the copy can make make want to rerun automake: keep the generated files.
  (cd "$b" && touch aclocal.m4 configure $(find . -name Makefile.in) 2>/dev/null || true)
  echo "== building OSU for $rt (log $b/build.log)" >&2
  # A copied tree may hold objects built by another compiler: clean them first.
  (cd "$b" && ./configure CC="$(cc_of "$rt")" CXX="$(cc_of "$rt")" && make -C "$osu_dir" clean &&
    make -C "$osu_dir" $benches) \
    >"$b/build.log" 2>&1 || { tail -20 "$b/build.log" >&2; exit 1; }
  cc_of "$rt" >"$b/.cc"
done

echo "\$ bench/osu-peers.sh $src $out $rounds  (BENCHES='$benches' RUNTIMES='$runtimes' OSU_DIR='$osu_dir' OSU_ARGS='$osu_args' RMCA_ARGS='${RMCA_ARGS:-}' RMCA2_ARGS='${RMCA2_ARGS:-}')" >"$out/tables.txt"
echo "commit: $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo ' + uncommitted changes')" >>"$out/tables.txt"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')" >>"$out/tables.txt"
echo "load before: $(uptime)" >>"$out/tables.txt"
for ((r = 1; r <= rounds; r++)); do
  for bench in $benches; do
    for rt in $runtimes; do
      echo "round $r/$rounds: $bench on $rt" >&2
      # shellcheck disable=SC2046 # the launcher line is words on purpose
      timeout 600 $(launch_of "$rt") "$out/build-$rt/$osu_dir/$bench" -m 1:1048576 $osu_args \
        >"$out/raw/$bench.$rt.$r" 2>"$out/raw/$bench.$rt.$r.err" ||
        echo "$bench on $rt, round $r failed (see $out/raw/$bench.$rt.$r.err)" >&2
    done
  done
done
echo "load after:  $(uptime)" >>"$out/tables.txt"

python3 - "$out" "$rounds" "$benches" "$runtimes" <<'EOF' | tee -a "$out/tables.txt"
import json, os, statistics, sys

out, rounds, benches, runtimes = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
lower_better = {b for b in benches if b.endswith("latency")}
rows = open(os.path.join(out, "rows.json"), "w")
for bench in benches:
    vals = {}  # (runtime, size) -> [values]
    for rt in runtimes:
        for r in range(1, rounds + 1):
            try:
                lines = open(os.path.join(out, "raw", f"{bench}.{rt}.{r}")).read().splitlines()
            except FileNotFoundError:
                continue
            for line in lines:
                f = line.split()
                if len(f) >= 2 and f[0].isdigit():
                    try:
                        # osu_mbw_mr prints MB/s then messages/s: the bandwidth column.
                        vals.setdefault((rt, int(f[0])), []).append(float(f[1]))
                    except ValueError:
                        pass
    sizes = sorted({s for (_, s) in vals})
    unit = "us, lower is better" if bench in lower_better else "MB/s, higher is better"
    peers = [p for p in runtimes if not p.startswith("rmca")]
    print(f"\n# {bench} ({unit}), 2 ranks bound to cores, median [min..max] of {rounds} rounds")
    head = f"{'size':>8}" + "".join(f"{rt:>26}" for rt in runtimes)
    if "rmca" in runtimes and peers:
        head += f"{'rmca/best peer':>16}"
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
            line += f"{f'{med[rt]:.4g} [{min(v):.4g}..{max(v):.4g}]':>26}"
        ratio = None
        have = [med[p] for p in peers if p in med]
        if "rmca" in med and have:
            best = min(have) if bench in lower_better else max(have)
            ratio = med["rmca"] / best if best else None
            line += f"{ratio:>16.2f}" if ratio is not None else f"{'-':>16}"
        print(line)
        rows.write(json.dumps({"benchmark": bench, "size": s, "medians": med,
                               "runs": {rt: vals.get((rt, s), []) for rt in runtimes},
                               "rmca_over_best_peer": ratio}) + "\n")
EOF
