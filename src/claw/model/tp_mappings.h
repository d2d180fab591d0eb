// The conjugate mappings of tensor and sequence parallelism (Megatron-LM,
// Shoeybi et al. 2019, "f" and "g"; Korthikanti et al. 2022, "g" and "g-bar"),
// as Megatron-Core's tensor_parallel/mappings.py defines them. Each is a
// forward and its adjoint, the backward:
//
//   mapping                forward                      backward
//   copy_to_tp             identity                     all-reduce (sum)
//   reduce_from_tp         all-reduce (sum)             identity
//   scatter_to_sp          keep this rank's rows        all-gather
//   gather_from_sp         all-gather the rows          reduce-scatter (sum)
//   reduce_scatter_to_sp   reduce-scatter (sum)         all-gather
//
// Activations are row-major float [N, C], N = B*T tokens, token n = b*T + t
// (the model's layout). `tp` is the tensor-parallel group; with one rank
// every mapping is the identity (a copy when out != in, nothing when equal).
// Each call is at most one collective plus at most one memcpy/memmove.
//
// Spaces. An activation in a tensor-parallel region is either replicated
// (the same values on every TP rank: the input of copy_to_tp, the output of
// reduce_from_tp, the full input of scatter_to_sp) or a per-rank part (a
// partial sum, or a sequence piece). The backward is the adjoint with
// replicated spaces counted once and per-rank spaces summed over the ranks:
//   sum_r <f(x)_r, y_r> = sum_r <x_r, f*(y)_r>.
// gather_from_sp's output is a per-rank space: what follows it (a
// column-parallel linear) gives each rank a different partial gradient, so
// the backward reduce-scatters (Megatron's tensor_parallel_output_grad=True).
// Where what follows a gather is replicated instead, the gradient is already
// whole on every rank and the backward is a plain split:
// scatter_to_sp_forward(dy -> dx).
//
// Sequence split. Megatron splits the first dimension of [s, b, h]
// (_split_along_first_dim / _gather_along_first_dim /
// _reduce_scatter_along_first_dim): rank r holds positions
// [r*s/TP, (r+1)*s/TP) of every sequence, which is contiguous in its
// sequence-major memory. claw stores [b, s, h]; the same assignment would be
// B strided blocks per rank and need a permutation through an N x C scratch
// buffer around every all-gather and reduce-scatter. claw instead gives rank
// r the contiguous rows
//   [r*N/TP, (r+1)*N/TP)      (global token index = r*N/TP + local row),
// so that each collective reads and writes the activation buffers directly.
// The regions that run on 1/TP of the tokens (norms, dropout, residual adds,
// bias adds) are per-token, so which tokens a rank holds does not change
// them; dropout keys its counters by the global token index above, so masks
// do not depend on TP. With T divisible by TP (required, as Megatron requires
// --seq-length divisible by --tensor-model-parallel-size under
// --sequence-parallel) a rank's rows are B whole blocks of T/TP consecutive
// positions — the same granularity as Megatron's split, assigned
// sequence-major instead of position-major — and with B = 1 the two splits
// are identical.
//
// Aliasing: out may equal in (exactly; no other overlap). The all-gathers also
// take in == out + rank*N/TP*C (this rank's piece already in place: MPI's
// in-place all-gather, no copy). Shapes are this call's B, T, C; counts stay
// below 2^31 elements per rank (MPI's int counts; the backend checks).
//
// Blocking: each returns when its collective is complete, with the group's
// timeout. Every rank of `tp` must call the same mapping with the same shape.
#pragma once

#include <cstdint>

#include "claw/comm/group.h"

namespace claw::model {

// Throws claw::Error naming --seq-length and --tensor-model-parallel-size
// unless T is a positive multiple of tp_size. Call it when validating the
// config; the sequence-parallel mappings call it too.
void check_sequence_split(int64_t T, int tp_size);

// The rows of the [B*T, C] activation that a rank holds in a
// sequence-parallel region.
struct SeqShard {
  int64_t rows = 0;   // N / TP
  int64_t first = 0;  // global token index of local row 0: rank * rows
};
SeqShard seq_shard(int64_t B, int64_t T, int tp_size, int tp_rank);  // checks as check_sequence_split

// out, in: [n] (any shape; n elements).
void copy_to_tp_forward(comm::Group& tp, float* out, const float* in, int64_t n);
void copy_to_tp_backward(comm::Group& tp, float* din, const float* dout, int64_t n);
void reduce_from_tp_forward(comm::Group& tp, float* out, const float* in, int64_t n);
void reduce_from_tp_backward(comm::Group& tp, float* din, const float* dout, int64_t n);

// Full: [B*T, C]; piece: [B*T/TP, C] (seq_shard's rows).
// scatter_to_sp:        in full (replicated)  -> out piece;  din full   <- dout piece
void scatter_to_sp_forward(comm::Group& tp, float* out, const float* in, int64_t B, int64_t T, int64_t C);
void scatter_to_sp_backward(comm::Group& tp, float* din, const float* dout, int64_t B, int64_t T, int64_t C);
// gather_from_sp:       in piece              -> out full;   din piece  <- dout full (per-rank partial)
void gather_from_sp_forward(comm::Group& tp, float* out, const float* in, int64_t B, int64_t T, int64_t C);
void gather_from_sp_backward(comm::Group& tp, float* din, const float* dout, int64_t B, int64_t T, int64_t C);
// reduce_scatter_to_sp: in full (partial sum) -> out piece;  din full   <- dout piece
void reduce_scatter_to_sp_forward(comm::Group& tp, float* out, const float* in, int64_t B, int64_t T, int64_t C);
void reduce_scatter_to_sp_backward(comm::Group& tp, float* din, const float* dout, int64_t B, int64_t T,
                                   int64_t C);

}  // namespace claw::model
