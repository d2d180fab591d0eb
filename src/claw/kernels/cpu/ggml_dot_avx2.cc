// ggml_dot.inc for AVX2 + FMA + F16C (compiled with those flags whatever the
// build's -march; chosen at run time, ggml_quants.cc), with products written
// for the types the GGUF files people download are made of: f16 and the
// super-blocks of q4_K, q5_K and q6_K (Q4_K_M, Q5_K_M, Q6_K), read straight
// from the file's bytes. Each super-block's integer sums are exact and the
// fp32 operations are the portable build's, in its order (ggml_dot.inc's
// dot_super): the same bits. The other types go through the decoders.
//
// A super-block against the activations' q8_K block: the quants (unsigned:
// q4_K/q5_K as stored, q6_K before its -32) meet 32 activations at a time in
// maddubs (pairs of u8 x s8 products summed to int16: at most 2 x 63 x 127,
// no saturation), each sub-block's int16 pairs are multiplied by its scale
// and summed to int32 in madd, and q6_K's -32 and the K-quants' minimums
// come from the activations' sums per 16 (bsums).
#if defined(__x86_64__)
#include <immintrin.h>

#include "claw/kernels/cpu/ggml_blocks.h"

namespace claw::kernels::ggml_detail {
namespace {

inline int32_t hsum_i32(__m128i s) {
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}
inline int32_t hsum_i32(__m256i v) {
  return hsum_i32(_mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
}

inline __m256i load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// The int16 element e (of 8) of each 128-bit lane of v, in every element of
// that lane.
inline __m256i pick16(__m256i v, int e) {
  return _mm256_shuffle_epi8(v, _mm256_set1_epi16(int16_t((2 * e + 1) << 8 | 2 * e)));
}
// Element lo of the low lane in the low lane, hi of the high lane in the high.
inline __m256i pick16(__m256i v, int lo, int hi) {
  return _mm256_shuffle_epi8(v, _mm256_setr_m128i(_mm_set1_epi16(int16_t((2 * lo + 1) << 8 | 2 * lo)),
                                                  _mm_set1_epi16(int16_t((2 * hi + 1) << 8 | 2 * hi))));
}

// The eight 6-bit scales and eight 6-bit minimums of q4_K/q5_K (twelve bytes:
// scale j < 4 in byte j's low 6 bits, min j < 4 in byte 4 + j's; scale and min
// 4 + j in byte 8 + j's nibbles with their top two bits in bytes j's and 4 +
// j's bits 6-7), as int16 in both lanes (scales) and in one (minimums).
inline void k_scales(const uint8_t* s, __m256i* sc, __m128i* mn) {
  const __m128i w = load128(s);  // words w0 w1 w2 (and four bytes of what follows)
  const __m128i low = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(w, 0x98), _mm_setr_epi32(0, 0, 0, 4)),
                                    _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));  // w0 w2 w1 w2>>4
  const __m128i top = _mm_and_si128(_mm_srli_epi32(_mm_shuffle_epi32(w, 0x50), 2),
                                    _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));  // (w0 w0 w1 w1) >> 2
  const __m128i b = _mm_or_si128(low, top);  // the 8 scales' bytes, then the 8 minimums'
  *sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(b));
  *mn = _mm_cvtepu8_epi16(_mm_unpackhi_epi64(b, b));
}

// The integer sums of a q4_K/q5_K super-block: the quants' (8 int32 lanes of
// sum) and the minimums' (sum_j mn[j] (bsums[2j] + bsums[2j + 1])), reduced
// together.
inline void k_sums(__m256i sum, __m128i mn, const BlockQ8K& a, int32_t* isum, int32_t* imin) {
  const __m128i pairs = _mm_hadd_epi16(load128(a.bsums), load128(a.bsums + 8));
  const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
  __m128i t = _mm_hadd_epi32(s4, _mm_madd_epi16(mn, pairs));
  t = _mm_hadd_epi32(t, t);
  *isum = _mm_cvtsi128_si32(t);
  *imin = _mm_extract_epi32(t, 1);
}

// The kernels below take R activation rows (xb bytes apart) at once, each
// super-block's quants unpacked once for the R; y[r] is row r's product.
inline const BlockQ8K& q8k(const uint8_t* x, size_t xb, int r, int64_t i) {
  return reinterpret_cast<const BlockQ8K*>(x + r * xb)[i];
}

// Four rows' 8-lane integer sums, each summed: [a, b, c, d].
inline __m128i sum4(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i t = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
  return _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
}
inline __m128i sum4(__m128i a, __m128i b, __m128i c, __m128i d) {
  return _mm_hadd_epi32(_mm_hadd_epi32(a, b), _mm_hadd_epi32(c, d));
}

