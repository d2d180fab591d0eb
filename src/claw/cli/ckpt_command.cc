#include "claw/cli/ckpt_command.h"

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <map>

#include <fmt/format.h>

#include "claw/ckpt/checkpoint.h"
#include "claw/ckpt/gguf_arch.h"
#include "claw/ckpt/gguf_model.h"
#include "claw/ckpt/gguf_recipe.h"
#include "claw/ckpt/hf.h"
#include "claw/ckpt/peft.h"
#include "claw/data/builtin_corpus.h"
#include "claw/data/chat_template.h"
#include "claw/data/file_io.h"
#include "claw/data/hf_tokenizer.h"
#include "claw/kernels/cpu/blas.h"
#include "claw/kernels/cpu/quant.h"
#include "claw/model/config_flags.h"
#include "claw/comm/group.h"
#include "claw/core/dtype_convert.h"
#include "claw/core/error.h"
#include "claw/model/gpt.h"

namespace claw::cli {

namespace {

std::string mib(double bytes) { return format_bytes(bytes); }

// "5GB", "500MB", "64KiB" or a byte count.
void check_format(const std::string& format, bool gguf_too) {
  if (format != "hf" && format != "peft" && !(gguf_too && format == "gguf"))
    fail("--format '{}' is not supported (hf: Hugging Face transformers; peft: a PEFT LoRA adapter{})", format,
         gguf_too ? "; gguf: one llama.cpp file" : "");
}

// A recorded string flag of the run that wrote a checkpoint ("" if none).
std::string recorded_arg(const ckpt::Metadata& meta, const char* key) {
  return meta.args.is_object() && meta.args.contains(key) && meta.args[key].is_string()
             ? meta.args[key].get<std::string>()
             : std::string();
}

// The `claw ckpt` commands that write a checkpoint (import, convert,
// merge-lora) never overwrite one and never move `latest` back: iteration
// `iteration` must be new under `save`, and no later one may be there.
void check_new_iteration(const std::string& save, int64_t iteration, const std::string& command) {
  std::error_code ec;
  const std::string dir = ckpt::iteration_dir(save, iteration);
  if (std::filesystem::exists(dir, ec))
    fail("{}: --save {} already holds iteration {} ({}); claw ckpt never overwrites a checkpoint: choose another "
         "--save", command, save, iteration, dir);
  if (const std::optional<int64_t> latest = ckpt::read_latest(save); latest && *latest > iteration)
    fail("{}: --save {} holds iteration {} as its latest; writing iteration {} there would move it back: choose "
         "another --save", command, save, *latest, iteration);
}

// Saves `gpt`'s parameters as a one-rank checkpoint (no optimizer state).
void save_one_rank(model::GPT& gpt, const std::string& root, int64_t iteration, nlohmann::json args,
                   nlohmann::json state) {
  comm::SelfGroup self("world");
  ckpt::Saver saver(self, {.root = root});
  ckpt::SaveInfo info{.iteration = iteration, .model = model::model_flags_json(gpt.config()), .args = std::move(args),
                      .state = std::move(state)};
  if (info.args.is_null()) info.args = nlohmann::json::object();
  if (info.state.is_null()) info.state = nlohmann::json::object();
  info.state["layout"] = {{"world_size", 1}, {"tp", 1}, {"pp", 1}, {"dp", 1}, {"zero_stage", 0},
                          {"sequence_parallel", false}};
  saver.save(ckpt::collect_shards({&gpt.store()}, nullptr, {.optimizer = false}), info);
}

// The GPT-2 BPE a checkpoint was trained with (its recorded flags, else the
// built-in files when the vocabulary is GPT-2's), as GGUF stores it; empty
// for other tokenizers.
ckpt::GgufTokenizer gguf_tokenizer(const ckpt::Metadata& meta, const model::ModelConfig& cfg) {
  auto arg = [&](const char* k) {
    return meta.args.is_object() && meta.args.contains(k) && meta.args[k].is_string() ? meta.args[k].get<std::string>()
                                                                                      : std::string();
  };
  std::string type = arg("tokenizer-type"), vocab = arg("vocab-file"), merges = arg("merge-file");
  if (type.empty() && cfg.vocab_size == 50257) type = "GPT2BPETokenizer";
  if (type != "GPT2BPETokenizer") return {};
  if (vocab.empty()) vocab = data::default_data_dir() + "/gpt2/encoder.json";
  if (merges.empty()) merges = data::default_data_dir() + "/gpt2/vocab.bpe";
  ckpt::GgufTokenizer t;
  const nlohmann::json enc = nlohmann::json::parse(data::read_file(vocab, "GPT-2 encoder file"));
  t.tokens.resize(enc.size());
  for (const auto& [tok, id] : enc.items()) {
    const int64_t i = id.get<int64_t>();
    if (i < 0 || i >= static_cast<int64_t>(t.tokens.size())) fail("{}: token id {} out of range", vocab, i);
    t.tokens[i] = tok;
    if (tok == "<|endoftext|>") t.eos = static_cast<int32_t>(i);
  }
  const std::string text = data::read_file(merges, "GPT-2 merges file");
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(at, nl - at);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty() && !(at == 0 && line.starts_with("#version"))) t.merges.push_back(line);
    at = nl + 1;
  }
  return t;
}

