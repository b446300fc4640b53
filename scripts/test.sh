#!/usr/bin/env bash
# The whole test suite: formatting, lints, every crate's tests (unit, property, multi-process
# integration), then the verbs-provider and BTL tests on real verbs inside a Soft-RoCE guest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo build (release binaries used by the multi-process tests)"
cargo build --workspace --release --bins --examples --locked
echo "== cargo test"
cargo test --workspace --locked
if [[ -x verbs/ci/vm-tests.sh ]]; then
  echo "== verbs tests on Soft-RoCE (QEMU guest)"
  bash verbs/ci/vm-tests.sh
fi
