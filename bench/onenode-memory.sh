#!/usr/bin/env bash
# Peak memory per rank of a one-node job: OSU's osu_mbw_mr at 8 B (every rank in a pair,
# `-m 8:8`) at each rank count, under rmca (pml ob1 and dr, default BTLs) and the MPI peers,
# the runtimes alternating in each round. Per rank: VmHWM (`/usr/bin/time -f %M`, the rank
# wrapped by it), the largest over the ranks; for rmca also the profile's accounted peak
# (`--mca profile 1`: `btl.ud`, `btl.rc`, `btl.shm`, the PML, their sum), largest per rank.
# Medians over the rounds.
#   bench/onenode-memory.sh [RANKS...]      default: 2 4 8
#   ROUNDS=3 (default); OSU=/tmp/osu-peers (`bench/osu-trees.sh peers`, bench/osu-peers.sh's builds:
#   OSU/build-{rmca,ompi,mpich}); RUNTIMES="rmca-ob1 rmca-dr ompi mpich" (default; also
#   rmca-ob1-before and rmca-dr-before: the same on the libmpi.so in $BEFORE_LIB, e.g.
#   `$(bench/lib-at.sh COMMIT)`, through LD_LIBRARY_PATH).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
osu=${OSU:-/tmp/osu-peers}
rounds=${ROUNDS:-3}
runtimes=${RUNTIMES:-rmca-ob1 rmca-dr ompi mpich}
ranks_list=${*:-2 4 8}
rel=$root/target/release
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bin() { echo "$osu/build-$1/c/mpi/pt2pt/standard/osu_mbw_mr"; }
args=(-m 8:8 -i 200 -x 20)

# run RUNTIME N OUT: one job; OUT gets "rss_kb K" lines (one per rank) and rmca's profile.
run() {
  local rt=$1 n=$2 out=$3 pml lib=""
  case $rt in
    rmca-*)
      pml=${rt#rmca-}; pml=${pml%-before}
      [[ $rt == *-before ]] && lib=${BEFORE_LIB:?BEFORE_LIB for $rt}
      LD_LIBRARY_PATH=$lib${lib:+:}${LD_LIBRARY_PATH:-} timeout 120 "$rel/rmca-run" -n "$n" \
        --mca pml "$pml" --mca profile 1 --mca profile_json "$out.json" --timeout 100 \
        /usr/bin/time -f "rss_kb %M" "$(bin rmca)" "${args[@]}" >"$out" 2>&1 ;;
    ompi)
      timeout 120 mpirun.openmpi --allow-run-as-root --oversubscribe -np "$n" \
        /usr/bin/time -f "rss_kb %M" "$(bin ompi)" "${args[@]}" >"$out" 2>&1 ;;
    mpich)
      timeout 120 mpirun.mpich -np "$n" \
        /usr/bin/time -f "rss_kb %M" "$(bin mpich)" "${args[@]}" >"$out" 2>&1 ;;
    *) echo "unknown runtime $rt" >&2; return 1 ;;
  esac
}

echo "# load before: $(uptime | sed 's/.*average: //')" >&2
for ((round = 1; round <= rounds; round++)); do
  for n in $ranks_list; do
    for rt in $runtimes; do
      out=$tmp/$rt.$n.$round
      if ! run "$rt" "$n" "$out"; then
        echo "# $rt at $n ranks, round $round failed: $(tail -3 "$out" | tr '\n' ' ')" >&2
        rm -f "$out.json"
      fi
    done
  done
done
echo "# load after: $(uptime | sed 's/.*average: //')" >&2

python3 - "$tmp" "$rounds" "$ranks_list" "$runtimes" <<'EOF'
import json, os, re, statistics, sys
tmp, rounds, ranks, runtimes = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
comps = ["btl.ud", "btl.rc", "btl.shm", "pml"]
def med(v):
    return f"{statistics.median(v):.1f}" if v else "-"
print(f"# one-node memory per rank (MiB, lower is better), osu_mbw_mr 8 B, median of {rounds} rounds;")
print("# VmHWM: largest over the ranks; rmca's accounted peaks (profile): largest rank")
hdr = ["ranks", "runtime", "VmHWM"] + comps + ["accounted"]
print("".join(f"{h:>18}" if i > 1 else f"{h:>6}" if i == 0 else f"{h:>16}" for i, h in enumerate(hdr)))
for n in ranks:
    for rt in runtimes:
        rss, acc = [], {c: [] for c in comps + ["accounted"]}
        for r in range(1, rounds + 1):
            out = f"{tmp}/{rt}.{n}.{r}"
            if not os.path.exists(out):
                continue
            kb = [int(x) for x in re.findall(r"rss_kb (\d+)", open(out).read())]
            if len(kb) == int(n):
                rss.append(max(kb) / 1024)
            if os.path.exists(out + ".json"):
                p = json.load(open(out + ".json"))
                mem = p.get("memory", {})
                for c in comps:
                    keys = [k for k in mem if k == c or (c == "pml" and k.startswith("pml."))]
                    acc[c].append(sum(mem[k]["peak_max_per_rank"] for k in keys) / 2**20)
                per = [sum(m["peak"] for m in pr["memory"].values()) for pr in p["per_rank"]]
                acc["accounted"].append(max(per) / 2**20)
        row = [n, rt, med(rss)] + [med(acc[c]) for c in comps + ["accounted"]]
        print("".join(f"{x:>18}" if i > 1 else f"{x:>6}" if i == 0 else f"{x:>16}" for i, x in enumerate(row)))
EOF
