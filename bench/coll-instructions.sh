#!/usr/bin/env bash
# Instructions per small collective call through the C library, counted by callgrind (as
# bench/instructions.sh does for messages): bench/coll_calls.c on one rank (btl-self), one
# double per call, MPI_Allreduce (out of place and MPI_IN_PLACE), MPI_Reduce and MPI_Bcast;
# only the call itself is counted (--toggle-collect), at two round counts, and the difference
# per call printed, so that what a run does once cancels out. At one rank the collective
# itself is coll-base's local schedule: the count is the C layer plus that schedule.
#   bench/coll-instructions.sh TARGET_DIR [LIBDIR...]
# TARGET_DIR has rmca-cc; each LIBDIR (default TARGET_DIR) a libmpi.so to count (e.g. a build
# from before a change), one column each.
set -euo pipefail
(($#)) || { echo "usage: coll-instructions.sh TARGET_DIR [LIBDIR...]" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "coll-instructions.sh: valgrind is not installed (scripts/install-deps.sh)" >&2; exit 2; }
dir=$1
shift
(($#)) || set -- "$dir"
here=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$dir/rmca-cc" -O2 "$here/coll_calls.c" -o "$scratch/coll_calls"
small=100 large=1100
count() { # LIBDIR ROUNDS CALL FUNCTION: the least of three runs
  local best= n
  for _ in 1 2 3; do
    n=$(LD_LIBRARY_PATH=$1 RMCA_MCA_btl=self valgrind --tool=callgrind --callgrind-out-file=/dev/null \
      --toggle-collect="$4" --toggle-collect="P$4" "$scratch/coll_calls" "$2" "$3" 2>&1 |
      sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
    if [ -z "$best" ] || [ "$n" -lt "$best" ]; then best=$n; fi
  done
  echo "$best"
}
printf '%-30s' "instructions per call"
for lib in "$@"; do printf ' %28s' "$lib"; done
echo
for c in allreduce:MPI_Allreduce inplace:MPI_Allreduce reduce:MPI_Reduce bcast:MPI_Bcast; do
  call=${c%%:*} f=${c##*:}
  label=$f
  [ "$call" = inplace ] && label="$f (MPI_IN_PLACE)"
  printf '%-30s' "$label"
  for lib in "$@"; do
    a=$(count "$lib" $small "$call" "$f") b=$(count "$lib" $large "$call" "$f")
    awk -v a="$a" -v b="$b" -v n=$((large - small)) 'BEGIN { printf " %28.1f", (b - a) / n }'
  done
  echo
done
