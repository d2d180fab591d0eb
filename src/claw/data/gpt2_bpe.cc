#include "claw/data/gpt2_bpe.h"

#include <algorithm>
#include <functional>
#include <queue>

#include <nlohmann/json.hpp>

#include "claw/core/error.h"
#include "claw/data/file_io.h"
#include "claw/data/gpt2_pretokenizer.h"

namespace claw::data {
namespace {

// encoder.py's bytes_to_unicode, inverted: code point -> byte, -1 if the
// code point is not in the alphabet. Only U+0000..U+0143 can be in it.
const std::array<int, 324>& alphabet_to_byte() {
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

// Decodes a token written in the byte alphabet (UTF-8 of code points
// U+0021..U+0143) to raw bytes; false if any character is outside it.
bool alphabet_to_bytes(std::string_view s, std::string& out) {
  out.clear();
  const auto& table = alphabet_to_byte();
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
    if (cp >= table.size() || table[cp] < 0) return false;
    out.push_back(static_cast<char>(table[cp]));
  }
  return true;
}

constexpr uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

std::string missing_hint(const std::string& path) {
  return fmt::format("GPT-2 tokenizer file {} not found; run scripts/fetch-data to download it", path);
}

}  // namespace

struct Gpt2Bpe::PieceCache {
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>> map;
};

Gpt2Bpe Gpt2Bpe::load(const std::string& dir) { return Gpt2Bpe(dir + "/encoder.json", dir + "/vocab.bpe"); }

Gpt2Bpe::Gpt2Bpe(const std::string& encoder_json_path, const std::string& vocab_bpe_path) {
  if (!path_exists(encoder_json_path)) throw Error(missing_hint(encoder_json_path));
  if (!path_exists(vocab_bpe_path)) throw Error(missing_hint(vocab_bpe_path));

  // encoder.json: token (byte alphabet) -> id, ids dense from 0.
  nlohmann::json encoder;
  try {
    encoder = nlohmann::json::parse(read_file(encoder_json_path, "GPT-2 encoder file"));
  } catch (const nlohmann::json::exception& e) {
    fail("GPT-2 encoder file {}: invalid JSON ({})", encoder_json_path, e.what());
  }
  if (!encoder.is_object() || encoder.empty())
    fail("GPT-2 encoder file {}: expected a non-empty JSON object of token -> id", encoder_json_path);
  const size_t vocab = encoder.size();
  token_bytes_.assign(vocab, std::string());
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
    token_bytes_[id] = bytes;
    id_of.emplace(bytes, id);
  }
  for (int b = 0; b < 256; ++b) {
    auto it = id_of.find(std::string(1, static_cast<char>(b)));
    if (it == id_of.end())
      fail("GPT-2 encoder file {}: no token for byte 0x{:02x}; a byte-level vocabulary needs all 256",
           encoder_json_path, b);
    byte_ids_[b] = it->second;
  }
  auto eod = id_of.find(std::string(kEndOfText));
  if (eod == id_of.end()) fail("GPT-2 encoder file {}: no \"{}\" token", encoder_json_path, kEndOfText);
  eod_ = eod->second;

  // vocab.bpe: one merge per line, rank = order. See the header for why the
  // halves must already exist and products must be new.
  std::string text = read_file(vocab_bpe_path, "GPT-2 merges file");
  std::vector<bool> produced(vocab, false);
  std::vector<int64_t> produced_at(vocab, 0);
  for (int b = 0; b < 256; ++b) produced[byte_ids_[b]] = true;
  std::string left, right;
  int64_t line_no = 0;
  int32_t rank = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string_view line(text.data() + pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
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
    if (m == id_of.end())
      fail("GPT-2 merges file {} line {}: the product of \"{}\" is not in {}", vocab_bpe_path, line_no, line,
           encoder_json_path);
    if (produced[m->second])
      fail("GPT-2 merges file {} line {}: \"{}\" makes a token already made by line {} (or a byte)", vocab_bpe_path,
           line_no, line, produced_at[m->second]);
    produced[m->second] = true;
    produced_at[m->second] = line_no;
    merges_.emplace(pair_key(l->second, r->second), Merge{rank++, m->second});
  }
}

