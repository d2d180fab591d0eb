// config.json both ways: the Hugging Face families' fields to claw's model
// options (model_from_hf_config) and back (hf_config). A field claw cannot
// honour is an error naming it.
#include "claw/ckpt/hf.h"

#include <cmath>
#include <map>
#include <set>

#include <fmt/ranges.h>

#include "claw/core/error.h"
#include "claw/model/hf_names.h"

namespace claw::ckpt {

namespace {
bool is_gpt2(const model::ModelConfig& c) { return model::HfNames(c).gpt2(); }

template <typename T>
T get_or(const nlohmann::json& j, const char* key, T fallback, const std::string& path) {
  return json_field<T>(j, key, fallback, path);
}
template <typename T>
T need(const nlohmann::json& j, const char* key, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) fail("{}: missing field '{}'", path, key);
  return get_or<T>(j, key, T{}, path);
}
// config.json's rope_scaling (null: none).
nlohmann::json hf_rope_scaling(const model::RopeScaling& r) {
  if (!r.enabled()) return nullptr;
  if (r.longrope())  // Phi3ForCausalLM's three fields (its config has the original context and the factor)
    return {{"type", "longrope"}, {"short_factor", r.short_factor}, {"long_factor", r.long_factor}};
  nlohmann::json j = {{"rope_type", r.type}, {"factor", r.factor}};
  if (r.type != "linear") j["original_max_position_embeddings"] = r.original_max_position_embeddings;
  if (r.type == "llama3") {
    j["low_freq_factor"] = r.low_freq_factor;
    j["high_freq_factor"] = r.high_freq_factor;
  }
  if (r.type == "yarn") {  // what differs from transformers' defaults (RopeScaling's)
    const model::RopeScaling defaults;
    if (r.beta_fast != defaults.beta_fast) j["beta_fast"] = r.beta_fast;
    if (r.beta_slow != defaults.beta_slow) j["beta_slow"] = r.beta_slow;
    if (r.attention_factor > 0) j["attention_factor"] = r.attention_factor;
    if (r.mscale > 0) j["mscale"] = r.mscale;
    if (r.mscale_all_dim > 0) j["mscale_all_dim"] = r.mscale_all_dim;
    if (!r.truncate) j["truncate"] = false;
  }
  return j;
}

// rope_scaling of config.json `path` (rope_type, or the older "type").
model::RopeScaling rope_scaling_of(const nlohmann::json& j, const std::string& path) {
  model::RopeScaling r;
  if (!j.contains("rope_scaling") || j["rope_scaling"].is_null()) return r;
  const nlohmann::json& s = j["rope_scaling"];
  const std::string where = path + ": rope_scaling";
  if (!s.is_object()) fail("{} {} is not an object", where, s.dump());
  r.type = s.contains("rope_type") ? need<std::string>(s, "rope_type", where) : need<std::string>(s, "type", where);
  if (r.type == "default") return {};
  if (r.type == "su") r.type = "longrope";  // Phi-3's first name for it
  if (r.type != "linear" && r.type != "llama3" && r.type != "yarn" && r.type != "longrope")
    fail("{} {}: rope_type '{}' is not supported (claw scales RoPE as linear, llama3, yarn and longrope)", where,
         s.dump(), r.type);
  if (r.type == "longrope") {
    // transformers' rule: with a top-level original_max_position_embeddings
    // (Phi-3's) the factor is max_position_embeddings over it; else the
    // original context is max_position_embeddings and the factor rope_scaling's.
    const auto factors = [&](const char* key) {
      if (!s.contains(key) || !s[key].is_array()) fail("{} {}: longrope needs a list '{}'", where, s.dump(), key);
      std::vector<double> f;
      for (const nlohmann::json& x : s[key]) {
        if (!x.is_number()) fail("{}: {} holds {}, not a number", where, key, x.dump());
        f.push_back(x.get<double>());
      }
      return f;
    };
    r.short_factor = factors("short_factor");
    r.long_factor = factors("long_factor");
    const int64_t max_pos = need<int64_t>(j, "max_position_embeddings", path);
    if (j.contains("original_max_position_embeddings") && !j["original_max_position_embeddings"].is_null()) {
      r.original_max_position_embeddings = need<int64_t>(j, "original_max_position_embeddings", path);
      r.factor = static_cast<double>(max_pos) / static_cast<double>(r.original_max_position_embeddings);
    } else {
      r.original_max_position_embeddings = max_pos;
      r.factor = need<double>(s, "factor", where);
    }
    r.attention_factor = get_or<double>(s, "attention_factor", 0.0, where);
    return r;
  }
  r.factor = need<double>(s, "factor", where);
  if (r.type == "yarn") {  // transformers' defaults where a field is absent or null
    const auto number_or = [&](const char* key, double fallback) {
      return s.contains(key) && !s[key].is_null() ? need<double>(s, key, where) : fallback;
    };
    r.original_max_position_embeddings = static_cast<int64_t>(
        number_or("original_max_position_embeddings", static_cast<double>(need<int64_t>(j, "max_position_embeddings", path))));
    r.beta_fast = number_or("beta_fast", r.beta_fast);
    r.beta_slow = number_or("beta_slow", r.beta_slow);
    r.attention_factor = number_or("attention_factor", 0);
    r.mscale = number_or("mscale", 0);
    r.mscale_all_dim = number_or("mscale_all_dim", 0);
    r.truncate = get_or<bool>(s, "truncate", true, where);
  }
  if (r.type == "llama3") {
    r.low_freq_factor = need<double>(s, "low_freq_factor", where);
    r.high_freq_factor = need<double>(s, "high_freq_factor", where);
    r.original_max_position_embeddings = need<int64_t>(s, "original_max_position_embeddings", where);
  }
  return r;
}

// --moe-layer-freq for the layers `sparse(l)` gives experts: "1" when all
// have them, else one 0/1 per layer.
template <typename Sparse>
std::string moe_layer_freq(int64_t num_layers, const Sparse& sparse) {
  std::string freq;
  bool all = true;
  for (int64_t l = 0; l < num_layers; ++l) {
    all = all && sparse(l);
    freq += std::string(l > 0 ? "," : "") + (sparse(l) ? "1" : "0");
  }
  return all ? "1" : freq;
}

// Qwen3-MoE's experts: layer l is sparse unless in mlp_only_layers, and only
// every decoder_sparse_step-th ((l + 1) % step == 0); dense layers keep
// intermediate_size.
void qwen3_moe_of(const nlohmann::json& j, const std::string& path, model::ModelConfig& c) {
  model::MoeConfig& m = c.moe;
  m.num_experts = need<int64_t>(j, "num_experts", path);
  m.router_topk = need<int64_t>(j, "num_experts_per_tok", path);
  m.ffn_hidden_size = need<int64_t>(j, "moe_intermediate_size", path);
  m.aux_loss_coeff = get_or<double>(j, "router_aux_loss_coef", 0.0, path);
  if (!get_or<bool>(j, "norm_topk_prob", true, path))
    fail("{}: norm_topk_prob false: claw's softmax router renormalises the top-k weights (true)", path);
  const int64_t step = get_or<int64_t>(j, "decoder_sparse_step", 1, path);
  if (step < 1) fail("{}: decoder_sparse_step {} must be positive", path, step);
  std::set<int64_t> dense;
  if (j.contains("mlp_only_layers") && !j["mlp_only_layers"].is_null()) {
    if (!j["mlp_only_layers"].is_array()) fail("{}: mlp_only_layers is not a list of layer indices", path);
    for (const nlohmann::json& l : j["mlp_only_layers"]) {
      if (!l.is_number_integer()) fail("{}: mlp_only_layers holds {}, not a layer index", path, l.dump());
      dense.insert(l.get<int64_t>());
    }
  }
  m.layer_freq = moe_layer_freq(c.num_layers, [&](int64_t l) { return !dense.count(l) && (l + 1) % step == 0; });
}

// The fields every Llama-style config.json has, into c: the shape, RMSNorm,
// RoPE. head_dim: required (Gemma), optional (default hidden / heads), or
// implied (hidden / heads whatever the file says).
enum class HeadDim { required, optional, implied };
void llama_shape_of(const nlohmann::json& j, const std::string& path, HeadDim head, bool tied_by_default,
                    model::ModelConfig& c) {
  c.num_layers = need<int64_t>(j, "num_hidden_layers", path);
  c.hidden_size = need<int64_t>(j, "hidden_size", path);
  c.num_attention_heads = need<int64_t>(j, "num_attention_heads", path);
  c.num_query_groups = get_or<int64_t>(j, "num_key_value_heads", c.num_attention_heads, path);
  const int64_t implied = c.hidden_size / c.num_attention_heads;
  const int64_t head_dim = head == HeadDim::required   ? need<int64_t>(j, "head_dim", path)
                           : head == HeadDim::optional ? get_or<int64_t>(j, "head_dim", implied, path)
                                                       : implied;
  c.kv_channels = head_dim == implied ? 0 : head_dim;
  c.ffn_hidden_size = need<int64_t>(j, "intermediate_size", path);
  c.vocab_size = need<int64_t>(j, "vocab_size", path);
  c.max_position_embeddings = need<int64_t>(j, "max_position_embeddings", path);
  c.norm_epsilon = get_or<double>(j, "rms_norm_eps", 1e-6, path);
  c.rotary_base = get_or<double>(j, "rope_theta", 10000.0, path);
  c.init_method_std = get_or<double>(j, "initializer_range", 0.02, path);
  c.untie_embeddings_and_output_weights = !get_or<bool>(j, "tie_word_embeddings", tied_by_default, path);
  c.normalization = model::Norm::rmsnorm;
  c.position_embedding_type = model::Position::rope;
}

// DeepSeek-V3 (deepseek_v3): multi-head latent attention; the first
// first_k_dense_replace layers dense, the others n_routed_experts SwiGLU
// experts (sigmoid scores, the e_score_correction_bias, group-limited top-k,
// weights renormalised and scaled) beside n_shared_experts shared ones.
void deepseek3_of(const nlohmann::json& j, const std::string& path, model::ModelConfig& c) {
  c.name = "hf-deepseek_v3";
  c.hf_architecture = "DeepseekV3ForCausalLM";
  llama_shape_of(j, path, HeadDim::implied, /*tied_by_default=*/false, c);
  if (c.num_query_groups != c.num_attention_heads)
    fail("{}: num_key_value_heads {} differs from num_attention_heads {}: DeepSeek-V3's latent attention makes a key "
         "and value per head",
         path, c.num_query_groups, c.num_attention_heads);
  c.num_query_groups = 0;
  c.mlp = model::Mlp::swiglu;
  c.add_bias_linear = false;
  if (get_or<bool>(j, "attention_bias", false, path))
    fail("{}: attention_bias true: claw's latent attention has no biases on q_a_proj, kv_a_proj_with_mqa and o_proj",
         path);
  const std::string act = get_or<std::string>(j, "hidden_act", "silu", path);
  if (act != "silu") fail("{}: hidden_act '{}': claw's SwiGLU uses silu", path, act);
  c.rope_scaling = rope_scaling_of(j, path);
  model::MlaConfig& a = c.mla;
  a.enabled = true;
  a.q_lora_rank = get_or<int64_t>(j, "q_lora_rank", 0, path);  // null: q_proj
  a.kv_lora_rank = need<int64_t>(j, "kv_lora_rank", path);
  a.qk_head_dim = need<int64_t>(j, "qk_nope_head_dim", path);
  a.qk_pos_emb_head_dim = need<int64_t>(j, "qk_rope_head_dim", path);
  a.v_head_dim = need<int64_t>(j, "v_head_dim", path);
  c.rotary_interleaved = get_or<bool>(j, "rope_interleave", true, path);
  const int64_t dense = get_or<int64_t>(j, "first_k_dense_replace", 0, path);
  if (dense < 0) fail("{}: first_k_dense_replace {} must be >= 0", path, dense);
  if (dense >= c.num_layers) return;  // every layer dense: no experts
  model::MoeConfig& m = c.moe;
  m.num_experts = need<int64_t>(j, "n_routed_experts", path);
  m.router_topk = need<int64_t>(j, "num_experts_per_tok", path);
  m.ffn_hidden_size = need<int64_t>(j, "moe_intermediate_size", path);
  m.shared_expert_intermediate_size = m.ffn_hidden_size * get_or<int64_t>(j, "n_shared_experts", 1, path);
  m.router_score_function = "sigmoid";
  m.router_enable_expert_bias = true;  // e_score_correction_bias
  const int64_t groups = get_or<int64_t>(j, "n_group", 1, path);
  m.router_num_groups = groups > 1 ? groups : 0;
  m.router_group_topk = groups > 1 ? get_or<int64_t>(j, "topk_group", 1, path) : 0;
  m.router_topk_scaling_factor = get_or<double>(j, "routed_scaling_factor", 1.0, path);
  if (!get_or<bool>(j, "norm_topk_prob", true, path) || m.router_topk < 2)
    fail("{}: norm_topk_prob false or num_experts_per_tok 1: claw's sigmoid router divides the top-k scores by their "
         "sum (true, k > 1)",
         path);
  m.layer_freq = moe_layer_freq(c.num_layers, [&](int64_t l) { return l >= dense; });
}

// OLMo 2: the options hf_olmo2_config writes, read back.
void olmo2_of(const nlohmann::json& j, const std::string& path, model::ModelConfig& c) {
  c.name = "hf-olmo2";
  c.hf_architecture = "Olmo2ForCausalLM";
  llama_shape_of(j, path, HeadDim::implied, /*tied_by_default=*/false, c);
  c.mlp = model::Mlp::swiglu;
  c.add_bias_linear = false;
  c.qk_layernorm = c.qk_layernorm_full_width = c.post_sublayer_norm = true;
  c.pre_sublayer_norm = false;
  c.rope_scaling = rope_scaling_of(j, path);
  if (get_or<bool>(j, "attention_bias", false, path))
    fail("{}: attention_bias true: claw has no OLMo 2 attention with biases on q, k, v and o but none in the MLP",
         path);
  const std::string act = get_or<std::string>(j, "hidden_act", "silu", path);
  if (act != "silu") fail("{}: hidden_act '{}': claw's SwiGLU uses silu", path, act);
}

// Gemma 2 and Gemma 3 (text): the options hf_gemma_config writes, read back.
void gemma_of(const nlohmann::json& j, const std::string& path, const std::string& type, model::ModelConfig& c) {
  const bool v3 = type == "gemma3_text";
  c.name = "hf-" + type;
  c.hf_architecture = v3 ? "Gemma3ForCausalLM" : "Gemma2ForCausalLM";
  llama_shape_of(j, path, HeadDim::required, /*tied_by_default=*/true, c);
  c.mlp = model::Mlp::geglu;
  c.add_bias_linear = false;
  c.apply_layernorm_1p = c.post_sublayer_norm = c.scale_embedding = true;
  c.qk_layernorm = v3;
  const std::string act = get_or<std::string>(j, "hidden_activation", "gelu_pytorch_tanh", path);
  if (act != "gelu_pytorch_tanh" && act != "gelu_new")
    fail("{}: hidden_activation '{}': claw's GeGLU gates with the tanh GELU (gelu_pytorch_tanh)", path, act);
  if (get_or<bool>(j, "attention_bias", false, path)) fail("{}: attention_bias true: Gemma has no biases here", path);
  // Soft-caps (Gemma 2's 50 and 30; Gemma 3's null): null is none.
  const auto cap_of = [&](const char* key) {
    if (!j.contains(key) || j[key].is_null()) return 0.0;
    const double cap = need<double>(j, key, path);
    if (!(cap > 0)) fail("{}: {} {}: a soft cap is positive (null: none)", path, key, j[key].dump());
    return cap;
  };
  c.attn_logit_softcapping = cap_of("attn_logit_softcapping");
  c.final_logit_softcapping = cap_of("final_logit_softcapping");
  if (get_or<bool>(j, "use_bidirectional_attention", false, path))
    fail("{}: use_bidirectional_attention true: claw's attention is causal", path);
  c.softmax_scale = 1.0 / std::sqrt(need<double>(j, "query_pre_attn_scalar", path));
  if (j.contains("sliding_window") && !j["sliding_window"].is_null())
    c.window_size = need<int64_t>(j, "sliding_window", path);
  c.rope_scaling = rope_scaling_of(j, path);
  if (!v3) {  // Gemma 2: even layers windowed, odd global
    c.window_attn_skip_freq = c.window_size > 0 ? 2 : 0;
    return;
  }
  c.local_rotary_base = get_or<double>(j, "rope_local_base_freq", 10000.0, path);
  // layer_types: windowed but every N-th (sliding_window_pattern N, 6 by default).
  std::vector<bool> full(static_cast<size_t>(c.num_layers));
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    if (!j["layer_types"].is_array() || static_cast<int64_t>(j["layer_types"].size()) != c.num_layers)
      fail("{}: layer_types must list one type per layer ({})", path, c.num_layers);
    for (int64_t l = 0; l < c.num_layers; ++l) full[l] = j["layer_types"][l] == "full_attention";
  } else {
    const int64_t n = get_or<int64_t>(j, "sliding_window_pattern", 6, path);
    for (int64_t l = 0; l < c.num_layers; ++l) full[l] = n > 0 && (l + 1) % n == 0;
  }
  const auto first = std::find(full.begin(), full.end(), true);
  c.window_attn_skip_freq = first == full.end() ? 0 : (first - full.begin()) + 1;
  for (int64_t l = 0; l < c.num_layers; ++l)
    if (full[l] != (c.window_attn_skip_freq > 0 && (l + 1) % c.window_attn_skip_freq == 0))
      fail("{}: layer_types puts full attention at layers claw cannot express: it makes every N-th layer global "
           "(--window-attn-skip-freq N), here layer {} breaks the pattern of every {}",
           path, l, c.window_attn_skip_freq);
  if (c.window_size == 0) c.window_attn_skip_freq = 0;
}

