// Weights to GGUF's block types as llama.cpp's reference quantizers make
// them (what llama-quantize writes when given no importance matrix): the
// same search for each block's scale and minimum, the same float
// operations in the same order, so the bytes equal llama-quantize's on the
// same fp32 values. Compiled with -ffp-contract=off (a fused multiply-add
// would round differently from llama.cpp's, built without FMA).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "claw/core/dtype_convert.h"
#include "claw/core/error.h"
#include "claw/kernels/cpu/ggml_blocks.h"
#include "claw/kernels/cpu/ggml_quants.h"

namespace claw::kernels {
namespace {

constexpr float kGroupMaxEps = 1e-15f;  // a group this small quantizes to zeros

// Round to nearest, ties to even, for |x| < 2^22: adding 1.5 * 2^23 leaves
// the integer in the low mantissa bits.
int nearest_int(float x) {
  const float v = x + 12582912.f;
  int32_t i;
  std::memcpy(&i, &v, 4);
  return (i & 0x007fffff) - 0x00400000;
}

void put_f16(uint8_t* p, float x) {
  const uint16_t h = f32_to_f16(x);
  std::memcpy(p, &h, 2);
}
float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// The element of largest magnitude (the first of equals); *amax its magnitude.
float largest(const float* x, int n, float* amax) {
  float max = 0;
  *amax = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > *amax) {
      *amax = std::fabs(x[i]);
      max = x[i];
    }
  return max;
}

// The element of largest magnitude of a group to scale symmetrically, or
// false, with the group's levels L zeroed, when it is all but zero.
bool symmetric_max(const float* x, int n, int8_t* L, float* max) {
  float amax;
  *max = largest(x, n, &amax);
  if (amax >= kGroupMaxEps) return true;
  std::fill(L, L + n, 0);
  return false;
}

// Blocks of 32 with a minimum (q4_1, q5_1): d = (max - min) / levels,
// q = (x - min) / d rounded half up.
void block_affine(const float* x, int levels, uint8_t* d_m, uint8_t* q) {
  float min = std::numeric_limits<float>::max(), max = -std::numeric_limits<float>::max();
  for (int j = 0; j < 32; ++j) {
    min = x[j] < min ? x[j] : min;
    max = x[j] > max ? x[j] : max;
  }
  const float d = (max - min) / static_cast<float>(levels);
  const float id = d != 0 ? 1.0f / d : 0.0f;
  put_f16(d_m, d);
  put_f16(d_m + 2, min);
  for (int j = 0; j < 32; ++j) q[j] = static_cast<uint8_t>(static_cast<int8_t>((x[j] - min) * id + 0.5f));
}

void quantize_q4_1(const float* x, uint8_t* y, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, x += 32, y += 20) {
    uint8_t q[32];
    block_affine(x, 15, y, q);
    for (int j = 0; j < 16; ++j) y[4 + j] = static_cast<uint8_t>(std::min<int>(15, q[j]) | std::min<int>(15, q[j + 16]) << 4);
  }
}

// Fifth bits of 32 quants into a u32 (bit i: element i) and their nibbles.
void pack_5bit(const uint8_t* q, uint8_t* qh, uint8_t* qs) {
  uint32_t h = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | (q[j + 16] & 0x0F) << 4);
    h |= static_cast<uint32_t>((q[j] & 0x10) >> 4) << j;
    h |= static_cast<uint32_t>((q[j + 16] & 0x10) >> 4) << (j + 16);
  }
  std::memcpy(qh, &h, 4);
}

void quantize_q5_1(const float* x, uint8_t* y, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, x += 32, y += 24) {
    uint8_t q[32];
    block_affine(x, 31, y, q);
    pack_5bit(q, y + 4, y + 8);
  }
}

// q5_0: d = (the element of largest magnitude) / -16, q = x / d + 16.5 truncated.
void quantize_q5_0(const float* x, uint8_t* y, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, x += 32, y += 22) {
    float amax;
    const float d = largest(x, 32, &amax) / -16;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    put_f16(y, d);
    uint8_t q[32];
    for (int j = 0; j < 32; ++j) q[j] = static_cast<uint8_t>(std::min<int>(31, static_cast<int8_t>(x[j] * id + 16.5f)));
    pack_5bit(q, y + 2, y + 6);
  }
}

