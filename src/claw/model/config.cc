#include "claw/model/config.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "claw/core/error.h"

namespace claw::model {

std::string_view to_string(Norm n) { return n == Norm::layernorm ? "LayerNorm" : "RMSNorm"; }
std::string_view to_string(Position p) { return p == Position::learned ? "learned_absolute" : "rope"; }
std::string_view to_string(Mlp m) { return m == Mlp::gelu ? "gelu" : "swiglu"; }

int64_t ModelConfig::padded_vocab_size(int tp) const {
  int64_t m = make_vocab_size_divisible_by * tp;
  return (vocab_size + m - 1) / m * m;
}

double LoraConfig::scale() const {
  return rslora ? alpha / std::sqrt(static_cast<double>(rank)) : alpha / static_cast<double>(rank);
}

bool LoraConfig::targets(std::string_view megatron, std::string_view hf) const {
  for (const std::string& t : target_modules)
    if (t == "all-linear" || t == megatron || t == hf) return true;
  return false;
}

void ModelConfig::validate() const {
  auto positive = [](int64_t v, const char* flag) {
    if (v <= 0) fail("{} must be positive (got {})", flag, v);
  };
  positive(num_layers, "--num-layers");
  positive(hidden_size, "--hidden-size");
  positive(num_attention_heads, "--num-attention-heads");
  positive(vocab_size, "--vocab-size");
  positive(make_vocab_size_divisible_by, "--make-vocab-size-divisible-by");
  positive(max_position_embeddings, "--max-position-embeddings");
  // Shapes beyond these are typos, refused before anything sizes a vector
  // from them (a shape-only model, as the planner builds, holds an object per
  // layer): within them every count derived from the shape (parameters,
  // bytes per layer or per model) fits in 64 bits.
  auto at_most = [](int64_t v, int64_t limit, const char* flag, const char* why) {
    if (v > limit) fail("{} {} is too large: at most {} ({})", flag, v, limit, why);
  };
  at_most(num_layers, kMaxLayers, "--num-layers", "the deepest published transformers have about 1000 layers");
  at_most(hidden_size, kMaxWidth, "--hidden-size", "about 40 times the widest published model");
  at_most(ffn_hidden_size, 4 * kMaxWidth, "--ffn-hidden-size", "4 x the largest --hidden-size");
  at_most(num_attention_heads, kMaxWidth, "--num-attention-heads", "the largest --hidden-size");
  at_most(num_query_groups, kMaxWidth, "--num-query-groups", "the largest --hidden-size");
  at_most(kv_channels, kMaxWidth, "--kv-channels", "the largest --hidden-size");
  at_most(vocab_size, kMaxVocab, "--vocab-size", "token ids are 32-bit");
  at_most(make_vocab_size_divisible_by, kMaxVocab, "--make-vocab-size-divisible-by", "token ids are 32-bit");
  at_most(max_position_embeddings, kMaxPositions, "--max-position-embeddings",
          "the longest published contexts are about 10M tokens");
  if (num_query_groups < 0) fail("--num-query-groups must be >= 0 (0 means one group per head), got {}", num_query_groups);
  if (kv_channels < 0) fail("--kv-channels must be >= 0 (0 means hidden/heads), got {}", kv_channels);
  if (ffn_hidden_size < 0) fail("--ffn-hidden-size must be >= 0 (0 means 4 x hidden), got {}", ffn_hidden_size);
  if (kv_channels == 0 && hidden_size % num_attention_heads != 0)
    fail("--hidden-size {} is not divisible by --num-attention-heads {}; use a multiple of {} (e.g. {}) or set --kv-channels",
         hidden_size, num_attention_heads, num_attention_heads,
         (hidden_size / num_attention_heads + 1) * num_attention_heads);
  if (num_attention_heads % kv_heads() != 0)
    fail("--num-attention-heads {} is not divisible by --num-query-groups {}; the group count must divide the head count",
         num_attention_heads, kv_heads());
  if (num_attention_heads * head_dim() > kMaxWidth)
    fail("--num-attention-heads {} x head dimension {} (--kv-channels or hidden/heads) is too large: at most {} "
         "(about 40 times the widest published model)",
         num_attention_heads, head_dim(), kMaxWidth);
  if (position_embedding_type == Position::rope && head_dim() % 2 != 0)
    fail("rotary embeddings need an even head dimension (--kv-channels or hidden/heads), got {}", head_dim());
  if (rotary_base <= 0) fail("--rotary-base must be positive, got {}", rotary_base);
  if (!(norm_epsilon > 0)) fail("--norm-epsilon must be positive, got {}", norm_epsilon);
  if (!(hidden_dropout >= 0 && hidden_dropout < 1)) fail("--hidden-dropout must be in [0, 1), got {}", hidden_dropout);
  if (lora.rank < 0 || lora.rank > kMaxWidth) fail("--lora-rank must be in [0, {}] (0: no adapters), got {}", kMaxWidth, lora.rank);
  if (lora.enabled()) {
    if (!(lora.alpha > 0)) fail("--lora-alpha must be positive, got {}", lora.alpha);
    if (!(lora.dropout >= 0 && lora.dropout < 1)) fail("--lora-dropout must be in [0, 1), got {}", lora.dropout);
    if (lora.target_modules.empty()) fail("--lora-target-modules names no layer");
    const bool gpt2 = position_embedding_type == Position::learned;
    const std::vector<std::string_view> known =
        gpt2 ? std::vector<std::string_view>{"all-linear", "linear_qkv", "linear_proj", "linear_fc1", "linear_fc2",
                                             "c_attn", "c_proj", "c_fc"}
             : std::vector<std::string_view>{"all-linear", "linear_qkv", "linear_proj", "linear_fc1", "linear_fc2",
                                             "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                             "down_proj"};
    for (const std::string& t : lora.target_modules)
      if (std::find(known.begin(), known.end(), t) == known.end())
        fail("--lora-target-modules: '{}' names no linear layer of this {} model; valid: {}", t,
             gpt2 ? "GPT-2" : "Llama", fmt::join(known, ", "));
  }
  if (!(init_method_std > 0)) fail("--init-method-std must be positive, got {}", init_method_std);
}

int64_t ModelConfig::num_params() const {
  const int64_t C = hidden_size, D = head_dim(), H = num_attention_heads, G = kv_heads(), F = ffn(),
                Vp = padded_vocab_size();
  const int64_t b = add_bias_linear ? 1 : 0;
  const int64_t norm = normalization == Norm::layernorm ? 2 * C : C;
  int64_t attn = C * H * D + 2 * C * G * D + H * D * C + b * (H * D + 2 * G * D + C);
  int64_t ffn_params = mlp == Mlp::gelu ? 2 * C * F + b * (F + C) : 3 * C * F + b * (2 * F + C);
  int64_t block = 2 * norm + attn + ffn_params;
  int64_t embed = Vp * C + (position_embedding_type == Position::learned ? max_position_embeddings * C : 0);
  int64_t head = tied() ? 0 : Vp * C;
  return embed + num_layers * block + norm + head;
}

int64_t ModelConfig::num_matmul_params() const {
  int64_t lookup = padded_vocab_size() * hidden_size +
                   (position_embedding_type == Position::learned ? max_position_embeddings * hidden_size : 0);
  int64_t n = num_params() - lookup;
  return tied() ? n + padded_vocab_size() * hidden_size : n;
}

double ModelConfig::flops_per_token(int64_t seq_length) const {
  return 6.0 * static_cast<double>(num_matmul_params()) +
         12.0 * num_layers * num_attention_heads * head_dim() * static_cast<double>(seq_length);
}

namespace {
ModelConfig gpt2(std::string name, int64_t layers, int64_t hidden, int64_t heads) {
  ModelConfig c;
  c.name = std::move(name);
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.num_attention_heads = heads;
  c.vocab_size = 50257;
  c.max_position_embeddings = 1024;
  return c;
}

ModelConfig llama(std::string name, int64_t layers, int64_t hidden, int64_t heads, int64_t groups, int64_t ffn,
                  int64_t vocab, double theta, int64_t max_pos) {
  ModelConfig c;
  c.name = std::move(name);
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.num_attention_heads = heads;
  c.num_query_groups = groups;
  c.ffn_hidden_size = ffn;
  c.vocab_size = vocab;
  c.max_position_embeddings = max_pos;
  c.normalization = Norm::rmsnorm;
  c.position_embedding_type = Position::rope;
  c.rotary_base = theta;
  c.mlp = Mlp::swiglu;
  c.add_bias_linear = false;
  c.untie_embeddings_and_output_weights = true;
  return c;
}
}  // namespace

std::vector<std::string> preset_names() {
  return {"gpt2-tiny", "gpt2-124m", "llama-tiny", "llama3.2-1b", "llama3-8b", "llama3-70b", "llama3-405b", "gpt3-175b"};
}

ModelConfig model_preset(std::string_view name) {
  if (name == "gpt2-tiny") return gpt2("gpt2-tiny", 4, 256, 4);
  if (name == "gpt2-124m") return gpt2("gpt2-124m", 12, 768, 12);
  if (name == "gpt3-175b") {
    ModelConfig c = gpt2("gpt3-175b", 96, 12288, 96);
    c.max_position_embeddings = 2048;
    return c;
  }
  // llama-tiny uses the GPT-2 vocabulary so it trains on the built-in corpus.
  if (name == "llama-tiny") return llama("llama-tiny", 4, 256, 8, 2, 768, 50257, 10000.0, 1024);
  if (name == "llama3.2-1b") {  // Llama 3.2 1B: tied embeddings, 1.24B parameters
    ModelConfig c = llama("llama3.2-1b", 16, 2048, 32, 8, 8192, 128256, 500000.0, 8192);
    c.untie_embeddings_and_output_weights = false;
    return c;
  }
  if (name == "llama3-8b") return llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 500000.0, 8192);
  if (name == "llama3-70b") return llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 500000.0, 8192);
  if (name == "llama3-405b") return llama("llama3-405b", 126, 16384, 128, 8, 53248, 128256, 500000.0, 8192);
  fail("unknown --model '{}'; valid presets: {}", name, fmt::join(preset_names(), ", "));
}

}  // namespace claw::model