// acc[r] += (d a_r.d) float(isum[r]) for four rows at once: each lane the
// scalar operations of one row, in their order (so the same bits).
inline __m128 scaled_add(__m128 acc, float d, __m128 ad, __m128i isum) {
  return _mm_add_ps(acc, _mm_mul_ps(_mm_mul_ps(_mm_set1_ps(d), ad), _mm_cvtepi32_ps(isum)));
}
inline __m128 scaled_sub(__m128 acc, float d, __m128 ad, __m128i isum) {
  return _mm_sub_ps(acc, _mm_mul_ps(_mm_mul_ps(_mm_set1_ps(d), ad), _mm_cvtepi32_ps(isum)));
}
inline __m128 act_scales(const uint8_t* x, size_t xb, int64_t i) {
  return _mm_setr_ps(q8k(x, xb, 0, i).d, q8k(x, xb, 1, i).d, q8k(x, xb, 2, i).d, q8k(x, xb, 3, i).d);
}

// Sub-blocks 2c and 2c + 1 (quants lo, hi, scales slo, shi) against
// activations 64c.. of a.
inline __m256i k_pair(__m256i lo, __m256i hi, __m256i slo, __m256i shi, int c, const BlockQ8K& a) {
  const __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load(a.qs + 64 * c)), slo);
  const __m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load(a.qs + 64 * c + 32)), shi);
  return _mm256_add_epi32(plo, phi);
}

// q4_K (144 bytes): d, dmin, scales[12], qs[128]; element 64c + 32n + l is
// nibble n of qs[32c + l]. q5_K (176 bytes): as q4_K with qh[32] after the
// scales; element 64c + 32n + l has bit 2c + n of qh[l] as its fifth.
template <bool Five, int R>
void dot_q45_K(const uint8_t* row, int64_t nb, const uint8_t* x, size_t xb, float* y) {
  constexpr size_t kBytes = Five ? 176 : 144, kQs = Five ? 48 : 16;
  const __m256i m4 = _mm256_set1_epi8(0x0f), b4 = _mm256_set1_epi8(0x10);
  static_assert(R == 1 || R == 4);
  float acc = 0;
  __m128 acc4 = _mm_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* p = row + i * kBytes;
    __m256i sc;
    __m128i mn;
    k_scales(p + 4, &sc, &mn);
    __m256i qh = Five ? load(p + 16) : _mm256_setzero_si256(), sum[R];
    for (int r = 0; r < R; ++r) sum[r] = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i q = load(p + kQs + 32 * c);
      __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      if constexpr (Five) {  // qh's bits 2c and 2c + 1 are at bits 0 and 1 of each byte here
        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(qh, 4), b4));
        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(qh, 3), b4));
        qh = _mm256_srli_epi16(qh, 2);
      }
      const __m256i slo = pick16(sc, 2 * c), shi = pick16(sc, 2 * c + 1);
      for (int r = 0; r < R; ++r) sum[r] = _mm256_add_epi32(sum[r], k_pair(lo, hi, slo, shi, c, q8k(x, xb, r, i)));
    }
    const float d = f16(p), dmin = f16(p + 2);
    if constexpr (R == 4) {
      __m128i m[4];
      for (int r = 0; r < 4; ++r) {
        const BlockQ8K& a = q8k(x, xb, r, i);
        m[r] = _mm_madd_epi16(mn, _mm_hadd_epi16(load128(a.bsums), load128(a.bsums + 8)));
      }
      const __m128 ad = act_scales(x, xb, i);
      acc4 = scaled_add(acc4, d, ad, sum4(sum[0], sum[1], sum[2], sum[3]));
      acc4 = scaled_sub(acc4, dmin, ad, sum4(m[0], m[1], m[2], m[3]));
    } else {
      const BlockQ8K& a = q8k(x, xb, 0, i);
      int32_t isum, imin;
      k_sums(sum[0], mn, a, &isum, &imin);
      acc += (d * a.d) * static_cast<float>(isum);
      acc -= (dmin * a.d) * static_cast<float>(imin);
    }
  }
  if constexpr (R == 4)
    _mm_storeu_ps(y, acc4);
  else
    y[0] = acc;
}

