#include "claw/model/kv_cache.h"

#include <algorithm>
#include <cmath>

#include "claw/kernels/cpu/attention_offset.h"

namespace claw::model {

void KvCache::attend(const CpuCtx& cpu, int64_t layer, const float* q, const float* k, const float* v, float* out,
                     float* lse, int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) {
  CLAW_CHECK(B == batch_ && G * D == row_, "KV cache of {} rows x {} elements for a batch of {} x {}", batch_, row_, B,
             G * D);
  float* K = keys(layer);
  float* V = values(layer);
  std::vector<int32_t> q_pos(B), k_len(B);
  int64_t Tk = 0;
  for (int64_t b = 0; b < B; ++b) {
    q_pos[b] = length_[b];
    k_len[b] = length_[b] + static_cast<int32_t>(T);
    Tk = std::max<int64_t>(Tk, k_len[b]);
    const int64_t at = (b * capacity_ + q_pos[b]) * row_;
    std::copy_n(k + b * T * row_, T * row_, K + at);
    std::copy_n(v + b * T * row_, T * row_, V + at);
  }
  const int64_t W = windows_[layer];
  if (W > 0) {
    q_lo_.resize(static_cast<size_t>(B * T));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) q_lo_[b * T + t] = static_cast<int32_t>(std::max<int64_t>(0, q_pos[b] + t - W + 1));
  }
  kernels::attention_offset_forward(cpu, out, lse, q, K, V, B, T, Tk, H, G, D, scale_,
                                    {.q_pos = q_pos.data(), .k_len = k_len.data(), .q_lo = W > 0 ? q_lo_.data() : nullptr,
                                     .ld_kv_batch = capacity_ * row_});
}

}  // namespace claw::model
