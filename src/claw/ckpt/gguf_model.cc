#include "claw/ckpt/gguf_model.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "claw/ckpt/gguf.h"
#include "claw/core/error.h"

namespace claw::ckpt {
namespace {

using kernels::WeightType;

// One tensor in both namings.
struct Entry {
  std::string hf, gguf;
  bool transpose = false;  // HF stores [in, out] (GPT-2's Conv1D)
  int64_t permute_heads = 0;  // llama q/k: heads whose rows are permuted
  bool linear = false;        // a linear layer's weight (kept as stored on reading)
};

std::vector<Entry> name_table(const std::string& arch, const model::ModelConfig& c) {
  std::vector<Entry> t;
  const char* kWB[] = {"weight", "bias"};
  if (arch == "gpt2") {
    t.push_back({"transformer.wte.weight", "token_embd.weight"});
    t.push_back({"transformer.wpe.weight", "position_embd.weight"});
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const std::string h = fmt::format("transformer.h.{}.", i), g = fmt::format("blk.{}.", i);
      for (const char* wb : kWB) {
        const bool w = std::string_view(wb) == "weight";
        t.push_back({h + "ln_1." + wb, g + "attn_norm." + wb});
        t.push_back({h + "attn.c_attn." + wb, g + "attn_qkv." + wb, w, 0, w});
        t.push_back({h + "attn.c_proj." + wb, g + "attn_output." + wb, w, 0, w});
        t.push_back({h + "ln_2." + wb, g + "ffn_norm." + wb});
        t.push_back({h + "mlp.c_fc." + wb, g + "ffn_up." + wb, w, 0, w});
        t.push_back({h + "mlp.c_proj." + wb, g + "ffn_down." + wb, w, 0, w});
      }
    }
    t.push_back({"transformer.ln_f.weight", "output_norm.weight"});
    t.push_back({"transformer.ln_f.bias", "output_norm.bias"});
  } else {
    t.push_back({"model.embed_tokens.weight", "token_embd.weight"});
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const std::string h = fmt::format("model.layers.{}.", i), g = fmt::format("blk.{}.", i);
      t.push_back({h + "input_layernorm.weight", g + "attn_norm.weight"});
      t.push_back({h + "post_attention_layernorm.weight", g + "ffn_norm.weight"});
      for (const char* wb : kWB) {
        const bool w = std::string_view(wb) == "weight";
        t.push_back({h + "self_attn.q_proj." + wb, g + "attn_q." + wb, false, c.num_attention_heads, w});
        t.push_back({h + "self_attn.k_proj." + wb, g + "attn_k." + wb, false, c.kv_heads(), w});
        t.push_back({h + "self_attn.v_proj." + wb, g + "attn_v." + wb, false, 0, w});
        t.push_back({h + "self_attn.o_proj." + wb, g + "attn_output." + wb, false, 0, w});
        t.push_back({h + "mlp.gate_proj." + wb, g + "ffn_gate." + wb, false, 0, w});
        t.push_back({h + "mlp.up_proj." + wb, g + "ffn_up." + wb, false, 0, w});
        t.push_back({h + "mlp.down_proj." + wb, g + "ffn_down." + wb, false, 0, w});
      }
    }
    t.push_back({"model.norm.weight", "output_norm.weight"});
  }
  t.push_back({"lm_head.weight", "output.weight", false, 0, true});
  return t;
}

// [rows, cols] -> [cols, rows].
std::vector<float> transposed(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<float> y(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[c * rows + r] = x[r * cols + c];
  return y;
}

// Row r of the GGUF (adjacent pairs) layout holds HF's (rotate-half) row
// src_row(r): within a head of D rows, 2i + half <- half * D/2 + i.
int64_t hf_row_of(int64_t r, int64_t heads, int64_t rows) {
  const int64_t D = rows / heads, h = r / D, j = r % D;
  return h * D + (j % 2) * (D / 2) + j / 2;
}

// The inverse: HF's row r is the GGUF layout's row gguf_row_of(r).
int64_t gguf_row_of(int64_t r, int64_t heads, int64_t rows) {
  const int64_t D = rows / heads, h = r / D, j = r % D;
  return h * D + 2 * (j % (D / 2)) + j / (D / 2);
}

// Rows of `row_bytes` each, reordered: out row r = in row from(r).
template <typename F>
std::vector<uint8_t> permute_rows(const uint8_t* in, int64_t rows, size_t row_bytes, F from) {
  std::vector<uint8_t> out(static_cast<size_t>(rows) * row_bytes);
  for (int64_t r = 0; r < rows; ++r) std::memcpy(out.data() + r * row_bytes, in + from(r) * row_bytes, row_bytes);
  return out;
}

uint32_t file_type_code(WeightType t) {
  switch (t) {
    case WeightType::f32: return 0;    // LLAMA_FTYPE_ALL_F32
    case WeightType::bf16: return 32;  // MOSTLY_BF16
    case WeightType::q8_0: return 7;   // MOSTLY_Q8_0
    case WeightType::q4_0: return 2;   // MOSTLY_Q4_0
  }
  return 0;
}

}  // namespace