// The fields every Llama-style family's config.json shares.
nlohmann::json llama_family_config(const model::ModelConfig& c, const char* architecture, const char* type) {
  if (c.rope_scaling.longrope() && std::string_view(architecture) != "Phi3ForCausalLM")
    fail("--rope-scaling-type longrope: of the Hugging Face classes claw writes, Phi3ForCausalLM has it (its "
         "original_max_position_embeddings); set --hf-architecture Phi3ForCausalLM");
  return {{"architectures", {architecture}},
          {"model_type", type},
          {"vocab_size", c.vocab_size},
          {"hidden_size", c.hidden_size},
          {"intermediate_size", c.ffn()},
          {"num_hidden_layers", c.num_layers},
          {"num_attention_heads", c.num_attention_heads},
          {"num_key_value_heads", c.kv_heads()},
          {"head_dim", c.head_dim()},
          {"max_position_embeddings", c.max_position_embeddings},
          {"rms_norm_eps", c.norm_epsilon},
          {"rope_theta", c.rotary_base},
          {"rope_scaling", hf_rope_scaling(c.rope_scaling)},
          {"hidden_act", "silu"},
          {"attention_dropout", 0.0},
          {"initializer_range", c.init_method_std},
          {"tie_word_embeddings", c.tied()},
          {"torch_dtype", "float32"}};
}

