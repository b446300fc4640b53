#!/usr/bin/env bash
# The OSU trees that the bench scripts and bench/RESULTS.md's commands use, made when missing.
# Each call prints the tree's directory on stdout (progress and errors on stderr), so that a
# command names how to get what it runs on:
#   bench/osu-peers.sh $(bench/osu-trees.sh osu) /tmp/osu-peers 3
#   bench/osu-trees.sh osu [DIR]    OSU micro-benchmarks 7.4 with its generated configure
#                                   (default /tmp/osu): OSU_SRC of bench/osu-peers.sh,
#                                   osu-coll-peers.sh, osu-coll-nodes.sh, osu-overlap.sh
#   bench/osu-trees.sh peers [DIR]  osu-peers.sh's builds of osu_latency, osu_bw, osu_bibw and
#                                   osu_mbw_mr, DIR/build-{rmca,ompi,mpich} (default
#                                   /tmp/osu-peers): OSU of bench/onenode-memory.sh
#   bench/osu-trees.sh osc [DIR]    OSU's one-sided sources in DIR/src and their binaries per
#                                   MPI in DIR/{rmca,ompi,mpich} (default /tmp/oscsm-osu): B of
#                                   bench/osc-small-osu.sh and osc-rdma-osu.sh, DIR/src the SRC
#                                   of bench/results.sh's osc_osu
#   bench/osu-trees.sh mt [DIR]     osu_latency_mt.{rmca,openmpi,mpich} (default
#                                   /tmp/mtp/osumt): OSU_LATENCY_MT_DIR of mt-rate-peers.sh
# The source of all: OSU_SRC (an OSU 7.x tree with its configure; a bare git repository of one,
# at 6a641d0 if it has it, else its HEAD; or a release tarball), else
# github.com/johnpzh/osu-micro-benchmarks-7.4-ext at 6a641d0 (OSU_URL), the tree every OSU table
# in bench/RESULTS.md was measured with (OSU 7.4 with its generated configure; its CXL
# additions are off unless configured), cloned once into
# ${RMCA_BUILD_CACHE:-/tmp/rmca-builds}/osu.git. peers, osc and mt take their sources from the
# `osu` tree at OSU_TREE (default /tmp/osu, made first when missing). Builds use rmca's
# target/release/mpicc and the peers' mpicc.openmpi, mpicc.mpich (scripts/install-deps.sh
# --bench). A tree is made again only when a file of it is missing.
# Exit status: 0, the directory printed; 2, bad usage; 1, the tree could not be made.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rel=$here/../target/release
cache=${RMCA_BUILD_CACHE:-/tmp/rmca-builds}
osu_url=${OSU_URL:-https://github.com/johnpzh/osu-micro-benchmarks-7.4-ext}
osu_commit=6a641d04578167d03001d94e7389cb34e8e90bf8
die() { echo "osu-trees.sh: $2" >&2; exit "$1"; }
usage="usage: osu-trees.sh osu|peers|osc|mt [DIR]"
(($# == 1 || $# == 2)) || die 2 "$usage"
what=$1
dir=${2:-}

# make_osu DIR: OSU's source tree at DIR (assembled beside it, moved in place when whole).
make_osu() {
  local d=$1 src=${OSU_SRC:-} tmp rev=HEAD
  [[ -x $d/configure && -f $d/c/util/osu_util_mpi.c ]] && return 0
  if [[ -z $src ]]; then
    src=$cache/osu.git
    rev=$osu_commit
    if ! git -C "$src" cat-file -e "$osu_commit^{commit}" 2>/dev/null; then
      echo "osu-trees.sh: cloning $osu_url into $src" >&2
      mkdir -p "$cache"
      rm -rf "$src"
      git clone --bare --quiet "$osu_url" "$src" >&2 ||
        die 1 "cannot clone $osu_url (OSU_SRC may name a local OSU tree, bare repository or tarball)"
      git -C "$src" cat-file -e "$osu_commit^{commit}" 2>/dev/null || die 1 "$osu_url has no commit $osu_commit"
    fi
  fi
  mkdir -p "$(dirname "$d")"
  tmp=$(mktemp -d "${d%/}.partial.XXXXXX")
  if [[ -f $src/HEAD && -d $src/objects ]]; then
    # A repository of the fork: the pinned commit, whatever its HEAD is now.
    git -C "$src" cat-file -e "$osu_commit^{commit}" 2>/dev/null && rev=$osu_commit
    git -C "$src" archive "$rev" | tar -x -C "$tmp" || { rm -rf "$tmp"; die 1 "cannot extract $rev of $src"; }
  elif [[ -d $src ]]; then
    cp -a "$src/." "$tmp/"
  elif [[ -f $src ]]; then
    tar -x -C "$tmp" --strip-components=1 -f "$src" 2>/dev/null ||
      { rm -rf "$tmp"; die 1 "OSU_SRC=$src is not a tarball of an OSU tree"; }
  else
    rm -rf "$tmp"
    die 1 "OSU_SRC=$src is neither a directory nor a file"
  fi
  [[ -x $tmp/configure && -f $tmp/c/util/osu_util_mpi.c ]] ||
    { rm -rf "$tmp"; die 1 "$src is not an OSU 7.x tree with its configure"; }
  rm -rf "$d"
  mv "$tmp" "$d"
  echo "osu-trees.sh: OSU tree in $d" >&2
}

# The `osu` tree the other trees are built from, made when missing.
osu_tree() {
  local t=${OSU_TREE:-/tmp/osu}
  make_osu "$t"
  echo "$t"
}

cc_list="rmca:$rel/mpicc ompi:mpicc.openmpi mpich:mpicc.mpich"
need_compilers() {
  local rt
  for rt in $cc_list; do
    command -v "${rt#*:}" >/dev/null || die 1 "${rt#*:} not found (rmca: cargo build --release --workspace; peers: scripts/install-deps.sh --bench)"
  done
}

case $what in
osu)
  dir=${dir:-/tmp/osu}
  make_osu "$dir"
  ;;
peers)
  dir=${dir:-/tmp/osu-peers}
  benches="osu_latency osu_bw osu_bibw osu_mbw_mr"
  missing=
  for rt in rmca ompi mpich; do
    for b in $benches; do [[ -x $dir/build-$rt/c/mpi/pt2pt/standard/$b ]] || missing=1; done
  done
  if [[ -n $missing ]]; then
    need_compilers
    src=$(osu_tree)
    # shellcheck source=bench/osu-build.sh
    source "$here/osu-build.sh"
    # shellcheck disable=SC2119 # osu_build's arguments, not this script's
    osu_build "$dir" "$src" c/mpi/pt2pt/standard "$benches" rmca ompi mpich || die 1 "building OSU's pt2pt benchmarks into $dir failed"
  fi
  ;;
osc)
  dir=${dir:-/tmp/oscsm-osu}
  progs="put_latency get_latency put_bw get_bw put_bibw acc_latency get_acc_latency fop_latency cas_latency"
  utils="osu_util.c osu_util_mpi.c osu_util_graph.c osu_util_papi.c osu_util_validation.c"
  missing=
  [[ -f $dir/src/osu_util_mpi.c ]] || missing=1
  for rt in $cc_list; do
    for b in $progs; do [[ -x $dir/${rt%%:*}/osu_$b ]] || missing=1; done
  done
  if [[ -n $missing ]]; then
    need_compilers
    src=$(osu_tree)
    mkdir -p "$dir/src"
    cp "$src"/c/mpi/one-sided/*.c "$src"/c/util/*.c "$src"/c/util/*.h "$dir/src/"
    for rt in $cc_list; do
      mkdir -p "$dir/${rt%%:*}"
      echo "osu-trees.sh: building OSU's one-sided benchmarks for ${rt%%:*} in $dir/${rt%%:*}" >&2
      for b in $progs; do
        # As bench/results.sh's osc_osu builds them: OSU's sources without its configure.
        # shellcheck disable=SC2086 # the utility sources are words on purpose
        (cd "$dir/src" && "${rt#*:}" -O2 -DPACKAGE_VERSION='"7.4"' -I. -o "$dir/${rt%%:*}/osu_$b" \
          "osu_$b.c" $utils -lm -lpthread) >&2 || die 1 "building osu_$b for ${rt%%:*} failed"
      done
    done
  fi
  ;;
mt)
  dir=${dir:-/tmp/mtp/osumt}
  missing=
  for rt in rmca openmpi mpich; do [[ -x $dir/osu_latency_mt.$rt ]] || missing=1; done
  if [[ -n $missing ]]; then
    need_compilers
    src=$(osu_tree)
    # shellcheck source=bench/osu-build.sh
    source "$here/osu-build.sh"
    osu_build "$dir/build" "$src" c/mpi/pt2pt/standard osu_latency_mt rmca ompi mpich ||
      die 1 "building osu_latency_mt into $dir/build failed"
    for rt in rmca:rmca ompi:openmpi mpich:mpich; do
      cp "$dir/build/build-${rt%%:*}/c/mpi/pt2pt/standard/osu_latency_mt" "$dir/osu_latency_mt.${rt#*:}"
    done
  fi
  ;;
*) die 2 "$usage (not '$what')" ;;
esac
echo "$dir"
