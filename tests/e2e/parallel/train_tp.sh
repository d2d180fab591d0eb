#!/usr/bin/env bash
# `claw train` with tensor (+ sequence) parallelism under mpirun.
#
#   train_tp.sh CLAW_BINARY CASE
#
# parity      the single-rank run against TP 2 + SP (gpt2-tiny, dropout 0.1,
#             20 steps), TP 2 x DP 2 with the distributed optimizer (gpt2-tiny)
#             and TP 4 + SP (llama-tiny, GQA: 2 KV groups replicated) for 4
#             steps each: the same per-step losses, grad norms and validation
#             losses (2e-5 relative). TP 2 and 4 with and without SP for both
#             models over 20 steps are test_tensor_parallel's (gtest).
# mutation    rank 1's gradients scaled by 1.001 after step 2 (--test-fault
#             scale-grad:1:2:1.001) at TP 2: the 4-step comparison must fail.
# frozen      --freeze at TP 2 + SP, TP 2 x DP 2 ZeRO-1 and PP 2 x DP 2 ZeRO-1
#             equals the single-rank frozen run over 4 steps (2e-5): gpt2-tiny with the tied
#             embeddings (vocabulary-parallel, across the pipeline's first and
#             last stage), the attention and layer 0's input norm frozen;
#             llama-tiny with layer 0, layer 1's attention and the final norm.
# sft         --sft on chat data (scripts/sft_task.py, claw preprocess --sft):
#             TP 2 + SP, PP 2 and DP 2 with ZeRO-1 equal the single-rank run
#             (2e-5, 4 steps) for gpt2-tiny and llama-tiny.
# lora        LoRA adapters (rank 4, all-linear, dropout 0.1; gpt2-tiny's tied
#             embeddings training beside them, --lora-modules-to-save) on the SFT
#             data: TP 2 + SP, PP 2, DP 2 with ZeRO-1 and TP 2 x DP 2 equal
#             the single-rank run (2e-5, 4 steps) for gpt2-tiny and llama-tiny (GQA
#             with KV groups replicated at TP 4 too).
# dpo         DPO (sigmoid) on preference pairs (scripts/sft_task.py
#             --preference, claw preprocess --dpo), gpt2-tiny with full
#             weights and llama-tiny with LoRA: TP 2 + SP, PP 2 and DP 2 with
#             ZeRO-1 (each computing its own reference log-probabilities)
#             equal the single-rank run (2e-5, 4 steps).
# bad_layout  layouts the model does not split into are refused before any
#             work, naming the flags: TP not dividing the heads, the KV groups
#             or the FFN width; --sequence-parallel without TP; a sequence
#             length SP cannot split.
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
loss_rtol=2e-5
check_layout() { [[ $2 != *tensor-model-parallel-size* ]] || grep -q "tp [24] x" "$1"; }

case $case_name in
parity)
  compare gpt "${gpt[@]}" -- "2 --tensor-model-parallel-size 2 --sequence-parallel" \
    "4:$short --tensor-model-parallel-size 2 --use-distributed-optimizer"
  compare llama "${llama[@]}" -- "4:$short --tensor-model-parallel-size 4 --sequence-parallel" ;;
mutation)
  caught gpt scale-grad:1:2:1.001 "${gpt[@]}" -- "2:$short --tensor-model-parallel-size 2" ;;
frozen)
  gpt_freeze=(--freeze 'embedding.*,layers.*.attention.*,layers.0.input_norm.*')
  llama_freeze=(--freeze 'layers.0.*,layers.1.attention.*,final_norm.*')
  for model in gpt llama; do
    declare -n arch=$model
    declare -n freeze=${model}_freeze
    compare "${model}_frozen" "${arch[@]}" "${freeze[@]}" -- \
      "2:$short --tensor-model-parallel-size 2 --sequence-parallel" \
      "4:$short --tensor-model-parallel-size 2 --use-distributed-optimizer" \
      "4:$short --pipeline-model-parallel-size 2 --use-distributed-optimizer"
    grep -q "M frozen: no gradients or optimizer state" "$tmp/${model}_frozen.log" ||
      fail "${model}_frozen: the memory plan shows no frozen parameters"
    unset -n arch freeze
  done ;;
sft|lora|dpo)
  kind=sft
  [[ $case_name == dpo ]] && kind=dpo
  data=$(task_data $kind) || exit 1
  common=("${mpi_common_gpt2[@]}")
  extra=(--data-path "$data" --$kind --split 9,1,0)
  [[ $case_name == lora ]] && extra+=(--lora-rank 4 --lora-alpha 8 --lora-dropout 0.1)
  [[ $case_name == dpo ]] && extra+=(--micro-batch-size 2 --lr 1e-3)
  before_run() { rm -f "$data"_dpo_ref_*.npy; }  # each layout computes its own DPO reference
  before_run
  for model in gpt llama; do
    declare -n arch=$model
    name=${model}_$case_name
    [[ $case_name == dpo && $model == llama ]] && extra+=(--lora-rank 4 --lora-alpha 8)
    # gpt2-tiny's tied embeddings (the output layer too, on the last pipeline stage) train beside its adapters.
    run_extra=()
    [[ $case_name == lora && $model == gpt ]] && run_extra=(--lora-modules-to-save 'embedding.*')
    runs=("2:$short --tensor-model-parallel-size 2 --sequence-parallel" "2:$short --pipeline-model-parallel-size 2"
          "2:$short --use-distributed-optimizer")
    if [[ $case_name == lora ]]; then
      runs+=("4:$short --tensor-model-parallel-size 2 --use-distributed-optimizer")
      [[ $model == llama ]] && runs+=("4:$short --tensor-model-parallel-size 4")  # KV groups replicated
    fi
    compare "$name" "${arch[@]}" "${extra[@]}" "${run_extra[@]}" -- "${runs[@]}"
    if [[ $kind == dpo ]]; then
      grep -q "reference log-probabilities of .* pairs computed" "$tmp/$name.log" || fail "$name: no reference pass"
      grep -q '"rewards/accuracies"' "$tmp/$name.jsonl" || fail "$name: no DPO metrics"
    else
      grep -q "reset-attention-mask=true" "$tmp/$name.log" || fail "$name: --sft did not reset attention per conversation"
    fi
    [[ $case_name != lora ]] || grep -q "M frozen: no gradients or optimizer state" "$tmp/$name.log" ||
      fail "$name: the memory plan shows no frozen base"
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
    "--seq-length 30 is not a multiple of --tensor-model-parallel-size 4"
  refusals_checked || exit 1 ;;
*)
  fail "unknown case $case_name" ;;
esac
