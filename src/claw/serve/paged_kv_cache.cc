#include "claw/serve/paged_kv_cache.h"

#include <algorithm>
#include <cmath>

#include "claw/core/error.h"

namespace claw::serve {

namespace {
// Tensors a layer caches: keys and values, or MLA's latent, which is both.
int64_t kv_tensors(const model::ModelConfig& cfg) { return cfg.mla.enabled ? 1 : 2; }
}  // namespace

PagedKvCache::PagedKvCache(const model::ModelConfig& cfg, model::TpDims tp, int64_t num_blocks, int64_t block_size,
                           kernels::KvDtype dtype)
    : layers_(cfg.num_layers),
      tensors_(kv_tensors(cfg)),
      num_blocks_(num_blocks),
      block_size_(block_size),
      row_(tp.cache_groups(cfg) * cfg.cache_head_dim()),
      head_dim_(cfg.cache_head_dim()),
      layer_elems_(num_blocks * block_size * row_),
      bytes_per_block_(block_bytes(cfg, tp, block_size, dtype)),
      dtype_(dtype),
      windows_(layer_windows(cfg)),
      scale_(cfg.attention_scale(), cfg.attn_logit_softcapping),
      storage_(new uint8_t[static_cast<size_t>(tensors_ * layers_ * layer_elems_) * kernels::kv_dtype_size(dtype)]) {
  if (const int64_t per_row = kernels::kv_scales_per_row(dtype, head_dim_); per_row > 0)
    scales_.reset(new float[static_cast<size_t>(tensors_ * layers_ * num_blocks * block_size * tp.cache_groups(cfg) *
                                                per_row)]);
}

int64_t PagedKvCache::block_bytes(const model::ModelConfig& cfg, model::TpDims tp, int64_t block_size,
                                  kernels::KvDtype dtype) {
  const int64_t rows = kv_tensors(cfg) * cfg.num_layers * block_size * tp.cache_groups(cfg);
  return rows * cfg.cache_head_dim() * static_cast<int64_t>(kernels::kv_dtype_size(dtype)) +
         rows * kernels::kv_scales_per_row(dtype, cfg.cache_head_dim()) * static_cast<int64_t>(sizeof(float));
}

kernels::KvView PagedKvCache::view(int64_t layer, int which) const {
  const int64_t k = tensors_ * layer + (tensors_ == 2 ? which : 0);
  return {.dtype = dtype_,
          .data = storage_.get() + static_cast<size_t>(k * layer_elems_) * kernels::kv_dtype_size(dtype_),
          .scales = scales_ ? scales_.get() + k * (layer_elems_ / head_dim_) *
                                                  kernels::kv_scales_per_row(dtype_, head_dim_)
                            : nullptr};
}

void PagedKvCache::set_step(std::vector<StepSeq> seqs) {
  step_ = std::move(seqs);
  paged_.clear();
  step_tokens_ = 0;
  for (const StepSeq& s : step_) {
    CLAW_CHECK(s.num_tokens >= 1 && s.context >= 0, "a step sequence of {} tokens after {}", s.num_tokens, s.context);
    if (s.num_blocks * block_size_ < s.context + s.num_tokens)
      fail("internal: a block table of {} blocks for {} positions", s.num_blocks, s.context + s.num_tokens);
    paged_.push_back({.first_row = step_tokens_, .num_tokens = s.num_tokens, .context = s.context, .blocks = s.blocks});
    step_tokens_ += s.num_tokens;
  }
}

void PagedKvCache::check_room(int64_t B, int64_t T) const {
  if (B != 1 || T != step_tokens_)
    fail("internal: a paged-cache step of {} tokens run as a batch of {} x {}", step_tokens_, B, T);
}

void PagedKvCache::positions(int64_t, int64_t, int32_t* out) const {
  for (const StepSeq& s : step_)
    for (int64_t t = 0; t < s.num_tokens; ++t) *out++ = static_cast<int32_t>(s.context + t);
}

void PagedKvCache::sequence_ends(int64_t, int64_t, int32_t* out) const {
  for (const StepSeq& s : step_)
    for (int64_t t = 0; t < s.num_tokens; ++t)
      *out++ = static_cast<int32_t>(s.known > 0 ? s.known : s.context + s.num_tokens);
}

void PagedKvCache::attend(const CpuCtx& cpu, int64_t layer, const float* q, const float* k, const float* v,
                          float* out, float*, int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) {
  CLAW_CHECK(B * T == step_tokens_ && G * D == row_, "paged cache step of {} tokens x {} elements, given {} x {}",
             step_tokens_, row_, B * T, G * D);
  CLAW_CHECK(tensors_ == 2 || k == v, "a cache whose keys are its values given other values");
  const kernels::KvView K = view(layer, 0), V = view(layer, 1);
  int64_t r = 0;
  for (const StepSeq& s : step_)
    for (int64_t t = 0; t < s.num_tokens; ++t, ++r) {
      const int64_t pos = s.context + t;
      const int64_t block = s.blocks[pos / block_size_], slot = pos % block_size_;
      for (int64_t g = 0; g < G; ++g) {
        const int64_t row = kernels::kv_row(block, slot, g, G, block_size_);
        kernels::kv_store_row(K, row, k + r * row_ + g * D, D);
        if (tensors_ == 2) kernels::kv_store_row(V, row, v + r * row_ + g * D, D);
      }
    }
  kernels::paged_attention_forward(cpu, out, q, K, V, block_size_, paged_.data(), static_cast<int64_t>(paged_.size()),
                                   H, G, D, scale_, windows_[layer]);
}

}  // namespace claw::serve
