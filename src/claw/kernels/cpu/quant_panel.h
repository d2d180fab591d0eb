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

struct PanelArgs {
  float* out;          // [M, N], row stride N
  int64_t N;
  const int8_t* xq;    // [M, K]
  const float* xd;     // [M, K / 32]
  const int32_t* xc;   // [M, K / 32]: -offset x the block's sum of xq (quant.h)
  int64_t M, K;
  const uint8_t* wq;   // [ceil(N / 8), K / 32, group_block_bytes]: the quants
  const uint16_t* ws;  // [ceil(N / 8), K / 32, 8]: the f16 scales
  WeightType type;     // q8_0 or q4_0
  const float* bias;   // [N] or null
};

// Computes out[:, 8 g0 : min(N, 8 g1)] (groups [g0, g1)).
using PanelFn = void (*)(const PanelArgs& a, int64_t g0, int64_t g1);

void panel_generic(const PanelArgs& a, int64_t g0, int64_t g1);
#if defined(__x86_64__)
void panel_avx2(const PanelArgs& a, int64_t g0, int64_t g1);
void panel_avx512_vnni(const PanelArgs& a, int64_t g0, int64_t g1);
#endif

}  // namespace claw::kernels::quant_detail
