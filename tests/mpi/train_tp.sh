#!/usr/bin/env bash
# `claw train` with tensor (+ sequence) parallelism under mpirun.
#
#   train_tp.sh CLAW_BINARY CASE
#
# parity      20 steps on the built-in corpus, single rank vs TP 2, TP 2 with
#             --sequence-parallel, TP 4 + SP, and TP 2 x DP 2 with the
#             distributed optimizer, for gpt2-tiny (dropout 0.1) and
#             llama-tiny (GQA: 2 KV groups, replicated at TP 4): the same
#             per-step losses, grad norms and validation losses (2e-5 relative).
# frozen      --freeze at TP 2 + SP, TP 2 x DP 2 ZeRO-1 and PP 2 x DP 2 ZeRO-1
#             equals the single-rank frozen run (2e-5): gpt2-tiny with the tied
#             embeddings (vocabulary-parallel, across the pipeline's first and
#             last stage), the attention and layer 0's input norm frozen;
#             llama-tiny with layer 0, layer 1's attention and the final norm.
# sft         --sft on chat data (scripts/sft_task.py, claw preprocess --sft):
#             TP 2 + SP, PP 2 and DP 2 with ZeRO-1 equal the single-rank run
#             (2e-5) for gpt2-tiny and llama-tiny.
# lora        LoRA adapters (rank 4, all-linear, dropout 0.1; gpt2-tiny's tied
#             embeddings training beside them, --lora-modules-to-save) on the SFT
#             data: TP 2 + SP, PP 2, DP 2 with ZeRO-1 and TP 2 x DP 2 equal
#             the single-rank run (2e-5) for gpt2-tiny and llama-tiny (GQA
#             with KV groups replicated at TP 4 too).
# dpo         DPO (sigmoid) on preference pairs (scripts/sft_task.py
#             --preference, claw preprocess --dpo), gpt2-tiny with full
#             weights and llama-tiny with LoRA: TP 2 + SP, PP 2 and DP 2 with
#             ZeRO-1 (each computing its own reference log-probabilities)
#             equal the single-rank run (2e-5).
# bad_layout  layouts the model does not split into are refused before any
#             work, naming the flags: TP not dividing the heads, the KV groups
#             or the FFN width; --sequence-parallel without TP; a sequence
#             length SP cannot split.
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
gpt=(--model gpt2-tiny --num-attention-heads 4 --hidden-dropout 0.1)
llama=(--model llama-tiny --num-attention-heads 8 --num-query-groups 2 --ffn-hidden-size 192)
fail() { echo "FAIL: $*"; exit 1; }
# shellcheck source=refused.sh
source "$here/refused.sh"

case $case_name in
parity)
  for model in gpt llama; do
    declare -n arch=$model
    "$claw" train "${common[@]}" "${arch[@]}" --metrics-file "$tmp/$model.jsonl" >"$tmp/$model.log" 2>&1 ||
      { cat "$tmp/$model.log"; fail "$model: single-rank run"; }
    for run in "2 --tensor-model-parallel-size 2" "2 --tensor-model-parallel-size 2 --sequence-parallel" \
               "4 --tensor-model-parallel-size 4 --sequence-parallel" \
               "4 --tensor-model-parallel-size 2 --use-distributed-optimizer"; do
      read -r np flags <<<"$run"
      name="${model}_np${np}_$(echo "$flags" | sed 's/--tensor-model-parallel-size /tp/; s/--//g' | tr -cd 'a-z0-9_')"
      # shellcheck disable=SC2086
      timeout 300 "${mpirun[@]}" -np "$np" "$claw" train "${common[@]}" "${arch[@]}" $flags \
        --metrics-file "$tmp/$name.jsonl" >"$tmp/$name.log" 2>&1 ||
        { cat "$tmp/$name.log"; fail "mpirun -np $np claw train $flags"; }
      grep -q "tp [24] x" "$tmp/$name.log" || { head -5 "$tmp/$name.log"; fail "$name: no layout line"; }
      /usr/bin/python3 "$here/compare_metrics.py" "$tmp/$model.jsonl" "$tmp/$name.jsonl" "$name" || exit 1
    done
    unset -n arch
  done ;;
frozen)
  gpt_freeze=(--freeze 'embedding.*,layers.*.attention.*,layers.0.input_norm.*')
  llama_freeze=(--freeze 'layers.0.*,layers.1.attention.*,final_norm.*')
  for model in gpt llama; do
    declare -n arch=$model
    declare -n freeze=${model}_freeze
    name=${model}_frozen
    "$claw" train "${common[@]}" "${arch[@]}" "${freeze[@]}" --metrics-file "$tmp/$name.jsonl" >"$tmp/$name.log" 2>&1 ||
      { cat "$tmp/$name.log"; fail "$name: single-rank run"; }
    grep -q "M frozen: no gradients or optimizer state" "$tmp/$name.log" || fail "$name: the memory plan shows no frozen parameters"
    for run in "2 --tensor-model-parallel-size 2 --sequence-parallel" \
               "4 --tensor-model-parallel-size 2 --use-distributed-optimizer" \
               "4 --pipeline-model-parallel-size 2 --use-distributed-optimizer"; do
      read -r np flags <<<"$run"
      run_name="${name}_np${np}_$(echo "$flags" | sed 's/-model-parallel-size /-/; s/--//g' | tr -cd 'a-z0-9_')"
      # shellcheck disable=SC2086
      timeout 300 "${mpirun[@]}" -np "$np" "$claw" train "${common[@]}" "${arch[@]}" "${freeze[@]}" $flags \
        --metrics-file "$tmp/$run_name.jsonl" >"$tmp/$run_name.log" 2>&1 ||
        { cat "$tmp/$run_name.log"; fail "mpirun -np $np claw train $flags"; }
      /usr/bin/python3 "$here/compare_metrics.py" "$tmp/$name.jsonl" "$tmp/$run_name.jsonl" "$run_name" || exit 1
    done
    unset -n arch freeze
  done ;;