// MixtralForCausalLM: every layer a sparse MoE block of SwiGLU experts,
// softmax top-k routing renormalised over the k (claw's softmax router).
nlohmann::json hf_mixtral_config(const model::ModelConfig& c) {
  const model::MoeConfig& m = c.moe;
  if (!m.enabled()) fail("--hf-architecture MixtralForCausalLM: this model has no experts (--num-experts 0)");
  if (m.num_moe_layers(c.num_layers) != c.num_layers || m.shared_expert_intermediate_size > 0 ||
      m.router_score_function != "softmax" || m.router_enable_expert_bias)
    fail("--num-experts {}: Hugging Face has this MoE as MixtralForCausalLM only (every layer MoE, softmax routing, "
         "no shared expert, no expert bias); this model has --moe-layer-freq {}, --moe-router-score-function {}{}{}",
         m.num_experts, m.layer_freq, m.router_score_function,
         m.shared_expert_intermediate_size > 0 ? ", a shared expert" : "",
         m.router_enable_expert_bias ? ", --moe-router-enable-expert-bias" : "");
  if (c.qkv_bias()) fail("MixtralForCausalLM has no linear biases; this model has them");
  if (c.qk_layernorm) fail("MixtralForCausalLM has no --qk-layernorm; this model has it");
  nlohmann::json j = llama_family_config(c, "MixtralForCausalLM", "mixtral");
  if (c.rope_scaling.enabled()) fail("MixtralForCausalLM has no rope_scaling; this model has --rope-scaling-type");
  j.erase("rope_scaling");
  j["intermediate_size"] = c.moe_ffn();
  j["num_local_experts"] = m.num_experts;
  j["num_experts_per_tok"] = m.router_topk;
  j["router_aux_loss_coef"] = m.aux_loss_coeff;
  j["output_router_logits"] = false;
  j["router_jitter_noise"] = 0.0;
  j["sliding_window"] = c.window_size > 0 ? nlohmann::json(c.window_size) : nlohmann::json(nullptr);
  return j;
}

