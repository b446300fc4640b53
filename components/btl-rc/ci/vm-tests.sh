#!/bin/bash
# Runs btl-rc's integration tests on real verbs: builds the test binary on the host with the
# `rdma` feature and runs it inside a throwaway QEMU guest with a Soft-RoCE device (rxe0), using
# ../shared/tools/verbs-vm.sh (as verbs/ci/vm-tests.sh does). The same tests run on the soft
# provider in plain `cargo test`; here RMCA_BTL_RC_TEST_PROVIDER=rdma selects rxe0 (GRH 40 B on
# the UD connection-management QP, GID 0, active MTU 1024).
# Prints "SKIPPED" and exits 0 when the VM or the build packages are unavailable.
# usage: components/btl-rc/ci/vm-tests.sh [extra test-binary args]
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$ROOT"
VM=${VERBS_VM_SCRIPT:-$ROOT/../shared/tools/verbs-vm.sh}
skip() { echo "SKIPPED: btl-rc rdma-provider tests: $*"; exit 0; }

[ -x "$VM" ] || skip "VM script not found at $VM"
for p in libibverbs-dev librdmacm-dev clang pkg-config; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || skip "Debian package $p is not installed"
done

json=$(cargo test -p rmca-btl-rc --features rdma --test btl_rc --no-run --message-format=json) ||
  { echo "FAILED: could not build the btl-rc rdma test binary"; exit 1; }
exe=$(printf '%s\n' "$json" | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "btl_rc" and m.get("executable"):
        print(m["executable"])')
[ -n "$exe" ] || { echo "FAILED: btl_rc test executable not found in cargo output"; exit 1; }

export VM_DIR=${VM_DIR:-${TMPDIR:-/tmp}/verbs-vm-rc}
export VM_TIMEOUT=${VM_TIMEOUT:-1200}
mkdir -p "$VM_DIR/bin"
cp "$exe" "$VM_DIR/bin/btl-rc-tests"

if ! "$VM" true >"$VM_DIR/smoke.log" 2>&1; then
  tail -5 "$VM_DIR/smoke.log"
  skip "the verbs VM could not boot here (see $VM_DIR/smoke.log)"
fi

echo "running the btl-rc tests on Soft-RoCE inside the VM"
"$VM" env RMCA_BTL_RC_TEST_PROVIDER=rdma RUST_BACKTRACE=1 "$VM_DIR/bin/btl-rc-tests" --test-threads=1 "$@"
rc=$?
if [ $rc -eq 0 ]; then echo "btl-rc rdma-provider tests: PASSED (rxe0)"; else echo "btl-rc rdma-provider tests: FAILED (exit $rc)"; fi
exit $rc
