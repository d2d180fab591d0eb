#!/usr/bin/env bash
# LoRA adapters against PyPI peft (peft_check.py; transformers, torch and peft
# from tools/hf_env.sh's venv under /tmp).
#
#   peft_interchange.sh CLAW_BINARY gpt2|llama|qwen2|mistral|qwen3|gemma2|gemma3|olmo2|phi3|deepseek3|qwen3moe
#
# qwen2, mistral, qwen3, gemma2, gemma3 and olmo2 are llama-tiny (Gemma's:
# gpt2-tiny's tied embeddings) with the family's options: their bases export
# as Qwen2ForCausalLM, MistralForCausalLM, Qwen3ForCausalLM,
# Gemma2ForCausalLM (soft-caps), Gemma3ForCausalLM and Olmo2ForCausalLM,
# whose modules PEFT names as Llama's (qwen3 and Gemma with transformers
# 4.57 and PEFT 0.17 over torch 2, tools/torch2_env.sh). phi3 exports as Phi3ForCausalLM, whose fused
# qkv_proj and gate_up_proj each hold one adapter (one A, B's rows split
# between q, k, v or gate, up). deepseek3 is llama-tiny's dense layers with
# DeepSeek-V3's latent attention, exported as DeepseekV3ForCausalLM (every
# layer dense), its adapters on q_a_proj ... kv_b_proj. qwen3moe is qwen3's
# llama-tiny with 4 experts in layers 1-3 (Qwen3MoeForCausalLM): adapters on
# attention, layer 0's dense MLP and every expert (claw's stacked per layer,
# one PEFT module per expert).
#
# (Both comparisons and the bitwise check run in one Python process, torch's
# start-up once.)
# 1. claw fine-tunes a base with LoRA (all-linear) for 3 steps and exports
#    the adapter (--format peft) and the base (--format hf): PEFT's
#    PeftModel.from_pretrained gives claw's logits, loss and adapter
#    gradients on the same batch;
# 2. PEFT makes an adapter of its own (random A and B, other targets, rsLoRA
#    for Llama) and saves it; claw imports it over the base (a claw
#    checkpoint for GPT-2, the HF directory for Llama): the same logits,
#    loss and gradients; exported again, it holds PEFT's tensors bit for bit;
# 3. the adapter over a base of another width: a one-line error naming the
#    file and tensor.
. "$(dirname "$0")/../../lib.sh"
set -e
claw=$1
family=$2
env=hf
case $family in
  gpt2|llama) model=(--model "$family-tiny") names=$family ;;
  qwen2) model=(--model llama-tiny --add-qkv-bias) names=llama ;;
  mistral) model=(--model llama-tiny --window-size 8) names=llama ;;
  qwen3) model=(--model llama-tiny --qk-layernorm --kv-channels 64) names=llama env=torch2 ;;
  qwen3moe) model=(--model llama-tiny --qk-layernorm --kv-channels 64 --num-experts 4 --moe-router-topk 2
                   --moe-ffn-hidden-size 128 --moe-layer-freq 0,1,1,1) names=moe env=torch2 ;;
  gemma3)  # gpt2-tiny's tied embeddings, Gemma 3's layers
    model=(--model gpt2-tiny --normalization RMSNorm --position-embedding-type rope --disable-bias-linear --geglu
           --apply-layernorm-1p --post-sublayer-norm --scale-embedding --qk-layernorm --kv-channels 64
           --num-query-groups 2 --softmax-scale 0.125 --window-size 8 --window-attn-skip-freq 2
           --local-rotary-base 10000) names=llama env=torch2 ;;
  gemma2)  # Gemma 2's layers (no q/k norms), its soft-caps low enough to bend this model's scores and logits
    model=(--model gpt2-tiny --normalization RMSNorm --position-embedding-type rope --disable-bias-linear --geglu
           --apply-layernorm-1p --post-sublayer-norm --scale-embedding --kv-channels 64 --num-query-groups 2
           --softmax-scale 0.125 --window-size 8 --window-attn-skip-freq 2 --attn-logit-softcapping 5
           --final-logit-softcapping 10) names=llama env=torch2 ;;
  phi3) model=(--model llama-tiny --hf-architecture Phi3ForCausalLM --window-size 8) names=phi3 ;;
  deepseek3)  # DeepSeek-V3's latent attention on llama-tiny's dense layers (DeepseekV3ForCausalLM, every layer dense)
    model=(--model llama-tiny --num-query-groups 0 --multi-latent-attention --q-lora-rank 32 --kv-lora-rank 32
           --qk-head-dim 32 --qk-pos-emb-head-dim 16 --v-head-dim 24 --rotary-interleaved) names=deepseek env=torch2 ;;
  olmo2) model=(--model llama-tiny --qk-layernorm --qk-layernorm-full-width --post-sublayer-norm --no-pre-sublayer-norm)
    names=llama ;;
  *) echo "peft_interchange.sh: unknown family '$family'" >&2; exit 2 ;;
