#include "claw/data/gpt_indices.h"

#include <algorithm>
#include <numeric>

#include "claw/core/error.h"
#include "claw/core/philox.h"

namespace claw::data {

template <typename T>
void shuffle_in_place(std::span<T> values, uint64_t seed, uint64_t purpose) {
  RandomStream rng(seed, purpose);
  for (int64_t i = static_cast<int64_t>(values.size()) - 1; i > 0; --i) {
    // Uniform j in [0, i] from 64 random bits: the modulo bias is below
    // i / 2^64, negligible for any array that fits in memory.
    Philox::Block b = rng.block(static_cast<uint64_t>(i));
    uint64_t r = (static_cast<uint64_t>(b[0]) << 32) | b[1];
    std::swap(values[i], values[r % static_cast<uint64_t>(i + 1)]);
  }
}
template void shuffle_in_place<int32_t>(std::span<int32_t>, uint64_t, uint64_t);
template void shuffle_in_place<int64_t>(std::span<int64_t>, uint64_t, uint64_t);

namespace {

// Purposes of the three shuffles, derived from the caller's purpose.
uint64_t sub_purpose(uint64_t purpose, const char* what) { return purpose ^ hash_name(what); }

std::vector<int32_t> build_document_index(std::span<const int32_t> sequences, int64_t epochs, bool separate_final,
                                          uint64_t seed, uint64_t purpose) {
  const int64_t n = static_cast<int64_t>(sequences.size());
  std::vector<int32_t> idx(epochs * n);
  for (int64_t e = 0; e < epochs; ++e) std::copy(sequences.begin(), sequences.end(), idx.begin() + e * n);
  if (!separate_final || epochs == 1) {
    shuffle_in_place<int32_t>(idx, seed, sub_purpose(purpose, "document_index"));
  } else {
    const int64_t first = (epochs - 1) * n;
    shuffle_in_place<int32_t>(std::span(idx).first(first), seed, sub_purpose(purpose, "document_index"));
    shuffle_in_place<int32_t>(std::span(idx).subspan(first), seed, sub_purpose(purpose, "document_index.final"));
  }
  return idx;
}

}  // namespace

GptIndices build_gpt_indices(std::span<const int32_t> sequences, std::span<const int32_t> lengths,
                             int64_t seq_length, int64_t num_samples, uint64_t seed, uint64_t purpose) {
  CLAW_CHECK(sequences.size() == lengths.size() && !sequences.empty() && seq_length > 0);
  const int64_t S = seq_length;
  const int64_t tokens_per_epoch = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  CLAW_CHECK(tokens_per_epoch > S, "{} tokens cannot make a sample of {}", tokens_per_epoch, S + 1);
  const int64_t per_epoch = (tokens_per_epoch - 1) / S;
  if (num_samples <= 0) num_samples = per_epoch;

  GptIndices r;
  // Fewest epochs whose token stream holds num_samples samples (plus the
  // one extra token the last target needs).
  r.num_epochs = 1;
  while (r.num_epochs * tokens_per_epoch < num_samples * S + 1) ++r.num_epochs;
  int64_t sans_final = 0;
  if (r.num_epochs > 1) {
    sans_final = ((r.num_epochs - 1) * tokens_per_epoch - 1) / S;
    r.separate_final_epoch = num_samples - sans_final < static_cast<int64_t>(0.8 * static_cast<double>(per_epoch));
  }
  r.document_index = build_document_index(sequences, r.num_epochs, r.separate_final_epoch, seed, purpose);

  // Length of each document_index entry, for the walk below.
  std::vector<int32_t> entry_length(r.document_index.size());
  {
    std::vector<std::pair<int32_t, int32_t>> id_len(sequences.size());
    for (size_t k = 0; k < sequences.size(); ++k) id_len[k] = {sequences[k], lengths[k]};
    std::sort(id_len.begin(), id_len.end());
    for (size_t p = 0; p < r.document_index.size(); ++p)
      entry_length[p] =
          std::lower_bound(id_len.begin(), id_len.end(), std::make_pair(r.document_index[p], INT32_MIN))->second;
  }

  // Boundary i is stream position i * S as (entry, offset < entry length).
  // Position N * S <= total - 1, so the walk never leaves the stream.
  const int64_t N = (r.num_epochs * tokens_per_epoch - 1) / S;
  r.sample_index.assign(2 * (N + 1), 0);
  int64_t entry = 0, offset = 0;
  for (int64_t i = 1; i <= N; ++i) {
    int64_t remaining = S;
    while (offset + remaining >= entry_length[entry]) {
      remaining -= entry_length[entry] - offset;
      ++entry;
      offset = 0;
    }
    offset += remaining;
    r.sample_index[2 * i] = entry;
    r.sample_index[2 * i + 1] = offset;
  }

  r.shuffle_index.resize(N);
  std::iota(r.shuffle_index.begin(), r.shuffle_index.end(), int64_t{0});
  const int64_t first = r.separate_final_epoch ? std::min(sans_final, N) : N;
  shuffle_in_place<int64_t>(std::span(r.shuffle_index).first(first), seed, sub_purpose(purpose, "shuffle_index"));
  shuffle_in_place<int64_t>(std::span(r.shuffle_index).subspan(first), seed,
                            sub_purpose(purpose, "shuffle_index.final"));
  return r;
}

BlendingIndices build_blending_indices(std::span<const double> weights, int64_t size) {
  CLAW_CHECK(!weights.empty() && weights.size() < 32768);
  BlendingIndices r;
  r.dataset_index.resize(size);
  r.dataset_sample_index.resize(size);
  std::vector<int64_t> taken(weights.size(), 0);
  for (int64_t i = 0; i < size; ++i) {
    const double at = std::max(static_cast<double>(i), 1.0);
    size_t best = 0;
    double best_err = weights[0] * at - static_cast<double>(taken[0]);
    for (size_t d = 1; d < weights.size(); ++d) {
      double err = weights[d] * at - static_cast<double>(taken[d]);
      if (err > best_err) {
        best_err = err;
        best = d;
      }
    }
    r.dataset_index[i] = static_cast<int16_t>(best);
    r.dataset_sample_index[i] = taken[best]++;
  }
  return r;
}

}  // namespace claw::data