// The Hugging Face directory whose tokenizer a checkpoint uses: the one
// recorded with --tokenizer-type HFTokenizer, else the directory it was
// imported or fine-tuned from when that holds a tokenizer.json; "" if none.
std::string hf_tokenizer_dir(const ckpt::Metadata& meta) {
  if (recorded_arg(meta, "tokenizer-type") == "HFTokenizer")
    return std::filesystem::path(data::hf_tokenizer_json(recorded_arg(meta, "tokenizer-model"))).parent_path().string();
  for (const char* key : {"load-hf", "imported_from"}) {
    const std::string d = recorded_arg(meta, key);
    if (!d.empty() && std::filesystem::exists(std::filesystem::path(d) / "tokenizer.json")) return d;
  }
  return {};
}

// The tokenizer files of a Hugging Face export beside config.json, so that
// AutoTokenizer and generate() find what the checkpoint was trained with:
// a tokenizer.json directory's files as they are (tokenizer_config.json
// with `chat_template` replaced by --chat-template when given), or GPT-2's
// vocab.json + merges.txt; and generation_config.json with the BOS and EOS
// ids. Returns what was written, for the report.
std::string write_hf_tokenizer(const std::string& out, const ckpt::Metadata& meta, const model::ModelConfig& cfg,
                               const std::string& chat_template) {
  namespace fs = std::filesystem;
  const std::string template_source = chat_template.empty() ? "" : data::read_file(chat_template, "chat template");
  if (!chat_template.empty() && !data::chat_template(chat_template).jinja)
    fail("--chat-template {}: give a Jinja template file (FILE.jinja)", chat_template);
  auto write = [&](const std::string& name, const std::string& text) {
    std::FILE* f = std::fopen((fs::path(out) / name).c_str(), "wb");
    if (f == nullptr || std::fwrite(text.data(), 1, text.size(), f) != text.size() || std::fclose(f) != 0)
      fail("{}: cannot write {}", out, name);
  };
  nlohmann::json config = nlohmann::json::object(), generation = {{"_from_model_config", false}};
  std::string what;
  if (const std::string dir = hf_tokenizer_dir(meta); !dir.empty()) {
    const data::HfTokenizer tok = data::HfTokenizer::load((fs::path(dir) / "tokenizer.json").string());
    write("tokenizer.json", data::read_file((fs::path(dir) / "tokenizer.json").string(), "tokenizer.json"));
    if (fs::exists(fs::path(dir) / "tokenizer_config.json"))
      config = nlohmann::json::parse(
          data::read_file((fs::path(dir) / "tokenizer_config.json").string(), "tokenizer config"));
    for (const char* extra : {"special_tokens_map.json", "chat_template.jinja"})
      if (fs::exists(fs::path(dir) / extra) && (template_source.empty() || std::string(extra) != "chat_template.jinja"))
        write(extra, data::read_file((fs::path(dir) / extra).string(), extra));
    if (tok.bos() >= 0) generation["bos_token_id"] = tok.bos();
    generation["eos_token_id"] = tok.eod();
    what = fmt::format("tokenizer.json and tokenizer_config.json of {}", dir);
  } else if (recorded_arg(meta, "tokenizer-type") == "GPT2BPETokenizer" ||
             (recorded_arg(meta, "tokenizer-type").empty() && cfg.vocab_size == 50257)) {
    std::string vocab = recorded_arg(meta, "vocab-file"), merges = recorded_arg(meta, "merge-file");
    if (vocab.empty()) vocab = data::default_data_dir() + "/gpt2/encoder.json";
    if (merges.empty()) merges = data::default_data_dir() + "/gpt2/vocab.bpe";
    write("vocab.json", data::read_file(vocab, "GPT-2 encoder file"));
    write("merges.txt", data::read_file(merges, "GPT-2 merges file"));
    config = {{"tokenizer_class", "GPT2Tokenizer"}, {"bos_token", "<|endoftext|>"}, {"eos_token", "<|endoftext|>"},
              {"unk_token", "<|endoftext|>"}, {"model_max_length", cfg.max_position_embeddings},
              {"add_prefix_space", false}};
    generation["bos_token_id"] = 50256;
    generation["eos_token_id"] = 50256;
    what = "GPT-2's vocab.json and merges.txt";
  } else {
    if (!template_source.empty())
      fail("--chat-template: the checkpoint's tokenizer ({}) has no Hugging Face form claw writes",
           recorded_arg(meta, "tokenizer-type"));
    return "no tokenizer (its kind has no Hugging Face form claw writes)";
  }
  if (!template_source.empty()) config["chat_template"] = template_source;
  if (!config.empty()) write("tokenizer_config.json", config.dump(2));
  write("generation_config.json", generation.dump(2));
  return what + (template_source.empty() ? "" : ", chat template " + chat_template) + ", generation_config.json";
}

