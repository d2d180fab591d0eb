#!/usr/bin/env bash
# FP8 optimizer moments (--use-precision-aware-optimizer --exp-avg-dtype fp8
# --exp-avg-sq-dtype fp8: E4M3 and E5M2 codes with a power-of-two scale per
# 128 elements):
#   - the optimizer arena is a quarter of fp32 moments' plus the scales
#     (1.03 B per moment and element), as the memory plan says;
#   - 20 steps differ from the fp32 run but stay within 1% of its final loss;
#   - the checkpoint holds the moments as bf16 (exact for scaled FP8 values)
#     and a run resumed from it continues bitwise; it loads into fp32
#     moments, and an fp32 checkpoint into FP8 ones;
#   - bad values name the flag.
#   fp8_optimizer_moments.sh CLAW_BINARY
. "$(dirname "$0")/../../lib.sh"
set -e
claw=$1
# shellcheck source=precision_checks.sh
source "$(dirname "$0")/precision_checks.sh"
common=(--model gpt2-tiny --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64
        --micro-batch-size 4 --global-batch-size 4 --eval-interval 1000 --eval-iters 2 --lr 2e-3 --lr-warmup-iters 1
        --num-threads 1 --peak-gflops 100)
fp8=(--use-precision-aware-optimizer --exp-avg-dtype fp8 --exp-avg-sq-dtype fp8)

"$claw" train "${common[@]}" --train-iters 20 --lr-decay-iters 20 --metrics-file "$tmp/f32.jsonl" >"$tmp/f32.log" 2>&1 ||
  { cat "$tmp/f32.log"; fail "fp32 moments"; }
"$claw" train "${common[@]}" "${fp8[@]}" --train-iters 20 --lr-decay-iters 20 --metrics-file "$tmp/fp8.jsonl" \
  >"$tmp/fp8.log" 2>&1 || { cat "$tmp/fp8.log"; fail "FP8 moments"; }
/usr/bin/python3 - "$(optimizer_mib "$tmp/f32.log")" "$(optimizer_mib "$tmp/fp8.log")" <<'PY'
import sys
f32, fp8 = (float(x) for x in sys.argv[1:3])
print(f"optimizer arena: fp32 moments {f32} MiB, FP8 moments {fp8} MiB ({fp8 / f32:.4f} of fp32)")
assert abs(fp8 - f32 / 4 * (1 + 4 / 128)) <= 0.01, (f32, fp8)
PY
grep -q "as the planner's memory model predicts" "$tmp/fp8.log" || fail "the plan and the allocation differ"
close_but_different "$tmp/f32.jsonl" "$tmp/fp8.jsonl" "FP8 moments"

# Resume: saved after step 3, steps 4-6 continue bitwise.
resumes_bitwise "FP8 moments" "${fp8[@]}"
grep -E "^ *optim\.exp_avg\.[^ ]+ .* bf16 " "$tmp/inspect.txt" >/dev/null || { cat "$tmp/inspect.txt"; fail "exp_avg not bf16"; }
grep -E "^ *optim\.exp_avg_sq\.[^ ]+ .* bf16 " "$tmp/inspect.txt" >/dev/null || { cat "$tmp/inspect.txt"; fail "exp_avg_sq not bf16"; }

# Across optimizer precisions: the FP8 checkpoint into fp32 moments and back.
loads_across "FP8 moments" "${fp8[@]}"

# Bad input names the flag.
if "$claw" train "${common[@]}" --use-precision-aware-optimizer --main-params-dtype fp8 --train-iters 1 >"$tmp/bad.log" 2>&1; then
  fail "accepted fp8 master weights"
fi
grep -q "main-params-dtype fp8: expected fp32 or fp16" "$tmp/bad.log" || { cat "$tmp/bad.log"; fail "error text"; }
if "$claw" train "${common[@]}" --exp-avg-dtype fp8 --train-iters 1 >"$tmp/bad2.log" 2>&1; then fail "accepted without the flag"; fi
grep -q "needs --use-precision-aware-optimizer" "$tmp/bad2.log" || { cat "$tmp/bad2.log"; fail "error text"; }
echo "PASS"
