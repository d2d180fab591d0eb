// Internal to the batch-invariant linear kernels (rowwise_linear.cc,
// quant.cc): the register tile over fp32, bf16 or f16 weight rows and the split
// of weight rows into panels. Every output element is fixed_order_dot.h's
// dot product (16 lanes, the fold, the tail), whatever tile or panel
// computes it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "claw/core/dtype_convert.h"
#include "claw/core/parallel.h"
#include "claw/kernels/cpu/fixed_order_dot.h"

namespace claw::kernels::rowwise {

using fixed_order::V16;

// How a weight row of element type T is read: 16 elements widened to fp32
// lanes, or one.
struct F32Rows {
  using T = float;
  static V16 vec(const float* p) { return fixed_order::load(p); }
  static float at(const float* p) { return *p; }
};
struct Bf16Rows {
  using T = uint16_t;
  static V16 vec(const uint16_t* p) {
    typedef uint16_t U16x16 __attribute__((vector_size(32)));
    typedef uint32_t U32x16 __attribute__((vector_size(64)));
    U16x16 h;
    std::memcpy(&h, p, sizeof h);
    const U32x16 u = __builtin_convertvector(h, U32x16) << 16;
    V16 v;
    std::memcpy(&v, &u, sizeof v);
    return v;
  }
  static float at(const uint16_t* p) { return bf16_to_f32(*p); }
};

// f16 (GGUF's F16 matrices), widened exactly: by the hardware's conversion
// where the build has it (F16C, AVX-512), else dtype_convert.h's.
struct F16Rows {
  using T = uint16_t;
  static V16 vec(const uint16_t* p) {
    V16 v;
#if defined(__AVX512F__)
    const __m512 w = _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    std::memcpy(&v, &w, sizeof v);
#elif defined(__F16C__)
    const __m256 lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256 hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)));
    std::memcpy(&v, &lo, 32);
    std::memcpy(reinterpret_cast<char*>(&v) + 32, &hi, 32);
#else
    for (int l = 0; l < 16; ++l) v[l] = f16_to_f32(p[l]);
#endif
    return v;
  }
  static float at(const uint16_t* p) { return f16_to_f32(*p); }
};

// out[i][j] = dot(x_i, w_j) + bias_j for MR rows of x and NR weight rows.
template <typename W, int MR, int NR>
void tile(float* out, int64_t ldo, const float* x, const typename W::T* w, const float* bias, int64_t K) {
  V16 acc[MR][NR] = {};
  const int64_t K16 = K / 16 * 16;
  // The NR rows after these (the next tile's, contiguous) on their way, as
  // many bytes an iteration as it reads: short rows (K in the hundreds) are
  // too short a stream for the hardware prefetcher to find in time.
  const char* next = reinterpret_cast<const char*>(w + NR * K);
  constexpr int64_t kAhead = NR * 16 * static_cast<int64_t>(sizeof(typename W::T));
  for (int64_t k = 0; k < K16; k += 16) {
    for (int64_t b = 0; b < kAhead; b += 64) __builtin_prefetch(next + k / 16 * kAhead + b);
    V16 xv[MR], wv[NR];
    for (int i = 0; i < MR; ++i) xv[i] = fixed_order::load(x + i * K + k);
    for (int j = 0; j < NR; ++j) wv[j] = W::vec(w + j * K + k);
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i][j] += xv[i] * wv[j];
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      float s = fixed_order::fold(acc[i][j]);  // then the tail, as fixed_order::dot does
      for (int64_t k = K16; k < K; ++k) s += x[i * K + k] * W::at(w + j * K + k);
      out[i * ldo + j] = bias ? s + bias[j] : s;
    }
}

template <typename W, int MR>
void row_tile(float* out, int64_t ldo, const float* x, const typename W::T* w, const float* bias, int64_t K, int nr) {
  if constexpr (MR == 1)
    if (nr == 8) return tile<W, 1, 8>(out, ldo, x, w, bias, K);
  switch (nr) {
    case 4: return tile<W, MR, 4>(out, ldo, x, w, bias, K);
    case 3: return tile<W, MR, 3>(out, ldo, x, w, bias, K);
    case 2: return tile<W, MR, 2>(out, ldo, x, w, bias, K);
    default: return tile<W, MR, 1>(out, ldo, x, w, bias, K);
  }
}

constexpr int64_t kMr = 4, kNr = 4;

// out[:, n0:n1] for all M rows of x: tiles of 4 input rows x 4 weight rows.
template <typename W>
void panel(float* out, int64_t N, const float* x, const typename W::T* w, const float* bias, int64_t M, int64_t K,
           int64_t n0, int64_t n1) {
  for (int64_t m = 0; m < M; m += kMr) {
    const int mr = static_cast<int>(std::min(kMr, M - m));
    for (int64_t n = n0, nr = 0; n < n1; n += nr) {
      // One input row (decoding): eight weight rows in flight, else four.
      nr = mr == 1 && n1 - n >= 8 ? 8 : std::min(kNr, n1 - n);
      float* o = out + m * N + n;
      const float* xm = x + m * K;
      const typename W::T* wn = w + n * K;
      const float* b = bias ? bias + n : nullptr;
      switch (mr) {
        case 4: row_tile<W, 4>(o, N, xm, wn, b, K, int(nr)); break;
        case 3: row_tile<W, 3>(o, N, xm, wn, b, K, int(nr)); break;
        case 2: row_tile<W, 2>(o, N, xm, wn, b, K, int(nr)); break;
        default: row_tile<W, 1>(o, N, xm, wn, b, K, int(nr)); break;
      }
    }
  }
}

// Splits N weight rows of row_bytes each into panels of ~256 KiB (kept in
// L2 while every input row passes over them), smaller when there are fewer
// panels than threads, and runs fn(n0, n1) on each, dynamically scheduled.
template <typename F>
void over_panels(const CpuCtx& ctx, int64_t N, size_t row_bytes, F&& fn) {
  const int64_t panel_rows =
      std::max<int64_t>(kNr, static_cast<int64_t>((256u << 10) / std::max<size_t>(row_bytes, 1)) / kNr * kNr);
  const int64_t share = (N + ctx.num_threads - 1) / std::max(ctx.num_threads, 1);
  const int64_t per = std::clamp<int64_t>((share + kNr - 1) / kNr * kNr, kNr, panel_rows);
  parallel_for_dynamic(ctx, (N + per - 1) / per, [&](int64_t c) { fn(c * per, std::min(N, (c + 1) * per)); });
}

}  // namespace claw::kernels::rowwise
