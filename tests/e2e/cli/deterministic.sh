#!/usr/bin/env bash
# Same --seed, same run: two short trainings give bit-identical losses and
# gradient norms; another seed gives different ones.
#   deterministic.sh CLAW_BINARY
. "$(dirname "$0")/../../lib.sh"
set -e
claw=$1
args=(--model llama-tiny --num-layers 2 --seq-length 64 --micro-batch-size 2 --global-batch-size 4
      --train-iters 4 --eval-interval 0 --hidden-dropout 0.1 --num-threads 2)
for run in a b; do "$claw" train "${args[@]}" --seed 7 --metrics-file "$tmp/$run.jsonl" >/dev/null 2>&1; done
"$claw" train "${args[@]}" --seed 8 --metrics-file "$tmp/c.jsonl" >/dev/null 2>&1
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
def seq(run):
    return [(r["loss"], r["grad_norm"]) for r in map(json.loads, open(f"{d}/{run}.jsonl"))]
a, b, c = seq("a"), seq("b"), seq("c")
assert len(a) == 4 and a == b, f"same seed differs:\n{a}\n{b}"
assert a != c, "a different seed gave the same run"
print("identical for one seed, different for another:", a[-1], c[-1])
PY
