#include "claw/data/sample_source.h"

#include <algorithm>
#include <vector>

namespace claw::data {

void SampleSource::get_batch(int64_t first, int64_t count, int32_t* tokens, int32_t* targets) const {
  const int64_t S = seq_length();
  std::vector<int32_t> buf(S + 1);
  for (int64_t b = 0; b < count; ++b) {
    get_sample(first + b, buf.data());
    std::copy(buf.begin(), buf.end() - 1, tokens + b * S);
    std::copy(buf.begin() + 1, buf.end(), targets + b * S);
  }
}

}  // namespace claw::data
