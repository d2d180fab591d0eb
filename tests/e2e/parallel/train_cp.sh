#!/usr/bin/env bash
# `claw train` with context parallelism under mpirun.
#
#   train_cp.sh CLAW_BINARY CASE
#
# parity      single rank vs CP 2 under ring attention (p2p, 20 steps), and
#             for 4 steps each CP 4 (p2p), CP 2 and 4 under heads-for-sequence
#             (a2a), TP 2 + SP x CP 2, PP 2 x CP 2, DP 2 x CP 2 with the
#             distributed optimizer (sharded over dp x cp), CP 2 with full
#             recompute and TP 2 x CP 2 x PP 2 on 8 ranks (SP, a2a), for
#             gpt2-tiny (learned positions, tied embeddings) and llama-tiny
#             (RoPE, GQA: 2 KV groups, each read by two ranks at a2a CP 4):
#             the same per-step losses and validation losses (1e-6 relative)
#             and grad norms (2e-5).
# mutation    rank 1 takes its second chunk one token late (--test-fault
#             shift-cp-chunk:1) at CP 2: the 4-step comparison must fail.
# packed      --sft on chat data (conversations packed into rows, attention
#             reset per conversation, so documents start and end inside the
#             chunks and cross them): CP 2 and CP 4 under p2p and a2a, and
#             TP 2 x CP 2, equal the single-rank run (losses 1e-6, 4 steps).
# ckpt        a DP 2 x CP 2 run (ZeRO-1 over dp x cp) saves after step 3;
#             resumed on one rank, at CP 4 (a2a) and at TP 2 x CP 2, steps
#             4-6 equal the run that never stopped (1e-6); stopped and
#             resumed at CP 2, bitwise; claw eval of the checkpoint at CP 2
#             gives the one-rank loss.
# bad_layout  refused before any work, naming the flags: a sequence length
#             that 2 x CP does not divide, a2a with KV groups CP does not
#             split, an unknown --cp-comm-type, --dpo with CP.
. "$(dirname "$0")/../../lib.sh"
claw=$1
case_name=$2
# shellcheck source=models.sh
source "$here/models.sh"
# shellcheck source=compare_runs.sh
source "$here/compare_runs.sh"
# shellcheck source=refused.sh
source "$here/refused.sh"
common=("${mpi_common[@]}")
gpt=("${gpt_nodrop[@]}")  # models.sh: no dropout under CP
check_layout() {  # LOG FLAGS
  grep -q "cp [24] x" "$1" && grep -q "context parallel" "$1"
}

case $case_name in
parity)
  for model in gpt llama; do
    declare -n arch=$model
    first="2 --context-parallel-size 2"  # the long run: gpt2-tiny at CP 2
    [[ $model == gpt ]] || first="2:$short --context-parallel-size 2"
    compare "${model}_cp" "${arch[@]}" -- "$first" "4:$short --context-parallel-size 4" \
      "2:$short --context-parallel-size 2 --cp-comm-type a2a" "4:$short --context-parallel-size 4 --cp-comm-type a2a" \
      "4:$short --tensor-model-parallel-size 2 --sequence-parallel --context-parallel-size 2" \
      "4:$short --pipeline-model-parallel-size 2 --context-parallel-size 2" \
      "4:$short --context-parallel-size 2 --use-distributed-optimizer" \
      "2:$short --context-parallel-size 2 --recompute-granularity full --recompute-method block --recompute-num-layers 1" \
      "8:$short --tensor-model-parallel-size 2 --sequence-parallel --context-parallel-size 2 --cp-comm-type a2a --pipeline-model-parallel-size 2"
    unset -n arch
  done ;;
mutation)
  caught gpt_cp shift-cp-chunk:1 "${gpt[@]}" -- "2:$short --context-parallel-size 2" ;;
packed)
  data=$(task_data sft) || exit 1
  common=("${mpi_common_gpt2[@]}")
  for model in gpt llama; do
    declare -n arch=$model
    compare "${model}_sft" "${arch[@]}" --data-path "$data" --sft --split 9,1,0 -- \
      "2:$short --context-parallel-size 2" "4:$short --context-parallel-size 4" \
      "4:$short --context-parallel-size 4 --cp-comm-type a2a" \
      "4:$short --tensor-model-parallel-size 2 --context-parallel-size 2"
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
  # Saved after step 3, resumed for steps 4-6 (--exit-interval 6; the
  # schedule is the 20-step run's throughout).
  run ref 1 --exit-interval 6
  run saved 4 --context-parallel-size 2 --use-distributed-optimizer --save "$tmp/ck" --save-interval 3 --exit-interval 3
  [[ $(cat "$tmp/ck/latest_checkpointed_iteration.txt") == 3 ]] || fail "latest is not 3"
  while read -r np name flags; do
    [[ -z $np ]] && continue
    # shellcheck disable=SC2086
    run "$name" "$np" --load "$tmp/ck" --exit-interval 6 $flags
    grep -q "loaded .*iter_0000003" "$tmp/$name.log" || { cat "$tmp/$name.log"; fail "$name: no load line"; }
    resume "$tmp/ref.jsonl" "$tmp/$name.jsonl" "DP2xCP2 ZeRO-1 -> $name" 4 3 --rtol 1e-6
  done <<'RUNS'
1 single_rank
4 cp4_a2a --context-parallel-size 4 --cp-comm-type a2a
4 tp2_cp2 --tensor-model-parallel-size 2 --context-parallel-size 2
RUNS
  run cp2_ref 2 --context-parallel-size 2 --exit-interval 6
  run cp2_a 2 --context-parallel-size 2 --save "$tmp/ck2" --save-interval 3 --exit-interval 3
  run cp2_b 2 --context-parallel-size 2 --save "$tmp/ck2" --save-interval 3 --load "$tmp/ck2" --exit-interval 6
  resume "$tmp/cp2_ref.jsonl" "$tmp/cp2_b.jsonl" "CP 2 stop and resume" 4 3 --bitwise
  ev=(eval --load "$tmp/ck" --eval-iters 2 --micro-batch-size 2 --global-batch-size 4 --seq-length 32 --num-threads 1
      "${byte_corpus_data[@]}")
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
    "--cp-comm-type ring: expected p2p (ring attention) or a2a"
  refusals_checked || exit 1 ;;
*)
  fail "unknown case $case_name" ;;
esac
