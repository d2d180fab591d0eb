#include "claw/data/packing.h"

#include "claw/core/error.h"

namespace claw::data {

void apply_packing(const PackingOptions& o, const int32_t* tokens, int64_t B, int64_t T, int32_t* seg_start,
                   int32_t* positions, int32_t* targets) {
  CLAW_CHECK(!o.any() || o.eod >= 0, "packing options need the eod token id");
  for (int64_t b = 0; b < B; ++b) {
    const int32_t* tok = tokens + b * T;
    int32_t start = 0;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t i = b * T + t;
      if (o.reset_attention_mask) seg_start[i] = start;
      if (o.reset_position_ids) positions[i] = static_cast<int32_t>(t) - start;
      if (o.eod_mask_loss && tok[t] == o.eod) targets[i] = -1;
      if (tok[t] == o.eod) start = static_cast<int32_t>(t) + 1;
    }
  }
}

}  // namespace claw::data
