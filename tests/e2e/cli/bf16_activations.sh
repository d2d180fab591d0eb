#!/usr/bin/env bash
# 16-bit activations (--bf16 or --fp16 on a dense model): each block's large
# saved tensors are 16-bit values where they are made and sit in 16 bits
# between the forward and the backward (Activations::packed). For each of
# bf16 and fp16 (with its dynamic loss scaling):
#   - exact: a --bf16 run equals, bit for bit, the same run with every block
#     recomputed in backward instead of stored (losses, grad norms,
#     validation losses over 10 steps), so the bf16 copies lose nothing;
#   - memory: a stored layer's activations shrink to at most 55% of fp32's
#     (the block output and the small statistics stay fp32, the working
#     region is one layer's), and the allocation equals the plan;
#   - the bf16 run stays within 1% of fp32's loss and differs from it;
#   - a MoE model (SwiGLU experts, top-2 of 4) under --bf16: the experts'
#     h, u and outputs are stored in bf16 too, bitwise equal to recomputation,
#     a stored layer at most 55% of fp32's.
#   bf16_activations.sh CLAW_BINARY
. "$(dirname "$0")/../../lib.sh"
set -e
claw=$1
common=(--model gpt2-tiny --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --micro-batch-size 4
        --global-batch-size 4 --train-iters 10 --eval-interval 5 --eval-iters 2 --lr 2e-3 --lr-warmup-iters 1
        --num-threads 1 --peak-gflops 100)
"$claw" train "${common[@]}" --metrics-file "$tmp/f32.jsonl" >"$tmp/f32.log" 2>&1 || { cat "$tmp/f32.log"; fail "fp32"; }
per_layer() { sed -n 's/.* layers x \([0-9.]*\) \(KiB\|MiB\).*/\1 \2/p' "$1" | head -n 1; }
for prec in bf16 fp16; do
  # fp16 starts at a loss scale that overflows no step of these 10 (the
  # default 2^32 would skip the first ones while it comes down).
  flags=("--$prec")
  [[ $prec == bf16 ]] || flags+=(--initial-loss-scale 1024)
  "$claw" train "${common[@]}" "${flags[@]}" --metrics-file "$tmp/$prec.jsonl" >"$tmp/$prec.log" 2>&1 ||
    { cat "$tmp/$prec.log"; fail "--$prec"; }
  "$claw" train "${common[@]}" "${flags[@]}" --recompute-granularity full --metrics-file "$tmp/rc.jsonl" \
    >"$tmp/rc.log" 2>&1 || { cat "$tmp/rc.log"; fail "--$prec with recompute"; }
  grep -q "as the planner's memory model predicts" "$tmp/$prec.log" || fail "--$prec: the allocation differs from the plan"
  grep -q "($prec) + fp32 working region" "$tmp/$prec.log" || { cat "$tmp/$prec.log"; fail "--$prec: no $prec activations"; }
  /usr/bin/python3 - "$(per_layer "$tmp/f32.log")" "$(per_layer "$tmp/$prec.log")" "$tmp" "$prec" <<'PY'
import json, sys
def size(s):
    v, u = s.split()
    return float(v) * (1024 if u == "MiB" else 1)
f32, half, tmp, prec = size(sys.argv[1]), size(sys.argv[2]), sys.argv[3], sys.argv[4]
print(f"a stored layer's activations: fp32 {f32:.1f} KiB, {prec} {half:.1f} KiB ({half / f32:.1%})")
assert half <= 0.55 * f32, (f32, half)
runs = {k: [json.loads(l) for l in open(f"{tmp}/{k}.jsonl")] for k in ("f32", prec, "rc")}
key = lambda r: (r["loss"], r["grad_norm"], r.get("val_loss"))
assert [key(r) for r in runs[prec]] == [key(r) for r in runs["rc"]], f"{prec} copies are not exact"
a, b = runs["f32"][-1]["val_loss"], runs[prec][-1]["val_loss"]
print(f"validation loss after 10 steps: fp32 {a:.6f}, {prec} {b:.6f}")
assert a != b and abs(a - b) <= 0.01 * a, (a, b)
print(f"ok: stored {prec} activations equal recomputation bit for bit")
PY
done

moe=(--num-experts 4 --moe-router-topk 2 --disable-bias-linear --swiglu)
"$claw" train "${common[@]}" "${moe[@]}" --train-iters 1 >"$tmp/moe32.log" 2>&1 || { cat "$tmp/moe32.log"; fail "MoE fp32"; }
"$claw" train "${common[@]}" "${moe[@]}" --bf16 --metrics-file "$tmp/moe.jsonl" >"$tmp/moe.log" 2>&1 ||
  { cat "$tmp/moe.log"; fail "MoE --bf16"; }
"$claw" train "${common[@]}" "${moe[@]}" --bf16 --recompute-granularity full --metrics-file "$tmp/moerc.jsonl" \
  >"$tmp/moerc.log" 2>&1 || { cat "$tmp/moerc.log"; fail "MoE --bf16 with recompute"; }
grep -q "as the planner's memory model predicts" "$tmp/moe.log" || fail "MoE: the allocation differs from the plan"
/usr/bin/python3 - "$(per_layer "$tmp/moe32.log")" "$(per_layer "$tmp/moe.log")" "$tmp" <<'PY'
import json, sys
def size(s):
    v, u = s.split()
    return float(v) * (1024 if u == "MiB" else 1)
f32, half, tmp = size(sys.argv[1]), size(sys.argv[2]), sys.argv[3]
print(f"a stored MoE layer's activations: fp32 {f32:.1f} KiB, bf16 {half:.1f} KiB ({half / f32:.1%})")
assert half <= 0.55 * f32, (f32, half)
a, b = ([json.loads(l) for l in open(f"{tmp}/{k}.jsonl")] for k in ("moe", "moerc"))
key = lambda r: (r["loss"], r["grad_norm"], r.get("val_loss"))
assert [key(r) for r in a] == [key(r) for r in b], "MoE bf16 copies are not exact"
print("ok: stored bf16 MoE activations equal recomputation bit for bit")
PY
