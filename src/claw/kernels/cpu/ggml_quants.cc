#include "claw/kernels/cpu/ggml_quants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "claw/core/dtype_convert.h"
#include "claw/core/error.h"

namespace claw::kernels {

namespace {

// IQ4's sixteen levels (a non-uniform 4-bit grid).
constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

struct BlockQ8K {  // the activations of a super-block
  float d;
  int8_t qs[kSuperBlock];
  int16_t bsums[kSuperBlock / 16];  // sums of qs per 16
};
static_assert(sizeof(BlockQ8K) == 292, "block_q8_K");

constexpr GgmlTypeInfo kInfo[] = {
    {"F32", 1, 4},       {"F16", 1, 2},      {"Q4_0", 32, 18},   {"Q4_1", 32, 20},    {"Q5_0", 32, 22},
    {"Q5_1", 32, 24},    {"Q8_0", 32, 34},   {"Q8_1", 32, 36},   {"Q2_K", 256, 84},   {"Q3_K", 256, 110},
    {"Q4_K", 256, 144},  {"Q5_K", 256, 176}, {"Q6_K", 256, 210}, {"Q8_K", 256, 292},  {"IQ4_NL", 32, 18},
    {"IQ4_XS", 256, 136}, {"BF16", 1, 2}};
constexpr GgmlType kTypes[] = {GgmlType::f32,  GgmlType::f16,  GgmlType::q4_0,   GgmlType::q4_1,  GgmlType::q5_0,
                               GgmlType::q5_1, GgmlType::q8_0, GgmlType::q8_1,   GgmlType::q2_K,  GgmlType::q3_K,
                               GgmlType::q4_K, GgmlType::q5_K, GgmlType::q6_K,   GgmlType::q8_K,  GgmlType::iq4_nl,
                               GgmlType::iq4_xs, GgmlType::bf16};
static_assert(std::size(kInfo) == std::size(kTypes));

uint16_t u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
uint32_t u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
float f16(const uint8_t* p) { return f16_to_f32(u16(p)); }

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

void decode_32(GgmlType t, const uint8_t* p, Block& b) {
  const uint8_t* nib = p + (t == GgmlType::q4_1 ? 4 : t == GgmlType::q5_0 ? 6 : t == GgmlType::q5_1 ? 8 : 2);
  b.d = f16(p);
  b.kind = t == GgmlType::q4_1 || t == GgmlType::q5_1 ? Block::affine : Block::plain;
  if (b.kind == Block::affine) b.dmin = f16(p + 2);
  if (t == GgmlType::q8_0) {
    std::memcpy(b.q, p + 2, 32);
    return;
  }
  const uint32_t qh = t == GgmlType::q5_0 ? u32(p + 2) : t == GgmlType::q5_1 ? u32(p + 4) : 0;
  const int bias = t == GgmlType::q4_0 ? 8 : t == GgmlType::q5_0 ? 16 : 0;
  for (int i = 0; i < 16; ++i) {
    int lo = nib[i] & 15, hi = nib[i] >> 4;
    if (t == GgmlType::iq4_nl) {
      b.q[i] = kIq4Levels[lo];
      b.q[i + 16] = kIq4Levels[hi];
      continue;
    }
    lo |= ((qh >> i) & 1) << 4;
    hi |= ((qh >> (i + 16)) & 1) << 4;
    b.q[i] = static_cast<int8_t>(lo - bias);
    b.q[i + 16] = static_cast<int8_t>(hi - bias);
  }
}

// q4_K's and q5_K's twelve bytes: eight 6-bit scales and eight 6-bit mins.
void k_scales_mins(const uint8_t* s, Block& b) {
  for (int j = 0; j < 4; ++j) {
    b.sc[j] = s[j] & 63;
    b.mn[j] = s[j + 4] & 63;
    b.sc[j + 4] = (s[j + 8] & 15) | ((s[j] >> 6) << 4);
    b.mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
  }
}

void decode_256(GgmlType t, const uint8_t* p, Block& b) {
  switch (t) {
    case GgmlType::q2_K: {  // scales[16] qs[64] d dmin
      b.kind = Block::scaled_min, b.sub = 16, b.d = f16(p + 80), b.dmin = f16(p + 82);
      for (int j = 0; j < 16; ++j) b.sc[j] = p[j] & 15, b.mn[j] = p[j] >> 4;
      for (int e = 0; e < 256; ++e) b.q[e] = static_cast<int8_t>((p[16 + e / 128 * 32 + e % 32] >> (2 * (e / 32 % 4))) & 3);
      return;
    }
    case GgmlType::q3_K: {  // hmask[32] qs[64] scales[12] d
      b.kind = Block::scaled, b.sub = 16, b.d = f16(p + 108);
      const uint8_t* s = p + 96;
      for (int j = 0; j < 16; ++j)
        b.sc[j] = (((s[j % 8] >> (4 * (j / 8))) & 15) | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
      for (int e = 0; e < 256; ++e) {
        const int lo = (p[32 + e / 128 * 32 + e % 32] >> (2 * (e / 32 % 4))) & 3;
        const int high_clear = ((p[e % 32] >> (e / 32)) & 1) ^ 1;
        b.q[e] = static_cast<int8_t>(lo - 4 * high_clear);
      }
      return;
    }
    case GgmlType::q4_K:
    case GgmlType::q5_K: {  // d dmin scales[12] (qh[32]) qs[128]
      b.kind = Block::scaled_min, b.sub = 32, b.d = f16(p), b.dmin = f16(p + 2);
      k_scales_mins(p + 4, b);
      const bool five = t == GgmlType::q5_K;
      const uint8_t* qs = p + (five ? 48 : 16);
      for (int e = 0; e < 256; ++e) {
        int q = (qs[e / 64 * 32 + e % 32] >> (4 * (e / 32 % 2))) & 15;
        if (five) q |= ((p[16 + e % 32] >> (e / 32)) & 1) << 4;
        b.q[e] = static_cast<int8_t>(q);
      }
      return;
    }
    case GgmlType::q6_K: {  // ql[128] qh[64] scales[16] d
      b.kind = Block::scaled, b.sub = 16, b.d = f16(p + 208);
      for (int j = 0; j < 16; ++j) b.sc[j] = static_cast<int8_t>(p[192 + j]);
      for (int e = 0; e < 256; ++e) {
        const int half = e / 128, r = e % 128;
        const int lo = (p[half * 64 + r % 64] >> (4 * (r / 64))) & 15;
        const int hi = (p[128 + half * 32 + r % 32] >> (2 * (r / 32))) & 3;
        b.q[e] = static_cast<int8_t>((lo | hi << 4) - 32);
      }
      return;
    }
    case GgmlType::iq4_xs: {  // d scales_h scales_l[4] qs[128]
      b.kind = Block::scaled, b.sub = 32, b.d = f16(p);
      const uint16_t sh = u16(p + 2);
      for (int j = 0; j < 8; ++j)
        b.sc[j] = (((p[4 + j / 2] >> (4 * (j % 2))) & 15) | (((sh >> (2 * j)) & 3) << 4)) - 32;
      for (int e = 0; e < 256; ++e) {
        const int j = e / 32, l = e % 32;
        b.q[e] = kIq4Levels[(p[8 + j * 16 + l % 16] >> (4 * (l / 16))) & 15];
      }
      return;
    }
    default: CLAW_CHECK(false, "decode_256: {} has no super-blocks", ggml_type_label(uint32_t(t)));
  }
}

void decode(GgmlType t, const uint8_t* p, Block& b) {
  if (ggml_type_info(uint32_t(t))->block == kSuperBlock)
    decode_256(t, p, b);
  else
    decode_32(t, p, b);
}

void dequantize_block(const Block& b, int64_t n, float* y) {
  for (int64_t e = 0; e < n; ++e) {
    const float q = static_cast<float>(b.q[e]);
    const int j = static_cast<int>(e / b.sub);
    switch (b.kind) {
      case Block::plain: y[e] = b.d * q; break;
      case Block::affine: y[e] = b.d * q + b.dmin; break;
      case Block::scaled: y[e] = (b.d * static_cast<float>(b.sc[j])) * q; break;
      case Block::scaled_min:
        y[e] = (b.d * static_cast<float>(b.sc[j])) * q - b.dmin * static_cast<float>(b.mn[j]);
        break;
    }
  }
}

// Rounds half to even, as the SIMD conversions llama.cpp quantizes with.
int32_t round_even(float v) { return static_cast<int32_t>(std::nearbyint(v)); }

void quantize_q8_32(bool with_sum, const float* x, uint8_t* y, int64_t blocks) {
  const size_t bytes = with_sum ? 36 : 34;
  for (int64_t b = 0; b < blocks; ++b, x += 32, y += bytes) {
    float amax = 0;
    for (int k = 0; k < 32; ++k) amax = std::max(amax, std::fabs(x[k]));
    const float d = amax / 127.f, id = amax != 0 ? 127.f / amax : 0.f;
    const uint16_t dh = f32_to_f16(d);
    std::memcpy(y, &dh, 2);
    int8_t* q = reinterpret_cast<int8_t*>(y + (with_sum ? 4 : 2));
    int32_t sum = 0;
    for (int k = 0; k < 32; ++k) sum += q[k] = static_cast<int8_t>(round_even(x[k] * id));
    if (with_sum) {
      const uint16_t s = f32_to_f16(d * static_cast<float>(sum));
      std::memcpy(y + 2, &s, 2);
    }
  }
}

void quantize_q8_K(const float* x, BlockQ8K* y, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, x += kSuperBlock) {
    float amax = 0, max = 0;
    for (int k = 0; k < kSuperBlock; ++k)
      if (std::fabs(x[k]) > amax) amax = std::fabs(x[k]), max = x[k];
    BlockQ8K& o = y[b];
    std::memset(&o, 0, sizeof(o));
    if (amax == 0) continue;
    const float iscale = -127.f / max;
    for (int k = 0; k < kSuperBlock; ++k) o.qs[k] = static_cast<int8_t>(std::min(127, round_even(iscale * x[k])));
    for (int j = 0; j < kSuperBlock / 16; ++j) {
      int32_t s = 0;
      for (int k = 0; k < 16; ++k) s += o.qs[16 * j + k];
      o.bsums[j] = static_cast<int16_t>(s);
    }
    o.d = 1 / iscale;
  }
}

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t type) {
  for (size_t i = 0; i < std::size(kTypes); ++i)
    if (uint32_t(kTypes[i]) == type) return &kInfo[i];
  return nullptr;
}

std::string ggml_type_label(uint32_t type) {
  if (const GgmlTypeInfo* i = ggml_type_info(type)) return i->name;
  // ggml's other types, named so that an error says what the file holds.
  static const std::pair<uint32_t, const char*> kOthers[] = {
      {16, "IQ2_XXS"}, {17, "IQ2_XS"}, {18, "IQ3_XXS"}, {19, "IQ1_S"}, {21, "IQ3_S"}, {22, "IQ2_S"},
      {24, "I8"},      {25, "I16"},    {26, "I32"},     {27, "I64"},   {28, "F64"},   {29, "IQ1_M"},
      {34, "TQ1_0"},   {35, "TQ2_0"},  {39, "MXFP4"}};
  for (const auto& [id, name] : kOthers)
    if (id == type) return fmt::format("type {} ({})", type, name);
  return fmt::format("type {} (unknown to ggml)", type);
}

std::string ggml_readable_types() {
  std::string s;
  for (const GgmlTypeInfo& i : kInfo)
    if (std::string_view(i.name) != "Q8_1" && std::string_view(i.name) != "Q8_K") {
      if (!s.empty()) s += ", ";
      s += i.name;
    }
  return s;
}

size_t ggml_row_bytes(GgmlType t, int64_t n) {
  const GgmlTypeInfo* i = ggml_type_info(uint32_t(t));
  CLAW_CHECK(i && n % i->block == 0, "{} rows of {} elements", ggml_type_label(uint32_t(t)), n);
  return static_cast<size_t>(n / i->block) * i->block_bytes;
}

GgmlType ggml_vec_dot_type(GgmlType w) {
  switch (w) {
    case GgmlType::f16: return GgmlType::f16;
    case GgmlType::q4_0:
    case GgmlType::q5_0:
    case GgmlType::q8_0:
    case GgmlType::iq4_nl: return GgmlType::q8_0;
    case GgmlType::q4_1:
    case GgmlType::q5_1: return GgmlType::q8_1;
    case GgmlType::q2_K:
    case GgmlType::q3_K:
    case GgmlType::q4_K:
    case GgmlType::q5_K:
    case GgmlType::q6_K:
    case GgmlType::iq4_xs: return GgmlType::q8_K;
    default: return GgmlType::f32;
  }
}

void ggml_dequantize(GgmlType t, const void* src, float* dst, int64_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(src);
  switch (t) {
    case GgmlType::f32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case GgmlType::f16:
      for (int64_t i = 0; i < n; ++i) dst[i] = f16(p + 2 * i);
      return;
    case GgmlType::bf16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(u16(p + 2 * i));
      return;
    case GgmlType::q8_1:
    case GgmlType::q8_K: CLAW_CHECK(false, "{} holds activations only", ggml_type_label(uint32_t(t)));
    default: break;
  }
  const GgmlTypeInfo* info = ggml_type_info(uint32_t(t));
  CLAW_CHECK(info && n % info->block == 0, "dequantize {} of {} elements", ggml_type_label(uint32_t(t)), n);
  Block b;
  for (int64_t i = 0; i < n / info->block; ++i) {
    decode(t, p + i * info->block_bytes, b);
    dequantize_block(b, info->block, dst + i * info->block);
  }
}

void ggml_quantize_activations(GgmlType t, const float* x, void* dst, int64_t n) {
  uint8_t* y = static_cast<uint8_t*>(dst);
  switch (t) {
    case GgmlType::f32: std::memcpy(dst, x, static_cast<size_t>(n) * 4); return;
    case GgmlType::f16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(x[i]);
        std::memcpy(y + 2 * i, &h, 2);
      }
      return;
    case GgmlType::q8_0: quantize_q8_32(false, x, y, n / 32); return;
    case GgmlType::q8_1: quantize_q8_32(true, x, y, n / 32); return;
    case GgmlType::q8_K: quantize_q8_K(x, reinterpret_cast<BlockQ8K*>(dst), n / kSuperBlock); return;
    default: CLAW_CHECK(false, "{} is not an activation type", ggml_type_label(uint32_t(t)));
  }
}

