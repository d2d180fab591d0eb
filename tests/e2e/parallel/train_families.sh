#!/usr/bin/env bash
# `claw train` of the architecture options that the Hugging Face families
# bring, under mpirun, against one rank (compare_runs.sh: per-step losses and
# validation losses 2e-5 relative, 4 steps each).
#
#   train_families.sh CLAW_BINARY CASE
#
# qwen2    --add-qkv-bias (Qwen 2's attention): TP 2 + SP (the biases split
#          with their heads), PP 2, DP 2 with ZeRO-1.
# qwen3    --qk-layernorm --kv-channels 32 (Qwen 3's attention): the same
#          layouts and TP 4 (the norms' weights summed over the heads'
#          ranks; 2 KV groups held by 2 ranks each).
# qwen3moe Qwen 3's attention over experts, layer 0 dense: the same layouts
#          and EP 2.
# gemma3   Gemma 3's options (models.sh): TP 2 + SP, PP 2, DP 2 with ZeRO-1,
#          CP 2 (the windowed layer's chunks) and TP 4.
# gemma2   Gemma 2's options with its soft-caps: TP 2 + SP (the capped logits'
#          vocabulary-parallel loss), PP 2, DP 2 with ZeRO-1 and CP 2 (capped
#          scores merged across chunks).
# olmo2    OLMo 2's options (post-sublayer norms only, full-width q/k norms):
#          TP 2 + SP, PP 2, DP 2 with ZeRO-1 and TP 4 + SP (the norms' sums of
#          squares over the group; each KV group on 2 ranks).
# mistral  --window-size 8 (Mistral's sliding window): TP 2 + SP, PP 2, DP 2
#          with ZeRO-1, and CP 2 with p2p and a2a, whose chunks the windows cross.
# deepseek3 DeepSeek-V3's latent attention and group-limited router (models.sh):
#          TP 2 + SP (the latent projections replicated, their gradients
#          summed over the heads' ranks), PP 2, DP 2 with ZeRO-1 and EP 2.
. "$(dirname "$0")/../../lib.sh"
claw=$1
case_name=$2
# shellcheck source=models.sh
source "$here/models.sh"
# shellcheck source=compare_runs.sh
source "$here/compare_runs.sh"
common=("${mpi_common[@]}")
loss_rtol=2e-5
check_layout() { true; }
layouts=("2:$short --tensor-model-parallel-size 2 --sequence-parallel" "2:$short --pipeline-model-parallel-size 2"
         "2:$short --use-distributed-optimizer")

case $case_name in
qwen2) compare qwen2 "${qwen2[@]}" -- "${layouts[@]}" ;;
qwen3) compare qwen3 "${qwen3[@]}" -- "${layouts[@]}" "4:$short --tensor-model-parallel-size 4" ;;
qwen3moe)  # experts run whole on each TP rank (--expert-tensor-parallel-size 1)
  compare qwen3moe "${qwen3moe[@]}" -- "${layouts[0]} --expert-tensor-parallel-size 1" "${layouts[@]:1}" \
    "2:$short --expert-model-parallel-size 2" ;;
gemma3)
  compare gemma3 "${gemma3[@]}" -- "${layouts[@]}" "2:$short --context-parallel-size 2" \
    "4:$short --tensor-model-parallel-size 4 --sequence-parallel" ;;
gemma2) compare gemma2 "${gemma2[@]}" -- "${layouts[@]}" "2:$short --context-parallel-size 2" ;;
olmo2)
  compare olmo2 "${olmo2[@]}" -- "${layouts[@]}" "4:$short --tensor-model-parallel-size 4 --sequence-parallel" ;;
deepseek3)  # the latent side replicated over TP, its gradients summed over the heads' ranks
  compare deepseek3 "${deepseek3[@]}" -- "${layouts[0]} --expert-tensor-parallel-size 1" "${layouts[@]:1}" \
    "2:$short --expert-model-parallel-size 2" ;;
mistral)
  compare mistral "${mistral[@]}" -- "${layouts[@]}" "2:$short --context-parallel-size 2" \
    "2:$short --context-parallel-size 2 --cp-comm-type a2a" ;;
*) fail "unknown case '$case_name' (qwen2, qwen3, qwen3moe, gemma2, gemma3, olmo2, mistral, deepseek3)" ;;
esac
