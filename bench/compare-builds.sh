#!/usr/bin/env bash
# Compares two builds of rmca on the same benchmark, in the same run: the two rmca-bench
# binaries (each uses the rmca-run next to it) alternate, one job each per round, so that the
# machine's changes of mood hit both alike. Prints each build's median per benchmark,
# configuration and size, and the ratio NEW/OLD (latency: below 1 is faster; rates and
# bandwidth: above 1 is faster). For claims such as "this refactoring left the small-message
# figures unchanged". Run it on a quiet machine.
#   bench/compare-builds.sh OLD/target/release/rmca-bench NEW/target/release/rmca-bench [ROUNDS] [-- ARGS]
# ARGS default to: latency,msgrate -n 2 --min 8 --max 8 --conf ob1+shm --conf dr+shm
set -euo pipefail
old=${1:?usage: compare-builds.sh OLD_RMCA_BENCH NEW_RMCA_BENCH [ROUNDS] [-- ARGS]}
new=${2:?usage: compare-builds.sh OLD_RMCA_BENCH NEW_RMCA_BENCH [ROUNDS] [-- ARGS]}
shift 2
rounds=11
if [[ $# -gt 0 && $1 != -- ]]; then rounds=$1; shift; fi
[[ ${1:-} == -- ]] && shift
args=("$@")
((${#args[@]})) || args=(latency,msgrate -n 2 --min 8 --max 8 --conf ob1+shm --conf dr+shm)
for b in "$old" "$new"; do [ -x "$b" ] || { echo "not an executable: $b" >&2; exit 2; }; done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "\$ compare-builds.sh $old $new $rounds -- ${args[*]}"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); load before: $(uptime)"
for ((i = 0; i < rounds; i++)); do
  # Alternate which build goes first, too.
  if ((i % 2)); then order=(new old); else order=(old new); fi
  for which in "${order[@]}"; do
    bin=$old; [ "$which" = new ] && bin=$new
    "$bin" "${args[@]}" --runs 1 --json 2>>"$tmp/$which.log" | sed "s/^/$which /" >>"$tmp/lines"
  done
done
echo "load after: $(uptime)"
python3 - "$tmp/lines" <<'PY'
import json, statistics, sys
vals = {}
for line in open(sys.argv[1]):
    which, _, js = line.partition(" ")
    try:
        o = json.loads(js)
    except ValueError:
        continue
    for key in ("median",):
        if key in o:
            k = (o.get("benchmark"), o.get("config"), o.get("size"), o.get("metric", ""))
            vals.setdefault(k, {}).setdefault(which, []).append(o[key])
print(f"{'benchmark':<10} {'config':<10} {'size':>8} {'metric':<10} {'old':>10} {'new':>10} {'new/old':>8}  runs")
for k in sorted(vals, key=lambda k: tuple(str(x) for x in k)):
    o, n = vals[k].get("old", []), vals[k].get("new", [])
    if not o or not n:
        continue
    mo, mn = statistics.median(o), statistics.median(n)
    ratio = mn / mo if mo else float("nan")
    print(f"{k[0]:<10} {k[1]:<10} {k[2]:>8} {k[3]:<10} {mo:>10.4g} {mn:>10.4g} {ratio:>8.3f}  {len(o)}/{len(n)}")
PY
