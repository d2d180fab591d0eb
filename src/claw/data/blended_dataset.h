// Weighted blends of datasets, as Megatron-Core's BlendedMegatronDatasetBuilder
// and BlendedDataset build them:
//
//   --data-path PREFIX                  one dataset
//   --data-path W1 PREFIX1 W2 PREFIX2   weights (normalised to sum 1)
//   --data-path PREFIX1 PREFIX2         equal weights
//
// For each split, dataset k gets its own GptDataset asked for
// ceil(w_k * N * 1.005) samples (Megatron's 0.5% margin, so rounding in the
// blend never runs a dataset dry), and sample i of the blend is sample
// dataset_sample_index[i] of dataset dataset_index[i] (gpt_indices.h's
// build_blending_indices: each sample goes to the dataset furthest behind
// its weight). The blending index is O(N * datasets) to build and
// deterministic, so unlike the shuffled GPT indices it is not cached.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "claw/data/gpt_dataset.h"
#include "claw/data/sample_source.h"

namespace claw::data {

struct BlendSpec {
  std::vector<std::string> prefixes;
  std::vector<double> weights;  // normalised
};

// Parses --data-path's words; claw::Error naming --data-path otherwise.
BlendSpec parse_data_path(const std::vector<std::string>& words);

class BlendedDataset final : public SampleSource {
 public:
  // datasets[k] must provide at least the samples the blend takes from it.
  BlendedDataset(std::vector<std::unique_ptr<SampleSource>> datasets, std::vector<double> weights, int64_t size);

  int64_t num_samples() const override { return static_cast<int64_t>(index_.dataset_index.size()); }
  int64_t seq_length() const override { return datasets_.front()->seq_length(); }
  void get_sample(int64_t position, int32_t* tokens) const override;
  bool has_loss_mask() const override { return datasets_.front()->has_loss_mask(); }
  void get_loss_mask(int64_t position, uint8_t* mask) const override;

  // How many of the blend's samples come from each dataset.
  std::vector<int64_t> samples_per_dataset() const;

 private:
  std::vector<std::unique_ptr<SampleSource>> datasets_;
  BlendingIndices index_;
};

// The sample source of one split: the dataset itself for a single one,
// else a BlendedDataset over each dataset's split. options.num_samples is
// the number of samples the run draws from the split (0: one epoch of a
// single dataset; a blend needs it). With options.sft each dataset is an
// SftDataset padded with options.pad_token.
std::unique_ptr<SampleSource> build_split_source(const BlendSpec& spec, Split split,
                                                 const GptDatasetOptions& options);

}  // namespace claw::data
