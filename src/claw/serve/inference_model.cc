#include "claw/serve/inference_model.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "claw/ckpt/checkpoint.h"
#include "claw/ckpt/format.h"
#include "claw/ckpt/hf.h"
#include "claw/ckpt/shards.h"
#include "claw/model/config_flags.h"
#include "claw/core/error.h"
#include "claw/ckpt/gguf_model.h"
#include "claw/ckpt/gguf_tokenizer.h"
#include "claw/data/builtin_corpus.h"
#include "claw/data/gpt2_bpe.h"
#include "claw/data/hf_tokenizer.h"
#include "claw/kernels/cpu/blas.h"

namespace claw::serve {
namespace {

namespace fs = std::filesystem;

// The model for m.cfg, split over the job's TP group when there is one.
std::unique_ptr<model::GPT> make_model(const InferenceModelOptions& o, InferenceModel& m) {
  if (o.parallel && o.parallel->grid().tp > 1) {
    if (m.cfg.moe.enabled())
      fail("{}: {} experts per MoE layer: generation under tensor parallelism (mpirun -np {}) runs dense models for "
           "now; run this model on one rank",
           o.path, m.cfg.moe.num_experts, o.parallel->grid().tp);
    m.tp_groups = model::make_tensor_parallel(*o.world, *o.parallel, m.cfg, /*sequence_parallel=*/false);
    return std::make_unique<model::GPT>(m.cfg, model::StoreOptions{}, m.tp_groups.tp);
  }
  return std::make_unique<model::GPT>(m.cfg);
}

bool is_claw_checkpoint(const fs::path& p) {
  if (fs::exists(p / "metadata.json") || fs::exists(p / "latest_checkpointed_iteration.txt")) return true;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(p, ec))
    if (e.is_directory() && e.path().filename().string().starts_with("iter_")) return true;
  return false;
}

std::string arg(const nlohmann::json& args, const char* name) {
  return args.is_object() && args.contains(name) && args[name].is_string() ? args[name].get<std::string>() : "";
}

std::string dir_name(const fs::path& p) {
  fs::path q = fs::weakly_canonical(p);
  if (q.filename().string().starts_with("iter_")) q = q.parent_path();
  return q.filename().string();
}

void load_claw(const InferenceModelOptions& o, InferenceModel& m, data::TokenizerOptions& tok) {
  const std::string d = ckpt::resolve_load_dir(o.path, o.step, "--model");
  const ckpt::Metadata meta = ckpt::Metadata::read(d);
  m.cfg = model::model_from_flags_json(meta.model, "checkpoint " + d);
  m.cfg.hidden_dropout = 0;
  m.gpt = make_model(o, m);
  const std::vector<ckpt::Shard> shards = ckpt::collect_shards({&m.gpt->store()}, nullptr, {.optimizer = false});
  ckpt::load_shards(d, meta, shards);
  m.source = fmt::format("claw checkpoint {} (iteration {})", d, meta.iteration);
  if (tok.type.empty() && !arg(meta.args, "tokenizer-type").empty()) {
    tok.type = arg(meta.args, "tokenizer-type");
    tok.vocab_file = arg(meta.args, "vocab-file");
    tok.merge_file = arg(meta.args, "merge-file");
    tok.model_file = arg(meta.args, "tokenizer-model");
    tok.tiktoken_pattern = arg(meta.args, "tiktoken-pattern");
  }
}

void load_hf(const InferenceModelOptions& o, InferenceModel& m, data::TokenizerOptions& tok) {
  const ckpt::HfModel hf = ckpt::read_hf_dir(o.path);
  m.cfg = ckpt::model_from_hf_config(hf.config, o.path + "/config.json");
  m.cfg.hidden_dropout = 0;
  m.hf_type = hf.config.value("model_type", "");
  m.gpt = make_model(o, m);
  ckpt::load_hf_params(m.gpt->params(), hf.tensors, o.path);
  m.source = fmt::format("Hugging Face {} ({})", o.path, m.hf_type.empty() ? "?" : m.hf_type);
  for (const char* key : {"eos_token_id"}) {
    const nlohmann::json& e = hf.config.contains(key) ? hf.config[key] : nlohmann::json();
    if (e.is_number_integer()) m.eos.push_back(e.get<int32_t>());
    if (e.is_array())
      for (const auto& x : e)
        if (x.is_number_integer()) m.eos.push_back(x.get<int32_t>());
  }
  const fs::path dir(o.path);
  if (tok.type.empty() && fs::exists(dir / "tokenizer.json")) {
    tok.type = "HFTokenizer";  // with its tokenizer_config.json: template, BOS, EOS
    tok.model_file = dir.string();
  } else if (tok.type.empty() && fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt")) {
    tok.type = "GPT2BPETokenizer";
    tok.vocab_file = (dir / "vocab.json").string();
    tok.merge_file = (dir / "merges.txt").string();
  }
}

// Returns the GGUF file's linear weights as they are stored, when they are
// what will be served (`want`: the type asked for, if any); their fp32
// parameters are then not read at all (untouched pages of the parameter
// arena: the peak memory of loading is the stored weights, not an fp32 copy).
std::map<std::string, kernels::WeightMatrix> load_gguf(const InferenceModelOptions& o, InferenceModel& m,
                                                       data::TokenizerOptions& tok,
                                                       std::optional<kernels::WeightType> want,
                                                       kernels::WeightType* file_type,
                                                       std::unique_ptr<data::Tokenizer>* gguf_tokenizer) {
  ckpt::GgufModel g = ckpt::read_gguf_model(o.path);
  m.cfg = g.cfg;
  m.hf_type = g.arch;
  m.gpt = make_model(o, m);
  *file_type = g.weight_type;
  const kernels::WeightType served = want ? *want : g.weight_type;
  std::map<std::string, kernels::WeightMatrix> stored;
  if (served != kernels::WeightType::f32) stored = ckpt::gguf_matrices_for(g, m.gpt->params());
  g.matrices.clear();
  // --dtype given: the matrices of another type are converted from fp32;
  // otherwise each is served in its file's type (a Q4_K_M file's q4_k and
  // q6_k, a Q4_0 file's q6_k output layer).
  if (want) std::erase_if(stored, [&](const auto& kv) { return kv.second.type() != served; });
  // fp32 values for what is not served as a matrix, and for the embeddings
  // always (looked up by row; a tied model's output layer may multiply by
  // the file's matrix of them too).
  std::vector<model::Param*> rest;
  for (model::Param* p : m.gpt->params())
    if (!stored.count(p->spec.name) || p->spec.name == "embedding.word_embeddings.weight") rest.push_back(p);
  ckpt::load_gguf_params(g, rest, o.path);
  m.source = fmt::format("GGUF {} ({}, {})", o.path, g.arch, kernels::weight_type_name(g.weight_type));
  const nlohmann::json& vocab = g.tokenizer_metadata;
  if (tok.type.empty() && vocab.value("tokenizer.ggml.model", "") == "gpt2" &&
      vocab.contains("tokenizer.ggml.tokens")) {
    // The file's vocabulary with its pre-tokenizer, special tokens and
    // template (ckpt/gguf_tokenizer.h).
    ckpt::GgufVocabulary v = ckpt::gguf_vocabulary(g.tokenizer_metadata, o.path);
    *gguf_tokenizer = std::move(v.tokenizer);
    for (int32_t id : {v.eos, v.eot})
      if (id >= 0 && std::find(m.eos.begin(), m.eos.end(), id) == m.eos.end()) m.eos.push_back(id);
    m.chat_template = v.chat_template;
    m.bos = v.bos;
  }
  return stored;
}

}  // namespace

