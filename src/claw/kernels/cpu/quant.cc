#include "claw/kernels/cpu/quant.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "claw/core/dtype_convert.h"
#include "claw/core/error.h"
#include "claw/kernels/cpu/quant_panel.h"
#include "claw/kernels/cpu/rowwise_linear.h"
#include "claw/kernels/cpu/rowwise_tile.h"

namespace claw::kernels {

namespace {

constexpr std::pair<WeightType, GgmlType> kGgml[] = {
    {WeightType::f32, GgmlType::f32},     {WeightType::bf16, GgmlType::bf16},    {WeightType::q8_0, GgmlType::q8_0},
    {WeightType::q4_0, GgmlType::q4_0},   {WeightType::f16, GgmlType::f16},      {WeightType::q4_1, GgmlType::q4_1},
    {WeightType::q5_0, GgmlType::q5_0},   {WeightType::q5_1, GgmlType::q5_1},    {WeightType::q2_k, GgmlType::q2_K},
    {WeightType::q3_k, GgmlType::q3_K},   {WeightType::q4_k, GgmlType::q4_K},    {WeightType::q5_k, GgmlType::q5_K},
    {WeightType::q6_k, GgmlType::q6_K},   {WeightType::iq4_nl, GgmlType::iq4_nl}, {WeightType::iq4_xs, GgmlType::iq4_xs}};

}  // namespace

GgmlType ggml_type_of(WeightType t) {
  for (const auto& [w, g] : kGgml)
    if (w == t) return g;
  return GgmlType::f32;
}

std::optional<WeightType> weight_type_of(GgmlType t) {
  for (const auto& [w, g] : kGgml)
    if (g == t) return w;
  return std::nullopt;
}

std::string_view weight_type_name(WeightType t) {
  switch (t) {
    case WeightType::f32: return "f32";
    case WeightType::bf16: return "bf16";
    case WeightType::q8_0: return "q8_0";
    case WeightType::q4_0: return "q4_0";
    case WeightType::f16: return "f16";
    case WeightType::q4_1: return "q4_1";
    case WeightType::q5_0: return "q5_0";
    case WeightType::q5_1: return "q5_1";
    case WeightType::q2_k: return "q2_k";
    case WeightType::q3_k: return "q3_k";
    case WeightType::q4_k: return "q4_k";
    case WeightType::q5_k: return "q5_k";
    case WeightType::q6_k: return "q6_k";
    case WeightType::iq4_nl: return "iq4_nl";
    case WeightType::iq4_xs: return "iq4_xs";
  }
  return "?";
}

std::optional<WeightType> parse_weight_type(std::string_view s) {
  std::string l(s);
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
  for (int i = 0; i <= static_cast<int>(WeightType::iq4_xs); ++i) {
    const auto t = static_cast<WeightType>(i);
    if (weight_type_quantizable(t) && l == weight_type_name(t)) return t;
  }
  return std::nullopt;
}

bool weight_type_fits(WeightType t, int64_t K) {
  return K > 0 && K % ggml_type_info(uint32_t(ggml_type_of(t)))->block == 0;
}

size_t weight_row_bytes(WeightType t, int64_t K) { return ggml_row_bytes(ggml_type_of(t), K); }

namespace {

void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += kQuantBlock) {
    float amax = 0;
    for (int k = 0; k < kQuantBlock; ++k) amax = std::max(amax, std::fabs(x[k]));
    const float d = amax / 127, id = d != 0 ? 1 / d : 0;
    y[b].d = f32_to_f16(d);
    for (int k = 0; k < kQuantBlock; ++k) y[b].qs[k] = static_cast<int8_t>(std::round(x[k] * id));
  }
}

