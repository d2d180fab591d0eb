// Internal to quant.cc: one panel of a quantized linear layer, the part each
// instruction set implements (quant_panel_x86.inc, compiled once per ISA,
// and the portable reference in quant.cc). The activations arrive quantized
// (blocks of 32 int8 with an fp32 scale, row-local, so batch-invariant).
#pragma once

#include <cstddef>
#include <cstdint>

#include "claw/kernels/cpu/quant.h"

namespace claw::kernels::quant_detail {

struct PanelArgs {
  float* out;          // [M, N], row stride N
  int64_t N;
  const int8_t* xq;    // [M, K]
  const float* xd;     // [M, K / 32]
  const int32_t* xc;   // [M, K / 32, 8]: -offset x the lane sums of xq (quant.h)
  int64_t M, K;
  const uint8_t* w;    // N rows of row_bytes, the kernel layout
  size_t row_bytes;
  WeightType type;     // q8_0 or q4_0
  const float* bias;   // [N] or null
};

// Computes out[:, n0:n1].
using PanelFn = void (*)(const PanelArgs& a, int64_t n0, int64_t n1);

void panel_generic(const PanelArgs& a, int64_t n0, int64_t n1);
#if defined(__x86_64__)
void panel_avx2(const PanelArgs& a, int64_t n0, int64_t n1);
void panel_avx512_vnni(const PanelArgs& a, int64_t n0, int64_t n1);
#endif

// The 8 lanes of a (row, weight row) pair summed in the fixed order.
inline float sum_lanes(const float a[8]) { return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7])); }

}  // namespace claw::kernels::quant_detail
