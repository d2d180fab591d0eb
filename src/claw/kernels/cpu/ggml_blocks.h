// ggml's blocks decoded (kernels/cpu/ggml_quants.h has the layouts): shared
// by the dequantization (ggml_quants.cc) and the matrix products, which are
// compiled once per instruction set (ggml_dot.inc). The decoders are loops
// over contiguous runs of bytes, so that they vectorise; the order of every
// fp32 operation is fixed by the code (products and sums unfused: these
// files compile with -ffp-contract=off), so every build gives the same bits.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "claw/kernels/cpu/ggml_quants.h"

namespace claw::kernels::ggml_detail {

// Internal linkage: each file compiles its own copy for its instruction set
// (an inline function shared between the generic and the AVX2 files could
// reach the generic path as its AVX2 copy).
namespace {

// IQ4's sixteen levels (a non-uniform 4-bit grid).
inline constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

struct BlockQ8K {  // the activations of a super-block
  float d;
  int8_t qs[kSuperBlock];
  int16_t bsums[kSuperBlock / 16];  // sums of qs per 16
};
static_assert(sizeof(BlockQ8K) == 292, "block_q8_K");

inline uint16_t u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline uint32_t u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
// f16 to f32, exact: the exponent and mantissa bits moved into an f32 and
// rescaled by 2^112 (the bias difference), which also turns an f16
// subnormal's bits into its value. Where the build has F16C, its conversion
// (the same value, without the rescaling's subnormal operand, which costs x86
// a microcode assist: small K-quant scales are f16 subnormals); a NaN either
// way as the portable code makes it.
inline float half(uint16_t h) {
  const uint32_t em = h & 0x7fffu, sign = static_cast<uint32_t>(h & 0x8000u) << 16;
#if defined(__F16C__)
  if (em < 0x7c00u) return _cvtsh_ss(h);
#endif
  float f = std::bit_cast<float>(em << 13) * 0x1p112f;
  if (em >= 0x7c00u) f = em == 0x7c00u ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  return std::bit_cast<float>(std::bit_cast<uint32_t>(f) | sign);
}
inline float f16(const uint8_t* p) { return half(u16(p)); }

// One block decoded: its quants in element order, the integer scale and min
// of each sub-block and the fp32 scales. How an element is made of them:
//   plain       d q                 q4_0, q5_0, q8_0, iq4_nl
//   affine      d q + dmin          q4_1, q5_1 (dmin: the block's m)
//   scaled      (d sc) q            q3_K, q6_K, iq4_xs
//   scaled_min  (d sc) q - dmin mn  q2_K, q4_K, q5_K
struct Block {
  enum Kind { plain, affine, scaled, scaled_min } kind = plain;
  int sub = 32;  // elements per sub-block
  float d = 0, dmin = 0;
  int32_t sc[16], mn[16];
  int8_t q[kSuperBlock];
};

inline void decode_32(GgmlType t, const uint8_t* p, Block& b) {
  const uint8_t* nib = p + (t == GgmlType::q4_1 ? 4 : t == GgmlType::q5_0 ? 6 : t == GgmlType::q5_1 ? 8 : 2);
  b.d = f16(p);
  b.kind = t == GgmlType::q4_1 || t == GgmlType::q5_1 ? Block::affine : Block::plain;
  if (b.kind == Block::affine) b.dmin = f16(p + 2);
  if (t == GgmlType::q8_0) {
    std::memcpy(b.q, p + 2, 32);
    return;
  }
  if (t == GgmlType::iq4_nl) {
    for (int i = 0; i < 16; ++i) {
      b.q[i] = kIq4Levels[nib[i] & 15];
      b.q[i + 16] = kIq4Levels[nib[i] >> 4];
    }
    return;
  }
  const uint32_t qh = t == GgmlType::q5_0 ? u32(p + 2) : t == GgmlType::q5_1 ? u32(p + 4) : 0;
  const int bias = t == GgmlType::q4_0 ? 8 : t == GgmlType::q5_0 ? 16 : 0;
  for (int i = 0; i < 16; ++i) {
    b.q[i] = static_cast<int8_t>(((nib[i] & 15) | ((qh >> i) & 1) << 4) - bias);
    b.q[i + 16] = static_cast<int8_t>(((nib[i] >> 4) | ((qh >> (i + 16)) & 1) << 4) - bias);
  }
}

// q4_K's and q5_K's twelve bytes: eight 6-bit scales and eight 6-bit mins.
inline void k_scales_mins(const uint8_t* s, Block& b) {
  for (int j = 0; j < 4; ++j) {
    b.sc[j] = s[j] & 63;
    b.mn[j] = s[j + 4] & 63;
    b.sc[j + 4] = (s[j + 8] & 15) | ((s[j] >> 6) << 4);
    b.mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
  }
}

// Element h*128 + k*32 + l of q2_K, q3_K and q6_K reads byte h*32 + l of a
// run of 2-bit fields at bit 2k; of q4_K and q5_K, element c*64 + n*32 + l
// reads the nibble n of byte c*32 + l (and bit 2c + n of qh[l]).
inline void decode_q2_K(const uint8_t* p, Block& b) {  // scales[16] qs[64] d dmin
  b.kind = Block::scaled_min, b.sub = 16, b.d = f16(p + 80), b.dmin = f16(p + 82);
  for (int j = 0; j < 16; ++j) b.sc[j] = p[j] & 15, b.mn[j] = p[j] >> 4;
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 32; ++l) b.q[h * 128 + k * 32 + l] = static_cast<int8_t>((p[16 + h * 32 + l] >> (2 * k)) & 3);
}

inline void decode_q3_K(const uint8_t* p, Block& b) {  // hmask[32] qs[64] scales[12] d
  b.kind = Block::scaled, b.sub = 16, b.d = f16(p + 108);
  const uint8_t* s = p + 96;
  for (int j = 0; j < 16; ++j)
    b.sc[j] = (((s[j % 8] >> (4 * (j / 8))) & 15) | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 32; ++l) {
        const int lo = (p[32 + h * 32 + l] >> (2 * k)) & 3, high_clear = ((p[l] >> (h * 4 + k)) & 1) ^ 1;
        b.q[h * 128 + k * 32 + l] = static_cast<int8_t>(lo - 4 * high_clear);
      }
}

inline void decode_q45_K(bool five, const uint8_t* p, Block& b) {  // d dmin scales[12] (qh[32]) qs[128]
  b.kind = Block::scaled_min, b.sub = 32, b.d = f16(p), b.dmin = f16(p + 2);
  k_scales_mins(p + 4, b);
  const uint8_t* qs = p + (five ? 48 : 16);
  for (int c = 0; c < 4; ++c)
    for (int n = 0; n < 2; ++n)
      for (int l = 0; l < 32; ++l) {
        const int hi = five ? ((p[16 + l] >> (2 * c + n)) & 1) << 4 : 0;
        b.q[c * 64 + n * 32 + l] = static_cast<int8_t>(((qs[c * 32 + l] >> (4 * n)) & 15) | hi);
      }
}

inline void decode_q6_K(const uint8_t* p, Block& b) {  // ql[128] qh[64] scales[16] d
  b.kind = Block::scaled, b.sub = 16, b.d = f16(p + 208);
  for (int j = 0; j < 16; ++j) b.sc[j] = static_cast<int8_t>(p[192 + j]);
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 32; ++l) {
        const int lo = (p[h * 64 + (k % 2) * 32 + l] >> (4 * (k / 2))) & 15;
        const int hi = (p[128 + h * 32 + l] >> (2 * k)) & 3;
        b.q[h * 128 + k * 32 + l] = static_cast<int8_t>((lo | hi << 4) - 32);
      }
}

