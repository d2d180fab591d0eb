// Tensor (+ sequence) parallelism as the layers see it (Megatron-LM, Shoeybi
// et al. 2019; sequence parallelism, Korthikanti et al. 2022).
//
// TpDims is the pure part (sizes only), used by the layers' constructors and
// by the activation plan; TensorParallel adds this rank's groups. With one
// rank every mapping is the identity and the layers are the plain
// single-device layers: there is one code path.
//
// What each rank holds (t = TP size, r = TP rank):
//   attention   heads [r H/t, (r+1) H/t); KV groups: [r G/t, (r+1) G/t) when
//               t <= G, else the one group r / (t/G), replicated on the t/G
//               ranks whose query heads use it (G must divide t or t divide G)
//   MLP         columns [r F/t, (r+1) F/t) of fc (gate and up alike) and the
//               same rows of proj's input dimension
//   vocabulary  rows [r Vp/t, (r+1) Vp/t) of the word embeddings and the
//               output layer, Vp padded to a multiple of
//               --make-vocab-size-divisible-by x t (Megatron's rule)
//   the rest    replicated (norms, row-parallel biases, position embeddings)
//
// The residual stream: [N, C] on every rank, or with --sequence-parallel
// the N/t rows [r N/t, (r+1) N/t) (model/tp_mappings.h's SeqShard); norms,
// dropout and residual adds then run on those rows only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "claw/comm/group.h"
#include "claw/comm/parallel_state.h"
#include "claw/model/config.h"

namespace claw::model {

struct TpDims {
  int size = 1;
  bool sequence_parallel = false;
  int ep = 1;  // expert-parallel size: a MoE layer's experts receive up to ep x its own dispatched rows

  bool sp() const { return sequence_parallel && size > 1; }
  // Rows of the residual stream held for N tokens.
  int64_t rows(int64_t N) const { return sp() ? N / size : N; }
  int64_t heads(const ModelConfig& c) const { return c.num_attention_heads / size; }
  int64_t kv_groups(const ModelConfig& c) const { return c.kv_heads() >= size ? c.kv_heads() / size : 1; }
  // Ranks holding each KV group: 1, or t / G when groups are replicated.
  int kv_replicas(const ModelConfig& c) const {
    return c.kv_heads() >= size ? 1 : size / static_cast<int>(c.kv_heads());
  }
  // The KV caches' heads: kv_groups, or MLA's one latent per token (whole on every rank).
  int64_t cache_groups(const ModelConfig& c) const { return c.mla.enabled ? 1 : kv_groups(c); }
  int64_t ffn(const ModelConfig& c) const { return c.ffn() / size; }
  int64_t padded_vocab(const ModelConfig& c) const { return c.padded_vocab_size(size); }
  int64_t vocab_rows(const ModelConfig& c) const { return padded_vocab(c) / size; }
};

// Throws claw::Error, naming the flags, unless the model splits over `tp`
// ranks: heads, KV groups (or their replication) and the FFN width divisible,
// sequence parallelism only with tp > 1. seq_length > 0 also checks the
// sequence split under sequence parallelism.
void validate_tensor_parallel(const ModelConfig& cfg, int tp, bool sequence_parallel, int64_t seq_length = 0);

// The KV-replica sets of one TP group of `tp` ranks for a model with `kv_heads`
// groups: consecutive runs of tp / kv_heads members (each member alone when
// kv_heads >= tp). Positions are TP ranks; map them to world ranks to split.
// Expert parallelism of a model: EP only for a MoE model, dividing its
// experts; MoE under TP > 1 needs sequence parallelism; experts whole on
// each rank (expert TP 1). Throws claw::Error naming the flags.
void validate_moe_layout(const ModelConfig& cfg, int tp, int ep, int etp, bool sequence_parallel);

std::vector<std::vector<int>> kv_replica_sets(int tp, int64_t kv_heads);

struct TensorParallel {
  comm::Group* group = nullptr;     // the TP group (never null once a model holds it)
  comm::Group* kv_group = nullptr;  // the ranks of `group` holding this rank's KV group
  bool sequence_parallel = false;
  // MoE layers. ep: the expert-parallel group (null: one rank); this rank
  // holds experts [r E / ep, (r + 1) E / ep) of each layer, r its rank there.
  // expert_region: expert gradients reduce over "expert_dp" rather than with
  // the dense parameters (EP > 1, or expert TP 1 under TP > 1).
  // moe_tokens: the ranks sharing one micro-batch's tokens (tp x cp under
  // SP / CP; null: this rank alone), over which routing statistics sum and
  // FP8 activation amaxes reduce.
  comm::Group* ep = nullptr;
  bool expert_region = false;
  comm::Group* moe_tokens = nullptr;

  int size() const { return group ? group->size() : 1; }
  int rank() const { return group ? group->rank() : 0; }
  int ep_size() const { return ep ? ep->size() : 1; }
  int ep_rank() const { return ep ? ep->rank() : 0; }
  TpDims dims() const { return {size(), sequence_parallel, ep_size()}; }
  bool sp() const { return dims().sp(); }
  int64_t rows(int64_t N) const { return dims().rows(N); }
  int64_t first_row(int64_t N) const { return sp() ? rank() * rows(N) : 0; }

  // Entering a tensor-parallel region (the input of the column-parallel
  // layers): x [rows(N), C] -> the whole [N, C]. Without SP the input itself
  // (copy_to_tp); with SP all-gathered into `full` (gather_from_sp).
  const float* gather_rows(float* full, const float* x, int64_t B, int64_t T, int64_t C) const;
  // Leaving it (the output of a row-parallel layer): y [N, C] holds this rank's
  // partial sums; afterwards its first rows(N) rows hold the sum (all-reduce,
  // reduce_from_tp; or reduce-scatter, reduce_scatter_to_sp). Also the adjoint
  // of gather_rows for a gradient.
  void reduce_rows(float* y, int64_t B, int64_t T, int64_t C) const;
};

// The groups of one rank's TensorParallel: the parallel state's TP group and
// a KV-replica group split from the world. Collective over the world (every
// rank calls it with the same model); `kv` keeps the split group alive.
struct TpGroups {
  std::shared_ptr<comm::Group> kv;
  std::shared_ptr<comm::Group> moe_tokens;  // MoE under TP or CP: the tp x cp ranks
  TensorParallel tp;
};
TpGroups make_tensor_parallel(comm::World& world, comm::ParallelState& ps, const ModelConfig& cfg,
                              bool sequence_parallel);

}  // namespace claw::model
