// The trainer's sample source: Megatron-Core's GPTDataset
// (megatron/core/datasets/gpt_dataset.py) simplified to one indexed dataset
// and one pass definition.
//
// Splits. --split "969,30,1" gives train/valid/test weights (one to three
// numbers, separated by ',' or '/', missing ones 0), normalised to sum 1.
// With D documents and cumulative fractions c_0 = 0, c_1, c_2, c_3 = 1,
// split k owns documents [round(c_k * D), round(c_{k+1} * D)): contiguous,
// disjoint, covering every document, rounded half-to-even like Megatron's
// Python round(). Megatron splits the indexed dataset's sequences; claw
// splits its documents, which is the same for preprocess_data.py output
// (one sequence per document) and never cuts a document otherwise.
//
// Samples. A split's documents (each already ending in its eod token, as
// preprocess_data.py --append-eod writes them) are one token stream of T
// tokens. Sample i is tokens [i*S, i*S + S + 1) with S = --seq-length: the
// model reads the first S as inputs and predicts the last S as targets, so
// targets are the inputs shifted by one. There are (T - 1) / S samples (the
// "+1" token of the last sample must exist); the remainder of the stream is
// unused, as in Megatron.
//
// Order. Position p of the training stream is sample shuffle_e(p mod N) of
// epoch e = p / N, where shuffle_e is an IndexShuffle keyed by --seed, the
// split and e: every epoch visits every sample once, in an order fixed by
// the seed and independent of the number of ranks or threads. Data-parallel
// ranks take disjoint position ranges of the same stream.
//
// Validation when a split is opened: the dtype holds integers; every token
// of its documents is in [0, vocab_size) (one vectorisable min/max pass
// over the mapping); the split has at least S + 1 tokens. Each failure is a
// claw::Error naming the file or flag and the valid range.
//
// Thread-safety: immutable after construction; get_sample and get_batch may
// run concurrently on one dataset.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "claw/data/indexed_dataset.h"

namespace claw::data {

enum class Split { train = 0, valid = 1, test = 2 };
inline constexpr int kNumSplits = 3;
std::string_view split_name(Split s);

// Parses a --split string into three normalised weights; claw::Error naming
// --split for anything but 1-3 non-negative numbers with a positive sum.
std::array<double, kNumSplits> parse_split(std::string_view spec);

struct DocumentRange {
  int64_t begin = 0, end = 0;  // documents [begin, end)
  int64_t size() const { return end - begin; }
};

// Megatron's rounding of cumulative weights to document boundaries.
std::array<DocumentRange, kNumSplits> split_documents(const std::array<double, kNumSplits>& weights,
                                                      int64_t num_documents);

struct GptDatasetOptions {
  std::string split = "969,30,1";  // --split: train,valid,test weights
  int64_t seq_length = 0;          // --seq-length: tokens per sample (inputs)
  int64_t vocab_size = 0;          // every token must be below this (the model's vocabulary)
  uint64_t seed = 1234;            // --seed: sample order
};

class GptDataset {
 public:
  // Split `split` of `data` per `options`; see the header comment for the
  // checks. The split's weight must be positive (open_gpt_datasets skips
  // zero-weight splits).
  GptDataset(std::shared_ptr<const IndexedDataset> data, Split split, const GptDatasetOptions& options);

  Split split() const { return split_; }
  int64_t seq_length() const { return seq_length_; }
  DocumentRange documents() const { return documents_; }
  int64_t num_tokens() const { return offsets_.back(); }
  int64_t num_samples() const { return num_samples_; }
  const IndexedDataset& data() const { return *data_; }

  // The sample at `position` of the shuffled stream (any position >= 0;
  // positions past num_samples() continue into later epochs).
  int64_t sample_at(int64_t position) const;

  // Tokens [i*S, i*S + S + 1) of the split's stream, unshuffled sample i.
  void get_sample(int64_t sample, int32_t* tokens) const;

  // Samples at positions [first_position, first_position + count) of the
  // shuffled stream: tokens[b*S + t] is input t of the b-th, targets[b*S + t]
  // its next token. Both buffers hold count * S ids.
  void get_batch(int64_t first_position, int64_t count, int32_t* tokens, int32_t* targets) const;

 private:
  std::shared_ptr<const IndexedDataset> data_;
  Split split_;
  int64_t seq_length_;
  uint64_t seed_;
  uint64_t shuffle_purpose_;  // Philox purpose of epoch 0's order; epoch e uses + e
  DocumentRange documents_;
  int64_t first_sequence_ = 0;
  std::vector<int64_t> offsets_;  // stream offset of each of the split's sequences, plus the total
  int64_t num_samples_ = 0;
};

// Opens the dataset at `prefix` and every split with a positive weight
// (others stay empty), validating all before returning.
struct GptDatasets {
  std::shared_ptr<const IndexedDataset> data;
  std::array<std::optional<GptDataset>, kNumSplits> splits;

  const std::optional<GptDataset>& operator[](Split s) const { return splits[static_cast<int>(s)]; }
};
GptDatasets open_gpt_datasets(const std::string& prefix, const GptDatasetOptions& options);

}  // namespace claw::data
