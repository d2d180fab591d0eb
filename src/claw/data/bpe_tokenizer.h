// A byte-level BPE tokenizer: pre-tokenizer (pretokenizer.h) + BPE core
// (bpe_encoder.h) + special tokens. GPT-2's files (gpt2_bpe.h) and tiktoken
// rank files (tiktoken.h) are two loaders of this one class: each reads its
// format into a BpeVocabulary and hands it over.
//
// encode(text): split into pieces, encode each piece with the core (cached
// per distinct piece, bpe_piece_cache.h), concatenate. With
// SpecialTokens::recognise, each literal occurrence of a special token's
// text (leftmost first, longest among those starting at one position)
// becomes its id, and the text between occurrences is encoded on its own,
// so a special token never merges with its neighbours (tiktoken's
// allowed_special="all"). With ::as_text (the default) the same characters
// are ordinary text.
//
// decode(ids): the tokens' bytes concatenated, special tokens as their text;
// so decode(encode(x)) == x for any bytes x, in either special mode.
//
// Piece cache: each thread keeps one (bpe_piece_cache.h) in thread-local
// storage, tagged with the vocabulary it belongs to, and reuses it across
// encode() and encode_batch() calls as long as it encodes with the same
// vocabulary (a copy or move of a tokenizer shares the tag); switching
// vocabularies starts it over. A cache only saves work: results never
// depend on it. It holds at most BpePieceCache::kMaxArenaBytes per thread.
//
// Thread-safety: immutable after construction; all methods are const and
// may run concurrently (the caches are per thread).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "claw/data/bpe_encoder.h"
#include "claw/data/pretokenizer.h"
#include "claw/data/tokenizer.h"

namespace claw::data {

struct SpecialToken {
  std::string text;  // e.g. "<|endoftext|>"
  int32_t id;
};

// Everything a byte-level BPE tokenizer is made of, whatever file it came
// from. Loaders validate their files so that the invariants below hold;
// BpeTokenizer re-checks them with CLAW_CHECK.
struct BpeVocabulary {
  std::string name;                      // for name(), e.g. "gpt2-bpe", "cl100k_base"
  Pretokenizer pretokenizer = Pretokenizer::gpt2;
  std::vector<std::string> token_bytes;  // id -> bytes of a mergeable token; "" for special or unused ids
  std::vector<BpeMerge> merges;          // see bpe_encoder.h
  bool whole_piece_first = false;        // tiktoken's lookup of whole pieces (bpe_encoder.h)
  bool nfc = false;                      // Unicode NFC before pre-tokenization (tokenizer.json's NFC
                                         // normalizer: Qwen 2); text that is not valid UTF-8 is left as is
  std::vector<SpecialToken> specials;    // ids distinct from mergeable tokens' ids
  int32_t eod = -1;                      // a mergeable or special id
};

class BpeTokenizer : public Tokenizer {
 public:
  explicit BpeTokenizer(BpeVocabulary vocabulary);

  std::vector<std::vector<int32_t>> encode_batch(std::span<const std::string> texts, int num_threads,
                                                 SpecialTokens special = SpecialTokens::as_text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  // One past the largest id in use; ids in between that are neither
  // mergeable nor special (tiktoken leaves a few) are rejected by decode().
  int32_t vocab_size() const override { return vocab_size_; }
  int32_t eod() const override { return eod_; }
  std::string name() const override { return name_; }

  // Bytes of one token (a special token's text); claw::Error for an id
  // that is not in the vocabulary.
  std::string_view token_bytes(int32_t id) const;
  Pretokenizer pretokenizer() const { return pretokenizer_; }

 private:
  struct EncodeState;
  // This thread's state, emptied first if it last served another vocabulary.
  EncodeState& thread_state() const;

  std::vector<int32_t> encode_impl(std::string_view text, SpecialTokens special) const override;
  void encode_text(std::string_view text, SpecialTokens special, EncodeState& state, std::vector<int32_t>& out) const;
  void encode_ordinary(std::string_view text, EncodeState& state, std::vector<int32_t>& out) const;

  std::string name_;
  Pretokenizer pretokenizer_;
  bool nfc_ = false;
  BpeEncoder encoder_;
  std::vector<SpecialToken> specials_;
  int32_t vocab_size_ = 0;
  int32_t eod_ = -1;
  uint64_t vocabulary_tag_;  // unique per loaded vocabulary; tags thread-local caches
};

}  // namespace claw::data