GgufWriteReport write_gguf_model(const std::string& path, const model::ModelConfig& cfg,
                                 const std::function<std::vector<float>(const std::string&)>& get,
                                 const GgufExportOptions& opts) {
  if (cfg.moe.enabled())
    fail("--num-experts {}: GGUF export of MoE models is not available (export --format hf gives "
         "MixtralForCausalLM)",
         cfg.moe.num_experts);
  const nlohmann::json config = hf_config(cfg);  // refuses models with no GPT-2 or Llama form
  const std::string arch = config["model_type"].get<std::string>();
  if (cfg.rope_scaling.enabled())
    fail("GGUF export with --rope-scaling-type {} is not available yet (llama.cpp's rope_freqs.weight is not written)",
         cfg.rope_scaling.type);
  if (arch != "gpt2" && arch != "llama")
    fail("GGUF export of {} models is not available yet (export --format hf gives {})", arch,
         config["architectures"][0].get<std::string>());
  HfStateDict hf = to_hf(cfg, get);
  if (arch == "gpt2" && !hf.count("lm_head.weight")) hf["lm_head.weight"] = hf.at("transformer.wte.weight");

  gguf::Writer w;
  w.add_string("general.architecture", arch);
  w.add_string("general.name", opts.name);
  w.add_u32("general.file_type", file_type_code(opts.type));
  w.add_u32("general.quantization_version", 2);
  w.add_u32("general.alignment", 32);
  auto key = [&](const char* k) { return arch + "." + k; };
  w.add_u32(key("vocab_size"), static_cast<uint32_t>(cfg.vocab_size));
  w.add_u32(key("context_length"), static_cast<uint32_t>(cfg.max_position_embeddings));
  w.add_u32(key("embedding_length"), static_cast<uint32_t>(cfg.hidden_size));
  w.add_u32(key("feed_forward_length"), static_cast<uint32_t>(cfg.ffn()));
  w.add_u32(key("block_count"), static_cast<uint32_t>(cfg.num_layers));
  w.add_u32(key("attention.head_count"), static_cast<uint32_t>(cfg.num_attention_heads));
  if (arch == "gpt2") {
    w.add_f32(key("attention.layer_norm_epsilon"), static_cast<float>(cfg.norm_epsilon));
  } else {
    w.add_u32(key("attention.head_count_kv"), static_cast<uint32_t>(cfg.kv_heads()));
    w.add_u32(key("attention.key_length"), static_cast<uint32_t>(cfg.head_dim()));
    w.add_u32(key("attention.value_length"), static_cast<uint32_t>(cfg.head_dim()));
    w.add_u32(key("rope.dimension_count"), static_cast<uint32_t>(cfg.head_dim()));
    w.add_f32(key("rope.freq_base"), static_cast<float>(cfg.rotary_base));
    w.add_f32(key("attention.layer_norm_rms_epsilon"), static_cast<float>(cfg.norm_epsilon));
  }
  const GgufTokenizer& tok = opts.tokenizer;
  if (!tok.empty()) {
    if (static_cast<int64_t>(tok.tokens.size()) > cfg.vocab_size)
      fail("{}: the tokenizer has {} tokens, more than the model's vocabulary of {}", path, tok.tokens.size(),
           cfg.vocab_size);
    std::vector<std::string> tokens = tok.tokens;
    std::vector<int32_t> types(tokens.size(), 1);  // normal
    if (tok.eos >= 0 && tok.eos < static_cast<int32_t>(types.size())) types[tok.eos] = 3;  // control
    for (int64_t i = static_cast<int64_t>(tokens.size()); i < cfg.vocab_size; ++i) {
      tokens.push_back(fmt::format("[PAD{}]", i));
      types.push_back(5);  // unused
    }
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", "gpt-2");
    w.add_strings("tokenizer.ggml.tokens", tokens);
    w.add_i32s("tokenizer.ggml.token_type", types);
    w.add_strings("tokenizer.ggml.merges", tok.merges);
    if (!tok.chat_template.empty()) w.add_string("tokenizer.chat_template", tok.chat_template);
    if (tok.eos >= 0) {
      w.add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(tok.eos));
      w.add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(tok.eos));
    }
  } else {
    w.add_string("tokenizer.ggml.model", "no_vocab");
  }

  GgufWriteReport r;
  std::vector<std::string> unused;
  for (const auto& [name, t] : hf) unused.push_back(name);
  for (const Entry& e : name_table(arch, cfg)) {
    auto it = hf.find(e.hf);
    if (it == hf.end()) continue;
    std::erase(unused, e.hf);
    HfTensor t = it->second;
    if (e.transpose) {
      t.data = transposed(t.data, t.shape[0], t.shape[1]);
      std::swap(t.shape[0], t.shape[1]);
    }
    const int64_t rows = t.shape[0], cols = t.shape.size() == 2 ? t.shape[1] : 1;
    if (e.permute_heads > 0) {
      std::vector<uint8_t> bytes(t.data.size() * sizeof(float));
      std::memcpy(bytes.data(), t.data.data(), bytes.size());
      bytes = permute_rows(bytes.data(), rows, cols * sizeof(float),
                           [&](int64_t row) { return hf_row_of(row, e.permute_heads, rows); });
      std::memcpy(t.data.data(), bytes.data(), bytes.size());
    }
    const bool matrix = t.shape.size() == 2 && e.gguf != "position_embd.weight";
    WeightType type = matrix ? opts.type : WeightType::f32;
    if (!kernels::weight_type_fits(type, cols)) type = WeightType::f32;
    if (matrix) ++(type == opts.type && type != WeightType::f32 ? r.converted : r.kept_f32);
    std::vector<uint8_t> data(kernels::weight_row_bytes(type, t.shape.size() == 2 ? cols : rows) *
                              (t.shape.size() == 2 ? rows : 1));
    kernels::quantize_rows(type, t.data.data(), data.data(), t.shape.size() == 2 ? rows : 1,
                           t.shape.size() == 2 ? cols : rows);
    r.bytes += data.size();
    ++r.tensors;
    w.add_tensor(e.gguf, t.shape, gguf::ggml_type_of(type), std::move(data));
  }
  CLAW_CHECK(unused.empty(), "GGUF export: no GGUF name for {}", fmt::join(unused, ", "));
  w.write(path);
  return r;
}

