#include "claw/data/bpe_tokenizer.h"

#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <atomic>

#include "claw/core/error.h"
#include "claw/core/parallel.h"
#include "claw/data/bpe_piece_cache.h"
#include "claw/data/jsonl_record.h"

namespace claw::data {
namespace {

// Token bytes padded with "" up to the largest special id, so that every id
// below vocab_size() indexes the core's table.
std::vector<std::string> padded_token_bytes(BpeVocabulary& v) {
  std::vector<std::string> bytes = std::move(v.token_bytes);
  for (const SpecialToken& s : v.specials) {
    CLAW_CHECK(s.id >= 0 && !s.text.empty(), "special token '{}' id {}", s.text, s.id);
    if (static_cast<size_t>(s.id) >= bytes.size()) bytes.resize(static_cast<size_t>(s.id) + 1);
    CLAW_CHECK(bytes[s.id].empty(), "special token '{}' reuses mergeable id {}", s.text, s.id);
  }
  return bytes;
}

}  // namespace

struct BpeTokenizer::EncodeState {
  uint64_t tag = 0;  // vocabulary_tag_ of the tokenizer the cache belongs to; 0: none
  BpePieceCache cache;
  BpeEncoder::Scratch scratch;
};

namespace {
std::atomic<uint64_t> next_vocabulary_tag{1};
}  // namespace

BpeTokenizer::EncodeState& BpeTokenizer::thread_state() const {
  thread_local EncodeState state;
  if (state.tag != vocabulary_tag_) {
    state.cache = BpePieceCache();
    state.tag = vocabulary_tag_;
  }
  return state;
}

BpeTokenizer::BpeTokenizer(BpeVocabulary v)
    : name_(v.name),
      pretokenizer_(v.pretokenizer),
      nfc_(v.nfc),
      encoder_(padded_token_bytes(v), v.merges, v.whole_piece_first),
      specials_(std::move(v.specials)),
      vocab_size_(encoder_.num_ids()),
      eod_(v.eod),
      vocabulary_tag_(next_vocabulary_tag.fetch_add(1)) {
  CLAW_CHECK(eod_ >= 0 && eod_ < vocab_size_, "eod {} outside [0, {})", eod_, vocab_size_);
}

std::string_view BpeTokenizer::token_bytes(int32_t id) const {
  if (id >= 0 && id < vocab_size_) {
    std::string_view bytes = encoder_.token_bytes(id);
    if (!bytes.empty()) return bytes;
    for (const SpecialToken& s : specials_)
      if (s.id == id) return s.text;
    fail("token id {} is unused in the {} vocabulary (no token has it)", id, name_);
  }
  fail("token id {} is outside the {} vocabulary [0, {})", id, name_, vocab_size_);
}

namespace {
// NFC of valid UTF-8 text (ICU); `text` itself when it is ASCII, already
// normalized, or not valid UTF-8 (whose bytes byte-level BPE keeps).
std::string_view nfc(std::string_view text, std::string& buffer) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) return text;
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(status);
  if (U_FAILURE(status) || find_invalid_utf8(text) != std::string_view::npos) return text;
  const icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  if (n->isNormalized(u, status) && U_SUCCESS(status)) return text;
  status = U_ZERO_ERROR;
  const icu::UnicodeString normalized = n->normalize(u, status);
  if (U_FAILURE(status)) return text;
  buffer.clear();
  normalized.toUTF8String(buffer);
  return buffer;
}
}  // namespace

void BpeTokenizer::encode_ordinary(std::string_view text, EncodeState& state, std::vector<int32_t>& out) const {
  std::string normalized;
  if (nfc_) text = nfc(text, normalized);
  const PretokenEnd end_of = pretoken_end_function(pretokenizer_);
  for (size_t b = 0; b < text.size();) {
    const size_t e = end_of(text, b);
    const std::string_view piece = text.substr(b, e - b);
    b = e;
    if (piece.size() == 1) {
      out.push_back(encoder_.byte_id(static_cast<unsigned char>(piece[0])));
      continue;
    }
    encode_cached(state.cache, piece, out, [&](std::string_view p, std::vector<int32_t>& ids) {
      encoder_.encode_piece(p, state.scratch, ids);
    });
  }
}

void BpeTokenizer::encode_text(std::string_view text, SpecialTokens special, EncodeState& state,
                               std::vector<int32_t>& out) const {
  if (special == SpecialTokens::as_text || specials_.empty()) return encode_ordinary(text, state, out);
  // next[k]: where special k next occurs at or after `pos` (npos: nowhere);
  // kept across iterations so the text is scanned once per special.
  constexpr size_t npos = std::string_view::npos;
  std::vector<size_t> next(specials_.size());
  for (size_t k = 0; k < specials_.size(); ++k) next[k] = text.find(specials_[k].text);
  for (size_t pos = 0;;) {
    size_t at = npos;
    const SpecialToken* found = nullptr;
    for (size_t k = 0; k < specials_.size(); ++k) {
      if (next[k] != npos && next[k] < pos) next[k] = text.find(specials_[k].text, pos);
      if (next[k] == npos) continue;
      if (next[k] < at || (next[k] == at && specials_[k].text.size() > found->text.size())) {
        at = next[k];
        found = &specials_[k];
      }
    }
    encode_ordinary(text.substr(pos, at == npos ? npos : at - pos), state, out);
    if (found == nullptr) return;
    out.push_back(found->id);
    pos = at + found->text.size();
  }
}

std::vector<int32_t> BpeTokenizer::encode_impl(std::string_view text, SpecialTokens special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 4 + 1);  // English averages ~4.5 bytes per token
  encode_text(text, special, thread_state(), out);
  return out;
}

std::vector<std::vector<int32_t>> BpeTokenizer::encode_batch(std::span<const std::string> texts, int num_threads,
                                                             SpecialTokens special) const {
  const int64_t n = static_cast<int64_t>(texts.size());
  std::vector<std::vector<int32_t>> out(texts.size());
  const int nt = static_cast<int>(std::clamp<int64_t>(num_threads, 1, std::max<int64_t>(n, 1)));
  // Each document is encoded into a thread-local buffer and copied out
  // once: neighbouring out[i] headers share cache lines, and growing them
  // from two threads would bounce those lines on every id.
  RegionErrors errors;
#pragma omp parallel num_threads(nt)
  {
    std::vector<int32_t> ids;
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n; ++i)
      errors.guard([&] {
        ids.clear();
        encode_text(texts[i], special, thread_state(), ids);
        out[i].assign(ids.begin(), ids.end());
      });
  }
  errors.rethrow();
  return out;
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) out += token_bytes(id);
  return out;
}

}  // namespace claw::data
