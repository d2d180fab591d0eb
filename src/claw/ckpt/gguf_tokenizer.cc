#include "claw/ckpt/gguf_tokenizer.h"

#include <fmt/format.h>

#include "claw/core/error.h"
#include "claw/data/gpt2_bpe.h"

namespace claw::ckpt {
namespace {

data::Pretokenizer pre_tokenizer(const std::string& pre, const std::string& source) {
  if (pre == "gpt-2" || pre == "gpt2") return data::Pretokenizer::gpt2;
  if (pre == "llama-bpe" || pre == "llama3" || pre == "dbrx" || pre == "smaug-bpe") return data::Pretokenizer::cl100k;
  if (pre == "qwen2") return data::Pretokenizer::qwen2;
  fail("{}: tokenizer.ggml.pre '{}' is not a pre-tokenizer claw has (gpt-2, llama-bpe, llama3, dbrx, smaug-bpe, "
       "qwen2)", source, pre);
}

std::vector<std::string> strings(const nlohmann::json& md, const char* key, const std::string& source) {
  if (!md.contains(key)) return {};
  const nlohmann::json& v = md[key];
  if (!v.is_array()) fail("{}: {} is not an array of strings", source, key);
  std::vector<std::string> out;
  out.reserve(v.size());
  for (const nlohmann::json& x : v) {
    if (!x.is_string()) fail("{}: {} holds a {}, not a string", source, key, x.type_name());
    out.push_back(x.get<std::string>());
  }
  return out;
}

int32_t id(const nlohmann::json& md, const char* key, size_t vocab, const std::string& source) {
  if (!md.contains(key)) return -1;
  const nlohmann::json& v = md[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<uint64_t>() >= vocab)
    fail("{}: {} = {} is not a token id in [0, {})", source, key, v.dump(), vocab);
  return v.get<int32_t>();
}

}  // namespace

GgufVocabulary gguf_vocabulary(const nlohmann::json& md, const std::string& source) {
  GgufVocabulary g;
  if (!md.contains("tokenizer.ggml.model") || !md["tokenizer.ggml.model"].is_string())
    fail("{}: no tokenizer.ggml.model (the file carries no tokenizer)", source);
  g.model = md["tokenizer.ggml.model"].get<std::string>();
  if (g.model != "gpt2")
    fail("{}: tokenizer.ggml.model '{}' is not one claw reads yet (gpt2: byte-level BPE)", source, g.model);
  g.pre = md.contains("tokenizer.ggml.pre") && md["tokenizer.ggml.pre"].is_string()
              ? md["tokenizer.ggml.pre"].get<std::string>()
              : "gpt-2";
  data::ByteLevelBpeSpec spec;
  spec.name = "gguf-" + g.pre;
  spec.pre = pre_tokenizer(g.pre, source);
  // Llama 3's vocabulary came from tiktoken: a piece that is a token is
  // that token (llama.cpp's ignore_merges for these pre-tokenizers).
  spec.ignore_merges = spec.pre == data::Pretokenizer::cl100k;
  spec.nfc = spec.pre == data::Pretokenizer::qwen2;  // Qwen 2's tokenizer.json normalizes to NFC
  spec.tokens = strings(md, "tokenizer.ggml.tokens", source);
  spec.merges = strings(md, "tokenizer.ggml.merges", source);
  if (spec.tokens.empty()) fail("{}: no tokenizer.ggml.tokens", source);
  if (md.contains("tokenizer.ggml.token_type")) {
    const nlohmann::json& types = md["tokenizer.ggml.token_type"];
    if (!types.is_array() || types.size() != spec.tokens.size())
      fail("{}: tokenizer.ggml.token_type must hold one type per token ({})", source, spec.tokens.size());
    for (size_t i = 0; i < types.size(); ++i)
      if (types[i].is_number_integer() && (types[i].get<int64_t>() == 3 || types[i].get<int64_t>() == 4))
        spec.specials.push_back(static_cast<int32_t>(i));
      else if (types[i].is_number_integer() && types[i].get<int64_t>() == 5)
        spec.unused.push_back(static_cast<int32_t>(i));
  }
  const size_t vocab = spec.tokens.size();
  g.bos = id(md, "tokenizer.ggml.bos_token_id", vocab, source);
  g.eos = id(md, "tokenizer.ggml.eos_token_id", vocab, source);
  g.eot = id(md, "tokenizer.ggml.eot_token_id", vocab, source);
  g.add_bos = md.contains("tokenizer.ggml.add_bos_token") && md["tokenizer.ggml.add_bos_token"].is_boolean() &&
              md["tokenizer.ggml.add_bos_token"].get<bool>();
  if (md.contains("tokenizer.chat_template") && md["tokenizer.chat_template"].is_string())
    g.chat_template = md["tokenizer.chat_template"].get<std::string>();
  spec.eod = g.eos >= 0 ? g.eos : g.eot;
  if (spec.eod < 0) fail("{}: neither tokenizer.ggml.eos_token_id nor eot_token_id is set", source);
  g.tokenizer = std::make_unique<data::BpeTokenizer>(data::byte_level_bpe(spec, source));
  return g;
}

}  // namespace claw::ckpt
