// The trainer's sample source over one split of an SFT dataset (`claw
// preprocess --sft`: conversations as documents ending in eod, and their
// loss masks at sft_loss_mask_prefix(prefix)).
//
// Packing keeps each conversation whole and its own: the split's documents
// (GptDataset's --split rule), shuffled per epoch, are laid into samples of
// S + 1 tokens back to back, a sample closing when the next conversation
// does not fit; the rest of a sample is eod padding, learned nowhere. A
// conversation longer than S + 1 tokens fills a sample alone, cut at S + 1
// (its mask cut with it). With --reset-attention-mask and
// --reset-position-ids (which --sft turns on) attention and positions
// restart after each eod, so a conversation sees only itself.
//
// The loss mask goes with the tokens: has_loss_mask() is true and
// get_batch() gives no target where the predicted token is not learned.
//
// Order: epoch e shuffles the documents with a Fisher-Yates pass driven by
// std::mt19937_64(seed + e) (a fixed sequence on every platform); epochs
// follow each other until `num_samples` samples exist (0: one epoch).
//
// Validation when opened (claw::Error naming the file): the masks exist,
// are uint8, have the tokens' sequences and lengths and hold 0 or 1; the
// tokens fit the vocabulary; the split has a conversation.
//
// Thread-safety: immutable after construction.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "claw/data/gpt_dataset.h"
#include "claw/data/indexed_dataset.h"
#include "claw/data/sample_source.h"

namespace claw::data {

// The loss masks of the tokens at `prefix` (sft_loss_mask_prefix), checked
// against them; `flag` (--sft, --dpo) names what makes such data in errors.
std::shared_ptr<const IndexedDataset> open_loss_masks(const IndexedDataset& tokens, const std::string& prefix,
                                                      const char* flag);
// The documents of `split` (GptDataset's --split rule), checked non-empty
// (`what`: the name of a document in errors) and within the vocabulary.
DocumentRange split_of(const IndexedDataset& tokens, const std::string& prefix, Split split,
                       const GptDatasetOptions& options, const char* what);

class SftDataset final : public SampleSource {
 public:
  // pad: the token that fills a sample's end (the tokenizer's eod).
  SftDataset(const std::string& prefix, Split split, const GptDatasetOptions& options, int32_t pad);

  int64_t num_samples() const override { return static_cast<int64_t>(first_.size()) - 1; }
  int64_t seq_length() const override { return seq_length_; }
  void get_sample(int64_t position, int32_t* tokens) const override;
  bool has_loss_mask() const override { return true; }
  void get_loss_mask(int64_t position, uint8_t* mask) const override;

  DocumentRange documents() const { return documents_; }
  // Conversations cut at S + 1 tokens (each counted once per epoch).
  int64_t num_truncated() const { return truncated_; }

 private:
  // Calls emit(sequence, offset in the sample, count) for each stored
  // sequence (or its first count tokens) that sample `position` holds, in
  // order; returns the tokens filled.
  template <typename F>
  int64_t each_conversation(int64_t position, F&& emit) const;
  int64_t document_length(int64_t doc) const;

  std::shared_ptr<const IndexedDataset> tokens_, masks_;
  int64_t seq_length_;
  int32_t pad_;
  DocumentRange documents_;
  std::vector<int32_t> order_;  // documents, epoch after epoch
  std::vector<int64_t> first_;  // sample p packs order_[first_[p], first_[p + 1])
  int64_t truncated_ = 0;
};

}  // namespace claw::data
