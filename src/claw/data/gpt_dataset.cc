#include "claw/data/gpt_dataset.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <charconv>
#include <cmath>

#include <nlohmann/json.hpp>

#include "claw/core/error.h"
#include "claw/core/philox.h"
#include "claw/core/log.h"
#include "claw/data/file_io.h"
#include "claw/data/npy.h"

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
    : data_(std::move(data)), split_(split), seq_length_(options.seq_length) {
  CLAW_CHECK(data_ != nullptr);
  const IndexedDataset& d = *data_;
  if (options.seq_length < 1) fail("--seq-length {} is invalid; it must be at least 1", options.seq_length);
  if (options.vocab_size < 1 || options.vocab_size > (int64_t{1} << 31))
    fail("vocabulary size {} is invalid; it must be in [1, 2^31]", options.vocab_size);
  if (options.num_samples < 0) fail("a dataset split cannot provide {} samples", options.num_samples);
  if (!index_dtype_is_integer(d.dtype()))
    fail("{}: dtype {} does not hold token ids; GPT datasets need an integer dtype", d.idx_file(),
         index_dtype_name(d.dtype()));

  const auto weights = parse_split(options.split);
  CLAW_CHECK(weights[static_cast<int>(split)] > 0, "split {} has weight 0 in --split {}", split_name(split),
             options.split);
  documents_ = split_documents(weights, d.num_documents())[static_cast<int>(split)];
  first_sequence_ = d.document_index(documents_.begin);
  end_sequence_ = d.document_index(documents_.end);

  TokenRange range = d.token_range(first_sequence_, end_sequence_);
  if (range.min_sequence >= 0 && (range.min < 0 || range.max >= options.vocab_size)) {
    bool low = range.min < 0;
    fail("{}: token id {} in sequence {} is outside the vocabulary [0, {}); the data was tokenized for a different "
         "vocabulary",
         d.bin_file(), low ? range.min : range.max, low ? range.min_sequence : range.max_sequence,
         options.vocab_size);
  }
  for (int64_t i = first_sequence_; i < end_sequence_; ++i) num_tokens_ += d.sequence_length(i);
  if (num_tokens_ < seq_length_ + 1)
    fail("--split {}: the {} split has {} tokens in {} documents of {}, fewer than the {} that one sample of "
         "--seq-length {} needs; give the split a larger weight or use a shorter --seq-length",
         options.split, split_name(split), num_tokens_, documents_.size(), d.prefix(), seq_length_ + 1, seq_length_);
  load_or_build_indices(options);
}

namespace {
std::string dirname(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

bool make_dirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  return !ec && ::access(dir.c_str(), W_OK) == 0;
}
}  // namespace

void GptDataset::load_or_build_indices(const GptDatasetOptions& options) {
  const IndexedDataset& d = *data_;
  // Everything the indices depend on; a change to any of it is a new cache entry.
  nlohmann::ordered_json desc = {{"class", "GPTDataset"},
                                 {"format", 1},
                                 {"dataset_path", d.prefix()},
                                 {"num_sequences", d.num_sequences()},
                                 {"num_documents", d.num_documents()},
                                 {"total_tokens", d.total_tokens()},
                                 {"split", split_name(split_)},
                                 {"split_sequences", {first_sequence_, end_sequence_}},
                                 {"sequence_length", seq_length_},
                                 {"num_samples", options.num_samples},
                                 {"random_seed", options.seed}};
  const std::string description = desc.dump(2);
  const std::string dir = options.cache_dir.empty() ? dirname(d.prefix()) + "/cache/GPTDataset_indices"
                                                    : options.cache_dir;
  const std::string stem =
      fmt::format("{}/{:016x}-GPTDataset-{}", dir, hash_name(description), split_name(split_));

  // The description file is written last, so its presence with the same
  // content means the three arrays next to it are complete.
  if (path_exists(stem + "-description.txt") && read_file(stem + "-description.txt", "index description") == description) {
    indices_.document_index = read_npy<int32_t>(stem + "-document_index.npy");
    int64_t cols = 0;
    indices_.sample_index = read_npy<int64_t>(stem + "-sample_index.npy", &cols);
    indices_.shuffle_index = read_npy<int64_t>(stem + "-shuffle_index.npy");
    const int64_t n = indices_.num_samples();
    CLAW_CHECK(cols == 2 && static_cast<int64_t>(indices_.sample_index.size()) == 2 * (n + 1),
               "{}: inconsistent cached indices; delete them to rebuild", stem);
    indices_.num_epochs = static_cast<int64_t>(indices_.document_index.size()) / (end_sequence_ - first_sequence_);
    from_cache_ = true;
    cache_stem_ = stem;
    log::info("data", "{} {} split: {} samples over {} epoch(s), indices loaded from {}-*", d.prefix(),
              split_name(split_), n, indices_.num_epochs, stem);
    return;
  }

  std::vector<int32_t> sequences, lengths;
  for (int64_t i = first_sequence_; i < end_sequence_; ++i) {
    sequences.push_back(static_cast<int32_t>(i));
    lengths.push_back(static_cast<int32_t>(d.sequence_length(i)));
  }
  indices_ = build_gpt_indices(sequences, lengths, seq_length_, options.num_samples, options.seed,
                               hash_name(fmt::format("gpt_dataset/{}", split_name(split_))));
  if (!make_dirs(dir)) {
    log::warn("data", "cannot write the index cache {} (set --data-cache-path to a writable directory); "
              "the {} indices are rebuilt on every start", dir, split_name(split_));
    return;
  }
  log::info("data", "{} {} split: {} samples over {} epoch(s), indices built and cached in {}-*", d.prefix(),
            split_name(split_), indices_.num_samples(), indices_.num_epochs, stem);
  write_npy(stem + "-document_index.npy", indices_.document_index);
  write_npy(stem + "-sample_index.npy", indices_.sample_index, 2);
  write_npy(stem + "-shuffle_index.npy", indices_.shuffle_index);
  TempFileWriter w(stem + "-description.txt");
  w.write(description.data(), description.size());
  w.commit();
  cache_stem_ = stem;
}

void GptDataset::get_sample(int64_t position, int32_t* tokens) const {
  CLAW_CHECK(position >= 0 && position < num_samples(), "sample position {} of {}", position, num_samples());
  const int64_t i = indices_.shuffle_index[position];
  int64_t entry = indices_.sample_index[2 * i], offset = indices_.sample_index[2 * i + 1];
  int64_t need = seq_length_ + 1;
  while (need > 0) {
    const int64_t seq = indices_.document_index[entry];
    const int64_t take = std::min(need, data_->sequence_length(seq) - offset);
    data_->read_tokens(seq, offset, take, tokens);
    tokens += take;
    need -= take;
    ++entry;
    offset = 0;
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