// The scale and minimum of one sub-block (q2_K, q4_K, q5_K): levels
// 0..nmax, x ~ scale l - min, minimising the weighted squared (abs: absolute)
// error over nstep + 1 trial scales around nmax / (max - min) (each trial's
// least-squares scale and minimum, the minimum kept <= 0). Returns the
// scale; *neg_min = -min.
float scale_and_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min, float rmin,
                    float rdelta, int nstep, bool abs = false) {
  auto err_of = [abs](float diff) { return abs ? std::fabs(diff) : diff * diff; };
  float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = x[i] < min ? x[i] : min;
    max = x[i] > max ? x[i] : max;
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::fill(L, L + n, 0);
    *neg_min = -min;
    return 0.f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax));
    best += w[i] * err_of(scale * L[i] + min - x[i]);
  }
  uint8_t trial[32];
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
      trial[i] = static_cast<uint8_t>(l);
      sum_l += w[i] * static_cast<float>(l);
      sum_l2 += w[i] * static_cast<float>(l) * static_cast<float>(l);
      sum_xl += w[i] * static_cast<float>(l) * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (!(D > 0)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float err = 0;
    for (int i = 0; i < n; ++i) {
      err += w[i] * err_of(this_scale * trial[i] + this_min - x[i]);
    }
    if (err < best) {
      std::copy(trial, trial + n, L);
      best = err;
      scale = this_scale;
      min = this_min;
    }
  }
  *neg_min = -min;
  return scale;
}

// The 6-bit scales and mins of a q4_K/q5_K super-block into its 12 bytes:
// sub-blocks 0-3 in the low 6 bits of bytes 0-3 (scales) and 4-7 (mins),
// 4-7 as nibbles of bytes 8-11 with their top 2 bits above 0-3's.
void pack_scales_k4(const uint8_t* ls, const uint8_t* lm, uint8_t* s) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      s[j] = ls[j];
      s[j + 4] = lm[j];
    } else {
      s[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | (lm[j] & 0xF) << 4);
      s[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
      s[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
  }
}
void unpack_scale_k4(int j, const uint8_t* s, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((s[j + 4] & 0xF) | (s[j - 4] >> 6) << 4);
    *m = static_cast<uint8_t>((s[j + 4] >> 4) | (s[j] >> 6) << 4);
  }
}

// A q4_K (nmax 15) or q5_K (31) super-block's levels L[256], its d, dmin and
// packed scales (dm: 4 bytes, s: 12).
void super_block_k(const float* x, int nmax, float rmin, int nstep, uint8_t* dm, uint8_t* s, uint8_t* L) {
  float scales[8], mins[8], w[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) w[l] = av_x + std::fabs(xs[l]);
    scales[j] = scale_and_min(32, nmax, xs, w, L + 32 * j, &mins[j], rmin, 0.1f, nstep);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
    lm[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
  }
  std::memset(s, 0, 12);
  pack_scales_k4(ls, lm, s);
  put_f16(dm, max_scale / 63.f);
  put_f16(dm + 2, max_min / 63.f);
  for (int j = 0; j < 8; ++j) {  // the levels again, against the scales as stored
    uint8_t sc, m;
    unpack_scale_k4(j, s, &sc, &m);
    const float d = f16_at(dm) * sc;
    if (d == 0) continue;
    const float dmin = f16_at(dm + 2) * m;
    for (int i = 0; i < 32; ++i)
      L[32 * j + i] = static_cast<uint8_t>(std::clamp(nearest_int((x[32 * j + i] + dmin) / d), 0, nmax));
  }
}

