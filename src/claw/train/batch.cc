#include "claw/train/batch.h"

#include <algorithm>
#include <utility>

#include "claw/core/error.h"

namespace claw::train {

GlobalBatch::GlobalBatch(int64_t micro_batches, int64_t B, int64_t T, const data::PackingOptions& packing,
                         int dp_size, int dp_rank, int cp_size, int cp_rank, int64_t cp_chunk_shift)
    : micro_batches_(micro_batches),
      B_(B),
      T_(T / cp_size),
      T_full_(T),
      dp_size_(dp_size),
      dp_rank_(dp_rank),
      cp_size_(cp_size),
      cp_rank_(cp_rank),
      chunks_(model::CpChunks::of(T, cp_rank, cp_size)),  // refuses a T the chunks do not divide
      cp_chunk_shift_(cp_size > 1 ? cp_chunk_shift : 0),
      packing_(packing) {
  const int64_t n = micro_batches * B * T;
  rows_.tokens.resize(n);
  rows_.targets.resize(n);
  // Split rows carry every token's place in the full row.
  if (packing.reset_position_ids || cp_size > 1) rows_.positions.resize(n);
  if (packing.reset_attention_mask) rows_.seg_start.resize(n);
  if (cp_size > 1 && !packing.reset_position_ids)
    for (int64_t i = 0; i < n; ++i) rows_.positions[i] = static_cast<int32_t>(i % T);
}

void GlobalBatch::load(const data::SampleSource& source, int64_t first) {
  const int64_t row = B_ * T_full_;
  if (dp_size_ == 1) {
    source.get_batch(first, micro_batches_ * B_, rows_.tokens.data(), rows_.targets.data());
  } else {
    for (int64_t k = 0; k < micro_batches_; ++k)
      source.get_batch(first + sample_offset(k), B_, rows_.tokens.data() + k * row, rows_.targets.data() + k * row);
  }
  pack();
  upload();
}

void GlobalBatch::assign(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets) {
  CLAW_CHECK(tokens.size() == rows_.tokens.size() && targets.size() == rows_.targets.size());
  rows_.tokens = tokens;
  rows_.targets = targets;
  pack();
  upload();
}

void GlobalBatch::pack() {
  if (packing_.any())
    data::apply_packing(packing_, rows_.tokens.data(), micro_batches_ * B_, T_full_,
                        rows_.seg_start.empty() ? nullptr : rows_.seg_start.data(),
                        packing_.reset_position_ids ? rows_.positions.data() : nullptr, rows_.targets.data());
  if (cp_size_ == 1) return;
  const int64_t rows = micro_batches_ * B_;
  local_.tokens = model::cp_slice(chunks_, rows_.tokens.data(), rows, 1);
  local_.targets = model::cp_slice(chunks_, rows_.targets.data(), rows, 1);
  local_.positions = model::cp_slice(chunks_, rows_.positions.data(), rows, 1);
  if (!rows_.seg_start.empty()) local_.seg_start = model::cp_slice(chunks_, rows_.seg_start.data(), rows, 1);
  if (cp_chunk_shift_ != 0) {  // the mutation: the second chunk read from shifted places of the row
    const int64_t Tc = chunks_.chunk, TL = chunks_.local_tokens(), from = chunks_.index(1) * Tc + cp_chunk_shift_;
    for (auto [local, full] : {std::pair{&local_.tokens, &rows_.tokens}, std::pair{&local_.targets, &rows_.targets},
                               std::pair{&local_.positions, &rows_.positions}, std::pair{&local_.seg_start, &rows_.seg_start}})
      if (!full->empty())
        for (int64_t b = 0; b < rows; ++b)
          for (int64_t t = 0; t < Tc; ++t) (*local)[b * TL + Tc + t] = (*full)[b * T_full_ + (from + t) % T_full_];
  }
}

void GlobalBatch::set_device(const kernels::cuda::Device* device) {
  device_ = device;
  device_arrays_ =
      device ? Arena("batch (device copy)", 4 * held().tokens.size() * sizeof(int32_t), device->memory()) : Arena();
  if (device) upload();
}

void GlobalBatch::upload() {
  if (!device_) return;
  const Arrays& h = held();
  const size_t n = h.tokens.size();
  int32_t* d = device_arrays_.ptr<int32_t>(0);
  const std::vector<int32_t>* arrays[] = {&h.tokens, &h.targets, &h.positions, &h.seg_start};
  for (int a = 0; a < 4; ++a)
    if (!arrays[a]->empty()) kernels::cuda::copy_to_device(device_->ctx(), d + a * n, arrays[a]->data(), n * sizeof(int32_t));
}

MicroBatch GlobalBatch::micro(int64_t k) const {
  const Arrays& h = held();
  const int64_t off = k * B_ * T_;
  if (device_) {
    const int32_t* d = device_arrays_.ptr<int32_t>(0);
    const int64_t n = static_cast<int64_t>(h.tokens.size());
    return {d + off, d + n + off, h.positions.empty() ? nullptr : d + 2 * n + off,
            h.seg_start.empty() ? nullptr : d + 3 * n + off};
  }
  return {h.tokens.data() + off, h.targets.data() + off, h.positions.empty() ? nullptr : h.positions.data() + off,
          h.seg_start.empty() ? nullptr : h.seg_start.data() + off};
}

int64_t GlobalBatch::valid_targets() const {
  const Arrays& h = held();
  return std::count_if(h.targets.begin(), h.targets.end(), [](int32_t t) { return t >= 0; });
}

}  // namespace claw::train
