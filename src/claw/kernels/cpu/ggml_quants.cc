#include "claw/kernels/cpu/ggml_quants.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "claw/core/dtype_convert.h"
#include "claw/core/error.h"
#include "claw/kernels/cpu/ggml_blocks.h"

namespace claw::kernels {

namespace {

using ggml_detail::Block;
using ggml_detail::BlockQ8K;
using ggml_detail::decode;
using ggml_detail::f16;
using ggml_detail::u16;

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
// Rounds half to even, as the SIMD conversions llama.cpp quantizes with.
int32_t round_even(float v) { return static_cast<int32_t>(std::nearbyint(v)); }

void quantize_q8_32(bool with_sum, const float* x, uint8_t* y, int64_t blocks) {
  const size_t bytes = with_sum ? 36 : 34;
  for (int64_t b = 0; b < blocks; ++b, x += 32, y += bytes) {
    float d;
    const int32_t sum = ggml_quantize_q8_0_block(x, reinterpret_cast<int8_t*>(y + (with_sum ? 4 : 2)), &d);
    const uint16_t dh = f32_to_f16(d), s = f32_to_f16(d * static_cast<float>(sum));
    std::memcpy(y, &dh, 2);
    if (with_sum) std::memcpy(y + 2, &s, 2);
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

int32_t ggml_quantize_q8_0_block(const float* x, int8_t q[32], float* d) {
  float amax = 0;
  for (int k = 0; k < 32; ++k) amax = std::max(amax, std::fabs(x[k]));
  const float id = amax != 0 ? 127.f / amax : 0.f;
  int32_t sum = 0;
  for (int k = 0; k < 32; ++k) sum += q[k] = static_cast<int8_t>(round_even(x[k] * id));
  *d = amax / 127.f;
  return sum;
}

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

namespace {

struct RowsIsa {
  const char* name;
  ggml_detail::RowsPanelFn fn;
};

// The AVX2 build where the CPU runs it (CLAW_QUANT_ISA=generic forces the
// portable one, as for quant.h's kernels); both give the same bits.
RowsIsa pick_rows_isa() {
  const char* want = std::getenv("CLAW_QUANT_ISA");
  const bool generic = want && std::string_view(want) == "generic";
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (!generic && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c"))
    return {"avx2", ggml_detail::rows_panel_avx2};
#endif
  return {"generic", ggml_detail::rows_panel_generic};
}

const RowsIsa& rows_isa() {
  static const RowsIsa chosen = pick_rows_isa();
  return chosen;
}

}  // namespace

std::string ggml_kernel_isa() { return rows_isa().name; }

void ggml_rows_panel(GgmlType w, const uint8_t* W, size_t row_bytes, int64_t n0, int64_t n1, int64_t K,
                     const uint8_t* xq, size_t xb, int64_t M, float* out, int64_t ldo, const float* bias) {
  const GgmlTypeInfo* info = ggml_type_info(uint32_t(w));
  CLAW_CHECK(info && ggml_vec_dot_type(w) != GgmlType::f32 && w != GgmlType::q8_1 && w != GgmlType::q8_K &&
                 K % info->block == 0,
             "a {} product over rows of {}", ggml_type_label(uint32_t(w)), K);
  rows_isa().fn(w, W, row_bytes, n0, n1, K, xq, xb, M, out, ldo, bias);
}

float ggml_vec_dot(GgmlType w, const void* wrow, const void* xrow, int64_t K) {
  float y = 0;
  ggml_rows_panel(w, static_cast<const uint8_t*>(wrow), 0, 0, 1, K, static_cast<const uint8_t*>(xrow), 0, 1, &y, 1,
                  nullptr);
  return y;
}

}  // namespace claw::kernels