void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += kQuantBlock) {
    float amax = 0, m = 0;  // m: the element of largest magnitude, with its sign
    for (int k = 0; k < kQuantBlock; ++k)
      if (std::fabs(x[k]) > amax) amax = std::fabs(x[k]), m = x[k];
    const float d = m / -8, id = d != 0 ? 1 / d : 0;
    y[b].d = f32_to_f16(d);
    for (int k = 0; k < 16; ++k) {
      const int lo = std::min(15, static_cast<int>(static_cast<int8_t>(x[k] * id + 8.5f)));
      const int hi = std::min(15, static_cast<int>(static_cast<int8_t>(x[k + 16] * id + 8.5f)));
      y[b].qs[k] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

}  // namespace

void quantize_rows(WeightType t, const float* in, void* out, int64_t rows, int64_t K) {
  CLAW_CHECK(weight_type_fits(t, K), "{} rows need a multiple of {} elements, not {}", weight_type_name(t),
             kQuantBlock, K);
  const int64_t n = rows * K;
  switch (t) {
    case WeightType::f32: std::memcpy(out, in, static_cast<size_t>(n) * 4); return;
    case WeightType::bf16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(out)[i] = f32_to_bf16(in[i]);
      return;
    case WeightType::q8_0: quantize_q8_0(in, static_cast<BlockQ8_0*>(out), n / kQuantBlock); return;
    case WeightType::q4_0: quantize_q4_0(in, static_cast<BlockQ4_0*>(out), n / kQuantBlock); return;
    case WeightType::f16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(out)[i] = f32_to_f16(in[i]);
      return;
    default:
      CLAW_CHECK(weight_type_quantizable(t), "claw does not quantize to {}", weight_type_name(t));
      ggml_quantize_weights(ggml_type_of(t), in, out, n);
  }
}

// GGUF's rows of any type, as gguf-py reads them (ggml_quants.h).
void dequantize_rows(WeightType t, const void* in, float* out, int64_t rows, int64_t K) {
  ggml_dequantize(ggml_type_of(t), in, out, rows * K);
}

using quant_detail::group_block_bytes;
using quant_detail::group_block_index;
using quant_detail::group_blocks;
using quant_detail::kGroupRows;
using quant_detail::kTileRows;
using quant_detail::lane_byte;

void WeightMatrix::allocate(WeightType t, int64_t rows, int64_t cols) {
  CLAW_CHECK(weight_type_fits(t, cols), "{} weights need rows of a multiple of {} elements, not {}",
             weight_type_name(t), ggml_type_info(uint32_t(ggml_type_of(t)))->block, cols);
  type_ = t;
  rows_ = rows;
  cols_ = cols;
  if (t == WeightType::f32 || t == WeightType::bf16 || is_ggml_rows(t)) {
    data_.resize(weight_row_bytes(t, cols) * static_cast<size_t>(rows));
    return;
  }
  data_.assign(static_cast<size_t>(group_blocks(rows, cols)) * (group_block_bytes(t) + kGroupRows * sizeof(uint16_t)),
               0);
}

size_t WeightMatrix::scales_offset() const {
  return static_cast<size_t>(group_blocks(rows_, cols_)) * group_block_bytes(type_);
}

void WeightMatrix::pack(const uint8_t* gguf, int64_t r0, int64_t r1) {
  const size_t rb = row_bytes();
  if (type_ == WeightType::f32 || type_ == WeightType::bf16 || is_ggml_rows(type_)) {
    std::memcpy(data_.data() + r0 * rb, gguf, (r1 - r0) * rb);
    return;
  }
  const int64_t nb = cols_ / kQuantBlock;
  const size_t gb = group_block_bytes(type_);
  uint16_t* scales = reinterpret_cast<uint16_t*>(data_.data() + scales_offset());
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t g = r / kGroupRows, lane = r % kGroupRows;
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t at = group_block_index(g, b, nb);
      uint8_t* q = data_.data() + static_cast<size_t>(at) * gb;
      if (type_ == WeightType::q8_0) {
        const BlockQ8_0& blk = reinterpret_cast<const BlockQ8_0*>(gguf + (r - r0) * rb)[b];
        scales[at * kGroupRows + lane] = blk.d;
        for (int k = 0; k < 32; ++k) q[lane_byte(lane, k)] = static_cast<uint8_t>(blk.qs[k]) ^ 0x80;
      } else {
        const BlockQ4_0& blk = reinterpret_cast<const BlockQ4_0*>(gguf + (r - r0) * rb)[b];
        scales[at * kGroupRows + lane] = blk.d;
        for (int k = 0; k < 16; ++k) q[lane_byte(lane, k)] = blk.qs[k];
      }
    }
  }
}

