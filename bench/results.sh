#!/usr/bin/env bash
# Regenerates the measured tables of bench/RESULTS.md. Each table there sits between
#   <!-- results:NAME begin -->  and  <!-- results:NAME end -->
# and comes from ONE command of the list below. For every table this runs the command (from the
# repository root, the release binaries first in PATH), keeps its output with the date and the
# load (uptime) before and after in OUT (default bench/out-results-<date>), and rewrites that
# block only: command, date, load, commit (HEAD, "plus uncommitted changes" when the work tree
# differs), then the tables (the output without progress lines, JSON lines or log lines).
#   bench/results.sh                          every table this machine can run (others skipped)
#   TABLES="osu-latency dr-ud" bench/results.sh   some (a missing need is then an error)
#   bench/results.sh --list                   the list, with what each table needs
# Needs `cargo build --release --workspace --bins --examples --lib`. The long suites take many
# minutes each and every figure moves with the load: run on a quiet machine, and read the ratios.
# A command names how to get what it runs on: `$(bench/osu-trees.sh T)` an OSU tree (made when
# missing), `$(bench/lib-at.sh COMMIT)` the C library of an older commit (a "before" column;
# built once, minutes, from the repository's history). These run before the load is taken; one
# that fails skips the table. No command names a /tmp path that no script makes (outputs
# only): tests/tests/results_layout.rs checks it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${RMCA_BIN:-${CARGO_TARGET_DIR:-$root/target}/release}
out=${OUT:-$root/bench/out-results-$(date -u +%Y%m%dT%H%M%SZ)}
results=${RESULTS_MD:-$root/bench/RESULTS.md}

