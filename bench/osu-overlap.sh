#!/usr/bin/env bash
# OSU 7.x's non-blocking collective overlap (osu_iallreduce, osu_ibcast: "Overall", "Compute",
# "Pure Comm." and "Overlap(%)") at 2 ranks bound to cores, rmca with and without its
# asynchronous progress thread (mpi_async_progress) next to Open MPI and MPICH with and without
# MPICH's (MPIR_CVAR_ASYNC_PROGRESS=1), the runtimes alternating in every round. Prints each
# variant's median over the rounds of the overlap and of the overall time per size.
#   bench/osu-overlap.sh OSU_SRC [OUT] [ROUNDS]
#     OSU_SRC  an OSU micro-benchmarks 7.x tree (e.g. /tmp/osu); only its C sources are used
#     OUT      default /tmp/osu-overlap (builds, raw outputs, tables.txt)
#     ROUNDS   default 3
#   SIZES=1024:1048576 ITERS=200 bench/osu-overlap.sh ...   OSU's -m and -i
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src=${1:?usage: osu-overlap.sh OSU_SRC [OUT] [ROUNDS]}
out=${2:-/tmp/osu-overlap}
rounds=${3:-3}
sizes=${SIZES:-1024:1048576}
iters=${ITERS:-200}
rel=$root/target/release
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS must be a positive integer, not '$rounds'" >&2; exit 2; }
[[ -f $src/c/mpi/collective/non_blocking/osu_iallreduce.c ]] || { echo "$src is not an OSU 7.x tree (no c/mpi/collective/non_blocking/osu_iallreduce.c)" >&2; exit 2; }
benches="osu_iallreduce osu_ibcast"
variants="rmca rmca-async ompi mpich mpich-async"

cc_of() {
  case $1 in
  rmca*) echo "$rel/mpicc" ;;
  ompi*) echo mpicc.openmpi ;;
  mpich*) echo mpicc.mpich ;;
  esac
}
run_of() { # VARIANT: the launcher line
  case $1 in
  rmca) echo "$rel/rmca-run -n 2 --bind-to core" ;;
  rmca-async) echo "$rel/rmca-run -n 2 --bind-to core --mca mpi_async_progress 1" ;;
  ompi) echo "mpirun.openmpi -n 2 --bind-to core --allow-run-as-root --oversubscribe" ;;
  mpich) echo "mpiexec.mpich -n 2 -bind-to core" ;;
  mpich-async) echo "mpiexec.mpich -n 2 -bind-to core -genv MPIR_CVAR_ASYNC_PROGRESS 1" ;;
  esac
}
mkdir -p "$out/raw"
for rt in rmca ompi mpich; do
  for b in $benches; do
    # shellcheck disable=SC2046
    "$(cc_of $rt)" -O2 -I"$src/c/util" "$src/c/mpi/collective/non_blocking/$b.c" \
      $(ls "$src"/c/util/osu_util{,_mpi,_validation,_graph,_papi}.c 2>/dev/null) \
      -o "$out/$b.$rt" -lpthread -lm 2>"$out/$b.$rt.build.log" ||
      { cat "$out/$b.$rt.build.log" >&2; exit 1; }
  done
done
{
  echo "\$ bench/osu-overlap.sh $src $out $rounds  (SIZES=$sizes ITERS=$iters)"
  echo "commit: $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo ' + uncommitted changes')"
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "load before: $(uptime)"
} >"$out/tables.txt"
for ((r = 1; r <= rounds; r++)); do
  for b in $benches; do
    for v in $variants; do
      rt=${v%-async}
      echo "round $r/$rounds: $b on $v" >&2
      # shellcheck disable=SC2046
      timeout 600 $(run_of "$v") "$out/$b.$rt" -m "$sizes" -i "$iters" \
        >"$out/raw/$b.$v.$r" 2>"$out/raw/$b.$v.$r.err" ||
        echo "$b on $v, round $r failed (see $out/raw/$b.$v.$r.err)" >&2
    done
  done
done
echo "load after:  $(uptime)" >>"$out/tables.txt"
python3 - "$out" "$rounds" "$benches" "$variants" <<'PY' | tee -a "$out/tables.txt"
import os, statistics, sys
out, rounds, benches, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
for b in benches:
    ov, tot = {}, {}
    for v in variants:
        for r in range(1, rounds + 1):
            try:
                lines = open(os.path.join(out, "raw", f"{b}.{v}.{r}")).read().splitlines()
            except FileNotFoundError:
                continue
            for line in lines:
                f = line.split()
                # size, overall, compute, pure comm, overlap(%)
                if len(f) >= 5 and f[0].isdigit():
                    try:
                        tot.setdefault((v, int(f[0])), []).append(float(f[1]))
                        ov.setdefault((v, int(f[0])), []).append(float(f[4]))
                    except ValueError:
                        pass
    sizes = sorted({s for (_, s) in ov})
    print(f"\n# {b}: overlap % (higher is better) | overall us, median of {rounds} rounds, 2 ranks bound to cores")
    print(f"{'size':>8}" + "".join(f"{v:>14}" for v in variants) + " |" + "".join(f"{v:>14}" for v in variants))
    for s in sizes:
        line = f"{s:>8}"
        for d in (ov, tot):
            for v in variants:
                x = d.get((v, s))
                line += f"{statistics.median(x):>14.1f}" if x else f"{'-':>14}"
            if d is ov:
                line += " |"
        print(line)
PY
