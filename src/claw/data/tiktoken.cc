#include "claw/data/tiktoken.h"

#include <algorithm>

#include <array>
#include <charconv>
#include <filesystem>
#include <functional>
#include <optional>
#include <unordered_map>

#include <fmt/ranges.h>

#include "claw/core/error.h"
#include "claw/data/file_io.h"

namespace claw::data {
namespace {

struct Encoding {
  std::string_view name;
  Pretokenizer pretokenizer;
  std::vector<SpecialToken> specials;
  size_t num_ranks;  // lines of OpenAI's file
};

// tiktoken_ext/openai_public.py (tiktoken@1.0.22 registry.json).
const std::vector<Encoding>& encodings() {
  static const std::vector<Encoding> table = {
      {"r50k_base", Pretokenizer::gpt2, {{"<|endoftext|>", 50256}}, 50256},
      {"p50k_base", Pretokenizer::gpt2, {{"<|endoftext|>", 50256}}, 50280},
      {"cl100k_base",
       Pretokenizer::cl100k,
       {{"<|endoftext|>", 100257},
        {"<|fim_prefix|>", 100258},
        {"<|fim_middle|>", 100259},
        {"<|fim_suffix|>", 100260},
        {"<|endofprompt|>", 100276}},
       100256},
      {"o200k_base", Pretokenizer::o200k, {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}}, 199998},
  };
  return table;
}

const Encoding* find_encoding(std::string_view name) {
  for (const Encoding& e : encodings())
    if (e.name == name) return &e;
  return nullptr;
}

// Base64 digit value, -1 for bytes outside the standard alphabet.
const std::array<int8_t, 256>& base64_digits() {
  static const std::array<int8_t, 256> table = [] {
    std::array<int8_t, 256> t;
    t.fill(-1);
    const std::string_view alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < alphabet.size(); ++i) t[static_cast<unsigned char>(alphabet[i])] = static_cast<int8_t>(i);
    return t;
  }();
  return table;
}

// Canonical padded base64 (RFC 4648 sec. 4) -> bytes; nullopt if malformed.
std::optional<std::string> base64_decode(std::string_view s) {
  if (s.empty() || s.size() % 4 != 0) return std::nullopt;
  const auto& digit = base64_digits();
  size_t pad = s.ends_with("==") ? 2 : s.ends_with("=") ? 1 : 0;
  std::string out;
  out.reserve(s.size() / 4 * 3);
  for (size_t i = 0; i < s.size(); i += 4) {
    const bool last = i + 4 == s.size();
    uint32_t v = 0;
    for (size_t k = 0; k < 4; ++k) {
      const bool padding = last && k >= 4 - pad;
      const int d = padding ? 0 : digit[static_cast<unsigned char>(s[i + k])];
      if (d < 0) return std::nullopt;
      v = v << 6 | static_cast<uint32_t>(d);
    }
    // Bits under the padding must be zero, or two spellings would decode alike.
    if ((pad == 1 && last && (v & 0xFF) != 0) || (pad == 2 && last && (v & 0xFFFF) != 0)) return std::nullopt;
    out.push_back(static_cast<char>(v >> 16));
    if (!last || pad < 2) out.push_back(static_cast<char>(v >> 8 & 0xFF));
    if (!last || pad < 1) out.push_back(static_cast<char>(v & 0xFF));
  }
  return out;
}

// bytes -> rank, looked up by string_view without copying.
struct BytesHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using RankMap = std::unordered_map<std::string, int32_t, BytesHash, std::equal_to<>>;

std::string stem_of(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  if (name.ends_with(".tiktoken")) name.resize(name.size() - std::string_view(".tiktoken").size());
  return name;
}

