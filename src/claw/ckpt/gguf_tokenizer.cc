#include "claw/ckpt/gguf_tokenizer.h"

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "claw/core/error.h"
#include "claw/data/gpt2_bpe.h"
#include "claw/data/hf_tokenizer.h"

namespace claw::ckpt {
namespace {

bool one_of(const std::string& name, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (name == n) return true;
  return false;
}

// Pre-tokenizers on claw's hand-written scanners (the fast path), by the
// names llama.cpp gives them.
std::optional<data::Pretokenizer> scanner_for(const std::string& pre) {
  if (one_of(pre, {"gpt-2", "gpt2"})) return data::Pretokenizer::gpt2;
  if (one_of(pre, {"llama3", "llama-v3", "llama-bpe", "dbrx", "smaug-bpe", "falcon3", "falcon-h1", "pixtral",
                   "midm-2.0", "lfm2", "jina-v5-nano"}))
    return data::Pretokenizer::cl100k;
  if (one_of(pre, {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez"})) return data::Pretokenizer::qwen2;
  return std::nullopt;
}

using json = nlohmann::json;  // (ordered_json inserts in linear time: 256k tokens would take minutes)

json split(const std::string& regex) {
  return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
}
json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

// The other pre-tokenizers, as the published tokenizer.json files write
// them (the splits llama.cpp runs for each name), ending in ByteLevel.
std::optional<json> pre_tokenizer_json(const std::string& pre) {
  std::vector<std::string> splits;
  if (pre == "deepseek-llm") {
    splits = {"[\r\n]",
              "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-"
              "\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481"
              "\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-"
              "\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59"
              "\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-"
              "\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126"
              "\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-"
              "\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-"
              "\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
              "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-"
              "\U0001e943]+",
              "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+", "\\s+$",
              "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+", "\\p{N}+"};
  } else if (pre == "deepseek-coder") {
    splits = {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+", "\\p{N}"};
  } else if (pre == "qwen35") {
    splits = {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+"
              "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
  } else if (one_of(pre, {"mpt", "olmo", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
                          "a.x-4.0", "mellum", "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe",
                          "exaone4"})) {
    return byte_level(true);  // GPT-2's pattern (these vocabularies may lack bytes UTF-8 never holds)
  } else if (one_of(pre, {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"})) {
    // One digit a piece, then GPT-2's pattern.
    return json{{"type", "Sequence"},
                {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)}}};
  } else {
    return std::nullopt;
  }
  json list = json::array();
  for (const std::string& r : splits) list.push_back(split(r));
  list.push_back(byte_level(false));
  return json{{"type", "Sequence"}, {"pretokenizers", list}};
}

json added_token(const std::string& content, size_t id, bool special) {
  return {{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
          {"normalized", false}, {"special", special}};
}

json bpe_model(json vocab, json merges, const std::string& unk, bool byte_fallback) {
  return {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", unk.empty() ? json(nullptr) : json(unk)},
          {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}, {"fuse_unk", byte_fallback},
          {"byte_fallback", byte_fallback}, {"ignore_merges", false}, {"vocab", std::move(vocab)},
          {"merges", std::move(merges)}};
}

// A merge line "a b" as [a, b]; a token may itself hold a space, so the
// split is the one whose halves and whole are tokens.
json merge_pair(const std::string& line, const std::unordered_map<std::string, int32_t>& vocab, size_t i,
                const std::string& source) {
  for (size_t at = line.find(' '); at != std::string::npos; at = line.find(' ', at + 1)) {
    const std::string a = line.substr(0, at), b = line.substr(at + 1);
    if (vocab.count(a) && vocab.count(b) && vocab.count(a + b)) return json::array({a, b});
  }
  fail("{}: tokenizer.ggml.merges[{}] \"{}\" is not two tokens of the vocabulary", source, i, line);
}

// SentencePiece's merges as transformers derives them from the scores: every
// split of a piece into two pieces, ranked by the piece's score (higher
// first), splits of one piece by their halves' ids.
json merges_from_scores(const std::vector<std::string>& tokens, const std::vector<double>& scores,
                        const std::unordered_map<std::string, int32_t>& vocab) {
  struct Merge {
    double score;
    int32_t left, right;
    size_t at;  // byte offset of the split in tokens[piece]
    int32_t piece;
  };
  std::vector<Merge> merges;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    std::vector<Merge> local;
    for (size_t at = 1; at < t.size(); ++at) {
      if ((static_cast<unsigned char>(t[at]) & 0xC0) == 0x80) continue;  // inside a character
      auto l = vocab.find(t.substr(0, at)), r = vocab.find(t.substr(at));
      if (l != vocab.end() && r != vocab.end())
        local.push_back({scores[i], l->second, r->second, at, static_cast<int32_t>(i)});
    }
    std::sort(local.begin(), local.end(),
              [](const Merge& a, const Merge& b) { return std::tie(a.left, a.right) < std::tie(b.left, b.right); });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) { return a.score > b.score; });
  json out = json::array();
  for (const Merge& m : merges) {
    const std::string& t = tokens[static_cast<size_t>(m.piece)];
    out.push_back(json::array({t.substr(0, m.at), t.substr(m.at)}));
  }
  return out;
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

namespace {

// Token types (llama.cpp's llama_token_type): 2 unknown, 3 control, 4
// user-defined, 5 unused, 6 byte.
std::vector<int64_t> token_types(const nlohmann::json& md, size_t vocab, const std::string& source) {
  std::vector<int64_t> types(vocab, 1);
  if (!md.contains("tokenizer.ggml.token_type")) return types;
  const nlohmann::json& t = md["tokenizer.ggml.token_type"];
  if (!t.is_array() || t.size() != vocab)
    fail("{}: tokenizer.ggml.token_type must hold one type per token ({})", source, vocab);
  for (size_t i = 0; i < vocab; ++i)
    if (t[i].is_number_integer()) types[i] = t[i].get<int64_t>();
  return types;
}

// A vocabulary claw's scanners do not cover, written as the tokenizer.json
// its family publishes and read by data::HfTokenizer: byte-level BPE with
// another pre-tokenizer, SentencePiece (`llama`: merges from the scores;
// Prepend and Replace of spaces, byte fallback) and Gemma's (`gemma4`).
std::unique_ptr<data::Tokenizer> pipeline_tokenizer(const GgufVocabulary& g, const nlohmann::json& md,
                                                    const std::vector<std::string>& tokens, int32_t eod,
                                                    const std::string& source) {
  const std::vector<int64_t> types = token_types(md, tokens.size(), source);
  std::unordered_map<std::string, int32_t> ids;
  json vocab = json::object(), added = json::array();
  const bool is_byte_level = g.model == "gpt2";
  json doc = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}};
  if (is_byte_level) {
    std::optional<json> pre = pre_tokenizer_json(g.pre);
    if (!pre)
      fail("{}: tokenizer.ggml.pre '{}' is not a pre-tokenizer claw has (gpt-2 and its kind: phi-2, mpt, olmo, ...; "
           "llama-bpe and its kind: llama3, dbrx, smaug-bpe, falcon3, ...; qwen2, qwen35, deepseek-llm, deepseek-coder, "
           "starcoder and its kind: refact, command-r, smollm, codeshell, exaone, minerva-7b)",
           source, g.pre);
    // Control and user-defined tokens are added tokens, and in the
    // vocabulary too where ordinary tokens follow them.
    size_t last_ordinary = 0;
    for (size_t i = 0; i < tokens.size(); ++i)
      if (types[i] != 3 && types[i] != 4 && types[i] != 5) last_ordinary = i;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (types[i] == 3 || types[i] == 4) added.push_back(added_token(tokens[i], i, types[i] == 3));
      if (types[i] != 5 && ((types[i] != 3 && types[i] != 4) || i < last_ordinary) && ids.emplace(tokens[i], i).second)
        vocab[tokens[i]] = i;
    }
    doc["normalizer"] = nullptr;
    doc["pre_tokenizer"] = *pre;
    doc["decoder"] = byte_level(true);
  } else {
    std::string unk;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (ids.emplace(tokens[i], i).second) vocab[tokens[i]] = i;
      if (types[i] == 2 || types[i] == 3 || types[i] == 4) added.push_back(added_token(tokens[i], i, types[i] != 4));
      if (types[i] == 2 && unk.empty()) unk = tokens[i];
    }
    const bool prefix = g.model == "llama" && !(md.contains("tokenizer.ggml.add_space_prefix") &&
                                                md["tokenizer.ggml.add_space_prefix"].is_boolean() &&
                                                !md["tokenizer.ggml.add_space_prefix"].get<bool>());
    const json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}};
    doc["normalizer"] = prefix ? json{{"type", "Sequence"},
                                      {"normalizers", {{{"type", "Prepend"}, {"prepend", "\u2581"}}, replace}}}
                               : replace;
    doc["pre_tokenizer"] = nullptr;
    json decoders = {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                     {{"type", "ByteFallback"}},
                     {{"type", "Fuse"}}};
    if (prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    doc["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
    doc["added_tokens"] = added;
    json merges = json::array();
    if (md.contains("tokenizer.ggml.merges")) {
      const std::vector<std::string> lines = strings(md, "tokenizer.ggml.merges", source);
      for (size_t i = 0; i < lines.size(); ++i) merges.push_back(merge_pair(lines[i], ids, i, source));
    } else {
      const nlohmann::json& sc = md.contains("tokenizer.ggml.scores") ? md["tokenizer.ggml.scores"] : nlohmann::json();
      if (!sc.is_array() || sc.size() != tokens.size())
        fail("{}: a SentencePiece vocabulary without merges needs tokenizer.ggml.scores, one per token", source);
      std::vector<double> scores;
      for (const nlohmann::json& x : sc) scores.push_back(x.is_number() ? x.get<double>() : 0.0);
      merges = merges_from_scores(tokens, scores, ids);
    }
    doc["model"] = bpe_model(std::move(vocab), std::move(merges), unk, true);
    doc["post_processor"] = nullptr;
    return std::make_unique<data::HfTokenizer>(
        data::HfTokenizer::from_json(doc, source, tokens[static_cast<size_t>(eod)]));
  }
  doc["added_tokens"] = added;
  doc["post_processor"] = nullptr;
  json merges = json::array();
  const std::vector<std::string> lines = strings(md, "tokenizer.ggml.merges", source);
  for (size_t i = 0; i < lines.size(); ++i) merges.push_back(merge_pair(lines[i], ids, i, source));
  doc["model"] = bpe_model(std::move(vocab), std::move(merges), "", false);
  return std::make_unique<data::HfTokenizer>(
      data::HfTokenizer::from_json(doc, source, tokens[static_cast<size_t>(eod)]));
}

}  // namespace

GgufVocabulary gguf_vocabulary(const nlohmann::json& md, const std::string& source) {
  GgufVocabulary g;
  if (!md.contains("tokenizer.ggml.model") || !md["tokenizer.ggml.model"].is_string())
    fail("{}: no tokenizer.ggml.model (the file carries no tokenizer)", source);
  g.model = md["tokenizer.ggml.model"].get<std::string>();
  if (g.model != "gpt2" && g.model != "llama" && g.model != "gemma4")
    fail("{}: tokenizer.ggml.model '{}' is not one claw reads (gpt2: byte-level BPE; llama: SentencePiece; gemma4)",
         source, g.model);
  g.pre = md.contains("tokenizer.ggml.pre") && md["tokenizer.ggml.pre"].is_string()
              ? md["tokenizer.ggml.pre"].get<std::string>()
              : g.model == "gpt2" ? "gpt-2" : "default";
  const std::vector<std::string> tokens = strings(md, "tokenizer.ggml.tokens", source);
  if (tokens.empty()) fail("{}: no tokenizer.ggml.tokens", source);
  const size_t vocab = tokens.size();
  g.bos = id(md, "tokenizer.ggml.bos_token_id", vocab, source);
  g.eos = id(md, "tokenizer.ggml.eos_token_id", vocab, source);
  g.eot = id(md, "tokenizer.ggml.eot_token_id", vocab, source);
  g.add_bos = md.contains("tokenizer.ggml.add_bos_token") && md["tokenizer.ggml.add_bos_token"].is_boolean() &&
              md["tokenizer.ggml.add_bos_token"].get<bool>();
  if (md.contains("tokenizer.chat_template") && md["tokenizer.chat_template"].is_string())
    g.chat_template = md["tokenizer.chat_template"].get<std::string>();
  const int32_t eod = g.eos >= 0 ? g.eos : g.eot;
  if (eod < 0) fail("{}: neither tokenizer.ggml.eos_token_id nor eot_token_id is set", source);

  const std::optional<data::Pretokenizer> scanner = g.model == "gpt2" ? scanner_for(g.pre) : std::nullopt;
  if (!scanner) {
    g.tokenizer = pipeline_tokenizer(g, md, tokens, eod, source);
    return g;
  }
  data::ByteLevelBpeSpec spec;
  spec.name = "gguf-" + g.pre;
  spec.pre = *scanner;
  // Llama 3's vocabulary came from tiktoken: a piece that is a token is
  // that token (llama.cpp's ignore_merges for these pre-tokenizers).
  spec.ignore_merges = spec.pre == data::Pretokenizer::cl100k;
  spec.nfc = spec.pre == data::Pretokenizer::qwen2;  // Qwen 2's tokenizer.json normalizes to NFC
  spec.tokens = tokens;
  spec.merges = strings(md, "tokenizer.ggml.merges", source);
  const std::vector<int64_t> types = token_types(md, vocab, source);
  for (size_t i = 0; i < vocab; ++i)
    if (types[i] == 3 || types[i] == 4)
      spec.specials.push_back(static_cast<int32_t>(i));
    else if (types[i] == 5)
      spec.unused.push_back(static_cast<int32_t>(i));
  spec.eod = eod;
  g.tokenizer = std::make_unique<data::BpeTokenizer>(data::byte_level_bpe(spec, source));
  return g;
}

}  // namespace claw::ckpt
