// Hugging Face names for claw's parameters (the HfRef of each ParamSpec).
//
// Two families: GPT-2 (GPT2LMHeadModel: fused c_attn, Conv1D weights stored
// [in, out]) and Llama (LlamaForCausalLM: separate q/k/v/o, gate/up/down,
// nn.Linear weights [out, in]). A model with learned positions, LayerNorm and
// GELU is named as GPT-2; anything else as Llama (HF has no architecture for
// other mixtures; an exporter refuses those).
#pragma once

#include <string>

#include "claw/model/config.h"
#include "claw/model/param.h"

namespace claw::model {

class HfNames {
 public:
  explicit HfNames(const ModelConfig& cfg);
  bool gpt2() const { return gpt2_; }

  HfRef word_embeddings() const;
  HfRef position_embeddings() const;
  HfRef output_layer() const;  // untied LM head
  HfRef final_norm(bool bias) const;
  HfRef input_norm(int layer, bool bias) const;
  HfRef post_attention_norm(int layer, bool bias) const;
  // which: 'q', 'k', 'v' (parts of GPT-2's c_attn) or 'o'.
  HfRef attention(int layer, char which, bool bias) const;
  // which: "fc", "proj" (GELU MLP) or "gate", "up", "down" (SwiGLU).
  HfRef mlp(int layer, const std::string& which, bool bias) const;
  // MixtralForCausalLM's sparse MoE block: which: "router", or "gate", "up",
  // "down" (the stacked experts' w1, w3, w2).
  HfRef moe(int layer, const std::string& which) const;

 private:
  const ModelConfig& cfg_;
  bool gpt2_;
};

}  // namespace claw::model
