#!/usr/bin/env bash
# Runs every rmca-bench suite once and keeps each table, its exact command, the date and the
# load (uptime) before and after, in OUT (default bench/out-<date>), for bench/RESULTS.md.
#   [SUITES="wqe rc-mem"] bench/run-all.sh [OUT] [extra rmca-bench options, e.g. --runs 5]
# Needs `cargo build --release --workspace --bins --examples` (rmca-bench finds rmca-run next
# to itself) and, for the rxd peer, Debian libfabric-bin (scripts/install-deps.sh --bench).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${RMCA_BENCH:-${CARGO_TARGET_DIR:-$root/target}/release/rmca-bench}
out=${1:-$root/bench/out-$(date -u +%Y%m%dT%H%M%SZ)}
shift || true
mkdir -p "$out"
status=0
for suite in ${SUITES:-ud-reliability ud-scaling wqe rc-mem rc-conn}; do
  f="$out/$suite.txt"
  {
    echo "\$ rmca-bench --suite $suite $*"
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "load before: $(uptime)"
  } >"$f"
  "$bin" --suite "$suite" "$@" --json >"$out/$suite.json" 2>"$out/$suite.log"
  rc=$?
  ((rc)) && status=$rc
  {
    echo "load after:  $(uptime)"
    echo "exit status: $rc"
    echo
    # The tables (stderr with --json), without the per-job progress lines.
    grep -v '^run [0-9]*/' "$out/$suite.log"
  } >>"$f"
  cat "$f"
done
exit $status