const std::string& Gpt2Bpe::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) fail("token id {} is outside the GPT-2 vocabulary [0, {})", id, vocab_size());
  return token_bytes_[id];
}

const Gpt2Bpe::Merge* Gpt2Bpe::find_merge(int32_t left, int32_t right) const {
  auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void Gpt2Bpe::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  const int32_t n = static_cast<int32_t>(piece.size());
  CLAW_CHECK(static_cast<size_t>(n) == piece.size() && n > 0, "pre-token of {} bytes", piece.size());
  // Symbols form a linked list over the byte positions; a merge keeps the
  // left position and unlinks the right one (id -1 marks it dead).
  std::vector<int32_t> id(n), next(n), prev(n);
  for (int32_t i = 0; i < n; ++i) {
    id[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  // Candidate pairs keyed (rank, left position): the smallest key is the
  // lowest-rank pair, leftmost among equals. Entries go stale when a
  // neighbour merges; they are re-validated when popped.
  using Entry = std::pair<int32_t, int32_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push = [&](int32_t left) {
    if (left < 0 || next[left] < 0) return;
    if (const Merge* m = find_merge(id[left], id[next[left]])) heap.emplace(m->rank, left);
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    auto [rank, left] = heap.top();
    heap.pop();
    int32_t right = next[left];
    if (id[left] < 0 || right < 0) continue;
    const Merge* m = find_merge(id[left], id[right]);
    if (m == nullptr || m->rank != rank) continue;
    id[left] = m->id;
    id[right] = -1;
    next[left] = next[right];
    if (next[right] >= 0) prev[next[right]] = left;
    push(prev[left]);
    push(left);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(id[i]);
}

void Gpt2Bpe::encode_ordinary(std::string_view text, PieceCache& cache, std::vector<int32_t>& out) const {
  for (size_t b = 0; b < text.size();) {
    size_t e = gpt2_pretoken_end(text, b);
    std::string_view piece = text.substr(b, e - b);
    b = e;
    if (piece.size() == 1) {
      out.push_back(byte_ids_[static_cast<unsigned char>(piece[0])]);
      continue;
    }
    auto it = cache.map.find(piece);
    if (it == cache.map.end()) {
      std::vector<int32_t> ids;
      bpe(piece, ids);
      it = cache.map.emplace(std::string(piece), std::move(ids)).first;
    }
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
}

void Gpt2Bpe::encode_text(std::string_view text, SpecialTokens special, PieceCache& cache,
                          std::vector<int32_t>& out) const {
  if (special == SpecialTokens::as_text) return encode_ordinary(text, cache, out);
  // Text between special tokens is encoded on its own, so a special token
  // never merges with its neighbours.
  for (;;) {
    size_t at = text.find(kEndOfText);
    encode_ordinary(text.substr(0, at), cache, out);
    if (at == std::string_view::npos) return;
    out.push_back(eod_);
    text.remove_prefix(at + kEndOfText.size());
  }
}

std::vector<int32_t> Gpt2Bpe::encode_impl(std::string_view text, SpecialTokens special) const {
  PieceCache cache;
  std::vector<int32_t> out;
  out.reserve(text.size() / 4 + 1);  // English averages ~4.5 bytes per token
  encode_text(text, special, cache, out);
  return out;
}

std::vector<std::vector<int32_t>> Gpt2Bpe::encode_batch(std::span<const std::string> texts, int num_threads,
                                                        SpecialTokens special) const {
  const int64_t n = static_cast<int64_t>(texts.size());
  std::vector<std::vector<int32_t>> out(texts.size());
  const int nt = static_cast<int>(std::clamp<int64_t>(num_threads, 1, std::max<int64_t>(n, 1)));
  // One cache per thread, kept across that thread's documents: most pieces
  // of a new document were already seen in an earlier one.
#pragma omp parallel num_threads(nt)
  {
    PieceCache cache;
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n; ++i) {
      out[i].reserve(texts[i].size() / 4 + 1);
      encode_text(texts[i], special, cache, out[i]);
    }
  }
  return out;
}

std::string Gpt2Bpe::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) out += token_bytes(id);
  return out;
}

}  // namespace claw::data
