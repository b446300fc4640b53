#!/usr/bin/env bash
# Instructions per message of the request path, counted by callgrind: deterministic, so two
# builds can be compared on a loaded or noisy machine where timings cannot show a few percent
# (instructions are not time: confirm with bench/compare-builds.sh on a quiet machine).
# Runs examples/self_window (a rank messaging itself in windows of 64: receive posting,
# matching, completion and the scope bookkeeping, through btl-self) at two round counts and
# prints the difference per message (send + receive), so that init and finalize cancel out.
#   bench/instructions.sh TARGET_DIR [TARGET_DIR...]   (e.g. target/release /tmp/old/target/release)
set -euo pipefail
(($#)) || { echo "usage: instructions.sh TARGET_DIR [TARGET_DIR...]" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "instructions.sh: valgrind is not installed (scripts/install-deps.sh)" >&2; exit 2; }
small=100 large=1100 window=64
count() {
  # The least of three runs: a run sometimes spins in a time-based wait (init, finalize), and
  # those instructions have nothing to do with the messages.
  local best=
  for _ in 1 2 3; do
    # Only btl-self: the network BTLs' agent threads wake on a timer, which would add
    # instructions in proportion to the (valgrind-slowed) run time.
    local n
    n=$(RMCA_MCA_btl=self valgrind --tool=callgrind --callgrind-out-file=/dev/null "$1" "$2" 2>&1 |
      sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
    if [ -z "$best" ] || [ "$n" -lt "$best" ]; then best=$n; fi
  done
  echo "$best"
}
printf '%-50s %12s\n' build "instr/message"
for dir in "$@"; do
  bin=$dir/examples/self_window
  [ -x "$bin" ] || { echo "no $bin (cargo build --release -p rmca --example self_window)" >&2; exit 2; }
  a=$(count "$bin" $small) b=$(count "$bin" $large)
  awk -v d="$dir" -v a="$a" -v b="$b" -v n=$(((large - small) * window)) \
    'BEGIN { printf "%-50s %12.1f\n", d, (b - a) / n }'
done
