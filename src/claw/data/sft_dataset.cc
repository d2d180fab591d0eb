#include "claw/data/sft_dataset.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "claw/core/error.h"
#include "claw/core/log.h"
#include "claw/data/sft.h"

namespace claw::data {

std::shared_ptr<const IndexedDataset> open_loss_masks(const IndexedDataset& t, const std::string& prefix,
                                                      const char* flag) {
  const std::string mask_prefix = sft_loss_mask_prefix(prefix);
  if (!path_exists(idx_path(mask_prefix)))
    fail("{}: {} has no loss mask ({} not found); make the data with claw preprocess {}", flag, t.idx_file(),
         idx_path(mask_prefix), flag);
  auto masks = std::make_shared<const IndexedDataset>(mask_prefix);
  const IndexedDataset& m = *masks;
  if (!index_dtype_is_integer(t.dtype()))
    fail("{}: dtype {} does not hold token ids", t.idx_file(), index_dtype_name(t.dtype()));
  if (m.dtype() != IndexDType::u8)
    fail("{}: a loss mask must be uint8, not {}", m.idx_file(), index_dtype_numpy_name(m.dtype()));
  if (m.num_sequences() != t.num_sequences() || m.num_documents() != t.num_documents())
    fail("{}: {} sequences in {} documents, but the tokens ({}) have {} in {}", m.idx_file(), m.num_sequences(),
         m.num_documents(), t.idx_file(), t.num_sequences(), t.num_documents());
  for (int64_t i = 0; i < t.num_sequences(); ++i) {
    if (m.sequence_length(i) != t.sequence_length(i))
      fail("{}: sequence {} has {} mask entries for {} tokens", m.idx_file(), i, m.sequence_length(i),
           t.sequence_length(i));
    for (uint8_t v : m.sequence<uint8_t>(i))
      if (v > 1) fail("{}: sequence {} holds the mask value {} (0 or 1)", m.idx_file(), i, int{v});
  }
  return masks;
}

DocumentRange split_of(const IndexedDataset& t, const std::string& prefix, Split split,
                       const GptDatasetOptions& options, const char* what) {
  const auto weights = parse_split(options.split);
  CLAW_CHECK(weights[static_cast<int>(split)] > 0, "split {} has weight 0 in --split {}", split_name(split),
             options.split);
  const DocumentRange documents = split_documents(weights, t.num_documents())[static_cast<int>(split)];
  if (documents.size() == 0)
    fail("--split {}: the {} split of {} has no {}; give it a larger weight", options.split, split_name(split), prefix,
         what);
  const TokenRange range = t.token_range(t.document_index(documents.begin), t.document_index(documents.end));
  if (range.min_sequence >= 0 && (range.min < 0 || range.max >= options.vocab_size))
    fail("{}: token id {} is outside the vocabulary [0, {}); the data was tokenized for a different vocabulary",
         t.bin_file(), range.min < 0 ? range.min : range.max, options.vocab_size);
  return documents;
}

SftDataset::SftDataset(const std::string& prefix, Split split, const GptDatasetOptions& options, int32_t pad)
    : seq_length_(options.seq_length), pad_(pad) {
  if (options.seq_length < 1) fail("--seq-length {} is invalid; it must be at least 1", options.seq_length);
  if (options.num_samples < 0) fail("a dataset split cannot provide {} samples", options.num_samples);
  tokens_ = std::make_shared<const IndexedDataset>(prefix);
  masks_ = open_loss_masks(*tokens_, prefix, "--sft");
  documents_ = split_of(*tokens_, prefix, split, options, "conversation");

  // Epochs of shuffled conversations, packed whole until enough samples.
  const int64_t S1 = seq_length_ + 1, n = documents_.size();
  first_.push_back(0);
  int64_t used = 0;  // tokens of the open sample
  for (uint64_t epoch = 0;; ++epoch) {
    const size_t base = order_.size();
    for (int64_t d = documents_.begin; d < documents_.end; ++d) order_.push_back(static_cast<int32_t>(d));
    std::mt19937_64 rng(options.seed + epoch);
    for (int64_t i = n - 1; i > 0; --i) std::swap(order_[base + i], order_[base + rng() % static_cast<uint64_t>(i + 1)]);
    for (size_t k = base; k < order_.size(); ++k) {
      const int64_t len = document_length(order_[k]);
      if (len > S1 && epoch == 0) ++truncated_;
      if (used > 0 && used + std::min(len, S1) > S1) {
        first_.push_back(static_cast<int64_t>(k));
        used = 0;
      }
      used += std::min(len, S1);
    }
    if (num_samples() + (used > 0) >= std::max<int64_t>(options.num_samples, 1) ||
        (options.num_samples == 0 && epoch == 0))
      break;
  }
  if (used > 0) first_.push_back(static_cast<int64_t>(order_.size()));
  if (truncated_ > 0)
    log::warn("data", "{} ({} split): {} of {} conversations are longer than --seq-length {} + 1 and are cut",
              prefix, split_name(split), truncated_, n, seq_length_);
}

int64_t SftDataset::document_length(int64_t doc) const {
  int64_t len = 0;
  for (int64_t i = tokens_->document_index(doc); i < tokens_->document_index(doc + 1); ++i)
    len += tokens_->sequence_length(i);
  return len;
}

template <typename F>
int64_t SftDataset::each_conversation(int64_t position, F&& emit) const {
  CLAW_CHECK(position >= 0 && position < num_samples(), "sample position {} of {}", position, num_samples());
  const int64_t S1 = seq_length_ + 1;
  int64_t filled = 0;
  for (int64_t k = first_[position]; k < first_[position + 1]; ++k) {
    const int64_t doc = order_[k];
    int64_t want = std::min(document_length(doc), S1 - filled);
    for (int64_t i = tokens_->document_index(doc); i < tokens_->document_index(doc + 1) && want > 0; ++i) {
      const int64_t count = std::min<int64_t>(tokens_->sequence_length(i), want);
      emit(i, filled, count);
      filled += count;
      want -= count;
    }
  }
  return filled;
}

void SftDataset::get_sample(int64_t position, int32_t* tokens) const {
  const int64_t filled =
      each_conversation(position, [&](int64_t seq, int64_t at, int64_t count) { tokens_->read_tokens(seq, 0, count, tokens + at); });
  std::fill(tokens + filled, tokens + seq_length_ + 1, pad_);
}

void SftDataset::get_loss_mask(int64_t position, uint8_t* mask) const {
  const int64_t filled = each_conversation(position, [&](int64_t seq, int64_t at, int64_t count) {
    std::memcpy(mask + at, masks_->sequence<uint8_t>(seq).data(), static_cast<size_t>(count));
  });
  std::fill(mask + filled, mask + seq_length_ + 1, uint8_t{0});
}

}  // namespace claw::data
