#include "claw/data/tokenizer_factory.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "claw/core/error.h"
#include "claw/data/gpt2_bpe.h"
#include "claw/data/hf_tokenizer.h"
#include "claw/data/sentencepiece_tokenizer.h"
#include "claw/data/tiktoken.h"

namespace claw::data {

std::vector<std::string> tokenizer_types() {
  return {"GPT2BPETokenizer", "TikTokenizer", "SentencePieceTokenizer", "HFTokenizer"};
}

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerOptions& o) {
  if (o.type == "GPT2BPETokenizer") {
    if (o.vocab_file.empty() || o.merge_file.empty())
      fail("--tokenizer-type GPT2BPETokenizer needs --vocab-file (encoder.json) and --merge-file (vocab.bpe)");
    return std::make_unique<Gpt2Bpe>(o.vocab_file, o.merge_file);
  }
  if (o.type == "TikTokenizer") {
    if (o.model_file.empty())
      fail("--tokenizer-type TikTokenizer needs --tokenizer-model (a rank file such as cl100k_base.tiktoken)");
    return std::make_unique<TikTokenizer>(o.model_file, o.tiktoken_pattern);
  }
  if (o.type == "SentencePieceTokenizer") {
    if (o.model_file.empty())
      fail("--tokenizer-type SentencePieceTokenizer needs --tokenizer-model (a SentencePiece .model file)");
    return std::make_unique<SentencePieceTokenizer>(o.model_file);
  }
  if (o.type == "HFTokenizer") {
    if (o.model_file.empty())
      fail("--tokenizer-type HFTokenizer needs --tokenizer-model (a tokenizer.json, or the model directory holding it)");
    return std::make_unique<HfTokenizer>(HfTokenizer::load(hf_tokenizer_json(o.model_file)));
  }
  fail("--tokenizer-type '{}' is not one of: {}", o.type, fmt::join(tokenizer_types(), ", "));
}

}  // namespace claw::data
