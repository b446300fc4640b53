#!/usr/bin/env bash
# Instructions per small collective call through the C library, counted by callgrind (as
# bench/instructions.sh does for messages): bench/coll_calls.c on one rank (btl-self), one
# double per call, MPI_Allreduce (out of place and MPI_IN_PLACE), MPI_Reduce and MPI_Bcast,
# and one double per rank through MPI_Allgather, MPI_Allgatherv, MPI_Alltoall, MPI_Alltoallv,
# MPI_Reduce_scatter_block, MPI_Reduce_scatter, MPI_Gather, MPI_Scatter (root: rank 0);
# only the call itself is counted (--toggle-collect), at two round counts, and the difference
# per call printed, so that what a run does once cancels out. At one rank the collective
# itself is coll-base's local schedule: the count is the C layer plus that schedule.
# RANKS=2: two ranks on the default stack (coll-sm), an MPI_Barrier between the calls, the
# one rank counted that never waits in the call (a reduce's or gather's leaf, rank 1; a
# broadcast's or scatter's root, rank 0): the C layer plus coll-sm's own path, without any wait.
# Also: one double reduced with a user operation (MPI_Op_create), and
# MPI_Reduce_scatter_block with a count of 0.
#   [RANKS=2] bench/coll-instructions.sh TARGET_DIR [LIBDIR...]
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
ranks=${RANKS:-1}
[[ $ranks == 1 || $ranks == 2 ]] || { echo "coll-instructions.sh: RANKS must be 1 or 2, not '$ranks'" >&2; exit 2; }
# At two ranks, one rank runs under callgrind (VG_RANK), the other natively.
cat >"$scratch/one-rank" <<'EOT'
#!/bin/sh
if [ "$PMI_RANK" = "$VG_RANK" ]; then
  exec valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect="$VG_FN" --toggle-collect="P$VG_FN" "$@" 2>"$VG_LOG"
fi
exec "$@"
EOT
chmod +x "$scratch/one-rank"
count() { # LIBDIR ROUNDS CALL FUNCTION: the least of three runs
  local best= n
  for _ in 1 2 3; do
    if ((ranks == 1)); then
      n=$(LD_LIBRARY_PATH=$1 RMCA_MCA_btl=self valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        --toggle-collect="$4" --toggle-collect="P$4" "$scratch/coll_calls" "$2" "$3" 2>&1 |
        sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
    else
      local who=1
      [[ $3 == bcast || $3 == scatter ]] && who=0
      LD_LIBRARY_PATH=$1 VG_RANK=$who VG_FN=$4 VG_LOG=$scratch/vg.log \
        "$dir/rmca-run" -n 2 "$scratch/one-rank" "$scratch/coll_calls" "$2" "$3" barrier >/dev/null
      n=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$scratch/vg.log")
    fi
    if [ -z "$best" ] || [ "$n" -lt "$best" ]; then best=$n; fi
  done
  echo "$best"
}
printf '%-30s' "instructions per call"
for lib in "$@"; do printf ' %28s' "$lib"; done
echo
calls="allreduce:MPI_Allreduce inplace:MPI_Allreduce reduce:MPI_Reduce bcast:MPI_Bcast
  allgather:MPI_Allgather allgatherv:MPI_Allgatherv alltoall:MPI_Alltoall alltoallv:MPI_Alltoallv
  rsblock:MPI_Reduce_scatter_block rscatter:MPI_Reduce_scatter gather:MPI_Gather scatter:MPI_Scatter
  uallreduce:MPI_Allreduce ureduce:MPI_Reduce rsblock0:MPI_Reduce_scatter_block"
# At two ranks every member of an allreduce waits for the other: only the calls without a wait.
((ranks == 2)) && calls="reduce:MPI_Reduce bcast:MPI_Bcast gather:MPI_Gather scatter:MPI_Scatter ureduce:MPI_Reduce rsblock0:MPI_Reduce_scatter_block"
# CALLS=...: a subset of the calls' names (e.g. CALLS="allgatherv alltoallv").
if [[ -n ${CALLS:-} ]]; then
  pick=
  for c in $calls; do [[ " $CALLS " == *" ${c%%:*} "* ]] && pick+=" $c"; done
  calls=$pick
fi
for c in $calls; do
  call=${c%%:*} f=${c##*:}
  label=$f
  [ "$call" = inplace ] && label="$f (MPI_IN_PLACE)"
  ((ranks == 2)) && { [[ $call == bcast || $call == scatter ]] && label="$f (root)" || label="$f (leaf)"; }
  [[ $call == u* ]] && label="$label (user op)"
  [ "$call" = rsblock0 ] && label="$label (count 0)"
  printf '%-30s' "$label"
  for lib in "$@"; do
    a=$(count "$lib" $small "$call" "$f") b=$(count "$lib" $large "$call" "$f")
    awk -v a="$a" -v b="$b" -v n=$((large - small)) 'BEGIN { printf " %28.1f", (b - a) / n }'
  done
  echo
done