WeightMatrix WeightMatrix::quantize(const CpuCtx& ctx, WeightType t, const float* w, int64_t rows, int64_t cols) {
  WeightMatrix m;
  m.allocate(t, rows, cols);
  const size_t rb = m.row_bytes();
  // Whole tiles of rows to each thread: pack() writes a tile's bytes from its rows.
  parallel_for(ctx, (rows + kTileRows - 1) / kTileRows, 1, [&](int64_t t0, int64_t t1) {
    const int64_t r0 = t0 * kTileRows, r1 = std::min(rows, t1 * kTileRows);
    std::vector<uint8_t> gguf(static_cast<size_t>(r1 - r0) * rb);
    quantize_rows(t, w + r0 * cols, gguf.data(), r1 - r0, cols);
    m.pack(gguf.data(), r0, r1);
  });
  return m;
}

WeightMatrix WeightMatrix::from_bytes(WeightType t, int64_t rows, int64_t cols, std::vector<uint8_t> bytes) {
  CLAW_CHECK(bytes.size() == weight_row_bytes(t, cols) * static_cast<size_t>(rows),
             "{} [{}, {}] takes {} bytes, not {}", weight_type_name(t), rows, cols,
             weight_row_bytes(t, cols) * static_cast<size_t>(rows), bytes.size());
  WeightMatrix m;
  m.allocate(t, rows, cols);
  m.pack(bytes.data(), 0, rows);
  return m;
}

std::vector<uint8_t> WeightMatrix::gguf_bytes() const {
  const size_t rb = row_bytes();
  std::vector<uint8_t> out(rb * static_cast<size_t>(rows_));
  if (type_ == WeightType::f32 || type_ == WeightType::bf16 || is_ggml_rows(type_)) {
    std::memcpy(out.data(), data_.data(), out.size());
    return out;
  }
  const int64_t nb = cols_ / kQuantBlock;
  const size_t gb = group_block_bytes(type_);
  const uint16_t* scales = reinterpret_cast<const uint16_t*>(data_.data() + scales_offset());
  for (int64_t r = 0; r < rows_; ++r) {
    const int64_t g = r / kGroupRows, lane = r % kGroupRows;
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t at = group_block_index(g, b, nb);
      const uint8_t* q = data_.data() + static_cast<size_t>(at) * gb;
      const uint16_t d = scales[at * kGroupRows + lane];
      if (type_ == WeightType::q8_0) {
        BlockQ8_0& blk = reinterpret_cast<BlockQ8_0*>(out.data() + r * rb)[b];
        blk.d = d;
        for (int k = 0; k < 32; ++k) blk.qs[k] = static_cast<int8_t>(q[lane_byte(lane, k)] ^ 0x80);
      } else {
        BlockQ4_0& blk = reinterpret_cast<BlockQ4_0*>(out.data() + r * rb)[b];
        blk.d = d;
        for (int k = 0; k < 16; ++k) blk.qs[k] = q[lane_byte(lane, k)];
      }
    }
  }
  return out;
}

void WeightMatrix::dequantize(float* out) const {
  const std::vector<uint8_t> g = gguf_bytes();
  dequantize_rows(type_, g.data(), out, rows_, cols_);
}

namespace quant_detail {

void panel_generic(const PanelArgs& a, int64_t t0, int64_t t1) {
  const int64_t nb = a.K / kQuantBlock;
  const size_t gb = group_block_bytes(a.type);
  for (int64_t n = t0 * kTileRows; n < std::min(a.N, t1 * kTileRows); ++n) {
    const int64_t g = n / kGroupRows, lane = n % kGroupRows;
    for (int64_t m = 0; m < a.M; ++m) {
      float acc = 0;
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t at = group_block_index(g, b, nb);
        const uint8_t* q = a.wq + static_cast<size_t>(at) * gb;
        const int8_t* x = a.xq + m * a.K + b * kQuantBlock;
        int32_t p = 0;
        for (int k = 0; k < 32; ++k) {
          const int w = a.type == WeightType::q8_0 ? q[lane_byte(lane, k)] - 128
                        : k < 16                    ? (q[lane_byte(lane, k)] & 15) - 8
                                                    : (q[lane_byte(lane, k - 16)] >> 4) - 8;
          p += int32_t{x[k]} * w;
        }
        const float dw = f16_to_f32(a.ws[at * kGroupRows + lane]);
        acc = std::fma(static_cast<float>(p), dw * a.xd[m * nb + b], acc);
      }
      a.out[m * a.N + n] = a.bias ? acc + a.bias[n] : acc;
    }
  }
}

