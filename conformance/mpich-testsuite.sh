#!/usr/bin/env bash
# MPICH's test suite (test/mpi) built and run against one MPI implementation.
#
#   conformance/mpich-testsuite.sh SRC_TREE IMPL [WORK_DIR]
#     SRC_TREE  an MPICH source tree (test/mpi, confdb, maint/version.m4), or a bare git
#               repository of MPICH (e.g. /work/.mirror/pmodels+mpich/repo: HEAD is extracted)
#     IMPL      rmca (target/release/mpicc, rmca-run), mpich (Debian's mpicc.mpich,
#               mpiexec.mpich) or openmpi (mpicc.openmpi, mpiexec.openmpi)
#     WORK_DIR  default /tmp/rmca-mpich-tests; the build of IMPL is WORK_DIR/IMPL, reused when
#               there (delete it to configure again; rmca's programs are relinked only if
#               their sources changed, the library is loaded at run time)
#
# Runs the directories $DIRS (default: pt2pt coll comm group datatype attr topo errhan init
# info; with threads among them the tree is configured --enable-threads=multiple: give it a
# WORK_DIR of its own; so with rma, io or part, which are configured in only when named) with
# their testlist rank counts capped at MAXNP (4), TIMEOUT (60)
# seconds per test; a test passes when its output has " No Errors" (see
# conformance/mpich_run.py for the rules).
# Fortran: DIRS with f77, f90 or f08 configure the tree with the implementation's Fortran
# wrapper (rmca: target/release/mpifort; mpifort.mpich; mpifort.openmpi) and
# --enable-fortran=all, e.g. DIRS="f77 f90 f08" (give it a WORK_DIR of its own: the
# configuration is kept there).
# Prints a per-directory table (passed / run) and writes WORK_DIR/IMPL.tsv (one line per test).
# Then conformance/mpich-compare.py WORK_DIR lists the tests MPICH passes and rmca does not.
# Needs autoconf, automake, libtool (scripts/install-deps.sh --conformance) for the first
# configure. Runs niced: the machines are shared.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=${1:?usage: mpich-testsuite.sh SRC_TREE IMPL [WORK_DIR]}
IMPL=${2:?usage: mpich-testsuite.sh SRC_TREE IMPL [WORK_DIR]}
WORK=${3:-/tmp/rmca-mpich-tests}
DIRS=${DIRS:-pt2pt coll comm group datatype attr topo errhan init info}
export MAXNP=${MAXNP:-4} TIMEOUT=${TIMEOUT:-60}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)

case $IMPL in
  rmca)
    CC=$ROOT/target/release/mpicc MPIEXEC=$ROOT/target/release/rmca-run
    FC=$ROOT/target/release/mpifort
    # The library is loaded from target/release at run time (rpath).
    for f in "$CC" "$MPIEXEC" "$ROOT/target/release/libmpi.so"; do
      [[ -e $f ]] || { echo "$f missing: cargo build --release -p rmca-mpi -p rmca-mpi-lib -p rmca-run -p rmca-cc" >&2; exit 2; }
    done ;;
  mpich) CC=mpicc.mpich MPIEXEC=mpiexec.mpich FC=mpifort.mpich ;;
  openmpi)
    CC=mpicc.openmpi MPIEXEC="mpiexec.openmpi --oversubscribe" FC=mpifort.openmpi
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    # No network interfaces to probe beyond the loopback in containers: shared memory + self.
    export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 ;;
  *) echo "IMPL must be rmca, mpich or openmpi" >&2; exit 2 ;;
esac

# The sources: extracted once from a git repository, autogen'ed once.
if [[ -f $SRC/HEAD && -d $SRC/objects ]]; then
  commit=$(git -C "$SRC" rev-parse HEAD)
  if [[ ! -d $WORK/src/test/mpi ]]; then
    mkdir -p "$WORK/src"
    git -C "$SRC" archive HEAD test/mpi confdb maint/version.m4 | tar -x -C "$WORK/src"
    echo "$commit" >"$WORK/src/COMMIT"
  fi
  SRC=$WORK/src
fi
SRC=$(cd "$SRC" && pwd)
if [[ ! -x $SRC/test/mpi/configure ]]; then
  echo "== autogen (test/mpi of $SRC)"
  (cd "$SRC/test/mpi" && MPICH_CONFDB=$SRC/confdb nice -n 10 ./autogen.sh >"$WORK/autogen.log" 2>&1) ||
    { tail -20 "$WORK/autogen.log"; exit 1; }
fi