esac
py=$("$here/../../oracle_env.sh" $env)
check() { "$py" "$here/peft_check.py" "$@" 2> >(grep -v -e Warning -e warn >&2); }
shape=(--micro-batch-size 2 --global-batch-size 4 --seq-length 32)
quiet() { "$@" >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }; }

quiet "$claw" train "${model[@]}" --train-iters 2 "${shape[@]}" --save "$tmp/base" --eval-interval 0 \
  --peak-gflops 100
quiet "$claw" train "${model[@]}" --load "$tmp/base" --finetune --lora-rank 4 --lora-alpha 8 --train-iters 3 --lr 1e-2 "${shape[@]}" \
  --save "$tmp/lora" --eval-interval 0 --peak-gflops 100
"$claw" ckpt export --load "$tmp/base" --format hf --output "$tmp/hf_base" >/dev/null
"$claw" ckpt export --load "$tmp/lora" --format peft --output "$tmp/peft_claw"
quiet "$claw" eval --load "$tmp/lora" "${shape[@]}" --eval-iters 1 --logits-file "$tmp/logits.st" \
  --grads-file "$tmp/grads.st"

check make "$names" "$tmp/hf_base" "$tmp/peft_made"
if [[ $family == gpt2 ]]; then base=(--load "$tmp/base"); else base=(--load-hf "$tmp/hf_base"); fi
"$claw" ckpt import --format peft --input "$tmp/peft_made" "${base[@]}" --save "$tmp/imported" 2>/dev/null
quiet "$claw" eval --load "$tmp/imported" "${shape[@]}" --eval-iters 1 --logits-file "$tmp/logits2.st" \
  --grads-file "$tmp/grads2.st"
"$claw" ckpt export --load "$tmp/imported" --format peft --output "$tmp/peft_again" >/dev/null
# claw's adapter in PEFT, PEFT's in claw, and PEFT's exported again by claw.
check compare "$names" "$tmp/hf_base" "$tmp/peft_claw" "$tmp/logits.st" "$tmp/grads.st" \
  "$tmp/peft_made" "$tmp/logits2.st" "$tmp/grads2.st" --same "$tmp/peft_made" "$tmp/peft_again"

# Another base shape: wider.
quiet "$claw" train "${model[@]}" --hidden-size 128 --num-attention-heads 4 --train-iters 1 "${shape[@]}" \
  --save "$tmp/other" --eval-interval 0 --peak-gflops 100
if "$claw" ckpt import --format peft --input "$tmp/peft_made" --load "$tmp/other" --save "$tmp/bad" \
    >"$tmp/out" 2>"$tmp/err"; then
  echo "an adapter over another base shape was accepted"; exit 1
fi
cat "$tmp/err"
[[ $(wc -l <"$tmp/err") -eq 1 ]] && grep -q "peft_made/adapter_model.safetensors: 'base_model.model.* has shape" "$tmp/err" &&
  grep -q "another shape" "$tmp/err"
[[ ! -e $tmp/bad ]] || { echo "a failed import left $tmp/bad"; exit 1; }
