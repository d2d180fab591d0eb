// SentencePiece models (Kudo & Richardson 2018; Llama, T5, Gemma
// tokenizers) through Debian's libsentencepiece: a `.model` file (the
// serialized ModelProto written by spm_train or `claw train-tokenizer`)
// encodes exactly as the library's own tools (spm_encode) do.
//
// Contract beyond tokenizer.h:
//   - encode() runs the model's normalizer first (NFKC, whitespace folding
//     by default), so decode(encode(x)) == x only for normalized text;
//     unlike byte-level BPE, this is not a byte-exact round trip.
//   - Special tokens are the model's control pieces (<s>, </s>, <pad>, any
//     --control_symbols): SentencePiece never makes them from text. With
//     SpecialTokens::recognise, each literal occurrence of a control
//     piece's text becomes its id and the text between occurrences is
//     encoded separately (each part gets the model's dummy-prefix space,
//     as with Hugging Face's Llama tokenizer). decode() writes a control
//     id as its piece text, so recognised special tokens round-trip.
//   - eod() is the model's end-of-sentence id (</s>, `--eos_id`) unless
//     another piece is named; a model without eos needs that piece.
//
// Thread-safety: immutable after construction; SentencePieceProcessor's
// encode and decode are const and may run concurrently.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "claw/data/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace claw::data {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // eod_piece: the piece whose id is eod() ("": the model's eos piece).
  // Missing, unreadable or corrupt files are claw::Error naming the path.
  explicit SentencePieceTokenizer(const std::string& model_path, const std::string& eod_piece = "");
  ~SentencePieceTokenizer() override;
  SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept;

  std::string decode(std::span<const int32_t> ids) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  int32_t eod() const override { return eod_; }
  std::string name() const override { return "sentencepiece"; }

  // The piece text of an id (e.g. "▁the", "<0x0A>", "</s>").
  std::string piece(int32_t id) const;

 private:
  struct Special {
    std::string text;
    int32_t id;
  };

  std::vector<int32_t> encode_impl(std::string_view text, SpecialTokens special) const override;
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out) const;

  std::string path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::vector<Special> specials_;  // control pieces
  int32_t vocab_size_ = 0;
  int32_t eod_ = -1;
};

}  // namespace claw::data
