#!/usr/bin/env bash
# Hugging Face export/import against HF-named PyTorch models (hf_reference.py,
# Debian's python3-torch); bench/drivers/hf_transformers_check.py runs the same checks
# with `transformers` itself.
#
#   hf_interchange.sh CLAW_BINARY gpt2|llama
#
# 1. train 2 steps, `claw ckpt export --format hf`: the reference's logits on
#    claw's tokens equal `claw eval`'s; the export sharded with an index holds
#    the same tensors bit for bit (so the reference runs once);
# 2. a random HF model (as save_pretrained writes it) imported with
#    `claw ckpt import`: claw's logits equal the reference's;
# 3. export after import reproduces the original tensors bit for bit.
. "$(dirname "$0")/../../lib.sh"
set -e
claw=$1
family=$2
ref() { /usr/bin/python3 "$here/hf_reference.py" "$@"; }
shape=(--micro-batch-size 2 --global-batch-size 2 --seq-length 32)
evalf=(--eval-iters 1 "${shape[@]}" --num-threads 2)

"$claw" train --model "$family-tiny" --train-iters 2 "${shape[@]}" --save "$tmp/ck" --eval-interval 0 \
  --peak-gflops 100 >"$tmp/train.log" 2>&1 || { cat "$tmp/train.log"; exit 1; }
"$claw" ckpt export --load "$tmp/ck" --format hf --output "$tmp/hf"
"$claw" ckpt export --load "$tmp/ck" --format hf --output "$tmp/hf_sharded" --max-shard-size 4MB
ls "$tmp/hf_sharded" | grep -q "model.safetensors.index.json" || { ls "$tmp/hf_sharded"; exit 1; }
echo "sharded export: $(ls "$tmp/hf_sharded" | grep -c safetensors$) files + index"
"$claw" eval --load "$tmp/ck" "${evalf[@]}" --logits-file "$tmp/export.safetensors" 2>/dev/null
ref logits "$tmp/hf" "$tmp/export.safetensors"
ref same "$tmp/hf" "$tmp/hf_sharded"

ref make "$family" "$tmp/hf_ref"
"$claw" ckpt import --format hf --input "$tmp/hf_ref" --save "$tmp/imported"
"$claw" eval --load "$tmp/imported" "${evalf[@]}" --logits-file "$tmp/import.safetensors" 2>/dev/null
ref logits "$tmp/hf_ref" "$tmp/import.safetensors"
"$claw" ckpt export --load "$tmp/imported" --format hf --output "$tmp/hf_again"
ref same "$tmp/hf_ref" "$tmp/hf_again"
# A sharded directory imports too.
"$claw" ckpt import --format hf --input "$tmp/hf_sharded" --save "$tmp/imported_sharded" >/dev/null
"$claw" ckpt export --load "$tmp/imported_sharded" --format hf --output "$tmp/hf_sharded_again" >/dev/null
ref same "$tmp/hf" "$tmp/hf_sharded_again"
