#include "claw/data/blended_dataset.h"

#include <charconv>
#include <cmath>

#include "claw/core/error.h"
#include "claw/data/sft_dataset.h"

namespace claw::data {

namespace {
bool parse_weight(const std::string& s, double& v) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && end == s.data() + s.size();
}
}  // namespace

BlendSpec parse_data_path(const std::vector<std::string>& words) {
  if (words.empty()) fail("--data-path is empty; give PREFIX, or weights and prefixes: W1 PREFIX1 W2 PREFIX2 ...");
  BlendSpec spec;
  double first = 0;
  if (!parse_weight(words[0], first)) {
    // Prefixes only: equal weights.
    for (const auto& w : words) {
      double unused;
      if (parse_weight(w, unused))
        fail("--data-path mixes weights and bare prefixes ('{}'); give a weight before every prefix or none", w);
      spec.prefixes.push_back(w);
    }
    spec.weights.assign(words.size(), 1.0 / static_cast<double>(words.size()));
    return spec;
  }
  if (words.size() % 2 != 0)
    fail("--data-path has {} words; weighted blends are pairs: W1 PREFIX1 W2 PREFIX2 ...", words.size());
  double sum = 0;
  for (size_t i = 0; i < words.size(); i += 2) {
    double w = 0;
    if (!parse_weight(words[i], w) || !(w > 0) || !std::isfinite(w))
      fail("--data-path: '{}' (before {}) is not a positive weight", words[i], words[i + 1]);
    spec.weights.push_back(w);
    spec.prefixes.push_back(words[i + 1]);
    sum += w;
  }
  for (double& w : spec.weights) w /= sum;
  return spec;
}

BlendedDataset::BlendedDataset(std::vector<std::unique_ptr<SampleSource>> datasets, std::vector<double> weights,
                               int64_t size)
    : datasets_(std::move(datasets)), index_(build_blending_indices(weights, size)) {
  CLAW_CHECK(!datasets_.empty() && datasets_.size() == weights.size());
  for (size_t k = 1; k < datasets_.size(); ++k)
    CLAW_CHECK(datasets_[k]->seq_length() == datasets_[0]->seq_length());
  std::vector<int64_t> need = samples_per_dataset();
  for (size_t k = 0; k < datasets_.size(); ++k)
    CLAW_CHECK(need[k] <= datasets_[k]->num_samples(), "dataset {} of the blend has {} samples, the blend takes {}",
               k, datasets_[k]->num_samples(), need[k]);
}

std::vector<int64_t> BlendedDataset::samples_per_dataset() const {
  std::vector<int64_t> n(datasets_.size(), 0);
  for (int16_t d : index_.dataset_index) ++n[d];
  return n;
}

void BlendedDataset::get_sample(int64_t position, int32_t* tokens) const {
  CLAW_CHECK(position >= 0 && position < num_samples(), "sample position {} of {}", position, num_samples());
  datasets_[index_.dataset_index[position]]->get_sample(index_.dataset_sample_index[position], tokens);
}

void BlendedDataset::get_loss_mask(int64_t position, uint8_t* mask) const {
  CLAW_CHECK(position >= 0 && position < num_samples(), "sample position {} of {}", position, num_samples());
  datasets_[index_.dataset_index[position]]->get_loss_mask(index_.dataset_sample_index[position], mask);
}

std::unique_ptr<SampleSource> build_split_source(const BlendSpec& spec, Split split,
                                                 const GptDatasetOptions& options) {
  auto open = [&](const std::string& prefix, const GptDatasetOptions& o) -> std::unique_ptr<SampleSource> {
    if (o.sft) return std::make_unique<SftDataset>(prefix, split, o, o.pad_token);
    return std::make_unique<GptDataset>(std::make_shared<const IndexedDataset>(prefix), split, o);
  };
  if (spec.prefixes.size() == 1) return open(spec.prefixes[0], options);
  CLAW_CHECK(options.num_samples > 0, "a blend needs the number of samples to draw");
  std::vector<std::unique_ptr<SampleSource>> parts;
  for (size_t k = 0; k < spec.prefixes.size(); ++k) {
    GptDatasetOptions o = options;
    o.num_samples = static_cast<int64_t>(std::ceil(spec.weights[k] * static_cast<double>(options.num_samples) * 1.005));
    parts.push_back(open(spec.prefixes[k], o));
  }
  return std::make_unique<BlendedDataset>(std::move(parts), spec.weights, options.num_samples);
}

}  // namespace claw::data
