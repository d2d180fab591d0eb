#include "claw/data/dpo_dataset.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "claw/core/error.h"
#include "claw/core/log.h"
#include "claw/data/sft_dataset.h"

namespace claw::data {

DpoDataset::DpoDataset(const std::string& prefix, Split split, const GptDatasetOptions& options, int32_t pad)
    : prefix_(prefix), seq_length_(options.seq_length), pad_(pad) {
  if (options.seq_length < 1) fail("--seq-length {} is invalid; it must be at least 1", options.seq_length);
  if (options.num_samples < 0) fail("a dataset split cannot provide {} samples", options.num_samples);
  tokens_ = std::make_shared<const IndexedDataset>(prefix);
  const IndexedDataset& t = *tokens_;
  masks_ = open_loss_masks(t, prefix, "--dpo");
  for (int64_t d = 0; d < t.num_documents(); ++d)
    if (t.document_index(d + 1) - t.document_index(d) != 2)
      fail("--dpo: {}: document {} has {} sequences; a DPO dataset (claw preprocess --dpo) has two per document, "
           "the chosen and the rejected reply", t.idx_file(), d, t.document_index(d + 1) - t.document_index(d));
  documents_ = split_of(t, prefix, split, options, "preference pair");
  const int64_t n = documents_.size();
  for (int64_t d = documents_.begin; d < documents_.end; ++d)
    for (int64_t i = t.document_index(d); i < t.document_index(d + 1); ++i)
      truncated_ += t.sequence_length(i) > seq_length_ + 1;
  for (uint64_t epoch = 0;; ++epoch) {
    const size_t base = order_.size();
    for (int64_t d = documents_.begin; d < documents_.end; ++d) order_.push_back(static_cast<int32_t>(d));
    std::mt19937_64 rng(options.seed + epoch);
    for (int64_t i = n - 1; i > 0; --i) std::swap(order_[base + i], order_[base + rng() % static_cast<uint64_t>(i + 1)]);
    if (num_samples() >= options.num_samples) break;
  }
  if (truncated_ > 0)
    log::warn("data", "{} ({} split): {} of {} sequences are longer than --seq-length {} + 1 and are cut", prefix,
              split_name(split), truncated_, 2 * n, seq_length_);
}

int64_t DpoDataset::sequence_of(int64_t position) const {
  CLAW_CHECK(position >= 0, "sample position {}", position);
  position %= num_samples();
  return tokens_->document_index(order_[position / 2]) + position % 2;
}

void DpoDataset::get_sample(int64_t position, int32_t* tokens) const {
  const int64_t seq = sequence_of(position);
  const int64_t count = std::min<int64_t>(tokens_->sequence_length(seq), seq_length_ + 1);
  tokens_->read_tokens(seq, 0, count, tokens);
  std::fill(tokens + count, tokens + seq_length_ + 1, pad_);
}

void DpoDataset::get_loss_mask(int64_t position, uint8_t* mask) const {
  const int64_t seq = sequence_of(position);
  const int64_t count = std::min<int64_t>(tokens_->sequence_length(seq), seq_length_ + 1);
  std::memcpy(mask, masks_->sequence<uint8_t>(seq).data(), static_cast<size_t>(count));
  std::fill(mask + count, mask + seq_length_ + 1, uint8_t{0});
}

}  // namespace claw::data
