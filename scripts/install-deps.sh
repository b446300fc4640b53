#!/usr/bin/env bash
# Installs the Debian packages the tests and benchmarks need. Idempotent; safe to run often.
#   scripts/install-deps.sh          test dependencies (CI runs this)
#   scripts/install-deps.sh --bench  also the peers measured by rmca-bench --vs
#   scripts/install-deps.sh --conformance  also what conformance/ needs to build MPICH's test
#                                    suite (autotools) besides mpi4py's (python3-venv, -dev)
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
  python3-venv python3-dev      # conformance/mpi4py.sh: a venv, and Python.h to build mpi4py
  gfortran cmake                # the MPI Fortran interface (bindings/fortran) and its tests: FindMPI (tests/tests/fortran.rs)
  libfabric-bin                 # fi_pingpong: the rxd peer of rmca-faults (tests/tests/faults_sweep.rs)
)
if [[ "${1:-}" == "--bench" ]]; then
  pkgs+=(libfabric-bin hwloc)
fi
if [[ "${1:-}" == "--conformance" ]]; then
  pkgs+=(autoconf automake libtool make) # conformance/mpich-testsuite.sh: autogen of test/mpi
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