sft|lora|dpo)
  kind=sft
  [[ $case_name == dpo ]] && kind=dpo
  /usr/bin/python3 "$here/../../scripts/sft_task.py" --train 400 --test 10 --out "$tmp/task" \
    $([[ $kind == dpo ]] && echo --preference) >/dev/null
  "$claw" preprocess --input "$tmp/task/train.jsonl" --output-prefix "$tmp/chat" --$kind --workers 1 \
    >"$tmp/pre.log" 2>&1 || { cat "$tmp/pre.log"; fail "claw preprocess --$kind"; }
  extra=(--data-path "$tmp/chat_${kind}_document" --$kind --split 9,1,0)
  [[ $case_name == lora ]] && extra+=(--lora-rank 4 --lora-alpha 8 --lora-dropout 0.1)
  [[ $case_name == dpo ]] && extra+=(--micro-batch-size 2 --lr 1e-3)
  for model in gpt llama; do
    declare -n arch=$model
    name=${model}_$case_name
    [[ $case_name == dpo && $model == llama ]] && extra+=(--lora-rank 4 --lora-alpha 8)
    # gpt2-tiny's tied embeddings (the output layer too, on the last pipeline stage) train beside its adapters.
    run_extra=()
    [[ $case_name == lora && $model == gpt ]] && run_extra=(--lora-modules-to-save 'embedding.*')
    "$claw" train "${common[@]}" "${arch[@]}" "${extra[@]}" "${run_extra[@]}" --metrics-file "$tmp/$name.jsonl" \
      >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; fail "$name: single-rank run"; }
    if [[ $kind == dpo ]]; then
      grep -q "reference log-probabilities of .* pairs computed" "$tmp/$name.log" || fail "$name: no reference pass"
      grep -q '"rewards/accuracies"' "$tmp/$name.jsonl" || fail "$name: no DPO metrics"
    else
      grep -q "reset-attention-mask=true" "$tmp/$name.log" || fail "$name: --sft did not reset attention per conversation"
    fi
    runs=("2 --tensor-model-parallel-size 2 --sequence-parallel" "2 --pipeline-model-parallel-size 2"
          "2 --use-distributed-optimizer")
    if [[ $case_name == lora ]]; then
      grep -q "M frozen: no gradients or optimizer state" "$tmp/$name.log" || fail "$name: the memory plan shows no frozen base"
      runs+=("4 --tensor-model-parallel-size 2 --use-distributed-optimizer")
      [[ $model == llama ]] && runs+=("4 --tensor-model-parallel-size 4")  # KV groups replicated
    fi
    for run in "${runs[@]}"; do
      read -r np flags <<<"$run"
      run_name="${name}_np${np}_$(echo "$flags" | sed 's/-model-parallel-size /-/; s/--//g' | tr -cd 'a-z0-9_')"
      rm -f "$tmp"/chat_dpo_document_dpo_ref_*.npy  # each layout computes its own reference
      # shellcheck disable=SC2086
      timeout 300 "${mpirun[@]}" -np "$np" "$claw" train "${common[@]}" "${arch[@]}" "${extra[@]}" "${run_extra[@]}" \
        $flags --metrics-file "$tmp/$run_name.jsonl" >"$tmp/$run_name.log" 2>&1 ||
        { cat "$tmp/$run_name.log"; fail "mpirun -np $np claw train ${extra[*]} ${run_extra[*]} $flags"; }
      /usr/bin/python3 "$here/compare_metrics.py" "$tmp/$name.jsonl" "$tmp/$run_name.jsonl" "$run_name" || exit 1
    done
    unset -n arch
  done ;;
bad_layout)
  refused 4 "--model gpt2-tiny --num-attention-heads 2 --tensor-model-parallel-size 4" \
    "--tensor-model-parallel-size 4 does not divide --num-attention-heads 2"
  refused 2 "--model llama-tiny --num-attention-heads 6 --hidden-size 96 --num-query-groups 3 --tensor-model-parallel-size 2" \
    "--tensor-model-parallel-size 2 and --num-query-groups 3 do not divide one another"
  refused 4 "--model llama-tiny --num-attention-heads 8 --num-query-groups 2 --ffn-hidden-size 190 --tensor-model-parallel-size 4" \
    "--tensor-model-parallel-size 4 does not divide --ffn-hidden-size 190"
  refused 2 "--model gpt2-tiny --sequence-parallel" "--sequence-parallel needs --tensor-model-parallel-size > 1"
  refused 4 "--model gpt2-tiny --seq-length 30 --tensor-model-parallel-size 4 --sequence-parallel" \
    "--seq-length 30 is not a multiple of --tensor-model-parallel-size 4" ;;
*)
  fail "unknown case $case_name" ;;
esac
