#include "claw/data/tokenizer.h"

#include "claw/core/parallel.h"

namespace claw::data {

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(std::span<const std::string> texts, int num_threads,
                                                          SpecialTokens special) const {
  std::vector<std::vector<int32_t>> out(texts.size());
  // Documents vary widely in length, so hand them out one at a time.
  parallel_for_dynamic(CpuCtx{num_threads}, static_cast<int64_t>(texts.size()),
                       [&](int64_t i) { out[i] = encode(texts[i], special); });
  return out;
}

}  // namespace claw::data
