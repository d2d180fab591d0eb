#include "claw/data/tokenizer_factory.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "claw/core/error.h"
#include "claw/data/gpt2_bpe.h"

namespace claw::data {

std::vector<std::string> tokenizer_types() { return {"GPT2BPETokenizer"}; }

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerOptions& o) {
  if (o.type == "GPT2BPETokenizer") {
    if (o.vocab_file.empty() || o.merge_file.empty())
      fail("--tokenizer-type GPT2BPETokenizer needs --vocab-file (encoder.json) and --merge-file (vocab.bpe)");
    return std::make_unique<Gpt2Bpe>(o.vocab_file, o.merge_file);
  }
  fail("--tokenizer-type '{}' is not one of: {}", o.type, fmt::join(tokenizer_types(), ", "));
}

}  // namespace claw::data