B=$WORK/$IMPL
if [[ ! -f $B/config.status ]]; then
  # The suite picks its compiler from MPICC (else the first mpicc in PATH), not CC.
  echo "== configure for $IMPL (MPICC=$CC; log $B.configure.log)"
  rm -rf "$B"
  cp -a "$SRC/test/mpi" "$B"
  # test/mpi/threads needs the suite's thread support (pthreads, MPI_THREAD_MULTIPLE).
  THREADS=--disable-threads
  [[ " $DIRS " == *" threads "* ]] && THREADS=--enable-threads=multiple
  FORTRAN=(--disable-fortran)
  if [[ " $DIRS " =~ \ (f77|f90|f08) ]]; then
    [[ $IMPL != rmca || -e $ROOT/target/release/libmpifort.so ]] ||
      { echo "target/release/libmpifort.so missing: cargo build --release -p rmca-mpifort" >&2; exit 2; }
    FORTRAN=(--enable-fortran=all MPIF77="$FC" MPIFC="$FC" F77="$FC" FC="$FC")
    # The tests' C parts use MPI_Fint and MPI_*_c2f/_f2c with mpi.h only; rmca's (the standard
    # ABI's) leaves them to mpi_abi_fort.h and libmpifort: mpicc -mpi-fortran adds both.
    [[ $IMPL == rmca ]] && CC="$CC -mpi-fortran"
  fi
  # Only the C (and, when asked, Fortran) tests of the standard (strict: no MPICH
  # extensions); no spawn, threadcomm or MPICH's per-algorithm collective variants (not run
  # here). RMA, I/O and partitioned communication only when DIRS names rma, io or part: the
  # tree's window helpers (MTestGetWin, used by rma/winname and fkeyvalwin) and its file
  # helpers are compiled only then, so a WORK_DIR configured without them stays comparable.
  enabled() { [[ " $DIRS " == *" $1 "* ]] && echo "--enable-$1" || echo "--disable-$1"; }
  (cd "$B" && nice -n 10 ./configure MPICC="$CC" CC="$CC" "${FORTRAN[@]}" --disable-cxx "$(enabled io)" \
      --disable-spawn --disable-namepub "$(enabled rma)" "$(enabled part)" --disable-threadcomm \
      --disable-ft-tests --disable-perftest --disable-collalgo-tests $THREADS \
      --enable-strictmpi >"$B.configure.log" 2>&1) || { tail -30 "$B.configure.log"; exit 1; }
fi
echo "== build $DIRS (make -k; log $B.make.log)"
: >"$B.make.log"
for d in util dtpools $DIRS; do
  (cd "$B/$d" && nice -n 10 make -k -j2 >>"$B.make.log" 2>&1) || true
done

if [[ $IMPL == rmca ]]; then
  # A program linked while target/release/libmpi.so was being rebuilt got the system's
  # libmpi.so (Open MPI's) instead: relink those.
  stale=$(find "$B" -type f -perm -u+x -newer "$B/config.status" -exec sh -c \
    'readelf -d "$1" 2>/dev/null | grep -q "NEEDED.*libmpi\.so\.[0-9]" && echo "$1"' _ {} \;)
  if [[ -n $stale ]]; then
    echo "relinking (linked to another libmpi):" $stale
    rm -f $stale
    for d in $DIRS; do (cd "$B/$d" && nice -n 10 make -k >>"$B.make.log" 2>&1) || true; done
  fi
fi
echo "== run ($IMPL: $MPIEXEC, max $MAXNP ranks, ${TIMEOUT}s per test)"
TSV=$WORK/$IMPL.tsv
: >"$TSV"
rm -rf "$B/runlogs"
read -ra DIRARR <<<"$DIRS"
nice -n 10 python3 "$ROOT/conformance/mpich_run.py" "$B" "$TSV" "$MPIEXEC" "${DIRARR[@]}" >"$B.run.log"

echo "== $IMPL: MPICH test suite $(cat "$SRC/COMMIT" 2>/dev/null | cut -c1-12), $(date -u +%F)"
python3 - "$TSV" "$IMPL" <<'EOF'
import collections, sys
tsv, impl = sys.argv[1:]
rows = [l.rstrip("\n").split("\t") for l in open(tsv)]
per = collections.defaultdict(collections.Counter)
for d, _t, _np, st, _s in rows:
    top = d.split("/")[0]
    kind = "skip" if st.startswith("skip") else st.split("(")[0]
    per[top][kind] += 1
print(f"| dir | {impl} passed / run | failed | timeout | not built | skipped |")
print("|---|---|---|---|---|---|")
tot = collections.Counter()
for d, c in per.items():
    run = c["pass"] + c["fail"] + c["timeout"] + c["nobuild"]
    tot.update(c)
    print(f"| {d} | {c['pass']} / {run} | {c['fail']} | {c['timeout']} | {c['nobuild']} | {c['skip']} |")
run = tot["pass"] + tot["fail"] + tot["timeout"] + tot["nobuild"]
print(f"| total | {tot['pass']} / {run} | {tot['fail']} | {tot['timeout']} | {tot['nobuild']} | {tot['skip']} |")
EOF
