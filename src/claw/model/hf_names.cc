#include "claw/model/hf_names.h"

#include <fmt/format.h>

namespace claw::model {

HfNames::HfNames(const ModelConfig& cfg)
    : cfg_(cfg),
      gpt2_(cfg.position_embedding_type == Position::learned && cfg.normalization == Norm::layernorm &&
            cfg.mlp == Mlp::gelu),
      phi3_(cfg.hf_architecture == "Phi3ForCausalLM") {}

namespace {
std::string suffix(bool bias) { return bias ? "bias" : "weight"; }
}  // namespace

HfRef HfNames::word_embeddings() const {
  HfRef r{gpt2_ ? "transformer.wte.weight" : "model.embed_tokens.weight"};
  r.rows = cfg_.vocab_size;
  return r;
}

HfRef HfNames::position_embeddings() const { return {"transformer.wpe.weight"}; }

HfRef HfNames::output_layer() const {
  HfRef r{"lm_head.weight"};
  r.rows = cfg_.vocab_size;
  return r;
}

HfRef HfNames::final_norm(bool bias) const {
  return {gpt2_ ? "transformer.ln_f." + suffix(bias) : "model.norm." + suffix(bias)};
}

HfRef HfNames::input_norm(int l, bool bias) const {
  return {gpt2_ ? fmt::format("transformer.h.{}.ln_1.{}", l, suffix(bias))
                : fmt::format("model.layers.{}.input_layernorm.{}", l, suffix(bias))};
}

HfRef HfNames::post_attention_norm(int l, bool bias) const {
  if (gpt2_) return {fmt::format("transformer.h.{}.ln_2.{}", l, suffix(bias))};
  // With norms on the sublayers' outputs too (Gemma 2/3), the MLP's input
  // norm is pre_feedforward_layernorm and post_attention_layernorm the
  // attention output's.
  return {fmt::format(fmt::runtime(cfg_.post_sublayer_norm ? "model.layers.{}.pre_feedforward_layernorm.{}"
                                                           : "model.layers.{}.post_attention_layernorm.{}"),
                      l, suffix(bias))};
}

HfRef HfNames::output_norm(int l, const std::string& which) const {
  return {fmt::format("model.layers.{}.{}.weight", l,
                      which == "attention" ? "post_attention_layernorm" : "post_feedforward_layernorm")};
}

HfRef HfNames::attention(int l, char which, bool bias) const {
  if (phi3_ && which != 'o') {  // qkv_proj: rows [q (H D) | k (G D) | v (G D)]
    const int64_t q = cfg_.num_attention_heads * cfg_.head_dim(), kv = cfg_.kv_heads() * cfg_.head_dim();
    HfRef r{fmt::format("model.layers.{}.self_attn.qkv_proj.{}", l, suffix(bias))};
    r.slice_dim = 0;
    r.begin = which == 'q' ? 0 : which == 'k' ? q : q + kv;
    r.end = which == 'q' ? q : which == 'k' ? q + kv : q + 2 * kv;
    return r;
  }
  if (!gpt2_) return {fmt::format("model.layers.{}.self_attn.{}_proj.{}", l, which, suffix(bias))};
  if (which == 'o') return {fmt::format("transformer.h.{}.attn.c_proj.{}", l, suffix(bias)), !bias};
  // c_attn packs [q | k | v] along its output dimension (dim 1 of the Conv1D
  // weight, dim 0 of the bias).
  const int64_t C = cfg_.hidden_size;
  int64_t part = which == 'q' ? 0 : which == 'k' ? 1 : 2;
  HfRef r{fmt::format("transformer.h.{}.attn.c_attn.{}", l, suffix(bias)), !bias};
  r.slice_dim = bias ? 0 : 1;
  r.begin = part * C;
  r.end = (part + 1) * C;
  return r;
}

HfRef HfNames::qk_norm(int l, char which) const {
  return {fmt::format("model.layers.{}.self_attn.{}_norm.weight", l, which)};
}

HfRef HfNames::mla(int l, const std::string& which) const {
  return {fmt::format("model.layers.{}.self_attn.{}.weight", l, which)};
}

HfRef HfNames::mlp(int l, const std::string& which, bool bias) const {
  if (phi3_ && which != "down") {  // gate_up_proj: rows [gate (F) | up (F)]
    const int64_t F = cfg_.ffn();
    HfRef r{fmt::format("model.layers.{}.mlp.gate_up_proj.{}", l, suffix(bias))};
    r.slice_dim = 0;
    r.begin = which == "gate" ? 0 : F;
    r.end = which == "gate" ? F : 2 * F;
    return r;
  }
  if (!gpt2_) return {fmt::format("model.layers.{}.mlp.{}_proj.{}", l, which, suffix(bias))};
  return {fmt::format("transformer.h.{}.mlp.c_{}.{}", l, which, suffix(bias)), !bias};
}

bool HfNames::mixtral_experts() const {
  // hf_config's choice: experts with q/k norms or latent attention are Qwen3-MoE's or DeepSeek-V3's.
  const std::string& a = cfg_.hf_architecture;
  return cfg_.moe.enabled() && a != "Qwen3MoeForCausalLM" && a != "DeepseekV3ForCausalLM" && !cfg_.qk_layernorm &&
         !cfg_.mla.enabled;
}

HfRef HfNames::moe(int l, const std::string& which) const {
  // Qwen3-MoE and DeepSeek-V3: mlp.gate, mlp.experts.{e}.gate_proj/up_proj/down_proj
  // (DeepSeek-V3's expert bias: mlp.gate.e_score_correction_bias).
  if (!mixtral_experts()) {
    const std::string block = fmt::format("model.layers.{}.mlp.", l);
    if (which == "router") return {block + "gate.weight"};
    if (which == "expert_bias") return {block + "gate.e_score_correction_bias"};
    HfRef r{block + "experts.{}." + which + "_proj.weight"};
    r.stack = cfg_.moe.num_experts;
    return r;
  }
  const std::string block = fmt::format("model.layers.{}.block_sparse_moe.", l);
  if (which == "router") return {block + "gate.weight"};
  if (which == "expert_bias") return {};  // Mixtral has none
  HfRef r{block + "experts.{}." + (which == "gate" ? "w1" : which == "up" ? "w3" : "w2") + ".weight"};
  r.stack = cfg_.moe.num_experts;
  return r;
}

}  // namespace claw::model
