#!/usr/bin/env bash
# MixtralForCausalLM exported by claw against `transformers` (hf_family.py, in
# tools/hf_env.sh's venv under /tmp): a mixtral-tiny trained 2 steps by claw
# and exported with `claw ckpt export --format hf` loads in transformers with
# the logits `claw eval` gives. A Mixtral made by transformers through claw
# (import, logits, gradients, export, generation) is hf_family.sh mixtral's.
#
#   hf_mixtral.sh CLAW_BINARY
. "$(dirname "$0")/../../lib.sh"
set -e
claw=$1
py=$("$here/../../oracle_env.sh" hf)
evalf=(--eval-iters 1 --micro-batch-size 2 --global-batch-size 2 --seq-length 32 --num-threads 2)

"$claw" train --model mixtral-tiny --num-layers 2 --hidden-size 64 --num-attention-heads 4 --num-query-groups 2 \
  --ffn-hidden-size 96 --train-iters 2 --micro-batch-size 2 --global-batch-size 2 --seq-length 32 \
  --save "$tmp/ck" --eval-interval 0 --peak-gflops 100 >"$tmp/train.log" 2>&1 || { cat "$tmp/train.log"; exit 1; }
"$claw" ckpt export --load "$tmp/ck" --format hf --output "$tmp/hf"
"$claw" eval --load "$tmp/ck" "${evalf[@]}" --logits-file "$tmp/export.safetensors" 2>/dev/null
"$py" "$here/hf_family.py" logits "$tmp/hf" "$tmp/export.safetensors"
