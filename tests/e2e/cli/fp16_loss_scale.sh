#!/usr/bin/env bash
# FP16 loss scaling (--fp16): an injected infinite gradient at step 3
# (--test-fault inf-grad:3) skips that step, halves the scale (--hysteresis
# 1) and training goes on. The skipped step leaves the parameters as they
# were: the validation loss after steps 1-3 (3 skipped) equals, bit for
# bit, that of a run of steps 1-2. Every 2 clean steps (--loss-scale-window
# 2) double the scale. The loss scaler's state comes back from a checkpoint.
#   fp16_loss_scale.sh CLAW_BINARY
. "$(dirname "$0")/../../lib.sh"
set -e
claw=$1
common=(--model gpt2-tiny --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64
        --micro-batch-size 4 --global-batch-size 4 --eval-interval 1000 --eval-iters 2 --lr 1e-3 --lr-warmup-iters 1
        --lr-decay-iters 10 --num-threads 1 --peak-gflops 100
        --fp16 --initial-loss-scale 1024 --hysteresis 1 --loss-scale-window 2)

"$claw" train "${common[@]}" --train-iters 6 --test-fault inf-grad:3 --metrics-file "$tmp/skip.jsonl" \
  >"$tmp/skip.log" 2>&1 || { cat "$tmp/skip.log"; fail "the run with an injected overflow"; }
grep "overflowed" "$tmp/skip.log"
"$claw" train "${common[@]}" --train-iters 3 --test-fault inf-grad:3 --metrics-file "$tmp/three.jsonl" \
  >"$tmp/three.log" 2>&1 || { cat "$tmp/three.log"; fail "3 steps, 3 skipped"; }
"$claw" train "${common[@]}" --train-iters 2 --metrics-file "$tmp/two.jsonl" >"$tmp/two.log" 2>&1 ||
  { cat "$tmp/two.log"; fail "2 steps"; }
/usr/bin/python3 - "$tmp/skip.jsonl" "$tmp/three.jsonl" "$tmp/two.jsonl" <<'PY'
import json, sys
skip, three, two = ([json.loads(l) for l in open(p)] for p in sys.argv[1:4])
scales = [r["loss_scale"] for r in skip]
skipped = [r["skipped"] for r in skip]
print("loss scale per step:", scales, "skipped:", skipped)
assert skipped == [False, False, True, False, False, False], skipped
# Steps 1-2 clean: doubled for step 3; its overflow halves it; steps 4-5 clean: doubled for step 6.
assert scales == [1024, 1024, 2048, 1024, 1024, 2048], scales
assert skip[2]["grad_norm"] is None and all(r["grad_norm"] > 0 for r in skip if not r["skipped"])
a, b = three[-1]["val_loss"], two[-1]["val_loss"]
assert a == b, f"validation loss after a skipped step 3: {a}; after 2 steps: {b}"
print(f"ok: the skipped step left the parameters unchanged (validation loss {a} both)")
PY

# The scaler's state travels with the checkpoint: saved after step 4 (scale
# 1024, one clean step counted), the resumed steps 5-6 equal the
# uninterrupted run's, scale included.
"$claw" train "${common[@]}" --train-iters 6 --test-fault inf-grad:3 --save "$tmp/ckpt" --save-interval 4 \
  --exit-interval 4 >"$tmp/first.log" 2>&1 || { cat "$tmp/first.log"; fail "the run saved at step 4"; }
"$claw" train "${common[@]}" --train-iters 6 --load "$tmp/ckpt" --metrics-file "$tmp/resumed.jsonl" \
  >"$tmp/resumed.log" 2>&1 || { cat "$tmp/resumed.log"; fail "the resumed run"; }
/usr/bin/python3 "$(dirname "$0")/resumed_equal.py" "$tmp/skip.jsonl" "$tmp/resumed.jsonl" 5 6 loss_scale loss ||
  fail "the resumed run's loss scale or losses"

echo "PASS: FP16 loss scaling skips an overflowing step, halves its scale, grows it back and resumes it"