struct Inspect {
  std::string dir;
  int64_t step = -1;
  bool tensors = false, verify = false;

  void run() const {
    const std::string d = ckpt::resolve_load_dir(dir, step, "claw ckpt inspect");
    const ckpt::Metadata meta = ckpt::Metadata::read(d);
    const nlohmann::json& st = meta.state;
    fmt::print("checkpoint {}: iteration {}, format version {}\n", d, meta.iteration, meta.version);
    if (st.contains("layout")) {
      const auto& l = st["layout"];
      fmt::print("  saved at:   {} rank(s): TP {} x PP {} x DP {}, ZeRO stage {}{}\n", l.value("world_size", 0),
                 l.value("tp", 1), l.value("pp", 1), l.value("dp", 1), l.value("zero_stage", 0),
                 l.value("sequence_parallel", false) ? ", sequence parallel" : "");
    }
    if (st.contains("consumed_train_samples"))
      fmt::print("  state:      {} training samples consumed, {} validation; optimizer step {}; seed {}\n",
                 st.value("consumed_train_samples", int64_t{0}), st.value("consumed_valid_samples", int64_t{0}),
                 st.value("optimizer_steps", int64_t{0}), st.value("seed", uint64_t{0}));
    if (!meta.model.empty()) {
      const model::ModelConfig m = model::model_from_flags_json(meta.model, "checkpoint " + d);
      fmt::print("  model:      {}: {} layers, hidden {}, {} heads ({} KV groups), FFN {}, vocabulary {}, {}, {}, {}, "
                 "{} embeddings\n",
                 m.name, m.num_layers, m.hidden_size, m.num_attention_heads, m.kv_heads(), m.ffn(), m.vocab_size,
                 model::to_string(m.normalization), model::to_string(m.position_embedding_type),
                 model::to_string(m.mlp), m.tied() ? "tied" : "untied");
    }
    int64_t params = 0, n_model = 0, n_optim = 0;
    for (const ckpt::TensorMeta& t : meta.tensors) {
      int64_t n = 1;
      for (int64_t s : t.shape) n *= s;
      if (t.name.rfind("model.", 0) == 0) {
        params += n;
        ++n_model;
      } else {
        ++n_optim;
      }
    }
    uint64_t bytes = 0;
    std::string files;
    for (size_t i = 0; i < meta.files.size(); ++i) {
      struct stat s {};
      const std::string path = d + "/" + meta.files[i];
      const uint64_t size = ::stat(path.c_str(), &s) == 0 ? static_cast<uint64_t>(s.st_size) : 0;
      bytes += size;
      if (i < 4) files += fmt::format("{}{} {}", i ? ", " : "", meta.files[i], mib(static_cast<double>(size)));
    }
    if (meta.files.size() > 4) files += ", ...";
    fmt::print("  files:      {} ({}), {} in all\n", meta.files.size(), files, mib(static_cast<double>(bytes)));
    fmt::print("  tensors:    {} model ({} parameters), {} optimizer state; {} chunks\n", n_model, params, n_optim,
               meta.chunks.size());
    if (tensors) {
      std::map<std::string, int> chunks;
      for (const ckpt::ChunkMeta& c : meta.chunks) ++chunks[c.tensor];
      for (const ckpt::TensorMeta& t : meta.tensors)
        fmt::print("    {:<56} [{}] {} {} chunk(s)\n", t.name, fmt::join(t.shape, ", "), dtype_name(t.dtype),
                   chunks[t.name]);
    }
    if (verify) {
      ckpt::CheckpointReader reader(d, meta);
      for (const ckpt::TensorMeta& t : meta.tensors) reader.tensor(t.name);
      const uint64_t read = reader.bytes_read();
      fmt::print("  verified:   every chunk of {} tensors ({}) matches its checksums\n", meta.tensors.size(),
                 mib(static_cast<double>(read)));
    }
  }
};

