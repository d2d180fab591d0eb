// The serving engine's KV cache: every layer's keys and values in blocks of
// block_size positions (kernels/cpu/paged_attention.h gives the layout),
// addressed through each sequence's block table. Which blocks are free,
// held or cached for their prefix is the BlockPool's business; this class
// owns the storage and runs the model's attention over it.
//
// A step of the engine is one GPT::forward_cached over the N tokens of all
// scheduled sequences flattened into one row (ctx.B = 1, ctx.T = N).
// Before it the engine says which sequences the rows belong to:
//
//   cache.set_step({{.blocks = table.data(), .context = 37, .num_tokens = 1}, ...});
//   model.forward_cached(ctx, tokens, cache);
//
// Sequence i's tokens sit at positions context_i, ..., context_i +
// num_tokens_i - 1, and its block table must already cover them. attend()
// writes each layer's new keys and values into their slots, then every query
// attends to its sequence's positions up to its own.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "claw/kernels/cpu/paged_attention.h"
#include "claw/model/config.h"
#include "claw/model/kv_cache.h"
#include "claw/model/tensor_parallel.h"

namespace claw::serve {

struct StepSeq {
  const int32_t* blocks = nullptr;  // block table
  int64_t num_blocks = 0;           // its length
  int64_t context = 0;              // positions already cached
  int64_t num_tokens = 0;           // new tokens in this step
  // The tokens the sequence holds (cached, this step's, and the rest of its
  // prompt): longrope's choice of factors (0: context + num_tokens).
  int64_t known = 0;
};

class PagedKvCache final : public model::AttentionCache {
 public:
  // dtype: how keys and values are held (kernels/cpu/paged_attention.h).
  PagedKvCache(const model::ModelConfig& cfg, model::TpDims tp, int64_t num_blocks, int64_t block_size,
               kernels::KvDtype dtype = kernels::KvDtype::f32);

  // Bytes of one block (all layers, keys and values, int8's scales) on this rank.
  static int64_t block_bytes(const model::ModelConfig& cfg, model::TpDims tp, int64_t block_size,
                             kernels::KvDtype dtype = kernels::KvDtype::f32);
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  kernels::KvDtype dtype() const { return dtype_; }
  size_t bytes() const { return static_cast<size_t>(num_blocks_ * bytes_per_block_); }

  void set_step(std::vector<StepSeq> seqs);

  int64_t row() const override { return row_; }
  void check_room(int64_t B, int64_t T) const override;
  void positions(int64_t B, int64_t T, int32_t* out) const override;
  void sequence_ends(int64_t B, int64_t T, int32_t* out) const override;
  void attend(const CpuCtx& cpu, int64_t layer, const float* q, const float* k, const float* v, float* out,
              float* lse, int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) override;
  void advance(int64_t, int64_t) override {}  // the engine tracks what each sequence has cached

 private:
  // Layer l's keys (which 0) or values (1); one tensor for both where keys
  // are values (MLA's absorbed latent).
  kernels::KvView view(int64_t layer, int which) const;

  int64_t layers_, tensors_;  // tensors_ per layer: 2 (keys, values), or 1 (MLA: the latent is both)
  int64_t num_blocks_, block_size_, row_, head_dim_, layer_elems_, bytes_per_block_;
  kernels::KvDtype dtype_;
  std::vector<int64_t> windows_;  // per layer: keys a query sees (0: all)
  kernels::ScoreScale scale_;     // the attention scores' scale and soft cap
  // [L][keys | values][blocks][G][block_size][head_dim] of dtype_ (MLA:
  // [L][latent][...]), and for
  // int8 [L][keys | values][blocks][G][block_size] scales (kernels::kv_row());
  // not initialised: a slot is written before it is read, and pages never
  // used are never touched.
  std::unique_ptr<uint8_t[]> storage_;
  std::unique_ptr<float[]> scales_;
  std::vector<StepSeq> step_;
  std::vector<kernels::PagedSeq> paged_;
  int64_t step_tokens_ = 0;
};

}  // namespace claw::serve
