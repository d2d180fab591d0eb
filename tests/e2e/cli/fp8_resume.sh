#!/usr/bin/env bash
# FP8 state travels with the checkpoint: delayed scaling's amax histories and
# scales (and NVFP4's stochastic-rounding position) are saved in
# state.fp8_scaling, so a run saved after step 3 and resumed continues as the
# uninterrupted run does, bit for bit (steps 4-6: loss and grad norm). A
# resume with another --fp8-amax-history-len warns and starts the scales
# afresh.
#   fp8_resume.sh CLAW_BINARY
. "$(dirname "$0")/../../lib.sh"
set -e
claw=$1
base=(--model gpt2-tiny --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64
      --micro-batch-size 4 --global-batch-size 4 --eval-interval 1000 --eval-iters 2 --lr 2e-3 --lr-warmup-iters 1
      --train-iters 6 --lr-decay-iters 6 --num-threads 1 --peak-gflops 100)
for recipe in delayed nvfp4; do
  if [[ $recipe == delayed ]]; then
    flags=(--fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 4 --fp8-amax-compute-algo max)
  else
    flags=(--fp4)
  fi
  d=$tmp/$recipe
  mkdir -p "$d"
  "$claw" train "${base[@]}" "${flags[@]}" --metrics-file "$d/full.jsonl" >"$d/full.log" 2>&1 ||
    { cat "$d/full.log"; fail "$recipe: 6 steps"; }
  "$claw" train "${base[@]}" "${flags[@]}" --save "$d/ckpt" --save-interval 3 --exit-interval 3 >"$d/first.log" 2>&1 ||
    { cat "$d/first.log"; fail "$recipe: the run saved at step 3"; }
  "$claw" train "${base[@]}" "${flags[@]}" --load "$d/ckpt" --metrics-file "$d/resumed.jsonl" >"$d/resumed.log" 2>&1 ||
    { cat "$d/resumed.log"; fail "$recipe: the resumed run"; }
  /usr/bin/python3 "$(dirname "$0")/resumed_equal.py" "$d/full.jsonl" "$d/resumed.jsonl" 4 6 ||
    fail "$recipe: the resumed run"
done
# Another history length: a warning, and the run goes on.
"$claw" train "${base[@]}" --fp8-format hybrid --fp8-amax-history-len 8 --load "$tmp/delayed/ckpt" >"$tmp/other.log" 2>&1 ||
  { cat "$tmp/other.log"; fail "resume with another history length"; }
grep -q "FP8 scaling state .* does not fit" "$tmp/other.log" || { cat "$tmp/other.log"; fail "no warning"; }
echo PASS
