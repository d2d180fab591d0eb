#!/usr/bin/env bash
# Silent data corruption on 4 data-parallel ranks (train/sdc.h):
#   1. a bit flipped in rank 2's reduced gradients at step 15 spikes the
#      gradient norm; the step is run again, rank 2's gradients do not
#      reproduce, rank 2 is named, and the run ends bitwise where a clean
#      run ends (the re-run's gradients replace the corrupt ones);
#   2. the same flip with re-runs off diverges rank 2's replica: the weight
#      hash comparison every 5 steps names rank 2 (of 4: the others agree)
#      and the job ends with exit code 5;
#   3. an infinite gradient that every re-run reproduces is not a hardware
#      fault: the state before the step is saved and the job ends with 5.
. "$(dirname "$0")/../../lib.sh"
claw=$1
# shellcheck source=models.sh
source "$here/models.sh"  # byte_data: the built-in corpus in bytes
run=(mpirun --oversubscribe --bind-to none -np 4 "$claw" train --model gpt2-tiny --num-layers 2 --hidden-size 64
     --num-attention-heads 4 --seq-length 64 --micro-batch-size 1 --global-batch-size 4 --train-iters 30
     --lr-decay-iters 30 --eval-interval 1000 --eval-iters 1 --lr 2e-3 --lr-warmup-iters 2 --num-threads 1
     --peak-gflops 100 --log-interval 10 "${byte_data[@]}")

"${run[@]}" --metrics-file "$tmp/clean.jsonl" >"$tmp/clean.log" 2>&1 || { cat "$tmp/clean.log"; fail "the clean run"; }

"${run[@]}" --metrics-file "$tmp/flip.jsonl" --test-fault bit-flip:2:15 >"$tmp/flip.log" 2>&1 ||
  { cat "$tmp/flip.log"; fail "the run with a flipped bit did not complete"; }
grep -q "step 15: silent data corruption: the re-run's gradients differ from the first run's on world rank 2 (host" \
  "$tmp/flip.log" || { grep -i "sdc\|fault" "$tmp/flip.log"; fail "rank 2 is not named by the re-run"; }
/usr/bin/python3 "$here/../cli/resumed_equal.py" "$tmp/clean.jsonl" "$tmp/flip.jsonl" 1 30 ||
  fail "the run with a caught flip differs from the clean run"
echo "ok: the re-run caught the flip on rank 2; the run ends bitwise as the clean run"

"${run[@]}" --rerun-mode disabled --check-weight-hash-across-dp-replicas-interval 5 --test-fault bit-flip:2:15 \
  >"$tmp/hash.log" 2>&1
code=$?
[[ $code == 5 ]] || { tail -n 20 "$tmp/hash.log"; fail "exit code $code with diverged replicas, expected 5"; }
grep -q "step 15: silent data corruption: the parameters of world rank 2 (host .*) differ from the other 3 replicas'" \
  "$tmp/hash.log" || { grep -i "error" "$tmp/hash.log"; fail "rank 2 is not named by the weight hash"; }
echo "ok: the weight hash comparison named rank 2 at step 15"

"${run[@]}" --test-fault inf-grad:12 --save "$tmp/ckpt" --save-interval 5 >"$tmp/inf.log" 2>&1
code=$?
[[ $code == 5 ]] || { tail -n 20 "$tmp/inf.log"; fail "exit code $code for a reproduced infinite gradient, expected 5"; }
grep -q "step 12: gradient norm inf .*reproduced bit for bit by a re-run on every rank" "$tmp/inf.log" ||
  { grep -i "error\|sdc" "$tmp/inf.log"; fail "no reproduced non-finite error"; }
[[ $(cat "$tmp/ckpt/latest_checkpointed_iteration.txt") == 11 ]] ||
  { ls "$tmp/ckpt"; fail "the state before step 12 (iteration 11) was not saved"; }
echo "ok: a reproduced infinite gradient saved iteration 11 and ended with exit code 5"
echo "PASS"
