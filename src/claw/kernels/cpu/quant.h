// Weights in low precision for inference, and the batch-invariant linear
// layer over them (rowwise_linear.h's contract: each output element is
// computed in one fixed order whatever the batch, the row's place in it and
// the thread count).
//
// Formats (the element layouts are GGUF's, so exported files are these bytes):
//   f32    4 bytes an element
//   bf16   2 bytes: the top half of the f32
//   q8_0   blocks of 32: an f16 scale d and 32 int8, x = d q
//          (d = max|x| / 127);                              34 bytes a block
//   q4_0   blocks of 32: an f16 scale d and 16 bytes whose low nibbles are
//          elements 0..15 and high nibbles 16..31, x = d (q - 8)
//          (d = -m / 8 for the element m of largest magnitude); 18 bytes
//
// The linear layer y = x W^T + b:
//   f32, bf16   fixed_order_dot.h's order on fp32 (bf16 widened on load);
//   f16         the inputs first rounded to f16 (llama.cpp's vec-dot type
//               for f16 weights), then 32 fp32 lanes an output (quant.cc:
//               dot_lanes32), folded as fixed_order_dot.h folds its 16;
//   q8_0, q4_0  each input row is quantized to blocks of 32 int8 with a
//               scale dx, as llama.cpp does (ggml_quants.h: q8_0, dx =
//               max|x| / 127 rounded to f16); per block b each output takes
//               the exact integer dot product p_b of the block's quants, and
//               accumulates acc = fma(float(p_b), dw_b * dx_b, acc), block
//               after block from 0; the bias is added last.
//
// The kernel layout (a WeightMatrix's own; from_bytes() and gguf_bytes()
// speak GGUF's): rows in tiles of 32 (the last padded with zero rows), a
// tile's blocks in order, each holding its four groups of 8 rows side by
// side (so that decoding reads a tile as one sequential stream), each group
// block as 8 rows x 32 quants interleaved four bytes at a time, so that one
// 32-byte load holds four consecutive elements of each of the 8 rows and a
// dot-product instruction over it leaves in lane r the partial sum of row r:
//   q8_0  byte 32 s + 4 r + e = q[r][4 s + e] + 128            256 bytes
//   q4_0  byte 32 s + 4 r + e = q[r][4 s + e] | q[r][16 + 4 s + e] << 4
//         (the unsigned nibbles, as GGUF stores them)            128 bytes
// and, in an array of their own after all the quants, in the same order,
// each group block's 8 f16 scales. q8_0 quants are biased by 128: VNNI
// multiplies an unsigned byte by a signed one, so the weights go in
// unsigned as they are and the input as it is, and the integer accumulator
// starts at -128 sum(x block) (q4_0's nibbles are unsigned already: -8 sum).
//
// The integer sums are exact and the float operations the same on every
// path, so the AVX-512 VNNI, AVX2 and portable kernels give bitwise equal
// results; the fastest the CPU has is chosen at run time (CLAW_QUANT_ISA=
// generic|avx2|avx512_vnni forces one, for tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "claw/core/parallel.h"
#include "claw/kernels/cpu/ggml_quants.h"

