#include "claw/ckpt/gguf_arch.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "claw/core/error.h"

namespace claw::ckpt::gguf_arch {

const std::vector<std::string>& architectures() {
  static const std::vector<std::string> a = {"gpt2",   "llama",  "qwen2", "qwen3", "qwen3moe",
                                             "phi3",   "gemma2", "gemma3", "olmo2", "deepseek2"};
  return a;
}

std::string architecture_of(const nlohmann::json& hf_config) {
  static const std::map<std::string, std::string> by_type = {
      {"gpt2", "gpt2"},       {"llama", "llama"},          {"mistral", "llama"},   {"mixtral", "llama"},
      {"qwen2", "qwen2"},     {"qwen3", "qwen3"},          {"qwen3_moe", "qwen3moe"}, {"phi3", "phi3"},
      {"gemma2", "gemma2"},   {"gemma3_text", "gemma3"},   {"olmo2", "olmo2"},     {"deepseek_v3", "deepseek2"}};
  const std::string type = hf_config.at("model_type").get<std::string>();
  auto it = by_type.find(type);
  if (it == by_type.end())
    fail("GGUF export of {} models is not available (export --format hf gives {})", type,
         hf_config["architectures"][0].get<std::string>());
  return it->second;
}

Output output_rule(const std::string& arch) {
  if (arch == "gpt2" || arch == "olmo2") return Output::always;
  if (arch == "gemma2") return Output::never;
  return Output::when_untied;
}

bool is_config_tensor(const std::string& name) {
  return name == "rope_factors_long.weight" || name == "rope_factors_short.weight";
}

namespace {

bool is_gemma(const std::string& arch) { return arch == "gemma2" || arch == "gemma3"; }

}  // namespace

double gemma_query_scalar(const std::string& arch, int64_t layers, int64_t hidden, int64_t heads, int64_t head_dim) {
  const bool big = (arch == "gemma2" && layers == 46) || (arch == "gemma3" && layers == 62);
  return big ? static_cast<double>(hidden / heads) : static_cast<double>(head_dim);
}

namespace {

void gpt2_table(const model::ModelConfig& c, std::vector<Entry>& t) {
  const auto one = [&](std::string hf, std::string g, bool linear = false) {
    t.push_back({.gguf = std::move(g), .hf = {std::move(hf)}, .transpose = linear, .linear = linear});
  };
  one("transformer.wte.weight", "token_embd.weight");
  t.push_back({.gguf = "position_embd.weight", .hf = {"transformer.wpe.weight"}});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string h = fmt::format("transformer.h.{}.", i), g = fmt::format("blk.{}.", i);
    for (const char* wb : {"weight", "bias"}) {
      const bool w = std::string_view(wb) == "weight";
      one(h + "ln_1." + wb, g + "attn_norm." + wb);
      one(h + "attn.c_attn." + wb, g + "attn_qkv." + wb, w);
      one(h + "attn.c_proj." + wb, g + "attn_output." + wb, w);
      one(h + "ln_2." + wb, g + "ffn_norm." + wb);
      one(h + "mlp.c_fc." + wb, g + "ffn_up." + wb, w);
      one(h + "mlp.c_proj." + wb, g + "ffn_down." + wb, w);
    }
  }
  one("transformer.ln_f.weight", "output_norm.weight");
  one("transformer.ln_f.bias", "output_norm.bias");
}

// One layer of the Llama-style architectures.
void layer_table(const std::string& arch, const model::ModelConfig& c, int64_t l, std::vector<Entry>& t) {
  const std::string h = fmt::format("model.layers.{}.", l), g = fmt::format("blk.{}.", l);
  const auto one = [&](const std::string& hf, const std::string& gg, bool linear = false, int64_t permute = 0) {
    t.push_back({.gguf = g + gg, .hf = {h + hf}, .permute_heads = permute, .linear = linear});
  };
  // Norms.
  if (arch == "olmo2") {
    one("post_attention_layernorm.weight", "post_attention_norm.weight");
    one("post_feedforward_layernorm.weight", "post_ffw_norm.weight");
  } else if (is_gemma(arch)) {
    one("input_layernorm.weight", "attn_norm.weight");
    one("post_attention_layernorm.weight", "post_attention_norm.weight");
    one("pre_feedforward_layernorm.weight", "ffn_norm.weight");
    one("post_feedforward_layernorm.weight", "post_ffw_norm.weight");
  } else {
    one("input_layernorm.weight", "attn_norm.weight");
    one("post_attention_layernorm.weight", "ffn_norm.weight");
  }
  // Attention.
  const std::string a = "self_attn.";
  if (arch == "deepseek2") {
    one(a + "q_a_proj.weight", "attn_q_a.weight", true);
    one(a + "q_a_layernorm.weight", "attn_q_a_norm.weight");
    one(a + "q_b_proj.weight", "attn_q_b.weight", true);
    one(a + "q_proj.weight", "attn_q.weight", true);
    one(a + "kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight", true);
    one(a + "kv_a_layernorm.weight", "attn_kv_a_norm.weight");
    const Entry kv{.hf = {h + a + "kv_b_proj.weight"}, .heads = c.num_attention_heads, .nope = c.mla.qk_head_dim,
                   .value = c.mla.v_head_dim};
    t.push_back(kv);
    t.back().gguf = g + "attn_k_b.weight";
    t.back().part = Entry::Part::kv_b_keys;
    t.push_back(kv);
    t.back().gguf = g + "attn_v_b.weight";
    t.back().part = Entry::Part::kv_b_values;
    t.push_back({.gguf = g + "attn_kv_b.weight", .hf = kv.hf, .linear = true, .legacy = true});
  } else if (arch == "phi3") {
    one(a + "qkv_proj.weight", "attn_qkv.weight", true);
  } else {
    const bool llama = arch == "llama";  // NORM RoPE: adjacent pairs
    for (const char* wb : {"weight", "bias"}) {
      const bool w = std::string_view(wb) == "weight";
      one(a + "q_proj." + wb, std::string("attn_q.") + wb, w, llama ? c.num_attention_heads : 0);
      one(a + "k_proj." + wb, std::string("attn_k.") + wb, w, llama ? c.kv_heads() : 0);
      one(a + "v_proj." + wb, std::string("attn_v.") + wb, w);
    }
  }
  one(a + "o_proj.weight", "attn_output.weight", true);
  one(a + "o_proj.bias", "attn_output.bias");
  one(a + "q_norm.weight", "attn_q_norm.weight");
  one(a + "k_norm.weight", "attn_k_norm.weight");
  // MLP: dense, or a router and stacked experts (and shared ones).
  if (arch == "phi3") {
    one("mlp.gate_up_proj.weight", "ffn_up.weight", true);  // gate rows first, as llama.cpp's phi3 splits it
    one("mlp.down_proj.weight", "ffn_down.weight", true);
    return;
  }
  const bool mixtral = arch == "llama";
  const std::string m = mixtral ? "block_sparse_moe." : "mlp.";
  for (const auto& [hf, gg] : {std::pair{"gate_proj", "ffn_gate"}, {"up_proj", "ffn_up"}, {"down_proj", "ffn_down"}}) {
    one(std::string("mlp.") + hf + ".weight", std::string(gg) + ".weight", true);
    one(std::string("mlp.") + hf + ".bias", std::string(gg) + ".bias");
    one(std::string("mlp.shared_experts.") + hf + ".weight", std::string(gg) + "_shexp.weight", true);
  }
  if (!c.moe.enabled()) return;
  one(m + "gate.weight", "ffn_gate_inp.weight");
  one(m + "gate.e_score_correction_bias", "exp_probs_b.bias");
  const std::pair<const char*, const char*> experts[] = {
      {mixtral ? "w1" : "gate_proj", "ffn_gate_exps"}, {mixtral ? "w3" : "up_proj", "ffn_up_exps"},
      {mixtral ? "w2" : "down_proj", "ffn_down_exps"}};
  for (const auto& [hf, gg] : experts) {
    Entry e{.gguf = g + gg + ".weight", .stacked = true, .linear = true};
    for (int64_t x = 0; x < c.moe.num_experts; ++x)
      e.hf.push_back(fmt::format("{}{}experts.{}.{}.weight", h, m, x, hf));
    t.push_back(std::move(e));
  }
}

}  // namespace

