// Point-wise activations of the MLP.
//
// GELU, tanh approximation (Hendrycks & Gimpel 2016; GPT-2's "gelu_new",
// PyTorch's gelu(approximate="tanh")):
//   y = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   dy/dx = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3*0.044715 x^2)
//
// SwiGLU (Shazeer 2020; Llama's MLP): y = silu(gate) * up, silu(g) = g sigmoid(g)
//   dgate = dy * up * sigmoid(g) (1 + g (1 - sigmoid(g))),  dup = dy * silu(g)
//
// GeGLU (Shazeer 2020; Gemma's MLP, with the tanh GELU above):
//   y = gelu(gate) * up,  dgate = dy * up * gelu'(gate),  dup = dy * gelu(gate)
// (CPU only for now.)
//
// Shapes: all [n] element-wise. Gradient contract: activation grads
// overwrite. In place is allowed element-wise: y may alias x; dx may alias dy
// or x; dgate may alias gate and dup may alias up (each element is read
// before it is written). T is the storage type; the arithmetic is in
// acc_t<T> (core/storage.h), each output rounded to T once.
#pragma once

#include <cstdint>

#include "claw/core/parallel.h"

namespace claw::kernels {

template <typename T>
void gelu_forward(const CpuCtx& ctx, T* y, const T* x, int64_t n);
template <typename T>
void gelu_backward(const CpuCtx& ctx, T* dx, const T* dy, const T* x, int64_t n);

template <typename T>
void swiglu_forward(const CpuCtx& ctx, T* y, const T* gate, const T* up, int64_t n);
template <typename T>
void swiglu_backward(const CpuCtx& ctx, T* dgate, T* dup, const T* dy, const T* gate, const T* up, int64_t n);

template <typename T>
void geglu_forward(const CpuCtx& ctx, T* y, const T* gate, const T* up, int64_t n);
template <typename T>
void geglu_backward(const CpuCtx& ctx, T* dgate, T* dup, const T* dy, const T* gate, const T* up, int64_t n);

}  // namespace claw::kernels
