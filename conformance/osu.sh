#!/usr/bin/env bash
# OSU micro-benchmarks 7.x built against rmca's C library: which benchmarks compile and link.
#
#   conformance/osu.sh OSU_SRC [BUILD_DIR] [--run]
#     OSU_SRC    an OSU micro-benchmarks source tree (with its generated configure), or a bare
#                git repository of one (HEAD is extracted)
#     BUILD_DIR  default /tmp/rmca-osu (rebuilt from scratch each time)
#     --run      also run each built C benchmark briefly (2 ranks; -x 1 -i 2 -m 1:64) and
#                report which print results
#
# OSU 7 (some versions) switch on MPI_Datatype values (`case MPI_INT:`), which does not compile
# with the standard ABI's pointer handles: the script lists such lines if any (OSU's later
# releases use if/else chains instead; a sed cannot safely rewrite a switch into those).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=${1:?usage: osu.sh OSU_SRC [BUILD_DIR] [--run]}
B=${2:-/tmp/rmca-osu}
RUN=${3:-}
[[ $B == --run ]] && { RUN=--run; B=/tmp/rmca-osu; }
REL=$ROOT/target/release
rm -rf "$B"
mkdir -p "$B/src"
if [[ -f $SRC/HEAD && -d $SRC/objects ]]; then
  git -C "$SRC" archive HEAD | tar -x -C "$B/src"
  echo "OSU: $(git -C "$SRC" rev-parse --short HEAD) of $SRC"
else
  cp -a "$SRC/." "$B/src"
fi
cd "$B/src"
echo "== datatype switches (need OSU's if/else fix with pointer handles):"
grep -rnE "case +MPI_[A-Z0-9_]+ *:" --include=*.c --include=*.h c || echo "(none)"
# Timestamps from the archive can make make want to rerun automake: keep the generated files.
touch aclocal.m4 configure Makefile.in $(find . -name Makefile.in) config.h.in 2>/dev/null || true
echo "== configure CC=$REL/mpicc CXX=$REL/mpicxx (log $B/configure.log)"
nice -n 10 ./configure CC="$REL/mpicc" CXX="$REL/mpicxx" >"$B/configure.log" 2>&1 ||
  { tail -30 "$B/configure.log"; exit 1; }
echo "== make -k (log $B/make.log)"
nice -n 10 make -k -j2 >"$B/make.log" 2>&1 || true
echo "== compile errors (first 40 distinct):"
grep -E "error:|undefined reference" "$B/make.log" | sed 's/^.*\/\(c\/\)/\1/' | sort -u | head -40 || true
# Every benchmark source (a .c file with a main) and whether make built it; a source make did
# not build (its Makefile.in may not list it) is compiled alone to tell the two apart.
built=() missing=()
while read -r src; do
  exe=${src%.c}
  if [[ -x $exe ]]; then built+=("$exe"); continue; fi
  if "$REL/mpicc" -c -Ic/util -I. "$src" -o /dev/null 2>"$B/alone.err"; then
    missing+=("$(basename "$exe") (compiles alone: not built by its Makefile)")
  else
    missing+=("$(basename "$exe") (does not compile: $(grep -m1 error: "$B/alone.err"))")
  fi
done < <(grep -rlE "^(int )?main *\(" --include='osu_*.c' c/mpi | sort)
echo "== built ${#built[@]} of $((${#built[@]} + ${#missing[@]})) C MPI benchmarks"
printf 'not built: %s\n' "${missing[@]:-(none)}"
if [[ $RUN == --run ]]; then
  echo "== runs (2 ranks, small sizes)"
  for f in "${built[@]}"; do
    out=$(nice -n 10 "$REL/rmca-run" --timeout 30 -n 2 "$f" -x 1 -i 2 -m 1:64 2>&1) && st=0 || st=$?
    if [[ $st == 0 ]]; then r=ok; else r="status $st: $( (grep -m1 -iE 'error|unsupported' <<<"$out" || tail -1 <<<"$out") | cut -c1-150)"; fi
    echo "$(basename "$f"): $r"
  done
fi
