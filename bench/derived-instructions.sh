#!/usr/bin/env bash
# Instructions per message of the C layer's handle-table lookups (derived datatype, user op),
# counted by callgrind as bench/instructions.sh counts the predefined-type path: the loops of
# bench/derived_window.c (dtype: MPI_Irecv/MPI_Isend of a derived type to self, MPI_Waitall;
# op: MPI_Reduce_local with a user op) at two round counts, the difference per message.
#   bench/derived-instructions.sh TARGET_DIR [TARGET_DIR...]   (each with rmca-cc, libmpi.so)
set -euo pipefail
(($#)) || { echo "usage: derived-instructions.sh TARGET_DIR [TARGET_DIR...]" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "derived-instructions.sh: valgrind is not installed (scripts/install-deps.sh)" >&2; exit 2; }
small=100 large=1100 window=64
count() { # BINARY ROUNDS LOOP TOGGLE...
  local bin=$1 rounds=$2 loop=$3 best= n
  shift 3
  local toggles=()
  for f in "$@"; do toggles+=("--toggle-collect=$f"); done
  for _ in 1 2 3; do
    n=$(RMCA_MCA_btl=self valgrind --tool=callgrind --callgrind-out-file=/dev/null "${toggles[@]}" "$bin" "$rounds" "$loop" 2>&1 |
      sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
    if [ -z "$best" ] || [ "$n" -lt "$best" ]; then best=$n; fi
  done
  echo "$best"
}
here=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
printf '%-40s %-6s %14s\n' build loop "C instr/msg"
for dir in "$@"; do
  bin=$scratch/derived_window.$RANDOM
  "$dir/rmca-cc" -O2 "$here/derived_window.c" -o "$bin"
  for loop in dtype op; do
    case $loop in
      dtype) t=({,P}MPI_Irecv {,P}MPI_Isend {,P}MPI_Waitall) ;;
      op) t=({,P}MPI_Reduce_local) ;;
    esac
    a=$(count "$bin" $small $loop "${t[@]}") b=$(count "$bin" $large $loop "${t[@]}")
    printf '%-40s %-6s %14s\n' "$dir" $loop \
      "$(awk -v a="$a" -v b="$b" -v n=$(((large - small) * window)) 'BEGIN { printf "%.1f", (b - a) / n }')"
  done
done