struct Export {
  std::string load, format = "hf", output, max_shard = "5GB", type = "f32", chat_template;
  int64_t step = -1;

  void run() const {
    check_format(format, true);
    if (output.empty()) fail("claw ckpt export: --output DIR is required");
    if (!chat_template.empty() && format == "peft")
      fail("--chat-template is for --format hf and gguf (an adapter carries no tokenizer)");
    const uint64_t max_shard_bytes = parse_size("--max-shard-size", max_shard);
    const std::optional<ckpt::GgufRecipe> recipe = ckpt::parse_gguf_recipe(type);
    if (format == "gguf" && !recipe) fail("--type '{}': valid GGUF types are {}", type, ckpt::kGgufRecipeChoices);
    if (format != "gguf" && type != "f32" && type != "bf16")
      fail("--type {}: {} exports are f32 or bf16 (the others are for --format gguf)", type,
           format == "peft" ? "PEFT" : "Hugging Face");
    const std::string d = ckpt::resolve_load_dir(load, step);
    const ckpt::Metadata meta = ckpt::Metadata::read(d);
    const model::ModelConfig cfg = model::model_from_flags_json(meta.model, "checkpoint " + d);
    if (format == "peft") {
      if (!cfg.lora.enabled())
        fail("--format peft writes LoRA adapters; {} has none (its model has no --lora-rank): export it with --format "
             "hf", d);
      if (type != "f32") fail("--type {}: PEFT adapters are fp32 (the other types are for --format gguf)", type);
      if (!cfg.lora.modules_to_save.empty())
        fail("{} trains base parameters beside its adapters (--lora-modules-to-save {}), which --format peft does not "
             "write yet; fold everything into the model with claw ckpt merge-lora and export that with --format hf",
             d, join_names(cfg.lora.modules_to_save));
      ckpt::CheckpointReader reader(d, meta);
      // base_model_name_or_path: the Hugging Face directory the run started
      // from (--load-hf, or the base of an imported adapter) when there is one.
      std::string base = recorded_arg(meta, "load-hf");
      if (base.empty()) base = recorded_arg(meta, "base");
      if (!base.empty() && !std::filesystem::exists(base + "/config.json")) base.clear();
      const std::string from = recorded_arg(meta, "load");
      const nlohmann::json config = ckpt::peft_config(cfg, base);
      const ckpt::HfStateDict t =
          ckpt::to_peft(cfg, [&](const std::string& p) { return reader.tensor(ckpt::value_tensor(p)); });
      ckpt::write_peft_dir(output, config, t);
      fmt::print("exported the rank-{} LoRA adapters of {} (iteration {}) to {}: adapter_config.json (target_modules "
                 "{}) + adapter_model.safetensors ({} tensors); PEFT loads it over the Hugging Face form of the base "
                 "model ({})\n",
                 cfg.lora.rank, d, meta.iteration, output, config["target_modules"].dump(), t.size(),
                 !base.empty()   ? base
                 : !from.empty() ? "claw ckpt export --format hf --load " + from
                                 : "claw ckpt export --format hf of the checkpoint fine-tuned from");
      return;
    }
    if (cfg.lora.enabled())
      fail("{} holds LoRA adapters (rank {}): write them as a PEFT adapter with --format peft, or fold them into the "
           "weights first with claw ckpt merge-lora --load {} --save DIR and export that",
           d, cfg.lora.rank, load);
    ckpt::CheckpointReader reader(d, meta);
    if (format == "gguf") {
      ckpt::GgufExportOptions o{.type = recipe->base, .recipe = recipe->name,
                                .name = std::filesystem::path(d).parent_path().filename().string(),
                                .tokenizer = gguf_tokenizer(meta, cfg)};
      if (!chat_template.empty()) {  // a Jinja file, checked by parsing it, written as tokenizer.chat_template
        if (o.tokenizer.empty()) fail("--chat-template: {} has no tokenizer to write it with", d);
        const data::ChatTemplate t = data::chat_template(chat_template);
        if (!t.jinja) fail("--chat-template {}: give a Jinja template file (FILE.jinja)", chat_template);
        o.tokenizer.chat_template = data::read_file(chat_template, "chat template");
      }
      std::vector<std::string> notes;
      const ckpt::GgufWriteReport r = ckpt::write_gguf_model(
          output, cfg, [&](const std::string& p) { return reader.tensor(ckpt::value_tensor(p)); }, o, &notes);
      std::vector<std::string> mix;  // "12 q4_k, 4 q6_k"
      for (const auto& [t, n] : r.types) mix.push_back(fmt::format("{} {}", n, t));
      fmt::print("exported {} (iteration {}) to {}: GGUF {} {}, {} tensors, matrices {}{}, {} of tensor data, "
                 "tokenizer {}\n",
                 d, meta.iteration, output, ckpt::gguf_arch::architecture_of(ckpt::hf_config(cfg)), recipe->name,
                 r.tensors, fmt::join(mix, ", "),
                 recipe->base != kernels::WeightType::f32 && r.kept_f32
                     ? fmt::format(" ({} kept f32: rows not whole blocks)", r.kept_f32)
                     : "",
                 mib(static_cast<double>(r.bytes)), o.tokenizer.empty() ? "none (no_vocab)" : "GPT-2 BPE");
      for (const std::string& n : notes) fmt::print(stderr, "claw ckpt export: note: {}\n", n);
      return;
    }
    const ckpt::HfStateDict hf =
        ckpt::to_hf(cfg, [&](const std::string& p) { return reader.tensor(ckpt::value_tensor(p)); });
    const nlohmann::json config = ckpt::hf_config(cfg);
    ckpt::write_hf_dir(output, config, hf, max_shard_bytes, type == "bf16" ? DType::bf16 : DType::f32);
    const std::string tokenizer = write_hf_tokenizer(output, meta, cfg, chat_template);
    fmt::print("exported {} (iteration {}) to {}: {} ({} tensors, {}), config.json; {}\n", d, meta.iteration, output,
               config["architectures"][0].get<std::string>(), hf.size(), type, tokenizer);
  }
};

