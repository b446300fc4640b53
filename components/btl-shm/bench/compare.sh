#!/bin/sh
# Run btl-shm's raw benchmark and the same measurements through the MPI libraries installed
# here, alternating, in one session (figures on a shared VM move with where the host places its
# vCPUs: compare ratios within a round, and medians across rounds).
# Usage: components/btl-shm/bench/compare.sh [rounds] [--quick]
set -eu
rounds=${1:-3}
quick=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${CARGO_TARGET_DIR:-$root/target}
cargo build --release -q -p rmca-btl-shm --example shm_bench --manifest-path "$root/Cargo.toml"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
peers=""
if command -v mpicc.mpich >/dev/null 2>&1; then
    mpicc.mpich -O2 -Wno-stringop-overflow "$here/mpi_bench.c" -o "$tmp/mpich_bench" && peers="$peers mpich"
fi
if command -v mpicc.openmpi >/dev/null 2>&1; then
    mpicc.openmpi -O2 -Wno-stringop-overflow "$here/mpi_bench.c" -o "$tmp/ompi_bench" && peers="$peers vader"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for r in $(seq 1 "$rounds"); do
    echo "=== round $r: load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "--- rmca btl-shm (raw BTL)"
    "$out/release/examples/shm_bench" $quick
    for p in $peers; do
        echo "--- $p"
        case $p in
        mpich) mpiexec.mpich -n 2 -bind-to core "$tmp/mpich_bench" $quick mpich ;;
        vader) mpirun.openmpi -n 2 --bind-to core --mca pml ob1 --mca btl self,vader "$tmp/ompi_bench" $quick vader ;;
        esac
    done
done
