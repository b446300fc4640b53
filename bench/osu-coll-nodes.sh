#!/usr/bin/env bash
# OSU's blocking collectives across the network-namespace nodes of bench/netns-cluster.sh,
# built for rmca and for the MPI peers and run in one sweep with the runtimes alternating, at
# several rank counts (ranks in blocks of RANKS/nodes per node, as rmca-run, rmca-bench --nodes
# and the peers' host lists with slot counts place them; nothing bound: every node shares this
# machine's cores). Each launcher starts in the first node and reaches the others as it would
# real hosts: rmca-run by --hosts/--launch-agent, Open MPI by its rsh launcher and MPICH by
# hydra's ssh launcher, both with an "ssh" that enters the node's network and UTS namespaces
# (the launcher of rmca-bench --nodes).
# Runtimes: rmca (its default stack: coll-hier over coll-base across nodes), rmca-nohier
# (`--mca coll ^hier`: what the hierarchy buys), ompi (Open MPI's ob1 over tcp on
# the nodes' subnet, vader, self; coll/tuned), ompi-han (`--mca coll_han_priority 100`),
# mpich (Debian's ch4:ucx; its UCX judges the namespaces one machine and may use shared memory between them),
# mpich-tcp (the same with UCX_TLS=tcp,self: TCP between its ranks of different nodes).
# The table holds each runtime's median latency over the rounds at every size, [min..max],
# rmca's median over the best peer's (below 1 is better) and rmca-nohier's over rmca's.
#   bench/osu-coll-nodes.sh OSU_SRC NODES [OUT] [ROUNDS]
#     OSU_SRC  an OSU micro-benchmarks 7.x tree with its generated configure (e.g. /tmp/osu),
#              or a bare git repository of one (HEAD is extracted)
#     NODES    the node names, comma-separated, as `bench/netns-cluster.sh up 8 P` prints them
#     OUT      default /tmp/osu-coll-nodes: builds in OUT/build-{rmca,ompi,mpich}, raw output
#              in OUT/raw, the tables in OUT/tables.txt, one JSON object per row in
#              OUT/rows.json
#     ROUNDS   default 3
#   BENCHES="osu_barrier osu_bcast" (default: osu_barrier osu_bcast osu_reduce osu_allreduce
#   osu_allgather osu_alltoall osu_reduce_scatter), RANKS="8 16 32" (default),
#   MAXSIZE=65536 (default), ITERS=50 OSU's `-i ITERS -x ITERS/10+1` (default 50: 32 ranks
#   share 2 cores), TIMEOUT=300 seconds per job (default), RUNTIMES="rmca ompi" (default:
#   rmca rmca-nohier ompi ompi-han mpich mpich-tcp), RMCA_ARGS="--mca ..." extra rmca-run
#   options of the rmca columns, RMCA_LIB=DIR their OSU binaries on the libmpi.so in DIR (a
#   copy of the build: the sweep is long and the tree's library may be rebuilt meanwhile),
#   RMCA2_LIB=DIR the runtime rmca2: rmca's default stack on the libmpi.so in DIR (a build
#   from before a change, in the same rotation; not a peer in the ratio),
#   TABLES_ONLY=1 no build and no run: the tables again from OUT/raw (as far as it got).
# Needs root, the nodes, target/release/{mpicc,rmca-run,libmpi.so} and the peers
# (scripts/install-deps.sh --bench).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: osu-coll-nodes.sh OSU_SRC NODES [OUT] [ROUNDS]"
src=${1:?$usage}
nodes=${2:?$usage}
out=${3:-/tmp/osu-coll-nodes}
rounds=${4:-3}
benches=${BENCHES:-osu_barrier osu_bcast osu_reduce osu_allreduce osu_allgather osu_alltoall osu_reduce_scatter}
runtimes=${RUNTIMES:-rmca rmca-nohier ompi ompi-han mpich mpich-tcp}
ranks_list=${RANKS:-8 16 32}
maxsize=${MAXSIZE:-65536}
iters=${ITERS:-50}
timeout_s=${TIMEOUT:-300}
osu_dir=c/mpi/collective/blocking
rel=$root/target/release
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS must be a positive integer, not '$rounds'" >&2; exit 2; }
[[ $maxsize =~ ^[1-9][0-9]*$ ]] || { echo "MAXSIZE must be a positive integer, not '$maxsize'" >&2; exit 2; }
[[ $iters =~ ^[1-9][0-9]*$ ]] || { echo "ITERS must be a positive integer, not '$iters'" >&2; exit 2; }
[[ $timeout_s =~ ^[1-9][0-9]*$ ]] || { echo "TIMEOUT must be a positive integer, not '$timeout_s'" >&2; exit 2; }
IFS=, read -r -a node_arr <<<"$nodes"
((${#node_arr[@]} >= 2)) || { echo "NODES: give at least two nodes, not '$nodes'" >&2; exit 2; }
for n in "${node_arr[@]}"; do
  [[ $n =~ ^[A-Za-z0-9_.][A-Za-z0-9_.-]*$ ]] || { echo "NODES: '$n' is not a node name" >&2; exit 2; }
  [[ -e /run/netns/$n ]] || { echo "NODES: no network namespace '$n' (bench/netns-cluster.sh up N PREFIX, as root)" >&2; exit 2; }
done
for n in $ranks_list; do
  [[ $n =~ ^[1-9][0-9]*$ && $n -ge 2 ]] || { echo "RANKS: '$n' is not a rank count of at least 2" >&2; exit 2; }
done
first=${node_arr[0]}
# The first node's address, for rmca-run's PMI server (bench/netns-cluster.sh writes it).
pmi_addr=$(awk -v n="$first" '{ for (i = 2; i <= NF; i++) if ($i == n) { print $1; exit } }' "/etc/netns/$first/hosts")
[[ -n $pmi_addr ]] || { echo "/etc/netns/$first/hosts does not name $first" >&2; exit 2; }
# Open MPI's tcp BTL on the nodes' bridge only.
subnet=${pmi_addr%.*}.0/24

build_of() {
  case $1 in
  rmca | rmca-nohier | rmca2) echo rmca ;;
  ompi | ompi-han) echo ompi ;;
  mpich | mpich-tcp) echo mpich ;;
  *) echo "unknown runtime '$1' (valid: rmca rmca-nohier rmca2 ompi ompi-han mpich mpich-tcp)" >&2; exit 2 ;;
  esac
}
# shellcheck source=bench/osu-build.sh
source "$(dirname "$0")/osu-build.sh"
builds=$(for rt in $runtimes; do build_of "$rt"; done | sort -u)
for b in $builds; do
  command -v "$(cc_of "$b")" >/dev/null || { echo "$b: $(cc_of "$b") not found" >&2; exit 2; }
