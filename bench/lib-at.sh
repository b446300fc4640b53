#!/usr/bin/env bash
# The C library of a git commit, built once and kept: for the "before" columns of the bench
# scripts (RMCA_LIB, RMCA2_LIB, BEFORE_LIB, BEFORE, OSC_OSU_BEFORE: a directory put first in
# LD_LIBRARY_PATH, the OSU/bench binaries then run on its libmpi.so) and the LIBDIR/TARGET_DIR
# arguments of bench/coll-instructions.sh and bench/osc-instructions.sh.
#   bench/lib-at.sh COMMIT      prints the directory holding the commit's libmpi.so,
#                               libmpi_abi.so, rmca-cc, mpicc and rmca-run
#   RMCA2_LIB=$(bench/lib-at.sh b381e78) bench/osu-coll-peers.sh ...
# The commit's tree (git archive, the work tree untouched) is built in
# ${RMCA_BUILD_CACHE:-/tmp/rmca-builds}/SHA with its own CARGO_TARGET_DIR (a release build of
# rmca-mpi-lib, rmca-mpi, rmca-cc and rmca-run, `nice -n ${NICE:-10}`: several minutes on 2
# cores); the products are copied to SHA/lib, which is printed, and the target directory
# removed (LIB_AT_KEEP_TARGET=1 keeps it). A second call prints SHA/lib at once; concurrent
# calls for one commit build it once (flock). Progress and errors go to stderr.
# Exit status: 0, the directory printed; 2, bad usage or not a commit; 1, the build failed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${RMCA_BUILD_CACHE:-/tmp/rmca-builds}
die() { echo "lib-at.sh: $2" >&2; exit "$1"; }

(($# == 1)) && [[ -n $1 && $1 != -* ]] || die 2 "usage: lib-at.sh COMMIT (prints the directory of that commit's libmpi.so)"
sha=$(git -C "$root" rev-parse --verify --quiet "$1^{commit}") ||
  die 2 "'$1' is not a commit of $root (git rev-parse; a shallow clone: git fetch --unshallow)"
dir=$cache/$sha
lib=$dir/lib
# What the bench scripts take from a build; the stamp is written last, so a half-made
# directory is never printed.
products=(libmpi.so libmpi_abi.so rmca-cc mpicc rmca-run)
ready() {
  [[ -f $dir/done ]] || return 1
  local p
  for p in "${products[@]}"; do [[ -e $lib/$p ]] || return 1; done
}
if ready; then
  echo "$lib"
  exit 0
fi

mkdir -p "$dir" || die 2 "cannot create $dir (RMCA_BUILD_CACHE)"
exec 9>"$dir/lock"
if command -v flock >/dev/null; then
  flock 9 # another call may be building this commit: wait for it
fi
if ready; then
  echo "$lib"
  exit 0
fi

short=$(git -C "$root" rev-parse --short "$sha")
rm -rf "$dir/src" "$lib" "$dir/done"
mkdir -p "$dir/src"
git -C "$root" archive "$sha" | tar -x -C "$dir/src" || die 1 "cannot extract $short into $dir/src"
packages=()
for p in rmca-mpi-lib:bindings/c/libmpi rmca-mpi:bindings/c rmca-cc:tools/rmca-cc rmca-run:tools/rmca-run; do
  [[ -f $dir/src/${p#*:}/Cargo.toml ]] ||
    { rm -rf "$dir/src"; die 1 "$short has no ${p#*:}/Cargo.toml (package ${p%%:*}): too old for the bench scripts"; }
  packages+=(-p "${p%%:*}")
done
log=$dir/build.log
echo "lib-at.sh: building $short's C library in $dir (several minutes; log $log)" >&2
if ! (cd "$dir/src" && CARGO_TARGET_DIR=$dir/target nice -n "${NICE:-10}" \
  cargo build --release --locked "${packages[@]}") >"$log" 2>&1; then
  tail -n 20 "$log" >&2
  die 1 "building $short failed (log $log)"
fi
mkdir -p "$lib"
for p in "${products[@]}"; do
  cp -p "$dir/target/release/$p" "$lib/" || die 1 "the build of $short made no $p"
done
[[ -n ${LIB_AT_KEEP_TARGET:-} ]] || rm -rf "$dir/target"
echo "$short" >"$dir/done"
echo "lib-at.sh: $short built: $lib" >&2
echo "$lib"
