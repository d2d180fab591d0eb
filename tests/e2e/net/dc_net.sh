#!/usr/bin/env bash
# Two emulated data centres on one machine (sourced; run as root). Each is
# a switch namespace with a bridge and HOSTS hosts (namespaces with a veth
# on it, their own host name for Open MPI); tools/wan_forwarder joins the
# two bridges with a delayed, rate-limited link. All hosts share one subnet,
# so MPI's TCP traffic between the centres crosses the forwarder, and only it.
#
#   source tests/e2e/net/dc_net.sh        (or run it: tests/e2e/net/dc_net.sh up|link|stats|
#                                     blackhole|mpirun|down ARGS, with DC_P and DC_TMP
#                                     in the environment after `up`)
#   dc_up PREFIX HOSTS SLOTS TMPDIR   hosts PREFIXh11.. (DC 1, 10.79.0.11..) and
#                                     PREFIXh21.. (DC 2), hostfile TMPDIR/hosts
#   dc_link FORWARDER DELAY_MS RATE_MBIT   (re)starts the link
#   dc_stats                          the forwarder's counts now (JSON)
#   dc_blackhole                      toggles the link's black hole
#   dc_mpirun ARGS...                 mpirun from DC 1's first host over the hostfile
#   dc_down                           ends the link and removes the namespaces
# Ranks fill DC 1's hosts first (the hostfile's order, --map-by slot), so
# with --data-centers 2 instance k is DC k.

DC_NS_AGENT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/ns_agent.sh

dc_up() {
  DC_P=$1 DC_HOSTS=$2 DC_SLOTS=$3 DC_TMP=$4
  : >"$DC_TMP/hosts"
  local d k
  for d in 1 2; do
    ip netns add "${DC_P}s$d" || return 1
    ip netns exec "${DC_P}s$d" ip link add br0 type bridge
    ip netns exec "${DC_P}s$d" ip link set br0 up
    for k in $(seq "$DC_HOSTS"); do
      local h=${DC_P}h$d$k
      ip netns add "$h"
      ip link add eth0 netns "$h" type veth peer name v$k netns "${DC_P}s$d"
      ip netns exec "${DC_P}s$d" ip link set v$k master br0
      ip netns exec "${DC_P}s$d" ip link set v$k up
      ip netns exec "$h" ip addr add "10.79.0.$d$k/24" dev eth0
      ip netns exec "$h" ip link set eth0 up
      ip netns exec "$h" ip link set lo up
      # A long-haul host's TCP tuning: send buffers to cover the link's
      # bandwidth-delay product (1 Gbit/s x 50 ms = 6 MB; the namespace's
      # default caps them at 4 MB), and no return to slow start after a
      # pause (a step's compute between two gradient exchanges).
      ip netns exec "$h" sysctl -q -w net.ipv4.tcp_wmem="4096 16384 33554432" \
        net.ipv4.tcp_rmem="4096 131072 33554432" net.ipv4.tcp_slow_start_after_idle=0
      echo "10.79.0.$d$k slots=$DC_SLOTS" >>"$DC_TMP/hosts"
    done
  done
}

# The forwarder's PID lives in DC_TMP/forwarder.pid, so that separate
# invocations (the bench's) share it.
dc_fwd_pid() { cat "$DC_TMP/forwarder.pid" 2>/dev/null; }

dc_link() {  # FORWARDER DELAY_MS RATE_MBIT
  local old
  old=$(dc_fwd_pid)
  if [[ -n $old ]]; then
    kill -TERM "$old" 2>/dev/null
    while kill -0 "$old" 2>/dev/null; do sleep 0.05; done
  fi
  # setsid: the forwarder outlives the shell that started it (the bench's).
  setsid "$1" --netns-a "${DC_P}s1" --netns-b "${DC_P}s2" --delay-ms "$2" --rate-mbit "$3" \
    --queue-bytes $((16 << 20)) --stats "$DC_TMP/link.json" >>"$DC_TMP/forwarder.log" 2>&1 </dev/null &
  echo $! >"$DC_TMP/forwarder.pid"
  local d
  for _ in $(seq 50); do
    ip netns exec "${DC_P}s2" ip link show wan0 >/dev/null 2>&1 && break
    sleep 0.1
  done
  for d in 1 2; do
    ip netns exec "${DC_P}s$d" ip link set wan0 master br0 || return 1
    ip netns exec "${DC_P}s$d" ip link set wan0 up
  done
}

dc_stats() {
  rm -f "$DC_TMP/link.json"
  kill -USR2 "$(dc_fwd_pid)"
  for _ in $(seq 50); do [[ -f $DC_TMP/link.json ]] && break; sleep 0.05; done
  cat "$DC_TMP/link.json"
}

dc_blackhole() { kill -USR1 "$(dc_fwd_pid)"; }

dc_mpirun() {
  CLAW_NS_PREFIX=$DC_P OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    ip netns exec "${DC_P}h11" unshare --uts sh -c 'hostname "$0"; exec "$@"' "${DC_P}h11" \
    mpirun --hostfile "$DC_TMP/hosts" --map-by slot --mca plm_rsh_agent "$DC_NS_AGENT" \
    --mca btl self,vader,tcp --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
    --oversubscribe --bind-to none -x CLAW_NS_PREFIX -x CLAW_DATA_DIR -x OMPI_ALLOW_RUN_AS_ROOT \
    -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM "$@"
}

dc_down() {
  local ns pids fwd
  fwd=$(dc_fwd_pid)
  [[ -n $fwd ]] && kill -9 "$fwd" 2>/dev/null
  rm -f "$DC_TMP/forwarder.pid"

  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${DC_P:-none}"); do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    # shellcheck disable=SC2086
    [[ -z $pids ]] || kill -9 $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  set -uo pipefail
  cmd=$1
  shift
  "dc_$cmd" "$@"
fi