namespace {
// The transformers config.json that a GGUF file's metadata describes (GPT-2
// or Llama), for model_from_hf_config.
nlohmann::json hf_config_of(const gguf::Reader& r, const std::string& path, const std::string& arch) {
  const nlohmann::json& md = r.metadata();
  auto num = [&](const std::string& k) -> nlohmann::json {
    if (!md.contains(k) || !md[k].is_number()) fail("{}: metadata {} is missing or not a number", path, k);
    return md[k];
  };
  // GGUF keeps epsilons and RoPE bases as f32: the shortest decimal that
  // reads back as that f32 is the value the writer meant (1e-5, not
  // 9.99999974738e-06), as the other formats hold it.
  auto real = [&](const std::string& k) -> nlohmann::json {
    return std::stod(fmt::format("{}", num(k).get<float>()));
  };
  const gguf::TensorInfo* embd = r.find("token_embd.weight");
  if (!embd || embd->ne.size() != 2) fail("{}: no 2-D tensor token_embd.weight", path);
  const int64_t vocab = embd->ne[1];
  auto key = [&](const char* k) { return arch + "." + k; };
  const bool has_output = r.find("output.weight") != nullptr;
  nlohmann::json config;
  if (arch == "gpt2") {
    bool tied = true;
    if (has_output) {
      const gguf::TensorInfo* out = r.find("output.weight");
      tied = out->type == embd->type && out->ne == embd->ne && r.read(*out) == r.read(*embd);
    }
    config = {{"model_type", "gpt2"},
              {"n_layer", num(key("block_count"))},
              {"n_embd", num(key("embedding_length"))},
              {"n_head", num(key("attention.head_count"))},
              {"n_inner", num(key("feed_forward_length"))},
              {"vocab_size", vocab},
              {"n_positions", num(key("context_length"))},
              {"layer_norm_epsilon", real(key("attention.layer_norm_epsilon"))},
              {"tie_word_embeddings", tied}};
  } else {
    if (r.find("rope_freqs.weight"))
      fail("{}: rope_freqs.weight (Llama 3.1 rope scaling) is not supported; claw implements plain RoPE", path);
    const int64_t heads = num(key("attention.head_count")).get<int64_t>();
    const int64_t C = num(key("embedding_length")).get<int64_t>();
    config = {{"model_type", "llama"},
              {"num_hidden_layers", num(key("block_count"))},
              {"hidden_size", C},
              {"num_attention_heads", heads},
              {"num_key_value_heads", md.contains(key("attention.head_count_kv"))
                                          ? num(key("attention.head_count_kv"))
                                          : nlohmann::json(heads)},
              {"head_dim", md.contains(key("attention.key_length")) ? num(key("attention.key_length"))
                                                                     : nlohmann::json(C / heads)},
              {"intermediate_size", num(key("feed_forward_length"))},
              {"vocab_size", vocab},
              {"max_position_embeddings", num(key("context_length"))},
              {"rms_norm_eps", real(key("attention.layer_norm_rms_epsilon"))},
              {"rope_theta", md.contains(key("rope.freq_base")) ? real(key("rope.freq_base")) : nlohmann::json(10000.0)},
              {"tie_word_embeddings", !has_output},
              {"attention_bias", r.find("blk.0.attn_q.bias") != nullptr}};
  }
  return config;
}
}  // namespace

