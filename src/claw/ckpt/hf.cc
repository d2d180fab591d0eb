#include "claw/ckpt/hf.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/ranges.h>

#include "claw/ckpt/format.h"
#include "claw/ckpt/safetensors.h"
#include "claw/ckpt/shards.h"
#include "claw/core/dtype_convert.h"
#include "claw/core/error.h"
#include "claw/core/dtype_convert.h"
#include "claw/model/hf_names.h"

namespace claw::ckpt {

namespace fs = std::filesystem;

namespace {
bool is_gpt2(const model::ModelConfig& c) { return model::HfNames(c).gpt2(); }

// The HF name of index e of a stacked reference ("{}" replaced).
std::string stacked_name(const model::HfRef& r, int64_t e) {
  const size_t at = r.name.find("{}");
  CLAW_CHECK(at != std::string::npos, "stacked Hugging Face name '{}' has no {{}}", r.name);
  return r.name.substr(0, at) + std::to_string(e) + r.name.substr(at + 2);
}


std::vector<float> transpose2d(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<float> y(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[c * rows + r] = x[r * cols + c];
  return y;
}

// Copies the slab [begin, end) along `dim` between a tensor of `full` shape
// and one of the slab's shape (to_full: slab -> full, else full -> slab).
void copy_slab(const std::vector<int64_t>& full, int dim, int64_t begin, int64_t end, float* full_data,
               float* slab_data, bool to_full) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= full[d];
  for (size_t d = dim + 1; d < full.size(); ++d) inner *= full[d];
  const int64_t n = (end - begin) * inner;
  for (int64_t o = 0; o < outer; ++o) {
    float* f = full_data + (o * full[dim] + begin) * inner;
    float* s = slab_data + o * n;
    if (to_full) std::memcpy(f, s, n * sizeof(float));
    else std::memcpy(s, f, n * sizeof(float));
  }
}

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
  nlohmann::json j = {{"rope_type", r.type}, {"factor", r.factor}};
  if (r.type == "llama3") {
    j["low_freq_factor"] = r.low_freq_factor;
    j["high_freq_factor"] = r.high_freq_factor;
    j["original_max_position_embeddings"] = r.original_max_position_embeddings;
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
  if (r.type != "linear" && r.type != "llama3")
    fail("{} {}: rope_type '{}' is not supported (claw scales RoPE as linear and llama3)", where, s.dump(), r.type);
  r.factor = need<double>(s, "factor", where);
  if (r.type == "llama3") {
    r.low_freq_factor = need<double>(s, "low_freq_factor", where);
    r.high_freq_factor = need<double>(s, "high_freq_factor", where);
    r.original_max_position_embeddings = need<int64_t>(s, "original_max_position_embeddings", where);
  }
  return r;
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
  std::string freq;
  bool all = true;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const bool sparse = !dense.count(l) && (l + 1) % step == 0;
    all = all && sparse;
    if (l > 0) freq += ',';
    freq += sparse ? '1' : '0';
  }
  m.layer_freq = all ? "1" : freq;
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
  for (const char* cap : {"attn_logit_softcapping", "final_logit_softcapping"})
    if (j.contains(cap) && !j[cap].is_null())
      fail("{}: {} {}: claw has no soft-capping yet (Gemma 2's tanh caps)", path, cap, j[cap].dump());
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
  j["attn_logit_softcapping"] = nullptr;
  j["final_logit_softcapping"] = nullptr;
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
  j["original_max_position_embeddings"] = c.max_position_embeddings;
  j["partial_rotary_factor"] = 1.0;
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
  const bool gemma = c.mlp == model::Mlp::geglu || c.apply_layernorm_1p || c.post_sublayer_norm ||
                     c.scale_embedding || arch == "Gemma2ForCausalLM" || arch == "Gemma3ForCausalLM";
  if (gemma) return hf_gemma_config(c);
  for (const auto& [on, flag] : {std::pair{c.softmax_scale > 0, "--softmax-scale"},
                                 std::pair{c.local_rotary_base > 0, "--local-rotary-base"},
                                 std::pair{c.window_attn_skip_freq > 0, "--window-attn-skip-freq"}})
    if (on) fail("{}: of the Hugging Face classes claw writes, only Gemma's have it; this model is not Gemma's", flag);
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
    if (type == "phi3" && get_or<double>(j, "partial_rotary_factor", 1.0, path) != 1.0)
      fail("{}: partial_rotary_factor {}: claw rotates every dimension of a head (1.0)", path,
           j["partial_rotary_factor"].dump());
    if (type.starts_with("qwen") && get_or<bool>(j, "use_sliding_window", false, path))
      fail("{}: use_sliding_window true: claw does not run Qwen's sliding window (layers from max_window_layers "
           "on); set it false if the model was trained without it",
           path);
  } else if (type == "gemma2" || type == "gemma3_text") {
    gemma_of(j, path, type, c);
  } else if (type == "gemma3") {
    fail("{}: model_type 'gemma3' is Gemma 3's image-and-text model; claw reads the text model (gemma3_text: "
         "Gemma3ForCausalLM, as the 1B and text-only checkpoints hold it)",
         path);
  } else {
    fail("{}: model_type '{}' is not supported (gemma2, gemma3_text, gpt2, llama, mistral, mixtral, phi3, qwen2, qwen3 "
         "or qwen3_moe)",
         path, type);
  }
  c.validate();
  return c;
}

