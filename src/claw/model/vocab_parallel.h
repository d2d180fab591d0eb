// Vocabulary-parallel word embedding and cross-entropy: each rank of a
// tensor-parallel group holds Vp / TP consecutive rows of the padded
// vocabulary (the embedding's rows, the output layer's rows, and so the
// columns of the logits), and the full [N, Vp] logits never exist on any rank.
// The counterpart of Megatron-Core's VocabParallelEmbedding and
// vocab_parallel_cross_entropy (megatron/core/tensor_parallel/layers.py,
// cross_entropy.py); with a group of size 1 every function here equals the
// single-rank kernel (kernels/cpu/embedding.h, cross_entropy.h).
//
// Vocabulary: V real ids, padded to Vp (a multiple of TP x
// --make-vocab-size-divisible-by, tp_padded_vocab_size). Rank r holds the
// global ids [v0, v1) = [r Vp/TP, (r+1) Vp/TP); of these, [v0, min(v1, V)) are
// real and the rest padding (only on the last ranks). Targets and tokens are
// global ids.
//
// Embedding (word embeddings only; replicated position embeddings are added
// by the caller after the reduction):
//   forward:  out[n, :] = sum over ranks of (v0 <= tokens[n] < v1 ? W_local[tokens[n] - v0, :] : 0)
//             (one all-reduce of [N, C] over the group; each row has exactly
//             one non-zero term, so the result equals the single-rank lookup bitwise)
//   backward: dW_local[tokens[n] - v0, :] += dout[n, :] for the tokens this rank holds.
//             dout is the full [N, C] gradient, already the same on every rank
//             (the all-reduce's adjoint is the identity), so no communication.
// Sequence parallelism (Megatron's reduce_scatter_embeddings): the forward's
// all-reduce becomes a reduce-scatter along the tokens, so rank r receives
// only its rows [r N/TP, (r+1) N/TP) of the sum -- the contiguous row split of
// model/tp_mappings.h (SeqShard); N must be divisible by TP. The backward's
// input is then that piece of the gradient, all-gathered (the adjoint of the
// reduce-scatter) before the local scatter-add.
//
// Cross-entropy over the local logits [N, Vl] (Vl = Vp / TP; column j is the
// global id v0 + j), with the single-rank kernel's padding rule: columns with
// global id >= V take no part in the softmax and get gradient 0.
//   M_n      = max over real ids of logits[n, :]                  all-reduce (max)
//   S_n      = sum over real ids of exp(logits[n, :] - M_n)        all-reduce (sum)
//   lse_n    = M_n + log S_n
//   losses_n = lse_n - logits[n, targets[n]]                      (targets[n] < 0: ignored, loss 0)
//   dlogits[n, j] = dloss_scale * (exp(logits[n, j] - lse_n) - [v0 + j == targets[n]])   real ids
//   dlogits[n, j] = 0                                             padding ids, ignored rows
// Two collectives per call whatever N, each over all N rows: the target's
// logit travels in the max all-reduce (the owning rank contributes the value,
// the others -inf), not in a third all-reduce (sum) as in Megatron; both give
// the owner's value exactly. The backward needs no communication: lse is
// global. Callers that hold logits in chunks of rows (the output layer) call
// forward and backward once per chunk.
//
// Megatron includes the padding columns in the softmax (their rows are
// trained like any other); claw excludes them, as its single-rank kernel does,
// so that every TP size gives the loss of TP = 1.
//
// Ownership and threads: the functions are collective over `tp` (every rank
// calls them with the same N and the same targets/tokens); rows are split
// over ctx's threads, communication runs on the calling thread. Inputs are
// checked (CLAW_CHECK) before any collective, identically on every rank, so a
// bad target fails on all ranks instead of leaving the others waiting.
#pragma once

#include <algorithm>
#include <cstdint>

#include "claw/comm/group.h"
#include "claw/core/parallel.h"

namespace claw::model {

// Megatron's _vocab_size_with_padding: V rounded up to a multiple of
// divisible_by x tp, so each rank's slice is itself a multiple of divisible_by.
int64_t tp_padded_vocab_size(int64_t V, int64_t divisible_by, int tp);

// One rank's slice of the padded vocabulary.
struct VocabShard {
  int64_t V = 0;      // real vocabulary size
  int64_t Vp = 0;     // padded size (divisible by the group size)
  int64_t begin = 0;  // v0: first global id held
  int64_t end = 0;    // v1: one past the last

  // Rank `rank` of `size` (Megatron's VocabUtility.vocab_range_from_global_vocab_size).
  static VocabShard of(int64_t V, int64_t Vp, int rank, int size);
  static VocabShard of(int64_t V, int64_t Vp, const comm::Group& g) { return of(V, Vp, g.rank(), g.size()); }

  int64_t rows() const { return end - begin; }  // Vl: local rows / logits columns
  // Local rows that are real ids: [0, real()) (the rest is padding).
  int64_t real() const { return std::clamp<int64_t>(V - begin, 0, rows()); }
  bool holds(int64_t id) const { return id >= begin && id < end; }
};

// out [N, C] (the same on every rank after the call); tokens [N]; w_local [Vl, C].
template <typename T>
void vocab_parallel_embedding_forward(const CpuCtx& ctx, comm::Group& tp, T* out, const int32_t* tokens,
                                      const T* w_local, const VocabShard& shard, int64_t N, int64_t C);

// dw_local [Vl, C] accumulates (null: frozen, nothing to do); dout [N, C].
// Local: no communication.
// Threads split the channels, so each row's sum is taken in token order
// (the single-rank kernel's order: its rows are bitwise the same).
template <typename T>
void vocab_parallel_embedding_backward(const CpuCtx& ctx, T* dw_local, const T* dout, const int32_t* tokens,
                                       const VocabShard& shard, int64_t N, int64_t C);

// Sequence-parallel forms. out_piece [N/TP, C]: this rank's rows of the sum;
// work [N, C] holds the local lookup (out_piece may equal work: the piece then
// lands at its start).
template <typename T>
void vocab_parallel_embedding_forward_sp(const CpuCtx& ctx, comm::Group& tp, T* out_piece, T* work,
                                         const int32_t* tokens, const T* w_local, const VocabShard& shard, int64_t N,
                                         int64_t C);
// dout_piece [N/TP, C]: the gradient of this rank's rows; work [N, C] receives
// the gathered gradient (dout_piece may already sit at work + r N/TP C: MPI's
// in-place all-gather, no copy). dw_local accumulates (null: frozen; `work`
// still receives the whole gradient). Collective over tp.
template <typename T>
void vocab_parallel_embedding_backward_sp(const CpuCtx& ctx, comm::Group& tp, T* dw_local, T* work,
                                          const T* dout_piece, const int32_t* tokens, const VocabShard& shard,
                                          int64_t N, int64_t C);

// losses, lse [N] (lse saved for the backward); logits [N, Vl]; targets [N]
// (global ids below V, or < 0 to ignore the row). Collective over tp.
template <typename T>
void vocab_parallel_cross_entropy_forward(const CpuCtx& ctx, comm::Group& tp, T* losses, T* lse, const T* logits,
                                          const int32_t* targets, const VocabShard& shard, int64_t N);

// dlogits [N, Vl] (may alias logits: the gradient overwrites them in place);
// lse from the forward. dloss_scale = d total_loss / d losses_n. Local.
template <typename T>
void vocab_parallel_cross_entropy_backward(const CpuCtx& ctx, T* dlogits, const T* logits, const T* lse,
                                           const int32_t* targets, T dloss_scale, const VocabShard& shard,
                                           int64_t N);

}  // namespace claw::model
