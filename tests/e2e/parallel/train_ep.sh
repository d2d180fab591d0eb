#!/usr/bin/env bash
# `claw train` of Mixture-of-Experts models with expert parallelism under mpirun.
#
#   train_ep.sh CLAW_BINARY CASE
#
# parity      a small mixtral-tiny (top-2 of 8 softmax experts, load-balancing
#             loss) and deepseek-tiny (top-4 of 16 sigmoid experts with the
#             expert bias, a shared expert, the first layer dense): the
#             single-rank run against EP 2 (mixtral, 20 steps), and for 4
#             steps each MoE under DP 2 and PP 2, EP 4, EP 2 over DP 4 (EP <
#             DP: experts reduced over their own data-parallel group), EP 2
#             with the distributed optimizer, EP 2 with TP 2 + SP and expert
#             TP 1, EP 2 x CP 2, and TP 2 x CP 2 x PP 2 x EP 2 on 8 ranks;
#             mixtral also under ZeRO-3, with LoRA adapters on its experts and
#             attention (EP 2), and with a capacity factor (dropping):
#             the same per-step losses and validation losses (1e-6 relative)
#             and grad norms (2e-5).
# mutation    each MoE dispatch on rank 1 loses its last row (--test-fault
#             drop-ep-row:1) at EP 2: the 4-step comparison must fail.
# ckpt        a CP 2 x EP 2 run (4 ranks) saves after step 3; resumed on one
#             rank (CP 1 x EP 1) and at EP 4, steps 4-6 equal the run that
#             never stopped (1e-6); for both models (deepseek's expert bias
#             travels with the checkpoint).
# bad_layout  refused before any work, naming the flags: EP not dividing the
#             experts, ETP x EP x PP not dividing the ranks, expert TP > 1, MoE
#             under TP without SP, EP for a dense model.
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
check_layout() {  # LOG FLAGS
  [[ $2 != *expert-model-parallel-size* ]] || grep -q "ep [24]" "$1"
}

case $case_name in
parity)
  for model in mixtral deepseek; do
    declare -n arch=$model
    first="2 --expert-model-parallel-size 2"  # the long run: mixtral-tiny at EP 2
    [[ $model == mixtral ]] || first="2:$short --expert-model-parallel-size 2"
    compare "$model" "${arch[@]}" -- \
      "2:$short " "2:$short --pipeline-model-parallel-size 2" "$first" "4:$short --expert-model-parallel-size 4" \
      "4:$short --expert-model-parallel-size 2" "4:$short --expert-model-parallel-size 2 --use-distributed-optimizer" \
      "4:$short --tensor-model-parallel-size 2 --sequence-parallel --expert-tensor-parallel-size 1 --expert-model-parallel-size 2" \
      "4:$short --context-parallel-size 2 --expert-model-parallel-size 2" \
      "8:$short --tensor-model-parallel-size 2 --sequence-parallel --context-parallel-size 2 --pipeline-model-parallel-size 2 --expert-model-parallel-size 2 --expert-tensor-parallel-size 1"
    grep -q '"moe_load_max_over_mean"' "$tmp/$model.jsonl" || fail "$model: no tokens-per-expert metric"
    unset -n arch
  done
  compare mixtral_zero3 "${mixtral[@]}" -- "2:$short --expert-model-parallel-size 2 --zero-stage 3"
  # LoRA on the experts (their stacked adapters split over EP with them) and on attention.
  compare mixtral_lora "${mixtral[@]}" --lora-rank 4 --lora-alpha 8 -- "2:$short --expert-model-parallel-size 2"
  compare mixtral_capacity "${mixtral[@]}" --moe-expert-capacity-factor 1.0 -- \
    "2:$short --expert-model-parallel-size 2" "4:$short --expert-model-parallel-size 4" ;;
mutation)
  caught mixtral drop-ep-row:1 "${mixtral[@]}" -- "2:$short --expert-model-parallel-size 2" ;;
ckpt)
  for model in mixtral deepseek; do
    declare -n arch=$model
    run() {  # run NAME NP FLAGS...
      local name=$1 np=$2
      shift 2
      # shellcheck disable=SC2086
      timeout 300 "${mpirun[@]}" -np "$np" "$claw" train "${common[@]}" "${arch[@]}" "$@" \
        --metrics-file "$tmp/$name.jsonl" </dev/null >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; fail "$name: claw train $*"; }
    }
    # Saved after step 3, resumed for steps 4-6 (on the 20-step schedule).
    run "${model}_ref" 1 --exit-interval 6
    run "${model}_saved" 4 --context-parallel-size 2 --expert-model-parallel-size 2 --save "$tmp/$model" \
      --save-interval 3 --exit-interval 3
    [[ $(cat "$tmp/$model/latest_checkpointed_iteration.txt") == 3 ]] || fail "$model: latest is not 3"
    for resumed in "1 one_rank" "4 ep4 --expert-model-parallel-size 4"; do
      read -r np name flags <<<"$resumed"
      # shellcheck disable=SC2086
      run "${model}_$name" "$np" --load "$tmp/$model" --exit-interval 6 $flags
      grep -q "loaded .*iter_0000003" "$tmp/${model}_$name.log" || { cat "$tmp/${model}_$name.log"; fail "$model $name: no load line"; }
      /usr/bin/python3 "$here/compare_resume.py" "$tmp/${model}_ref.jsonl" "$tmp/${model}_$name.jsonl" \
        "$model CP2xEP2 -> $name" 4 3 --rtol 1e-6 --grad-norm-rtol 2e-5 || exit 1
    done
    unset -n arch
  done ;;
bad_layout)
  refused 3 "${mixtral[*]} --global-batch-size 6 --expert-model-parallel-size 3" \
    "--expert-model-parallel-size 3 must divide --num-experts 8"
  refused 4 "${mixtral[*]} --expert-model-parallel-size 8 --expert-tensor-parallel-size 1" \
    "--expert-tensor-parallel-size 1 x --expert-model-parallel-size 8 x --pipeline-model-parallel-size 1 = 8 does not divide the world size 4"
  refused 4 "${mixtral[*]} --expert-model-parallel-size 8" \
    "--expert-model-parallel-size 8 must divide data-parallel x context-parallel = 4"
  refused 4 "${mixtral[*]} --tensor-model-parallel-size 2 --sequence-parallel --expert-model-parallel-size 2" \
    "--expert-tensor-parallel-size 2: experts run whole on each rank"
  refused 2 "${mixtral[*]} --tensor-model-parallel-size 2 --expert-tensor-parallel-size 1" \
    "--num-experts with --tensor-model-parallel-size 2 needs --sequence-parallel"
  refused 2 "--model llama-tiny --expert-model-parallel-size 2" \
    "--expert-model-parallel-size 2 needs a Mixture-of-Experts model"
  refusals_checked || exit 1 ;;
*)
  fail "unknown case $case_name" ;;
esac