HfStateDict gather_hf(const std::vector<model::ParamSpec>& specs,
                      const std::function<std::vector<float>(const std::string&)>& get, const std::string& prefix) {
  // HF shapes first: a fused tensor (c_attn) spans its parts' slabs.
  std::map<std::string, std::vector<int64_t>> shapes;
  const auto hf_shape = [](const model::ParamSpec& s) {
    std::vector<int64_t> shape = checkpoint_shape(s);
    if (s.hf.transpose) std::swap(shape[0], shape[1]);
    return shape;
  };
  for (const model::ParamSpec& s : specs) {
    if (s.hf.name.empty()) fail("parameter '{}' has no Hugging Face counterpart", s.name);
    std::vector<int64_t> shape = hf_shape(s);
    if (s.hf.stack > 0) {  // one HF tensor per index of our dimension 0
      shape.erase(shape.begin());
      for (int64_t e = 0; e < s.hf.stack; ++e) shapes[prefix + stacked_name(s.hf, e)] = shape;
    } else if (s.hf.slice_dim >= 0) {
      auto& full = shapes[prefix + s.hf.name];
      if (full.empty()) full = shape;
      full[s.hf.slice_dim] = std::max(full[s.hf.slice_dim], s.hf.end);
    } else {
      shapes[prefix + s.hf.name] = shape;
    }
  }
  HfStateDict out;
  for (const auto& [name, shape] : shapes) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    out[name] = {shape, std::vector<float>(static_cast<size_t>(n))};
  }
  for (const model::ParamSpec& s : specs) {
    const std::vector<int64_t> cs = checkpoint_shape(s);
    std::vector<float> x = get(s.name);
    int64_t n = 1;
    for (int64_t d : cs) n *= d;
    CLAW_CHECK(static_cast<int64_t>(x.size()) == n, "parameter '{}': {} values for {} elements", s.name, x.size(), n);
    if (s.hf.stack > 0) {
      const int64_t each = n / s.hf.stack;
      for (int64_t e = 0; e < s.hf.stack; ++e)
        out[prefix + stacked_name(s.hf, e)].data.assign(x.begin() + e * each, x.begin() + (e + 1) * each);
      continue;
    }
    if (s.hf.transpose) x = transpose2d(x, cs[0], cs[1]);
    HfTensor& t = out[prefix + s.hf.name];
    if (s.hf.slice_dim < 0) t.data = std::move(x);
    else copy_slab(t.shape, s.hf.slice_dim, s.hf.begin, s.hf.end, t.data.data(), x.data(), true);
  }
  return out;
}

HfStateDict to_hf(const model::ModelConfig& cfg, const std::function<std::vector<float>(const std::string&)>& get) {
  hf_config(cfg);  // refuses models HF cannot represent
  std::vector<model::ParamSpec> specs = model_param_specs(cfg);
  std::erase_if(specs, [](const model::ParamSpec& s) { return model::is_lora_param(s.name); });  // ckpt/peft.h
  return gather_hf(specs, get, "");
}

