// Dot products summed in one fixed order, for kernels whose results must not
// depend on the batch around them (rowwise_linear.h, paged_attention.h):
// 16 fp32 lanes accumulate k = l (mod 16) in ascending k, then fold() adds
// the lanes pairwise (halves, then quarters, ...), then the tail k >= K16
// follows in order. The order is the same for every element whatever tile,
// batch position or thread computes it.
#pragma once

#include <cstdint>
#include <cstring>

namespace claw::kernels::fixed_order {

// 16 fp32 lanes: one zmm register on AVX-512 (two ymm on AVX2, same sums).
typedef float V16 __attribute__((vector_size(64)));
typedef float V8 __attribute__((vector_size(32)));
typedef float V4 __attribute__((vector_size(16)));

inline V16 load(const float* p) {
  V16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline float fold(V16 a) {
  V8 h = __builtin_shufflevector(a, a, 0, 1, 2, 3, 4, 5, 6, 7) +
         __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15);
  V4 q = __builtin_shufflevector(h, h, 0, 1, 2, 3) + __builtin_shufflevector(h, h, 4, 5, 6, 7);
  return (q[0] + q[2]) + (q[1] + q[3]);
}

// a . b over n elements.
inline float dot(const float* a, const float* b, int64_t n) {
  V16 acc = {};
  const int64_t n16 = n / 16 * 16;
  for (int64_t i = 0; i < n16; i += 16) acc += load(a + i) * load(b + i);
  float s = fold(acc);
  for (int64_t i = n16; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace claw::kernels::fixed_order
