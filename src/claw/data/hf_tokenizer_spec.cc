// Reading a tokenizer.json into the steps of hf_tokenizer_spec.h. Every
// field claw does not run is an error naming it; fields that change only
// offsets (trim_offsets, type ids) are read past.
#include "claw/data/hf_tokenizer_spec.h"

#include <unicode/regex.h>

#include <algorithm>
#include <atomic>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "claw/core/error.h"
#include "claw/core/json_depth.h"
#include "claw/data/gpt2_bpe.h"

namespace claw::data::hf {
namespace {

using json = nlohmann::json;

// The split regexes that have hand-written scanners (pretokenizer.h), as
// tokenizer.json files write them.
struct KnownPattern {
  const char* regex;
  Pretokenizer scanner;
};
constexpr KnownPattern kKnownPatterns[] = {
    {R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", Pretokenizer::gpt2},
    {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     Pretokenizer::cl100k},
    {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     Pretokenizer::qwen2},
    {R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     Pretokenizer::o200k},
};

std::atomic<uint64_t> next_tag{1};

class Reader {
 public:
  Reader(const std::string& source, Pipeline& p) : source_(source), p_(p) {}

  [[noreturn]] void error(std::string_view field, std::string_view what) const {
    fail("{}: {}: {}", source_, field, what);
  }

  const json& member(const json& obj, const char* key, std::string_view field) const {
    auto it = obj.find(key);
    if (it == obj.end()) error(field, fmt::format("has no \"{}\"", key));
    return *it;
  }
  std::string string_of(const json& obj, const char* key, std::string_view field) const {
    const json& v = member(obj, key, field);
    if (!v.is_string()) error(fmt::format("{}.{}", field, key), "must be a string");
    return v.get<std::string>();
  }
  bool bool_of(const json& obj, const char* key, std::string_view field, bool fallback) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) error(fmt::format("{}.{}", field, key), "must be true or false");
    return it->get<bool>();
  }
  std::string type_of(const json& obj, std::string_view field) const {
    if (!obj.is_object()) error(field, "must be an object");
    return string_of(obj, "type", field);
  }

