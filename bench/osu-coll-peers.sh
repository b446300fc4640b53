#!/usr/bin/env bash
# OSU's own blocking collective benchmarks, built for rmca and for the MPI peers, run in one
# sweep with the runtimes alternating, at several rank counts on this node: bench/osu-peers.sh
# (the one OSU runner: builds, launch lines, binding, tables, rows.json) with the collectives'
# defaults. Runtimes: rmca (its default coll stack: coll-sm on one node), rmca-base
# (`--mca coll base`: coll-base's point-to-point schedules), ompi (Open MPI's default,
# coll/tuned), ompi-han (coll/han forced), ompi-sm (coll/sm forced), mpich. Ranks are bound to
# cores while they fit the cores, else unbound (every runtime alike). The table holds each
# runtime's median latency over the rounds at every size, [min..max], rmca's median over the
# best peer's (below 1 is better) and rmca-base's over rmca's.
#   bench/osu-coll-peers.sh OSU_SRC [OUT] [ROUNDS]
#     OSU_SRC  an OSU micro-benchmarks 7.x tree with its generated configure (e.g. /tmp/osu),
#              or a bare git repository of one (HEAD is extracted)
#     OUT      default /tmp/osu-coll: builds in OUT/build-{rmca,ompi,mpich}, raw output in
#              OUT/raw, the tables in OUT/tables.txt, one JSON object per row in OUT/rows.json
#     ROUNDS   default 3
#   BENCHES="osu_barrier osu_allreduce" (default: osu_barrier osu_bcast osu_reduce
#   osu_allreduce osu_allgather osu_alltoall), RANKS="2 4" (default), MAXSIZE=65536 (default),
#   RUNTIMES="rmca rmca-base ompi ompi-han ompi-sm mpich" (default) restrict the sweep;
#   ITERS=200 passes OSU `-i 200 -x 20` (default: OSU's own counts; oversubscribed MPICH
#   takes milliseconds per collective, so its 4-rank runs need fewer).
# Needs target/release/{mpicc,rmca-run,libmpi.so} and the peers (scripts/install-deps.sh --bench).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OSU_DIR=c/mpi/collective/blocking \
  BENCHES=${BENCHES:-osu_barrier osu_bcast osu_reduce osu_allreduce osu_allgather osu_alltoall} \
  RANKS=${RANKS:-2 4} \
  MAXSIZE=${MAXSIZE:-65536} \
  RUNTIMES=${RUNTIMES:-rmca rmca-base ompi ompi-han ompi-sm mpich} \
  exec "$here/osu-peers.sh" "${1:?usage: osu-coll-peers.sh OSU_SRC [OUT] [ROUNDS]}" "${2:-/tmp/osu-coll}" "${3:-3}"
