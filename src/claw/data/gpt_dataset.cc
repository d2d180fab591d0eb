#include "claw/data/gpt_dataset.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "claw/core/error.h"
#include "claw/core/philox.h"
#include "claw/data/index_shuffle.h"

namespace claw::data {

std::string_view split_name(Split s) {
  switch (s) {
    case Split::train: return "train";
    case Split::valid: return "valid";
    case Split::test: return "test";
  }
  return "?";
}

std::array<double, kNumSplits> parse_split(std::string_view spec) {
  std::array<double, kNumSplits> w{};
  int count = 0;
  auto bad = [&](std::string_view why) {
    fail("--split \"{}\": {}; expected 1 to 3 non-negative weights for train,valid,test such as \"969,30,1\"", spec,
         why);
  };
  size_t pos = 0;
  while (true) {
    size_t end = spec.find_first_of(",/", pos);
    std::string_view field = spec.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos);
    if (count == kNumSplits) bad("more than 3 weights");
    double v = 0;
    auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), v);
    if (field.empty() || ec != std::errc() || ptr != field.data() + field.size())
      bad(fmt::format("\"{}\" is not a number", field));
    if (!(v >= 0) || !std::isfinite(v)) bad(fmt::format("weight {} is negative or not finite", field));
    w[count++] = v;
    if (end == std::string_view::npos) break;
    pos = end + 1;
  }
  double sum = w[0] + w[1] + w[2];
  if (!(sum > 0)) bad("the weights sum to 0");
  for (double& x : w) x /= sum;
  return w;
}

std::array<DocumentRange, kNumSplits> split_documents(const std::array<double, kNumSplits>& weights,
                                                      int64_t num_documents) {
  // Megatron: bookends = running sums of the normalised weights, boundary =
  // int(round(bookend * D)). nearbyint in the default rounding mode is
  // Python's round-half-to-even. The last boundary is pinned to D so float
  // error in the running sum can never drop the final document.
  std::array<DocumentRange, kNumSplits> r;
  double cum = 0;
  int64_t begin = 0;
  for (int k = 0; k < kNumSplits; ++k) {
    cum += weights[k];
    int64_t end = k + 1 == kNumSplits ? num_documents
                                      : static_cast<int64_t>(std::nearbyint(cum * static_cast<double>(num_documents)));
    end = std::clamp<int64_t>(end, begin, num_documents);
    r[k] = {begin, end};
    begin = end;
  }
  return r;
}

GptDataset::GptDataset(std::shared_ptr<const IndexedDataset> data, Split split, const GptDatasetOptions& options)
    : data_(std::move(data)),
      split_(split),
      seq_length_(options.seq_length),
      seed_(options.seed),
      shuffle_purpose_(hash_name(fmt::format("gpt_dataset/{}", split_name(split)))) {
  CLAW_CHECK(data_ != nullptr);
  const IndexedDataset& d = *data_;
  if (options.seq_length < 1) fail("--seq-length {} is invalid; it must be at least 1", options.seq_length);
  if (options.vocab_size < 1 || options.vocab_size > (int64_t{1} << 31))
    fail("vocabulary size {} is invalid; it must be in [1, 2^31]", options.vocab_size);
  if (!index_dtype_is_integer(d.dtype()))
    fail("{}: dtype {} does not hold token ids; GPT datasets need an integer dtype", d.idx_file(),
         index_dtype_name(d.dtype()));

  const auto weights = parse_split(options.split);
  CLAW_CHECK(weights[static_cast<int>(split)] > 0, "split {} has weight 0 in --split {}", split_name(split),
             options.split);
  documents_ = split_documents(weights, d.num_documents())[static_cast<int>(split)];
  first_sequence_ = d.document_index(documents_.begin);
  const int64_t end_sequence = d.document_index(documents_.end);

  TokenRange range = d.token_range(first_sequence_, end_sequence);
  if (range.min_sequence >= 0 && (range.min < 0 || range.max >= options.vocab_size)) {
    bool low = range.min < 0;
    fail("{}: token id {} in sequence {} is outside the vocabulary [0, {}); the data was tokenized for a different "
         "vocabulary",
         d.bin_file(), low ? range.min : range.max, low ? range.min_sequence : range.max_sequence,
         options.vocab_size);
  }

  offsets_.resize(end_sequence - first_sequence_ + 1);
  offsets_[0] = 0;
  for (int64_t i = first_sequence_; i < end_sequence; ++i)
    offsets_[i - first_sequence_ + 1] = offsets_[i - first_sequence_] + d.sequence_length(i);
  const int64_t tokens = offsets_.back();
  if (tokens < seq_length_ + 1)
    fail("--split {}: the {} split has {} tokens in {} documents of {}, fewer than the {} that one sample of "
         "--seq-length {} needs; give the split a larger weight or use a shorter --seq-length",
         options.split, split_name(split), tokens, documents_.size(), d.prefix(), seq_length_ + 1, seq_length_);
  num_samples_ = (tokens - 1) / seq_length_;
}

int64_t GptDataset::sample_at(int64_t position) const {
  CLAW_CHECK(position >= 0, "position {}", position);
  const uint64_t n = static_cast<uint64_t>(num_samples_), p = static_cast<uint64_t>(position);
  const uint64_t epoch = p / n;
  // One independent permutation per (split, epoch); adding the epoch to the
  // purpose gives distinct Philox keys (RandomStream multiplies the purpose
  // by an odd constant, a bijection).
  return static_cast<int64_t>(IndexShuffle(n, seed_, shuffle_purpose_ + epoch)(p % n));
}

void GptDataset::get_sample(int64_t sample, int32_t* tokens) const {
  CLAW_CHECK(sample >= 0 && sample < num_samples_, "sample {} of {}", sample, num_samples_);
  int64_t pos = sample * seq_length_, need = seq_length_ + 1;
  // The sequence holding stream offset `pos`: the last with offset <= pos.
  auto it = std::upper_bound(offsets_.begin(), offsets_.end(), pos) - 1;
  int64_t k = it - offsets_.begin();
  while (need > 0) {
    CLAW_CHECK(k + 1 < static_cast<int64_t>(offsets_.size()), "sample {} runs past the split", sample);
    int64_t in_seq = pos - offsets_[k];
    int64_t take = std::min(need, offsets_[k + 1] - pos);
    data_->read_tokens(first_sequence_ + k, in_seq, take, tokens);
    tokens += take;
    pos += take;
    need -= take;
    ++k;
  }
}

void GptDataset::get_batch(int64_t first_position, int64_t count, int32_t* tokens, int32_t* targets) const {
  CLAW_CHECK(first_position >= 0 && count >= 0, "positions [{}, +{})", first_position, count);
  const int64_t S = seq_length_;
  std::vector<int32_t> buf(S + 1);
  for (int64_t b = 0; b < count; ++b) {
    get_sample(sample_at(first_position + b), buf.data());
    std::copy(buf.begin(), buf.end() - 1, tokens + b * S);
    std::copy(buf.begin() + 1, buf.end(), targets + b * S);
  }
}

GptDatasets open_gpt_datasets(const std::string& prefix, const GptDatasetOptions& options) {
  GptDatasets out;
  out.data = std::make_shared<const IndexedDataset>(prefix);
  const auto weights = parse_split(options.split);
  for (int k = 0; k < kNumSplits; ++k)
    if (weights[k] > 0) out.splits[k].emplace(out.data, static_cast<Split>(k), options);
  return out;
}

}  // namespace claw::data
