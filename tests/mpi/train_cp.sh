#!/usr/bin/env bash
# `claw train` with context parallelism under mpirun.
#
#   train_cp.sh CLAW_BINARY CASE
#
# parity      20 steps on the built-in corpus, single rank vs CP 2 and CP 4
#             under ring attention (p2p) and heads-for-sequence (a2a), TP 2 +
#             SP x CP 2, PP 2 x CP 2, DP 2 x CP 2 with the distributed optimizer
#             (sharded over dp x cp), CP 2 with full recompute and TP 2 x CP 2 x
#             PP 2 on 8 ranks (SP, a2a), for gpt2-tiny
#             (learned positions, tied embeddings) and llama-tiny (RoPE, GQA:
#             2 KV groups, each read by two ranks at a2a CP 4): the same
#             per-step losses and validation losses (1e-6 relative) and grad
#             norms (2e-5).
# packed      --sft on chat data (conversations packed into rows, attention
#             reset per conversation, so documents start and end inside the
#             chunks and cross them): CP 2 and CP 4 under p2p and a2a, and
#             TP 2 x CP 2, equal the single-rank run (losses 1e-6).
# ckpt        a DP 2 x CP 2 run (ZeRO-1 over dp x cp) saves after step 10;
#             resumed on one rank, at CP 4 (a2a) and at TP 2 x CP 2, steps
#             11-20 equal the run that never stopped (1e-6); stopped and
#             resumed at CP 2, bitwise; claw eval of the checkpoint at CP 2
#             gives the one-rank loss.
# bad_layout  refused before any work, naming the flags: a sequence length
#             that 2 x CP does not divide, a2a with KV groups CP does not
#             split, an unknown --cp-comm-type, --dpo with CP.
set -uo pipefail
claw=$1
case_name=$2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=(mpirun --oversubscribe --bind-to none)
common=(--num-layers 2 --hidden-size 64 --seq-length 32 --micro-batch-size 1 --global-batch-size 8
        --train-iters 20 --eval-interval 10 --eval-iters 2 --lr 2e-3 --lr-warmup-iters 3 --peak-gflops 100
        --num-threads 1)
# Dropout masks are drawn per token of the run's stream; a CP rank's tokens
# are not a contiguous part of it, so the parity runs train without dropout.
gpt=(--model gpt2-tiny --num-attention-heads 4 --hidden-dropout 0)
llama=(--model llama-tiny --num-attention-heads 8 --num-query-groups 2 --ffn-hidden-size 192)
fail() { echo "FAIL: $*"; exit 1; }
# shellcheck source=refused.sh
source "$here/refused.sh"

# shellcheck source=compare_runs.sh
source "$here/compare_runs.sh"
check_layout() {  # LOG FLAGS
  grep -q "cp [24] x" "$1" && grep -q "context parallel" "$1"
}

case $case_name in
parity)
  for model in gpt llama; do
    declare -n arch=$model
    compare "$model" "${arch[@]}" -- \
      "2 --context-parallel-size 2" "4 --context-parallel-size 4" \
      "2 --context-parallel-size 2 --cp-comm-type a2a" "4 --context-parallel-size 4 --cp-comm-type a2a" \
      "4 --tensor-model-parallel-size 2 --sequence-parallel --context-parallel-size 2" \
      "4 --pipeline-model-parallel-size 2 --context-parallel-size 2" \
      "4 --context-parallel-size 2 --use-distributed-optimizer" \
      "2 --context-parallel-size 2 --recompute-granularity full --recompute-method block --recompute-num-layers 1" \
      "8 --tensor-model-parallel-size 2 --sequence-parallel --context-parallel-size 2 --cp-comm-type a2a --pipeline-model-parallel-size 2"
    unset -n arch
  done ;;
packed)
  /usr/bin/python3 "$here/../../scripts/sft_task.py" --train 400 --test 10 --out "$tmp/task" >/dev/null
  "$claw" preprocess --input "$tmp/task/train.jsonl" --output-prefix "$tmp/chat" --sft --workers 1 \
    >"$tmp/pre.log" 2>&1 || { cat "$tmp/pre.log"; fail "claw preprocess --sft"; }
  for model in gpt llama; do
    declare -n arch=$model
    compare "${model}_sft" "${arch[@]}" --data-path "$tmp/chat_sft_document" --sft --split 9,1,0 -- \
      "2 --context-parallel-size 2" "4 --context-parallel-size 4" "4 --context-parallel-size 4 --cp-comm-type a2a" \
      "4 --tensor-model-parallel-size 2 --context-parallel-size 2"
    grep -q "reset-attention-mask=true" "$tmp/${model}_sft.log" || fail "$model: --sft did not reset attention per conversation"
    unset -n arch
  done ;;
