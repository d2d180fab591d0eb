// Hugging Face names for claw's parameters (the HfRef of each ParamSpec).
//
// Two families: GPT-2 (GPT2LMHeadModel: fused c_attn, Conv1D weights stored
// [in, out]) and Llama (LlamaForCausalLM: separate q/k/v/o, gate/up/down,
// nn.Linear weights [out, in]; Mistral, Mixtral and Qwen name theirs so). A
// model with learned positions, LayerNorm and GELU is named as GPT-2;
// anything else as Llama (HF has no architecture for other mixtures; an
// exporter refuses those). --hf-architecture Phi3ForCausalLM names Llama's
// layers as Phi-3 stores them: q, k, v as row slices of one qkv_proj and gate,
// up as the halves of one gate_up_proj.
#pragma once

#include <string>

#include "claw/model/config.h"
#include "claw/model/param.h"

namespace claw::model {

class HfNames {
 public:
  explicit HfNames(const ModelConfig& cfg);
  bool gpt2() const { return gpt2_; }
  bool phi3() const { return phi3_; }  // fused qkv_proj and gate_up_proj
  // Whether an MoE model's experts carry Mixtral's names (block_sparse_moe,
  // w1/w3/w2: the class hf_config writes for it) rather than Qwen3-MoE's and
  // DeepSeek-V3's (mlp.experts.N.gate_proj/up_proj/down_proj).
  bool mixtral_experts() const;

  HfRef word_embeddings() const;
  HfRef position_embeddings() const;
  HfRef output_layer() const;  // untied LM head
  HfRef final_norm(bool bias) const;
  HfRef input_norm(int layer, bool bias) const;
  HfRef post_attention_norm(int layer, bool bias) const;  // the MLP's input norm
  // --post-sublayer-norm's norm on the output of "attention" or "mlp".
  HfRef output_norm(int layer, const std::string& which) const;
  // which: 'q', 'k', 'v' (parts of GPT-2's c_attn) or 'o'.
  HfRef attention(int layer, char which, bool bias) const;
  // --qk-layernorm's weights: which 'q' or 'k' (q_norm, k_norm).
  HfRef qk_norm(int layer, char which) const;
  // Multi-head latent attention's weights (DeepSeek-V3's self_attn modules):
  // which: q_proj, q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa,
  // kv_a_layernorm, kv_b_proj.
  HfRef mla(int layer, const std::string& which) const;
  // which: "fc", "proj" (GELU MLP) or "gate", "up", "down" (SwiGLU).
  HfRef mlp(int layer, const std::string& which, bool bias) const;
  // MixtralForCausalLM's sparse MoE block: which: "router", or "gate", "up",
  // "down" (the stacked experts' w1, w3, w2); Qwen3MoeForCausalLM's mlp.gate
  // and mlp.experts.{e}.gate_proj, up_proj, down_proj.
  HfRef moe(int layer, const std::string& which) const;

 private:
  const ModelConfig& cfg_;
  bool gpt2_, phi3_;
};

}  // namespace claw::model
