#include "claw/data/gpt2_bpe.h"

#include <array>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "claw/core/error.h"
#include "claw/data/file_io.h"

namespace claw::data {

static const std::array<int, 324>& alphabet_to_byte_table() {
  static const std::array<int, 324> table = [] {
    std::array<int, 324> t;
    t.fill(-1);
    auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); };
    int next = 256;
    for (int b = 0; b < 256; ++b) t[printable(b) ? b : next++] = b;
    return t;
  }();
  return table;
}

int alphabet_byte(uint32_t cp) {
  const auto& table = alphabet_to_byte_table();
  return cp < table.size() ? table[cp] : -1;
}

bool alphabet_to_bytes(std::string_view s, std::string& out) {
  out.clear();
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    uint32_t cp;
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < s.size() && (static_cast<unsigned char>(s[i + 1]) & 0xC0) == 0x80) {
      cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu);
      i += 2;
    } else {
      return false;  // three- and four-byte characters are all outside the alphabet
    }
    const int b = alphabet_byte(cp);
    if (b < 0) return false;
    out.push_back(static_cast<char>(b));
  }
  return true;
}

namespace {

std::string missing_hint(const std::string& path) {
  return fmt::format("GPT-2 tokenizer file {} not found; run scripts/fetch-data to download it", path);
}

// The vocabulary from encoder.json's object and vocab.bpe's text; the two
// names say where they came from in errors.
BpeVocabulary gpt2_vocabulary(const nlohmann::json& encoder, const std::string& text,
                              const std::string& encoder_json_path, const std::string& vocab_bpe_path) {
  BpeVocabulary v;
  v.name = "gpt2-bpe";
  v.pretokenizer = Pretokenizer::gpt2;

  // encoder.json: token (byte alphabet) -> id, ids dense from 0.
  if (!encoder.is_object() || encoder.empty())
    fail("GPT-2 encoder file {}: expected a non-empty JSON object of token -> id", encoder_json_path);
  const size_t vocab = encoder.size();
  std::vector<std::string> token_bytes(vocab);
  std::vector<bool> seen(vocab, false);
  std::unordered_map<std::string, int32_t> id_of;  // raw bytes -> id, for resolving merges
  id_of.reserve(vocab);
  std::string bytes;
  for (const auto& [token, value] : encoder.items()) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() >= static_cast<int64_t>(vocab))
      fail("GPT-2 encoder file {}: token \"{}\" has id {}; ids must be integers in [0, {})", encoder_json_path, token,
           value.dump(), vocab);
    int32_t id = value.get<int32_t>();
    if (seen[id]) fail("GPT-2 encoder file {}: id {} is used by more than one token", encoder_json_path, id);
    if (!alphabet_to_bytes(token, bytes))
      fail("GPT-2 encoder file {}: token \"{}\" (id {}) has a character outside GPT-2's byte alphabet",
           encoder_json_path, token, id);
    seen[id] = true;
    token_bytes[id] = bytes;
    id_of.emplace(bytes, id);
  }
  std::vector<bool> produced(vocab, false);
  for (int b = 0; b < 256; ++b) {
    auto it = id_of.find(std::string(1, static_cast<char>(b)));
    if (it == id_of.end())
      fail("GPT-2 encoder file {}: no token for byte 0x{:02x}; a byte-level vocabulary needs all 256",
           encoder_json_path, b);
    produced[it->second] = true;
  }
  // "<|endoftext|>" is written in the alphabet like any token, but BPE never
  // makes it: it becomes the special token, outside the merge table.
  auto eod = id_of.find(std::string(Gpt2Bpe::kEndOfText));
  if (eod == id_of.end()) fail("GPT-2 encoder file {}: no \"{}\" token", encoder_json_path, Gpt2Bpe::kEndOfText);
  v.eod = eod->second;
  v.specials.push_back(SpecialToken{std::string(Gpt2Bpe::kEndOfText), v.eod});
  token_bytes[v.eod].clear();

  // vocab.bpe: one merge per line, rank = order. See the header for why the
  // halves must already exist and products must be new.
  std::vector<int64_t> produced_at(vocab, 0);
  std::string left, right;
  int32_t rank = 0;
  for_each_line(text, [&](int64_t line_no, std::string_view line) {
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) return;
    size_t sp = line.find(' ');
    if (sp == std::string_view::npos || sp == 0 || sp + 1 == line.size() || line.find(' ', sp + 1) != line.npos)
      fail("GPT-2 merges file {} line {}: expected two tokens separated by one space, got \"{}\"", vocab_bpe_path,
           line_no, line);
    if (!alphabet_to_bytes(line.substr(0, sp), left) || !alphabet_to_bytes(line.substr(sp + 1), right))
      fail("GPT-2 merges file {} line {}: \"{}\" has a character outside GPT-2's byte alphabet", vocab_bpe_path,
           line_no, line);
    auto l = id_of.find(left), r = id_of.find(right), m = id_of.find(left + right);
    if (l == id_of.end() || r == id_of.end() || !produced[l->second] || !produced[r->second])
      fail("GPT-2 merges file {} line {}: \"{}\" merges a token that is neither a byte nor made by an earlier line",
           vocab_bpe_path, line_no, line);
    if (m == id_of.end() || m->second == v.eod)
      fail("GPT-2 merges file {} line {}: the product of \"{}\" is not in {}", vocab_bpe_path, line_no, line,
           encoder_json_path);
    if (produced[m->second])
      fail("GPT-2 merges file {} line {}: \"{}\" makes a token already made by line {} (or a byte)", vocab_bpe_path,
           line_no, line, produced_at[m->second]);
    produced[m->second] = true;
    produced_at[m->second] = line_no;
    v.merges.push_back(BpeMerge{l->second, r->second, m->second, rank++});
  });
  v.token_bytes = std::move(token_bytes);
  return v;
}

