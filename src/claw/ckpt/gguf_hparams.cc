// gguf_arch.h's hyperparameters: a model's configuration as llama.cpp's
// {arch}.* keys, and back to the transformers config.json they describe.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include <fmt/format.h>

#include "claw/ckpt/gguf_arch.h"
#include "claw/core/error.h"

namespace claw::ckpt::gguf_arch {
namespace {

void write_rope_scaling(gguf::Writer& w, const std::string& arch, const model::ModelConfig& c,
                        std::vector<std::string>& notes) {
  const model::RopeScaling& s = c.rope_scaling;
  const auto key = [&](const char* k) { return arch + "." + k; };
  if (!s.enabled()) return;
  if (s.type == "llama3")
    fail("GGUF export with --rope-scaling-type llama3 is not available yet (llama.cpp's rope_freqs.weight is not "
         "written)");
  if (s.longrope()) {
    if (arch != "phi3") fail("--rope-scaling-type longrope: llama.cpp runs LongRoPE in its phi3 architecture only");
    w.add_u32(key("rope.scaling.original_context_length"), static_cast<uint32_t>(s.original_max_position_embeddings));
    w.add_f32(key("rope.scaling.attn_factor"), static_cast<float>(s.table_scale()));
    for (const auto& [name, f] : {std::pair{"rope_factors_long.weight", &s.long_factor},
                                  std::pair{"rope_factors_short.weight", &s.short_factor}}) {
      std::vector<uint8_t> bytes(f->size() * sizeof(float));
      for (size_t i = 0; i < f->size(); ++i) {
        const float x = static_cast<float>((*f)[i]);
        std::memcpy(bytes.data() + i * sizeof(float), &x, sizeof x);
      }
      w.add_tensor(name, {static_cast<int64_t>(f->size())}, gguf::GgmlType::f32, std::move(bytes));
    }
    notes.push_back(fmt::format(
        "llama.cpp chooses LongRoPE's long or short factors once per context (long when it is longer than {}), where "
        "the model switches when a sequence grows past it",
        s.original_max_position_embeddings));
    return;
  }
  w.add_string(key("rope.scaling.type"), s.type);
  w.add_f32(key("rope.scaling.factor"), static_cast<float>(s.factor));
  if (s.type != "yarn") return;
  w.add_u32(key("rope.scaling.original_context_length"), static_cast<uint32_t>(s.original_max_position_embeddings));
  if (s.beta_fast != 32 || s.beta_slow != 1)
    notes.push_back(fmt::format("llama.cpp's YaRN ramps between betas 32 and 1; this model's are {} and {}",
                                s.beta_fast, s.beta_slow));
  if (arch == "deepseek2") {
    w.add_f32(key("rope.scaling.yarn_log_multiplier"), static_cast<float>(0.1 * s.mscale_all_dim));
    if (s.mscale != s.mscale_all_dim)
      notes.push_back(fmt::format(
          "llama.cpp's deepseek2 takes YaRN's mscale as mscale_all_dim ({}); this model's is {}", s.mscale_all_dim,
          s.mscale));
  } else if (s.attention_factor > 0) {
    notes.push_back(fmt::format("llama.cpp derives YaRN's attention factor (0.1 ln factor + 1); this model sets {}",
                                s.attention_factor));
  }
}

void write_experts(gguf::Writer& w, const std::string& arch, const model::ModelConfig& c) {
  const model::MoeConfig& m = c.moe;
  const auto key = [&](const char* k) { return arch + "." + k; };
  if (!m.enabled()) return;
  w.add_u32(key("expert_count"), static_cast<uint32_t>(m.num_experts));
  w.add_u32(key("expert_used_count"), static_cast<uint32_t>(m.router_topk));
  if (arch == "llama") return;  // Mixtral: every layer, experts as wide as --ffn-hidden-size
  w.add_u32(key("expert_feed_forward_length"), static_cast<uint32_t>(c.moe_ffn()));
  if (arch == "qwen3moe") {
    if (m.num_moe_layers(c.num_layers) != c.num_layers)
      fail("--moe-layer-freq {}: llama.cpp's qwen3moe has experts in every layer; this model has dense ones",
           m.layer_freq);
    if (m.shared_expert_intermediate_size > 0)
      fail("--moe-shared-expert-intermediate-size: llama.cpp's qwen3moe has no shared experts");
    return;
  }
  // deepseek2: layers before leading_dense_block_count dense, the rest MoE.
  int64_t dense = 0;
  while (dense < c.num_layers && !m.is_moe_layer(dense, c.num_layers)) ++dense;
  for (int64_t l = dense; l < c.num_layers; ++l)
    if (!m.is_moe_layer(l, c.num_layers))
      fail("--moe-layer-freq {}: llama.cpp's deepseek2 has dense layers first and experts after; layer {} breaks that",
           m.layer_freq, l);
  w.add_u32(key("leading_dense_block_count"), static_cast<uint32_t>(dense));
  w.add_u32(key("expert_shared_count"), static_cast<uint32_t>(m.shared_expert_intermediate_size / c.moe_ffn()));
  w.add_f32(key("expert_weights_scale"), static_cast<float>(m.router_topk_scaling_factor));
  w.add_bool(key("expert_weights_norm"), true);
  w.add_u32(key("expert_gating_func"), m.router_score_function == "sigmoid" ? 2 : 1);
  if (m.router_num_groups > 1 && m.router_group_topk < m.router_num_groups) {
    w.add_u32(key("expert_group_count"), static_cast<uint32_t>(m.router_num_groups));
    w.add_u32(key("expert_group_used_count"), static_cast<uint32_t>(m.router_group_topk));
  }
}

// Which layers attend over a window, as llama.cpp's per-layer pattern.
void write_window(gguf::Writer& w, const std::string& arch, const model::ModelConfig& c,
                  std::vector<std::string>& notes) {
  const auto key = [&](const char* k) { return arch + "." + k; };
  if (arch == "gemma2" || arch == "gemma3") {
    if (c.window_size == 0) {
      if (arch == "gemma2") fail("llama.cpp's gemma2 alternates windowed and global layers; this model has no window");
      return;
    }
    w.add_u32(key("attention.sliding_window"), static_cast<uint32_t>(c.window_size));
    std::vector<bool> windowed;
    for (int64_t l = 0; l < c.num_layers; ++l) windowed.push_back(c.layer_window(l) > 0);
    w.add_bools(key("attention.sliding_window_pattern"), windowed);
    return;
  }
  if (c.window_size == 0) return;
  if (arch != "llama" && arch != "phi3")
    fail("--window-size {}: claw writes sliding windows for llama.cpp's llama, phi3, gemma2 and gemma3", c.window_size);
  w.add_u32(key("attention.sliding_window"), static_cast<uint32_t>(c.window_size));
  notes.push_back(fmt::format("llama.cpp's {} attends over every key: it ignores the window of {} (the same tokens "
                              "only while a sequence fits in it)",
                              arch, c.window_size));
}

}  // namespace

std::vector<std::string> write_hparams(gguf::Writer& w, const std::string& arch, const model::ModelConfig& c) {
  std::vector<std::string> notes;
  const auto key = [&](const char* k) { return arch + "." + k; };
  const auto u32 = [&](const char* k, int64_t v) { w.add_u32(key(k), static_cast<uint32_t>(v)); };
  u32("vocab_size", c.vocab_size);
  u32("context_length", c.max_position_embeddings);
  u32("embedding_length", c.hidden_size);
  u32("feed_forward_length", c.ffn());
  u32("block_count", c.num_layers);
  u32("attention.head_count", c.num_attention_heads);
  if (arch == "gpt2") {
    w.add_f32(key("attention.layer_norm_epsilon"), static_cast<float>(c.norm_epsilon));
    return notes;
  }
  if (arch == "deepseek2") {
    // The absorbed form's one latent head: keys [latent | rotated], values the latent.
    const model::MlaConfig& a = c.mla;
    if (!c.rotary_interleaved)
      fail("llama.cpp's deepseek2 rotates adjacent pairs (rope_interleave true); this model has no "
           "--rotary-interleaved");
    u32("attention.head_count_kv", 1);
    u32("attention.key_length", a.kv_lora_rank + a.qk_pos_emb_head_dim);
    u32("attention.value_length", a.kv_lora_rank);
    u32("attention.key_length_mla", a.qk_head_dim + a.qk_pos_emb_head_dim);
    u32("attention.value_length_mla", a.v_head_dim);
    u32("attention.q_lora_rank", a.q_lora_rank);
    u32("attention.kv_lora_rank", a.kv_lora_rank);
    if (c.norm_epsilon != 1e-6)
      notes.push_back(fmt::format("llama.cpp's deepseek2 normalises the latents with the model's epsilon ({}); "
                                  "DeepSeek's latent norms use 1e-6",
                                  c.norm_epsilon));
  } else {
    u32("attention.head_count_kv", c.kv_heads());
    u32("attention.key_length", c.head_dim());
    u32("attention.value_length", c.head_dim());
  }
  u32("rope.dimension_count", c.rotary_dim());
  w.add_f32(key("rope.freq_base"), static_cast<float>(c.rotary_base));
  w.add_f32(key("attention.layer_norm_rms_epsilon"), static_cast<float>(c.norm_epsilon));
  write_rope_scaling(w, arch, c, notes);
  write_experts(w, arch, c);
  write_window(w, arch, c, notes);
  if (arch == "phi3" && !c.rope_scaling.longrope())
    u32("rope.scaling.original_context_length", c.max_position_embeddings);
  if (arch == "gemma3")
    w.add_f32(key("rope.freq_base_swa"),
              static_cast<float>(c.local_rotary_base > 0 ? c.local_rotary_base : c.rotary_base));
  if (arch == "gemma2") {
    if (c.attn_logit_softcapping == 0 || c.final_logit_softcapping == 0)
      fail("llama.cpp's gemma2 always soft-caps scores and logits (50 and 30 when a file has no caps); this model has "
           "--attn-logit-softcapping {} and --final-logit-softcapping {}",
           c.attn_logit_softcapping, c.final_logit_softcapping);
    w.add_f32(key("attn_logit_softcapping"), static_cast<float>(c.attn_logit_softcapping));
    w.add_f32(key("final_logit_softcapping"), static_cast<float>(c.final_logit_softcapping));
  } else if (c.attn_logit_softcapping > 0 || (c.final_logit_softcapping > 0 && arch != "gemma3")) {
    fail("llama.cpp's {} has no soft-caps; this model has --attn-logit-softcapping {} / --final-logit-softcapping {}",
         arch, c.attn_logit_softcapping, c.final_logit_softcapping);
  } else if (c.final_logit_softcapping > 0) {
    w.add_f32(key("final_logit_softcapping"), static_cast<float>(c.final_logit_softcapping));
  }
  return notes;
}

namespace {

// Metadata access with errors that name the file and key.
struct Keys {
  const nlohmann::json& md;
  const std::string& path;
  const std::string& arch;
  std::string key(const char* k) const { return arch + "." + k; }
  bool has(const char* k) const { return md.contains(key(k)); }
  nlohmann::json num(const char* k) const {
    if (!has(k) || !md[key(k)].is_number()) fail("{}: metadata {} is missing or not a number", path, key(k));
    return md[key(k)];
  }
  // GGUF keeps reals as f32: the shortest decimal that reads back as that
  // f32 is the value the writer meant (1e-5, not 9.99999974738e-06).
  double real(const char* k) const { return std::stod(fmt::format("{}", num(k).get<float>())); }
  nlohmann::json num_or(const char* k, nlohmann::json fallback) const { return has(k) ? num(k) : fallback; }
};

std::vector<double> factors_of(const gguf::Reader& r, const std::string& name) {
  const gguf::TensorInfo* t = r.find(name);
  if (!t) fail("{}: LongRoPE needs both rope_factors_long.weight and rope_factors_short.weight; {} is missing",
               r.path(), name);
  std::vector<double> f;
  for (float x : r.read_f32(*t)) f.push_back(std::stod(fmt::format("{}", x)));
  return f;
}

void rope_scaling_of(const Keys& k, const gguf::Reader& r, nlohmann::json& config) {
  if (k.arch == "phi3") {
    const int64_t orig = k.num_or("rope.scaling.original_context_length", k.num("context_length")).get<int64_t>();
    config["original_max_position_embeddings"] = orig;
    if (r.find("rope_factors_long.weight") || r.find("rope_factors_short.weight"))
      config["rope_scaling"] = {{"type", "longrope"},
                                {"long_factor", factors_of(r, "rope_factors_long.weight")},
                                {"short_factor", factors_of(r, "rope_factors_short.weight")}};
    return;
  }
  if (r.find("rope_freqs.weight"))
    fail("{}: rope_freqs.weight (Llama 3.1's RoPE scaling) is not supported yet", k.path);
  if (!k.md.contains(k.key("rope.scaling.type"))) return;
  const std::string type = k.md[k.key("rope.scaling.type")].get<std::string>();
  const double factor = k.has("rope.scaling.factor") ? k.real("rope.scaling.factor") : 1.0;
  if (type == "none" || factor == 0 || (type == "linear" && factor == 1)) return;
  if (type != "linear" && type != "yarn")
    fail("{}: {} '{}' is not supported (claw reads linear and yarn)", k.path, k.key("rope.scaling.type"), type);
  nlohmann::json s = {{"rope_type", type}, {"factor", factor}};
  if (type == "yarn") {
    s["original_max_position_embeddings"] = k.num("rope.scaling.original_context_length");
    if (k.arch == "deepseek2" && k.has("rope.scaling.yarn_log_multiplier")) {
      const double m = std::stod(fmt::format("{}", k.real("rope.scaling.yarn_log_multiplier") / 0.1));
      s["mscale"] = s["mscale_all_dim"] = m;
    }
  }
  config["rope_scaling"] = s;
}

// Gemma's options: soft-caps, the window pattern, the query scale llama.cpp uses.
void gemma_of(const Keys& k, nlohmann::json& config) {
  const bool v3 = k.arch == "gemma3";
  const int64_t layers = config["num_hidden_layers"], hidden = config["hidden_size"];
  const int64_t heads = config["num_attention_heads"], head_dim = config["head_dim"];
  config["query_pre_attn_scalar"] = gemma_query_scalar(k.arch, layers, hidden, heads, head_dim);
  config["sliding_window"] = k.has("attention.sliding_window") ? k.num("attention.sliding_window")
                                                               : nlohmann::json(v3 ? nullptr : nlohmann::json(4096));
  // Gemma 2's caps when a file has none: llama.cpp's defaults (50, 30).
  for (const auto& [cap, fallback] : {std::pair{"attn_logit_softcapping", 50.0}, {"final_logit_softcapping", 30.0}})
    config[cap] = k.has(cap) ? nlohmann::json(k.real(cap)) : v3 ? nlohmann::json(nullptr) : nlohmann::json(fallback);
  if (v3) {
    config["attn_logit_softcapping"] = nullptr;
    config["rope_local_base_freq"] = k.has("rope.freq_base_swa") ? k.real("rope.freq_base_swa") : 10000.0;
  }
  // Windowed layers: the pattern's flags, a period n (all but every n-th),
  // or the architecture's own period (2, 6).
  std::vector<bool> windowed;
  const std::string pk = k.key("attention.sliding_window_pattern");
  for (int64_t l = 0; l < layers; ++l) {
    bool on;
    if (k.md.contains(pk) && k.md[pk].is_array()) {
      if (static_cast<int64_t>(k.md[pk].size()) != layers)
        fail("{}: {} has {} entries for {} layers", k.path, pk, k.md[pk].size(), layers);
      on = k.md[pk][l].is_boolean() ? k.md[pk][l].get<bool>() : k.md[pk][l].get<int64_t>() != 0;
    } else {
      const int64_t n = k.md.contains(pk) ? k.md[pk].get<int64_t>() : (v3 ? 6 : 2);
      on = n > 0 && l % n < n - 1;
    }
    windowed.push_back(on);
  }
  if (!v3) {
    for (int64_t l = 0; l < layers; ++l)
      if (windowed[l] != (l % 2 == 0))
        fail("{}: {}: Gemma 2 windows the even layers; this file's pattern differs at layer {}", k.path, pk, l);
    return;
  }
  nlohmann::json types = nlohmann::json::array();
  for (bool on : windowed) types.push_back(on ? "sliding_attention" : "full_attention");
  config["layer_types"] = types;
}

void deepseek_of(const Keys& k, const gguf::Reader& r, nlohmann::json& config) {
  const int64_t rope = k.num("rope.dimension_count");
  const int64_t heads = config["num_attention_heads"];
  config["num_key_value_heads"] = heads;
  config["q_lora_rank"] = k.num_or("attention.q_lora_rank", 0).get<int64_t>() > 0 ? k.num("attention.q_lora_rank")
                                                                                 : nlohmann::json(nullptr);
  config["kv_lora_rank"] = k.num("attention.kv_lora_rank");
  if (k.has("attention.key_length_mla")) {
    config["qk_nope_head_dim"] = k.num("attention.key_length_mla").get<int64_t>() - rope;
    config["v_head_dim"] = k.num("attention.value_length_mla");
  } else {  // the older files: attn_kv_b whole, the expanded heads' sizes
    config["qk_nope_head_dim"] = k.num("attention.key_length").get<int64_t>() - rope;
    config["v_head_dim"] = k.num("attention.value_length");
  }
  config["qk_rope_head_dim"] = rope;
  config["rope_interleave"] = true;
  const int64_t layers = config["num_hidden_layers"];
  config["first_k_dense_replace"] = k.num_or("leading_dense_block_count", 0);
  if (k.num_or("expert_count", 0).get<int64_t>() > 0 && config["first_k_dense_replace"].get<int64_t>() < layers) {
    config["n_routed_experts"] = k.num("expert_count");
    config["num_experts_per_tok"] = k.num("expert_used_count");
    config["moe_intermediate_size"] = k.num("expert_feed_forward_length");
    config["n_shared_experts"] = k.num_or("expert_shared_count", 0);
    config["routed_scaling_factor"] = k.has("expert_weights_scale") ? k.real("expert_weights_scale") : 1.0;
    config["n_group"] = k.num_or("expert_group_count", 1);
    config["topk_group"] = k.num_or("expert_group_used_count", 1);
    const std::string norm = k.key("expert_weights_norm");
    config["norm_topk_prob"] = k.md.contains(norm) && k.md[norm].get<bool>();
    const int64_t gating = k.num_or("expert_gating_func", 1);
    if (gating != 2)
      fail("{}: {} {}: claw's DeepSeek router scores with a sigmoid (2)", k.path, k.key("expert_gating_func"), gating);
    if (!r.find("blk." + config["first_k_dense_replace"].dump() + ".exp_probs_b.bias"))
      fail("{}: no exp_probs_b.bias in the MoE layers: claw's sigmoid router has the expert bias", k.path);
  }
}

}  // namespace

nlohmann::json hf_config_of(const gguf::Reader& r, const std::string& path, const std::string& arch) {
  const Keys k{r.metadata(), path, arch};
  const gguf::TensorInfo* embd = r.find("token_embd.weight");
  if (!embd || embd->ne.size() != 2) fail("{}: no 2-D tensor token_embd.weight", path);
  const int64_t vocab = embd->ne[1];
  const gguf::TensorInfo* out = r.find("output.weight");
  bool tied = out == nullptr;
  if (out && output_rule(arch) == Output::always)  // a copy of the embeddings when tied
    tied = out->type == embd->type && out->ne == embd->ne && r.read(*out) == r.read(*embd);
  if (arch == "gpt2")
    return {{"model_type", "gpt2"},
            {"n_layer", k.num("block_count")},
            {"n_embd", k.num("embedding_length")},
            {"n_head", k.num("attention.head_count")},
            {"n_inner", k.num("feed_forward_length")},
            {"vocab_size", vocab},
            {"n_positions", k.num("context_length")},
            {"layer_norm_epsilon", k.real("attention.layer_norm_epsilon")},
            {"tie_word_embeddings", tied}};
  static const std::map<std::string, std::string> types = {
      {"llama", "llama"},   {"qwen2", "qwen2"},   {"qwen3", "qwen3"},      {"qwen3moe", "qwen3_moe"}, {"phi3", "phi3"},
      {"gemma2", "gemma2"}, {"gemma3", "gemma3_text"}, {"olmo2", "olmo2"}, {"deepseek2", "deepseek_v3"}};
  const int64_t heads = k.num("attention.head_count").get<int64_t>();
  const int64_t C = k.num("embedding_length").get<int64_t>();
  nlohmann::json config = {
      {"model_type", types.at(arch)},
      {"num_hidden_layers", k.num("block_count")},
      {"hidden_size", C},
      {"num_attention_heads", heads},
      {"num_key_value_heads", k.num_or("attention.head_count_kv", heads)},
      {"head_dim", k.num_or("attention.key_length", C / heads)},
      {"intermediate_size", k.num("feed_forward_length")},
      {"vocab_size", vocab},
      {"max_position_embeddings", k.num("context_length")},
      {"rms_norm_eps", k.real("attention.layer_norm_rms_epsilon")},
      {"rope_theta", k.has("rope.freq_base") ? k.real("rope.freq_base") : 10000.0},
      {"tie_word_embeddings", tied}};
  rope_scaling_of(k, r, config);
  const int64_t experts = k.num_or("expert_count", 0).get<int64_t>();
  if (arch == "llama") {
    config["attention_bias"] = r.find("blk.0.attn_q.bias") != nullptr;
    if (experts > 0) {
      config["model_type"] = "mixtral";
      config["num_local_experts"] = experts;
      config["num_experts_per_tok"] = k.num("expert_used_count");
    }
    if (k.has("attention.sliding_window") && k.num("attention.sliding_window").get<int64_t>() > 0) {
      if (experts == 0) config["model_type"] = "mistral";
      config["sliding_window"] = k.num("attention.sliding_window");
    }
  } else if (arch == "qwen3moe") {
    config["num_experts"] = experts;
    config["num_experts_per_tok"] = k.num("expert_used_count");
    config["moe_intermediate_size"] = k.num("expert_feed_forward_length");
    config["norm_topk_prob"] = true;
  } else if (arch == "phi3") {
    const int64_t head_dim = config["head_dim"];
    config.erase("head_dim");
    config["partial_rotary_factor"] = static_cast<double>(k.num_or("rope.dimension_count", head_dim).get<int64_t>()) /
                                      static_cast<double>(head_dim);
    const int64_t window = k.num_or("attention.sliding_window", 0).get<int64_t>();
    config["sliding_window"] = window > 0 ? nlohmann::json(window) : nlohmann::json(nullptr);
  } else if (arch == "gemma2" || arch == "gemma3") {
    gemma_of(k, config);
  } else if (arch == "deepseek2") {
    deepseek_of(k, r, config);
  }
  if (arch == "qwen2" || arch == "olmo2" || arch == "deepseek2") config.erase("head_dim");
  return config;
}

}  // namespace claw::ckpt::gguf_arch