std::vector<float> from_hf(const model::ParamSpec& s, const HfStateDict& hf, const std::string& source) {
  if (s.hf.stack > 0) {  // our [e] is HF tensor e
    std::vector<int64_t> want = checkpoint_shape(s);
    want.erase(want.begin());
    std::vector<float> x;
    for (int64_t e = 0; e < s.hf.stack; ++e) {
      const std::string name = stacked_name(s.hf, e);
      auto it = hf.find(name);
      if (it == hf.end()) fail("{}: no tensor '{}' (expert {} of claw's '{}')", source, name, e, s.name);
      if (it->second.shape != want)
        fail("{}: tensor '{}' has shape {}, but this model's '{}' needs {} per expert (does config.json match the "
             "weights?)",
             source, name, shape_string(it->second.shape), s.name, shape_string(want));
      x.insert(x.end(), it->second.data.begin(), it->second.data.end());
    }
    return x;
  }
  auto it = hf.find(s.hf.name);
  // The Hub's original GPT-2 files name GPT2Model's tensors without the
  // "transformer." prefix that GPT2LMHeadModel.save_pretrained writes.
  const std::string bare = "transformer.";
  if (it == hf.end() && s.hf.name.rfind(bare, 0) == 0) it = hf.find(s.hf.name.substr(bare.size()));
  if (it == hf.end()) fail("{}: no tensor '{}' (claw's '{}')", source, s.hf.name, s.name);
  const HfTensor& t = it->second;
  std::vector<int64_t> want = checkpoint_shape(s);
  if (s.hf.transpose) std::swap(want[0], want[1]);
  std::vector<int64_t> have = t.shape;
  if (s.hf.slice_dim >= 0) {
    if (s.hf.slice_dim >= static_cast<int>(have.size()) || have[s.hf.slice_dim] < s.hf.end)
      fail("{}: tensor '{}' has shape {}; claw's '{}' needs [{}, {}) of dimension {}", source, s.hf.name,
           shape_string(have), s.name, s.hf.begin, s.hf.end, s.hf.slice_dim);
    have[s.hf.slice_dim] = s.hf.end - s.hf.begin;
  }
  if (have != want)
    fail("{}: tensor '{}' has shape {}, but this model's '{}' needs {} (does config.json match the weights?)", source,
         s.hf.name, shape_string(t.shape), s.name, shape_string(want));
  std::vector<float> x;
  if (s.hf.slice_dim < 0) {
    x = t.data;
  } else {
    int64_t n = 1;
    for (int64_t d : have) n *= d;
    x.resize(static_cast<size_t>(n));
    copy_slab(t.shape, s.hf.slice_dim, s.hf.begin, s.hf.end, const_cast<float*>(t.data.data()), x.data(), false);
  }
  if (s.hf.transpose) x = transpose2d(x, want[0], want[1]);
  return x;
}

void write_hf_dir(const std::string& dir, const nlohmann::json& config, const HfStateDict& tensors,
                  uint64_t max_shard_bytes, DType dtype) {
  CLAW_CHECK(dtype == DType::f32 || dtype == DType::bf16, "Hugging Face export in {}", dtype_name(dtype));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("--output {}: cannot create the directory: {}", dir, ec.message());
  // Shards in name order, each up to max_shard_bytes (a tensor larger than
  // that gets a shard of its own), as transformers' save_pretrained does.
  std::vector<std::vector<const std::string*>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t bytes = t.data.size() * dtype_size(dtype);
    if (in_shard > 0 && max_shard_bytes > 0 && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(&name);
    in_shard += bytes;
    total += bytes;
  }
  const std::map<std::string, std::string> meta = {{"format", "pt"}};  // transformers requires it
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t k = 0; k < shards.size(); ++k) {
    const std::string file = shards.size() == 1 ? "model.safetensors"
                                                : fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, shards.size());
    std::vector<TensorView> views;
    std::vector<std::vector<uint16_t>> narrowed;  // bf16 copies, alive until the file is written
    narrowed.reserve(shards[k].size());
    for (const std::string* name : shards[k]) {
      const HfTensor& t = tensors.at(*name);
      if (dtype == DType::bf16) {
        narrowed.emplace_back(t.data.size());
        convert(DType::f32, t.data.data(), DType::bf16, narrowed.back().data(), static_cast<int64_t>(t.data.size()));
        views.push_back({*name, DType::bf16, t.shape, narrowed.back().data()});
      } else {
        views.push_back({*name, DType::f32, t.shape, t.data.data()});
      }
      weight_map[*name] = file;
    }
    write_safetensors(dir + "/" + file, views, meta);
  }
  if (shards.size() > 1)
    write_file_atomic(dir + "/model.safetensors.index.json",
                      nlohmann::json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2) + "\n");
  nlohmann::json cfg = config;
  if (dtype == DType::bf16) cfg["torch_dtype"] = "bfloat16";
  write_file_atomic(dir + "/config.json", cfg.dump(2) + "\n");
}