float ggml_vec_dot(GgmlType w, const void* wrow, const void* xrow, int64_t K) {
  const uint8_t* wp = static_cast<const uint8_t*>(wrow);
  const uint8_t* xp = static_cast<const uint8_t*>(xrow);
  float acc = 0;
  if (w == GgmlType::f16) {
    for (int64_t k = 0; k < K; ++k) acc += f16(wp + 2 * k) * f16(xp + 2 * k);
    return acc;
  }
  const GgmlTypeInfo* info = ggml_type_info(uint32_t(w));
  const GgmlType xt = ggml_vec_dot_type(w);
  CLAW_CHECK(info && xt != GgmlType::f32 && K % info->block == 0, "vec_dot of {} over {}",
             ggml_type_label(uint32_t(w)), K);
  Block b;
  for (int64_t i = 0; i < K / info->block; ++i) {
    decode(w, wp + i * info->block_bytes, b);
    if (xt == GgmlType::q8_K) {
      const BlockQ8K& x = reinterpret_cast<const BlockQ8K*>(xp)[i];
      int32_t isum = 0, imin = 0;
      for (int j = 0; j < kSuperBlock / b.sub; ++j) {
        int32_t dot = 0;
        for (int k = 0; k < b.sub; ++k) dot += int32_t{b.q[j * b.sub + k]} * x.qs[j * b.sub + k];
        isum += b.sc[j] * dot;
        if (b.kind == Block::scaled_min)
          for (int h = 0; h < b.sub / 16; ++h) imin += b.mn[j] * x.bsums[j * b.sub / 16 + h];
      }
      acc += (b.d * x.d) * static_cast<float>(isum);
      if (b.kind == Block::scaled_min) acc -= (b.dmin * x.d) * static_cast<float>(imin);
      continue;
    }
    const uint8_t* x = xp + i * (xt == GgmlType::q8_1 ? 36 : 34);
    const int8_t* xq = reinterpret_cast<const int8_t*>(x + (xt == GgmlType::q8_1 ? 4 : 2));
    int32_t dot = 0;
    for (int k = 0; k < 32; ++k) dot += int32_t{b.q[k]} * xq[k];
    acc += (b.d * f16(x)) * static_cast<float>(dot);
    if (b.kind == Block::affine) acc += b.dmin * f16(x + 2);
  }
  return acc;
}

}  // namespace claw::kernels
