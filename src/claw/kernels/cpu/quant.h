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
//   q8_0, q4_0  each input row is quantized to blocks of 32 int8 with an fp32
//               scale (d = max|x| / 127), and each pair of blocks gives 8
//               exact integer lane sums (lane l: elements 4l..4l+3), which
//               are converted to fp32 and accumulated, with the product of
//               the two scales, by one fused multiply-add per lane, block
//               after block; the 8 lanes are then added pairwise
//               ((0+4)+(2+6)) + ((1+5)+(3+7)), and the bias last.
// In a WeightMatrix, q8_0 quants are held biased by 128 (the byte q + 128):
// VNNI multiplies an unsigned byte by a signed one, so the weights go in
// unsigned as they are and the input as it is, and the accumulator starts
// at -128 sum(x) per lane (q4_0's nibbles q are unsigned already: -8
// sum(x)); these lane sums of the input are computed once per input block.
// from_bytes() and bytes() speak GGUF's layout.
//
// The integer sums are exact and the float operations the same on every
// path, so the AVX-512 VNNI, AVX2 and portable kernels give bitwise equal
// results; the fastest the CPU has is chosen at run time (CLAW_QUANT_ISA=
// generic|avx2|avx512_vnni forces one, for tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "claw/core/parallel.h"

namespace claw::kernels {

enum class WeightType : uint8_t { f32, bf16, q8_0, q4_0 };

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
// "f32", "bf16", "q8_0", "q4_0" (case-insensitive); nullopt otherwise.
std::optional<WeightType> parse_weight_type(std::string_view s);
constexpr std::string_view kWeightTypeChoices = "f32, bf16, q8_0, q4_0";

// Whether rows of K elements can be held in type t (blocks: K % 32 == 0).
bool weight_type_fits(WeightType t, int64_t K);
// Bytes of one row of K elements.
size_t weight_row_bytes(WeightType t, int64_t K);

// rows x K floats <-> rows of type t (weight_row_bytes(t, K) each).
void quantize_rows(WeightType t, const float* in, void* out, int64_t rows, int64_t K);
void dequantize_rows(WeightType t, const void* in, float* out, int64_t rows, int64_t K);

// A [rows, cols] matrix in one WeightType, rows contiguous.
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
  size_t row_bytes() const { return weight_row_bytes(type_, cols_); }
  size_t bytes() const { return data_.size(); }
  // The kernel layout (q8_0 biased, see above).
  const uint8_t* data() const { return data_.data(); }
  const uint8_t* row(int64_t i) const { return data_.data() + static_cast<size_t>(i) * row_bytes(); }
  void dequantize(float* out) const;

 private:
  // GGUF layout <-> kernel layout (flips the q8_0 quants' top bit; its own inverse).
  void flip_q8_bias();
  WeightType type_ = WeightType::f32;
  int64_t rows_ = 0, cols_ = 0;
  std::vector<uint8_t> data_;
};

// out[M, N] = inp[M, K] @ W^T + bias (N = W.rows(), K = W.cols()), batch-invariant.
void weight_linear_forward(const CpuCtx& ctx, float* out, const float* inp, const WeightMatrix& W, const float* bias,
                           int64_t M);

// The integer-dot kernel in use: "avx512_vnni", "avx2" or "generic".
std::string quant_kernel_isa();

}  // namespace claw::kernels
