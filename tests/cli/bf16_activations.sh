#!/usr/bin/env bash
# bf16 activations (--bf16 on a dense model): each block's large saved
# tensors are bf16 values where they are made and sit in bf16 between the
# forward and the backward (Activations::packed).
#   - exact: a --bf16 run equals, bit for bit, the same run with every block
#     recomputed in backward instead of stored (losses, grad norms,
#     validation losses over 10 steps), so the bf16 copies lose nothing;
#   - memory: a stored layer's activations shrink to at most 55% of fp32's
#     (the block output and the small statistics stay fp32, the working
#     region is one layer's), and the allocation equals the plan;
#   - the bf16 run stays within 1% of fp32's loss and differs from it.
#   bf16_activations.sh CLAW_BINARY
set -euo pipefail
claw=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
common=(--model gpt2-tiny --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --micro-batch-size 4
        --global-batch-size 4 --train-iters 10 --eval-interval 5 --eval-iters 2 --lr 2e-3 --lr-warmup-iters 1
        --num-threads 1 --peak-gflops 100)
"$claw" train "${common[@]}" --metrics-file "$tmp/f32.jsonl" >"$tmp/f32.log" 2>&1 || { cat "$tmp/f32.log"; fail "fp32"; }
"$claw" train "${common[@]}" --bf16 --metrics-file "$tmp/bf16.jsonl" >"$tmp/bf16.log" 2>&1 ||
  { cat "$tmp/bf16.log"; fail "--bf16"; }
"$claw" train "${common[@]}" --bf16 --recompute-granularity full --metrics-file "$tmp/rc.jsonl" >"$tmp/rc.log" 2>&1 ||
  { cat "$tmp/rc.log"; fail "--bf16 with recompute"; }
grep -q "as the planner's memory model predicts" "$tmp/bf16.log" || fail "the allocation differs from the plan"
per_layer() { sed -n 's/.* layers x \([0-9.]*\) \(KiB\|MiB\).*/\1 \2/p' "$1" | head -n 1; }
/usr/bin/python3 - "$(per_layer "$tmp/f32.log")" "$(per_layer "$tmp/bf16.log")" "$tmp" <<'PY'
import json, sys
def size(s):
    v, u = s.split()
    return float(v) * (1024 if u == "MiB" else 1)
f32, bf16, tmp = size(sys.argv[1]), size(sys.argv[2]), sys.argv[3]
print(f"a stored layer's activations: fp32 {f32:.1f} KiB, bf16 {bf16:.1f} KiB ({bf16 / f32:.1%})")
assert bf16 <= 0.55 * f32, (f32, bf16)
runs = {k: [json.loads(l) for l in open(f"{tmp}/{k}.jsonl")] for k in ("f32", "bf16", "rc")}
key = lambda r: (r["loss"], r["grad_norm"], r.get("val_loss"))
assert [key(r) for r in runs["bf16"]] == [key(r) for r in runs["rc"]], "bf16 copies are not exact"
a, b = runs["f32"][-1]["val_loss"], runs["bf16"][-1]["val_loss"]
print(f"validation loss after 10 steps: fp32 {a:.6f}, bf16 {b:.6f}")
assert a != b and abs(a - b) <= 0.01 * a, (a, b)
print("ok: stored bf16 activations equal recomputation bit for bit")
PY