struct Import {
  std::string format = "hf", input, save, base_load, base_hf;

  void run() const {
    check_format(format, false);
    if (input.empty() || save.empty()) fail("claw ckpt import: --input DIR and --save DIR are required");
    if (format == "peft") {
      fmt::print("{}\n", import_peft());
      return;
    }
    if (!base_load.empty() || !base_hf.empty())
      fail("--load and --load-hf name the base model of --format peft; --format hf imports --input alone");
    check_new_iteration(save, 0, "claw ckpt import");
    fmt::print("{}\n", import_hf_checkpoint(input, save));
  }

  // A PEFT adapter over its base (a claw checkpoint, a Hugging Face
  // directory, or the adapter's base_model_name_or_path when that is a
  // local directory): one checkpoint of base + adapters at iteration 0.
  std::string import_peft() const {
    const ckpt::PeftAdapter adapter = ckpt::read_peft_dir(input);
    if (!base_load.empty() && !base_hf.empty()) fail("--load and --load-hf both name the base model; give one");
    std::string hf_dir = base_hf;
    if (base_load.empty() && hf_dir.empty()) {
      const nlohmann::json& b = adapter.config.contains("base_model_name_or_path")
                                    ? adapter.config["base_model_name_or_path"]
                                    : nlohmann::json();
      if (!b.is_string() || !std::filesystem::exists(b.get<std::string>() + "/config.json"))
        fail("--format peft needs the base model: --load CKPT (a claw checkpoint) or --load-hf HF_DIR ({}/"
             "adapter_config.json's base_model_name_or_path {} is no local Hugging Face directory)",
             input, b.dump());
      hf_dir = b.get<std::string>();
    }
    model::ModelConfig cfg;
    std::string from;
    std::optional<ckpt::HfModel> hf;
    std::string base_dir;
    if (!hf_dir.empty()) {
      hf = ckpt::read_hf_dir(hf_dir);
      cfg = ckpt::model_from_hf_config(hf->config, hf_dir + "/config.json");
      from = hf_dir;
    } else {
      base_dir = ckpt::resolve_load_dir(base_load, -1, "claw ckpt import --format peft");
      cfg = model::model_from_flags_json(ckpt::Metadata::read(base_dir).model, "checkpoint " + base_dir);
      if (cfg.lora.enabled())
        fail("--load {} holds LoRA adapters already; merge them first (claw ckpt merge-lora) or import over its base",
             base_dir);
      from = base_dir;
    }
    cfg.lora = ckpt::lora_from_peft(adapter, cfg, input);
    cfg.validate();
    model::GPT gpt(cfg);
    std::vector<model::Param*> base_params;
    for (model::Param* p : gpt.params())
      if (!model::is_lora_param(p->spec.name)) base_params.push_back(p);
    if (hf) {
      ckpt::load_hf_params(base_params, hf->tensors, hf_dir);
    } else {
      model::ModelConfig plain_cfg = cfg;
      plain_cfg.lora = {};
      model::GPT plain(plain_cfg);
      std::vector<ckpt::Shard> shards = ckpt::collect_shards({&plain.store()}, nullptr, {.optimizer = false});
      ckpt::load_shards(base_dir, ckpt::Metadata::read(base_dir), shards);
      for (model::Param* p : base_params)
        std::copy_n(plain.store().find(p->spec.name)->data(), p->spec.local_shape().numel(), p->data());
    }
    ckpt::load_peft_params(gpt.params(), adapter, input);
    check_new_iteration(save, 0, "claw ckpt import");
    save_one_rank(gpt, save, 0, {{"imported_from", input}, {"base", from}},
                  {{"consumed_train_samples", 0}, {"consumed_valid_samples", 0}, {"optimizer_steps", 0}});
    return fmt::format("imported the PEFT adapter {} (rank {}, alpha {}, targets {}) over {} into {}", input,
                       cfg.lora.rank, cfg.lora.alpha, fmt::join(cfg.lora.target_modules, ","), from,
                       ckpt::iteration_dir(save, 0));
  }
};