ckpt)
  run() {  # run NAME NP FLAGS...
    local name=$1 np=$2
    shift 2
    # shellcheck disable=SC2086
    timeout 300 "${mpirun[@]}" -np "$np" "$claw" train "${common[@]}" "${gpt[@]}" "$@" \
      --metrics-file "$tmp/$name.jsonl" </dev/null >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; fail "$name: claw train $*"; }
  }
  resume() { /usr/bin/python3 "$here/compare_resume.py" "$@" || exit 1; }
  run ref 1
  run saved 4 --context-parallel-size 2 --use-distributed-optimizer --save "$tmp/ck" --save-interval 10 --exit-interval 10
  [[ $(cat "$tmp/ck/latest_checkpointed_iteration.txt") == 10 ]] || fail "latest is not 10"
  while read -r np name flags; do
    [[ -z $np ]] && continue
    # shellcheck disable=SC2086
    run "$name" "$np" --load "$tmp/ck" $flags
    grep -q "loaded .*iter_0000010" "$tmp/$name.log" || { cat "$tmp/$name.log"; fail "$name: no load line"; }
    resume "$tmp/ref.jsonl" "$tmp/$name.jsonl" "DP2xCP2 ZeRO-1 -> $name" 11 10 --rtol 1e-6
  done <<'RUNS'
1 single_rank
4 cp4_a2a --context-parallel-size 4 --cp-comm-type a2a
4 tp2_cp2 --tensor-model-parallel-size 2 --context-parallel-size 2
RUNS
  run cp2_ref 2 --context-parallel-size 2 --train-iters 30
  run cp2_a 2 --context-parallel-size 2 --train-iters 30 --save "$tmp/ck2" --save-interval 5 --exit-interval 10
  run cp2_b 2 --context-parallel-size 2 --train-iters 30 --save "$tmp/ck2" --save-interval 5 --load "$tmp/ck2"
  resume "$tmp/cp2_ref.jsonl" "$tmp/cp2_b.jsonl" "CP 2 stop and resume" 11 20 --bitwise
  ev=(eval --load "$tmp/ck" --eval-iters 2 --micro-batch-size 2 --global-batch-size 4 --seq-length 32 --num-threads 1)
  "$claw" "${ev[@]}" >"$tmp/eval1.txt" 2>"$tmp/eval1.log" || { cat "$tmp/eval1.log"; fail "claw eval"; }
  timeout 300 "${mpirun[@]}" -np 2 "$claw" "${ev[@]}" --context-parallel-size 2 </dev/null >"$tmp/eval2.txt" \
    2>"$tmp/eval2.log" || { cat "$tmp/eval2.log"; fail "mpirun claw eval --context-parallel-size 2"; }
  /usr/bin/python3 - "$tmp/eval1.txt" "$tmp/eval2.txt" <<'PY' || fail "claw eval differs at CP 2"
import re, sys
a, b = (float(re.search(r"loss ([\d.]+)", open(p).read()).group(1)) for p in sys.argv[1:])
assert abs(a - b) <= 1e-6 * a, (a, b)
print(f"ok claw eval: loss {a:.6f} on one rank, {b:.6f} at CP 2")
PY
  ;;
bad_layout)
  refused 4 "--model gpt2-tiny --seq-length 36 --context-parallel-size 4" \
    "--seq-length 36 is not a multiple of 2 x --context-parallel-size 4"
  refused 2 "--model llama-tiny --num-attention-heads 6 --hidden-size 96 --num-query-groups 3 --context-parallel-size 2 --cp-comm-type a2a" \
    "--context-parallel-size 2 and the 3 KV groups"
  refused 2 "--model gpt2-tiny --context-parallel-size 2 --cp-comm-type ring" \
    "--cp-comm-type ring: expected p2p (ring attention) or a2a" ;;
*)
  fail "unknown case $case_name" ;;
esac
