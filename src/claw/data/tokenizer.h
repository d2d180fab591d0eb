// Tokenizer: text <-> token ids, the one interface the data pipeline, the
// trainer's sample printing and the server see. Implementations: byte-level
// BPE (bpe_tokenizer.h) loaded from GPT-2's files (gpt2_bpe.h) or a tiktoken
// rank file (tiktoken.h), and SentencePiece (sentencepiece_tokenizer.h);
// tokenizer_factory.h builds one from Megatron's flags.
//
// Contract:
//   - encode() returns ids in [0, vocab_size()).
//   - decode() concatenates the bytes of the ids. It does not repair UTF-8:
//     a cut in the middle of a multi-byte character yields those bytes as
//     they are, so decode(encode(x)) == x byte for byte for byte-level
//     tokenizers, and callers that print partial outputs decide how to show
//     incomplete characters.
//   - eod() is the end-of-document id appended after every document when a
//     corpus is tokenized (Megatron's --append-eod).
//   - Special-token strings such as "<|endoftext|>" are ordinary text unless
//     the caller asks for them to be recognised (SpecialTokens::recognise):
//     text from users or corpora must not be able to inject control ids.
//
// Thread-safety: a loaded tokenizer is immutable; every const method may be
// called from any number of threads at once.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace claw::data {

enum class SpecialTokens {
  as_text,    // "<|endoftext|>" in the input is encoded like any other text
  recognise,  // literal special-token strings become their special ids
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  std::vector<int32_t> encode(std::string_view text, SpecialTokens special = SpecialTokens::as_text) const {
    return encode_impl(text, special);
  }

  // Encodes many documents on up to num_threads threads; result[i] is
  // encode(texts[i], special). Implementations may share work (caches)
  // between documents handled by the same thread.
  virtual std::vector<std::vector<int32_t>> encode_batch(std::span<const std::string> texts, int num_threads,
                                                         SpecialTokens special = SpecialTokens::as_text) const;

  // Throws claw::Error for an id outside [0, vocab_size()).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual int32_t eod() const = 0;
  // Short identifier for logs and metadata, e.g. "gpt2-bpe".
  virtual std::string name() const = 0;

 protected:
  // Non-virtual encode() with a default argument in front of this, so a
  // default never depends on the static type of the caller's pointer.
  virtual std::vector<int32_t> encode_impl(std::string_view text, SpecialTokens special) const = 0;
};

}  // namespace claw::data
