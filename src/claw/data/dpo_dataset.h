// The trainer's sample source over one split of a DPO dataset (`claw
// preprocess --dpo`: one document per preference pair holding two
// sequences, chosen then rejected, and their loss masks).
//
// Samples come in pairs: sample 2k is the chosen side of the k-th pair of
// the order and sample 2k + 1 its rejected side, each alone in its S + 1
// tokens (cut when longer, with its mask), padded with eod that is learned
// nowhere. A global batch and a micro-batch of an even number of samples
// therefore hold whole pairs. Pairs are shuffled per epoch with
// std::mt19937_64(seed + epoch) as SFT's conversations are; epochs follow
// each other until `num_samples` samples exist (0: one epoch).
//
// Validation when opened (claw::Error naming the file): the masks (as SFT's),
// two sequences per document, the tokens within the vocabulary, a pair in
// the split.
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

class DpoDataset final : public SampleSource {
 public:
  // pad: the token that fills a sample's end (the tokenizer's eod).
  DpoDataset(const std::string& prefix, Split split, const GptDatasetOptions& options, int32_t pad);

  int64_t num_samples() const override { return 2 * static_cast<int64_t>(order_.size()); }
  int64_t seq_length() const override { return seq_length_; }
  void get_sample(int64_t position, int32_t* tokens) const override;
  bool has_loss_mask() const override { return true; }
  void get_loss_mask(int64_t position, uint8_t* mask) const override;

  // The stored sequence sample `position` reads (an index into the whole
  // dataset, the same in every split and epoch): the key of its reference
  // log-probability. Positions past the end wrap around (a pass over every
  // pair reads whole batches).
  int64_t sequence_of(int64_t position) const;
  int64_t num_pairs() const { return documents_.size(); }
  DocumentRange documents() const { return documents_; }
  // Sequences cut at S + 1 tokens (of the split, counted once).
  int64_t num_truncated() const { return truncated_; }
  const std::string& prefix() const { return prefix_; }
  // The sequences of the whole dataset (both splits).
  int64_t num_sequences() const { return tokens_->num_sequences(); }

 private:
  std::string prefix_;
  std::shared_ptr<const IndexedDataset> tokens_, masks_;
  int64_t seq_length_;
  int32_t pad_;
  DocumentRange documents_;
  std::vector<int32_t> order_;  // pairs (documents), epoch after epoch
  int64_t truncated_ = 0;
};

}  // namespace claw::data