done

mkdir -p "$out/raw"
# ssh for the peers' launchers: `[-options] NODE COMMAND-LINE...` run in NODE's network
# namespace and in a UTS namespace named NODE (the peers tell nodes apart by host name).
agent=$out/netns-launch.sh
cat >"$agent" <<'EOF'
#!/bin/sh
while [ "${1#-}" != "$1" ]; do shift; done
node=$1
shift
exec ip netns exec "$node" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$node" "$*"
EOF
chmod 755 "$agent"

[[ -n ${TABLES_ONLY:-} ]] && rounds_run=0 || rounds_run=$rounds
# shellcheck disable=SC2086 # the build list is words on purpose
[[ -n ${TABLES_ONLY:-} ]] || osu_build "$out" "$src" "$osu_dir" "$benches" $builds || exit 1

# NODE:K,... over the nodes a job of $1 ranks uses (blocks of ceil(N/nodes)).
host_slots() {
  local n=$1 per i k list=
  per=$(((n + ${#node_arr[@]} - 1) / ${#node_arr[@]}))
  for ((i = 0; i < ${#node_arr[@]}; i++)); do
    k=$((n - i * per))
    ((k > per)) && k=$per
    ((k <= 0)) && break
    list+="${list:+,}${node_arr[i]}:$k"
  done
  echo "$list"
}
# The launcher line of runtime $1 on $2 ranks, started in the first node, into the array L.
launch() {
  local rt=$1 n=$2
  L=(ip netns exec "$first" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$first")
  case $rt in
  rmca | rmca-nohier | rmca2)
    if [[ $rt == rmca2 ]]; then
      L+=(env "LD_LIBRARY_PATH=${RMCA2_LIB:?rmca2 runs the libmpi.so in RMCA2_LIB}")
    elif [[ -n ${RMCA_LIB:-} ]]; then
      L+=(env "LD_LIBRARY_PATH=$RMCA_LIB")
    fi
    L+=("$rel/rmca-run" -n "$n" --timeout "$timeout_s" --hosts "$nodes"
      --launch-agent 'ip netns exec {node} {cmd}' --pmi-addr "$pmi_addr")
    [[ $rt == rmca-nohier ]] && L+=(--mca coll '^hier')
    # shellcheck disable=SC2206 # extra options are words on purpose
    L+=(${RMCA_ARGS:-})
    ;;
  ompi | ompi-han)
    L+=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun.openmpi -np "$n"
      --host "$(host_slots "$n")" --mca plm_rsh_agent "$agent" --bind-to none
      --mca pml ob1 --mca btl tcp,vader,self --mca btl_tcp_if_include "$subnet")
    [[ $rt == ompi-han ]] && L+=(--mca coll_han_priority 100)
    ;;
  mpich | mpich-tcp)
    L+=(mpiexec.mpich -n "$n" -hosts "$(host_slots "$n")" -launcher ssh -launcher-exec "$agent")
    [[ $rt == mpich-tcp ]] && L+=(-genv UCX_TLS tcp,self)
    ;;
  esac
  return 0
}

[[ -n ${TABLES_ONLY:-} ]] || echo "\$ bench/osu-coll-nodes.sh $src $nodes $out $rounds  (BENCHES='$benches' RUNTIMES='$runtimes' RANKS='$ranks_list' MAXSIZE=$maxsize ITERS=$iters TIMEOUT=$timeout_s RMCA_ARGS='${RMCA_ARGS:-}' RMCA_LIB='${RMCA_LIB:-}' RMCA2_LIB='${RMCA2_LIB:-}')" >"$out/tables.txt"
[[ -n ${TABLES_ONLY:-} ]] || echo "commit: $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo ' + uncommitted changes')" >>"$out/tables.txt"
[[ -n ${TABLES_ONLY:-} ]] || echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, ${#node_arr[@]} namespace nodes" >>"$out/tables.txt"
[[ -n ${TABLES_ONLY:-} ]] || echo "load before: $(uptime)" >>"$out/tables.txt"
for ((r = 1; r <= rounds_run; r++)); do
  for n in $ranks_list; do
    for bench in $benches; do
      args=(-m "1:$maxsize" -i "$iters" -x "$((iters / 10 + 1))")
      [[ $bench == osu_barrier ]] && args=(-i "$iters" -x "$((iters / 10 + 1))")
      for rt in $runtimes; do
        echo "round $r/$rounds: $bench on $n ranks of $rt" >&2
        launch "$rt" "$n"
        timeout $((timeout_s + 30)) "${L[@]}" "$out/build-$(build_of "$rt")/$osu_dir/$bench" "${args[@]}" \
          >"$out/raw/$bench.$n.$rt.$r" 2>"$out/raw/$bench.$n.$rt.$r.err" ||
          echo "$bench on $n ranks of $rt, round $r failed (see $out/raw/$bench.$n.$rt.$r.err)" >&2
      done
    done
  done
done
[[ -n ${TABLES_ONLY:-} ]] || echo "load after:  $(uptime)" >>"$out/tables.txt"

OSU_RAW_DIR=$(dirname "$0") python3 - "$out" "$rounds" "$benches" "$ranks_list" "$runtimes" "${#node_arr[@]}" <<'EOF' | tee -a "$out/tables.txt"
import json, os, statistics, sys

sys.path.insert(0, os.environ["OSU_RAW_DIR"])
from osu_raw import figure, read_raw  # noqa: E402

out, rounds = sys.argv[1], int(sys.argv[2])
benches, ranks_list, runtimes = sys.argv[3].split(), sys.argv[4].split(), sys.argv[5].split()
nodes = int(sys.argv[6])
rows = open(os.path.join(out, "rows.json"), "w")
peers = [p for p in runtimes if not p.startswith("rmca")]


for bench in benches:
    for n in ranks_list:
        vals = read_raw(out, bench, n, runtimes, rounds)
        per = -(-int(n) // nodes)
        print(f"\n# {bench}, {n} ranks ({per} per node): us, lower is better; median [min..max] of {rounds} rounds")
        head = f"{'size':>8}" + "".join(f"{rt:>30}" for rt in runtimes)
        if "rmca" in runtimes and peers:
            head += f"{'rmca/best peer':>16}"
        if "rmca" in runtimes and "rmca-nohier" in runtimes:
            head += f"{'nohier/rmca':>12}"
        print(head)
        for s in sorted({s for (_, s) in vals}):
            line, med = f"{s:>8}", {}
            for rt in runtimes:
                v = vals.get((rt, s))
                if not v:
                    line += f"{'-':>30}"
                    continue
                med[rt] = statistics.median(v)
                line += f"{f'{figure(med[rt])} [{figure(min(v))}..{figure(max(v))}]':>30}"
            ratio = nohier = None
            if "rmca" in runtimes and peers:
                have = [med[p] for p in peers if p in med]
                if "rmca" in med and have and min(have) > 0:
                    ratio = med["rmca"] / min(have)
                line += f"{ratio:>16.2f}" if ratio is not None else f"{'-':>16}"
            if "rmca" in runtimes and "rmca-nohier" in runtimes:
                if med.get("rmca") and "rmca-nohier" in med:
                    nohier = med["rmca-nohier"] / med["rmca"]
                line += f"{nohier:>12.2f}" if nohier is not None else f"{'-':>12}"
            print(line)
            rows.write(json.dumps({"benchmark": bench, "ranks": int(n), "size": s, "medians": med,
                                   "runs": {rt: vals.get((rt, s), []) for rt in runtimes},
                                   "rmca_over_best_peer": ratio, "nohier_over_rmca": nohier}) + "\n")
EOF