  std::shared_ptr<Regex> regex(const std::string& source, std::string_view field) {
    // \s and \S as the tokenizers library means them (White_Space), which
    // ICU's \s does not quite ([\t\n\f\r\p{Z}]).
    std::string icu_source;
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\\' && i + 1 < source.size()) {
        const char c = source[++i];
        icu_source += c == 's' ? "\\p{White_Space}" : c == 'S' ? "\\P{White_Space}" : std::string{'\\', c};
      } else {
        icu_source += source[i];
      }
    }
    UErrorCode status = U_ZERO_ERROR;
    UParseError where{};
    std::shared_ptr<icu::RegexPattern> pattern(icu::RegexPattern::compile(
        icu::UnicodeString::fromUTF8(icu::StringPiece(icu_source.data(), static_cast<int32_t>(icu_source.size()))),
        0, where, status));
    if (U_FAILURE(status) || !pattern)
      error(field, fmt::format("regex \"{}\" does not compile ({} at character {})", source, u_errorName(status),
                               where.offset));
    auto r = std::make_shared<Regex>();
    r->source = source;
    r->index = static_cast<int>(p_.regexes.size());
    r->pattern = std::move(pattern);
    p_.regexes.push_back(r);
    return r;
  }

  // {"String": s} or {"Regex": r}: a literal into *literal, or a regex.
  std::shared_ptr<Regex> pattern(const json& v, std::string* literal, std::string_view field) {
    if (!v.is_object() || v.size() != 1) error(field, "must be {\"String\": ...} or {\"Regex\": ...}");
    if (auto it = v.find("String"); it != v.end() && it->is_string()) {
      *literal = it->get<std::string>();
      if (literal->empty()) error(field, "an empty string pattern matches nowhere");
      return nullptr;
    }
    if (auto it = v.find("Regex"); it != v.end() && it->is_string()) return regex(it->get<std::string>(), field);
    error(field, "must be {\"String\": ...} or {\"Regex\": ...}");
  }

  void normalizer(const json& v, std::string_view field) {
    if (v.is_null()) return;
    const std::string type = type_of(v, field);
    NormalizerStep s{NormalizerStep::nfc, {}, {}, nullptr, false, false};
    if (type == "Sequence") {
      const json& list = member(v, "normalizers", field);
      if (!list.is_array()) error(fmt::format("{}.normalizers", field), "must be a list");
      for (size_t i = 0; i < list.size(); ++i) normalizer(list[i], fmt::format("{}.normalizers[{}]", field, i));
      return;
    } else if (type == "NFC") {
      s.kind = NormalizerStep::nfc;
    } else if (type == "NFD") {
      s.kind = NormalizerStep::nfd;
    } else if (type == "NFKC") {
      s.kind = NormalizerStep::nfkc;
    } else if (type == "NFKD") {
      s.kind = NormalizerStep::nfkd;
    } else if (type == "Lowercase") {
      s.kind = NormalizerStep::lowercase;
    } else if (type == "Prepend") {
      s.kind = NormalizerStep::prepend;
      s.text = string_of(v, "prepend", field);
    } else if (type == "Replace") {
      s.kind = NormalizerStep::replace;
      s.regex = pattern(member(v, "pattern", field), &s.text, fmt::format("{}.pattern", field));
      s.content = string_of(v, "content", field);
    } else if (type == "Strip") {
      s.kind = NormalizerStep::strip;
      s.left = bool_of(v, "strip_left", field, false);
      s.right = bool_of(v, "strip_right", field, false);
    } else {
      error(fmt::format("{}.type", field),
            fmt::format("normalizer \"{}\" is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, Prepend, "
                        "Replace, Strip, Sequence)",
                        type));
    }
    p_.normalizer.push_back(std::move(s));
  }

  SplitBehavior behavior(const json& v, std::string_view field) const {
    const std::string b = string_of(v, "behavior", field);
    if (b == "Removed") return SplitBehavior::removed;
    if (b == "Isolated") return SplitBehavior::isolated;
    if (b == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
    if (b == "MergedWithNext") return SplitBehavior::merged_with_next;
    if (b == "Contiguous") return SplitBehavior::contiguous;
    error(fmt::format("{}.behavior", field),
          fmt::format("\"{}\" is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous", b));
  }

  void pre_tokenizer(const json& v, std::string_view field) {
    if (v.is_null()) return;
    const std::string type = type_of(v, field);
    PreStep s{};
    s.kind = PreStep::split;
    if (type == "Sequence") {
      const json& list = member(v, "pretokenizers", field);
      if (!list.is_array()) error(fmt::format("{}.pretokenizers", field), "must be a list");
      for (size_t i = 0; i < list.size(); ++i) pre_tokenizer(list[i], fmt::format("{}.pretokenizers[{}]", field, i));
      return;
    } else if (type == "Split") {
      s.regex = pattern(member(v, "pattern", field), &s.literal, fmt::format("{}.pattern", field));
      s.behavior = behavior(v, field);
      s.invert = bool_of(v, "invert", field, false);
      if (s.regex && !s.invert && s.behavior == SplitBehavior::isolated)
        for (const KnownPattern& k : kKnownPatterns)
          if (s.regex->source == k.regex) {
            s.scanner = true;
            s.scanner_kind = k.scanner;
          }
    } else if (type == "ByteLevel") {
      s.kind = PreStep::byte_level;
      s.add_prefix_space = bool_of(v, "add_prefix_space", field, true);
      s.use_regex = bool_of(v, "use_regex", field, true);
    } else if (type == "Metaspace") {
      s.kind = PreStep::metaspace;
      s.replacement = string_of(v, "replacement", field);
      if (s.replacement.empty()) error(fmt::format("{}.replacement", field), "must not be empty");
      s.split_on_replacement = bool_of(v, "split", field, true);
      if (auto it = v.find("prepend_scheme"); it != v.end() && !it->is_null()) {
        const std::string scheme = it->is_string() ? it->get<std::string>() : "";
        if (scheme == "always") s.prepend = PreStep::always;
        else if (scheme == "first") s.prepend = PreStep::first;
        else if (scheme == "never") s.prepend = PreStep::never;
        else error(fmt::format("{}.prepend_scheme", field), "must be \"always\", \"first\" or \"never\"");
      } else {
        s.prepend = bool_of(v, "add_prefix_space", field, true) ? PreStep::always : PreStep::never;
      }
    } else if (type == "Digits") {
      s.kind = PreStep::digits;
      s.individual_digits = bool_of(v, "individual_digits", field, false);
    } else if (type == "Whitespace") {
      s.regex = regex(R"(\w+|[^\w\s]+)", field);
      s.behavior = SplitBehavior::removed;
      s.invert = true;
    } else if (type == "WhitespaceSplit") {
      s.regex = regex(R"(\s+)", field);
      s.behavior = SplitBehavior::removed;
    } else {
      error(fmt::format("{}.type", field),
            fmt::format("pre-tokenizer \"{}\" is not supported (supported: Split, ByteLevel, Metaspace, Digits, "
                        "Whitespace, WhitespaceSplit, Sequence)",
                        type));
    }
    p_.pre.push_back(std::move(s));
  }

  void decoder(const json& v, std::string_view field) {
    if (v.is_null()) return;
    const std::string type = type_of(v, field);
    DecodeStep s{};
    if (type == "Sequence") {
      const json& list = member(v, "decoders", field);
      if (!list.is_array()) error(fmt::format("{}.decoders", field), "must be a list");
      for (size_t i = 0; i < list.size(); ++i) decoder(list[i], fmt::format("{}.decoders[{}]", field, i));
      return;
    } else if (type == "ByteLevel") {
      s.kind = DecodeStep::byte_level;
    } else if (type == "ByteFallback") {
      s.kind = DecodeStep::byte_fallback;
    } else if (type == "Fuse") {
      s.kind = DecodeStep::fuse;
    } else if (type == "Strip") {
      s.kind = DecodeStep::strip;
      s.content = string_of(v, "content", field);
      const json& start = member(v, "start", field);
      const json& stop = member(v, "stop", field);
      auto count = [](const json& x) { return x.is_number_integer() && x.get<int64_t>() >= 0; };
      if (!count(start) || !count(stop))
        error(field, "start and stop must be counts (integers >= 0)");
      s.start = static_cast<int>(std::min<uint64_t>(start.get<uint64_t>(), 1 << 20));
      s.stop = static_cast<int>(std::min<uint64_t>(stop.get<uint64_t>(), 1 << 20));
    } else if (type == "Replace") {
      s.kind = DecodeStep::replace;
      const json& pat = member(v, "pattern", field);
      auto it = pat.is_object() ? pat.find("String") : pat.end();
      if (it == pat.end() || !it->is_string() || it->get<std::string>().empty())
        error(fmt::format("{}.pattern", field), "a decoder's Replace must be {\"String\": non-empty text}");
      s.text = it->get<std::string>();
      s.content = string_of(v, "content", field);
    } else if (type == "Metaspace") {
      s.kind = DecodeStep::metaspace;
      s.text = string_of(v, "replacement", field);
      s.prepend = PreStep::always;
      if (auto it = v.find("prepend_scheme"); it != v.end() && it->is_string())
        s.prepend = *it == "never" ? PreStep::never : *it == "first" ? PreStep::first : PreStep::always;
      else if (!bool_of(v, "add_prefix_space", field, true))
        s.prepend = PreStep::never;
    } else {
      error(fmt::format("{}.type", field),
            fmt::format("decoder \"{}\" is not supported (supported: ByteLevel, ByteFallback, Fuse, Strip, "
                        "Replace, Metaspace, Sequence)",
                        type));
    }
    p_.decoder.push_back(std::move(s));
  }

  std::vector<int32_t> special_ids(const json& specials, const std::string& name, std::string_view field) const {
    auto it = specials.is_object() ? specials.find(name) : specials.end();
    if (it == specials.end()) error(field, fmt::format("names \"{}\", which special_tokens does not list", name));
    const json& ids = member(*it, "ids", fmt::format("{}.special_tokens.{}", field, name));
    std::vector<int32_t> out;
    for (const json& id : ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= p_.vocab_size)
        error(fmt::format("{}.special_tokens.{}.ids", field, name),
              fmt::format("{} is not an id in [0, {})", id.dump(), p_.vocab_size));
      out.push_back(id.get<int32_t>());
    }
    return out;
  }

  int32_t id_of_pair(const json& pair, std::string_view field) const {
    if (!pair.is_array() || pair.size() != 2 || !pair[1].is_number_integer())
      error(field, "must be [token, id]");
    const int64_t id = pair[1].get<int64_t>();
    if (id < 0 || id >= p_.vocab_size) error(field, fmt::format("id {} is outside [0, {})", id, p_.vocab_size));
    return static_cast<int32_t>(id);
  }

  void post_processor(const json& v, std::string_view field) {
    if (v.is_null()) return;
    const std::string type = type_of(v, field);
    if (type == "Sequence") {
      const json& list = member(v, "processors", field);
      if (!list.is_array()) error(fmt::format("{}.processors", field), "must be a list");
      for (size_t i = 0; i < list.size(); ++i) post_processor(list[i], fmt::format("{}.processors[{}]", field, i));
    } else if (type == "ByteLevel") {
      // Offsets only.
    } else if (type == "TemplateProcessing") {
      const json& single = member(v, "single", field);
      const json& specials = member(v, "special_tokens", field);
      if (!single.is_array()) error(fmt::format("{}.single", field), "must be a list");
      bool seen_sequence = false;
      std::vector<int32_t> prefix, suffix;
      for (size_t i = 0; i < single.size(); ++i) {
        const std::string item = fmt::format("{}.single[{}]", field, i);
        const json& piece = single[i];
        if (!piece.is_object() || piece.size() != 1)
          error(item, "must be {\"SpecialToken\": ...} or {\"Sequence\": ...}");
        if (piece.contains("Sequence")) {
          if (seen_sequence) error(item, "a single-sequence template holds one Sequence");
          seen_sequence = true;
        } else if (auto it = piece.find("SpecialToken"); it != piece.end()) {
          std::vector<int32_t> ids = special_ids(specials, string_of(*it, "id", item), item);
          (seen_sequence ? suffix : prefix).insert((seen_sequence ? suffix : prefix).end(), ids.begin(), ids.end());
        } else {
          error(item, "must be {\"SpecialToken\": ...} or {\"Sequence\": ...}");
        }
      }
      if (!seen_sequence) error(fmt::format("{}.single", field), "has no {\"Sequence\": ...}");
      p_.prefix.insert(p_.prefix.end(), prefix.begin(), prefix.end());
      p_.suffix.insert(p_.suffix.begin(), suffix.begin(), suffix.end());
    } else if (type == "BertProcessing" || type == "RobertaProcessing") {
      p_.prefix.push_back(id_of_pair(member(v, "cls", field), fmt::format("{}.cls", field)));
      p_.suffix.insert(p_.suffix.begin(), id_of_pair(member(v, "sep", field), fmt::format("{}.sep", field)));
    } else {
      error(fmt::format("{}.type", field),
            fmt::format("post-processor \"{}\" is not supported (supported: TemplateProcessing, ByteLevel, "
                        "BertProcessing, RobertaProcessing, Sequence)",
                        type));
    }
  }

  void model(const json& v);
  void encoder(const json& v, bool ignore_merges);
  void added_tokens(const json& v);
  void eod(const std::string& eod_token);

 private:
  const std::string& source_;
  Pipeline& p_;
};

