#!/usr/bin/env bash
# `claw train` of Mixture-of-Experts models with expert parallelism under mpirun.
#
#   train_ep.sh CLAW_BINARY CASE
#
# parity      20 steps on the built-in corpus of a small mixtral-tiny (top-2
#             of 8 softmax experts, load-balancing loss) and deepseek-tiny
#             (top-4 of 16 sigmoid experts with the expert bias, a shared
#             expert, the first layer dense): the single-rank run against
#             MoE under DP 2 and PP 2, EP 2, EP 4, EP 2 over DP 4 (EP < DP:
#             experts reduced over their own data-parallel group), EP 2 with
#             the distributed optimizer, EP 2 with TP 2 + SP and expert TP 1,
#             EP 2 x CP 2, and TP 2 x CP 2 x PP 2 x EP 2 on 8 ranks; mixtral
#             also under ZeRO-3 and with a capacity factor (dropping): the
#             same per-step losses and validation losses (1e-6 relative) and
#             grad norms (2e-5).
# ckpt        a CP 2 x EP 2 run (4 ranks) saves after step 10; resumed on one
#             rank (CP 1 x EP 1) and at EP 4, steps 11-20 equal the run that
#             never stopped (1e-6); for both models (deepseek's expert bias
#             travels with the checkpoint).
# bad_layout  refused before any work, naming the flags: EP not dividing the
#             experts, ETP x EP x PP not dividing the ranks, expert TP > 1, MoE
#             under TP without SP, EP for a dense model.
set -uo pipefail
claw=$1
case_name=$2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=(mpirun --oversubscribe --bind-to none)
# Routing is a top-k: a token whose k-th and (k+1)-th scores differ by a
# rounding error would take another expert on another layout; small models
# at this learning rate keep every token clear of such ties for 20 steps.
common=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --ffn-hidden-size 128 --seq-length 32
        --micro-batch-size 1 --global-batch-size 8 --train-iters 20 --eval-interval 10 --eval-iters 2 --lr 2e-3
        --lr-warmup-iters 3 --peak-gflops 100 --num-threads 1)
mixtral=(--model mixtral-tiny --num-query-groups 2)
deepseek=(--model deepseek-tiny --num-query-groups 4 --moe-layer-freq 0,1 --moe-ffn-hidden-size 32
          --moe-shared-expert-intermediate-size 32)
fail() { echo "FAIL: $*"; exit 1; }
# shellcheck source=refused.sh
source "$here/refused.sh"

# shellcheck source=compare_runs.sh
source "$here/compare_runs.sh"
check_layout() {  # LOG FLAGS
  [[ $2 != *expert-model-parallel-size* ]] || grep -q "ep [24]" "$1"
}

case $case_name in
parity)
  for model in mixtral deepseek; do
    declare -n arch=$model
    compare "$model" "${arch[@]}" -- \
      "2 " "2 --pipeline-model-parallel-size 2" \
      "2 --expert-model-parallel-size 2" "4 --expert-model-parallel-size 4" \
      "4 --expert-model-parallel-size 2" "4 --expert-model-parallel-size 2 --use-distributed-optimizer" \
      "4 --tensor-model-parallel-size 2 --sequence-parallel --expert-tensor-parallel-size 1 --expert-model-parallel-size 2" \
      "4 --context-parallel-size 2 --expert-model-parallel-size 2" \
      "8 --tensor-model-parallel-size 2 --sequence-parallel --context-parallel-size 2 --pipeline-model-parallel-size 2 --expert-model-parallel-size 2 --expert-tensor-parallel-size 1"
    grep -q '"moe_load_max_over_mean"' "$tmp/$model.jsonl" || fail "$model: no tokens-per-expert metric"
    unset -n arch
  done
  compare mixtral_zero3 "${mixtral[@]}" -- "2 --expert-model-parallel-size 2 --zero-stage 3"
  compare mixtral_capacity "${mixtral[@]}" --moe-expert-capacity-factor 1.0 -- \
    "2 --expert-model-parallel-size 2" "4 --expert-model-parallel-size 4" ;;
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
    run "${model}_ref" 1
    run "${model}_saved" 4 --context-parallel-size 2 --expert-model-parallel-size 2 --save "$tmp/$model" \
      --save-interval 10 --exit-interval 10
    [[ $(cat "$tmp/$model/latest_checkpointed_iteration.txt") == 10 ]] || fail "$model: latest is not 10"
    for resumed in "1 one_rank" "4 ep4 --expert-model-parallel-size 4"; do
      read -r np name flags <<<"$resumed"
      # shellcheck disable=SC2086
      run "${model}_$name" "$np" --load "$tmp/$model" $flags
      grep -q "loaded .*iter_0000010" "$tmp/${model}_$name.log" || { cat "$tmp/${model}_$name.log"; fail "$model $name: no load line"; }
      /usr/bin/python3 "$here/compare_resume.py" "$tmp/${model}_ref.jsonl" "$tmp/${model}_$name.jsonl" \
        "$model CP2xEP2 -> $name" 11 10 --rtol 1e-6 --grad-norm-rtol 2e-5 || exit 1
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
    "--expert-model-parallel-size 2 needs a Mixture-of-Experts model" ;;
*)
  fail "unknown case $case_name" ;;
esac