namespace claw::kernels {

// f32, bf16 and claw's q8_0/q4_0 kernel layout (above); the others are
// held as GGUF's rows, as read from a file, and multiplied as llama.cpp
// does (ggml_quants.h: activations in the type's vec-dot type; f16 by its
// own fp32 products, above).
enum class WeightType : uint8_t {
  f32, bf16, q8_0, q4_0, f16, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs
};
GgmlType ggml_type_of(WeightType t);
std::optional<WeightType> weight_type_of(GgmlType t);  // nullopt: no matrix type (q8_1, q8_K)
// Whether t is held as GGUF rows (not f32, bf16, q8_0, q4_0).
constexpr bool is_ggml_rows(WeightType t) { return t >= WeightType::f16; }
// Whether claw converts fp32 weights to t itself (parse_weight_type's
// types: q8_0 and q4_0 as its own kernels' blocks, the others as
// llama-quantize makes them, ggml_quantize.cc): every matrix type.
constexpr bool weight_type_quantizable(WeightType t) { return t <= WeightType::iq4_xs; }

constexpr int64_t kQuantBlock = 32;

struct BlockQ8_0 {
  uint16_t d;  // f16
  int8_t qs[32];
};
struct BlockQ4_0 {
  uint16_t d;  // f16
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18, "GGUF block layouts");

std::string_view weight_type_name(WeightType t);
// The types a model can be converted to when it loads (--dtype) or is
// exported in (weight_type_quantizable), by name, case-insensitive ("q4_k"
// or "Q4_K"); nullopt otherwise.
std::optional<WeightType> parse_weight_type(std::string_view s);
constexpr std::string_view kWeightTypeChoices =
    "f32, bf16, f16, q8_0, q6_k, q5_k, q5_1, q5_0, q4_k, q4_1, q4_0, iq4_nl, iq4_xs, q3_k, q2_k";

// Whether rows of K elements can be held in type t (whole blocks of 32 or 256).
bool weight_type_fits(WeightType t, int64_t K);
// Bytes of one row of K elements.
size_t weight_row_bytes(WeightType t, int64_t K);

// rows x K floats <-> rows of type t (weight_row_bytes(t, K) each).
void quantize_rows(WeightType t, const float* in, void* out, int64_t rows, int64_t K);
void dequantize_rows(WeightType t, const void* in, float* out, int64_t rows, int64_t K);

// Byte storage on 64-byte (cache line) boundaries, for the kernels' loads.
template <class T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(size_t n) {
    void* p = std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64);
    if (!p) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const { return true; }
  template <class U>
  bool operator!=(const CacheLineAllocator<U>&) const { return false; }
};

// A [rows, cols] matrix in one WeightType: f32, bf16 and the GGUF row types
// rows contiguous, q8_0 and q4_0 in the kernel layout (above).
class WeightMatrix {
 public:
  WeightMatrix() = default;
  // Throws claw::Error when cols does not fit the type.
  static WeightMatrix quantize(const CpuCtx& ctx, WeightType t, const float* w, int64_t rows, int64_t cols);
  // Takes rows already in type t, in GGUF's layout (weight_row_bytes(t,
  // cols) * rows bytes).
  static WeightMatrix from_bytes(WeightType t, int64_t rows, int64_t cols, std::vector<uint8_t> bytes);
  // The rows in GGUF's layout.
  std::vector<uint8_t> gguf_bytes() const;

  bool empty() const { return rows_ == 0; }
  WeightType type() const { return type_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  // Bytes of one row in GGUF's layout.
  size_t row_bytes() const { return weight_row_bytes(type_, cols_); }
  // Bytes held (the kernel layout, with its padding rows).
  size_t bytes() const { return data_.size(); }
  // The kernel layout: f32/bf16 rows; quants, then scales (offset
  // scales_offset()).
  const uint8_t* data() const { return data_.data(); }
  size_t scales_offset() const;
  void dequantize(float* out) const;

 private:
  // Rows [r0, r1) in GGUF's layout (gguf: row r0) into the kernel layout;
  // whole tiles of rows but the last.
  void pack(const uint8_t* gguf, int64_t r0, int64_t r1);
  void allocate(WeightType t, int64_t rows, int64_t cols);
  WeightType type_ = WeightType::f32;
  int64_t rows_ = 0, cols_ = 0;
  std::vector<uint8_t, CacheLineAllocator<uint8_t>> data_;
};

// out[M, N] = inp[M, K] @ W^T + bias (N = W.rows(), K = W.cols()), batch-invariant.
void weight_linear_forward(const CpuCtx& ctx, float* out, const float* inp, const WeightMatrix& W, const float* bias,
                           int64_t M);

// The integer-dot kernel in use: "avx512_vnni", "avx2" or "generic".
std::string quant_kernel_isa();

}  // namespace claw::kernels