GgufModel read_gguf_model(const std::string& path) {
  const gguf::Reader r(path);
  const nlohmann::json& md = r.metadata();
  GgufModel g;
  if (!md.contains("general.architecture") || !md["general.architecture"].is_string())
    fail("{}: metadata general.architecture is missing or not a string", path);
  g.arch = md["general.architecture"].get<std::string>();
  if (g.arch != "gpt2" && g.arch != "llama")
    fail("{}: architecture '{}' is not supported; claw reads gpt2 and llama GGUF files", path, g.arch);
  g.name = md.contains("general.name") && md["general.name"].is_string() ? md["general.name"].get<std::string>()
                                                                         : "gguf";
  const nlohmann::json config = hf_config_of(r, path, g.arch);
  g.cfg = model_from_hf_config(config, path);
  g.cfg.name = "gguf-" + g.arch;

  std::map<WeightType, int> counts;
  std::vector<std::string> known;
  std::map<std::string, Entry> by_hf;  // the tensors present, for reading them later
  for (const Entry& e : name_table(g.arch, g.cfg)) {
    known.push_back(e.gguf);
    const gguf::TensorInfo* t = r.find(e.gguf);
    if (!t) continue;
    if (e.hf == "lm_head.weight" && g.cfg.tied()) continue;  // GPT-2's copy of the embeddings
    by_hf[e.hf] = e;
    const std::vector<int64_t> shape = t->shape();
    const int64_t rows = shape[0], cols = shape.size() == 2 ? shape[1] : 1;
    if (e.permute_heads > 0 && rows % (2 * e.permute_heads) != 0)
      fail("{}: {} has {} rows, not whole heads of even size for {} heads", path, e.gguf, rows, e.permute_heads);
    if (!e.linear || shape.size() != 2) continue;
    const bool low = t->type == uint32_t(gguf::GgmlType::bf16) || t->type == uint32_t(gguf::GgmlType::q8_0) ||
                     t->type == uint32_t(gguf::GgmlType::q4_0);
    if (low) {
      const WeightType wt = t->type == uint32_t(gguf::GgmlType::bf16) ? WeightType::bf16
                            : t->type == uint32_t(gguf::GgmlType::q8_0) ? WeightType::q8_0
                                                                        : WeightType::q4_0;
      std::vector<uint8_t> raw = r.read(*t);  // GGUF layout, rows [out, in]
      if (e.permute_heads > 0) {
        const size_t rb = raw.size() / rows;
        raw = permute_rows(raw.data(), rows, rb, [&](int64_t row) { return gguf_row_of(row, e.permute_heads, rows); });
      }
      g.matrices[e.hf] = kernels::WeightMatrix::from_bytes(wt, rows, cols, std::move(raw));
    }
    ++counts[low ? g.matrices[e.hf].type() : WeightType::f32];
  }
  // The fp32 tensors are read when asked for, one at a time (a model's
  // worth of them at once would double the peak memory of loading).
  auto reader = std::make_shared<gguf::Reader>(r);
  g.read_tensor = [reader, by_hf, path](const std::string& name) {
    auto it = by_hf.find(name);
    if (it == by_hf.end()) fail("{}: no tensor for {} (its GGUF name would be in the table of its architecture)", path, name);
    const Entry& e = it->second;
    const gguf::TensorInfo& t = *reader->find(e.gguf);
    HfTensor h{t.shape(), reader->read_f32(t)};
    const int64_t rows = h.shape[0], cols = h.shape.size() == 2 ? h.shape[1] : 1;
    if (e.permute_heads > 0) {
      std::vector<uint8_t> bytes(h.data.size() * sizeof(float));
      std::memcpy(bytes.data(), h.data.data(), bytes.size());
      bytes = permute_rows(bytes.data(), rows, cols * sizeof(float),
                           [&](int64_t row) { return gguf_row_of(row, e.permute_heads, rows); });
      std::memcpy(h.data.data(), bytes.data(), bytes.size());
    }
    if (e.transpose) {
      h.data = transposed(h.data, rows, cols);
      std::swap(h.shape[0], h.shape[1]);
    }
    return h;
  };
  for (const auto& [name, e] : by_hf) g.names.push_back(name);
  for (const gguf::TensorInfo& t : r.tensors())
    if (std::find(known.begin(), known.end(), t.name) == known.end())
      fail("{}: tensor {} is not part of a {} model claw knows ({} layers)", path, t.name, g.arch, g.cfg.num_layers);
  for (const auto& [t, n] : counts)
    if (n > counts[g.weight_type]) g.weight_type = t;

  for (const auto& [k, v] : md.items())
    if (k.starts_with("tokenizer.")) g.tokenizer_metadata[k] = v;
  return g;
}

