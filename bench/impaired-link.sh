#!/usr/bin/env bash
# Namespace "nodes" joined through rmca-impair, a user-space impaired-link emulator (this
# kernel has no netem): each node has a TUN device `rimp` with address 10.203.0.<i+1>/24 (the
# impaired network) and a veth on a clean bridge with 10.204.0.<i+1>/24 (the control network:
# launchers and PMI, which the impairments spare). rmca-impair routes the TUN devices' packets
# between nodes, impairing each direction (see `rmca-impair --help` for SPEC).
#   bench/impaired-link.sh up N [PREFIX] [-- RMCA-IMPAIR-OPTIONS]  prints the node names
#   bench/impaired-link.sh restart [PREFIX] [-- RMCA-IMPAIR-OPTIONS]  new impairments, same nodes
#   bench/impaired-link.sh stats [PREFIX]     the emulator's counters so far (JSON)
#   bench/impaired-link.sh change [PREFIX]    every direction switches to the emulator's --then
#                                             SPEC now (e.g. --then loss=1: the link dies)
#   bench/impaired-link.sh run [PREFIX] -- RMCA-RUN-ARGS  rmca-run in the first node, placing
#                                             ranks on the nodes (RMCA_RUN: which rmca-run)
#   bench/impaired-link.sh down [PREFIX]      stops the emulator (printing its counters)
# e.g. up 2 -- --impair burst=0.2:4,delay=200us --seed 7, then
#   bench/impaired-link.sh run -- -n 2 --mca pml dr --mca btl ud,self --mca btl_ud_provider soft \
#     PROGRAM
# Each rank runs through /run/rmca-impair/PREFIX/NODE.sh, which binds btl_ud_if_addr and
# btl_rc_if_addr to the node's impaired address, or to its control address for the BTLs listed
# in RMCA_IMPAIR_CLEAN (e.g. RMCA_IMPAIR_CLEAN=rc: a second, clean path). Node names resolve
# (/etc/netns/NODE/hosts) to control addresses, NODE-imp to impaired ones (for Open MPI's
# btl_tcp_if_include=rimp and MPICH). Needs root, iproute2 and /dev/net/tun; MTU of the TUN devices: IMPAIR_MTU (1500).
# The emulator binary: RMCA_IMPAIR, else target/release/rmca-impair of this tree.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${RMCA_IMPAIR:-$here/target/release/rmca-impair}
cmd=${1:?usage: impaired-link.sh up N [PREFIX] [-- OPTS] | restart [PREFIX] [-- OPTS] | stats | change | run [PREFIX] -- ARGS | down [PREFIX]}
shift
n=
if [[ $cmd == up ]]; then
  n=${1:?usage: impaired-link.sh up N [PREFIX] [-- OPTS]}
  shift
  [[ $n =~ ^[0-9]+$ ]] && ((n >= 2 && n <= 200)) || { echo "N must be 2..200, not '$n'" >&2; exit 2; }