void Reader::model(const json& v) {
  const std::string type = v.is_object() && v.contains("type") ? type_of(v, "model") : "BPE";
  if (type != "BPE")
    error("model.type", fmt::format("model \"{}\" is not supported (supported: BPE)", type));
  if (auto it = v.find("dropout"); it != v.end() && !it->is_null() && !(it->is_number() && it->get<double>() == 0))
    error("model.dropout", "BPE dropout is a training-time regulariser; claw encodes without it (set null)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (auto it = v.find(key); it != v.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty()))
      error(fmt::format("model.{}", key), "is not supported (only byte-level and SentencePiece-style BPE)");
  p_.byte_fallback = bool_of(v, "byte_fallback", "model", false);
  p_.fuse_unk = bool_of(v, "fuse_unk", "model", false);
  const bool ignore_merges = bool_of(v, "ignore_merges", "model", false);

  const json& vocab = member(v, "vocab", "model");
  if (!vocab.is_object() || vocab.empty()) error("model.vocab", "must be a non-empty object of token -> id");
  int32_t size = 0;
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (int64_t{1} << 30))
      error("model.vocab", fmt::format("token \"{}\" has id {}; ids are integers in [0, 2^30)", token, id.dump()));
    size = std::max(size, id.get<int32_t>() + 1);
  }
  for (const HfAddedToken& a : p_.added) size = std::max(size, a.id + 1);
  p_.vocab_size = size;
  p_.token_text.assign(static_cast<size_t>(size), "");
  for (const auto& [token, id] : vocab.items()) {
    const int32_t i = id.get<int32_t>();
    if (!p_.token_text[static_cast<size_t>(i)].empty() || token.empty())
      error("model.vocab", fmt::format("id {} is given to more than one token (or to an empty one)", i));
    p_.token_text[static_cast<size_t>(i)] = token;
    p_.id_of.emplace(token, i);
  }
  if (auto it = v.find("unk_token"); it != v.end() && !it->is_null()) {
    if (!it->is_string()) error("model.unk_token", "must be a string or null");
    auto u = p_.id_of.find(it->get<std::string>());
    if (u == p_.id_of.end())
      error("model.unk_token", fmt::format("\"{}\" is not in the vocabulary", it->get<std::string>()));
    p_.unk = u->second;
  }

  encoder(v, ignore_merges);
}

