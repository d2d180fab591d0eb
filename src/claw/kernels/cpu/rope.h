// Rotary position embedding (Su et al. 2021), in the rotate-half convention
// of Hugging Face's Llama (`apply_rotary_pos_emb`), so that weights exported
// from claw load there unchanged:
//
//   half = D/2, inv_freq_i = theta^(-2i/D), angle(p, i) = p * inv_freq_i
//   y_i        = x_i cos(angle) - x_{i+half} sin(angle)      0 <= i < half
//   y_{i+half} = x_{i+half} cos(angle) + x_i sin(angle)
//
// The map is a rotation, so backward is the same map with sin negated.
// Partial rotary embeddings (rotary_dim R < D, Hugging Face's
// partial_rotary_factor): the first R dimensions of each row rotate as a
// head of R (half = R/2, inv_freq_i = theta^(-2i/R), tables [P, R/2]); the
// other D - R pass through.
// Applied in place to x [B, T, nh, D]; row (b, t) is at position
// p = positions[b * T + t] (positions [B, T]), or p = t when positions is
// null. Packed sequences restart positions at each document (Megatron's
// --reset-position-ids), so a document gets the rotation it would get alone.
// Tables cos/sin are [P, D/2], computed once (rope_table); positions are
// trusted to lie in [0, P) (the batch builder produces them). x is of the
// storage type T; the tables and the rotation are in acc_t<T> (fp32 for bf16
// and f16, core/storage.h).
#pragma once

#include <cstdint>

#include "claw/core/parallel.h"
#include "claw/core/storage.h"

namespace claw::kernels {

// cos[p, i], sin[p, i] for p < P, i < D/2. Frequencies are computed in fp32
// as Hugging Face does (inv_freq = 1 / theta^(arange(0, D, 2) / D)), the
// angle and its cos/sin in double, then rounded. (HF also forms the angle in
// fp32, which is off by up to half an ulp of p: 2.4e-4 rad at p = 4096.)
// T: float or double.
template <typename T>
void rope_table(T* cos, T* sin, int64_t P, int64_t D, double theta);
// The same tables from given inverse frequencies [D/2] (a scaled RoPE's,
// model/attention.h): cos[p, i] = cos(p inv_freq[i]), the angle in double.
template <typename T>
void rope_table(T* cos, T* sin, int64_t P, int64_t D, const float* inv_freq);
// Hugging Face's default inverse frequencies: 1 / theta^(2i / D) in fp32.
float rope_inv_freq(int64_t i, int64_t D, double theta);

// rotary_dim: R (0: D).
template <typename T>
void rope_forward(const CpuCtx& ctx, T* x, const acc_t<T>* cos, const acc_t<T>* sin, int64_t B, int64_t T_, int64_t nh,
                  int64_t D, const int32_t* positions = nullptr, int64_t rotary_dim = 0);

template <typename T>
void rope_backward(const CpuCtx& ctx, T* dx, const acc_t<T>* cos, const acc_t<T>* sin, int64_t B, int64_t T_, int64_t nh,
                   int64_t D, const int32_t* positions = nullptr, int64_t rotary_dim = 0);

}  // namespace claw::kernels
