#!/usr/bin/env bash
# The precision-aware optimizer (--use-precision-aware-optimizer with
# --exp-avg-dtype / --exp-avg-sq-dtype):
#   - the memory plan's optimizer arena is the moments' bytes: fp16 + bf16
#     half of fp32's, bf16 + fp32 three quarters;
#   - the checkpoint stores each moment in its dtype (ckpt inspect: exp_avg
#     f16, exp_avg_sq bf16), and a run resumed from it continues bitwise
#     (steps 4-6 equal the uninterrupted run's losses and grad norms);
#   - that checkpoint loads into a run with fp32 moments (widened exactly)
#     and an fp32 one into 16-bit moments (rounded);
#   - the moments really are 16-bit: 20 steps differ from the fp32 run but
#     stay within 1% of its final loss.
#   precision_aware_optimizer.sh CLAW_BINARY
. "$(dirname "$0")/../../lib.sh"
set -e
claw=$1
# shellcheck source=precision_checks.sh
source "$(dirname "$0")/precision_checks.sh"
common=(--model gpt2-tiny --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64
        --micro-batch-size 4 --global-batch-size 4 --eval-interval 1000 --eval-iters 2 --lr 2e-3 --lr-warmup-iters 1
        --num-threads 1 --peak-gflops 100)
pao=(--use-precision-aware-optimizer --exp-avg-dtype fp16 --exp-avg-sq-dtype bf16)

"$claw" train "${common[@]}" --train-iters 20 --lr-decay-iters 20 --metrics-file "$tmp/f32.jsonl" >"$tmp/f32.log" 2>&1 ||
  { cat "$tmp/f32.log"; fail "fp32 moments"; }
"$claw" train "${common[@]}" "${pao[@]}" --train-iters 20 --lr-decay-iters 20 --metrics-file "$tmp/pao20.jsonl" \
  >"$tmp/pao20.log" 2>&1 || { cat "$tmp/pao20.log"; fail "16-bit moments"; }
"$claw" train "${common[@]}" --use-precision-aware-optimizer --exp-avg-dtype bf16 --train-iters 1 >"$tmp/mixed.log" 2>&1 ||
  { cat "$tmp/mixed.log"; fail "bf16 + fp32 moments"; }
/usr/bin/python3 - "$(optimizer_mib "$tmp/f32.log")" "$(optimizer_mib "$tmp/pao20.log")" "$(optimizer_mib "$tmp/mixed.log")" <<'PY'
import sys
f32, half, mixed = (float(x) for x in sys.argv[1:4])
print(f"optimizer arena: fp32 moments {f32} MiB, fp16 + bf16 {half} MiB, bf16 + fp32 {mixed} MiB")
assert abs(half - f32 / 2) <= 0.01 and abs(mixed - f32 * 3 / 4) <= 0.01, (f32, half, mixed)
PY
grep -q "as the planner's memory model predicts" "$tmp/pao20.log" || fail "the plan and the allocation differ"
close_but_different "$tmp/f32.jsonl" "$tmp/pao20.jsonl" "fp16/bf16 moments"

# Resume: saved after step 3, steps 4-6 continue bitwise.
resumes_bitwise "16-bit moments" "${pao[@]}"
grep -E "^ *optim\.exp_avg\.[^ ]+ .* f16 " "$tmp/inspect.txt" >/dev/null || { cat "$tmp/inspect.txt"; fail "exp_avg not f16"; }
grep -E "^ *optim\.exp_avg_sq\.[^ ]+ .* bf16 " "$tmp/inspect.txt" >/dev/null || { cat "$tmp/inspect.txt"; fail "exp_avg_sq not bf16"; }
if grep -E "^ *optim\..* f32 " "$tmp/inspect.txt"; then fail "a moment stored in f32"; fi
grep -E "^ *model\..* f32 " "$tmp/inspect.txt" >/dev/null || fail "parameter values not f32"

# Across optimizer precisions: the 16-bit checkpoint into fp32 moments and back.
loads_across "16-bit moments" "${pao[@]}"
grep -q "optimizer" "$tmp/narrow.log"

# Bad input names the flag; fp16 squares are refused with the reason.
if "$claw" train "${common[@]}" --use-precision-aware-optimizer --exp-avg-sq-dtype fp16 --train-iters 1 >"$tmp/bad16.log" 2>&1; then
  fail "accepted fp16 exp_avg_sq"
fi
grep -q "exp-avg-sq-dtype fp16: squared gradients" "$tmp/bad16.log" || { cat "$tmp/bad16.log"; fail "fp16 error text"; }
if "$claw" train "${common[@]}" --exp-avg-dtype bf16 --train-iters 1 >"$tmp/bad.log" 2>&1; then fail "accepted without the flag"; fi
grep -q "needs --use-precision-aware-optimizer" "$tmp/bad.log" || { cat "$tmp/bad.log"; fail "error text"; }
echo "PASS"
