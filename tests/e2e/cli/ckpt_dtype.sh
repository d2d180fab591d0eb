#!/usr/bin/env bash
# `claw ckpt convert`: checkpoint chunks in another dtype, loaded with exact
# conversion.
#
#   ckpt_dtype.sh CLAW_BINARY
#
# Trains 4 steps and saves (f32); converts to bf16 (A), A back to f32 (B) and
# B to bf16 again (C): A and C hold the same bytes (widening is exact and
# narrowing a bf16 value gives it back). `ckpt inspect --tensors` shows BF16
# chunks; `claw eval` loads A into the fp32 model and B gives the same loss as
# A to the last digit (the same values); the f32 original's loss is close.
# Hugging Face export in bf16 (--type bf16): every tensor BF16 in
# model.safetensors, torch_dtype bfloat16, each value the f32 export's
# rounded to nearest even; imported back it evaluates as A.
. "$(dirname "$0")/../../lib.sh"
claw=$1
common=(--model gpt2-tiny --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 1
        --global-batch-size 4 --lr 2e-3 --lr-warmup-iters 1 --num-threads 1 --peak-gflops 100)
"$claw" train "${common[@]}" --train-iters 4 --eval-interval 0 --save "$tmp/f32" >"$tmp/train.log" 2>&1 ||
  { cat "$tmp/train.log"; fail "claw train --save"; }
"$claw" ckpt convert --load "$tmp/f32" --save "$tmp/a" --dtype bf16 >"$tmp/a.log" 2>&1 || { cat "$tmp/a.log"; fail "convert to bf16"; }
"$claw" ckpt convert --load "$tmp/a" --save "$tmp/b" --dtype f32 >"$tmp/b.log" 2>&1 || { cat "$tmp/b.log"; fail "convert to f32"; }
"$claw" ckpt convert --load "$tmp/b" --save "$tmp/c" --dtype bf16 >"$tmp/c.log" 2>&1 || { cat "$tmp/c.log"; fail "convert back"; }
cmp "$tmp/a/iter_0000004/rank_00000.bin" "$tmp/c/iter_0000004/rank_00000.bin" || fail "bf16 -> f32 -> bf16 changed the bytes"
"$claw" ckpt inspect --tensors --verify "$tmp/a" >"$tmp/inspect.txt" 2>&1 || { cat "$tmp/inspect.txt"; fail "inspect"; }
grep -q "model.embedding.word_embeddings.weight .* bf16 " "$tmp/inspect.txt" || { cat "$tmp/inspect.txt"; fail "inspect does not show bf16"; }
grep -q " f32 " "$tmp/inspect.txt" && { cat "$tmp/inspect.txt"; fail "a converted tensor is still f32"; }
loss() {
  "$claw" eval --load "$1" --eval-iters 2 --micro-batch-size 1 --global-batch-size 4 --seq-length 32 --num-threads 1 \
    2>"$tmp/eval.log" | sed -n 's/.*loss \([0-9.]*\).*/\1/p' | head -n 1
}
la=$(loss "$tmp/a"); lb=$(loss "$tmp/b"); lf=$(loss "$tmp/f32")
echo "eval: f32 '$lf', bf16 '$la', bf16 widened to f32 '$lb'"
[[ -n $la && $la == "$lb" ]] || fail "the bf16 checkpoint and its f32 widening evaluate differently"
/usr/bin/python3 - "$lf" "$la" <<'PY' || fail "bf16 loss far from the f32 loss"
import sys
f, a = (float(s) for s in sys.argv[1:])
assert abs(f - a) < 0.05 * abs(f), (f, a)
PY
"$claw" ckpt export --load "$tmp/f32" --format hf --output "$tmp/hf32" >/dev/null 2>"$tmp/x.log" || { cat "$tmp/x.log"; fail "export f32"; }
"$claw" ckpt export --load "$tmp/f32" --format hf --type bf16 --output "$tmp/hf16" >/dev/null 2>"$tmp/x.log" ||
  { cat "$tmp/x.log"; fail "export bf16"; }
/usr/bin/python3 - "$tmp/hf32" "$tmp/hf16" <<'PY' || fail "the bf16 Hugging Face export"
import json, struct, sys
import numpy as np
def read(d):
    raw = open(d + "/model.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n]); body = raw[8 + n:]
    head.pop("__metadata__", None)
    return {k: (v["dtype"], body[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in head.items()}
f32, b16 = read(sys.argv[1]), read(sys.argv[2])
assert json.load(open(sys.argv[2] + "/config.json"))["torch_dtype"] == "bfloat16"
assert f32.keys() == b16.keys()
for k in f32:
    assert b16[k][0] == "BF16" and f32[k][0] == "F32", (k, b16[k][0])
    u = np.frombuffer(f32[k][1], np.uint32).astype(np.uint64)
    want = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even (finite values)
    got = np.frombuffer(b16[k][1], np.uint16)
    assert np.array_equal(got, want), k
print(f"ok: {len(f32)} tensors exported as BF16, each the f32 value rounded to nearest even")
PY
"$claw" ckpt import --format hf --input "$tmp/hf16" --save "$tmp/fromhf" >"$tmp/x.log" 2>&1 || { cat "$tmp/x.log"; fail "import bf16"; }
lh=$(loss "$tmp/fromhf")
echo "eval: imported bf16 Hugging Face export '$lh'"
[[ -n $lh && $lh == "$la" ]] || fail "the imported bf16 export evaluates to '$lh', the bf16 checkpoint to '$la'"
echo "PASS"