nlohmann::json hf_qwen3_config(const model::ModelConfig& c);

// DeepseekV3ForCausalLM: multi-head latent attention and DeepSeek's MoE (the
// options deepseek3_of reads, written back).
nlohmann::json hf_deepseek3_config(const model::ModelConfig& c) {
  const model::MoeConfig& m = c.moe;
  const auto need = [&](bool ok, const char* what) {
    if (!ok) fail("DeepseekV3ForCausalLM needs {}; this model differs", what);
  };
  need(c.mla.enabled, "--multi-latent-attention");
  need(!m.enabled() || (m.router_score_function == "sigmoid" && m.router_enable_expert_bias && m.router_topk > 1),
       "experts routed by sigmoid scores with the expert bias, top k > 1");
  need(!m.enabled() || (m.shared_expert_intermediate_size > 0 && m.shared_expert_intermediate_size % c.moe_ffn() == 0),
       "shared experts as wide as a whole number of experts (--moe-shared-expert-intermediate-size)");
  int64_t dense = 0;
  while (dense < c.num_layers && !m.is_moe_layer(dense, c.num_layers)) ++dense;
  for (int64_t l = dense; l < c.num_layers; ++l)
    need(m.is_moe_layer(l, c.num_layers), "dense layers first and experts in every layer after them");
  need(c.mlp == model::Mlp::swiglu && !c.qkv_bias() && c.window_size == 0 && !c.post_sublayer_norm &&
           !c.apply_layernorm_1p && !c.scale_embedding && c.softmax_scale == 0,
       "Llama's SwiGLU layers without biases, windows or Gemma's options");
  nlohmann::json j = llama_family_config(c, "DeepseekV3ForCausalLM", "deepseek_v3");
  j["num_key_value_heads"] = c.num_attention_heads;
  j["head_dim"] = c.mla.qk_pos_emb_head_dim;  // transformers' own value: the rotated dimensions
  j["q_lora_rank"] = c.mla.q_lora_rank > 0 ? nlohmann::json(c.mla.q_lora_rank) : nlohmann::json(nullptr);
  j["kv_lora_rank"] = c.mla.kv_lora_rank;
  j["qk_nope_head_dim"] = c.mla.qk_head_dim;
  j["qk_rope_head_dim"] = c.mla.qk_pos_emb_head_dim;
  j["v_head_dim"] = c.mla.v_head_dim;
  j["rope_interleave"] = c.rotary_interleaved;
  j["attention_bias"] = false;
  j["first_k_dense_replace"] = dense;
  if (!m.enabled()) {  // every layer dense (the expert fields keep transformers' defaults)
    j["n_group"] = 1;
    j["topk_group"] = 1;
    return j;
  }
  j["n_routed_experts"] = m.num_experts;
  j["num_experts_per_tok"] = m.router_topk;
  j["moe_intermediate_size"] = c.moe_ffn();
  j["n_shared_experts"] = m.shared_expert_intermediate_size / c.moe_ffn();
  j["n_group"] = m.router_num_groups > 1 ? m.router_num_groups : 1;
  j["topk_group"] = m.router_num_groups > 1 ? m.router_group_topk : 1;
  j["routed_scaling_factor"] = m.router_topk_scaling_factor;
  j["norm_topk_prob"] = true;
  return j;
}

