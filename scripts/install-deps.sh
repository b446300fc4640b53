#!/usr/bin/env bash
# Installs the Debian packages the tests and benchmarks need. Idempotent; safe to run often.
#   scripts/install-deps.sh          test dependencies (CI runs this)
#   scripts/install-deps.sh --bench  also the peers measured by rmca-bench --vs
set -euo pipefail
pkgs=(
  gcc                           # C fixtures of the plugin-loading tests (impostor plugins)
  iproute2                      # network-namespace tests of rmca-run (multi-node placement)
  mpich                         # mpiexec.hydra: rmca ranks under MPICH's launcher (PMI-1)
  openmpi-bin libopenmpi-dev libmpich-dev # rmca-bench --nodes places Open MPI and MPICH ranks (tests/tests/bench_nodes.rs)
  slurmctld slurmd slurm-client # a single-node Slurm started by the tests (srun --mpi=pmi2)
  libpmix-dev                   # OpenPMIx: srun --mpi=pmix ranks load libpmix.so.2; headers for the layout test
  util-linux                    # nsenter, for the namespaced Slurm test
  libibverbs-dev librdmacm-dev  # the verbs 'rdma' provider (rdma-sys)
  clang libclang-dev pkg-config # bindgen for rdma-sys
  ibverbs-providers rdma-core   # rxe provider library for the Soft-RoCE guest
  valgrind python3              # scripts/miri.sh's fallback when no Miri can be installed
)
if [[ "${1:-}" == "--bench" ]]; then
  pkgs+=(libfabric-bin hwloc)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
