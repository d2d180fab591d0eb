// The trainer's sample source over one split of a Megatron indexed dataset:
// Megatron-Core's GPTDataset (megatron/core/datasets/gpt_dataset.py).
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
// Samples and order (gpt_indices.h): the split's sequences, repeated for as
// many epochs as `num_samples` needs and shuffled, form one token stream cut
// into samples of S + 1 tokens (S = --seq-length; inputs are the first S,
// targets the last S), then the samples are shuffled. Documents are packed
// back to back with no padding; each ends in its eod token as
// preprocess_data.py --append-eod writes it, which is where packing.h finds
// the document boundaries.
//
// Cache. The three index arrays are built once and stored as .npy files in
// --data-cache-path (default: <dataset dir>/cache/GPTDataset_indices), named
// by a hash of a description of everything they depend on (dataset, its
// size, split, sequence length, sample count, seed); a later run, or another
// rank, with the same description loads them instead of rebuilding. Files
// are published by rename, so concurrent builders are safe. A read-only
// dataset directory falls back to building in memory.
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

#include "claw/data/gpt_indices.h"
#include "claw/data/indexed_dataset.h"
#include "claw/data/sample_source.h"

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
  int64_t num_samples = 0;         // samples the run will draw from this split (0: one epoch)
  std::string cache_dir;           // --data-cache-path ("": <dataset dir>/cache/GPTDataset_indices)
  bool sft = false;                // --sft: conversations kept whole with their loss masks (sft_dataset.h)
  int32_t pad_token = -1;          // with sft: what fills a sample's end (the tokenizer's eod)
};

class GptDataset final : public SampleSource {
 public:
  // Split `split` of `data` per `options`; see the header comment for the
  // checks. The split's weight must be positive (open_gpt_datasets skips
  // zero-weight splits).
  GptDataset(std::shared_ptr<const IndexedDataset> data, Split split, const GptDatasetOptions& options);

  Split split() const { return split_; }
  int64_t seq_length() const override { return seq_length_; }
  DocumentRange documents() const { return documents_; }
  int64_t num_tokens() const { return num_tokens_; }
  // At least options.num_samples (the last epoch's stream is cut whole).
  int64_t num_samples() const override { return indices_.num_samples(); }
  int64_t num_epochs() const { return indices_.num_epochs; }
  const IndexedDataset& data() const { return *data_; }
  // True if the indices came from the cache rather than being built.
  bool loaded_from_cache() const { return from_cache_; }
  // The cache files' common path stem ("" when the cache was not writable).
  const std::string& cache_stem() const { return cache_stem_; }

  void get_sample(int64_t position, int32_t* tokens) const override;

 private:
  void load_or_build_indices(const GptDatasetOptions& options);

  std::shared_ptr<const IndexedDataset> data_;
  Split split_;
  int64_t seq_length_;
  DocumentRange documents_;
  int64_t first_sequence_ = 0, end_sequence_ = 0;
  int64_t num_tokens_ = 0;
  GptIndices indices_;
  bool from_cache_ = false;
  std::string cache_stem_;
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
