#!/usr/bin/env bash
# claw serve's chat page in headless Chromium (Debian's chromium and
# chromium-driver): a message sent, a reply streamed into the page, a
# screenshot taken (tests/e2e/serve/chat_page.py). With an API key, as users run
# it behind one.
#
#   chat_page.sh CLAW_BINARY [MODEL] [SCREENSHOT.png]   (MODEL: the fixture serve_model's
#   checkpoint, or - to train one here)
set -euo pipefail
claw=$1
here=$(cd "$(dirname "$0")" && pwd)
source "$here/wait_for_server.sh"
tmp=$(mktemp -d)
ck=${2:--}
[[ $ck != - ]] || ck=$tmp/ck
shot=${3:-$tmp/chat_page.png}
pid=
trap '[[ -n $pid ]] && kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
command -v chromedriver >/dev/null || { echo "FAIL: chromedriver missing (scripts/setup installs chromium-driver)"; exit 1; }
[[ -d $ck ]] || "$here/model_fixture.sh" "$claw" "$ck" >/dev/null
"$claw" serve --model "$ck" --served-model-name gpt2-tiny-sotu --port 0 --api-key sekret --num-threads 2 \
  --max-model-len 512 >"$tmp/serve.log" 2>&1 &
pid=$!
wait_for_server $pid "$tmp/serve.log"
# Into a file first: `curl | grep -q` under pipefail fails whenever grep
# closes the pipe before curl has written everything.
curl -sf "http://127.0.0.1:$port/" -o "$tmp/page.html" || { echo "FAIL: GET / failed"; exit 1; }
grep -q "<title>claw chat</title>" "$tmp/page.html" || { echo "FAIL: GET / is not the chat page"; exit 1; }
/usr/bin/python3 "$here/chat_page.py" "http://127.0.0.1:$port" "$shot" sekret || { tail -20 "$tmp/serve.log"; exit 1; }
