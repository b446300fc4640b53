#!/bin/bash
# Runs the verbs conformance suite on real verbs: builds the test binary on the host with the
# `rdma` feature and runs it inside a throwaway QEMU guest with a Soft-RoCE device (rxe0), using
# ../shared/tools/verbs-vm.sh (the shared dir sits beside the repository clone).
# Prints a clear "SKIPPED" line and exits 0 when the VM or the build packages are unavailable;
# otherwise exits with the suite's status.
# usage: verbs/ci/vm-tests.sh [extra test-binary args]   (run from anywhere)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
VM=${VERBS_VM_SCRIPT:-$ROOT/../shared/tools/verbs-vm.sh}
skip() { echo "SKIPPED: rmca-verbs rdma-provider tests: $*"; exit 0; }

[ -x "$VM" ] || skip "VM script not found at $VM"
for p in libibverbs-dev librdmacm-dev clang pkg-config; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || skip "Debian package $p is not installed"
done

# 1. build on the host and find the conformance test executable
json=$(cargo test -p rmca-verbs --features rdma --test conformance --no-run --message-format=json) ||
  { echo "FAILED: could not build the rdma test binary"; exit 1; }
exe=$(printf '%s\n' "$json" | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "conformance" and m.get("executable"):
        print(m["executable"])')
[ -n "$exe" ] || { echo "FAILED: conformance executable not found in cargo output"; exit 1; }

# 2. the guest sees $PWD and VM_DIR read-write (its /tmp is a fresh tmpfs): copy the binary there
export VM_DIR=${VM_DIR:-${TMPDIR:-/tmp}/verbs-vm}
export VM_TIMEOUT=${VM_TIMEOUT:-1200}
mkdir -p "$VM_DIR/bin"
cp "$exe" "$VM_DIR/bin/verbs-conformance"

# 3. smoke boot: if the guest cannot run at all, skip rather than fail
if ! "$VM" true >"$VM_DIR/smoke.log" 2>&1; then
  tail -5 "$VM_DIR/smoke.log"
  skip "the verbs VM could not boot here (see $VM_DIR/smoke.log)"
fi

# 4. the suite, on rxe0, one test at a time (the emulated guest is slow)
echo "running the verbs conformance suite on Soft-RoCE inside the VM"
"$VM" env RMCA_VERBS_PROVIDER=rdma RUST_BACKTRACE=1 "$VM_DIR/bin/verbs-conformance" --test-threads=1 "$@"
rc=$?
if [ $rc -eq 0 ]; then echo "rmca-verbs rdma-provider conformance: PASSED (rxe0)"; else echo "rmca-verbs rdma-provider conformance: FAILED (exit $rc)"; fi
exit $rc
