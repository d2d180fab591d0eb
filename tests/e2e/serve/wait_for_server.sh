# Sourced by the serve tests: wait_for_server PID LOG sets `port` once the
# `claw serve` writing LOG listens and answers /health; prints the log and
# exits 1 if the server dies first or 60 s pass.
wait_for_server() {
  local pid=$1 log=$2
  port=
  for _ in $(seq 300); do
    # The log may not exist yet: the server's shell opens it after the fork,
    # and a failing substitution would end a `set -e` caller.
    port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$log" 2>/dev/null || true)
    [[ -n $port ]] && curl -sf "http://127.0.0.1:$port/health" >/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$log"; exit 1; }
    sleep 0.2
  done
  cat "$log"
  echo "FAIL: the server did not come up"
  exit 1
}
