#!/usr/bin/env bash
# Generation with tensor parallelism: `claw generate` under mpirun -np 2
# (each rank half of every layer; rank 0 schedules, rank 1 runs its steps)
# gives the one-rank greedy tokens (64) for a random GPT-2, a Llama with
# grouped-query attention and a DeepSeek-V3 (latent attention, absorbed:
# each rank its heads' part of kv_b_proj, the latent replicated; dense
# layers) that transformers made, loaded from the Hugging Face directory and
# from a claw checkpoint; then `claw serve` at TP 2 answers a completion and
# stops on SIGTERM, every rank exiting 0.
#
#   tp_generate.sh CLAW_BINARY gpt2|llama|deepseek3
set -euo pipefail
claw=$1
family=$2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
server=
cleanup() { [[ -n $server ]] && kill "$server" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(timeout 300 mpirun --oversubscribe --bind-to none -np 2)
if [[ $family == deepseek3 ]]; then
  py=$("$here/../../oracle_env.sh" torch2)
  "$py" "$here/../parity/hf_family.py" make deepseek3 "$tmp/hf" dense 2>/dev/null
else
  py=$("$here/../../oracle_env.sh" hf)
  "$py" "$here/hf_generate.py" make "$family" "$tmp/hf"
fi
"$claw" ckpt import --input "$tmp/hf" --save "$tmp/ck" >/dev/null 2>&1
prompt=17,250,3,999,42,7,512,88,1,640
args=(--prompt-tokens "$prompt" --max-tokens 64 --ignore-eos --output-format json --num-threads 1 --num-kv-blocks 32)
"$claw" generate --model "$tmp/hf" "${args[@]}" >"$tmp/one.json" 2>"$tmp/one.log" || { cat "$tmp/one.log"; exit 1; }
for src in hf ck; do
  "${mpi[@]}" "$claw" generate --model "$tmp/$src" "${args[@]}" </dev/null >"$tmp/tp-$src.json" 2>"$tmp/tp.log" ||
    { cat "$tmp/tp.log"; fail "mpirun -np 2 claw generate --model $src"; }
  grep -q "tensor parallelism over 2 ranks" "$tmp/tp.log" || { cat "$tmp/tp.log"; fail "not tensor-parallel"; }
  /usr/bin/python3 - "$tmp/one.json" "$tmp/tp-$src.json" "$src" <<'PY'
import json, sys
one, tp = (json.load(open(p)) for p in sys.argv[1:3])
assert len(one["tokens"]) == 64, one
d = next((i for i, (a, b) in enumerate(zip(one["tokens"], tp["tokens"])) if a != b), None)
assert tp["tokens"] == one["tokens"], f"TP 2 differs from one rank at token {d}"
worst = max(abs(a - b) for a, b in zip(one["logprobs"], tp["logprobs"]))
print(f"TP 2 ({sys.argv[3]}): 64 greedy tokens equal to one rank's; log-probabilities within {worst:.2e}")
PY
done

[[ $family == gpt2 ]] || exit 0
# claw serve at TP 2 (a GPT-2 claw trained briefly, for its tokenizer): a
# completion, then SIGTERM; mpirun (every rank) exits 0.
"$claw" train --model gpt2-tiny --num-layers 2 --seq-length 32 --micro-batch-size 2 --global-batch-size 2 \
  --train-iters 5 --eval-interval 0 --num-threads 2 --peak-gflops 100 --save "$tmp/trained" >"$tmp/train.log" 2>&1 ||
  { cat "$tmp/train.log"; exit 1; }
"${mpi[@]}" "$claw" serve --model "$tmp/trained" --port 0 --num-threads 1 --num-kv-blocks 32 \
  </dev/null >"$tmp/serve.log" 2>&1 &
server=$!
for _ in $(seq 600); do
  port=$(grep -o 'listening on http://[0-9.]*:[0-9]*' "$tmp/serve.log" | grep -o '[0-9]*$' || true)
  [[ -n $port ]] && curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  kill -0 "$server" 2>/dev/null || { cat "$tmp/serve.log"; fail "the server exited"; }
  sleep 0.1
done
curl -sf "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "We the people", "max_tokens": 24, "temperature": 0, "ignore_eos": true}' \
  >"$tmp/http.json" || { cat "$tmp/serve.log"; fail "completion request"; }
/usr/bin/python3 - "$tmp/http.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["usage"]["completion_tokens"] == 24 and r["choices"][0]["finish_reason"] == "length", r
print(f"claw serve at TP 2: a completion of 24 tokens")
PY
# SIGTERM to the ranks, as Slurm's scancel sends it (mpirun itself treats a
# signal as an abort): rank 0 drains and stops the others.
pkill -TERM -P "$(pgrep -P "$server" -x mpirun)"  # $server is timeout; its child mpirun; its children the ranks
rc=0
wait "$server" || rc=$?
[[ $rc == 0 ]] || { cat "$tmp/serve.log"; fail "mpirun exited $rc after SIGTERM"; }
server=
echo "claw serve at TP 2: SIGTERM drained and every rank exited 0"
