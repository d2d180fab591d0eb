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
. "$(dirname "$0")/../../lib.sh"
set -e
claw=$1
# shellcheck source=precision_checks.sh
source "$(dirname "$0")/precision_checks.sh"
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
close_but_different "$tmp/f32.jsonl" "$tmp/f16.jsonl" "fp16 masters"

# Resume: saved after step 3, steps 4-6 continue bitwise.
resumes_bitwise "fp16 masters" "${f16[@]}"
grep -E "^ *model\.[^ ]+ .* f16 " "$tmp/inspect.txt" >/dev/null || { cat "$tmp/inspect.txt"; fail "parameters not f16"; }
if grep -E "^ *model\..* f32 " "$tmp/inspect.txt"; then fail "a parameter stored in f32"; fi

# Across master precisions: the fp16 checkpoint into fp32 masters and back.
loads_across "fp16 masters" "${f16[@]}"

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
