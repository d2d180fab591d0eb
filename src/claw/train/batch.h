// One optimizer step's worth of samples for this data-parallel rank:
// `micro_batches` micro-batches of B sequences of T tokens, with what packing adds (positions and document
// starts when --reset-position-ids / --reset-attention-mask are on; masked
// targets for --eod-mask-loss).
#pragma once

#include "claw/core/arena.h"
#include "claw/kernels/cuda/context.h"

#include <cstdint>
#include <vector>

#include "claw/data/packing.h"
#include "claw/model/context_parallel.h"
#include "claw/data/sample_source.h"

namespace claw::train {

struct MicroBatch {
  const int32_t* tokens;
  const int32_t* targets;    // < 0: no loss at this position
  const int32_t* positions;  // null: 0..T-1 in every row
  const int32_t* seg_start;  // null: plain causal attention
};

// With DP ranks, a global batch of G = micro_batches x B x DP samples
// starting at `first` is cut as Megatron's pretraining sampler does: micro-
// batch k of rank r holds samples first + (k DP + r) B ... + B. Every rank's
// slice together is the single-rank batch of the same G samples.
//
// With context parallelism each row of T tokens is read whole and packed,
// then CP rank r keeps its two chunks (model/context_parallel.h): micro()
// holds B rows of T / CP tokens, with every token's position in the full row
// and, under --reset-attention-mask, its document's first position there.
class GlobalBatch {
 public:
  // cp_chunk_shift: tests only (the mutation shift-cp-chunk): this rank's
  // second chunk of every row starts that many tokens later.
  GlobalBatch(int64_t micro_batches, int64_t B, int64_t T, const data::PackingOptions& packing, int dp_size = 1,
              int dp_rank = 0, int cp_size = 1, int cp_rank = 0, int64_t cp_chunk_shift = 0);

  // Reads this rank's samples of the global batch starting at `first` and applies the packing options.
  void load(const data::SampleSource& source, int64_t first);
  // Global index (relative to the batch's first sample) of micro-batch k's first sample.
  int64_t sample_offset(int64_t k) const { return (k * dp_size_ + dp_rank_) * B_; }
  // Fills from given arrays of micro_batches * B * T tokens and targets (tests, tools).
  void assign(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets);

  // Micro-batch k's arrays: in the device's memory after set_device().
  MicroBatch micro(int64_t k) const;
  // Keeps a copy of every loaded batch in this GPU's memory (--device cuda),
  // refreshed by load() and assign(); micro() then points into it.
  void set_device(const kernels::cuda::Device* device);
  int64_t micro_batches() const { return micro_batches_; }
  int64_t B() const { return B_; }
  int64_t T() const { return T_; }  // this rank's tokens of a row (T / CP)
  int cp_size() const { return cp_size_; }
  int dp_size() const { return dp_size_; }
  int cp_rank() const { return cp_rank_; }
  // This rank's positions with a target (the loss is their mean over the
  // data- and context-parallel ranks).
  int64_t valid_targets() const;

 private:
  void pack();
  void upload();
  struct Arrays {
    std::vector<int32_t> tokens, targets, positions, seg_start;
  };
  // What micro() hands out: the full rows, or this CP rank's part of them.
  const Arrays& held() const { return cp_size_ > 1 ? local_ : rows_; }
  const kernels::cuda::Device* device_ = nullptr;
  Arena device_arrays_;  // tokens, targets, positions, seg_start: micro_batches x B x T each
  int64_t micro_batches_, B_, T_, T_full_;
  int dp_size_, dp_rank_, cp_size_, cp_rank_;
  model::CpChunks chunks_;  // this CP rank's chunks of a row
  int64_t cp_chunk_shift_;
  data::PackingOptions packing_;
  Arrays rows_, local_;
};

}  // namespace claw::train