# NAME | NEEDS | COMMAND. NEEDS, comma-separated ("-": the release build only):
#   peers     Open MPI and MPICH (scripts/install-deps.sh --bench)
#   rxd       libfabric's fi_pingpong (Debian libfabric-bin, scripts/install-deps.sh --bench)
#   valgrind  callgrind (bench/instructions.sh)
#   root      run as root
#   netns:P   network-namespace nodes P0..P7, as root: bench/netns-cluster.sh up 8 P
#   dir:D     the directory D must exist (not for /tmp: the command makes what it needs there)
#   manual    not run by this script: the block says how it was measured
tables=(
  "one-node-sweep|peers|rmca-bench latency,bw -n 2 --vs --runs 5 --min 4k --max 1m"
  "one-node-8b|peers|rmca-bench latency,bw,msgrate,barrier,allreduce --min 8 --max 8 --runs 21 --vs --json"
  "one-node-8b-latency|peers|rmca-bench latency --min 8 --max 8 --runs 5 --conf ob1+shm --peers ompi-vader,mpich,rmca-c"
  "one-node-large|peers|rmca-bench latency,bw,bibw,allreduce --min 4k --max 1m --runs 11 --vs --json"
  "osu-windowed|peers|rmca-bench osu_bw,osu_bibw,osu_mbw_mr --min 1 --max 1m --runs 5 --iters 100 --conf ob1+shm --peers ompi-vader,mpich,rmca-c"
  "osu-latency|peers|rmca-bench latency --min 1 --max 1m --runs 5 --conf ob1+shm --peers ompi-vader,mpich,rmca-c"
  "c-instructions|valgrind|bench/instructions.sh target/release"
  "osu-instructions|valgrind,peers|RUNTIMES='rmca ompi' MODES=bw STYLES=all bench/osu-instructions.sh '1 8 2048'"
  "osu-binaries-small-after|peers|RUNTIMES='rmca rmca2 ompi mpich' RMCA2_ARGS='--mca btl_shm_prefault 0' BENCHES='osu_bw osu_bibw osu_mbw_mr osu_latency' MAXSIZE=4096 bench/osu-peers.sh \$(bench/osu-trees.sh osu) /tmp/osu-peers 3 2>&1 | sed -n '/^# osu_/,\$p'"
  "osu-completion-calls|manual|bench/osu-instructions.sh with STYLES=all for rmca before/after and Open MPI: the block says how"
  "dr-ud|rxd|rmca-bench latency,bw --conf dr+ud --peers rxd,udp --runs 5 --min 8 --max 1m"
  "ud-reliability|rxd|rmca-bench --suite seed003-lat --timeout 60"
  "ud-scaling|peers|rmca-bench allconn --procs 2,4,8,16 --mem --runs 3 --conf rc --conf rc+srq --conf ud --peers ompi-vader,mpich --ratio ud/ompi-vader --ratio ud/mpich --timeout 120"
  "wqe|-|rmca-bench --suite wqe --timeout 60"
  "rc-mem|-|rmca-bench --suite rc-mem --timeout 60"
  "rc-conn|-|rmca-bench --suite rc-conn --timeout 60"
  "onenode-memory|peers|OSU=\$(bench/osu-trees.sh peers) ROUNDS=2 BEFORE_LIB=\$(bench/lib-at.sh b381e78) RUNTIMES=\"rmca-ob1-before rmca-ob1 rmca-dr-before rmca-dr ompi mpich\" bench/onenode-memory.sh 2 4 8"
  "netns-allconn|root,netns:b19n,peers|rmca-bench allconn --procs 2,4,8,16,32 --mem --vs --nodes b19n0,b19n1,b19n2,b19n3,b19n4,b19n5,b19n6,b19n7 --runs 3 --timeout 120 --conf rmca=pml=ob1 --conf rmca+srq=pml=ob1,btl_rc_receive_queues=S+256+64 --ratio rmca/ompi-tcp --ratio rmca/ompi-ucx --ratio rmca/mpich --ratio rmca+srq/ompi-tcp --ratio rmca+srq/rmca"
  "netns-memory|root,netns:ldm,peers|rmca-bench allconn --procs 2,4,8,16,32 --mem --nodes ldm0,ldm1,ldm2,ldm3,ldm4,ldm5,ldm6,ldm7 --runs 3 --timeout 180 --conf rmca=pml=ob1 --conf rmca-p32=pml=ob1,btl_rc_receive_queues=P+32+16 --peers ompi-tcp,ompi-ucx,mpich --ratio rmca/ompi-tcp --ratio rmca/rmca-p32"
  "oversub|peers|ROUNDS=3 ITERS=200 bench/oversub.sh 4 8"
  "first-messages|peers|first_messages 3"
  "osc-osu|peers|OSC_OSU_BEFORE=\$(bench/lib-at.sh dec3d3c) osc_osu \$(bench/osu-trees.sh osc)/src 2"
  "osc-small-instructions|valgrind,peers|bench/osc-instructions.sh target/release \$(bench/lib-at.sh dad7bdb) ompi mpich"
  "osc-small-osu|peers|B=\$(bench/osu-trees.sh osc) ROUNDS=5 MAX=65536 TIMEOUT=120 UCX=1 BENCHES='put_latency get_latency put_bw get_bw put_bibw acc_latency get_acc_latency fop_latency cas_latency' bench/osc-small-osu.sh"
  "osc-small-osu-modes|peers|B=\$(bench/osu-trees.sh osc) ROUNDS=3 ITERS=1000 MAX=65536 TIMEOUT=120 UCX=1 MODES='flush_local lock_all pscw fence' BENCHES='put_latency get_latency acc_latency get_acc_latency fop_latency cas_latency' bench/osc-small-osu.sh; B=\$(bench/osu-trees.sh osc) ROUNDS=3 ITERS=200 MIN=4096 MAX=65536 TIMEOUT=120 UCX=1 MODES='flush_local lock_all pscw fence' BENCHES='put_bw get_bw put_bibw' bench/osc-small-osu.sh"
  "osc-create-osu|peers|B=\$(bench/osu-trees.sh osc) MODE=small ROUNDS=7 ITERS=1000 MAX=65536 AM=0 UCX=1 BENCHES='put_latency get_latency acc_latency get_acc_latency fop_latency cas_latency' bench/osc-rdma-osu.sh; B=\$(bench/osu-trees.sh osc) MODE=small ROUNDS=7 ITERS=200 MAX=65536 AM=0 UCX=1 BENCHES='put_bw get_bw' bench/osc-rdma-osu.sh"
  "osc-create-osu-modes|peers|B=\$(bench/osu-trees.sh osc) MODE=small ROUNDS=3 ITERS=1000 MAX=65536 AM=1 ALT=\"env LD_LIBRARY_PATH=\$(bench/lib-at.sh 103e1dc)\" ALT_NAME=before UCX=1 MODES='flush_local lock_all pscw fence' BENCHES='put_latency get_latency acc_latency get_acc_latency fop_latency cas_latency' bench/osc-rdma-osu.sh; B=\$(bench/osu-trees.sh osc) MODE=small ROUNDS=3 ITERS=200 MAX=65536 AM=1 ALT=\"env LD_LIBRARY_PATH=\$(bench/lib-at.sh 103e1dc)\" ALT_NAME=before UCX=1 MODES='flush_local lock_all pscw fence' BENCHES='put_bw get_bw put_bibw' bench/osc-rdma-osu.sh"
  "osc-create-instructions|valgrind,peers|OSC_WIN=pair LOOPS=\"put get acc fop cas putlock\" bench/osc-instructions.sh target/release ompi mpich"
  "osc-am-rt|manual|bench/osc_rt.c with each MPI's mpicc, 3000 iterations, rmca default and osc am, Open MPI and MPICH alternating, 2 rounds: the block says how"
  "osu-coll|peers|ITERS=200 MAXSIZE=16384 RUNTIMES='rmca rmca-base ompi ompi-han mpich' bench/osu-coll-peers.sh \$(bench/osu-trees.sh osu) /tmp/osu-coll 2"
  "coll-sm-2ranks|peers|RMCA2_LIB=\$(bench/lib-at.sh b38e3e8) ITERS=2000 RANKS=2 MAXSIZE=256 BENCHES='osu_reduce osu_allreduce osu_bcast osu_barrier' RUNTIMES='rmca rmca2 ompi ompi-han mpich' bench/osu-coll-peers.sh \$(bench/osu-trees.sh osu) /tmp/coll-osu 5 2>&1 | sed -n '/^# osu_/,\$p'"
  "coll-sm-4ranks|peers|RMCA2_LIB=\$(bench/lib-at.sh b4af681) ITERS=500 RANKS=4 MAXSIZE=4096 BENCHES='osu_barrier osu_bcast osu_reduce osu_allreduce osu_reduce_scatter osu_reduce_scatter_block osu_allgather osu_alltoall' RUNTIMES='rmca rmca2 ompi ompi-han ompi-sm' bench/osu-coll-peers.sh \$(bench/osu-trees.sh osu) /tmp/coll-osu 5 2>&1 | sed -n '/^# osu_/,\$p'"
  "coll-exchange-4ranks|peers|RMCA2_LIB=\$(bench/lib-at.sh b38e3e8) ITERS=1000 RANKS=4 MAXSIZE=1048576 BENCHES='osu_alltoall osu_allgather' RUNTIMES='rmca rmca2 ompi ompi-han' bench/osu-coll-peers.sh \$(bench/osu-trees.sh osu) /tmp/coll-osu-a2a 3 2>&1 | sed -n '/^# osu_/,\$p'"
  "coll-exchange-2ranks|peers|RMCA2_LIB=\$(bench/lib-at.sh b38e3e8) ITERS=2000 RANKS=2 MAXSIZE=65536 BENCHES='osu_alltoall osu_allgather' RUNTIMES='rmca rmca2 ompi ompi-han mpich' bench/osu-coll-peers.sh \$(bench/osu-trees.sh osu) /tmp/coll-osu-a2a 5 2>&1 | sed -n '/^# osu_/,\$p'"
  "coll-sm-posts-2ranks|peers|RMCA2_LIB=\$(bench/lib-at.sh abd1c62) ITERS=1000 RANKS=2 MAXSIZE=65536 BENCHES='osu_barrier osu_bcast osu_reduce osu_allreduce' RUNTIMES='rmca rmca2 ompi ompi-han mpich' bench/osu-coll-peers.sh \$(bench/osu-trees.sh osu) /tmp/osu-coll 3 2>&1 | sed -n '/^# osu_/,\$p'"
  "coll-sm-posts-4ranks|peers|RMCA2_LIB=\$(bench/lib-at.sh abd1c62) ITERS=300 RANKS=4 MAXSIZE=65536 BENCHES='osu_barrier osu_bcast osu_reduce osu_allreduce' RUNTIMES='rmca rmca2 ompi ompi-han' bench/osu-coll-peers.sh \$(bench/osu-trees.sh osu) /tmp/osu-coll 3 2>&1 | sed -n '/^# osu_/,\$p'"
  "coll-sm-instructions|valgrind|RANKS=2 bench/coll-instructions.sh target/release \$(bench/lib-at.sh dad7bdb) target/release"
  "coll-c-entry-instructions|valgrind|bench/coll-instructions.sh target/release \$(bench/lib-at.sh b381e78) target/release"
  "coll-c-entry-varying-2ranks|peers|RMCA2_LIB=\$(bench/lib-at.sh b381e78) ITERS=2000 RANKS=2 MAXSIZE=1024 BENCHES='osu_allgatherv osu_alltoallv' RUNTIMES='rmca rmca2 ompi mpich' bench/osu-coll-peers.sh \$(bench/osu-trees.sh osu) /tmp/vcg-osu 5 2>&1 | sed -n '/^# osu_/,\$p'"
  "coll-sm-barrier-oversub|peers|RMCA2_LIB=\$(bench/lib-at.sh b4af681) ITERS=1000 RANKS='4 8' MAXSIZE=1 BENCHES='osu_barrier' RUNTIMES='rmca rmca2 ompi ompi-sm' bench/osu-coll-peers.sh \$(bench/osu-trees.sh osu) /tmp/coll-osu 5 2>&1 | sed -n '/^# osu_/,\$p'"
  "coll-sm-varying|peers|ITERS=1000 RANKS=2 MAXSIZE=16384 BENCHES='osu_allgatherv osu_alltoallv' RUNTIMES='rmca rmca-base ompi mpich' bench/osu-coll-peers.sh \$(bench/osu-trees.sh osu) /tmp/coll-osu 3 2>&1 | sed -n '/^# osu_/,\$p'"
  "coll-sm-rooted|peers|RMCA2_LIB=\$(bench/lib-at.sh fb59ba2) ITERS=1000 RANKS=2 MAXSIZE=16384 BENCHES='osu_reduce osu_reduce_scatter osu_reduce_scatter_block osu_gather osu_scatter' RUNTIMES='rmca rmca2 ompi ompi-han mpich' bench/osu-coll-peers.sh \$(bench/osu-trees.sh osu) /tmp/coll-osu 3 2>&1 | sed -n '/^# osu_/,\$p'"
  "coll-nodes|root,netns:chn,peers|RUNTIMES='rmca rmca-nohier ompi ompi-han mpich' ITERS=10 TIMEOUT=90 bench/osu-coll-nodes.sh \$(bench/osu-trees.sh osu) chn0,chn1,chn2,chn3,chn4,chn5,chn6,chn7 /tmp/chn-osu 1 2>&1 | sed -n '/^# osu_/,\$p'"
  "coll-nodes-blocks|root,netns:chn,peers|RMCA2_LIB=\$(bench/lib-at.sh 6dbf40d) RANKS='8 16' BENCHES='osu_alltoall osu_allgather' RUNTIMES='rmca rmca2 ompi ompi-han mpich' ITERS=10 TIMEOUT=90 bench/osu-coll-nodes.sh \$(bench/osu-trees.sh osu) chn0,chn1,chn2,chn3,chn4,chn5,chn6,chn7 /tmp/chn-osu-blocks 2 2>&1 | sed -n '/^# osu_/,\$p'"
  "osu-overlap|peers|SIZES=1024:1048576 ITERS=100 bench/osu-overlap.sh \$(bench/osu-trees.sh osu) /tmp/osu-overlap 3"
  "fortran-instructions|valgrind|fortran_instructions"
  "fortran-timed|-|bench/fortran/compare.sh 31"
  "mt-rate|peers|RMCA_BEFORE=\$(bench/lib-at.sh b4af681) bench/mt-rate-peers.sh 3 \$(bench/osu-trees.sh mt)"
  "threaded-rust|manual|rmca-run -n 2 target/release/examples/threaded plain 20000 and rate T 4000 for T in 1 2 4, alternating, 7 rounds: the block says how"
  "sim-validation|-|mpicc -Wall -Wextra -Werror -std=c11 tools/rmca-sim/validate/pairwise.c -o /tmp/rmca-sim-pairwise && rmca-sim validate --procs 2,4,8,16 --iters 1000 && rmca-sim validate --procs 2,4,8,16 --iters 1000 --loss bernoulli:0.05 && rmca-sim validate --procs 4,8 --iters 1000 --loss bernoulli:0.2"
  "sim-memory|-|rmca-sim memory --plot bench/sim/memory.svg"
  "sim-acks|-|rmca-sim acks --plot bench/sim/acks.svg"
  "sim-acks-loss|-|rmca-sim acks --procs 16,256,4096 --loss bernoulli:0.01"
  "sim-recovery|-|rmca-sim recovery --plot bench/sim/recovery.svg"
  "sim-failover|-|rmca-sim failover --procs 2,16,128,1024,4096 --plot bench/sim/failover.svg"
  "sim-failover-validation|manual|rmca-faults --sweep kill (as root), then rmca-sim failover --job: the block says how"
  "sim-alltoall-folding|-|rmca-sim alltoall --method both --procs 2,8,32,128,512,1024"
  "sim-alltoall|-|rmca-sim alltoall --method folded --procs 2,8,32,128,512,1024,2048,4096,8192,16384 --plot bench/sim/alltoall.svg"
  "sim-alltoall-loss|-|rmca-sim alltoall --procs 128,256,512,1024,2048 --losses 'none;bernoulli:0.01;bernoulli:0.05' --plot bench/sim/alltoall-loss.svg"
  "sim-alltoall-loss-4096|-|rmca-sim alltoall --procs 4096 --losses 'bernoulli:0.01;bernoulli:0.05'"
  "sim-alltoall-loss-8192|-|rmca-sim alltoall --procs 8192 --losses 'bernoulli:0.01'"
  "sim-alltoall-rto|-|rmca-sim alltoall --procs 512 --losses 'bernoulli:0.01;bernoulli:0.05' --mca pml_dr_rto_initial_us 5000"
  "sim-alltoall-death|-|rmca-sim alltoall --procs 1024 --losses 'ge:0.0025,0.25;bernoulli:0.01' --death-ms 100"
  "faults-burst|root|rmca-faults --sweep burst --points 0,0.05,0.1,0.2 --transports dr+ud,dr+rc,ob1+rc --sizes 8,4k,64k --lat-iters 200 --bw-bytes 512k --timeout 90 --seed 1 --json --plot bench/faults 2>&1 | grep -v '^rmca-faults:'"
  "faults-corrupt|root|rmca-faults --sweep corrupt --points 0.01,0.05 --transports dr+ud --sizes 8,4k,64k --lat-iters 100 --bw-bytes 256k --timeout 90 --seed 2 --json 2>&1 | grep -v '^rmca-faults:'"
  "faults-peers|root,peers,rxd|rmca-faults --sweep loss --points 0,0.01,0.05 --transports dr+ud,dr+rc,ob1+rc,ompi+tcp,mpich,rxd --sizes 8,4k,64k --lat-iters 200 --bw-bytes 256k --timeout 60 --seed 1 --json --plot bench/faults/peers 2>&1 | grep -v '^rmca-faults:'"
  "faults-kill|root|rmca-faults --sweep kill --points 0.5,1 --transports 'dr+ud[pml_dr_peer_timeout=3000],dr+ud+rc,ob1+rc' --kill-after 1 --kill-run 8 --timeout 40 --seed 1 --json --plot bench/faults 2>&1 | grep -v '^rmca-faults:'"
  "faults-burst-rxd|root,rxd|rmca-faults --sweep burst --points 0,0.05,0.1,0.2 --transports dr+ud,dr+rc,rxd --sizes 8,4k,64k --lat-iters 200 --bw-bytes 512k --timeout 90 --seed 1 --json --plot bench/faults/burst 2>&1 | grep -v '^rmca-faults:'"
  "dr-variants|root|rmca-faults --sweep loss --points 0,0.01,0.05,0.1 --transports 'selective:dr+ud,vfrag:dr+ud[pml_dr_ack_policy=vfrag],cumulative:dr+ud[pml_dr_ack_policy=cumulative],immediate:dr+ud[pml_dr_ack_policy=immediate],fixed-rto:dr+ud[pml_dr_rto_policy=fixed,pml_dr_rto_fixed_us=10000]' --lat-iters 200 --bw-bytes 1m --timeout 90 --seed 1 --prefix rfv --plot bench/faults/variants 2>&1 | grep -v '^rmca-faults:'"
)