BpeVocabulary read_gpt2_files(const std::string& encoder_json_path, const std::string& vocab_bpe_path) {
  if (!path_exists(encoder_json_path)) throw Error(missing_hint(encoder_json_path));
  if (!path_exists(vocab_bpe_path)) throw Error(missing_hint(vocab_bpe_path));
  nlohmann::json encoder;
  try {
    encoder = nlohmann::json::parse(read_file(encoder_json_path, "GPT-2 encoder file"));
  } catch (const nlohmann::json::exception& e) {
    fail("GPT-2 encoder file {}: invalid JSON ({})", encoder_json_path, e.what());
  }
  return gpt2_vocabulary(encoder, read_file(vocab_bpe_path, "GPT-2 merges file"), encoder_json_path, vocab_bpe_path);
}

}  // namespace

BpeVocabulary byte_level_bpe(const ByteLevelBpeSpec& spec, const std::string& source) {
  BpeVocabulary v;
  v.name = spec.name;
  v.pretokenizer = spec.pre;
  v.whole_piece_first = spec.ignore_merges;
  v.nfc = spec.nfc;
  const size_t vocab = spec.tokens.size();
  if (vocab == 0) fail("{}: no tokens", source);
  std::vector<bool> special(vocab, false);
  for (int32_t id : spec.specials) {
    if (id < 0 || static_cast<size_t>(id) >= vocab)
      fail("{}: special token id {} is outside [0, {})", source, id, vocab);
    special[static_cast<size_t>(id)] = true;
  }
  std::vector<bool> unused(vocab, false);
  for (int32_t id : spec.unused)
    if (id >= 0 && static_cast<size_t>(id) < vocab && !special[static_cast<size_t>(id)])
      unused[static_cast<size_t>(id)] = true;
  v.token_bytes.assign(vocab, "");
  std::unordered_map<std::string, int32_t> id_of;
  id_of.reserve(vocab);
  std::string bytes;
  for (size_t id = 0; id < vocab; ++id) {
    const std::string& t = spec.tokens[id];
    if (special[id]) {
      if (t.empty()) fail("{}: special token {} is empty", source, id);
      v.specials.push_back(SpecialToken{t, static_cast<int32_t>(id)});
      continue;
    }
    if (unused[id]) continue;
    if (!alphabet_to_bytes(t, bytes))
      fail("{}: token {} \"{}\" has a character outside the byte-level alphabet (not a byte-level BPE vocabulary?)",
           source, id, t);
    v.token_bytes[id] = bytes;
    if (!id_of.emplace(bytes, static_cast<int32_t>(id)).second)
      continue;  // a duplicate spelling (some vocabularies hold unused copies): the first id is the one merges make
  }
  for (int b = 0; b < 256; ++b)
    if (!id_of.count(std::string(1, static_cast<char>(b))))
      fail("{}: no token for byte 0x{:02x}; a byte-level vocabulary needs all 256", source, b);
  // Every merge is kept, at its rank: as the tokenizers library does, a
  // token several merges make is made by whichever applies first.
  std::unordered_set<uint64_t> pairs;
  std::string left, right;
  int32_t rank = 0;
  for (size_t i = 0; i < spec.merges.size(); ++i) {
    const std::string& line = spec.merges[i];
    const size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == line.size() || line.find(' ', sp + 1) != std::string::npos)
      fail("{}: merge {} \"{}\" is not two tokens separated by one space", source, i, line);
    if (!alphabet_to_bytes(std::string_view(line).substr(0, sp), left) ||
        !alphabet_to_bytes(std::string_view(line).substr(sp + 1), right))
      fail("{}: merge {} \"{}\" has a character outside the byte-level alphabet", source, i, line);
    auto l = id_of.find(left), r = id_of.find(right), m = id_of.find(left + right);
    if (l == id_of.end() || r == id_of.end() || m == id_of.end())
      fail("{}: merge {} \"{}\" joins or makes a token the vocabulary lacks", source, i, line);
    if (!pairs.insert(static_cast<uint64_t>(l->second) << 32 | static_cast<uint32_t>(r->second)).second)
      continue;  // the same pair again: its first rank is the one that applies
    v.merges.push_back(BpeMerge{l->second, r->second, m->second, rank++});
  }
  if (spec.eod < 0 || static_cast<size_t>(spec.eod) >= vocab)
    fail("{}: end-of-text id {} is outside the vocabulary", source, spec.eod);
  v.eod = spec.eod;
  return v;
}

Gpt2Bpe::Gpt2Bpe(BpeVocabulary v) : BpeTokenizer(std::move(v)) {}

Gpt2Bpe Gpt2Bpe::from_tokens(const std::vector<std::string>& tokens, const std::vector<std::string>& merges,
                             const std::string& source) {
  nlohmann::json encoder = nlohmann::json::object();
  for (size_t i = 0; i < tokens.size(); ++i) encoder[tokens[i]] = i;
  if (encoder.size() != tokens.size()) fail("{}: the token list repeats a token", source);
  std::string text;
  for (const std::string& m : merges) text += m + "\n";
  return Gpt2Bpe(gpt2_vocabulary(encoder, text, source + " tokens", source + " merges"));
}

Gpt2Bpe Gpt2Bpe::load(const std::string& dir) { return Gpt2Bpe(dir + "/encoder.json", dir + "/vocab.bpe"); }

Gpt2Bpe::Gpt2Bpe(const std::string& encoder_json_path, const std::string& vocab_bpe_path)
    : BpeTokenizer(read_gpt2_files(encoder_json_path, vocab_bpe_path)) {}

}  // namespace claw::data