double folded_query_scale(const std::string& arch, const model::ModelConfig& c) {
  if (!is_gemma(arch)) return 1.0;
  const double theirs =
      1.0 / std::sqrt(gemma_query_scalar(arch, c.num_layers, c.hidden_size, c.num_attention_heads, c.head_dim()));
  return c.attention_scale() / theirs;
}

std::vector<Entry> tensor_table(const std::string& arch, const model::ModelConfig& c) {
  std::vector<Entry> t;
  if (arch == "gpt2") {
    gpt2_table(c, t);
  } else {
    t.push_back({.gguf = "token_embd.weight", .hf = {"model.embed_tokens.weight"}});
    for (int64_t l = 0; l < c.num_layers; ++l) layer_table(arch, c, l, t);
    t.push_back({.gguf = "output_norm.weight", .hf = {"model.norm.weight"}});
  }
  t.push_back({.gguf = "output.weight", .hf = {"lm_head.weight"}, .linear = true});
  if (is_gemma(arch)) {
    // llama.cpp's RMSNorm scales by w: Gemma's 1 + w. Its queries are
    // scaled by its own rule; claw's scale is folded into the queries (or,
    // before Gemma 3's q norm would undo that, into the norm).
    const float q = static_cast<float>(folded_query_scale(arch, c));
    for (Entry& e : t) {
      if (e.gguf.ends_with("norm.weight")) e.add = 1;
      const bool queries =
          arch == "gemma2" ? e.gguf.ends_with("attn_q.weight") : e.gguf.ends_with("attn_q_norm.weight");
      if (queries) e.mul = q;
    }
  }
  return t;
}

}  // namespace claw::ckpt::gguf_arch