# The driver of the first-messages table: bench/first_messages.c built with each MPI's wrapper
# (the program's own usage line for rmca), ROUNDS rounds with the runtimes alternating.
first_messages() {
  local rounds=$1 tmp
  tmp=$(mktemp -d /tmp/rmca-first.XXXXXX)
  mpicc -O2 bench/first_messages.c -o "$tmp/rmca"
  mpicc.openmpi -O2 bench/first_messages.c -o "$tmp/ompi"
  mpicc.mpich -O2 bench/first_messages.c -o "$tmp/mpich"
  for r in $(seq "$rounds"); do
    echo "# round $r: rmca ob1+shm"; rmca-run -n 2 "$tmp/rmca"
    echo "# round $r: rmca dr+shm"; rmca-run -n 2 --mca pml dr "$tmp/rmca"
    echo "# round $r: Open MPI"; OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun.openmpi -n 2 "$tmp/ompi"
    echo "# round $r: MPICH"; mpiexec.mpich -n 2 "$tmp/mpich"
  done
  rm -rf "$tmp"
}

# The driver of the fortran-instructions table: bench/fortran/instructions.sh on this build's
# libmpi, libmpifort and mpi_f08.mod (it takes directories holding the three).
fortran_instructions() {
  local dir
  dir=$(mktemp -d /tmp/rmca-fortran.XXXXXX)
  ln -s "$bin/libmpi.so" "$bin/libmpifort.so" "$bin/fortran/mpi_f08.mod" "$dir/"
  bash bench/fortran/instructions.sh "$dir" | sed "s|$dir|target/release|"
  rm -rf "$dir"
}

