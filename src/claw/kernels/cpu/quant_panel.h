// Internal to quant.cc: one panel of a quantized linear layer, the part each
// instruction set implements (quant_panel_x86.inc, compiled once per ISA,
// and the portable reference in quant.cc). The activations arrive quantized
// (blocks of 32 int8 with an fp32 scale, row-local, so batch-invariant); the
// weights in the kernel layout quant.h describes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "claw/kernels/cpu/quant.h"

namespace claw::kernels::quant_detail {

// Rows interleaved in a group of the kernel layout: one 256-bit register of
// int32 lanes holds one block's dot product for each of them.
constexpr int64_t kGroupRows = 8;

// Bytes of one block of a group's quants (8 rows x 32 elements).
constexpr size_t group_block_bytes(WeightType t) { return t == WeightType::q8_0 ? 256 : 128; }

// Groups stored block by block together (a tile of 32 rows): a decoding
// step reads each tile as one sequential stream.
constexpr int64_t kTileGroups = 4;
constexpr int64_t kTileRows = kTileGroups * kGroupRows;

// Where block b of group g (of blocks nb a row) is, in units of one group's
// block: its quants at that times group_block_bytes, its 8 scales at that
// times 8.
constexpr int64_t group_block_index(int64_t g, int64_t b, int64_t nb) {
  return ((g / kTileGroups) * nb + b) * kTileGroups + g % kTileGroups;
}

// Group blocks of a [rows, cols] matrix (the last tile padded).
constexpr int64_t group_blocks(int64_t rows, int64_t cols) {
  return (rows + kTileRows - 1) / kTileRows * kTileGroups * (cols / kQuantBlock);
}

// The byte of a group block that holds element k of row `lane` (q8_0), or
// elements k and k + 16 (q4_0, k < 16: low and high nibble).
constexpr size_t lane_byte(int64_t lane, int k) { return 32 * (k / 4) + 4 * lane + k % 4; }

struct PanelArgs {
  float* out;          // [M, N], row stride N
  int64_t N;
  const int8_t* xq;    // [M, K]
  const float* xd;     // [M, K / 32]
  const int32_t* xc;   // [M, K / 32]: -offset x the block's sum of xq (quant.h)
  int64_t M, K;
  const uint8_t* wq;   // [ceil(N / 32), K / 32, 4, group_block_bytes]: the quants
  const uint16_t* ws;  // [ceil(N / 32), K / 32, 4, 8]: the f16 scales
  WeightType type;     // q8_0 or q4_0
  const float* bias;   // [N] or null
};

// Computes out[:, 32 t0 : min(N, 32 t1)] (tiles of rows [t0, t1)).
using PanelFn = void (*)(const PanelArgs& a, int64_t t0, int64_t t1);
void panel_generic(const PanelArgs& a, int64_t t0, int64_t t1);

// The activations' quantization, `blocks` blocks of 32 of x, each on its own
// (so row-local), as llama.cpp's x86 backend quantizes to q8_0: q = x (127 /
// max|x|) rounded half to even, d = max|x| / 127 rounded to f16 (held as the
// fp32 of that f16), and xc = -offset x the sum of q (offset: 128 for q8_0's
// kernel layout, 8 for q4_0's nibbles). Every version gives the same bytes.
using QuantizeFn = void (*)(const float* x, int64_t blocks, int32_t offset, int8_t* xq, float* xd, int32_t* xc);
void quantize_generic(const float* x, int64_t blocks, int32_t offset, int8_t* xq, float* xd, int32_t* xc);

#if defined(__x86_64__)
void panel_avx2(const PanelArgs& a, int64_t t0, int64_t t1);
void panel_avx512_vnni(const PanelArgs& a, int64_t t0, int64_t t1);
void quantize_avx2(const float* x, int64_t blocks, int32_t offset, int8_t* xq, float* xd, int32_t* xc);
#endif

}  // namespace claw::kernels::quant_detail