HfStateDict GgufModel::all_tensors() const {
  HfStateDict d;
  for (const std::string& n : names) d[n] = read_tensor(n);
  return d;
}

void load_gguf_params(const GgufModel& g, const std::vector<model::Param*>& params, const std::string& source) {
  HfStateDict one;  // the tensor the last parameter read (GPT-2's q, k and v share c_attn)
  for (model::Param* p : params) {
    const std::string& name = p->spec.hf.name;
    if (!one.count(name)) {
      one.clear();
      one[name] = g.read_tensor(name);
    }
    load_hf_params({p}, one, source);
  }
}

std::map<std::string, kernels::WeightMatrix> gguf_matrices_for(GgufModel& g, const std::vector<model::Param*>& params) {
  std::map<std::string, kernels::WeightMatrix> out;
  for (const model::Param* p : params) {
    const model::ParamSpec& s = p->spec;
    auto it = g.matrices.find(s.hf.name);
    if (it == g.matrices.end() || s.shape.ndim() != 2 || s.shard_dim == 1) continue;
    const kernels::WeightMatrix& m = it->second;  // (moved from at most once, below)
    // The matrix's rows are HF's output features: dimension 1 of a
    // transposed (Conv1D) tensor, else 0.
    const int row_dim = s.hf.transpose ? 1 : 0;
    if (s.hf.slice_dim >= 0 && s.hf.slice_dim != row_dim) continue;
    const int64_t first = s.hf.slice_dim >= 0 ? s.hf.begin : 0;
    const int64_t mapped = s.hf.rows >= 0 ? s.hf.rows : s.shape[0];  // rows beyond: vocabulary padding
    const int64_t local = s.local_shape()[0], begin = s.shard_dim == 0 ? s.shard_index * local : 0;
    if (m.cols() != s.shape[1]) continue;
    if (first == 0 && begin == 0 && local == m.rows() && mapped == m.rows()) {
      out[s.name] = std::move(it->second);
      g.matrices.erase(it);
      continue;
    }
    const size_t rb = m.row_bytes();
    const std::vector<uint8_t> stored = m.gguf_bytes();
    std::vector<uint8_t> bytes(static_cast<size_t>(local) * rb, 0);
    for (int64_t r = 0; r < local; ++r) {
      const int64_t global = begin + r;
      if (global < mapped) std::memcpy(bytes.data() + r * rb, stored.data() + (first + global) * rb, rb);
    }
    out[s.name] = kernels::WeightMatrix::from_bytes(m.type(), local, m.cols(), std::move(bytes));
  }
  return out;
}

}  // namespace claw::ckpt