// Rewrites a checkpoint's parameters in another dtype (a bf16 release of an
// fp32 run, say): read as f32 on one process (widening is exact), narrowed
// with round-to-nearest-even, saved as a one-rank checkpoint at the same
// iteration with the same state. Optimizer moments are not carried: the
// result loads as parameters only.
struct Convert {
  std::string load, save, dtype;
  int64_t step = -1;

  void run() const {
    DType to = DType::f32;
    bool known = false;
    for (DType t : {DType::f32, DType::bf16, DType::f16, DType::e4m3, DType::e5m2})
      if (dtype == dtype_name(t)) to = t, known = true;
    if (!known) fail("--dtype '{}' is not one of f32, bf16, f16, fp8_e4m3, fp8_e5m2", dtype);
    const std::string d = ckpt::resolve_load_dir(load, step, "claw ckpt convert");
    const ckpt::Metadata meta = ckpt::Metadata::read(d);
    check_new_iteration(save, meta.iteration, "claw ckpt convert");
    const model::ModelConfig cfg = model::model_from_flags_json(meta.model, "checkpoint " + d);
    model::GPT gpt(cfg);
    std::vector<ckpt::Shard> shards = ckpt::collect_shards({&gpt.store()}, nullptr, {.optimizer = false});
    ckpt::load_shards(d, meta, shards);
    std::vector<std::vector<uint8_t>> held;
    for (ckpt::Shard& s : shards) {
      held.emplace_back(static_cast<size_t>(s.n) * dtype_size(to));
      convert(DType::f32, s.data, to, held.back().data(), s.n);
      s.data = held.back().data();
      s.dtype = to;
    }
    comm::SelfGroup self("world");
    ckpt::Saver saver(self, {.root = save});
    ckpt::SaveInfo info{.iteration = meta.iteration, .model = meta.model, .args = meta.args, .state = meta.state};
    if (info.args.is_null()) info.args = nlohmann::json::object();
    info.args["converted_from"] = d;
    if (info.state.is_null()) info.state = nlohmann::json::object();
    info.state["layout"] = {{"world_size", 1}, {"tp", 1}, {"pp", 1}, {"dp", 1}, {"zero_stage", 0},
                            {"sequence_parallel", false}};
    saver.save(shards, info);
    fmt::print("converted {} (iteration {}, {} parameters) to {} in {}; optimizer state not carried\n", d,
               meta.iteration, gpt.store().numel(), dtype_name(to), ckpt::iteration_dir(save, meta.iteration));
  }
};

