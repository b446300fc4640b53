#!/usr/bin/env bash
# A cluster of N "nodes" on this machine for multi-node benchmarks: N network namespaces, each
# with its own address on one bridge (in a switch namespace of its own, so the host's network
# is untouched), and an /etc/netns/<node>/hosts naming every node (what `ip netns exec` shows a
# program as /etc/hosts), so that launchers that resolve host names (Open MPI, MPICH) find them.
#   bench/netns-cluster.sh up N [PREFIX]    prints the node names, comma-separated
#   bench/netns-cluster.sh down [PREFIX]
# Needs root and iproute2. Nodes are PREFIX0..PREFIX{N-1} (default prefix rmcan), addresses
# 10.201.0.1..N; run a command on node i with `ip netns exec PREFIXi CMD`.
set -euo pipefail
cmd=${1:?usage: netns-cluster.sh up N [PREFIX] | down [PREFIX]}
case $cmd in
up)
  n=${2:?usage: netns-cluster.sh up N [PREFIX]}
  p=${3:-rmcan}
  [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 200)) || { echo "N must be 1..200, not '$n'" >&2; exit 2; }
  sw="${p}sw"
  ip netns add "$sw"
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  hosts="127.0.0.1 localhost"$'\n'
  for ((i = 0; i < n; i++)); do hosts+="10.201.0.$((i + 1)) ${p}${i}"$'\n'; done
  for ((i = 0; i < n; i++)); do
    node="${p}${i}"
    ip netns add "$node"
    ip link add "${p}v${i}" type veth peer name "${p}b${i}"
    ip link set "${p}v${i}" netns "$node"
    ip link set "${p}b${i}" netns "$sw"
    ip -n "$sw" link set "${p}b${i}" master br0 up
    ip -n "$node" addr add "10.201.0.$((i + 1))/24" dev "${p}v${i}"
    ip -n "$node" link set "${p}v${i}" up
    ip -n "$node" link set lo up
    mkdir -p "/etc/netns/$node"
    printf '%s' "$hosts" >"/etc/netns/$node/hosts"
    printf '%s\n' "$node" >"/etc/netns/$node/hostname"
  done
  seq 0 $((n - 1)) | sed "s/^/${p}/" | paste -sd, -
  ;;
down)
  p=${2:-rmcan}
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^${p}([0-9]+|sw)$" || true); do
    ip netns del "$ns"
    rm -rf "/etc/netns/$ns"
  done
  ;;
*) echo "unknown command '$cmd': up or down" >&2; exit 2 ;;
esac