// The core's tables: the tokens' bytes as it merges them, the merges
// (character mode: joining each character's bytes first), and what each id
// past the vocabulary stands for.
void Reader::encoder(const json& v, bool ignore_merges) {
  const int32_t size = p_.vocab_size;
  // Token bytes as the core sees them.
  std::vector<std::string> bytes(static_cast<size_t>(size));
  std::unordered_map<std::string, int32_t> id_of_bytes;
  std::string b;
  for (int32_t id = 0; id < size; ++id) {
    const std::string& t = p_.token_text[static_cast<size_t>(id)];
    if (t.empty()) continue;
    if (p_.byte_level) {
      if (!alphabet_to_bytes(t, b)) continue;  // e.g. a special token kept in the vocabulary: never merged
    } else {
      b = t;
    }
    if (id_of_bytes.emplace(b, id).second) bytes[static_cast<size_t>(id)] = b;
  }
  std::vector<BpeMerge> merges;
  // Single bytes the vocabulary lacks (in byte-level vocabularies, at most
  // those that never occur in UTF-8: 0xC0, 0xC1, 0xF5..0xFF) and, in
  // character mode, partial characters get ids past it; character mode
  // joins a character's bytes by ranks below every real merge.
  auto synthetic = [&](const std::string& s) {
    auto [it, fresh] = id_of_bytes.emplace(s, static_cast<int32_t>(bytes.size()));
    if (fresh) bytes.push_back(s);
    return it->second;
  };
  for (int c = 0; c < 256; ++c) synthetic(std::string(1, static_cast<char>(c)));
  if (!p_.byte_level) {
    std::unordered_set<uint64_t> made;
    for (int32_t id = 0; id < size; ++id) {
      const std::string t = bytes[static_cast<size_t>(id)];
      if (t.size() < 2 || utf8_length(static_cast<unsigned char>(t[0])) != t.size()) continue;
      int32_t left = synthetic(t.substr(0, 1));
      for (size_t k = 2; k <= t.size(); ++k) {
        const int32_t right = synthetic(t.substr(k - 1, 1));
        const int32_t result = synthetic(t.substr(0, k));
        if (made.insert(static_cast<uint64_t>(left) << 32 | static_cast<uint32_t>(right)).second)
          merges.push_back(BpeMerge{left, right, result, static_cast<int32_t>(merges.size())});
        left = result;
      }
    }
  }
  const int32_t first_rank = static_cast<int32_t>(merges.size());
  const json& list = member(v, "merges", "model");
  if (!list.is_array()) error("model.merges", "must be a list");
  std::unordered_set<uint64_t> pairs;
  std::string left_text, right_text, left, right;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& m = list[i];
    if (m.is_string()) {
      const std::string& line = m.get_ref<const std::string&>();
      const size_t sp = line.find(' ');
      if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos)
        error(fmt::format("model.merges[{}]", i), fmt::format("\"{}\" is not two tokens separated by one space", line));
      left_text = line.substr(0, sp);
      right_text = line.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left_text = m[0].get<std::string>();
      right_text = m[1].get<std::string>();
    } else {
      error(fmt::format("model.merges[{}]", i), "must be \"left right\" or [left, right]");
    }
    auto l = p_.id_of.find(left_text), r = p_.id_of.find(right_text), res = p_.id_of.find(left_text + right_text);
    if (l == p_.id_of.end() || r == p_.id_of.end() || res == p_.id_of.end())
      error(fmt::format("model.merges[{}]", i),
            fmt::format("\"{} {}\" joins or makes a token the vocabulary lacks", left_text, right_text));
    if (bytes[static_cast<size_t>(l->second)].empty() || bytes[static_cast<size_t>(r->second)].empty() ||
        bytes[static_cast<size_t>(res->second)].empty())
      error(fmt::format("model.merges[{}]", i),
            fmt::format("\"{} {}\" joins tokens outside the byte-level alphabet", left_text, right_text));
    if (!pairs.insert(static_cast<uint64_t>(l->second) << 32 | static_cast<uint32_t>(r->second)).second) continue;
    merges.push_back(BpeMerge{l->second, r->second, res->second, first_rank + static_cast<int32_t>(pairs.size()) - 1});
  }
  p_.encoder = std::make_unique<BpeEncoder>(bytes, merges, ignore_merges);

  {
    // What each id past the vocabulary stands for.
    std::vector<int32_t> byte_token(256, -1);
    bool all_bytes = p_.byte_fallback && !p_.byte_level;
    for (int c = 0; c < 256; ++c) {
      auto it = p_.id_of.find(fmt::format("<0x{:02X}>", c));
      if (it != p_.id_of.end()) byte_token[static_cast<size_t>(c)] = it->second;
      else all_bytes = false;
    }
    p_.fallback.assign(bytes.size() - static_cast<size_t>(size), {});
    for (size_t id = static_cast<size_t>(size); id < bytes.size(); ++id) {
      std::vector<int32_t>& f = p_.fallback[id - static_cast<size_t>(size)];
      const std::string& s = bytes[id];
      if (all_bytes) {
        for (char c : s) f.push_back(byte_token[static_cast<unsigned char>(c)]);
      } else if (p_.unk >= 0 && (static_cast<unsigned char>(s[0]) & 0xC0) != 0x80) {
        f.push_back(p_.unk);  // one unk per character: its continuation bytes add none
      }
    }
  }
}