// Folds a checkpoint's LoRA adapters into their weights (W += s B A) and
// saves the plain model, one rank, at the same iteration: what serving,
// Hugging Face export and further training without adapters read.
struct MergeLora {
  std::string load, save;
  int64_t step = -1;

  void run() const {
    const std::string d = ckpt::resolve_load_dir(load, step, "claw ckpt merge-lora");
    const ckpt::Metadata meta = ckpt::Metadata::read(d);
    check_new_iteration(save, meta.iteration, "claw ckpt merge-lora");
    const model::ModelConfig cfg = model::model_from_flags_json(meta.model, "checkpoint " + d);
    if (!cfg.lora.enabled()) fail("{} has no LoRA adapters (its model has no --lora-rank): nothing to merge", d);
    model::GPT with(cfg);
    std::vector<ckpt::Shard> shards = ckpt::collect_shards({&with.store()}, nullptr, {.optimizer = false});
    ckpt::load_shards(d, meta, shards);
    const CpuCtx cpu{kernels::default_num_threads()};
    with.merge_lora(cpu);
    model::ModelConfig plain_cfg = cfg;
    plain_cfg.lora = {};
    model::GPT plain(plain_cfg);
    for (model::Param* p : plain.store().params()) {
      const model::Param* q = with.store().find(p->spec.name);
      CLAW_CHECK(q != nullptr, "{} has no {}", d, p->spec.name);
      std::copy_n(q->data(), p->spec.local_shape().numel(), p->data());
    }
    nlohmann::json args = meta.args.is_object() ? meta.args : nlohmann::json::object();
    args["merged_from"] = d;
    save_one_rank(plain, save, meta.iteration, args, meta.state);
    fmt::print("merged the rank-{} LoRA adapters of {} (iteration {}, scale {}) into {} ({} parameters)\n",
               cfg.lora.rank, d, meta.iteration, cfg.lora.scale(), ckpt::iteration_dir(save, meta.iteration),
               plain.store().numel());
  }
};

}  // namespace

std::string import_hf_checkpoint(const std::string& input, const std::string& save) {
  const ckpt::HfModel hf = ckpt::read_hf_dir(input);
  const model::ModelConfig cfg = ckpt::model_from_hf_config(hf.config, input + "/config.json");
  model::GPT gpt(cfg);
  ckpt::load_hf_params(gpt.params(), hf.tensors, input);
  comm::SelfGroup self("world");
  ckpt::Saver saver(self, {.root = save});
  ckpt::SaveInfo info{.iteration = 0, .model = model::model_flags_json(cfg)};
  info.args = {{"imported_from", std::filesystem::absolute(input).string()}};
  if (std::filesystem::exists(std::filesystem::path(input) / "tokenizer.json")) {
    // The model's own tokenizer goes with it (serve, chat and export read these).
    info.args["tokenizer-type"] = "HFTokenizer";
    info.args["tokenizer-model"] = std::filesystem::absolute(input).string();
  }
  info.state = {{"consumed_train_samples", 0}, {"consumed_valid_samples", 0}, {"optimizer_steps", 0}};
  saver.save(ckpt::collect_shards({&gpt.store()}, nullptr, {.optimizer = false}), info);
  return fmt::format("imported {} ({}, {} parameters) into {}", input, hf.config.value("model_type", "?"),
                     gpt.store().numel(), ckpt::iteration_dir(save, 0));
}