void quantize_generic(const float* x, int64_t blocks, int32_t offset, int8_t* xq, float* xd, int32_t* xc) {
  for (int64_t b = 0; b < blocks; ++b) {
    float d;
    const int32_t sum = ggml_quantize_q8_0_block(x + b * kQuantBlock, xq + b * kQuantBlock, &d);
    xd[b] = f16_to_f32(f32_to_f16(d));
    xc[b] = -offset * sum;
  }
}

}  // namespace quant_detail

namespace {

using quant_detail::PanelFn;
using quant_detail::QuantizeFn;

struct Isa {
  const char* name;
  PanelFn fn;
  QuantizeFn quantize;
};

Isa pick_isa() {
  std::vector<Isa> have;  // fastest first
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2 && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw"))
    have.push_back({"avx512_vnni", quant_detail::panel_avx512_vnni, quant_detail::quantize_avx2});
  if (avx2) have.push_back({"avx2", quant_detail::panel_avx2, quant_detail::quantize_avx2});
#endif
  have.push_back({"generic", quant_detail::panel_generic, quant_detail::quantize_generic});
  const char* want = std::getenv("CLAW_QUANT_ISA");
  if (!want || !*want) return have.front();
  std::string names;
  for (const Isa& i : have) {
    if (want == std::string_view(i.name)) return i;
    names += names.empty() ? i.name : std::string(", ") + i.name;
  }
  fail("CLAW_QUANT_ISA={}: this CPU runs {}", want, names);
}

const Isa& isa() {
  static const Isa chosen = pick_isa();
  return chosen;
}

}  // namespace

std::string quant_kernel_isa() { return isa().name; }

namespace {

// f16 rows: each output the sum of w[k] x[k] in 32 fp32 lanes (lane k % 32,
// ascending k; two registers of 16, so that a row read alone keeps two
// multiply-add chains going), the two added, the rest of the row in the 16
// lanes, folded (fixed_order.h), the tail after. Decoding (up to
// kF16StreamRows input rows) reads the rows one after another (one
// sequential stream a thread) against the inputs in f16; more input rows go
// by groups that stay in L2, in register tiles of up to 4 inputs x 2 rows.
// The same order for every batch.
constexpr int64_t kF16StreamRows = 2;  // input rows up to which rows are read as one stream

template <typename XRows>
float dot_lanes32(const uint16_t* w, const typename XRows::T* x, int64_t K) {
  using fixed_order::V16;
  using rowwise::F16Rows;
  V16 a0 = {}, a1 = {};
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    a0 += F16Rows::vec(w + k) * XRows::vec(x + k);
    a1 += F16Rows::vec(w + k + 16) * XRows::vec(x + k + 16);
  }
  V16 a = a0 + a1;
  for (; k + 16 <= K; k += 16) a += F16Rows::vec(w + k) * XRows::vec(x + k);
  float s = fixed_order::fold(a);
  for (; k < K; ++k) s += F16Rows::at(w + k) * XRows::at(x + k);
  return s;
}

