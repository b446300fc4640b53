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
# The `jobs` suite runs multi-process jobs through rmca-run in the guest on the rdma provider:
# dr over ud (stress, every byte checked), dr failing over from a black-holed ud to rc, ob1 over
# rc with combined per-peer and shared receive queues and eager RDMA, four striped QPs, and
# osc rdma (tests/c/rma.c, every put and get by rc's RDMA).
# usage: scripts/vm-tests.sh [verbs|btl-ud|btl-rc|jobs ...]   (default: all four)
# RMCA_VM_TEST_ARGS='...' passes arguments to the verbs/btl-ud/btl-rc test binaries (libtest:
# name filters, --exact, --nocapture; e.g. RMCA_VM_TEST_ARGS=multi_qp for one test), and
# RMCA_VM_TEST_LOG=<filter> sets their RMCA_LOG (the btl-rc tests then log to stderr, e.g.
# rmca_btl_rc=debug; a lost peer's reason shows at warn).
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
# Word-split on purpose: several arguments, none containing spaces (test names, options).
read -r -a test_args <<<"${RMCA_VM_TEST_ARGS:-}"
log_env=
[ -z "${RMCA_VM_TEST_LOG:-}" ] || log_env="RMCA_LOG=$(printf %q "$RMCA_VM_TEST_LOG")"
suites=("$@")
((${#suites[@]})) || suites=(verbs btl-ud btl-rc jobs)
for s in "${suites[@]}"; do
  [ -n "${PKG[$s]:-}" ] || [ "$s" = jobs ] || { echo "unknown suite '$s' (valid: verbs, btl-ud, btl-rc, jobs)"; exit 2; }
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
  [ "$s" = jobs ] && continue
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
if env ${SELECT[$s]}=rdma RMCA_TESTS_REQUIRE=1 RUST_BACKTRACE=1 $log_env "$VM_DIR/bin/$s-tests" --test-threads=1 --skip soft_only_ ${test_args[*]+$(printf '%q ' "${test_args[@]}")}; then
  echo "$s rdma-provider tests: PASSED (rxe0)"
else
  echo "$s rdma-provider tests: FAILED"; failed=1
fi
GUEST
done
if [[ " ${suites[*]} " == *" jobs "* ]]; then
  # Release binaries with the rdma provider, in a target directory of their own (the plain
  # release binaries of the test suite stay soft-only).
  CARGO_TARGET_DIR="$ROOT/target/vm-rdma" cargo build --release --locked --features rmca/rdma \
    -p rmca-run -p rmca-tests -p rmca --bins --example stress ||
    { echo "FAILED: could not build the rdma job binaries"; exit 1; }
  mkdir -p "$VM_DIR/bin/jobs"
  for b in rmca-run rc_check examples/stress; do
    cp "$ROOT/target/vm-rdma/release/$b" "$VM_DIR/bin/jobs/" || { echo "FAILED: no $b"; exit 1; }
  done
  # The C library with the rdma provider, and tests/c/rma.c built against it (rmca-cc links
  # the libmpi.so beside it, rpath included) for the osc-rdma job.
  CARGO_TARGET_DIR="$ROOT/target/vm-rdma" cargo build --release --locked --features rmca/rdma \
    -p rmca -p rmca-mpi-lib -p rmca-cc ||
    { echo "FAILED: could not build the rdma C library"; exit 1; }
  "$ROOT/target/vm-rdma/release/rmca-cc" -std=c11 -I"$ROOT/tests/c" "$ROOT/tests/c/rma.c" \
    -o "$VM_DIR/bin/jobs/rma" || { echo "FAILED: could not build tests/c/rma.c"; exit 1; }
  cat >>"$guest" <<GUEST
J=$VM_DIR/bin/jobs
# A job passes when it exits 0 and its output has every expected line (grep -c >= count).
job() {
  local name=\$1 want=\$2 count=\$3; shift 3
  echo "== job: \$name"
  local out
  out=\$("\$J/rmca-run" --timeout 900 "\$@" 2>&1); local rc=\$?
  local got; got=\$(printf '%s\\n' "\$out" | grep -cE -- "\$want")
  if [ \$rc -eq 0 ] && [ "\$got" -ge "\$count" ]; then
    echo "job \$name: PASSED (rxe0)"
  else
    printf '%s\\n' "\$out" | tail -30
    echo "job \$name: FAILED (exit \$rc, \$got of \$count lines matching '\$want')"; failed=1
  fi
}
RD="--mca btl_ud_provider rdma --mca btl_rc_provider rdma"
job dr+ud "errors=0" 2 -n 2 --mca pml dr --mca btl ud,self \$RD \\
  "\$J/stress" --messages 2000 --max-size 256k
# ud preferred (lower latency estimate), then black-holed after 300 fragments: dr moves to rc.
job dr-failover-ud-to-rc "pml.dr.failovers +[1-9]" 1 -n 2 --mca pml dr --mca btl ud,rc,self \$RD \\
  --mca btl_ud_latency 1000 --mca btl_rc_latency 50000 --mca btl_ud_fault_blackhole_after 300 \\
  --mca pml_dr_btl_fail_silence 200 --mca profile 1 "\$J/stress" --messages 1000 --max-size 64k
job ob1+rc-srq-eager-rdma "btl.rc.(eager_rdma_sent|srq_buffers_posted) +[1-9]" 2 -n 2 --mca btl rc,self \$RD \\
  --mca btl_rc_receive_queues P,256,4,2:S,65536,8,2,8,4096 --mca btl_rc_eager_rdma_threshold 4 \\
  --mca profile 1 "\$J/rc_check" stream,large
job ob1+rc-striping "btl.rc.stripes_sent +[1-9]" 1 -n 2 --mca btl rc,self \$RD \\
  --mca btl_rc_qps_per_peer 4 --mca btl_rc_qp_policy striping --mca btl_rc_stripe_threshold 4k \\
  --mca profile 1 "\$J/rc_check" alltoall,large
# osc rdma over rc's verbs RDMA (issue 29): every call of tests/c/rma.c, every put and get by
# RDMA (small limit 0), the merged profile proving both moved.
job osc-rdma-rc "ok rma:|pml.ob1.osc_rdma_(puts|gets) +[1-9]" 3 -n 2 --mca pml ob1 --mca osc rdma \
  --mca osc_rdma_small_limit 0 --mca btl rc,self \$RD --mca profile 1 "\$J/rma"
GUEST
fi
echo 'exit $failed' >>"$guest"
chmod +x "$guest"

# Smoke boot: if the guest cannot run at all, skip (or, when required, fail).
if ! "$VM" true >"$VM_DIR/smoke.log" 2>&1; then
  tail -5 "$VM_DIR/smoke.log"
  skip "the verbs VM could not boot here (see $VM_DIR/smoke.log)"
fi
"$VM" "$guest"
