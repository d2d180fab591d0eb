// GPT-2 byte-level BPE (Radford et al. 2019, "Language Models are
// Unsupervised Multitask Learners", sec. 2.2; reference implementation
// openai/gpt-2 src/encoder.py), loaded from the original files:
//
//   encoder.json  {"token": id, ...}: 50257 tokens. Each token is a byte
//                 string written in GPT-2's printable byte alphabet (below).
//   vocab.bpe     "#version: 0.2", then one merge "left right" per line;
//                 line order is the merge rank (earlier = applied first).
//
// Byte alphabet (encoder.py's bytes_to_unicode): the 188 bytes that are
// printable Latin-1 ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) stand for
// themselves; the other 68 bytes, in increasing order, are written as
// U+0100, U+0101, ... So the space byte 0x20 appears as U+0120 'Ġ'. claw
// maps every token back to raw bytes at load and works on bytes from then on.
//
// encode(text): split into pre-tokens (gpt2_pretokenizer.h); each piece
// starts as one symbol per byte; repeatedly merge the adjacent pair with the
// lowest rank (leftmost first among equal pairs) until no pair has a rank;
// the final symbols are the ids. Results are cached per distinct piece for
// the duration of one encode()/encode_batch() call, which is what makes a
// 10 MB corpus take seconds: natural text repeats a small set of words.
//
// Load-time checks (claw::Error naming the file and line): every token
// decodes through the byte alphabet; ids are exactly 0..N-1; every merge's
// two halves are single bytes or products of earlier merges, and its product
// is a token not produced by any other merge. The last two make the
// lowest-rank-first merge loop here give exactly encoder.py's result (which
// merges all occurrences of the best pair per pass); GPT-2's files satisfy
// them.
//
// "<|endoftext|>" (id 50256) is eod(). With SpecialTokens::as_text it is
// encoded as the 13 characters it consists of; with ::recognise each literal
// occurrence becomes id 50256 (tiktoken's allowed_special="all").
//
// Thread-safety: immutable after construction; all methods are const and may
// run concurrently. Caches live in each call, not in the object.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "claw/data/tokenizer.h"

namespace claw::data {

class Gpt2Bpe final : public Tokenizer {
 public:
  static constexpr std::string_view kEndOfText = "<|endoftext|>";

  // Loads <dir>/encoder.json and <dir>/vocab.bpe. A missing file is a
  // claw::Error that names the path and says to run scripts/fetch-data.
  static Gpt2Bpe load(const std::string& dir);
  Gpt2Bpe(const std::string& encoder_json_path, const std::string& vocab_bpe_path);

  std::vector<std::vector<int32_t>> encode_batch(std::span<const std::string> texts, int num_threads,
                                                 SpecialTokens special = SpecialTokens::as_text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(token_bytes_.size()); }
  int32_t eod() const override { return eod_; }
  std::string name() const override { return "gpt2-bpe"; }

  // Raw bytes of one token (the unit decode() concatenates).
  const std::string& token_bytes(int32_t id) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t id;  // the merged token
  };
  struct PieceCache;

  std::vector<int32_t> encode_impl(std::string_view text, SpecialTokens special) const override;
  void encode_text(std::string_view text, SpecialTokens special, PieceCache& cache, std::vector<int32_t>& out) const;
  void encode_ordinary(std::string_view text, PieceCache& cache, std::vector<int32_t>& out) const;
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  const Merge* find_merge(int32_t left, int32_t right) const;

  std::vector<std::string> token_bytes_;         // id -> raw bytes
  std::array<int32_t, 256> byte_ids_{};          // byte -> id of its one-byte token
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> merge
  int32_t eod_ = -1;
};

}  // namespace claw::data
