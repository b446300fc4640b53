#!/usr/bin/env bash
# Instructions per message of the request path, counted by callgrind: deterministic, so two
# builds can be compared on a loaded or noisy machine where timings cannot show a few percent
# (instructions are not time: confirm with bench/compare-builds.sh on a quiet machine).
# Runs examples/self_window (a rank messaging itself, through btl-self: in windows of 64,
# i.e. receive posting, matching, completion and the scope bookkeeping; and by blocking sends
# and receives, the calls of the latency loop) at two round counts and
# prints the difference per message (send + receive), so that what a run does once cancels out.
# When TARGET_DIR has rmca-cc, bench/self_window.c (the same loop through the MPI C interface:
# MPI_Irecv, MPI_Isend, MPI_Waitall) is built with it and counted too: the C layer's cost;
# and the same window completed by the other calls, with statuses (C only, Rust column "-"):
# statuses (MPI_Waitall with an array of statuses: OSU's osu_bw), testall, waitsome, waitany,
# test (MPI_Test on each request in turn).
#   bench/instructions.sh TARGET_DIR [TARGET_DIR...]   (e.g. target/release /tmp/old/target/release)
set -euo pipefail
(($#)) || { echo "usage: instructions.sh TARGET_DIR [TARGET_DIR...]" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "instructions.sh: valgrind is not installed (scripts/install-deps.sh)" >&2; exit 2; }
small=100 large=1100 window=64
# Only the message loop is counted (callgrind's --toggle-collect): the Rust program's round
# functions, the C program's MPI calls. Init and finalize hold time-based waits that spin
# for as long as the (valgrind-slowed) run takes them, which made whole-program counts of the
# two round counts differ by more than the messages.
count() { # BINARY ROUNDS LOOP TOGGLE...
  local bin=$1 rounds=$2 loop=$3
  shift 3
  local toggles=()
  for f in "$@"; do toggles+=("--toggle-collect=$f"); done
  # The least of three runs, should anything left in the counted region wait on time.
  local best=
  for _ in 1 2 3; do
    # Only btl-self: the network BTLs' agent threads wake on a timer, which would add
    # instructions in proportion to the (valgrind-slowed) run time.
    local n
    n=$(RMCA_MCA_btl=self valgrind --tool=callgrind --callgrind-out-file=/dev/null "${toggles[@]}" "$bin" "$rounds" "$loop" 2>&1 |
      sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
    if [ -z "$best" ] || [ "$n" -lt "$best" ]; then best=$n; fi
  done
  echo "$best"
}
per_message() { # BINARY LOOP TOGGLE...
  local bin=$1 loop=$2 a b
  shift 2
  a=$(count "$bin" $small "$loop" "$@") b=$(count "$bin" $large "$loop" "$@")
  awk -v a="$a" -v b="$b" -v n=$(((large - small) * window)) 'BEGIN { printf "%.1f", (b - a) / n }'
}
here=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
printf '%-40s %-9s %14s %14s %8s\n' build loop "Rust instr/msg" "C instr/msg" "C/Rust"
for dir in "$@"; do
  bin=$dir/examples/self_window
  [ -x "$bin" ] || { echo "no $bin (cargo build --release -p rmca --example self_window)" >&2; exit 2; }
  cbin=
  if [ -x "$dir/rmca-cc" ]; then
    cbin=$scratch/self_window.$RANDOM
    "$dir/rmca-cc" -O2 "$here/self_window.c" -o "$cbin"
  fi
  for loop in window blocking statuses testall waitsome waitany test; do
    case $loop in
      window | blocking) rust=$(per_message "$bin" $loop "self_window::${loop}_round") ;;
      *) rust=- ;;
    esac
    c=- ratio=-
    if [ -n "$cbin" ]; then
      # Each function under both names: the two entry points of one implementation may be one
      # piece of code, which callgrind names after either symbol.
      case $loop in
        blocking) c=$(per_message "$cbin" $loop {,P}MPI_Send {,P}MPI_Recv) ;;
        # Only the completion call of the loop: toggles of calls the loop never makes upset
        # callgrind's counting of the others.
        window | statuses) c=$(per_message "$cbin" $loop {,P}MPI_Irecv {,P}MPI_Isend {,P}MPI_Waitall) ;;
        testall) c=$(per_message "$cbin" $loop {,P}MPI_Irecv {,P}MPI_Isend {,P}MPI_Testall) ;;
        waitsome) c=$(per_message "$cbin" $loop {,P}MPI_Irecv {,P}MPI_Isend {,P}MPI_Waitsome) ;;
        waitany) c=$(per_message "$cbin" $loop {,P}MPI_Irecv {,P}MPI_Isend {,P}MPI_Waitany) ;;
        test) c=$(per_message "$cbin" $loop {,P}MPI_Irecv {,P}MPI_Isend {,P}MPI_Test) ;;
      esac
      [ "$rust" = - ] || ratio=$(awk -v c="$c" -v r="$rust" 'BEGIN { printf "%.2f", c / r }')
    fi
    printf '%-40s %-9s %14s %14s %8s\n' "$dir" $loop "$rust" "$c" "$ratio"
  done
done