// q2_K: sub-blocks of 16, levels 0..3 weighted by |x|, 4-bit scales and
// mins (scales[16]: low nibble scale, high min), then 64 bytes of 2-bit
// levels, d, dmin.
void quantize_q2_K(const float* x, uint8_t* y, int64_t blocks) {
  constexpr float kQ4 = 15.f;
  for (int64_t b = 0; b < blocks; ++b, x += kSuperBlock, y += 84) {
    uint8_t L[kSuperBlock];
    float scales[16], mins[16], w[16], max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) w[l] = std::fabs(x[16 * j + l]);
      scales[j] = scale_and_min(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    uint8_t* sc = y;
    std::memset(sc, 0, 16);
    if (max_scale > 0) {
      const float iscale = kQ4 / max_scale;
      for (int j = 0; j < 16; ++j) sc[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
    }
    put_f16(y + 80, max_scale > 0 ? max_scale / kQ4 : 0.f);
    if (max_min > 0) {
      const float iscale = kQ4 / max_min;
      for (int j = 0; j < 16; ++j) sc[j] |= static_cast<uint8_t>(nearest_int(iscale * mins[j]) << 4);
    }
    put_f16(y + 82, max_min > 0 ? max_min / kQ4 : 0.f);
    for (int j = 0; j < 16; ++j) {
      const float d = f16_at(y + 80) * (sc[j] & 0xF);
      if (d == 0) continue;
      const float dm = f16_at(y + 82) * (sc[j] >> 4);
      for (int i = 0; i < 16; ++i)
        L[16 * j + i] = static_cast<uint8_t>(std::clamp(nearest_int((x[16 * j + i] + dm) / d), 0, 3));
    }
    uint8_t* q = y + 16;
    for (int j = 0; j < kSuperBlock; j += 128)
      for (int l = 0; l < 32; ++l)
        q[j / 4 + l] = static_cast<uint8_t>(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 | L[j + l + 96] << 6);
  }
}

// A symmetric scale for q3_K's sub-blocks of 16 (levels -nmax..nmax-1,
// stored + nmax): from 1/iscale = max / -nmax, up to 5 passes that move one
// level at a time where that raises the weighted (x^2) fit
// sumlx^2 / suml2. Returns the least-squares scale.
float symmetric_scale_q3(int n, int nmax, const float* x, int8_t* L) {
  float max;
  if (!symmetric_max(x, n, L, &max)) return 0.f;
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * static_cast<float>(L[i]);
      if (!(slx > 0)) continue;
      float sl2 = suml2 - w * static_cast<float>(L[i]) * static_cast<float>(L[i]);
      const int l = std::clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (l == L[i]) continue;
      slx += w * x[i] * static_cast<float>(l);
      sl2 += w * static_cast<float>(l) * static_cast<float>(l);
      if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = static_cast<int8_t>(l);
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// q3_K: 32 bytes of third bits (element j: byte j % 32, bit j / 32), 64 of
// 2-bit levels, 12 of 6-bit scales biased by 32 (low nibbles in bytes 0-7,
// top 2 bits in 8-11), d.
void quantize_q3_K(const float* x, uint8_t* y, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, x += kSuperBlock, y += 110) {
    uint8_t* hmask = y;
    uint8_t* qs = y + 32;
    uint8_t* s = y + 96;
    int8_t L[kSuperBlock];
    float scales[16], amax;
    for (int j = 0; j < 16; ++j) scales[j] = symmetric_scale_q3(16, 4, x + 16 * j, L + 16 * j);
    const float max_scale = largest(scales, 16, &amax);
    std::memset(s, 0, 12);
    if (max_scale != 0) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < 16; ++j) {
        int l = std::clamp<int>(static_cast<int8_t>(nearest_int(iscale * scales[j])), -32, 31) + 32;
        if (j < 8) s[j] = static_cast<uint8_t>(l & 0xF);
        else s[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
        l >>= 4;
        s[j % 4 + 8] |= static_cast<uint8_t>(l << (2 * (j / 4)));
      }
      put_f16(y + 108, 1 / iscale);
    } else {
      put_f16(y + 108, 0.f);
    }
    for (int j = 0; j < 16; ++j) {
      const int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
      const int sc = (lo | ((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
      const float d = f16_at(y + 108) * static_cast<float>(sc);
      if (d == 0) continue;
      for (int i = 0; i < 16; ++i)
        L[16 * j + i] = static_cast<int8_t>(std::clamp(nearest_int(x[16 * j + i] / d), -4, 3) + 4);
    }
    std::memset(hmask, 0, 32);
    for (int j = 0; j < kSuperBlock; ++j)
      if (L[j] > 3) {
        hmask[j % 32] |= static_cast<uint8_t>(1 << (j / 32));
        L[j] = static_cast<int8_t>(L[j] - 4);
      }
    for (int j = 0; j < kSuperBlock; j += 128)
      for (int l = 0; l < 32; ++l)
        qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 | L[j + l + 96] << 6);
  }
}

// The IQ4 level nearest x (ties to the upper one but where x is below it).
int nearest_iq4(float x) {
  const int8_t* v = ggml_detail::kIq4Levels;
  if (x <= v[0]) return 0;
  if (x >= v[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (x < v[mid] ? hi : lo) = mid;
  }
  return x - v[hi - 1] < v[hi] - x ? hi - 1 : hi;
}

// The scale of one IQ4 block of 32 (weights x^2): the least-squares scale at
// d = max / -v[0], then the better of 15 trial scales around it (as
// llama-quantize calls llama.cpp's search, 7 either side).
float iq4_scale(const float* x) {
  const int8_t* v = ggml_detail::kIq4Levels;
  float amax;
  const float max = largest(x, 32, &amax);
  if (amax < kGroupMaxEps) return 0;
  auto fit = [&](float id, float* sumqx, float* sumq2) {
    *sumqx = *sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      const float q = v[nearest_iq4(id * x[j])], w = x[j] * x[j];
      *sumqx += w * q * x[j];
      *sumq2 += w * q * q;
    }
  };
  float sumqx, sumq2;
  fit(1 / (-max / v[0]), &sumqx, &sumq2);
  float d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
  float best = d * sumqx;
  for (int t = -7; t <= 7; ++t) {
    fit(static_cast<float>(t + v[0]) / max, &sumqx, &sumq2);
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

void pack_iq4(const uint8_t* L, uint8_t* q, int n) {
  for (int i = 0; i < n / 32; ++i)
    for (int j = 0; j < 16; ++j) q[16 * i + j] = static_cast<uint8_t>(L[32 * i + j] | L[32 * i + 16 + j] << 4);
}

void quantize_iq4_nl(const float* x, uint8_t* y, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, x += 32, y += 18) {
    const float d = iq4_scale(x);
    put_f16(y, d);
    const float id = d != 0 ? 1 / d : 0;
    uint8_t L[32];
    for (int j = 0; j < 32; ++j) L[j] = static_cast<uint8_t>(nearest_iq4(id * x[j]));
    pack_iq4(L, y + 2, 32);
  }
}

// iq4_xs: eight IQ4 blocks of 32 under one f16 d = -max scale / 32, each
// with a 6-bit scale biased by 32 (low nibbles in 4 bytes, top 2 bits in a
// u16).
void quantize_iq4_xs(const float* x, uint8_t* y, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, x += kSuperBlock, y += 136) {
    float scales[8], amax;
    for (int ib = 0; ib < 8; ++ib) scales[ib] = iq4_scale(x + 32 * ib);
    const float max_scale = largest(scales, 8, &amax);
    const float d = -max_scale / 32;
    put_f16(y, d);
    const float id = d != 0 ? 1 / d : 0.f;
    uint16_t high = 0;
    uint8_t* low = y + 4;
    std::memset(low, 0, 4);
    uint8_t L[kSuperBlock];
    for (int ib = 0; ib < 8; ++ib) {
      int l = std::clamp(nearest_int(id * scales[ib]), -32, 31);
      const float dl = d * static_cast<float>(l);
      const float idl = dl != 0 ? 1 / dl : 0.f;
      for (int j = 0; j < 32; ++j) L[32 * ib + j] = static_cast<uint8_t>(nearest_iq4(idl * x[32 * ib + j]));
      l += 32;
      low[ib / 2] |= static_cast<uint8_t>((l & 0xF) << (ib % 2 ? 4 : 0));
      high |= static_cast<uint16_t>((l >> 4) << (2 * ib));
    }
    std::memcpy(y + 2, &high, 2);
    pack_iq4(L, y + 8, kSuperBlock);
  }
}

void quantize_q4_K(const float* x, uint8_t* y, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, x += kSuperBlock, y += 144) {
    uint8_t L[kSuperBlock];
    super_block_k(x, 15, -1.f, 20, y, y + 4, L);
    uint8_t* q = y + 16;
    for (int j = 0; j < kSuperBlock; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | L[j + l + 32] << 4);
  }
}

void quantize_q5_K(const float* x, uint8_t* y, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, x += kSuperBlock, y += 176) {
    uint8_t L[kSuperBlock];
    super_block_k(x, 31, -0.5f, 15, y, y + 4, L);
    uint8_t* qh = y + 16;
    uint8_t* ql = y + 48;
    std::memset(qh, 0, 32);
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < kSuperBlock; n += 64, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n + j], l2 = L[n + j + 32];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        if (l2 > 15) {
          l2 -= 16;
          qh[j] |= m2;
        }
        ql[j] = static_cast<uint8_t>(l1 | l2 << 4);
      }
      m1 = static_cast<uint8_t>(m1 << 2);
      m2 = static_cast<uint8_t>(m2 << 2);
    }
  }
}

