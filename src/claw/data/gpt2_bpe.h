// GPT-2 byte-level BPE (Radford et al. 2019, "Language Models are
// Unsupervised Multitask Learners", sec. 2.2; reference implementation
// openai/gpt-2 src/encoder.py), loaded from the original files into the
// shared byte-level BPE tokenizer (bpe_tokenizer.h):
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
// Encoding: GPT-2 pre-tokenization (gpt2_pretokenizer.h), then per piece the
// lowest-rank merge first (bpe_encoder.h) with exactly the merges listed.
//
// Load-time checks (claw::Error naming the file and line): every token
// decodes through the byte alphabet; ids are exactly 0..N-1; every merge's
// two halves are single bytes or products of earlier merges, and its product
// is a token not produced by any other merge. The last two make the
// lowest-rank-first merge loop give exactly encoder.py's result (which
// merges all occurrences of the best pair per pass); GPT-2's files satisfy
// them.
//
// "<|endoftext|>" (id 50256) is eod(). With SpecialTokens::as_text it is
// encoded as the 13 characters it consists of; with ::recognise each literal
// occurrence becomes id 50256 (tiktoken's allowed_special="all").
//
// Thread-safety: as BpeTokenizer (immutable, all methods const).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "claw/data/bpe_tokenizer.h"

namespace claw::data {

// GPT-2's byte alphabet (above): the byte a code point stands for, -1 for
// one outside the alphabet; and a token written in it as raw bytes (false
// if a character is outside it).
int alphabet_byte(uint32_t code_point);
bool alphabet_to_bytes(std::string_view token, std::string& bytes);

// Any byte-level BPE vocabulary written in GPT-2's byte alphabet, as GGUF
// files (tokenizer.ggml.model "gpt2") and tokenizer.json store them:
// `tokens` by id, `merges` as "left right", the ids in `specials` matched as
// whole strings (control tokens: their text is not in the alphabet and
// never merged; with SpecialTokens::recognise), `eod` the end-of-text id,
// `pre` the pre-tokenizer. The checks are encoder.json's (above); `source`
// names the vocabulary in errors.
struct ByteLevelBpeSpec {
  std::string name;
  Pretokenizer pre = Pretokenizer::gpt2;
  std::vector<std::string> tokens, merges;
  std::vector<int32_t> specials;
  std::vector<int32_t> unused;  // ids that are no token (padding): never produced, decoding them is an error
  int32_t eod = -1;
  bool ignore_merges = false;  // a piece that is itself a token is that token (tokenizer.json's ignore_merges)
  bool nfc = false;            // NFC before pre-tokenization (tokenizer.json's NFC normalizer)
};
BpeVocabulary byte_level_bpe(const ByteLevelBpeSpec& spec, const std::string& source);

class Gpt2Bpe final : public BpeTokenizer {
 public:
  static constexpr std::string_view kEndOfText = "<|endoftext|>";

  // Loads <dir>/encoder.json and <dir>/vocab.bpe. A missing file is a
  // claw::Error that names the path and says to run scripts/fetch-data.
  static Gpt2Bpe load(const std::string& dir);
  Gpt2Bpe(const std::string& encoder_json_path, const std::string& vocab_bpe_path);
  // The same from encoder.json's tokens in id order and vocab.bpe's merge
  // lines ("a b"), e.g. a GGUF file's tokenizer.ggml.tokens and .merges;
  // `source` names them in errors.
  static Gpt2Bpe from_tokens(const std::vector<std::string>& tokens, const std::vector<std::string>& merges,
                             const std::string& source);

 private:
  explicit Gpt2Bpe(BpeVocabulary v);
};

}  // namespace claw::data