inline void decode_iq4_xs(const uint8_t* p, Block& b) {  // d scales_h scales_l[4] qs[128]
  b.kind = Block::scaled, b.sub = 32, b.d = f16(p);
  const uint16_t sh = u16(p + 2);
  for (int j = 0; j < 8; ++j) b.sc[j] = (((p[4 + j / 2] >> (4 * (j % 2))) & 15) | (((sh >> (2 * j)) & 3) << 4)) - 32;
  for (int j = 0; j < 8; ++j)
    for (int l = 0; l < 16; ++l) {
      b.q[j * 32 + l] = kIq4Levels[p[8 + j * 16 + l] & 15];
      b.q[j * 32 + 16 + l] = kIq4Levels[p[8 + j * 16 + l] >> 4];
    }
}

// Block i of a row of type t (not f16/bf16/f32).
inline void decode(GgmlType t, const uint8_t* p, Block& b) {
  switch (t) {
    case GgmlType::q2_K: decode_q2_K(p, b); return;
    case GgmlType::q3_K: decode_q3_K(p, b); return;
    case GgmlType::q4_K: decode_q45_K(false, p, b); return;
    case GgmlType::q5_K: decode_q45_K(true, p, b); return;
    case GgmlType::q6_K: decode_q6_K(p, b); return;
    case GgmlType::iq4_xs: decode_iq4_xs(p, b); return;
    default: decode_32(t, p, b); return;
  }
}

}  // namespace

// Computes out[m * ldo + n] = sum_k W[n, k] x[m, k] (+ bias[n]) for rows
// [n0, n1) of W (type w, row_bytes bytes a row) and M activation rows xq in
// ggml_vec_dot_type(w) (xb bytes a row). Each weight row is decoded once for
// all M. The generic build and the AVX2 one (ggml_dot_*.cc).
using RowsPanelFn = void (*)(GgmlType w, const uint8_t* W, size_t row_bytes, int64_t n0, int64_t n1, int64_t K,
                             const uint8_t* xq, size_t xb, int64_t M, float* out, int64_t ldo, const float* bias);
void rows_panel_generic(GgmlType w, const uint8_t* W, size_t row_bytes, int64_t n0, int64_t n1, int64_t K,
                        const uint8_t* xq, size_t xb, int64_t M, float* out, int64_t ldo, const float* bias);
#if defined(__x86_64__)
void rows_panel_avx2(GgmlType w, const uint8_t* W, size_t row_bytes, int64_t n0, int64_t n1, int64_t K,
                     const uint8_t* xq, size_t xb, int64_t M, float* out, int64_t ldo, const float* bias);
#endif

}  // namespace claw::kernels::ggml_detail
