#!/usr/bin/env bash
# `claw serve` under load and under fuzzing, on loopback (tests/e2e/serve/load_fuzz.py):
#   load  bursts of 128 simultaneous connections, then 3000 requests at
#         concurrency 64: completions, chats, streams the client drops
#         mid-way, malformed bodies; every valid request answered, every
#         malformed one a 400, no KV block in use at the end;
#   limits  admission, cancellation of a dropped request, connection limits,
#         Host and Content-Type checks, SIGTERM's deadline (load_fuzz.py says how);
#   fuzz  random and mutated JSON bodies and raw HTTP requests for 20 s:
#         no crash, errors as JSON.
# The server must be alive afterwards and exit 0 on SIGTERM.
#
#   load_fuzz.sh CLAW_BINARY load|limits|fuzz
set -euo pipefail
claw=$1
mode=$2
here=$(cd "$(dirname "$0")" && pwd)
source "$here/wait_for_server.sh"
tmp=$(mktemp -d)
pid=
trap '[[ -n $pid ]] && kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
"$claw" train --model gpt2-tiny --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 \
  --micro-batch-size 2 --global-batch-size 2 --train-iters 3 --eval-interval 0 --num-threads 2 --peak-gflops 100 \
  --save "$tmp/ck" >"$tmp/train.log" 2>&1 || { cat "$tmp/train.log"; exit 1; }
limits=(--max-body-size 64KiB)
[[ $mode == limits ]] && limits=(--max-body-size 1MiB --max-request-sequences 32 --max-queued-sequences 64
                                 --max-connections-per-client 320 --shutdown-timeout 0.2)
"$claw" serve --model "$tmp/ck" --port 0 --num-threads 2 --max-model-len 256 --num-kv-blocks 96 \
  --max-concurrent-requests 256 "${limits[@]}" >"$tmp/serve.log" 2>&1 &
pid=$!
wait_for_server $pid "$tmp/serve.log"
case $mode in
  load) /usr/bin/python3 "$here/load_fuzz.py" load "$port" 3000 64 || { tail -20 "$tmp/serve.log"; exit 1; } ;;
  fuzz) /usr/bin/python3 "$here/load_fuzz.py" fuzz "$port" 20 7 || { tail -20 "$tmp/serve.log"; exit 1; } ;;
  limits)
    /usr/bin/python3 "$here/load_fuzz.py" limits "$port" $pid || { tail -20 "$tmp/serve.log"; exit 1; }
    rc=0
    wait $pid || rc=$?
    pid=
    [[ $rc == 0 ]] || { tail -20 "$tmp/serve.log"; echo "FAIL: exit $rc after SIGTERM"; exit 1; }
    grep -q "cancelled" "$tmp/serve.log" || { cat "$tmp/serve.log"; echo "FAIL: no cancellation logged"; exit 1; }
    echo "the server cancelled what was left and exited 0 on SIGTERM"
    exit 0 ;;
  *) echo "mode: load, limits or fuzz"; exit 2 ;;
esac
kill -0 $pid || { cat "$tmp/serve.log"; echo "FAIL: the server died"; exit 1; }
kill -TERM $pid
rc=0
wait $pid || rc=$?
pid=
[[ $rc == 0 ]] || { tail -20 "$tmp/serve.log"; echo "FAIL: exit $rc after SIGTERM"; exit 1; }
echo "the server stayed up and exited 0 on SIGTERM"