nlohmann::json read_hf_config(const std::string& dir, const std::string& flag) {
  const std::string cfg_path = dir + "/config.json";
  if (!std::ifstream(cfg_path))
    fail("{} {}: no {} (a Hugging Face model directory holds config.json and *.safetensors)", flag, dir, cfg_path);
  return read_json_file(cfg_path, "the model's config");
}

void read_hf_tensors(const std::string& path, HfStateDict& into) {
  const SafetensorsFile st(path);
  for (const TensorView& t : st.tensors()) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    HfTensor h{t.shape, std::vector<float>(static_cast<size_t>(n))};
    const auto* u16 = static_cast<const uint16_t*>(t.data);
    switch (t.dtype) {
      case DType::f32: std::memcpy(h.data.data(), t.data, n * sizeof(float)); break;
      case DType::bf16: for (int64_t i = 0; i < n; ++i) h.data[i] = bf16_to_f32(u16[i]); break;
      case DType::f16: for (int64_t i = 0; i < n; ++i) h.data[i] = f16_to_f32(u16[i]); break;
      default:
        if (t.name.find("rotary_emb") != std::string::npos || t.name.find("attn.bias") != std::string::npos) continue;
        fail("{}: tensor '{}' is {}; claw imports F32, BF16 and F16 weights", path, t.name, safetensors_dtype(t.dtype));
    }
    into[t.name] = std::move(h);
  }
}

HfModel read_hf_dir(const std::string& dir) {
  HfModel m;
  m.config = read_hf_config(dir);
  std::vector<std::string> files;
  const std::string index = dir + "/model.safetensors.index.json";
  if (fs::exists(index)) {
    const nlohmann::json j = read_json_file(index, "the safetensors index");
    std::set<std::string> unique;
    for (const auto& [name, file] : j.at("weight_map").items()) unique.insert(file.get<std::string>());
    files.assign(unique.begin(), unique.end());
  } else if (fs::exists(dir + "/model.safetensors")) {
    files = {"model.safetensors"};
  } else {
    fail("--input {}: no model.safetensors or model.safetensors.index.json (PyTorch .bin weights are not read; "
         "save with safe_serialization=True)",
         dir);
  }
  for (const std::string& file : files) read_hf_tensors(dir + "/" + file, m.tensors);
  return m;
}

void load_hf_params(const std::vector<model::Param*>& params, const HfStateDict& hf, const std::string& source) {
  for (model::Param* p : params) {
    const model::ParamSpec& s = p->spec;
    const std::vector<float> x = from_hf(s, hf, source);  // the whole tensor, checkpoint shape
    float* dst = p->data();
    const int64_t n = s.local_shape().numel();
    std::fill(dst, dst + n, 0.0f);  // vocabulary padding stays zero
    if (s.shard_dim < 0) {
      std::copy(x.begin(), x.end(), dst);
      continue;
    }
    // This rank's slice (tensor parallelism): local element i is global
    // element s.global_index(i); rows past the checkpoint shape's are padding.
    const std::vector<int64_t> ck = checkpoint_shape(s);
    const Shape& g = s.shape;
    for (int64_t i = 0; i < n; ++i) {
      int64_t gi = s.global_index(i), at = 0, stride = 1;
      bool inside = true;
      for (int d = g.ndim() - 1; d >= 0; --d) {
        const int64_t idx = gi % g[d];
        gi /= g[d];
        inside = inside && idx < ck[d];
        at += idx * stride;
        stride *= ck[d];
      }
      if (inside) dst[i] = x[at];
    }
  }
}

}  // namespace claw::ckpt