// Qwen3MoeForCausalLM: Qwen 3's attention; the layers not in mlp_only_layers
// (and every decoder_sparse_step-th) sparse blocks of SwiGLU experts, softmax
// top-k renormalised over the k (norm_topk_prob), no shared expert.
nlohmann::json hf_qwen3_moe_config(const model::ModelConfig& c) {
  const model::MoeConfig& m = c.moe;
  if (!m.enabled() || !c.qk_layernorm)
    fail("--hf-architecture Qwen3MoeForCausalLM: Qwen3-MoE has experts and --qk-layernorm; this model has {}",
         m.enabled() ? "no --qk-layernorm" : "no experts");
  if (m.shared_expert_intermediate_size > 0 || m.router_score_function != "softmax" || m.router_enable_expert_bias)
    fail("--num-experts {}: Qwen3MoeForCausalLM routes by softmax with no shared expert and no expert bias; this "
         "model has --moe-router-score-function {}{}{}",
         m.num_experts, m.router_score_function, m.shared_expert_intermediate_size > 0 ? ", a shared expert" : "",
         m.router_enable_expert_bias ? ", --moe-router-enable-expert-bias" : "");
  nlohmann::json j = hf_qwen3_config(c);
  j["architectures"] = {"Qwen3MoeForCausalLM"};
  j["model_type"] = "qwen3_moe";
  j["num_experts"] = m.num_experts;
  j["num_experts_per_tok"] = m.router_topk;
  j["moe_intermediate_size"] = c.moe_ffn();
  j["norm_topk_prob"] = true;
  j["decoder_sparse_step"] = 1;
  nlohmann::json dense = nlohmann::json::array();
  for (int64_t l = 0; l < c.num_layers; ++l)
    if (!m.is_moe_layer(l, c.num_layers)) dense.push_back(l);
  j["mlp_only_layers"] = dense;
  j["router_aux_loss_coef"] = m.aux_loss_coeff;
  j["output_router_logits"] = false;
  return j;
}

// Qwen3ForCausalLM: Llama's layers with an RMSNorm on each head's queries
// and keys (q_norm, k_norm) and a head dimension of its own; attention_bias
// puts biases on q, k, v and o, the MLP has none.
nlohmann::json hf_qwen3_config(const model::ModelConfig& c) {
  if (!c.qk_layernorm) fail("--hf-architecture Qwen3ForCausalLM: this model has no --qk-layernorm");
  if (c.moe.enabled() && c.hf_architecture == "Qwen3ForCausalLM")
    fail("--hf-architecture Qwen3ForCausalLM: this model has experts (Qwen3MoeForCausalLM holds them)");
  if (c.add_qkv_bias && !c.add_bias_linear)
    fail("--qk-layernorm with --add-qkv-bias: Qwen3ForCausalLM's attention_bias covers q, k, v and o together; this "
         "model has biases on q, k and v only");
  if (c.add_bias_linear)
    fail("--qk-layernorm without --disable-bias-linear: Qwen3ForCausalLM's MLP has no biases; this model's has");
  if (c.window_size > 0)
    fail("--window-size {} with --qk-layernorm: Qwen3ForCausalLM's sliding window (use_sliding_window) is not "
         "exported",
         c.window_size);
  nlohmann::json j = llama_family_config(c, "Qwen3ForCausalLM", "qwen3");
  j["attention_bias"] = false;
  j["use_sliding_window"] = false;
  j["sliding_window"] = nullptr;
  j["max_window_layers"] = c.num_layers;
  return j;
}

