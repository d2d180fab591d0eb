#!/usr/bin/env bash
# claw serve's chat page in headless Chromium (Debian's chromium and
# chromium-driver): a message sent, a reply streamed into the page, a
# screenshot taken (tests/serve/chat_page.py). With an API key, as users run
# it behind one.
#
#   chat_page.sh CLAW_BINARY [SCREENSHOT.png]
set -euo pipefail
claw=$1
here=$(cd "$(dirname "$0")" && pwd)
source "$here/wait_for_server.sh"
tmp=$(mktemp -d)
shot=${2:-$tmp/chat_page.png}
pid=
trap '[[ -n $pid ]] && kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
command -v chromedriver >/dev/null || { echo "FAIL: chromedriver missing (scripts/setup installs chromium-driver)"; exit 1; }
"$claw" train --model gpt2-tiny --num-layers 2 --seq-length 64 --micro-batch-size 4 --global-batch-size 4 \
  --train-iters 60 --lr 3e-3 --eval-interval 0 --num-threads 2 --peak-gflops 100 --save "$tmp/ck" >"$tmp/train.log" 2>&1 ||
  { cat "$tmp/train.log"; exit 1; }
"$claw" serve --model "$tmp/ck" --served-model-name gpt2-tiny-sotu --port 0 --api-key sekret --num-threads 2 \
  --max-model-len 512 >"$tmp/serve.log" 2>&1 &
pid=$!
wait_for_server $pid "$tmp/serve.log"
# Into a file first: `curl | grep -q` under pipefail fails whenever grep
# closes the pipe before curl has written everything.
curl -sf "http://127.0.0.1:$port/" -o "$tmp/page.html" || { echo "FAIL: GET / failed"; exit 1; }
grep -q "<title>claw chat</title>" "$tmp/page.html" || { echo "FAIL: GET / is not the chat page"; exit 1; }
/usr/bin/python3 "$here/chat_page.py" "http://127.0.0.1:$port" "$shot" sekret || { tail -20 "$tmp/serve.log"; exit 1; }
