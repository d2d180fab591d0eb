// The keys and values of every layer for sequences being decoded, so that
// each new token attends to what came before without recomputing it.
//
// AttentionCache is what the model calls: GPT::forward_cached runs B x T new
// tokens, asks the cache for their positions, and each attention layer hands
// it the new tokens' queries, keys and values; the cache stores the keys and
// values and writes the attention output of every query against everything
// its sequence has cached. Two caches implement it: KvCache below
// (contiguous rows, one per sequence of a fixed batch) and the serving
// engine's paged cache (serve/paged_kv_cache.h: blocks, block tables, a
// batch that changes every step).
//
// KvCache:
//   KvCache cache(cfg, tp.dims(), /*batch=*/B, /*capacity=*/P);
//   model.forward_cached(ctx, prompt, cache)        // ctx.T = prompt length: prefill
//   model.forward_cached(ctx, next_token, cache)    // ctx.T = 1: one decoding step
//
// Layout: per layer, per row b, `capacity` positions of this tensor-parallel
// rank's KV heads, [L][B][P][Gl][D] for keys and the same for values (keys
// after RoPE). length[b] positions of row b are filled; a forward over T new
// tokens of each row reads positions [0, length[b] + T) and then advances
// length[b] by T. Rows advance independently (sequences of different lengths
// share a batch).
#pragma once

#include <cstdint>
#include <vector>

#include "claw/core/error.h"
#include "claw/core/parallel.h"
#include "claw/kernels/cpu/score_scale.h"
#include "claw/model/config.h"
#include "claw/model/tensor_parallel.h"

namespace claw::model {

class AttentionCache {
 public:
  virtual ~AttentionCache() = default;
  // Elements per cached position of one layer (this rank's KV heads x head dim).
  virtual int64_t row() const = 0;
  // Throws claw::Error when B x T more tokens do not fit.
  virtual void check_room(int64_t B, int64_t T) const = 0;
  // The position of each of the step's B x T tokens ([B * T]).
  virtual void positions(int64_t B, int64_t T, int32_t* out) const = 0;
  // Each token's sequence length once the step is cached ([B * T]; longrope
  // chooses its factors by it).
  virtual void sequence_ends(int64_t B, int64_t T, int32_t* out) const = 0;
  // Stores `layer`'s keys and values of the step's tokens (k, v [B*T, G, D],
  // after RoPE) and writes out [B*T, H, D]: each query attends causally to
  // its sequence's cached tokens and the step's tokens up to itself. A
  // query's output must not depend on the other sequences of the step.
  virtual void attend(const CpuCtx& cpu, int64_t layer, const float* q, const float* k, const float* v, float* out,
                      float* lse, int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) = 0;
  // Called once every layer has attended: the step's tokens are cached.
  virtual void advance(int64_t B, int64_t T) = 0;
};

class KvCache final : public AttentionCache {
 public:
  KvCache(const ModelConfig& cfg, TpDims tp, int64_t batch, int64_t capacity)
      : layers_(cfg.num_layers),
        batch_(batch),
        capacity_(capacity),
        row_(tp.cache_groups(cfg) * cfg.cache_head_dim()),
        k_(static_cast<size_t>(layers_ * batch * capacity * row_)),
        v_(k_.size()),
        length_(static_cast<size_t>(batch), 0),
        windows_(layer_windows(cfg)),
        scale_(cfg.attention_scale(), cfg.attn_logit_softcapping) {
    if (capacity > cfg.max_position_embeddings)
      fail("a KV cache of {} positions exceeds --max-position-embeddings {}", capacity, cfg.max_position_embeddings);
  }

  int64_t batch() const { return batch_; }
  int64_t capacity() const { return capacity_; }
  int64_t row() const override { return row_; }
  // Keys / values of `layer`, row 0, position 0; rows are capacity() x row() apart.
  float* keys(int64_t layer) { return k_.data() + layer * batch_ * capacity_ * row_; }
  float* values(int64_t layer) { return v_.data() + layer * batch_ * capacity_ * row_; }
  // Filled positions per row.
  const int32_t* lengths() const { return length_.data(); }
  int32_t length(int64_t b) const { return length_[b]; }
  void advance(int64_t B, int64_t T) override {
    CLAW_CHECK(B == batch_, "KV cache of {} rows advanced by a batch of {}", batch_, B);
    for (int32_t& n : length_) n += static_cast<int32_t>(T);
  }
  void check_room(int64_t B, int64_t T) const override {
    if (B != batch_) fail("a KV cache of {} rows cannot take a batch of {} sequences", batch_, B);
    for (int64_t b = 0; b < batch_; ++b)
      if (length_[b] + T > capacity_)
        fail("KV cache row {} holds {} of {} positions; {} more do not fit", b, length_[b], capacity_, T);
  }
  void positions(int64_t B, int64_t T, int32_t* out) const override {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) out[b * T + t] = length_[b] + static_cast<int32_t>(t);
  }
  void sequence_ends(int64_t B, int64_t T, int32_t* out) const override {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) out[b * T + t] = length_[b] + static_cast<int32_t>(T);
  }
  // Row b's T new keys and values go to positions [length_b, length_b + T),
  // then its queries attend to [0, length_b + T) (a sliding window: the
  // last W keys up to each query).
  void attend(const CpuCtx& cpu, int64_t layer, const float* q, const float* k, const float* v, float* out,
              float* lse, int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) override;
  void reset() { std::fill(length_.begin(), length_.end(), 0); }
  size_t bytes() const { return (k_.size() + v_.size()) * sizeof(float); }

 private:
  int64_t layers_, batch_, capacity_, row_;
  std::vector<float> k_, v_;
  std::vector<int32_t> length_;
  std::vector<int64_t> windows_;  // per layer: keys a query sees (0: all)
  kernels::ScoreScale scale_;     // the attention scores' scale and soft cap
  std::vector<int32_t> q_lo_;     // a windowed layer's first visible key per query
};

}  // namespace claw::model