void add_ckpt_command(CLI::App& app) {
  CLI::App* ckpt = app.add_subcommand("ckpt", "inspect distributed checkpoints; convert to and from Hugging Face");
  ckpt->require_subcommand(1);

  auto inspect = std::make_shared<Inspect>();
  CLI::App* i = ckpt->add_subcommand("inspect", "print what a checkpoint holds");
  i->add_option("dir", inspect->dir, "checkpoint root (its latest complete checkpoint) or an iter_* directory")
      ->required();
  i->add_option("--ckpt-step", inspect->step, "this iteration instead of the latest");
  i->add_flag("--tensors", inspect->tensors, "list every tensor with its shape and chunk count");
  i->add_flag("--verify", inspect->verify, "read every chunk and check its checksums");
  i->callback([inspect] { inspect->run(); });

  auto ex = std::make_shared<Export>();
  CLI::App* e = ckpt->add_subcommand(
      "export", "write a checkpoint's model as a Hugging Face transformers directory or a GGUF file (llama.cpp)");
  e->add_option("--load", ex->load, "checkpoint root or iter_* directory")->required();
  e->add_option("--ckpt-step", ex->step, "this iteration instead of the latest");
  e->add_option("--format", ex->format,
                "hf: config.json + model.safetensors (GPT2LMHeadModel / LlamaForCausalLM); peft: a LoRA checkpoint's "
                "adapters (adapter_config.json + adapter_model.safetensors); gguf: one llama.cpp file")
      ->default_str("hf");
  e->add_option("--type", ex->type,
                "hf: the tensors' type, f32 or bf16; gguf: the file type, f32, bf16, f16, q8_0 or q4_0 (every matrix) "
                "or llama-quantize's q6_k, q5_k_m, q5_k_s, q5_1, q5_0, q4_k_m, q4_k_s, q4_1, iq4_xs, iq4_nl, q3_k_l, q3_k_m, "
                "q3_k_s, q2_k "
                "(its types per tensor)")
      ->default_str("f32");
  e->add_option("--output", ex->output, "directory to write (hf) or file (gguf)")->required();
  e->add_option("--chat-template", ex->chat_template,
                 "a Jinja template FILE.jinja to write as the model's (hf: tokenizer_config.json; gguf: "
                 "tokenizer.chat_template)");
  e->add_option("--max-shard-size", ex->max_shard, "largest safetensors file before sharding with an index")
      ->default_str("5GB");
  e->callback([ex] { ex->run(); });

  auto im = std::make_shared<Import>();
  CLI::App* m = ckpt->add_subcommand(
      "import", "make a claw checkpoint (iteration 0) from a Hugging Face directory or a PEFT adapter over its base");
  m->add_option("--format", im->format,
                "hf: a transformers GPT-2 or Llama directory (config.json + safetensors); peft: a PEFT LoRA adapter "
                "directory (adapter_config.json + adapter_model.safetensors)")
      ->default_str("hf");
  m->add_option("--input", im->input, "Hugging Face model directory, or PEFT adapter directory")->required();
  m->add_option("--load", im->base_load, "peft: the base model as a claw checkpoint");
  m->add_option("--load-hf", im->base_hf,
                "peft: the base model as a Hugging Face directory (default: the adapter's base_model_name_or_path)");
  m->add_option("--save", im->save, "checkpoint root to write")->required();
  m->callback([im] { im->run(); });

  auto ml = std::make_shared<MergeLora>();
  CLI::App* mlc = ckpt->add_subcommand("merge-lora", "fold a checkpoint's LoRA adapters into its weights (one rank)");
  mlc->add_option("--load", ml->load, "checkpoint root or iter_* directory of a --lora-rank run")->required();
  mlc->add_option("--ckpt-step", ml->step, "this iteration instead of the latest");
  mlc->add_option("--save", ml->save, "checkpoint root to write (the plain model)")->required();
  mlc->callback([ml] { ml->run(); });

  auto cv = std::make_shared<Convert>();
  CLI::App* c = ckpt->add_subcommand("convert", "rewrite a checkpoint's parameters in another dtype (one rank)");
  c->add_option("--load", cv->load, "checkpoint root or iter_* directory")->required();
  c->add_option("--ckpt-step", cv->step, "this iteration instead of the latest");
  c->add_option("--save", cv->save, "checkpoint root to write")->required();
  c->add_option("--dtype", cv->dtype, "f32, bf16, f16, fp8_e4m3 or fp8_e5m2 (narrowing rounds to nearest even)")
      ->required();
  c->callback([cv] { cv->run(); });
}

}  // namespace claw::cli
