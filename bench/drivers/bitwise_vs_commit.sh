#!/usr/bin/env bash
# fp32 training bitwise equal to another commit's: builds COMMIT's claw in a
# temporary worktree, runs it and this checkout's claw on the same cases and
# compares, step by step, the metrics' loss, grad_norm and val_loss as the
# JSON text each binary wrote (so equal means the same double, bit for bit).
# Prints one line per case: "<case>: equal (...)" or "<case>: different (...)";
# exits 1 if any case differs.
#
#   bench/drivers/bitwise_vs_commit.sh COMMIT [CLAW]
#
# CLAW: this checkout's binary (default build/bin/claw). Cases: gpt2-tiny and
# llama-tiny, 10 steps with validation every 5, on one rank and under
# `mpirun -np 8` at TP 2 x PP 2 x DP 2 with sequence parallelism and the
# distributed optimizer (global batch 8, micro batch 1); DPO (claw train
# --dpo, 4 steps on scripts/sft_task.py's preference pairs, each binary
# computing its own reference) and GRPO (claw rl, 3 steps on one rank). Both
# binaries read the same built-in corpus ($CLAW_DATA_DIR, default this
# checkout's data/).
set -euo pipefail
if [[ $# -lt 1 ]]; then
  sed -n '2,15p' "$0"
  exit 2
fi
commit=$1
here=$(cd "$(dirname "$0")/../.." && pwd)
new=$(realpath "${2:-$here/build/bin/claw}")
[[ -x $new ]] || { echo "no claw binary at $new (build this checkout first)"; exit 2; }
export CLAW_DATA_DIR=${CLAW_DATA_DIR:-$(realpath "$here/data")}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

tmp=$(mktemp -d)
cleanup() {
  git -C "$here" worktree remove --force "$tmp/src" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

git -C "$here" worktree add --detach "$tmp/src" "$commit" >/dev/null 2>&1 ||
  { echo "cannot check out $commit"; exit 2; }
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S "$tmp/src" -B "$tmp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCLAW_BUILD_TESTS=OFF \
  -DCLAW_BUILD_BENCH=OFF -DCLAW_DATA_DIR="$CLAW_DATA_DIR" "${launcher[@]}" >"$tmp/cmake.log" 2>&1 ||
  { cat "$tmp/cmake.log"; echo "cmake failed for $commit"; exit 2; }
cmake --build "$tmp/build" --target claw >"$tmp/build.log" 2>&1 ||
  { tail -30 "$tmp/build.log"; echo "build failed for $commit"; exit 2; }
old=$tmp/build/bin/claw

common=(--train-iters 10 --eval-interval 5 --peak-gflops 100)
parallel=(--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel
          --use-distributed-optimizer --global-batch-size 8 --micro-batch-size 1)
mpirun=(mpirun -np 8 --oversubscribe --bind-to none)

run() {  # run NAME BINARY LAUNCHER... -- FLAGS...: metrics into $tmp/NAME.jsonl
  local name=$1 bin=$2
  shift 2
  local pre=()
  while [[ $1 != -- ]]; do pre+=("$1"); shift; done
  shift
  "${pre[@]}" "$bin" train "$@" --metrics-file "$tmp/$name.jsonl" </dev/null >"$tmp/$name.log" 2>&1 ||
    { tail -20 "$tmp/$name.log"; echo "$name: the run failed"; return 1; }
}

compare() {  # compare CASE: prints the verdict; returns 1 when different
  /usr/bin/python3 - "$1" "$tmp/$1.old.jsonl" "$tmp/$1.new.jsonl" <<'EOF'
import json, sys
name, a, b = sys.argv[1:]
# Numbers as the text each binary wrote: equal text is equal bits.
read = lambda p: [json.loads(l, parse_float=str) for l in open(p) if l.strip()]
old, new = read(a), read(b)
if len(old) != len(new) or not old:
    print(f"{name}: different ({len(old)} steps before, {len(new)} now)")
    sys.exit(1)
vals = 0
for o, n in zip(old, new):
    for k in ("loss", "grad_norm", "val_loss"):
        if o.get(k) != n.get(k):
            print(f"{name}: different (step {o['step']} {k}: {o.get(k)} before, {n.get(k)} now)")
            sys.exit(1)
    vals += "val_loss" in o
print(f"{name}: equal ({len(old)} steps of loss and grad_norm, {vals} val_loss; final loss {old[-1]['loss']})")
EOF
}

status=0
for model in gpt2-tiny llama-tiny; do
  for layout in 1rank tp2pp2dp2; do
    name=${model}_$layout
    pre=(env)
    flags=(--model "$model" "${common[@]}")
    if [[ $layout != 1rank ]]; then
      pre=("${mpirun[@]}")
      flags+=("${parallel[@]}")
    fi
    if run "$name.old" "$old" "${pre[@]}" -- "${flags[@]}" && run "$name.new" "$new" "${pre[@]}" -- "${flags[@]}"; then
      compare "$name" || status=1
    else
      status=1
    fi
  done
done
# DPO: the pairs preprocessed once; each binary computes its reference (no cache shared).
/usr/bin/python3 "$here/scripts/sft_task.py" --preference --train 60 --test 4 --out "$tmp/pref" >/dev/null
"$new" preprocess --input "$tmp/pref/pairs.jsonl" --output-prefix "$tmp/pref/p" --dpo --workers 1 >"$tmp/pre.log" 2>&1 ||
  { cat "$tmp/pre.log"; exit 2; }
dpo=(--model gpt2-tiny --num-layers 2 --seq-length 24 --micro-batch-size 2 --global-batch-size 4 --train-iters 4
     --eval-interval 0 --peak-gflops 100 --data-path "$tmp/pref/p_dpo_document" --dpo --split 1,0,0)
rm -f "$tmp"/pref/p_dpo_document_dpo_ref_*
run dpo.old "$old" env -- "${dpo[@]}" || status=1
rm -f "$tmp"/pref/p_dpo_document_dpo_ref_*
run dpo.new "$new" env -- "${dpo[@]}" && compare dpo || status=1
# GRPO: a one-layer gpt2-tiny taught the reversal task's format by a short
# SFT (this checkout's binary makes it once), then 3 GRPO steps by each.
/usr/bin/python3 "$here/scripts/sft_task.py" --task reverse --words 2-2 --train 400 --test 4 --out "$tmp/rl" >/dev/null
"$new" preprocess --input "$tmp/rl/train.jsonl" --output-prefix "$tmp/rl/p" --sft --chat-template plain \
  >"$tmp/rl.pre.log" 2>&1 || { cat "$tmp/rl.pre.log"; exit 2; }
"$new" train --model gpt2-tiny --num-layers 1 --seq-length 48 --micro-batch-size 8 --train-iters 60 --lr 2e-3 \
  --data-path "$tmp/rl/p_sft_document" --sft --split 1,0,0 --eval-interval 0 --num-threads 2 --save "$tmp/rl/base" \
  >"$tmp/rl.sft.log" 2>&1 || { tail -20 "$tmp/rl.sft.log"; exit 2; }
grpo=(--load "$tmp/rl/base" --finetune --prompt-data "$tmp/rl/train.jsonl" --task reverse --global-batch-size 16
      --micro-batch-size 8 --num-generations 4 --seq-length 48 --max-new-tokens 8 --train-iters 3 --eval-interval 0
      --num-threads 2)
rl() {  # rl NAME BINARY: claw rl's metrics into $tmp/NAME.jsonl
  "$2" rl "${grpo[@]}" --metrics-file "$tmp/$1.jsonl" </dev/null >"$tmp/$1.log" 2>&1 ||
    { tail -20 "$tmp/$1.log"; echo "$1: the run failed"; return 1; }
}
rl grpo.old "$old" && rl grpo.new "$new" && compare grpo || status=1
exit $status