// q6_K (210 bytes): ql[128], qh[64], int8 scales[16] (one per 16), d;
// element 128h + 32k + l is nibble k / 2 of ql[64h + 32 (k % 2) + l] with
// bits 2k, 2k + 1 of qh[32h + l] above it, less 32.
template <int R>
void dot_q6_K(const uint8_t* row, int64_t nb, const uint8_t* x, size_t xb, float* y) {
  const __m256i m4 = _mm256_set1_epi8(0x0f), b45 = _mm256_set1_epi8(0x30);
  static_assert(R == 1 || R == 4);
  float acc = 0;
  __m128 acc4 = _mm_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* p = row + i * 210;
    const __m256i sc = _mm256_cvtepi8_epi16(load128(p + 192));  // scales 0-7 in the low lane, 8-15 high
    __m256i sum[R];
    for (int r = 0; r < R; ++r) sum[r] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m128i half_sc = h ? _mm256_extracti128_si256(sc, 1) : _mm256_castsi256_si128(sc);
      const __m256i sch = _mm256_broadcastsi128_si256(half_sc);
      const __m256i l0 = load(p + 64 * h), l1 = load(p + 64 * h + 32), qh = load(p + 128 + 32 * h);
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), b45)),
          _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), b45)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, b45)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                          _mm256_and_si256(_mm256_srli_epi16(qh, 2), b45))};
      for (int k = 0; k < 4; ++k) {  // sub-blocks 8h + 2k (the low lane) and 8h + 2k + 1 (the high)
        const __m256i s = pick16(sch, 2 * k, 2 * k + 1);
        for (int r = 0; r < R; ++r) {
          const __m256i prod = _mm256_maddubs_epi16(q[k], load(q8k(x, xb, r, i).qs + 128 * h + 32 * k));
          sum[r] = _mm256_add_epi32(sum[r], _mm256_madd_epi16(prod, s));
        }
      }
    }
    const float d = f16(p + 208);
    // Less 32 sum_j sc[j] bsums[j]: the quants' -32.
    if constexpr (R == 4) {
      __m256i o[4];
      for (int r = 0; r < 4; ++r) o[r] = _mm256_madd_epi16(sc, load(q8k(x, xb, r, i).bsums));
      const __m128i isum =
          _mm_sub_epi32(sum4(sum[0], sum[1], sum[2], sum[3]), _mm_slli_epi32(sum4(o[0], o[1], o[2], o[3]), 5));
      acc4 = scaled_add(acc4, d, act_scales(x, xb, i), isum);
    } else {
      const BlockQ8K& a = q8k(x, xb, 0, i);
      const int32_t isum = hsum_i32(sum[0]) - 32 * hsum_i32(_mm256_madd_epi16(sc, load(a.bsums)));
      acc += (d * a.d) * static_cast<float>(isum);
    }
  }
  if constexpr (R == 4)
    _mm_storeu_ps(y, acc4);
  else
    y[0] = acc;
}

// Products of a row with kRawRows activation rows at once, or with one.
constexpr int kRawRows = 4;
struct RawDot {
  void (*one)(const uint8_t* row, int64_t nb, const uint8_t* x, size_t xb, float* y);
  void (*many)(const uint8_t* row, int64_t nb, const uint8_t* x, size_t xb, float* y);
};

RawDot raw_dot_for(GgmlType w) {
  switch (w) {
    case GgmlType::q4_K: return {dot_q45_K<false, 1>, dot_q45_K<false, kRawRows>};
    case GgmlType::q5_K: return {dot_q45_K<true, 1>, dot_q45_K<true, kRawRows>};
    case GgmlType::q6_K: return {dot_q6_K<1>, dot_q6_K<kRawRows>};
    default: return {nullptr, nullptr};
  }
}

// ggml_dot.inc's sixteen lanes (lane k % 16 sums w[k] x[k], each product
// rounded) over an f16 row w, widened as it is read, in two registers; the
// tail and the pairwise reduction as there.
float dot_f16_lanes(const uint8_t* w, const float* x, int64_t K) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    const __m256i h = load(w + 2 * k);
    s0 = _mm256_add_ps(s0, _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), _mm256_loadu_ps(x + k)));
    s1 = _mm256_add_ps(s1, _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), _mm256_loadu_ps(x + k + 8)));
  }
  float lane[16];
  _mm256_storeu_ps(lane, s0);
  _mm256_storeu_ps(lane + 8, s1);
  for (int l = 0; k < K; ++k, ++l) lane[l] += f16(w + 2 * k) * x[k];
  for (int s = 8; s >= 1; s /= 2)
    for (int l = 0; l < s; ++l) lane[l] += lane[l + s];
  return lane[0];
}

}  // namespace
}  // namespace claw::kernels::ggml_detail

#define CLAW_GGML_SIMD 1
#define CLAW_GGML_PANEL rows_panel_avx2
#include "claw/kernels/cpu/ggml_dot.inc"
#endif