// A symmetric scale for n values (q6_K's sub-blocks of 16, nmax 32): levels
// -nmax..nmax-1 (stored + nmax), weights x^2, the least-squares scale at
// 1/iscale = max/-nmax and 18 trial scales around it, the best kept.
float symmetric_scale(int n, int nmax, const float* x, int8_t* L) {
  float max;
  if (!symmetric_max(x, n, L, &max)) return 0.f;
  auto trial = [&](float iscale, float* sumlx, float* suml2) {
    *sumlx = *suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      *sumlx += w * x[i] * static_cast<float>(l);
      *suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
  };
  auto levels = [&](float iscale) {
    for (int i = 0; i < n; ++i)
      L[i] = static_cast<int8_t>(nmax + std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1));
  };
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx, suml2;
  trial(iscale, &sumlx, &suml2);
  levels(iscale);
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    trial(iscale, &sumlx, &suml2);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      levels(iscale);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

void quantize_q6_K(const float* x, uint8_t* y, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, x += kSuperBlock, y += 210) {
    uint8_t* ql = y;
    uint8_t* qh = y + 128;
    int8_t* sc = reinterpret_cast<int8_t*>(y + 192);
    int8_t L[kSuperBlock];
    float scales[16], max_abs;
    for (int ib = 0; ib < 16; ++ib) scales[ib] = symmetric_scale(16, 32, x + 16 * ib, L + 16 * ib);
    const float max_scale = largest(scales, 16, &max_abs);
    if (max_abs < kGroupMaxEps) {
      std::memset(y, 0, 210);
      continue;
    }
    const float iscale = -128.f / max_scale;
    put_f16(y + 208, 1 / iscale);
    for (int ib = 0; ib < 16; ++ib) sc[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    for (int j = 0; j < 16; ++j) {
      const float d = f16_at(y + 208) * sc[j];
      if (d == 0) continue;
      for (int i = 0; i < 16; ++i)
        L[16 * j + i] = static_cast<int8_t>(std::clamp(nearest_int(x[16 * j + i] / d), -32, 31) + 32);
    }
    for (int j = 0; j < kSuperBlock; j += 128, ql += 64, qh += 32)
      for (int l = 0; l < 32; ++l) {
        const int q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF, q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
        ql[l] = static_cast<uint8_t>(q1 | q3 << 4);
        ql[l + 32] = static_cast<uint8_t>(q2 | q4 << 4);
        qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | (L[j + l + 32] >> 4) << 2 | (L[j + l + 64] >> 4) << 4 |
                                     (L[j + l + 96] >> 4) << 6);
      }
  }
}

}  // namespace

