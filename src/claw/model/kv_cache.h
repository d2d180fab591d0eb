// KvCache: the keys and values of every layer for a batch of sequences being
// decoded, so that each new token attends to what came before without
// recomputing it.
//
//   KvCache cache(cfg, tp.dims(), /*batch=*/B, /*capacity=*/P);
//   model.forward_cached(ctx, prompt, cache)        // ctx.T = prompt length: prefill
//   model.forward_cached(ctx, next_token, cache)    // ctx.T = 1: one decoding step
//
// Layout: per layer, per row b, `capacity` positions of this tensor-parallel
// rank's KV heads, [L][B][P][Gl][D] for keys and the same for values (keys
// after RoPE). length[b] positions of row b are filled; a forward over T new
// tokens of each row reads positions [0, length[b] + T) and then advances
// length[b] by T. Rows advance independently (sequences of different lengths
// share a batch). This is the contiguous cache; the paged one of the serving
// engine keeps the same per-layer interface.
#pragma once

#include <cstdint>
#include <vector>

#include "claw/core/error.h"
#include "claw/model/config.h"
#include "claw/model/tensor_parallel.h"

namespace claw::model {

class KvCache {
 public:
  KvCache(const ModelConfig& cfg, TpDims tp, int64_t batch, int64_t capacity)
      : layers_(cfg.num_layers),
        batch_(batch),
        capacity_(capacity),
        row_(tp.kv_groups(cfg) * cfg.head_dim()),
        k_(static_cast<size_t>(layers_ * batch * capacity * row_)),
        v_(k_.size()),
        length_(static_cast<size_t>(batch), 0) {
    if (capacity > cfg.max_position_embeddings)
      fail("a KV cache of {} positions exceeds --max-position-embeddings {}", capacity, cfg.max_position_embeddings);
  }

  int64_t batch() const { return batch_; }
  int64_t capacity() const { return capacity_; }
  // Elements per cached position (this rank's KV heads x head dim).
  int64_t row() const { return row_; }
  // Keys / values of `layer`, row 0, position 0; rows are capacity() x row() apart.
  float* keys(int64_t layer) { return k_.data() + layer * batch_ * capacity_ * row_; }
  float* values(int64_t layer) { return v_.data() + layer * batch_ * capacity_ * row_; }
  // Filled positions per row.
  const int32_t* lengths() const { return length_.data(); }
  int32_t length(int64_t b) const { return length_[b]; }
  // Called by the model after every layer has appended T tokens of each row.
  void advance(int64_t T) {
    for (int32_t& n : length_) n += static_cast<int32_t>(T);
  }
  // Makes room for T more tokens of every row, or says why not.
  void check_room(int64_t T) const {
    for (int64_t b = 0; b < batch_; ++b)
      if (length_[b] + T > capacity_)
        fail("KV cache row {} holds {} of {} positions; {} more do not fit", b, length_[b], capacity_, T);
  }
  void reset() { std::fill(length_.begin(), length_.end(), 0); }
  size_t bytes() const { return (k_.size() + v_.size()) * sizeof(float); }

 private:
  int64_t layers_, batch_, capacity_, row_;
  std::vector<float> k_, v_;
  std::vector<int32_t> length_;
};

}  // namespace claw::model
