// llama.cpp's architectures as claw writes and reads them: for each, the
// GGUF tensors (names, layouts) made from the Hugging Face state dict and
// the {arch}.* hyperparameters made from the model's configuration, as
// llama.cpp's own converter (convert_hf_to_gguf.py) writes them and its
// loader (src/models/<arch>.cpp) expects them.
//
//   claw's Hugging Face class      GGUF architecture   what differs from llama's layout
//   GPT2LMHeadModel                gpt2                Conv1D weights transposed; output always written
//   Llama, Mistral, Mixtral        llama               q/k rows to adjacent RoPE pairs; experts stacked
//   Qwen2ForCausalLM               qwen2               NEOX RoPE (rows as HF has them)
//   Qwen3ForCausalLM               qwen3               per-head attn_q_norm / attn_k_norm
//   Qwen3MoeForCausalLM            qwen3moe            experts stacked (ffn_*_exps), ffn_gate_inp
//   Phi3ForCausalLM                phi3                fused attn_qkv and ffn_up (gate rows first);
//                                                      LongRoPE's rope_factors_long/short
//   Gemma2ForCausalLM              gemma2              norms stored as 1 + w; post norms; soft-caps
//   Gemma3ForCausalLM              gemma3              as gemma2, q/k norms, the windowed RoPE base
//   Olmo2ForCausalLM               olmo2               post norms only; full-width q/k norms
//   DeepseekV3ForCausalLM          deepseek2           latent attention with kv_b_proj split into
//                                                      attn_k_b (transposed) and attn_v_b; the router's
//                                                      bias as exp_probs_b; shared experts (_shexp)
//
// Where llama.cpp's graph has no key for something claw's model has, the
// export folds it into the weights when that is exact (Gemma's
// query_pre_attn_scalar into the queries), refuses when it cannot be
// expressed (a Qwen3-MoE dense layer), and otherwise writes the model's
// value under the converter's key and reports what llama.cpp runs
// differently (Mistral's and Phi-3's windows, which llama.cpp ignores).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "claw/ckpt/gguf.h"
#include "claw/model/config.h"

namespace claw::ckpt::gguf_arch {

// One GGUF tensor and the Hugging Face tensors it is made of.
struct Entry {
  std::string gguf;
  std::vector<std::string> hf;  // one; or a layer's experts, stacked on a new first dimension
  bool stacked = false;
  bool transpose = false;     // HF stores [in, out] (GPT-2's Conv1D)
  int64_t permute_heads = 0;  // llama q/k: rotate-half rows to adjacent pairs, within each of this many heads
  bool linear = false;        // a linear layer's weight (stored in the chosen type)
  float add = 0;              // added on writing and subtracted on reading (Gemma's norms: 1 + w)
  float mul = 1;              // times this after `add` on writing (a scale folded in; reading keeps it)
  // DeepSeek's kv_b_proj [heads (nope + value), kv_lora] in two: each head's
  // key rows transposed, [heads, kv_lora, nope] (attn_k_b), and its value
  // rows, [heads, value, kv_lora] (attn_v_b).
  enum class Part { whole, kv_b_keys, kv_b_values } part = Part::whole;
  int64_t heads = 0, nope = 0, value = 0;
  bool legacy = false;  // read, never written (older files' attn_kv_b, kv_b_proj whole)
};

// llama.cpp's architecture for a model whose Hugging Face config.json is
// `hf_config` (hf_config(c)); fails naming the class when it has none.
std::string architecture_of(const nlohmann::json& hf_config);

// Every tensor the architecture may hold for this model, in file order.
std::vector<Entry> tensor_table(const std::string& arch, const model::ModelConfig& c);

// Whether the architecture writes output.weight even when it is the
// embeddings (llama.cpp requires it for gpt2 and olmo2), or never (gemma2).
enum class Output { when_untied, always, never };
Output output_rule(const std::string& arch);

// The {arch}.* hyperparameters (and tensors that come from the
// configuration: LongRoPE's factors). Returns what llama.cpp will run
// differently from the model, one line each, for the export to report;
// fails where the file could not express the model.
std::vector<std::string> write_hparams(gguf::Writer& w, const std::string& arch, const model::ModelConfig& c);

// The multiplier write_hparams' tensor_table folds into the queries (or
// Gemma 3's q norm): claw's attention scale over the one llama.cpp uses.
double folded_query_scale(const std::string& arch, const model::ModelConfig& c);

// The scalar llama.cpp's Gemma graphs scale queries by (1 / sqrt of it):
// hidden / heads for the 27B shapes (46 layers: gemma2, 62: gemma3), else
// the head size. What a file's query_pre_attn_scalar is, read back.
double gemma_query_scalar(const std::string& arch, int64_t layers, int64_t hidden, int64_t heads, int64_t head_dim);

// The transformers config.json a GGUF file's metadata describes, for
// model_from_hf_config. Fails naming the key that is missing or invalid.
nlohmann::json hf_config_of(const gguf::Reader& r, const std::string& path, const std::string& arch);

// The architectures claw reads and writes.
const std::vector<std::string>& architectures();

// Tensors a file of the architecture may hold beside tensor_table's (read
// by hf_config_of).
bool is_config_tensor(const std::string& name);

}  // namespace claw::ckpt::gguf_arch
