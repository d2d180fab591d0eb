// The model and tokenizer that `claw generate`, `claw chat`, `claw serve`,
// `claw perplexity` (and any tool that runs a trained model)
// run, from whatever the user points --model at:
//
//   a claw checkpoint   a root with iter_* directories (the latest, or
//                       --ckpt-step) or an iter_* directory, saved at any
//                       layout and in any dtype: read into one whole model;
//   a Hugging Face dir  config.json + model.safetensors (or shards with an
//                       index): GPT2LMHeadModel or LlamaForCausalLM;
//   a GGUF file         llama.cpp's gpt2 or llama architecture, tensors in
//                       f32, f16, bf16, q8_0 or q4_0 (ckpt/gguf_model.h).
//
// The linear layers then run in --dtype: f32, bf16, f16, q8_0 or q4_0; "auto" is
// the GGUF file's type (its blocks used as they are), else f32. The fp32
// copies of converted matrices are released.
//
// The tokenizer: --tokenizer-type and its files when given; else what the
// checkpoint was trained with (its recorded flags); else, for a Hugging Face
// directory with vocab.json + merges.txt, that GPT-2 BPE; else the built-in
// GPT-2 BPE (<data dir>/gpt2) when the vocabulary is GPT-2's. Models without
// a tokenizer still take and give token ids (--prompt-tokens, the API's
// token-id prompts).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "claw/data/tokenizer.h"
#include "claw/data/tokenizer_factory.h"
#include "claw/kernels/cpu/quant.h"
#include "claw/comm/parallel_state.h"
#include "claw/comm/world.h"
#include "claw/model/gpt.h"
#include "claw/model/tensor_parallel.h"

namespace claw::serve {

struct InferenceModelOptions {
  std::string path;       // --model
  int64_t step = -1;      // --ckpt-step
  std::string dtype = "auto";  // --dtype
  data::TokenizerOptions tokenizer{.type = ""};  // --tokenizer-type ... (type empty: infer)
  // Tensor parallelism (claw serve/generate under mpirun): the job's world
  // and rank grid, whose TP size splits the model; null: one rank.
  comm::World* world = nullptr;
  comm::ParallelState* parallel = nullptr;
};

struct InferenceModel {
  std::string name;      // what /v1/models lists: the directory's name
  std::string source;    // "claw checkpoint DIR (iteration N)" / "Hugging Face DIR (llama)"
  std::string hf_type;   // config.json's model_type ("gpt2", "llama"), empty for claw checkpoints
  model::ModelConfig cfg;
  model::TpGroups tp_groups;  // this rank's TP groups (kept alive for gpt)
  std::unique_ptr<model::GPT> gpt;
  std::unique_ptr<data::Tokenizer> tokenizer;  // null: token ids only
  std::vector<int32_t> eos;                    // ids that end generation
  // The model's own chat template (Jinja source: a GGUF file's
  // tokenizer.chat_template), "" when it has none; its BOS id, or -1.
  std::string chat_template;
  int32_t bos = -1;
  kernels::WeightType weight_type = kernels::WeightType::f32;  // of the linear layers
  model::GPT::InferenceWeights weights;
  // "weights q8_0 (29 matrices; 3 kept f32), 130.2 MiB a token reads"
  std::string weights_summary() const;
};

InferenceModel load_inference_model(const InferenceModelOptions& o);

}  // namespace claw::serve