// dot_lanes32 for MR input rows x NR weight rows at once.
template <int MR, int NR>
void f16_tile(float* out, int64_t ldo, const float* x, const uint16_t* w, const float* bias, int64_t K) {
  using fixed_order::V16;
  using rowwise::F16Rows;
  V16 acc[MR][NR][2] = {};
  int64_t k = 0;
  for (; k + 32 <= K; k += 32)
    for (int h = 0; h < 2; ++h) {
      V16 xv[MR], wv[NR];
      for (int i = 0; i < MR; ++i) xv[i] = fixed_order::load(x + i * K + k + 16 * h);
      for (int j = 0; j < NR; ++j) wv[j] = F16Rows::vec(w + j * K + k + 16 * h);
      for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) acc[i][j][h] += wv[j] * xv[i];
    }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      V16 a = acc[i][j][0] + acc[i][j][1];
      int64_t r = k;
      for (; r + 16 <= K; r += 16) a += F16Rows::vec(w + j * K + r) * fixed_order::load(x + i * K + r);
      float s = fixed_order::fold(a);
      for (; r < K; ++r) s += F16Rows::at(w + j * K + r) * x[i * K + r];
      out[i * ldo + j] = bias ? s + bias[j] : s;
    }
}

template <int MR>
void f16_row_tile(int nr, float* out, int64_t ldo, const float* x, const uint16_t* w, const float* bias, int64_t K) {
  switch (nr) {
    case 2: return f16_tile<MR, 2>(out, ldo, x, w, bias, K);
    default: return f16_tile<MR, 1>(out, ldo, x, w, bias, K);
  }
}

// x: the inputs in f16 (xh, what decoding reads: half the bytes) and, for
// more than kF16StreamRows of them, as their fp32 values (xf).
void f16_rows_panel(float* out, int64_t N, const uint16_t* xh, const float* xf, const uint16_t* w, const float* bias,
                    int64_t M, int64_t K, int64_t n0, int64_t n1) {
  if (M <= kF16StreamRows) {
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t m = 0; m < M; ++m) {
        const float y = dot_lanes32<rowwise::F16Rows>(w + n * K, xh + m * K, K);
        out[m * N + n] = bias ? y + bias[n] : y;
      }
    return;
  }
  const int64_t group = std::max<int64_t>(4, (256 << 10) / (4 * K));  // input rows in L2
  for (int64_t g = 0; g < M; g += group) {
    const int64_t g1 = std::min(M, g + group);
    for (int64_t n = n0; n < n1; n += 2)
      for (int64_t m = g; m < g1; m += 4) {
        const int nr = static_cast<int>(std::min<int64_t>(2, n1 - n));
        float* o = out + m * N + n;
        const float* b = bias ? bias + n : nullptr;
        switch (std::min<int64_t>(4, g1 - m)) {
          case 4: f16_row_tile<4>(nr, o, N, xf + m * K, w + n * K, b, K); break;
          case 3: f16_row_tile<3>(nr, o, N, xf + m * K, w + n * K, b, K); break;
          case 2: f16_row_tile<2>(nr, o, N, xf + m * K, w + n * K, b, K); break;
          default: f16_row_tile<1>(nr, o, N, xf + m * K, w + n * K, b, K); break;
        }
      }
  }
}

// The GGUF row types: each input row quantized to the weight type's vec-dot
// type once, then every output its own dot product (one fixed order per
// output, whatever the batch).
void ggml_rows_forward(const CpuCtx& ctx, float* out, const float* inp, const WeightMatrix& W, const float* bias,
                       int64_t M) {
  const int64_t N = W.rows(), K = W.cols();
  const GgmlType wt = ggml_type_of(W.type()), xt = ggml_vec_dot_type(wt);
  const size_t xb = ggml_row_bytes(xt, K), rb = W.row_bytes();
  thread_local std::vector<uint8_t> xq;
  xq.resize(static_cast<size_t>(M) * xb);
  uint8_t* x = xq.data();  // this thread's buffer (a worker naming it would get its own)
  parallel_for(ctx, M, 1, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) ggml_quantize_activations(xt, inp + m * K, x + m * xb, K);
  });
  // Panels of about 64 KiB of weights (decoded once for the M rows).
  parallel_for(ctx, N, std::max<int64_t>(1, (64 << 10) / static_cast<int64_t>(rb)), [&](int64_t n0, int64_t n1) {
    ggml_rows_panel(wt, W.data(), rb, n0, n1, K, x, xb, M, out, N, bias);
  });
}

}  // namespace