// Gemma2ForCausalLM / Gemma3ForCausalLM (text): GeGLU MLPs, RMSNorms scaling
// by 1 + weight on the inputs and the outputs of both sublayers, embeddings
// times sqrt(hidden), scores scaled by query_pre_attn_scalar^-1/2, tied
// embeddings; windowed layers but every window_attn_skip_freq-th (Gemma 2:
// 2; Gemma 3: layer_types, its RoPE base for windowed layers in
// rope_local_base_freq, per-head q/k norms).
nlohmann::json hf_gemma_config(const model::ModelConfig& c) {
  const bool v3 = c.qk_layernorm || c.hf_architecture == "Gemma3ForCausalLM";
  const char* cls = v3 ? "Gemma3ForCausalLM" : "Gemma2ForCausalLM";
  const auto need_on = [&](bool on, const char* flag) {
    if (!on) fail("{} needs {} (this model has it off)", cls, flag);
  };
  need_on(c.mlp == model::Mlp::geglu, "--geglu");
  need_on(c.apply_layernorm_1p, "--apply-layernorm-1p");
  need_on(c.post_sublayer_norm, "--post-sublayer-norm");
  need_on(c.scale_embedding, "--scale-embedding");
  need_on(c.tied(), "tied embeddings (no --untie-embeddings-and-output-weights)");
  need_on(v3 == c.qk_layernorm, v3 ? "--qk-layernorm" : "no --qk-layernorm");
  if (c.add_bias_linear || c.add_qkv_bias || c.moe.enabled())
    fail("{}: this model has {}, which Gemma has not", cls, c.moe.enabled() ? "experts" : "linear biases");
  if (!v3 && (c.local_rotary_base > 0 || c.rope_scaling.enabled()))
    fail("Gemma2ForCausalLM has one unscaled RoPE; this model has --local-rotary-base or --rope-scaling-type");
  nlohmann::json j = llama_family_config(c, cls, v3 ? "gemma3_text" : "gemma2");
  j.erase("hidden_act");
  j["hidden_activation"] = "gelu_pytorch_tanh";
  j["attention_bias"] = false;
  const double qpas = 1.0 / (c.attention_scale() * c.attention_scale());
  j["query_pre_attn_scalar"] = std::abs(qpas - std::round(qpas)) < 1e-6 ? nlohmann::json(std::llround(qpas))
                                                                        : nlohmann::json(qpas);
  j["sliding_window"] = c.window_size > 0 ? nlohmann::json(c.window_size) : nlohmann::json(nullptr);
  const auto cap = [](double c) { return c > 0 ? nlohmann::json(c) : nlohmann::json(nullptr); };
  j["attn_logit_softcapping"] = cap(c.attn_logit_softcapping);
  j["final_logit_softcapping"] = cap(c.final_logit_softcapping);
  if (!v3) {
    if (c.window_size > 0 && c.window_attn_skip_freq != 2)
      fail("Gemma2ForCausalLM alternates windowed and global layers (--window-attn-skip-freq 2); this model has {}",
           c.window_attn_skip_freq);
    return j;
  }
  nlohmann::json types = nlohmann::json::array();
  for (int64_t l = 0; l < c.num_layers; ++l) types.push_back(c.layer_window(l) > 0 ? "sliding_attention" : "full_attention");
  j["layer_types"] = types;
  j["rope_local_base_freq"] = c.local_rotary_base > 0 ? c.local_rotary_base : c.rotary_base;
  return j;
}

// Phi3ForCausalLM: Llama's layers with q, k, v fused into qkv_proj and
// gate, up into gate_up_proj (model::HfNames slices them), no biases, and
// Mistral's sliding window (null: none).
nlohmann::json hf_phi3_config(const model::ModelConfig& c) {
  if (c.add_bias_linear || c.add_qkv_bias || c.qk_layernorm)
    fail("--hf-architecture Phi3ForCausalLM: Phi-3 has no biases and no --qk-layernorm; this model has them");
  nlohmann::json j = llama_family_config(c, "Phi3ForCausalLM", "phi3");
  j.erase("head_dim");
  if (c.head_dim() * c.num_attention_heads != c.hidden_size)
    fail("--kv-channels {}: Phi3ForCausalLM's head dimension is hidden / heads ({})", c.kv_channels,
         c.hidden_size / c.num_attention_heads);
  j["sliding_window"] = c.window_size > 0 ? nlohmann::json(c.window_size) : nlohmann::json(nullptr);
  const model::RopeScaling& rs = c.rope_scaling;
  if (rs.enabled() && !rs.longrope())
    fail("--rope-scaling-type {}: Phi3ForCausalLM scales RoPE by longrope only", rs.type);
  if (rs.longrope() && (rs.attention_factor > 0 ||
                        rs.factor != static_cast<double>(c.max_position_embeddings) /
                                         static_cast<double>(rs.original_max_position_embeddings)))
    fail("--rope-scaling-type longrope: Phi3ForCausalLM derives the factor (--max-position-embeddings / "
         "--rope-scaling-original-max-position-embeddings) and the attention factor; this model sets its own");
  j["original_max_position_embeddings"] = rs.longrope() ? rs.original_max_position_embeddings : c.max_position_embeddings;
  j["partial_rotary_factor"] = c.rotary_percent;
  j["resid_pdrop"] = c.hidden_dropout;
  j["embd_pdrop"] = c.hidden_dropout;
  return j;
}

// Qwen2ForCausalLM: Llama's layers with biases on q, k and v only, and the
// head dimension hidden / heads (its config has no head_dim).
nlohmann::json hf_qwen2_config(const model::ModelConfig& c) {
  if (!c.add_qkv_bias || c.add_bias_linear)
    fail("--hf-architecture Qwen2ForCausalLM: Qwen 2 has biases on q, k and v only (--add-qkv-bias "
         "--disable-bias-linear); this model has {}",
         c.add_bias_linear ? "biases in every linear layer" : "none");
  if (c.kv_channels > 0 && c.kv_channels * c.num_attention_heads != c.hidden_size)
    fail("--kv-channels {}: Qwen2ForCausalLM's head dimension is hidden / heads ({}); this model has no Hugging Face "
         "Qwen 2 form",
         c.kv_channels, c.hidden_size / c.num_attention_heads);
  if (c.window_size > 0)
    fail("--window-size {} with --add-qkv-bias: Qwen2ForCausalLM's sliding window (use_sliding_window) is not "
         "exported; Hugging Face's Mistral has the window but no biases",
         c.window_size);
  nlohmann::json j = llama_family_config(c, "Qwen2ForCausalLM", "qwen2");
  j.erase("head_dim");
  j["use_sliding_window"] = false;
  j["sliding_window"] = nullptr;
  j["max_window_layers"] = c.num_layers;
  return j;
}

