#include "claw/train/batch.h"

#include <algorithm>

#include "claw/core/error.h"

namespace claw::train {

GlobalBatch::GlobalBatch(int64_t micro_batches, int64_t B, int64_t T, const data::PackingOptions& packing,
                         int dp_size, int dp_rank)
    : micro_batches_(micro_batches), B_(B), T_(T), dp_size_(dp_size), dp_rank_(dp_rank), packing_(packing) {
  const int64_t n = micro_batches * B * T;
  tokens_.resize(n);
  targets_.resize(n);
  if (packing.reset_position_ids) positions_.resize(n);
  if (packing.reset_attention_mask) seg_start_.resize(n);
}

void GlobalBatch::load(const data::SampleSource& source, int64_t first) {
  if (dp_size_ == 1) {
    source.get_batch(first, micro_batches_ * B_, tokens_.data(), targets_.data());
  } else {
    for (int64_t k = 0; k < micro_batches_; ++k)
      source.get_batch(first + sample_offset(k), B_, tokens_.data() + k * B_ * T_, targets_.data() + k * B_ * T_);
  }
  pack();
  upload();
}

void GlobalBatch::assign(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets) {
  CLAW_CHECK(tokens.size() == tokens_.size() && targets.size() == targets_.size());
  tokens_ = tokens;
  targets_ = targets;
  pack();
  upload();
}

void GlobalBatch::pack() {
  if (!packing_.any()) return;
  data::apply_packing(packing_, tokens_.data(), micro_batches_ * B_, T_,
                      seg_start_.empty() ? nullptr : seg_start_.data(),
                      positions_.empty() ? nullptr : positions_.data(), targets_.data());
}

void GlobalBatch::set_device(const kernels::cuda::Device* device) {
  device_ = device;
  device_arrays_ = device ? Arena("batch (device copy)", 4 * tokens_.size() * sizeof(int32_t), device->memory()) : Arena();
  if (device) upload();
}

void GlobalBatch::upload() {
  if (!device_) return;
  const size_t n = tokens_.size();
  int32_t* d = device_arrays_.ptr<int32_t>(0);
  const std::vector<int32_t>* arrays[] = {&tokens_, &targets_, &positions_, &seg_start_};
  for (int a = 0; a < 4; ++a)
    if (!arrays[a]->empty()) kernels::cuda::copy_to_device(device_->ctx(), d + a * n, arrays[a]->data(), n * sizeof(int32_t));
}

MicroBatch GlobalBatch::micro(int64_t k) const {
  const int64_t off = k * B_ * T_;
  if (device_) {
    const int32_t* d = device_arrays_.ptr<int32_t>(0);
    const int64_t n = static_cast<int64_t>(tokens_.size());
    return {d + off, d + n + off, positions_.empty() ? nullptr : d + 2 * n + off,
            seg_start_.empty() ? nullptr : d + 3 * n + off};
  }
  return {tokens_.data() + off, targets_.data() + off, positions_.empty() ? nullptr : positions_.data() + off,
          seg_start_.empty() ? nullptr : seg_start_.data() + off};
}

int64_t GlobalBatch::valid_targets() const {
  return std::count_if(targets_.begin(), targets_.end(), [](int32_t t) { return t >= 0; });
}

}  // namespace claw::train
