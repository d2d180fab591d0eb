// claw models as GGUF files (llama.cpp's architectures "gpt2" and "llama"),
// by way of the Hugging Face state dict (ckpt/hf.h), whose names and
// layouts llama.cpp's converter maps from:
//
//   gpt2   token_embd, position_embd, blk.N.{attn_norm, attn_qkv,
//          attn_output, ffn_norm, ffn_up, ffn_down}, output_norm, output
//          (Conv1D weights transposed to [out, in]; output written even when
//          tied, as llama.cpp expects for GPT-2)
//   llama  token_embd, blk.N.{attn_norm, attn_q, attn_k, attn_v,
//          attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down}, output_norm,
//          output (absent when tied). attn_q and attn_k rows are permuted
//          from HF's rotate-half order to llama.cpp's adjacent pairs (within
//          each head, row half * D/2 + i becomes row 2i + half), and back on
//          reading.
//
// Matrices are written in the chosen type (f32, bf16, q8_0, q4_0) when
// their rows are whole blocks, else f32; norms, biases and GPT-2's position
// embeddings stay f32. The tokenizer goes in as tokenizer.ggml.* (GPT-2
// byte-level BPE: tokens, merges, token types), or "no_vocab" when the
// model has none claw knows.
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
  kernels::WeightType type = kernels::WeightType::f32;
  std::string name = "claw";  // general.name
  GgufTokenizer tokenizer;
};

struct GgufWriteReport {
  int64_t tensors = 0, converted = 0, kept_f32 = 0;  // matrices converted to the type, or left f32
  uint64_t bytes = 0;                                // of tensor data
};

// get: a claw parameter's values at its checkpoint shape (as to_hf takes).
GgufWriteReport write_gguf_model(const std::string& path, const model::ModelConfig& cfg,
                                 const std::function<std::vector<float>(const std::string&)>& get,
                                 const GgufExportOptions& opts);

struct GgufModel {
  std::string arch;  // "gpt2" or "llama"
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
