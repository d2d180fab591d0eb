#!/usr/bin/env bash
# fp16 master weights (--main-params-dtype fp16 with
# --use-precision-aware-optimizer):
#   - the memory plan's parameter arena is half of fp32's, the fp32 working
#     copies appear as their own line, and the allocation equals the plan;
#   - the masters really are fp16: 20 steps differ from the fp32 run but stay
#     within 1% of its final loss;
#   - the checkpoint stores the parameters as f16 (ckpt inspect), a run
#     resumed from it continues bitwise (steps 4-6 equal the uninterrupted
#     run's), and checkpoints load across master precisions both ways;
#   - bad combinations are refused naming the flag.
#   fp16_main_params.sh CLAW_BINARY
set -euo pipefail
claw=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
common=(--model gpt2-tiny --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64
        --micro-batch-size 4 --global-batch-size 4 --eval-interval 1000 --eval-iters 2 --lr 2e-3 --lr-warmup-iters 1
        --num-threads 1 --peak-gflops 100)
f16=(--use-precision-aware-optimizer --main-params-dtype fp16)
param_mib() { sed -n 's/^ *parameters *\([0-9.]*\) MiB.*/\1/p' "$1" | head -n 1; }

"$claw" train "${common[@]}" --train-iters 20 --lr-decay-iters 20 --metrics-file "$tmp/f32.jsonl" >"$tmp/f32.log" 2>&1 ||
  { cat "$tmp/f32.log"; fail "fp32 masters"; }
"$claw" train "${common[@]}" "${f16[@]}" --train-iters 20 --lr-decay-iters 20 --metrics-file "$tmp/f16.jsonl" \
  >"$tmp/f16.log" 2>&1 || { cat "$tmp/f16.log"; fail "fp16 masters"; }
/usr/bin/python3 - "$(param_mib "$tmp/f32.log")" "$(param_mib "$tmp/f16.log")" <<'PY'
import sys
f32, f16 = (float(x) for x in sys.argv[1:3])
print(f"parameter arena: fp32 masters {f32} MiB, fp16 masters {f16} MiB")
assert abs(f16 - f32 / 2) <= 0.01, (f32, f16)
PY
grep -q "as the planner's memory model predicts" "$tmp/f16.log" || fail "the plan and the allocation differ"
grep -qE "^ *working copies .*fp32" "$tmp/f16.log" || { cat "$tmp/f16.log"; fail "no line for the fp32 working copies"; }
/usr/bin/python3 - "$tmp/f32.jsonl" "$tmp/f16.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
la, lb = a[-1]["loss"], b[-1]["loss"]
print(f"final loss after 20 steps: fp32 masters {la:.6f}, fp16 masters {lb:.6f}")
assert any(x["loss"] != y["loss"] for x, y in zip(a, b)), "fp16 masters changed nothing: are they stored in 16 bits?"
assert abs(lb - la) <= 0.01 * la, (la, lb)
PY

# Resume: saved after step 3, steps 4-6 continue bitwise.
"$claw" train "${common[@]}" "${f16[@]}" --train-iters 6 --lr-decay-iters 6 --metrics-file "$tmp/full.jsonl" \
  >"$tmp/full.log" 2>&1 || { cat "$tmp/full.log"; fail "6 steps"; }
"$claw" train "${common[@]}" "${f16[@]}" --train-iters 6 --lr-decay-iters 6 --save "$tmp/ckpt" --save-interval 3 \
  --exit-interval 3 >"$tmp/first.log" 2>&1 || { cat "$tmp/first.log"; fail "the run saved at step 3"; }
"$claw" train "${common[@]}" "${f16[@]}" --train-iters 6 --lr-decay-iters 6 --load "$tmp/ckpt" \
  --metrics-file "$tmp/resumed.jsonl" >"$tmp/resumed.log" 2>&1 || { cat "$tmp/resumed.log"; fail "the resumed run"; }
/usr/bin/python3 "$(dirname "$0")/resumed_equal.py" "$tmp/full.jsonl" "$tmp/resumed.jsonl" 4 6 ||
  fail "the run resumed from fp16 masters"
"$claw" ckpt inspect --tensors "$tmp/ckpt" >"$tmp/inspect.txt" 2>&1 || { cat "$tmp/inspect.txt"; fail "inspect"; }
grep -E "^ *model\.[^ ]+ .* f16 " "$tmp/inspect.txt" >/dev/null || { cat "$tmp/inspect.txt"; fail "parameters not f16"; }
if grep -E "^ *model\..* f32 " "$tmp/inspect.txt"; then fail "a parameter stored in f32"; fi

# Across master precisions: the fp16 checkpoint into fp32 masters and back.
"$claw" train "${common[@]}" --train-iters 6 --lr-decay-iters 6 --load "$tmp/ckpt" >"$tmp/widen.log" 2>&1 ||
  { cat "$tmp/widen.log"; fail "fp16 masters into fp32"; }
"$claw" train "${common[@]}" --train-iters 4 --lr-decay-iters 6 --save "$tmp/f32ckpt" --save-interval 3 \
  --exit-interval 3 >"$tmp/f32first.log" 2>&1 || { cat "$tmp/f32first.log"; fail "fp32 save"; }
"$claw" train "${common[@]}" "${f16[@]}" --train-iters 6 --lr-decay-iters 6 --load "$tmp/f32ckpt" \
  >"$tmp/narrow.log" 2>&1 || { cat "$tmp/narrow.log"; fail "fp32 masters into fp16"; }

# Bad input names the flag.
if "$claw" train "${common[@]}" --main-params-dtype fp16 --train-iters 1 >"$tmp/bad.log" 2>&1; then
  fail "accepted without --use-precision-aware-optimizer"
fi
grep -q "main-params-dtype fp16 needs --use-precision-aware-optimizer" "$tmp/bad.log" || { cat "$tmp/bad.log"; fail "error text"; }
if "$claw" train "${common[@]}" --use-precision-aware-optimizer --main-params-dtype bf16 --train-iters 1 >"$tmp/bad2.log" 2>&1; then
  fail "accepted bf16 masters"
fi
grep -q "main-params-dtype bf16: expected fp32 or fp16" "$tmp/bad2.log" || { cat "$tmp/bad2.log"; fail "bf16 error text"; }
echo "PASS"