void weight_linear_forward(const CpuCtx& ctx, float* out, const float* inp, const WeightMatrix& W, const float* bias,
                           int64_t M) {
  const int64_t N = W.rows(), K = W.cols();
  if (M <= 0 || N <= 0) return;
  switch (W.type()) {
    case WeightType::f32:
      rowwise_linear_forward(ctx, out, inp, reinterpret_cast<const float*>(W.data()), bias, M, K, N);
      return;
    case WeightType::bf16: {
      const uint16_t* w = reinterpret_cast<const uint16_t*>(W.data());
      rowwise::over_panels(ctx, N, W.row_bytes(), [&](int64_t n0, int64_t n1) {
        rowwise::panel<rowwise::Bf16Rows>(out, N, inp, w, bias, M, K, n0, n1);
      });
      return;
    }
    case WeightType::f16: {
      // llama.cpp's vec-dot type for f16 is f16: the inputs rounded to it
      // first, then each row's products (f16_rows_panel).
      // Decoding reads the inputs in f16 (half the bytes), batches as their
      // fp32 values: only the one f16_rows_panel reads is made.
      thread_local std::vector<uint16_t> xh;
      thread_local std::vector<float> xf;
      xh.resize(static_cast<size_t>(M * K));
      if (M > kF16StreamRows) xf.resize(static_cast<size_t>(M * K));
      uint16_t* h = xh.data();  // this thread's buffers (a worker naming them would get its own)
      float* f = xf.data();
      parallel_for(ctx, M * K, 1 << 14, [&](int64_t i0, int64_t i1) {
        f32_to_f16_bulk(inp + i0, h + i0, i1 - i0);
        if (M > kF16StreamRows) f16_to_f32_bulk(h + i0, f + i0, i1 - i0);
      });
      const uint16_t* w = reinterpret_cast<const uint16_t*>(W.data());
      rowwise::over_panels(ctx, N, W.row_bytes(), [&](int64_t n0, int64_t n1) {
        f16_rows_panel(out, N, h, f, w, bias, M, K, n0, n1);
      });
      return;
    }
    case WeightType::q8_0:
    case WeightType::q4_0: {
      thread_local std::vector<int8_t> xq;
      thread_local std::vector<float> xd;
      thread_local std::vector<int32_t> xc;
      xq.resize(static_cast<size_t>(M * K));
      xd.resize(static_cast<size_t>(M * (K / kQuantBlock)));
      xc.resize(static_cast<size_t>(M * (K / kQuantBlock)));
      const int32_t offset = W.type() == WeightType::q8_0 ? 128 : 8;
      const QuantizeFn quantize = isa().quantize;
      // This thread's buffers (a worker naming them would get its own).
      int8_t* q = xq.data();
      float* d = xd.data();
      int32_t* c = xc.data();
      parallel_for(ctx, M * (K / kQuantBlock), 256, [&](int64_t b0, int64_t b1) {
        quantize(inp + b0 * kQuantBlock, b1 - b0, offset, q + b0 * kQuantBlock, d + b0, c + b0);
      });
      const quant_detail::PanelArgs a{out,
                                      N,
                                      xq.data(),
                                      xd.data(),
                                      xc.data(),
                                      M,
                                      K,
                                      W.data(),
                                      reinterpret_cast<const uint16_t*>(W.data() + W.scales_offset()),
                                      W.type(),
                                      bias};
      const PanelFn fn = isa().fn;
      // Panels of whole tiles, about 256 KiB of weights (L2-resident while
      // the input rows pass over them), shared out dynamically; a few rows
      // (decoding) read the weights once: an equal share to each thread,
      // one sequential stream each.
      const int64_t tiles = (N + kTileRows - 1) / kTileRows;
      const int64_t panel = std::max<int64_t>(1, (256 << 10) / static_cast<int64_t>(W.row_bytes() * kTileRows));
      const int64_t share = (tiles + ctx.num_threads - 1) / std::max(ctx.num_threads, 1);
      const int64_t per = M <= 4 ? share : std::clamp<int64_t>(share, 1, panel);
      parallel_for_dynamic(ctx, (tiles + per - 1) / per,
                           [&](int64_t c) { fn(a, c * per, std::min(tiles, (c + 1) * per)); });
      return;
    }
    default: ggml_rows_forward(ctx, out, inp, W, bias, M);
  }
}

}  // namespace claw::kernels
