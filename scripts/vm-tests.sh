#!/bin/bash
# The test suites that must also pass on real verbs, run in ONE throwaway QEMU guest with a
# Soft-RoCE device (rxe0), via ../shared/tools/verbs-vm.sh: the verbs conformance suite and the
# btl-ud / btl-rc integration tests. Each binary is built on the host with the `rdma` feature; in
# plain `cargo test` the same tests run on the soft provider. In the guest an environment
# variable selects rdma (rxe0: GID index 0, active MTU 1024, UD GRH 40 B); the tests named
# `soft_only_*` (fault injection, behaviour rxe does not show) are filtered out there, and
# RMCA_TESTS_REQUIRE=1 makes any other test that cannot run on rdma fail rather than pass.
# When the VM or the build packages are unavailable: prints "SKIPPED" and exits 0, except under
# RMCA_TESTS_REQUIRE=1 or CI=true (scripts/test.sh), where it fails (exit 1) unless
# RMCA_SKIP_VM=1 opts out explicitly (a machine without QEMU). Otherwise exits non-zero if any
# suite failed.
# usage: scripts/vm-tests.sh [verbs|btl-ud|btl-rc ...]   (default: all three)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
VM=${VERBS_VM_SCRIPT:-$ROOT/../shared/tools/verbs-vm.sh}
case "${RMCA_SKIP_VM:-0}" in
  0 | "") ;;
  1) echo "SKIPPED: rdma-provider tests: RMCA_SKIP_VM=1"; exit 0 ;;
  *) echo "RMCA_SKIP_VM=${RMCA_SKIP_VM} is invalid: valid values are 1 (skip the VM lane) and 0 or unset"; exit 2 ;;
esac
case "${RMCA_TESTS_REQUIRE:-0}" in
  1) required="RMCA_TESTS_REQUIRE=1" ;;
  0 | "") required= ;;
  *) echo "RMCA_TESTS_REQUIRE=${RMCA_TESTS_REQUIRE} is invalid: valid values are 1 and 0 or unset"; exit 2 ;;
esac
if [ -z "$required" ] && [[ "${CI:-}" == [Tt][Rr][Uu][Ee] || "${CI:-}" == 1 ]]; then required="CI=${CI}"; fi
skip() {
  if [ -n "$required" ]; then
    echo "FAILED: rdma-provider tests cannot run: $* ($required: the VM lane must run; set RMCA_SKIP_VM=1 to skip it on a machine without QEMU)"
    exit 1
  fi
  echo "SKIPPED: rdma-provider tests: $*"
  exit 0
}

# suite -> package, test target, the variable that selects the rdma provider in its tests
declare -A PKG=([verbs]=rmca-verbs [btl-ud]=rmca-btl-ud [btl-rc]=rmca-btl-rc)
declare -A TARGET=([verbs]=conformance [btl-ud]=btl_ud [btl-rc]=btl_rc)
declare -A SELECT=([verbs]=RMCA_VERBS_PROVIDER [btl-ud]=RMCA_BTL_UD_TEST_PROVIDER [btl-rc]=RMCA_BTL_RC_TEST_PROVIDER)
suites=("$@")
((${#suites[@]})) || suites=(verbs btl-ud btl-rc)
for s in "${suites[@]}"; do
  [ -n "${PKG[$s]:-}" ] || { echo "unknown suite '$s' (valid: verbs, btl-ud, btl-rc)"; exit 2; }
done

[ -x "$VM" ] || skip "VM script not found at $VM"
for p in libibverbs-dev librdmacm-dev clang pkg-config; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || skip "Debian package $p is not installed"
done

# The guest sees $PWD and VM_DIR read-write (its /tmp is a fresh tmpfs): binaries go there.
export VM_DIR=${VM_DIR:-${TMPDIR:-/tmp}/verbs-vm}
export VM_TIMEOUT=${VM_TIMEOUT:-2400}
mkdir -p "$VM_DIR/bin"
guest="$VM_DIR/bin/run-suites.sh"
{
  echo '#!/bin/bash'
  echo 'failed=0'
} >"$guest"
for s in "${suites[@]}"; do
  json=$(cargo test -p "${PKG[$s]}" --features rdma --test "${TARGET[$s]}" --no-run --message-format=json) ||
    { echo "FAILED: could not build the $s rdma test binary"; exit 1; }
  exe=$(printf '%s\n' "$json" | python3 -c '
import json, sys
want = sys.argv[1]
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == want and m.get("executable"):
        print(m["executable"])' "${TARGET[$s]}")
  [ -n "$exe" ] || { echo "FAILED: $s test executable not found in cargo output"; exit 1; }
  cp "$exe" "$VM_DIR/bin/$s-tests"
  # One test at a time: the emulated guest is slow.
  cat >>"$guest" <<GUEST
echo "== $s tests on Soft-RoCE (rxe0)"
if env ${SELECT[$s]}=rdma RMCA_TESTS_REQUIRE=1 RUST_BACKTRACE=1 "$VM_DIR/bin/$s-tests" --test-threads=1 --skip soft_only_; then
  echo "$s rdma-provider tests: PASSED (rxe0)"
else
  echo "$s rdma-provider tests: FAILED"; failed=1
fi
GUEST
done
echo 'exit $failed' >>"$guest"
chmod +x "$guest"

# Smoke boot: if the guest cannot run at all, skip (or, when required, fail).
if ! "$VM" true >"$VM_DIR/smoke.log" 2>&1; then
  tail -5 "$VM_DIR/smoke.log"
  skip "the verbs VM could not boot here (see $VM_DIR/smoke.log)"
fi
"$VM" "$guest"
