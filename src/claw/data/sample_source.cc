#include "claw/data/sample_source.h"

#include <algorithm>
#include <vector>

namespace claw::data {

void SampleSource::get_loss_mask(int64_t, uint8_t* mask) const { std::fill_n(mask, seq_length() + 1, uint8_t{1}); }

void SampleSource::get_batch(int64_t first, int64_t count, int32_t* tokens, int32_t* targets) const {
  const int64_t S = seq_length();
  std::vector<int32_t> buf(S + 1);
  std::vector<uint8_t> mask(has_loss_mask() ? S + 1 : 0);
  for (int64_t b = 0; b < count; ++b) {
    get_sample(first + b, buf.data());
    std::copy(buf.begin(), buf.end() - 1, tokens + b * S);
    std::copy(buf.begin() + 1, buf.end(), targets + b * S);
    if (mask.empty()) continue;
    get_loss_mask(first + b, mask.data());
    for (int64_t t = 0; t < S; ++t)
      if (!mask[t + 1]) targets[b * S + t] = -1;
  }
}

}  // namespace claw::data
