// Dropout with a counter-based mask: element i of a tensor is kept iff
// uniform(stream, index0 + i) >= p, where the stream is keyed by (seed,
// purpose) and index0 is the global index of the tensor's first element for
// this layer and micro-batch. No mask is stored: backward regenerates it, and
// any parallel layout that gives an element the same global index drops the
// same elements as the single-rank run.
//
//   y_i  = keep_i ? x_i / (1 - p) : 0
//   dx_i = keep_i ? dy_i / (1 - p) : 0
//
// Shapes: [n]. y may alias x; dx may alias dy. p in [0, 1); p == 0 copies.
// T is the storage type; the scaling is in acc_t<T> (core/storage.h).
#pragma once

#include <cstdint>

#include "claw/core/parallel.h"
#include "claw/core/philox.h"

namespace claw::kernels {

template <typename T>
void dropout_forward(const CpuCtx& ctx, T* y, const T* x, int64_t n, double p, const RandomStream& rng,
                     uint64_t index0);

template <typename T>
void dropout_backward(const CpuCtx& ctx, T* dx, const T* dy, int64_t n, double p, const RandomStream& rng,
                      uint64_t index0);

}  // namespace claw::kernels
