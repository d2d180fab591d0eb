#!/usr/bin/env bash
# --metrics-file across a resume: a run killed after its last checkpoint
# (steps 3-4 past the save at 2) and resumed with the same file ends with
# every step 1-6 once, the resumed run's records for 3-4, not the file
# truncated to the resumed steps (as under `claw launch`, which restarts
# with the same flags).
#
#   metrics_resume.sh CLAW
. "$(dirname "$0")/../../lib.sh"
claw=$1
small=(--model gpt2-tiny --num-layers 1 --hidden-size 64 --seq-length 32 --micro-batch-size 2 --eval-interval 0
       --num-threads 2 --save "$tmp/ck" --save-interval 2 --metrics-file "$tmp/m.jsonl")
"$claw" train "${small[@]}" --train-iters 4 >"$tmp/a.log" 2>&1 || { tail -5 "$tmp/a.log"; fail "first run"; }
# The failure: iteration 4's checkpoint never committed, and a torn last record.
rm -rf "$tmp/ck/iter_0000004"
echo 2 >"$tmp/ck/latest_checkpointed_iteration.txt"
printf '{"step": 5, "loss": 1' >>"$tmp/m.jsonl"
"$claw" train "${small[@]}" --train-iters 6 --load "$tmp/ck" >"$tmp/b.log" 2>&1 || { tail -5 "$tmp/b.log"; fail "resumed run"; }
steps=$(/usr/bin/python3 -c '
import json, sys
print(" ".join(str(json.loads(l)["step"]) for l in open(sys.argv[1])))' "$tmp/m.jsonl") || fail "the metrics file does not parse"
[[ $steps == "1 2 3 4 5 6" ]] || fail "steps in the metrics file: $steps (expected 1 2 3 4 5 6)"
echo "ok: the metrics file holds steps $steps"
