#!/usr/bin/env bash
# `claw serve` against the official `openai` Python SDK (PyPI, in a venv
# under /tmp), then the official `openai` npm package (Node.js): completions, chat, streaming with usage, n > 1, stop,
# logprobs, echo, seeded reproducibility under 16 concurrent requests,
# OpenAI's error JSON (bad field, unknown model, long prompt, wrong key,
# oversized body), /metrics; then SIGTERM drains and exits 0.
#
#   openai_client.sh CLAW_BINARY
set -euo pipefail
claw=$1
here=$(cd "$(dirname "$0")" && pwd)
source "$here/wait_for_server.sh"
tmp=$(mktemp -d)
pid=
trap '[[ -n $pid ]] && kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
venv=/tmp/claw-venv-openai
if ! "$venv/bin/python" -c 'import openai' 2>/dev/null; then
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "openai>=1.40,<2"
fi
"$claw" train --model gpt2-tiny --num-layers 2 --seq-length 64 --micro-batch-size 4 --global-batch-size 4 \
  --train-iters 30 --lr 3e-3 --eval-interval 0 --num-threads 2 --peak-gflops 100 --save "$tmp/ck" >"$tmp/train.log" 2>&1 ||
  { cat "$tmp/train.log"; exit 1; }
"$claw" serve --model "$tmp/ck" --served-model-name tiny --port 0 --api-key sekret --num-threads 2 \
  --max-model-len 512 >"$tmp/serve.log" 2>&1 &
pid=$!
wait_for_server $pid "$tmp/serve.log"
"$venv/bin/python" "$here/openai_client.py" "http://127.0.0.1:$port" sekret tiny "$claw" "$tmp/ck" || { tail -20 "$tmp/serve.log"; exit 1; }
# The npm package too (Node.js), installed under /tmp; the .mjs finds it
# through a symlinked node_modules next to a copy of the script.
npm_dir=/tmp/claw-npm-openai
if ! [[ -f $npm_dir/node_modules/openai/package.json ]]; then
  mkdir -p "$npm_dir"
  [[ -f $npm_dir/package.json ]] || echo '{"name": "claw-openai-client-test", "private": true}' >"$npm_dir/package.json"
  (cd "$npm_dir" && npm install --silent --no-audit --no-fund "openai@4")
fi
cp "$here/openai_client.mjs" "$npm_dir/"
node "$npm_dir/openai_client.mjs" "http://127.0.0.1:$port" sekret tiny || { tail -20 "$tmp/serve.log"; exit 1; }
kill -TERM $pid
wait $pid
status=$?
pid=
[[ $status -eq 0 ]] || { cat "$tmp/serve.log"; echo "exit status $status after SIGTERM"; exit 1; }
grep -q "stopped" "$tmp/serve.log"
echo "openai client: server drained and exited 0"
