# Sourced by the OSU drivers (bench/osu-peers.sh, bench/osu-coll-nodes.sh): OSU's benchmarks
# built once per MPI. Needs `rel` (rmca's release directory, where its mpicc is).

# The compiler wrapper of build NAME (rmca, ompi, mpich).
cc_of() {
  case $1 in
  rmca) echo "$rel/mpicc" ;;
  ompi) echo mpicc.openmpi ;;
  mpich) echo mpicc.mpich ;;
  esac
}

# osu_build OUT SRC OSU_DIR BENCHES BUILD...: the benchmarks BENCHES (words) of OSU_DIR (e.g.
# c/mpi/pt2pt/standard) from the OSU tree SRC (a checkout or a bare git directory) into
# OUT/build-BUILD/OSU_DIR for each BUILD, skipping a build made before by the same compiler.
osu_build() {
  local out=$1 src=$2 osu_dir=$3 benches=$4 rt b bench missing
  shift 4
  for rt in "$@"; do
    b=$out/build-$rt
    missing=
    for bench in $benches; do [[ -x $b/$osu_dir/$bench ]] || missing=1; done
    if [[ -z $missing && $b/.cc -nt "$(command -v "$(cc_of "$rt")")" ]]; then
      continue # built before with this compiler
    fi
    rm -rf "$b"
    mkdir -p "$b"
    if [[ -f $src/HEAD && -d $src/objects ]]; then
      git -C "$src" archive HEAD | tar -x -C "$b"
    else
      cp -a "$src/." "$b"
    fi
    # Timestamps from the copy can make make want to rerun automake: keep the generated files.
    (cd "$b" && touch aclocal.m4 configure $(find . -name Makefile.in) 2>/dev/null || true)
    echo "== building OSU's $osu_dir for $rt (log $b/build.log)" >&2
    # A copied tree may hold objects built by another compiler: clean them first.
    # shellcheck disable=SC2086 # the benchmark list is words on purpose
    (cd "$b" && ./configure CC="$(cc_of "$rt")" CXX="$(cc_of "$rt")" && rm -f c/util/*.o &&
      make -C "$osu_dir" clean && make -C "$osu_dir" $benches) \
      >"$b/build.log" 2>&1 || { tail -20 "$b/build.log" >&2; return 1; }
    cc_of "$rt" >"$b/.cc"
  done
}