bool ggml_quantizable(GgmlType t) {
  switch (t) {
    case GgmlType::q4_1:
    case GgmlType::q5_0:
    case GgmlType::q5_1:
    case GgmlType::q2_K:
    case GgmlType::q3_K:
    case GgmlType::q4_K:
    case GgmlType::q5_K:
    case GgmlType::q6_K:
    case GgmlType::iq4_nl:
    case GgmlType::iq4_xs: return true;
    default: return false;
  }
}

void ggml_quantize_weights(GgmlType t, const float* x, void* dst, int64_t n) {
  const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(t));
  CLAW_CHECK(info && ggml_quantizable(t) && n % info->block == 0, "ggml_quantize_weights: {} of {} elements",
             ggml_type_label(static_cast<uint32_t>(t)), n);
  auto* y = static_cast<uint8_t*>(dst);
  const int64_t blocks = n / info->block;
  switch (t) {
    case GgmlType::q4_1: quantize_q4_1(x, y, blocks); return;
    case GgmlType::q5_0: quantize_q5_0(x, y, blocks); return;
    case GgmlType::q5_1: quantize_q5_1(x, y, blocks); return;
    case GgmlType::q2_K: quantize_q2_K(x, y, blocks); return;
    case GgmlType::q3_K: quantize_q3_K(x, y, blocks); return;
    case GgmlType::q4_K: quantize_q4_K(x, y, blocks); return;
    case GgmlType::q5_K: quantize_q5_K(x, y, blocks); return;
    case GgmlType::q6_K: quantize_q6_K(x, y, blocks); return;
    case GgmlType::iq4_nl: quantize_iq4_nl(x, y, blocks); return;
    case GgmlType::iq4_xs: quantize_iq4_xs(x, y, blocks); return;
    default: return;
  }
}

}  // namespace claw::kernels
