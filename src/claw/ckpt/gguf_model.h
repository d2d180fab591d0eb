// claw models as GGUF files, by way of the Hugging Face state dict
// (ckpt/hf.h), whose names and layouts llama.cpp's converter maps from; the
// architectures and their tensor tables are gguf_arch.h's (gpt2, llama with
// Mistral's and Mixtral's, qwen2, qwen3, qwen3moe, phi3, gemma2, gemma3,
// olmo2, deepseek2).
//
// Matrices (a layer's stacked experts too) are written in the chosen type
// (f32, bf16, f16, q8_0, q4_0) when their rows are whole blocks, else f32;
// norms, biases, routers and GPT-2's position embeddings stay f32. The
// tokenizer goes in as tokenizer.ggml.* (GPT-2 byte-level BPE: tokens,
// merges, token types), or "no_vocab" when the model has none claw knows.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "claw/ckpt/hf.h"
#include "claw/kernels/cpu/quant.h"
#include "claw/model/config.h"
#include "claw/model/param.h"

namespace claw::ckpt {

// A GPT-2-style byte-level BPE vocabulary as GGUF stores it.
struct GgufTokenizer {
  std::vector<std::string> tokens;  // by id, in GPT-2's byte alphabet (encoder.json's keys)
  std::vector<std::string> merges;  // "a b", by rank
  int32_t eos = -1;
  std::string chat_template;  // Jinja source written as tokenizer.chat_template ("" : none)
  bool empty() const { return tokens.empty(); }
};

struct GgufExportOptions {
  kernels::WeightType type = kernels::WeightType::f32;  // every matrix in it, unless recipe is given
  std::string recipe;  // a file type of gguf_recipe.h ("q4_k_m": llama-quantize's types per tensor)
  std::string name = "claw";  // general.name
  GgufTokenizer tokenizer;
};

struct GgufWriteReport {
  int64_t tensors = 0, converted = 0, kept_f32 = 0;  // matrices converted to the type, or left f32
  std::map<std::string, int64_t> types;              // matrices per type written
  uint64_t bytes = 0;                                // of tensor data
};

// get: a claw parameter's values at its checkpoint shape (as to_hf takes).
// notes (if given): what llama.cpp will run differently from the model
// (gguf_arch::write_hparams), one line each.
GgufWriteReport write_gguf_model(const std::string& path, const model::ModelConfig& cfg,
                                 const std::function<std::vector<float>(const std::string&)>& get,
                                 const GgufExportOptions& opts, std::vector<std::string>* notes = nullptr);

struct GgufModel {
  std::string arch;  // llama.cpp's architecture (gguf_arch::architectures())
  std::string name;  // general.name
  model::ModelConfig cfg;
  // A tensor as fp32 under its HF name and layout (load_hf_params), read
  // from the file when called; `names` lists them.
  std::function<HfTensor(const std::string&)> read_tensor;
  std::vector<std::string> names;
  HfStateDict all_tensors() const;  // every one at once (tests)
  // The matrices stored in bf16, q8_0 or q4_0, as they are: [out, in] rows
  // in claw's order, by HF name.
  std::map<std::string, kernels::WeightMatrix> matrices;
  kernels::WeightType weight_type = kernels::WeightType::f32;  // the type of most matrices
  // Every tokenizer.* key of the file (gguf_tokenizer.h reads them: the
  // vocabulary with its pre-tokenizer, special ids, chat template).
  nlohmann::json tokenizer_metadata = nlohmann::json::object();
};
GgufModel read_gguf_model(const std::string& path);

// Every parameter's values from the file (load_hf_params, reading one
// tensor at a time).
void load_gguf_params(const GgufModel& g, const std::vector<model::Param*>& params, const std::string& source);

// The linear-layer weights that are stored in a low-precision type in the
// file, as this rank's matrices (GPT::set_inference_weights' `given`),
// keyed by claw's canonical names; vocabulary padding rows are zero. A
// matrix that is one parameter whole is moved out of g.matrices (no copy).
std::map<std::string, kernels::WeightMatrix> gguf_matrices_for(GgufModel& g, const std::vector<model::Param*>& params);

}  // namespace claw::ckpt
