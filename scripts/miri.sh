#!/usr/bin/env bash
# The unsafe cores that Miri can interpret, under Miri: UserBuf (framework/src/buffer.rs: raw
# lending of application memory, short copies by overlapping word moves), the shared-memory ring
# (components/btl-shm/src/ring.rs: records written and published through atomics, tested on
# heap rings by two threads), the cooperative copy (components/btl-shm/src/coop.rs: claims
# partitioned by atomics) and the soft verbs provider's landing of RDMA writes in registered
# memory that a poller reads meanwhile (verbs/src/mem.rs: an eager slot's footer lands last).
#
# What is not run under Miri, and why:
# - btl-shm's sys.rs and module tests: shm_open/mmap of a named segment, process_vm_readv and
#   other processes; Miri interprets one process and has no file-backed mmap.
# - verbs' rdma provider (rdma.rs): FFI into libibverbs, which Miri cannot call; the soft
#   provider's sockets between processes (scripts/tsan.sh runs its agent threads in real jobs).
# - framework's plugin loader: dlopen of shared objects (FFI).
# - rte's fd passing and the launcher: sockets, fork/exec, poll, signals.
# - rmca's lending of user buffers (rmca/src/comm.rs, coll/exec.rs): sound by the scope
#   discipline checked by the compiler (see the compile_fail examples of `rmca::scope`), and run
#   only inside a real job (PMI, shared memory), which Miri cannot host.
#
# Weak-memory emulation is off: with it, this Miri (nightly 2026-05) aborts with an internal
# error ("cannot have empty store buffer when previous write was atomic") on the ring's atomic
# stores; data races and aliasing are still checked. Proptest cases are cut to keep the run
# within minutes (each case is interpreted).
#
# Miri comes with a nightly toolchain from rustup. If it cannot be installed here (no network
# to static.rust-lang.org), the same tests run under valgrind's memcheck instead, which checks
# the compiled code's memory accesses but not Rust's aliasing rules; the choice is printed.
set -euo pipefail
cd "$(dirname "$0")/.."

miri_ready() { cargo +nightly miri --version >/dev/null 2>&1; }
if ! miri_ready; then
  echo "-- installing a nightly toolchain with miri (rustup)"
  rustup toolchain install nightly --profile minimal --component miri,rust-src >/dev/null 2>&1 ||
    rustup component add --toolchain nightly miri rust-src >/dev/null 2>&1 || true
fi

if miri_ready; then
  echo "-- miri: $(cargo +nightly miri --version)"
  export MIRIFLAGS="-Zmiri-disable-isolation -Zmiri-disable-weak-memory-emulation"
  export PROPTEST_CASES=4
  cargo +nightly miri test -p rmca-framework --lib -- buffer::
  cargo +nightly miri test -p rmca-btl-shm --lib -- ring:: coop::
  # Verbs addresses registered memory by number, as the verbs API does: provenance is
  # exposed on purpose there.
  MIRIFLAGS="$MIRIFLAGS -Zmiri-permissive-provenance" \
    cargo +nightly miri test -p rmca-verbs --lib -- mem::
  exit 0
fi

echo "-- miri unavailable (no nightly toolchain with miri could be installed): running the same tests under valgrind memcheck"
if ! command -v valgrind >/dev/null; then
  echo "FAILED: neither miri nor valgrind (Debian package valgrind) is available" >&2
  exit 1
fi
test_binary() {
  cargo test -p "$1" --lib --no-run --locked --message-format=json |
    python3 -c 'import sys, json
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["lib"]:
        print(m["executable"])'
}
export PROPTEST_CASES=32
# Each binary on its own line: a failed build stops the script (set -e) instead of reaching
# valgrind as an empty name.
framework_tests=$(test_binary rmca-framework)
shm_tests=$(test_binary rmca-btl-shm)
verbs_tests=$(test_binary rmca-verbs)
[ -n "$framework_tests" ] && [ -n "$shm_tests" ] && [ -n "$verbs_tests" ] || { echo "FAILED: test binaries not found" >&2; exit 1; }
valgrind --error-exitcode=1 --quiet "$framework_tests" buffer::
valgrind --error-exitcode=1 --quiet "$shm_tests" ring:: coop::
valgrind --error-exitcode=1 --quiet "$verbs_tests" mem::