BpeVocabulary read_rank_file(const std::string& path, const std::string& pattern) {
  if (!path_exists(path))
    fail("tiktoken rank file {} not found; run scripts/fetch-data to download r50k_base, p50k_base, cl100k_base "
         "and o200k_base into <data dir>/tiktoken/",
         path);
  const std::string stem = stem_of(path);
  const Encoding* known = find_encoding(stem);
  if (known == nullptr && pattern.empty())
    fail("tiktoken rank file {}: '{}' is not a known encoding ({}), so pass --tiktoken-pattern gpt2, cl100k or o200k "
         "to choose its pre-tokenizer",
         path, stem, fmt::join(TikTokenizer::known_encodings(), ", "));

  BpeVocabulary v;
  v.name = stem;
  v.pretokenizer = pattern.empty() ? known->pretokenizer : parse_pretokenizer(pattern, "--tiktoken-pattern");
  v.whole_piece_first = true;

  const std::string text = read_file(path, "tiktoken rank file");
  const auto max_ranks = static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  std::vector<std::string>& token_bytes = v.token_bytes;
  std::vector<int64_t> line_of_rank;  // rank -> line that defined it (0: none)
  RankMap rank_of;
  rank_of.reserve(text.size() / 8);
  for_each_line(text, [&](int64_t line_no, std::string_view line) {
    if (line.empty()) return;
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos)
      fail("tiktoken rank file {} line {}: expected \"<base64 token> <rank>\", got \"{}\"", path, line_no, line);
    std::optional<std::string> bytes = base64_decode(line.substr(0, sp));
    if (!bytes)
      fail("tiktoken rank file {} line {}: \"{}\" is not canonical base64 (A-Z a-z 0-9 + /, padded with = to a "
           "multiple of 4)",
           path, line_no, line.substr(0, sp));
    const std::string_view rank_text = line.substr(sp + 1);
    int32_t rank = -1;
    auto [end, ec] = std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
    if (ec != std::errc() || end != rank_text.data() + rank_text.size() || rank < 0 || rank == INT32_MAX)
      fail("tiktoken rank file {} line {}: rank \"{}\" is not an integer in [0, {})", path, line_no, rank_text,
           INT32_MAX);
    // Ranks are dense in real files: one far beyond the file's line count
    // (and beyond every known encoding's) is damage, not a vocabulary, and
    // would size the tables by it.
    if (static_cast<size_t>(rank) > std::max<size_t>(2 * max_ranks + 1024, size_t{1} << 18))
      fail("tiktoken rank file {} line {}: rank {} is far beyond the file's {} lines (ranks are dense from 0)", path,
           line_no, rank, max_ranks);
    if (static_cast<size_t>(rank) >= token_bytes.size()) {
      token_bytes.resize(static_cast<size_t>(rank) + 1);
      line_of_rank.resize(static_cast<size_t>(rank) + 1, 0);
    }
    if (line_of_rank[rank] != 0)
      fail("tiktoken rank file {} line {}: rank {} is already used by line {}", path, line_no, rank,
           line_of_rank[rank]);
    auto [it, inserted] = rank_of.emplace(*bytes, rank);
    if (!inserted)
      fail("tiktoken rank file {} line {}: token \"{}\" already has rank {} (line {})", path, line_no,
           line.substr(0, sp), it->second, line_of_rank[it->second]);
    line_of_rank[rank] = line_no;
    token_bytes[rank] = std::move(*bytes);
  });
  if (rank_of.empty()) fail("tiktoken rank file {} has no tokens", path);
  for (int b = 0; b < 256; ++b)
    if (const char c = static_cast<char>(b); !rank_of.contains(std::string_view(&c, 1)))
      fail("tiktoken rank file {}: no token for byte 0x{:02x}; a byte-level vocabulary needs all 256", path, b);

  v.specials = known != nullptr
                   ? known->specials
                   : std::vector<SpecialToken>{{"<|endoftext|>", static_cast<int32_t>(token_bytes.size())}};
  for (const SpecialToken& s : v.specials)
    if (static_cast<size_t>(s.id) < token_bytes.size() && line_of_rank[s.id] != 0)
      fail("tiktoken rank file {} line {}: rank {} is {}'s id in {}; the file is not {}", path, line_of_rank[s.id],
           s.id, s.text, stem, stem);
  v.eod = v.specials.front().id;
  if (known != nullptr && rank_of.size() != known->num_ranks)
    fail("tiktoken rank file {} has {} tokens, but {} has {}; the file is truncated or not {}", path, rank_of.size(),
         stem, known->num_ranks, stem);

  // Every split of a token into two tokens merges to it at its rank.
  for (int32_t id = 0; id < static_cast<int32_t>(token_bytes.size()); ++id) {
    const std::string_view t = token_bytes[id];
    for (size_t k = 1; k < t.size(); ++k) {
      auto l = rank_of.find(t.substr(0, k));
      if (l == rank_of.end()) continue;
      auto r = rank_of.find(t.substr(k));
      if (r == rank_of.end()) continue;
      v.merges.push_back(BpeMerge{l->second, r->second, id, id});
    }
  }
  return v;
}

}  // namespace

TikTokenizer::TikTokenizer(const std::string& rank_file, const std::string& pattern)
    : BpeTokenizer(read_rank_file(rank_file, pattern)) {}

std::vector<std::string> TikTokenizer::known_encodings() {
  std::vector<std::string> names;
  for (const Encoding& e : encodings()) names.emplace_back(e.name);
  return names;
}

}  // namespace claw::data
