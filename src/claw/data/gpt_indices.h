// The sample indices of a GPT dataset split, built the way Megatron-Core's
// GPTDataset builds them (megatron/core/datasets/gpt_dataset.py and
// helpers.cpp), with claw's own deterministic shuffles:
//
//   document_index  the split's sequences repeated for E epochs and shuffled:
//                   E is the fewest epochs whose tokens cover num_samples
//                   samples of S + 1 tokens. When the last epoch would
//                   contribute less than 80% of an epoch's samples, it is
//                   shuffled separately and appended, so every sequence is
//                   seen once before any is seen twice.
//   sample_index    [(N + 1), 2]: the documents in document_index order form
//                   one token stream; boundary i is stream position i * S as
//                   (entry in document_index, offset in that sequence).
//                   Sample i is the S + 1 tokens from boundary i through
//                   boundary i + 1: consecutive samples share one token
//                   (the last target of one is the first input of the next),
//                   so N = (E * tokens_per_epoch - 1) / S.
//   shuffle_index   a permutation of [0, N) (the separated final epoch's
//                   samples permuted among themselves, after the others).
//
// Shuffles are Fisher-Yates driven by Philox keyed by (seed, purpose), so
// the result depends only on the inputs and this code: the same on every
// rank, any thread count, any standard library.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace claw::data {

struct GptIndices {
  std::vector<int32_t> document_index;  // sequence ids (global, in the indexed dataset)
  std::vector<int64_t> sample_index;    // 2 * (N + 1): (position in document_index, token offset)
  std::vector<int64_t> shuffle_index;   // N
  int64_t num_epochs = 0;
  bool separate_final_epoch = false;
  int64_t num_samples() const { return static_cast<int64_t>(shuffle_index.size()); }
};

// sequences: the split's sequence ids; lengths[k]: token count of sequences[k].
// num_samples: samples the run will draw (0: one epoch's worth).
GptIndices build_gpt_indices(std::span<const int32_t> sequences, std::span<const int32_t> lengths,
                             int64_t seq_length, int64_t num_samples, uint64_t seed, uint64_t purpose);

// Megatron's blending: sample i of the blend comes from the dataset whose
// share so far lags its weight most (argmax of weight * max(i, 1) - taken,
// first on ties); dataset_sample_index[i] is that dataset's running count.
struct BlendingIndices {
  std::vector<int16_t> dataset_index;
  std::vector<int64_t> dataset_sample_index;
};
BlendingIndices build_blending_indices(std::span<const double> weights, int64_t size);

// Fisher-Yates over `values` with Philox keyed by (seed, purpose).
template <typename T>
void shuffle_in_place(std::span<T> values, uint64_t seed, uint64_t purpose);

}  // namespace claw::data