// Olmo2ForCausalLM: Llama's layers with RMSNorms after the attention and the
// MLP (post_attention_layernorm, post_feedforward_layernorm) and none before,
// and q/k RMSNorms over their full width (q_norm [H D], k_norm [G D]).
nlohmann::json hf_olmo2_config(const model::ModelConfig& c) {
  const auto need = [&](bool ok, const char* what) {
    if (!ok) fail("Olmo2ForCausalLM needs {}; this model differs", what);
  };
  need(c.qk_layernorm && c.qk_layernorm_full_width, "--qk-layernorm --qk-layernorm-full-width");
  need(c.post_sublayer_norm && !c.pre_sublayer_norm, "--post-sublayer-norm --no-pre-sublayer-norm");
  need(c.mlp == model::Mlp::swiglu, "--swiglu");
  need(!c.qkv_bias(), "--disable-bias-linear and no --add-qkv-bias");
  need(!c.moe.enabled(), "no experts");
  need(c.window_size == 0, "no --window-size");
  need(!c.apply_layernorm_1p && !c.scale_embedding && c.softmax_scale == 0 && c.local_rotary_base == 0,
       "none of Gemma's options (--apply-layernorm-1p, --scale-embedding, --softmax-scale, --local-rotary-base)");
  need(c.kv_channels == 0 || c.kv_channels * c.num_attention_heads == c.hidden_size,
       "heads of hidden / heads (its config has no head_dim)");
  nlohmann::json j = llama_family_config(c, "Olmo2ForCausalLM", "olmo2");
  j.erase("head_dim");
  j["attention_bias"] = false;
  return j;
}
}  // namespace

void fail_field_type(const std::string& path, const char* key, const std::string& value) {
  fail("{}: field '{}' has the wrong type ({})", path, key, value);
}

nlohmann::json hf_config(const model::ModelConfig& c) {
  c.validate();
  if (is_gpt2(c)) {
    if (!c.add_bias_linear)
      fail("GPT2LMHeadModel has biases in every linear layer; a model with --disable-bias-linear has no Hugging Face "
           "GPT-2 form");
    if (c.kv_heads() != c.num_attention_heads || c.head_dim() * c.num_attention_heads != c.hidden_size)
      fail("GPT2LMHeadModel has neither grouped-query attention nor --kv-channels; this model has no Hugging Face "
           "GPT-2 form");
    if (c.window_size > 0)
      fail("GPT2LMHeadModel has no sliding-window attention; a model with --window-size {} has no Hugging Face GPT-2 "
           "form",
           c.window_size);
    return {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"vocab_size", c.vocab_size},
            {"n_positions", c.max_position_embeddings},
            {"n_embd", c.hidden_size},
            {"n_layer", c.num_layers},
            {"n_head", c.num_attention_heads},
            {"n_inner", c.ffn()},
            {"activation_function", "gelu_new"},  // claw's GELU is the tanh approximation
            {"layer_norm_epsilon", c.norm_epsilon},
            {"initializer_range", c.init_method_std},
            {"resid_pdrop", c.hidden_dropout},
            {"embd_pdrop", c.hidden_dropout},
            {"attn_pdrop", 0.0},
            {"tie_word_embeddings", c.tied()},
            {"bos_token_id", 50256},
            {"eos_token_id", 50256},
            {"torch_dtype", "float32"}};
  }
  if (c.normalization != model::Norm::rmsnorm || c.position_embedding_type != model::Position::rope ||
      !c.gated_mlp())
    fail("this model mixes GPT-2 and Llama parts (--normalization {}, --position-embedding-type {}, MLP {}); "
         "Hugging Face has GPT2LMHeadModel (LayerNorm, learned positions, GELU) and the Llama family (RMSNorm, rope, "
         "SwiGLU or GeGLU) only",
         model::to_string(c.normalization), model::to_string(c.position_embedding_type), model::to_string(c.mlp));
  const std::string& arch = c.hf_architecture;
  if (arch == "GPT2LMHeadModel")
    fail("--hf-architecture GPT2LMHeadModel: this model has Llama's parts (RMSNorm, rope, SwiGLU), not GPT-2's");
  if (c.rotary_percent != 1.0 && arch != "Phi3ForCausalLM")
    fail("--rotary-percent {}: of the Hugging Face classes claw writes, only Phi3ForCausalLM rotates part of a head "
         "(partial_rotary_factor); set --hf-architecture Phi3ForCausalLM or --rotary-percent 1",
         c.rotary_percent);
  if (!c.pre_sublayer_norm || c.qk_layernorm_full_width || arch == "Olmo2ForCausalLM") return hf_olmo2_config(c);
  const bool gemma = c.mlp == model::Mlp::geglu || c.apply_layernorm_1p || c.post_sublayer_norm ||
                     c.scale_embedding || arch == "Gemma2ForCausalLM" || arch == "Gemma3ForCausalLM";
  if (gemma) return hf_gemma_config(c);
  for (const auto& [on, flag] : {std::pair{c.softmax_scale > 0, "--softmax-scale"},
                                 std::pair{c.local_rotary_base > 0, "--local-rotary-base"},
                                 std::pair{c.window_attn_skip_freq > 0, "--window-attn-skip-freq"}})
    if (on) fail("{}: of the Hugging Face classes claw writes, only Gemma's have it; this model is not Gemma's", flag);
  if (arch == "DeepseekV3ForCausalLM" || c.mla.enabled) return hf_deepseek3_config(c);
  if (arch == "Qwen3MoeForCausalLM" || (c.moe.enabled() && c.qk_layernorm)) return hf_qwen3_moe_config(c);
  if (c.moe.enabled() || arch == "MixtralForCausalLM") return hf_mixtral_config(c);
  if (c.qk_layernorm || arch == "Qwen3ForCausalLM") return hf_qwen3_config(c);
  if ((c.add_qkv_bias && !c.add_bias_linear) || arch == "Qwen2ForCausalLM") return hf_qwen2_config(c);
  if (arch == "Phi3ForCausalLM") return hf_phi3_config(c);
  nlohmann::json j = llama_family_config(c, "LlamaForCausalLM", "llama");
  if (c.window_size > 0 || arch == "MistralForCausalLM") {
    // MistralForCausalLM: Llama's layers, every one attending over a sliding window.
    if (c.add_bias_linear)
      fail("--window-size {}: Hugging Face has sliding-window attention in MistralForCausalLM, which has no linear "
           "biases; this model has them",
           c.window_size);
    for (const char* key : {"attention_bias", "mlp_bias"}) j.erase(key);
    j["architectures"] = {"MistralForCausalLM"};
    j["model_type"] = "mistral";
    j["sliding_window"] = c.window_size > 0 ? nlohmann::json(c.window_size) : nlohmann::json(nullptr);
    return j;
  }
  j["attention_bias"] = c.add_bias_linear;
  j["mlp_bias"] = c.add_bias_linear;
  return j;
}

