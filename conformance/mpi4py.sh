#!/usr/bin/env bash
# mpi4py's own test suite against rmca's C library: builds a pinned mpi4py from its source
# distribution with target/release/mpicc (mpi4py sees MPI_ABI_VERSION and configures nothing:
# rmca's mpi.h must be complete), then runs every test module of the sdist's test/ directory as
# its own job at 1, 2 and 3 ranks (a crash or a hang then costs one module, not the run), and
# prints the unittest counts, mpi4py's own skip reasons and the failures triaged by MPI function.
#
#   conformance/mpi4py.sh [-d DIR] [-n "1 2 3"] [-t SECS] [-m REGEX]
#     -d DIR    work directory (venv, sdist, logs); default a new /tmp/rmca-mpi4py.XXXXXX.
#               Reused when given again: mpi4py is rebuilt only if mpi.h changed.
#     -n LIST   rank counts (default "1 2 3")
#     -t SECS   time limit of one module's job (default 300)
#     -m REGEX  only the test modules matching REGEX (e.g. 'test_comm$')
#
# Needs: the release build (cargo build --release -p rmca-mpi -p rmca-mpi-lib -p rmca-run
# -p rmca-cc), Debian's python3-venv and python3-dev (scripts/install-deps.sh), network access
# to PyPI on the first run of a DIR. Tests listed in conformance/mpi4py-excluded.txt (with the
# reason) are not run. Exit status: 0 when no test failed or errored and no job crashed.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MPI4PY_VERSION=4.1.2
# The build requirements, pinned (mpi4py 4.1.2's conf/requirements-build-cython.txt wants
# cython >= 3.0.1; setuptools comes with Debian's venv).
BUILD_REQS=(cython==3.2.9 wheel==0.48.0)
DIR= NPS="1 2 3" TLIMIT=300 ONLY=.
while getopts "d:n:t:m:" o; do
  case $o in
    d) DIR=$OPTARG ;; n) NPS=$OPTARG ;; t) TLIMIT=$OPTARG ;; m) ONLY=$OPTARG ;;
    *) sed -n '2,14p' "$0"; exit 2 ;;
  esac
done
[[ -n $DIR ]] || DIR=$(mktemp -d /tmp/rmca-mpi4py.XXXXXX)
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
REL=$ROOT/target/release
for f in mpicc rmca-run libmpi.so; do
  [[ -e $REL/$f ]] || { echo "mpi4py.sh: $REL/$f missing: build the release libraries first" >&2; exit 2; }
done
PY=$DIR/venv/bin/python
SRC=$DIR/mpi4py-$MPI4PY_VERSION

echo "== mpi4py $MPI4PY_VERSION against rmca ($(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD -- bindings 2>/dev/null || echo '+changes')) in $DIR"
if [[ ! -x $PY ]]; then
  /usr/bin/python3 -m venv "$DIR/venv"
  "$PY" -m pip install -q "${BUILD_REQS[@]}"
fi
if [[ ! -d $SRC ]]; then
  "$PY" -m pip download -q --no-binary :all: --no-deps -d "$DIR/dl" "mpi4py==$MPI4PY_VERSION"
  tar -xzf "$DIR/dl/mpi4py-$MPI4PY_VERSION.tar.gz" -C "$DIR"
fi

# Build (again) when the header changed since the last build of this DIR.
HSUM=$(cat "$ROOT/bindings/c/include/"*.h | sha256sum | cut -c1-16)
if [[ "$(cat "$DIR/built-with" 2>/dev/null)" != "$HSUM" ]]; then
  echo "== building mpi4py with $REL/mpicc (log: $DIR/build.log)"
  rm -rf "$SRC/build"
  # mpicc alone, no override: what a user types (rmca-cc puts rmca's -L and rpath before the
  # -L/usr/lib/x86_64-linux-gnu setuptools passes, where Open MPI's libmpi.so also lives).
  if ! MPICC="$REL/mpicc" nice -n 10 "$PY" -m pip install -v --no-cache-dir --force-reinstall \
      --no-binary mpi4py --no-build-isolation --no-deps "$SRC" >"$DIR/build.log" 2>&1; then
    grep -E "error|Error" "$DIR/build.log" | head -40
    echo "mpi4py.sh: mpi4py does not build against rmca's mpi.h (above)" >&2
    exit 1
  fi
  echo "$HSUM" >"$DIR/built-with"
fi
echo "== compiler diagnostics about MPI declarations (from $DIR/build.log)"
grep -E "(warning|error):" "$DIR/build.log" | grep -E "MPI_|mpi\.h" | sort -u || echo "(none)"
SO=$(ls "$DIR"/venv/lib/python3*/site-packages/mpi4py/MPI.*.so)
if ! readelf -d "$SO" | grep -q 'NEEDED.*\[libmpi\.so\]'; then
  echo "mpi4py.sh: $SO is not linked to rmca's libmpi.so:" >&2
  readelf -d "$SO" | grep NEEDED >&2
  exit 1
fi

# The exclusion file: per line, a test pattern (fnmatch on module.Class.test, substring) or
# `module:NAME` (a whole test module, e.g. one that fails at import), then `# reason`.
XFILE=$DIR/excluded.patterns
sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^$/d' "$ROOT/conformance/mpi4py-excluded.txt" >"$XFILE.all"
grep -v '^module:' "$XFILE.all" >"$XFILE" || true
XMODS=$(sed -n 's/^module://p' "$XFILE.all" | paste -sd'|')

# Dynamic processes stay refused (issue 28 leaves MPI_Comm_spawn out): mpi4py's own switch
# makes its spawn tests (test_spawn, the process pools of test_util_pool) skip as "mpi-spawn".
export MPI4PY_TEST_SPAWN=0

LOGS=$DIR/logs
rm -rf "$LOGS"   # the report reads every log there: only this run's
for n in $NPS; do
  rm -rf "$LOGS/np$n"
  mkdir -p "$LOGS/np$n"
  for t in "$SRC"/test/test_*.py; do
    mod=$(basename "$t" .py)
    [[ $mod =~ $ONLY ]] || continue
    if [[ -n $XMODS && $mod =~ ^($XMODS)$ ]]; then echo "   np=$n $mod: excluded (conformance/mpi4py-excluded.txt)"; continue; fi
    st=0
    # Every rank writes its own log (PMI_RANK is set by rmca-run); rank 0's is counted.
    (cd "$SRC" && nice -n 10 "$REL/rmca-run" --timeout "$TLIMIT" -n "$n" sh -c \
      'exec "$0" test/main.py --no-builddir -v --xfile "$1" -i "^$2\.py\$" >"$3.$PMI_RANK.log" 2>&1' \
      "$PY" "$XFILE" "$mod" "$LOGS/np$n/$mod") >"$LOGS/np$n/$mod.launcher.log" 2>&1 || st=$?
    echo "$st" >"$LOGS/np$n/$mod.status"
    [[ $st == 0 ]] || echo "   np=$n $mod: job status $st"
  done
  echo "== $n rank(s): done"
done
echo "== summary (rank 0's unittest results; logs in $LOGS)"
python3 "$ROOT/conformance/mpi4py_report.py" "$LOGS"