# The driver of the osc-osu table: OSU 7.4's nine one-sided programs (SRC: the src directory
# of a pristine OSU 7.4 tree) built with each MPI's wrapper; then, ROUNDS times, for every
# (benchmark, sync mode): rmca (osc-sm serves allocated windows), Open MPI, MPICH and rmca
# with osc am, one after the other. fop/cas run on created windows (OSU 7.4 double-frees
# allocated ones on some runtimes) but for one fop row on an allocated window. Prints the best
# round of each (lowest latency, highest bandwidth) at 1, 8, 64, 4096 and 65536 bytes.
# OSC_OSU_BEFORE=DIR (a directory holding an older build's libmpi.so) adds that build as one
# more runtime ("before": the same rmca binaries, the old library), for before/after tables.
osc_osu() {
  local src=$1 rounds=$2 tmp b rt cc spec mode args kind extra o
  tmp=$(mktemp -d /tmp/rmca-osc.XXXXXX)
  local progs="put_latency get_latency put_bw get_bw put_bibw acc_latency get_acc_latency fop_latency cas_latency"
  local utils="osu_util.c osu_util_mpi.c osu_util_graph.c osu_util_papi.c osu_util_validation.c"
  for rt in rmca:mpicc ompi:mpicc.openmpi mpich:mpicc.mpich; do
    cc=${rt#*:} rt=${rt%%:*}
    mkdir -p "$tmp/$rt"
    for b in $progs; do
      # shellcheck disable=SC2086 # the utility sources are words on purpose
      (cd "$src" && "$cc" -O2 -DPACKAGE_VERSION='"7.4"' -I. -o "$tmp/$rt/osu_$b" "osu_$b.c" \
        $utils -lm -lpthread)
    done
  done
  mkdir -p "$tmp/out"
  for r in $(seq "$rounds"); do
    for spec in "put_latency:default:-w allocate:lat" "put_latency:lock:-w allocate -s lock:lat" \
      "get_latency:default:-w allocate:lat" "get_latency:lock:-w allocate -s lock:lat" \
      "put_bw:default:-w allocate:bw" "put_bw:lock:-w allocate -s lock:bw" \
      "get_bw:default:-w allocate:bw" "get_bw:lock:-w allocate -s lock:bw" \
      "put_bibw:default:-w allocate:bw" "put_bibw:fence:-w allocate -s fence:bw" \
      "acc_latency:default:-w allocate:lat" "acc_latency:lock:-w allocate -s lock:lat" \
      "get_acc_latency:default:-w allocate:lat" "get_acc_latency:flush:-w allocate -s flush:lat" \
      "fop_latency:flush, -w create:-w create:fop" "fop_latency:lock, -w create:-w create -s lock:fop" \
      "cas_latency:flush, -w create:-w create:fop" "cas_latency:lock, -w create:-w create -s lock:fop" \
      "fop_latency:flush, -w allocate:-w allocate:fop" "cas_latency:flush, -w allocate:-w allocate:fop" \
      "fop_latency:lock, -w allocate:-w allocate -s lock:fop" "cas_latency:lock, -w allocate:-w allocate -s lock:fop"; do
      IFS=: read -r b mode args kind <<<"$spec"
      case $kind in
      lat) extra="-m 1:65536 -i 2000 -x 200" ;;
      bw) extra="-m 1:262144 -i 100 -x 10" ;;
      *) extra="-i 5000 -x 500" ;;
      esac
      # A hang (MPICH's cas on allocated windows) costs less on the short fop/cas runs.
      to=180
      [[ $kind == fop ]] && to=60
      for rt in sm ompi mpich am ${OSC_OSU_BEFORE:+before}; do
        o="$tmp/out/$b|$mode|$rt|$r"
        # shellcheck disable=SC2086 # the arguments are words on purpose
        case $rt in
        sm) timeout $to rmca-run -n 2 "$tmp/rmca/osu_$b" $args $extra ;;
        am) timeout $to rmca-run -n 2 --mca osc am "$tmp/rmca/osu_$b" $args $extra ;;
        before) LD_LIBRARY_PATH=$OSC_OSU_BEFORE timeout $to rmca-run -n 2 "$tmp/rmca/osu_$b" $args $extra ;;
        ompi) OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout $to \
          mpirun.openmpi -n 2 "$tmp/ompi/osu_$b" $args $extra ;;
        mpich) timeout $to mpiexec.mpich -n 2 "$tmp/mpich/osu_$b" $args $extra ;;
        esac >"$o" 2>&1 || echo "osc-osu: $b ($mode) on $rt, round $r: exit status $?"
      done
    done
  done
  python3 - "$tmp/out" <<'EOF'