model::ModelConfig model_from_hf_config(const nlohmann::json& j, const std::string& path) {
  const std::string type = need<std::string>(j, "model_type", path);
  model::ModelConfig c;
  if (type == "gpt2") {
    c.name = "hf-gpt2";
    c.hf_architecture = "GPT2LMHeadModel";
    c.num_layers = need<int64_t>(j, "n_layer", path);
    c.hidden_size = need<int64_t>(j, "n_embd", path);
    c.num_attention_heads = need<int64_t>(j, "n_head", path);
    c.ffn_hidden_size = get_or<int64_t>(j, "n_inner", 0, path);
    c.vocab_size = need<int64_t>(j, "vocab_size", path);
    c.max_position_embeddings = need<int64_t>(j, "n_positions", path);
    c.norm_epsilon = get_or<double>(j, "layer_norm_epsilon", 1e-5, path);
    c.init_method_std = get_or<double>(j, "initializer_range", 0.02, path);
    c.untie_embeddings_and_output_weights = !get_or<bool>(j, "tie_word_embeddings", true, path);
    const std::string act = get_or<std::string>(j, "activation_function", "gelu_new", path);
    if (act != "gelu_new" && act != "gelu_pytorch_tanh")
      fail("{}: activation_function '{}': claw's GELU is the tanh approximation (gelu_new, gelu_pytorch_tanh)", path,
           act);
  } else if (type == "llama" || type == "mixtral" || type == "mistral" || type == "qwen2" || type == "qwen3" ||
             type == "qwen3_moe" || type == "phi3") {
    c.name = "hf-" + type;
    static const std::map<std::string, std::string> classes = {
        {"llama", "LlamaForCausalLM"},  {"mixtral", "MixtralForCausalLM"}, {"mistral", "MistralForCausalLM"},
        {"qwen2", "Qwen2ForCausalLM"},  {"qwen3", "Qwen3ForCausalLM"},     {"phi3", "Phi3ForCausalLM"},
        {"qwen3_moe", "Qwen3MoeForCausalLM"}};
    c.hf_architecture = classes.at(type);
    // Qwen 2's and Phi-3's configs have no head_dim (transformers ignores one there).
    llama_shape_of(j, path, type == "qwen2" || type == "phi3" ? HeadDim::implied : HeadDim::optional,
                   /*tied_by_default=*/false, c);
    c.mlp = model::Mlp::swiglu;
    if (type == "llama") {
      c.add_bias_linear = get_or<bool>(j, "attention_bias", false, path);
      if (get_or<bool>(j, "mlp_bias", c.add_bias_linear, path) != c.add_bias_linear)
        fail("{}: attention_bias and mlp_bias differ; claw's --disable-bias-linear covers both", path);
    } else if (type == "qwen3" || type == "qwen3_moe") {
      c.add_bias_linear = false;
      c.qk_layernorm = true;  // q_norm, k_norm over each head
      if (get_or<bool>(j, "attention_bias", false, path))
        fail("{}: attention_bias true: claw has no Qwen 3 attention with biases on q, k, v and o but none in the MLP",
             path);
    } else {
      c.add_bias_linear = false;
      c.add_qkv_bias = type == "qwen2";  // Qwen 2: q, k and v have biases, nothing else
    }
    c.rope_scaling = rope_scaling_of(j, path);
    const std::string act = get_or<std::string>(j, "hidden_act", "silu", path);
    if (act != "silu") fail("{}: hidden_act '{}': claw's SwiGLU uses silu", path, act);
    if (type == "qwen3_moe") qwen3_moe_of(j, path, c);
    if (type == "mixtral") {
      c.moe.num_experts = need<int64_t>(j, "num_local_experts", path);
      c.moe.router_topk = need<int64_t>(j, "num_experts_per_tok", path);
      c.moe.aux_loss_coeff = get_or<double>(j, "router_aux_loss_coef", 0.0, path);
      c.moe.ffn_hidden_size = c.ffn_hidden_size;
    }
    // Mistral and Mixtral: every layer attends over sliding_window keys
    // (null: all). Qwen 2's window is off unless use_sliding_window.
    if ((type == "mistral" || type == "mixtral" || type == "phi3") && j.contains("sliding_window") &&
        !j["sliding_window"].is_null())
      c.window_size = need<int64_t>(j, "sliding_window", path);
    if (type == "phi3") c.rotary_percent = get_or<double>(j, "partial_rotary_factor", 1.0, path);  // Phi-4-mini: 0.75
    if (type.starts_with("qwen") && get_or<bool>(j, "use_sliding_window", false, path))
      fail("{}: use_sliding_window true: claw does not run Qwen's sliding window (layers from max_window_layers "
           "on); set it false if the model was trained without it",
           path);
  } else if (type == "gemma2" || type == "gemma3_text") {
    gemma_of(j, path, type, c);
  } else if (type == "olmo2") {
    olmo2_of(j, path, c);
  } else if (type == "deepseek_v3") {
    deepseek3_of(j, path, c);
  } else if (type == "gemma3") {
    fail("{}: model_type 'gemma3' is Gemma 3's image-and-text model; claw reads the text model (gemma3_text: "
         "Gemma3ForCausalLM, as the 1B and text-only checkpoints hold it)",
         path);
  } else {
    fail("{}: model_type '{}' is not supported (deepseek_v3, gemma2, gemma3_text, gpt2, llama, mistral, mixtral, olmo2, "
         "phi3, qwen2, qwen3 or qwen3_moe)",
         path, type);
  }
  c.validate();
  return c;
}

}  // namespace claw::ckpt