fi
p=rmcai
if [[ $# -gt 0 && $1 != -- ]]; then p=$1; shift; fi
[[ $p =~ ^[a-zA-Z][a-zA-Z0-9]{0,9}$ ]] || { echo "PREFIX must be a letter then up to 9 letters or digits, not '$p'" >&2; exit 2; }
if [[ $# -gt 0 && $1 == -- ]]; then shift; fi
state=/run/rmca-impair/$p
mtu=${IMPAIR_MTU:-1500}

nodes() { ip netns list | awk '{print $1}' | grep -E "^${p}[0-9]+$" | sort -V; }

start_emulator() {
  local args=() i=0
  for node in $(nodes); do
    args+=(--port "$node:rimp:10.203.0.$((i + 1))")
    i=$((i + 1))
  done
  ((i >= 2)) || { echo "no nodes of prefix '$p' (run up first)" >&2; exit 2; }
  [[ -x $bin ]] || { echo "no emulator at $bin (cargo build --release -p rmca-impair)" >&2; exit 2; }
  rm -f "$state/ready" "$state/counters.json"
  setsid "$bin" "${args[@]}" "$@" --json "$state/counters.json" --ready "$state/ready" \
    >"$state/emulator.log" 2>&1 </dev/null &
  echo $! >"$state/pid"
  for _ in $(seq 100); do
    [[ -e $state/ready ]] && return 0
    kill -0 "$(cat "$state/pid")" 2>/dev/null || break
    sleep 0.05
  done
  echo "rmca-impair did not start:" >&2
  cat "$state/emulator.log" >&2
  exit 1
}

stop_emulator() {
  [[ -f $state/pid ]] || return 0
  local pid
  pid=$(cat "$state/pid")
  if kill -TERM "$pid" 2>/dev/null; then
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  fi
  rm -f "$state/pid"
  [[ -f $state/emulator.log ]] && cat "$state/emulator.log" >&2
  return 0
}

case $cmd in
up)
  [[ -e /dev/net/tun ]] || { echo "no /dev/net/tun" >&2; exit 2; }
  if [[ -n $(nodes) ]]; then echo "nodes of prefix '$p' exist (down $p first)" >&2; exit 2; fi
  mkdir -p "$state"
  sw="${p}sw"
  ip netns add "$sw"
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  hosts="127.0.0.1 localhost"$'\n'
  for ((i = 0; i < n; i++)); do
    hosts+="10.204.0.$((i + 1)) ${p}${i}"$'\n'"10.203.0.$((i + 1)) ${p}${i}-imp"$'\n'
  done
  for ((i = 0; i < n; i++)); do
    node="${p}${i}"
    ip netns add "$node"
    ip link add "${p}v${i}" type veth peer name "${p}b${i}"
    ip link set "${p}v${i}" netns "$node"
    ip link set "${p}b${i}" netns "$sw"
    ip -n "$sw" link set "${p}b${i}" master br0 up
    ip -n "$node" addr add "10.204.0.$((i + 1))/24" dev "${p}v${i}"
    ip -n "$node" link set "${p}v${i}" up
    ip -n "$node" link set lo up
    ip -n "$node" tuntap add dev rimp mode tun
    ip netns exec "$node" sysctl -qw net.ipv6.conf.rimp.disable_ipv6=1 2>/dev/null || true
    ip -n "$node" link set rimp mtu "$mtu" up
    ip -n "$node" addr add "10.203.0.$((i + 1))/24" dev rimp
    mkdir -p "/etc/netns/$node"
    printf '%s' "$hosts" >"/etc/netns/$node/hosts"
    printf '%s\n' "$node" >"/etc/netns/$node/hostname"
    # The BTLs named in RMCA_IMPAIR_CLEAN (e.g. "rc") bind to the clean control network
    # instead: a second path the impairments spare, for failover.
    printf 'imp=10.203.0.%d ctrl=10.204.0.%d\nfor b in ud rc; do\n  a=$imp\n  case " ${RMCA_IMPAIR_CLEAN:-} " in *" $b "*) a=$ctrl ;; esac\n  export RMCA_MCA_btl_${b}_if_addr=$a\ndone\nexec "$@"\n' \
      $((i + 1)) $((i + 1)) >"$state/$node.sh"
  done
  start_emulator "$@"
  nodes | paste -sd, -
  ;;
restart)
  stop_emulator
  start_emulator "$@"
  ;;
stats)
  pid=$(cat "$state/pid")
  rm -f "$state/counters.json"
  kill -USR1 "$pid"
  for _ in $(seq 100); do [[ -s $state/counters.json ]] && break; sleep 0.02; done
  cat "$state/counters.json"
  ;;
change)
  [[ -f $state/pid ]] || { echo "no emulator of prefix '$p' (run up first)" >&2; exit 2; }
  kill -USR2 "$(cat "$state/pid")"
  ;;
run)
  run=${RMCA_RUN:-$here/target/release/rmca-run}
  exec ip netns exec "${p}0" "$run" --hosts "$(nodes | paste -sd, -)" \
    --launch-agent "ip netns exec {node} sh $state/{node}.sh {cmd}" --pmi-addr 10.204.0.1 "$@"
  ;;
down)
  stop_emulator
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^${p}([0-9]+|sw)$" || true); do
    ip netns del "$ns"
    rm -rf "/etc/netns/$ns"
  done
  rm -rf "$state"
  ;;
*) echo "unknown command '$cmd': up, restart, stats, change, run or down" >&2; exit 2 ;;
esac