void Reader::added_tokens(const json& v) {
  if (v.is_null()) return;
  if (!v.is_array()) error("added_tokens", "must be a list");
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string field = fmt::format("added_tokens[{}]", i);
    const json& t = v[i];
    if (!t.is_object()) error(field, "must be an object");
    HfAddedToken a;
    a.content = string_of(t, "content", field);
    if (a.content.empty()) error(fmt::format("{}.content", field), "must not be empty");
    const json& id = member(t, "id", field);
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (int64_t{1} << 30))
      error(fmt::format("{}.id", field), fmt::format("{} is not an id in [0, 2^30)", id.dump()));
    a.id = id.get<int32_t>();
    a.special = bool_of(t, "special", field, false);
    a.lstrip = bool_of(t, "lstrip", field, false);
    a.rstrip = bool_of(t, "rstrip", field, false);
    a.single_word = bool_of(t, "single_word", field, false);
    a.normalized = bool_of(t, "normalized", field, !a.special);
    p_.added.push_back(std::move(a));
  }
}

void Reader::eod(const std::string& eod_token) {
  auto find = [&](const std::string& t) -> int32_t {
    auto it = p_.id_of.find(t);
    return it == p_.id_of.end() ? -1 : it->second;
  };
  if (!eod_token.empty()) {
    p_.eod = find(eod_token);
    if (p_.eod < 0) fail("{}: the end-of-text token \"{}\" is not in the vocabulary", source_, eod_token);
    return;
  }
  for (const char* t : {"<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "<｜end▁of▁sentence｜>"})
    if ((p_.eod = find(t)) >= 0) return;
  fail("{}: no end-of-text token (none of <|endoftext|>, </s>, <|end_of_text|>, <eos>); name one as eos_token in a "
       "tokenizer_config.json beside it",
       source_);
}

}  // namespace

std::shared_ptr<Pipeline> read_pipeline(std::string_view json_text, const std::string& source,
                                        const std::string& eod_token) {
  if (const size_t at = json_too_deep(json_text); at != std::string_view::npos)
    fail("{}: JSON nested deeper than {} levels at byte {}", source, kMaxJsonDepth, at);
  json doc;
  try {
    doc = json::parse(json_text);
  } catch (const json::parse_error& e) {
    fail("{}: not valid JSON (byte {}): {}", source, e.byte, e.what());
  }
  return read_pipeline(doc, source, eod_token);
}

std::shared_ptr<Pipeline> read_pipeline(const nlohmann::json& doc, const std::string& source,
                                        const std::string& eod_token) {
  if (!doc.is_object()) fail("{}: a tokenizer.json is a JSON object", source);
  auto p = std::make_shared<Pipeline>();
  p->source = source;
  p->tag = next_tag.fetch_add(1);
  Reader r(source, *p);
  if (!doc.contains("model")) fail("{}: has no \"model\" (is it a tokenizer.json?)", source);
  auto field = [&](const char* key) -> const json& {
    static const json null_value;
    auto it = doc.find(key);
    return it == doc.end() ? null_value : *it;
  };
  r.added_tokens(field("added_tokens"));
  r.normalizer(field("normalizer"), "normalizer");
  r.pre_tokenizer(field("pre_tokenizer"), "pre_tokenizer");
  for (size_t i = 0; i < p->pre.size(); ++i)
    if (p->pre[i].kind == PreStep::byte_level) {
      if (i + 1 != p->pre.size())
        fail("{}: pre_tokenizer: ByteLevel must be the last pre-tokenizer (claw merges its pieces as bytes)", source);
      p->byte_level = true;
    }
  r.model(doc["model"]);
  for (HfAddedToken& a : p->added) {
    if (a.id >= p->vocab_size) fail("{}: added token \"{}\" id {} is outside the vocabulary", source, a.content, a.id);
    std::string& text = p->token_text[static_cast<size_t>(a.id)];
    if (text.empty()) text = a.content;
    p->id_of.emplace(a.content, a.id);
  }
  r.post_processor(field("post_processor"), "post_processor");
  r.decoder(field("decoder"), "decoder");
  r.eod(eod_token);

  p->normalized_content.resize(p->added.size());
  for (int32_t i = 0; i < static_cast<int32_t>(p->added.size()); ++i) {
    const HfAddedToken& a = p->added[static_cast<size_t>(i)];
    const bool normalized = a.normalized && !p->normalizer.empty();
    std::string& content = p->normalized_content[static_cast<size_t>(i)];
    content = normalized ? normalize(*p, a.content) : a.content;
    if (content.empty()) fail("{}: added token {} normalizes to nothing", source, i);
    (normalized ? p->normalized_matches : p->raw_matches)
        .by_first_byte[static_cast<unsigned char>(content[0])]
        .push_back(i);
  }
  for (Pipeline::AddedSet* set : {&p->raw_matches, &p->normalized_matches})
    for (std::vector<int32_t>& v : set->by_first_byte)
      std::stable_sort(v.begin(), v.end(), [&](int32_t a, int32_t b) {
        const auto& c = p->normalized_content;
        return c[static_cast<size_t>(a)].size() > c[static_cast<size_t>(b)].size();
      });
  if (!p->byte_level && (p->pre.empty() || (p->pre.size() == 1 && p->pre[0].kind == PreStep::metaspace &&
                                             !p->pre[0].split_on_replacement))) {
    const std::string marker = p->pre.empty() ? "\u2581" : p->pre[0].replacement;
    bool inner = false;
    for (const std::string& t : p->token_text)
      for (size_t at = t.find(marker, 1); at != std::string::npos && !inner; at = t.find(marker, at + 1))
        inner = at < marker.size() || t.compare(at - marker.size(), marker.size(), marker) != 0;
    if (!inner) p->word_marker = marker;
  }
  const std::vector<PreStep>& pre = p->pre;
  auto mapping_only = [](const PreStep& s) {
    return s.kind == PreStep::byte_level && !s.add_prefix_space && !s.use_regex;
  };
  if (pre.size() >= 1 && pre.size() <= 2 && (pre.size() == 1 || mapping_only(pre[1]))) {
    if (pre[0].kind == PreStep::split && pre[0].scanner) p->fast_scanner = pretoken_end_function(pre[0].scanner_kind);
    if (pre.size() == 1 && pre[0].kind == PreStep::byte_level && !pre[0].add_prefix_space && pre[0].use_regex)
      p->fast_scanner = pretoken_end_function(Pretokenizer::gpt2);
  }
  if (p->byte_level && p->decoder.size() == 1 && p->decoder[0].kind == DecodeStep::byte_level) {
    p->byte_text.resize(static_cast<size_t>(p->vocab_size));
    std::string b;
    for (int32_t id = 0; id < p->vocab_size; ++id) {
      const std::string& t = p->token_text[static_cast<size_t>(id)];
      // Characters outside the alphabet (special tokens) decode as themselves.
      std::string& out = p->byte_text[static_cast<size_t>(id)];
      for (size_t i = 0; i < t.size();) {
        const size_t n = std::min(utf8_length(static_cast<unsigned char>(t[i])), t.size() - i);
        if (alphabet_to_bytes(std::string_view(t).substr(i, n), b)) out += b;
        else out.append(t, i, n);
        i += n;
      }
    }
  }
  return p;
}

}  // namespace claw::data::hf
