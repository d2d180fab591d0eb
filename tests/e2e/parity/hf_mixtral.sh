#!/usr/bin/env bash
# MixtralForCausalLM export/import against `transformers` (hf_mixtral.py, in
# tools/hf_env.sh's venv under /tmp).
#
#   hf_mixtral.sh CLAW_BINARY
#
# 1. a random Mixtral made by transformers, imported with `claw ckpt import
#    --format hf`: `claw eval`'s logits equal transformers' on the same tokens;
# 2. `claw ckpt export --format hf` of the import reproduces every tensor of
#    the original bit for bit;
# 3. a mixtral-tiny trained 2 steps by claw and exported loads in transformers
#    with the logits `claw eval` gives.
. "$(dirname "$0")/../../lib.sh"
set -e
claw=$1
py=$("$here/../../oracle_env.sh" hf)
mx() { "$py" "$here/hf_mixtral.py" "$@"; }
evalf=(--eval-iters 1 --micro-batch-size 2 --global-batch-size 2 --seq-length 32 --num-threads 2)

mx make "$tmp/hf_ref"
"$claw" ckpt import --format hf --input "$tmp/hf_ref" --save "$tmp/imported"
"$claw" eval --load "$tmp/imported" "${evalf[@]}" --logits-file "$tmp/import.safetensors" 2>/dev/null
mx logits "$tmp/hf_ref" "$tmp/import.safetensors"
"$claw" ckpt export --load "$tmp/imported" --format hf --output "$tmp/hf_again"
mx same "$tmp/hf_ref" "$tmp/hf_again"

"$claw" train --model mixtral-tiny --num-layers 2 --hidden-size 64 --num-attention-heads 4 --num-query-groups 2 \
  --ffn-hidden-size 96 --train-iters 2 --micro-batch-size 2 --global-batch-size 2 --seq-length 32 \
  --save "$tmp/ck" --eval-interval 0 --peak-gflops 100 >"$tmp/train.log" 2>&1 || { cat "$tmp/train.log"; exit 1; }
"$claw" ckpt export --load "$tmp/ck" --format hf --output "$tmp/hf"
"$claw" eval --load "$tmp/ck" "${evalf[@]}" --logits-file "$tmp/export.safetensors" 2>/dev/null
mx logits "$tmp/hf" "$tmp/export.safetensors"