std::string InferenceModel::weights_summary() const {
  return fmt::format("weights {} ({} matrices{}), {:.1f} MiB read a token", kernels::weight_type_name(weight_type),
                     weights.converted + weights.kept_f32,
                     weights.kept_f32 && weights.converted ? fmt::format("; {} kept f32", weights.kept_f32) : "",
                     weights.bytes / 1048576.0);
}

InferenceModel load_inference_model(const InferenceModelOptions& o) {
  if (o.path.empty())
    fail("--model is required: a claw checkpoint directory, a Hugging Face model directory or a GGUF file");
  std::optional<kernels::WeightType> want;
  if (o.dtype != "auto") {
    want = kernels::parse_weight_type(o.dtype);
    if (!want) fail("--dtype '{}': valid are auto, {}", o.dtype, kernels::kWeightTypeChoices);
  }
  const data::TokenizerOptions& given = o.tokenizer;
  if (given.type.empty() && (!given.vocab_file.empty() || !given.merge_file.empty() || !given.model_file.empty()))
    fail("--vocab-file, --merge-file and --tokenizer-model need --tokenizer-type (without it the model's own "
         "tokenizer is used)");
  const fs::path p(o.path);
  if (!fs::exists(p)) fail("--model {}: no such file or directory", o.path);
  InferenceModel m;
  m.name = dir_name(p);
  data::TokenizerOptions tok = o.tokenizer;
  kernels::WeightType file_type = kernels::WeightType::f32;
  std::map<std::string, kernels::WeightMatrix> stored;
  std::unique_ptr<data::Tokenizer> gguf_tok;
  if (fs::is_regular_file(p))
    stored = load_gguf(o, m, tok, want, &file_type, &gguf_tok);
  else if (fs::is_directory(p) && fs::exists(p / "config.json"))
    load_hf(o, m, tok);
  else if (fs::is_directory(p) && is_claw_checkpoint(p))
    load_claw(o, m, tok);
  else
    fail("--model {}: neither a claw checkpoint (metadata.json, iter_* directories), a Hugging Face directory "
         "(config.json + safetensors) nor a GGUF file",
         o.path);
  m.gpt->store().refresh_compute(CpuCtx{1});
  m.weight_type = want ? *want : file_type;
  m.weights = m.gpt->set_inference_weights(CpuCtx{kernels::default_num_threads()}, m.weight_type, &stored,
                                           /*release_fp32=*/true);
  stored.clear();
  if (gguf_tok) m.tokenizer = std::move(gguf_tok);
  // Without a recorded tokenizer, GPT-2's vocabulary gets the built-in GPT-2 BPE.
  if (tok.type.empty() && !m.tokenizer && m.cfg.vocab_size == 50257) tok.type = "GPT2BPETokenizer";
  if (tok.type == "GPT2BPETokenizer" && tok.vocab_file.empty() && tok.merge_file.empty()) {
    tok.vocab_file = data::default_data_dir() + "/gpt2/encoder.json";
    tok.merge_file = data::default_data_dir() + "/gpt2/vocab.bpe";
  }
  if (!m.tokenizer && !tok.type.empty()) {
    m.tokenizer = data::make_tokenizer(tok);
    if (const auto* hf = dynamic_cast<const data::HfTokenizer*>(m.tokenizer.get())) {
      if (m.chat_template.empty()) m.chat_template = hf->chat_template();
      if (m.bos < 0) m.bos = hf->bos();
    }
  }
  if (m.tokenizer) {
    if (m.tokenizer->vocab_size() > m.cfg.vocab_size)
      fail("the tokenizer ({}, {} tokens) does not fit the model's vocabulary of {}", m.tokenizer->name(),
           m.tokenizer->vocab_size(), m.cfg.vocab_size);
    if (m.eos.empty()) m.eos.push_back(m.tokenizer->eod());
  }
  return m;
}

}  // namespace claw::serve
