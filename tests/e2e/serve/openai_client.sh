#!/usr/bin/env bash
# `claw serve` against the official `openai` Python SDK (PyPI, in a venv
# under /tmp), then the official `openai` npm package (Node.js): completions, chat, streaming with usage, n > 1, stop,
# logprobs, echo, seeded reproducibility under 16 concurrent requests,
# OpenAI's error JSON (bad field, unknown model, long prompt, wrong key,
# oversized body), /metrics; then SIGTERM drains and exits 0.
#
#   openai_client.sh CLAW_BINARY [MODEL]   (MODEL: the fixture serve_model's checkpoint; else trained here)
set -euo pipefail
claw=$1
here=$(cd "$(dirname "$0")" && pwd)
source "$here/wait_for_server.sh"
tmp=$(mktemp -d)
pid=
trap '[[ -n $pid ]] && kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
py=$("$here/../../oracle_env.sh" openai)
ck=${2:-$tmp/ck}
[[ -d $ck ]] || "$here/model_fixture.sh" "$claw" "$ck" >/dev/null
"$claw" serve --model "$ck" --served-model-name tiny --port 0 --api-key sekret --num-threads 2 \
  --max-model-len 512 >"$tmp/serve.log" 2>&1 &
pid=$!
wait_for_server $pid "$tmp/serve.log"
"$py" "$here/openai_client.py" "http://127.0.0.1:$port" sekret tiny "$claw" "$ck" || { tail -20 "$tmp/serve.log"; exit 1; }
# The npm package too (Node.js), installed under /tmp; the .mjs finds it
# through a symlinked node_modules next to a copy of the script.
npm_dir=$("$here/../../oracle_env.sh" openai-npm)
cp "$here/openai_client.mjs" "$npm_dir/"
node "$npm_dir/openai_client.mjs" "http://127.0.0.1:$port" sekret tiny || { tail -20 "$tmp/serve.log"; exit 1; }
kill -TERM $pid
wait $pid
status=$?
pid=
[[ $status -eq 0 ]] || { cat "$tmp/serve.log"; echo "exit status $status after SIGTERM"; exit 1; }
grep -q "stopped" "$tmp/serve.log"
echo "openai client: server drained and exited 0"
