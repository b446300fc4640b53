#!/usr/bin/env bash
# Reductions with a user-defined operation (MPI_Op_create), OSU's loop (bench/coll_userop.c):
# MPI_Allreduce and MPI_Reduce on floats with a commutative user sum (`user`), the same sum
# declared non-commutative (`ordered`) and MPI_SUM (`sum`), built with each MPI's wrapper and
# run with the runtimes alternating, ROUNDS rounds; ranks bound to cores while they fit.
# The table holds each runtime's median latency (us, lower is better) [min..max] and rmca's
# median over the best peer's.
#   bench/coll-userop.sh [OUT] [ROUNDS]      (default /tmp/coll-userop, 3)
#   RANKS="2 4" (default), CALLS="allreduce reduce", OPS="user ordered sum", ITERS=1000,
#   MAXSIZE=16384, RUNTIMES="rmca rmca2 ompi mpich" (default "rmca ompi mpich");
#   RMCA_LIB=DIR, RMCA2_LIB=DIR run that column on the libmpi.so in DIR (a before/after).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
rel=$root/target/release
out=${1:-/tmp/coll-userop}
rounds=${2:-3}
ranks_list=${RANKS:-2 4}
calls=${CALLS:-allreduce reduce}
ops=${OPS:-user ordered sum}
iters=${ITERS:-1000}
maxsize=${MAXSIZE:-16384}
runtimes=${RUNTIMES:-rmca ompi mpich}
cores=$(nproc)
mkdir -p "$out/raw"
build_of() { case $1 in rmca*) echo rmca ;; *) echo "$1" ;; esac; }
cc_of() { case $1 in rmca) echo "$rel/mpicc" ;; ompi) echo mpicc.openmpi ;; mpich) echo mpicc.mpich ;; esac; }
for b in $(for rt in $runtimes; do build_of "$rt"; done | sort -u); do
  "$(cc_of "$b")" -O2 "$here/coll_userop.c" -o "$out/coll_userop.$b"
done
launch_of() {
  local n=$2 bind=none
  ((n <= cores)) && bind=core
  case $1 in
  rmca) echo "env ${RMCA_LIB:+LD_LIBRARY_PATH=$RMCA_LIB} $rel/rmca-run -n $n --bind-to $bind" ;;
  rmca2) echo "env ${RMCA2_LIB:+LD_LIBRARY_PATH=$RMCA2_LIB} $rel/rmca-run -n $n --bind-to $bind" ;;
  ompi) echo "mpirun.openmpi -n $n --bind-to $bind --allow-run-as-root --oversubscribe" ;;
  mpich) echo "mpiexec.mpich -n $n -bind-to $bind" ;;
  *) echo "unknown runtime '$1' (valid: rmca rmca2 ompi mpich)" >&2; exit 2 ;;
  esac
}
{
  echo "\$ bench/coll-userop.sh $out $rounds  (RANKS='$ranks_list' CALLS='$calls' OPS='$ops' ITERS=$iters MAXSIZE=$maxsize RUNTIMES='$runtimes' RMCA_LIB='${RMCA_LIB:-}' RMCA2_LIB='${RMCA2_LIB:-}')"
  echo "commit: $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo ' + uncommitted changes')"
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'), $cores cores"
  echo "load before: $(uptime)"
} >"$out/tables.txt"
for ((r = 1; r <= rounds; r++)); do
  for n in $ranks_list; do
    for call in $calls; do
      for op in $ops; do
        for rt in $runtimes; do
          echo "round $r/$rounds: $call $op on $n ranks of $rt" >&2
          # shellcheck disable=SC2046 # the launcher line is words on purpose
          timeout 300 $(launch_of "$rt" "$n") "$out/coll_userop.$(build_of "$rt")" "$call" "$op" "$iters" "$maxsize" \
            >"$out/raw/$call.$op.$n.$rt.$r" 2>"$out/raw/$call.$op.$n.$rt.$r.err" ||
            echo "$call $op on $n ranks of $rt, round $r failed (see $out/raw/$call.$op.$n.$rt.$r.err)" >&2
        done
      done
    done
  done
done
echo "load after:  $(uptime)" >>"$out/tables.txt"
python3 - "$out" "$rounds" "$calls" "$ops" "$ranks_list" "$runtimes" "$cores" <<'EOF' | tee -a "$out/tables.txt"
import os, statistics, sys

out, rounds = sys.argv[1], int(sys.argv[2])
calls, ops, ranks_list, runtimes = (a.split() for a in sys.argv[3:7])
cores = int(sys.argv[7])
peers = [p for p in runtimes if not p.startswith("rmca")]
for call in calls:
    for op in ops:
        for n in ranks_list:
            vals = {}
            for rt in runtimes:
                for r in range(1, rounds + 1):
                    try:
                        lines = open(os.path.join(out, "raw", f"{call}.{op}.{n}.{rt}.{r}")).read().split("\n")
                    except OSError:
                        continue
                    for line in lines:
                        p = line.split()
                        if len(p) == 2 and p[0].isdigit():
                            vals.setdefault((rt, int(p[0])), []).append(float(p[1]))
            bound = "bound to cores" if int(n) <= cores else f"unbound, {cores} cores"
            print(f"\n# {call} with {op}, {n} ranks ({bound}): us, lower is better; median [min..max] of {rounds} rounds")
            head = f"{'size':>8}" + "".join(f"{rt:>24}" for rt in runtimes)
            if "rmca" in runtimes and peers:
                head += f"{'rmca/best peer':>16}"
            print(head)
            for s in sorted({s for (_, s) in vals}):
                line, med = f"{s:>8}", {}
                for rt in runtimes:
                    v = vals.get((rt, s))
                    if not v:
                        line += f"{'-':>24}"
                        continue
                    med[rt] = statistics.median(v)
                    line += f"{f'{med[rt]:.2f} [{min(v):.2f}..{max(v):.2f}]':>24}"
                best = [med[p] for p in peers if p in med]
                if "rmca" in med and best:
                    line += f"{med['rmca'] / min(best):>16.2f}"
                print(line)
EOF