import os, re, sys
from collections import defaultdict

data = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
for f in os.listdir(sys.argv[1]):
    b, mode, rt, _ = f.split("|")
    for line in open(os.path.join(sys.argv[1], f), errors="replace"):
        m = re.match(r"^(\d+)\s+([\d.]+)\s*$", line)
        if m:
            data[(b, mode)][rt][int(m.group(1))].append(float(m.group(2)))
order = "put_latency get_latency put_bw get_bw put_bibw acc_latency get_acc_latency fop_latency cas_latency".split()
rts = ["sm", "am", "ompi", "mpich"]
before = any("before" in d for d in data.values())
if before:
    rts.insert(1, "before")
print("| benchmark | sync | size | rmca osc-sm |" + (" osc-sm before |" if before else "") + " rmca osc-am | Open MPI | MPICH | osc-sm / best peer |")
print("|---|---|---:|---:|" + ("---:|" if before else "") + "---:|---:|---:|---:|")
fmt = lambda x: "-" if x is None else (f"{x:.2f}" if x < 100 else f"{x:.0f}")
for key in sorted(data, key=lambda k: (order.index(k[0]), k[1])):
    b, mode = key
    bw = b.endswith("bw")
    sizes = sorted({s for rt in data[key].values() for s in rt})
    for s in [s for s in sizes if s in (1, 8, 64, 4096, 65536)]:
        best = {}
        for rt in rts:
            v = data[key][rt][s]
            best[rt] = (max(v) if bw else min(v)) if v else None
        peers = [best[p] for p in ("ompi", "mpich") if best[p] is not None]
        ratio = ""
        if best["sm"] and peers:
            p = max(peers) if bw else min(peers)
            ratio = f"{best['sm'] / p if bw else p / best['sm']:.2f}x"
        cells = " | ".join(fmt(best[rt]) for rt in rts)
        print(f"| {b} | {mode} | {s} | {cells} | {ratio} |")
