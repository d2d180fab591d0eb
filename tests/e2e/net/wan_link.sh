#!/usr/bin/env bash
# The emulated long-haul link (tools/wan_forwarder.cc) between two "data
# centres" that are network namespaces (run as root): a switch namespace
# with a bridge per side, one host on each, the forwarder's TAP on each
# bridge. Checks, over TCP between the hosts:
#   - the round trip is twice the one-way delay (plus < 3 ms),
#   - a bulk transfer never beats the link rate and gets at least 40% of it,
#   - SIGUSR1 turns the link into a black hole (nothing passes) and back,
#   - the stats count the bytes that crossed.
#   wan_link.sh WAN_FORWARDER
set -uo pipefail
fwd=$1
P=wl$$x
tmp=$(mktemp -d)
cleanup() {
  [[ -n ${fpid:-} ]] && kill -9 "$fpid" 2>/dev/null
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$P"); do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [[ -z $pids ]] || kill -9 $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; cat "$tmp/fwd.log" 2>/dev/null; exit 1; }

for side in 1 2; do
  ip netns add "${P}dc$side" || fail "cannot create network namespaces (run as root)"
  ip netns exec "${P}dc$side" ip link add br0 type bridge
  ip netns exec "${P}dc$side" ip link set br0 up
  ip netns add "${P}h$side"
  ip link add eth0 netns "${P}h$side" type veth peer name v1 netns "${P}dc$side"
  ip netns exec "${P}dc$side" ip link set v1 master br0
  ip netns exec "${P}dc$side" ip link set v1 up
  ip netns exec "${P}h$side" ip addr add 10.78.0.$side/24 dev eth0
  ip netns exec "${P}h$side" ip link set eth0 up
done
delay=10 rate=100
"$fwd" --netns-a "${P}dc1" --netns-b "${P}dc2" --delay-ms $delay --rate-mbit $rate --stats "$tmp/stats.json" \
  >"$tmp/fwd.log" 2>&1 &
fpid=$!
for _ in $(seq 50); do
  ip netns exec "${P}dc2" ip link show wan0 >/dev/null 2>&1 && break
  sleep 0.1
done
for side in 1 2; do
  ip netns exec "${P}dc$side" ip link set wan0 master br0 || fail "no TAP in ${P}dc$side"
  ip netns exec "${P}dc$side" ip link set wan0 up
done

cat >"$tmp/probe.py" <<'PY'
import socket, sys, time
mode = sys.argv[1]
if mode == "server":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 9999)); s.listen(4)
    while True:
        c, _ = s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            d = c.recv(1 << 20)
            if not d: c.sendall(b"done"); c.close(); break
            if d == b"p": c.sendall(b"p")
c = socket.create_connection(("10.78.0.2", 9999), timeout=float(sys.argv[2]))
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
if mode == "rtt":
    rtts = []
    for _ in range(20):
        t = time.time(); c.sendall(b"p"); c.recv(1); rtts.append(time.time() - t)
    print(f"{sorted(rtts)[10] * 1e3:.3f}")
else:
    blob = b"x" * (int(sys.argv[3]) << 20)
    t = time.time(); c.sendall(blob); c.shutdown(socket.SHUT_WR); c.recv(4); dt = time.time() - t
    print(f"{len(blob) * 8 / dt / 1e6:.2f}")
PY
ip netns exec "${P}h2" /usr/bin/python3 "$tmp/probe.py" server &
sleep 0.5
rtt=$(ip netns exec "${P}h1" timeout 30 /usr/bin/python3 "$tmp/probe.py" rtt 10) || fail "no round trip"
/usr/bin/python3 -c "import sys; r=$rtt; sys.exit(not (2*$delay <= r < 2*$delay + 3))" ||
  fail "median round trip $rtt ms, expected 2 x $delay ms (+ < 3)"
echo "ok: median round trip $rtt ms over a ${delay} ms one-way link"
mbit=$(ip netns exec "${P}h1" timeout 60 /usr/bin/python3 "$tmp/probe.py" bulk 10 16) || fail "no bulk transfer"
/usr/bin/python3 -c "import sys; m=$mbit; sys.exit(not (0.4*$rate <= m <= 1.02*$rate))" ||
  fail "bulk transfer at $mbit Mbit/s on a $rate Mbit/s link"
echo "ok: 16 MiB at $mbit Mbit/s on a $rate Mbit/s link"

kill -USR1 $fpid
ip netns exec "${P}h1" timeout 10 /usr/bin/python3 "$tmp/probe.py" rtt 2 >/dev/null 2>&1 &&
  fail "a round trip crossed the black hole"
kill -USR1 $fpid
rtt2=$(ip netns exec "${P}h1" timeout 30 /usr/bin/python3 "$tmp/probe.py" rtt 10) || fail "the link did not come back"
echo "ok: SIGUSR1 stops the link (no round trip in 2 s) and restores it ($rtt2 ms)"

kill -TERM $fpid
wait $fpid
fpid=
/usr/bin/python3 - "$tmp/stats.json" <<'PY' || fail "the stats do not count the transfer"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["a_to_b"]["bytes"] >= 16 << 20, s
assert s["a_to_b"]["dropped"] >= 1, s  # the black hole's
print(f"ok: stats {s}")
PY
echo "PASS"
