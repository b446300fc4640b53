#!/usr/bin/env bash
# The C library's threaded paths under ThreadSanitizer: librmca's libmpi.so built with
# `-Zsanitizer=thread` (every Rust access instrumented, the standard library rebuilt the same
# way so that its locks and atomics are seen), and the C thread tests built with gcc's
# `-fsanitize=thread`, run at 2 and 3 ranks over ob1+shm, dr+shm, dr+ud and ob1+rc. Any
# ThreadSanitizer report, or a program that does not print its `ok` line, fails the run.
#
#   scripts/tsan.sh [OUT=target/tsan-run]
#
# What it covers: the process lock and ownership hand-overs of MPI_THREAD_MULTIPLE and
# SERIALIZED (bindings/c/src/state.rs), the progress passes several threads drive through the
# PML, btl-shm's rings, the soft verbs provider's agent threads and dr's timers, the one-sided
# fast paths from threads, the calls queued for the lock's holder (bindings/c/src/handoff.rs)
# (tests/c/threads*.c, tests/c/rma_shared_threads.c). Not covered: the
# launcher (no threads of its own that touch rmca state) and the `rdma` verbs provider (no
# device here; scripts/vm-tests.sh runs it in the guest, without TSan).
#
# Needs a nightly toolchain with rust-src (`-Zbuild-std`), which rustup installs from
# static.rust-lang.org: CI has no network but the package registries, so this is a tool run
# by hand (the test suite's threaded tests run there without it); it says so and exits 2 when
# the toolchain is missing.
#
# gcc 12's libtsan has no `__tsan_memcpy`/`__tsan_memmove`/`__tsan_memset`, which LLVM's
# instrumentation calls: each test program carries three forwarding functions (the libc calls
# they forward to are intercepted by libtsan, so the accesses are still checked).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${1:-$root/target/tsan-run}
triple=x86_64-unknown-linux-gnu
sysroot=$(rustc +nightly --print sysroot 2>/dev/null) || sysroot=
if [[ -z $sysroot || ! -d $sysroot/lib/rustlib/src/rust/library ]]; then
  echo "tsan.sh: needs a nightly toolchain with rust-src: rustup toolchain install nightly" \
    "--component rust-src (not available here)" >&2
  exit 2
fi
[[ -x target/release/rmca-run ]] || cargo build --release --workspace --bins --lib

echo "== libmpi.so with -Zsanitizer=thread (target/tsan)"
RUSTFLAGS="-Zsanitizer=thread" cargo +nightly build -Zbuild-std --target "$triple" --release \
  -p rmca-mpi-lib --target-dir "$root/target/tsan"
lib=$root/target/tsan/$triple/release
mkdir -p "$out"
cat >"$out/tsan_shim.c" <<'EOF'
#include <string.h>
void *__tsan_memcpy(void *d, const void *s, size_t n) { return memcpy(d, s, n); }
void *__tsan_memmove(void *d, const void *s, size_t n) { return memmove(d, s, n); }
void *__tsan_memset(void *d, int c, size_t n) { return memset(d, c, n); }
EOF

# build NAME SOURCE FLAGS...: a TSan-instrumented test program linked to the TSan library.
build() {
  local name=$1 src=$2
  shift 2
  gcc -O1 -g -fsanitize=thread -pthread -rdynamic -Ibindings/c/include "$@" \
    "tests/c/$src.c" "$out/tsan_shim.c" -L"$lib" -Wl,-rpath,"$lib" -lmpi -o "$out/$name"
}
build threads threads
build threads_comm threads_comm
build threads_tables_serialized threads_tables -DSERIALIZED
build threads_handoff threads_handoff
build rma_shared_threads rma_shared_threads

configs=(
  "ob1+shm|"
  "dr+shm|--mca pml dr"
  "dr+ud|--mca pml dr --mca btl ud,self --mca btl_ud_provider soft"
  "ob1+rc|--mca btl rc,self --mca btl_rc_provider soft"
)
failed=0 runs=0
# run NAME OKLINE RANKS CONFIG ARGS...: one job; fails on a report or a missing ok line.
run() {
  local name=$1 ok=$2 ranks=$3 config=$4 mca
  shift 4
  mca=${config#*|}
  local log=$out/$name.${config%%|*}.$ranks.log
  runs=$((runs + 1))
  # shellcheck disable=SC2086 # the MCA options are words
  if ! TSAN_OPTIONS="halt_on_error=0 report_signal_unsafe=0" timeout 600 \
    target/release/rmca-run -n "$ranks" $mca "$out/$name" "$@" >"$log" 2>&1; then
    echo "FAIL $name ${config%%|*} $ranks ranks: job failed (see $log)"
    failed=$((failed + 1))
  elif grep -q "WARNING: ThreadSanitizer" "$log"; then
    echo "FAIL $name ${config%%|*} $ranks ranks: $(grep -c 'WARNING: ThreadSanitizer' "$log") reports (see $log)"
    failed=$((failed + 1))
  elif ! grep -q "ok $ok" "$log"; then
    echo "FAIL $name ${config%%|*} $ranks ranks: no 'ok $ok' line (see $log)"
    failed=$((failed + 1))
  else
    echo "ok   $name ${config%%|*} $ranks ranks"
  fi
}
for c in "${configs[@]}"; do
  for n in 2 3; do
    run threads "threads multiple:" "$n" "$c" multiple
    run threads_comm "threads_comm:" "$n" "$c"
    run threads_tables_serialized "threads_tables serialized:" "$n" "$c"
  done
  run threads_handoff "threads_handoff:" 2 "$c"
done
for n in 1 2; do
  run rma_shared_threads "rma_shared_threads:" "$n" "ob1+shm|"
  run rma_shared_threads "rma_shared_threads:" "$n" "ob1+shm+atomics|--mca osc_sm_atomics true"
done
echo "tsan.sh: $runs jobs, $failed failed"
[[ $failed == 0 ]]
