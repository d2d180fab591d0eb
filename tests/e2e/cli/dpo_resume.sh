#!/usr/bin/env bash
# DPO through checkpoints: the reference log-probabilities are computed once
# (a second run from the same model reads the cache), a resumed run keeps the
# reference of the run it resumes (the checkpoint names the cache) and its
# steps 3-4 equal an uninterrupted 4-step run's; a resumed run whose cache
# is gone stops with a one-line error naming the file.
#
#   dpo_resume.sh CLAW_BINARY
. "$(dirname "$0")/../../lib.sh"
claw=$1
/usr/bin/python3 "$here/../../../scripts/sft_task.py" --preference --train 60 --test 4 --out "$tmp/task" >/dev/null
"$claw" preprocess --input "$tmp/task/pairs.jsonl" --output-prefix "$tmp/pref" --dpo --workers 1 >"$tmp/pre.log" 2>&1 ||
  { cat "$tmp/pre.log"; fail "claw preprocess --dpo"; }
common=(--model gpt2-tiny --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 24 --micro-batch-size 2
        --global-batch-size 4 --lr 1e-3 --lr-warmup-iters 1 --lr-decay-iters 4 --num-threads 2 --peak-gflops 100 --eval-interval 0
        --data-path "$tmp/pref_dpo_document" --dpo --split 1,0,0)
"$claw" train "${common[@]}" --train-iters 1 --save "$tmp/start" >"$tmp/start.log" 2>&1 ||
  { cat "$tmp/start.log"; fail "a starting model"; }
rm -f "$tmp"/pref_dpo_document_dpo_ref_*.npy
from_start=(--load "$tmp/start" --finetune)
"$claw" train "${common[@]}" "${from_start[@]}" --train-iters 4 --metrics-file "$tmp/whole.jsonl" >"$tmp/whole.log" 2>&1 ||
  { cat "$tmp/whole.log"; fail "the 4-step run"; }
grep -q "reference log-probabilities of 64 pairs computed" "$tmp/whole.log" || fail "no reference pass"
"$claw" train "${common[@]}" "${from_start[@]}" --train-iters 2 --save "$tmp/half" --metrics-file "$tmp/a.jsonl" \
  >"$tmp/a.log" 2>&1 || { cat "$tmp/a.log"; fail "the first 2 steps"; }
grep -q "reference log-probabilities of 128 sequences from .*pref_dpo_document_dpo_ref_" "$tmp/a.log" ||
  fail "the same starting model computed its reference again"
"$claw" train "${common[@]}" --load "$tmp/half" --train-iters 4 --metrics-file "$tmp/b.jsonl" >"$tmp/b.log" 2>&1 ||
  { cat "$tmp/b.log"; fail "the resumed run"; }
grep -q "reference log-probabilities of 128 sequences from" "$tmp/b.log" || fail "the resumed run did not read its reference"
/usr/bin/python3 - "$tmp" <<'PY' || exit 1
import json, sys
d = sys.argv[1]
whole = [json.loads(l) for l in open(f"{d}/whole.jsonl")]
parts = [json.loads(l) for l in open(f"{d}/a.jsonl")] + [json.loads(l) for l in open(f"{d}/b.jsonl")]
assert [r["step"] for r in parts] == [1, 2, 3, 4], [r["step"] for r in parts]
for w, p in zip(whole, parts):
    for k in ("loss", "rewards/margins", "rewards/accuracies"):
        assert abs(w[k] - p[k]) <= 1e-6 * max(1.0, abs(w[k])), (w["step"], k, w[k], p[k])
print("resumed DPO steps 1-4 equal the uninterrupted run's:", [round(r["loss"], 6) for r in whole])
PY
rm -f "$tmp"/pref_dpo_document_dpo_ref_*.npy
"$claw" train "${common[@]}" --load "$tmp/half" --train-iters 4 >"$tmp/gone.log" 2>&1 && fail "a resumed run without its reference trained"
last=$(tail -n 1 "$tmp/gone.log")
[[ $last == "claw: error: --dpo: the checkpoint's reference log-probabilities "*"pref_dpo_document_dpo_ref_"*".npy are gone"* ]] ||
  fail "unexpected error: $last"
echo "ok: $last"
