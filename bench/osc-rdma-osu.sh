#!/usr/bin/env bash
# osc-rdma (issue 29): OSU 7.4 one-sided, -w create, one round at 2 ranks, runtimes alternating per
# benchmark (rmca osc-rdma, rmca osc-am, Open MPI, MPICH); B: a directory with OSU's one-sided
# binaries built per MPI in B/rmca, B/ompi, B/mpich (bench/RESULTS.md, "One-sided communication").
# Writes BENCH.RUNTIME files (OSU's output) in the current directory.
rel=$(cd "$(dirname "$0")/.." && pwd)/target/release
B=${B:-/tmp/oscsm-osu}
echo "load before: $(uptime)"
for bench in osu_put_latency osu_get_latency osu_put_bw osu_get_bw; do
  case $bench in *latency) a="-m 1:65536 -i 1000 -x 100";; *) a="-m 1:262144 -i 50 -x 5";; esac
  timeout 120 $rel/rmca-run -n 2 --bind-to core --mca osc rdma $B/rmca/$bench -w create $a > $bench.rdma 2>&1
  timeout 120 $rel/rmca-run -n 2 --bind-to core --mca osc am $B/rmca/$bench -w create $a > $bench.am 2>&1
  timeout 120 mpirun.openmpi -n 2 --bind-to core --allow-run-as-root --oversubscribe $B/ompi/$bench -w create $a > $bench.ompi 2>&1
  timeout 120 mpiexec.mpich -n 2 -bind-to core $B/mpich/$bench -w create $a > $bench.mpich 2>&1
done
echo "load after: $(uptime)"