EOF
  rm -rf "$tmp"
}

# Prints why NEEDS are not met here (nothing when they are).
missing() {
  local need why=()
  IFS=, read -ra needs <<<"$1"
  for need in "${needs[@]}"; do
    case $need in
    -) ;;
    peers) command -v mpirun.openmpi >/dev/null && command -v mpiexec.mpich >/dev/null ||
      why+=("Open MPI and MPICH (scripts/install-deps.sh --bench)") ;;
    rxd) command -v fi_pingpong >/dev/null || why+=("fi_pingpong (Debian libfabric-bin)") ;;
    valgrind) command -v valgrind >/dev/null || why+=("valgrind (scripts/install-deps.sh)") ;;
    root) ((EUID == 0)) || why+=("root") ;;
    netns:*) ip netns list 2>/dev/null | grep -q "^${need#netns:}0\b" ||
      why+=("namespace nodes ${need#netns:}0..7 (bench/netns-cluster.sh up 8 ${need#netns:})") ;;
    dir:*) [[ -d ${need#dir:} ]] || why+=("the directory ${need#dir:}") ;;
    manual) why+=("a manual measurement (see its block in bench/RESULTS.md)") ;;
    *) why+=("an unknown need '$need' (valid: -, peers, rxd, valgrind, root, netns:P, dir:D, manual)") ;;
    esac
  done
  ((${#why[@]} == 0)) || printf '%s; ' "${why[@]}" | sed 's/; $//'
}

if [[ ${1:-} == --list ]]; then
  for t in "${tables[@]}"; do
    IFS='|' read -r name needs cmd <<<"$t"
    printf '%-16s needs %-40s %s\n' "$name" "$needs" "$cmd"
  done
  exit 0
fi
if [[ -n ${TABLES:-} ]]; then
  for want in $TABLES; do
    printf '%s\n' "${tables[@]}" | grep -q "^$want|" ||
      { echo "results.sh: no table '$want' (bench/results.sh --list names them)" >&2; exit 2; }
  done
fi

mkdir -p "$out"
status=0
for t in "${tables[@]}"; do
  IFS='|' read -r name needs cmd <<<"$t"
  if [[ -n ${TABLES:-} && " $TABLES " != *" $name "* ]]; then
    continue
  fi
  why=$(missing "$needs")
  if [[ -n $why ]]; then
    echo "results.sh: skipping $name: it needs $why" >&2
    [[ -n ${TABLES:-} ]] && status=1
    continue
  fi
  # The trees and older builds the command names, made first (a build takes minutes).
  made=1
  while read -r sub; do
    # shellcheck disable=SC2016 # the substitution is run by the inner shell
    [[ -z $sub ]] || (cd "$root" && PATH="$bin:$PATH" && export PATH && eval "${sub:2:-1}" >/dev/null) ||
      { echo "results.sh: skipping $name: $sub failed" >&2; made=0; break; }
  done < <(grep -oE '\$\(bench/(osu-trees|lib-at)\.sh [^)]*\)' <<<"$cmd" | sort -u)
  if ((!made)); then
    status=1
    continue
  fi
  f=$out/$name
  before=$(uptime)
  date=$(date -u '+%Y-%m-%d %H:%M UTC')
  echo "results.sh: $name: \$ $cmd" >&2
  rc=0
  # shellcheck disable=SC2016 # $cmd is expanded by the inner shell on purpose
  (cd "$root" && PATH="$bin:$PATH" && export PATH && eval "$cmd") >"$f.log" 2>&1 || rc=$?
  after=$(uptime)
  # The tables: no per-job progress, JSON, partial result or tracing log lines.
  grep -avE $'^(run [0-9]+/[0-9]+:|\\{|result [0-9])|\x1b\\[' "$f.log" >"$f.txt" || true
  if [[ ! -s $f.txt ]]; then
    echo "results.sh: $name printed no table (exit status $rc; $f.log): RESULTS.md unchanged" >&2
    status=1
    continue
  fi
  commit=$(git -C "$root" rev-parse --short HEAD)
  if [[ -n $(git -C "$root" status --porcelain --untracked-files=no) ]]; then
    commit="$commit plus uncommitted changes in the work tree"
  fi
  python3 - "$results" "$name" "$cmd" "$date" "$before" "$after" "$commit" "$rc" "$f.txt" <<'EOF'
import re, sys

path, name, cmd, date, before, after, commit, rc, txt = sys.argv[1:10]
load = lambda u: re.search(r"load average: (.*)", u).group(1).strip()
lines = [
    f"- command: `{cmd}`",
    f"- date: {date}",
    f"- load: {load(before)} before; {load(after)} after",
    f"- commit: {commit}",
]
if rc != "0":
    lines.append(f"- exit status: {rc} (a failed job's figures are `-`)")
body = open(txt).read().strip("\n")
block = "\n".join(lines) + "\n\n```\n" + body + "\n```\n"
begin, end = f"<!-- results:{name} begin -->", f"<!-- results:{name} end -->"
text = open(path).read()
if text.count(begin) != 1 or text.count(end) != 1:
    sys.exit(f"results.sh: {path} needs exactly one {begin} ... {end} pair")
a, rest = text.split(begin, 1)
_, b = rest.split(end, 1)
open(path, "w").write(a + begin + "\n" + block + end + b)
print(f"results.sh: {path}: table {name} rewritten", file=sys.stderr)
EOF
  cat "$f.txt"
done
exit $status
