// GPT sample source: --split parsing and rounding, the shuffle permutation,
// sample contents, epochs, the index cache, determinism, and validation errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "claw/data/gpt_dataset.h"
#include "claw/data/blended_dataset.h"
#include "claw/data/gpt_indices.h"
#include "claw/data/packing.h"
#include "claw/data/indexed_dataset.h"
#include "expect_error.h"
#include "temp_dir.h"

namespace claw::data {
namespace {

using claw::testing::TempDir;

TEST(Split, ParsesAndNormalises) {
  auto w = parse_split("969,30,1");
  EXPECT_DOUBLE_EQ(w[0], 0.969);
  EXPECT_DOUBLE_EQ(w[1], 0.030);
  EXPECT_DOUBLE_EQ(w[2], 0.001);
  w = parse_split("98/2");
  EXPECT_DOUBLE_EQ(w[0], 0.98);
  EXPECT_DOUBLE_EQ(w[2], 0.0);
  w = parse_split("1");
  EXPECT_DOUBLE_EQ(w[0], 1.0);
  w = parse_split("0.5,0.25,0.25");
  EXPECT_DOUBLE_EQ(w[1], 0.25);
}

TEST(Split, RejectsBadSpecs) {
  EXPECT_CLAW_ERROR(parse_split("90,x,10"), "--split", "\"x\"", "969,30,1");
  EXPECT_CLAW_ERROR(parse_split("1,2,3,4"), "--split", "more than 3");
  EXPECT_CLAW_ERROR(parse_split("0,0"), "--split", "sum to 0");
  EXPECT_CLAW_ERROR(parse_split("90,-5,15"), "--split");
  EXPECT_CLAW_ERROR(parse_split(""), "--split");
  EXPECT_CLAW_ERROR(parse_split("90,,10"), "--split");
}

TEST(Split, RoundsLikeMegatron) {
  // Megatron: int(round(bookend * D)), Python's round-half-to-even.
  auto r = split_documents(parse_split("969,30,1"), 233);  // 225.777 -> 226, 232.767 -> 233
  EXPECT_EQ(r[0].begin, 0);
  EXPECT_EQ(r[0].end, 226);
  EXPECT_EQ(r[1].end, 233);
  EXPECT_EQ(r[2].size(), 0);
  r = split_documents(parse_split("25,50,25"), 10);  // 2.5 -> 2, 7.5 -> 8
  EXPECT_EQ(r[0].end, 2);
  EXPECT_EQ(r[1].end, 8);
  EXPECT_EQ(r[2].end, 10);
  r = split_documents(parse_split("1,1,1"), 100);  // 33.33 -> 33, 66.67 -> 67
  EXPECT_EQ(r[0].end, 33);
  EXPECT_EQ(r[1].end, 67);
  EXPECT_EQ(r[2].end, 100);
}

TEST(Shuffle, IsASeededPermutation) {
  for (int64_t n : {1, 2, 3, 17, 1000}) {
    std::vector<int64_t> v(n);
    std::iota(v.begin(), v.end(), 0);
    auto a = v, b = v, c = v;
    shuffle_in_place<int64_t>(a, 1, 2);
    shuffle_in_place<int64_t>(b, 1, 2);
    shuffle_in_place<int64_t>(c, 3, 2);
    EXPECT_EQ(a, b);
    auto sorted = a;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, v);
    if (n == 1000) {
      int fixed = 0, same = 0;
      for (int64_t i = 0; i < n; ++i) {
        fixed += a[i] == i;
        same += a[i] == c[i];
      }
      // Random permutations agree with the identity, or each other, in ~1 place.
      EXPECT_LT(fixed, 10);
      EXPECT_LT(same, 10);
    }
  }
}

// Megatron's greedy blending keeps every prefix of the blend within one
// sample of its weights.
TEST(Blending, FollowsTheWeights) {
  const std::vector<double> w = {0.2, 0.5, 0.3};
  BlendingIndices b = build_blending_indices(w, 1000);
  std::vector<int64_t> taken(3, 0);
  for (int64_t i = 0; i < 1000; ++i) {
    const int d = b.dataset_index[i];
    EXPECT_EQ(b.dataset_sample_index[i], taken[d]) << "each dataset is read in order";
    ++taken[d];
    for (int k = 0; k < 3; ++k) EXPECT_LE(std::abs(taken[k] - w[k] * (i + 1)), 1.0) << i;
  }
  EXPECT_EQ(taken, (std::vector<int64_t>{200, 500, 300}));
}

// 20 documents; document d has 10 + 3*d tokens and ends with eod = 0; other
// tokens encode (document, position) as 1 + d * 1000 + position, so each
// token says where it came from.
constexpr int kDocs = 20;
constexpr int32_t kVocab = 20000;
std::vector<std::vector<int32_t>> make_docs() {
  std::vector<std::vector<int32_t>> docs;
  for (int d = 0; d < kDocs; ++d) {
    std::vector<int32_t> doc(10 + 3 * d);
    for (size_t p = 0; p + 1 < doc.size(); ++p) doc[p] = 1 + d * 1000 + static_cast<int32_t>(p);
    doc.back() = 0;
    docs.push_back(doc);
  }
  return docs;
}

std::string write_docs(const TempDir& dir, const std::vector<std::vector<int32_t>>& docs,
                       IndexDType dtype = IndexDType::u16) {
  std::string prefix = dir / "docs";
  IndexedDatasetBuilder b(prefix, dtype);
  for (const auto& doc : docs) b.add_document(doc);
  b.finalize();
  return prefix;
}

GptDatasetOptions options(std::string split, int64_t seq, uint64_t seed = 1234) {
  GptDatasetOptions o;
  o.split = std::move(split);
  o.seq_length = seq;
  o.vocab_size = kVocab;
  o.seed = seed;
  return o;
}

// Every adjacent pair of tokens in a sample is a step inside one document
// (d, p) -> (d, p + 1), a document's last token -> its eod, or an eod -> the
// first token of some document: samples are windows of a stream of whole
// documents.
void expect_whole_document_stream(const std::vector<int32_t>& sample) {
  for (size_t i = 0; i + 1 < sample.size(); ++i) {
    int32_t a = sample[i], b = sample[i + 1];
    if (a == 0) {
      EXPECT_EQ((b - 1) % 1000, 0) << "after an eod comes the first token of a document, got " << b;
    } else if (b != 0) {
      EXPECT_EQ(b, a + 1) << "inside a document tokens are consecutive";
    } else {
      int d = (a - 1) / 1000, p = (a - 1) % 1000;
      EXPECT_EQ(p, 10 + 3 * d - 2) << "eod follows the document's last token";
    }
  }
}

TEST(GptDataset, OneEpochCoversTheSplitOnceInWholeDocuments) {
  TempDir dir;
  const auto docs = make_docs();
  const std::string prefix = write_docs(dir, docs);
  GptDatasets ds = open_gpt_datasets(prefix, options("60,20,20", 16));
  for (int k = 0; k < kNumSplits; ++k) {
    ASSERT_TRUE(ds.splits[k].has_value());
    const GptDataset& s = *ds.splits[k];
    int64_t tokens = 0;
    std::multiset<int32_t> split_tokens;
    for (int64_t d = s.documents().begin; d < s.documents().end; ++d) {
      tokens += static_cast<int64_t>(docs[d].size());
      for (int32_t t : docs[d])
        if (t != 0) split_tokens.insert(t);
    }
    EXPECT_EQ(s.num_tokens(), tokens);
    EXPECT_EQ(s.num_epochs(), 1);
    EXPECT_EQ(s.num_samples(), (tokens - 1) / 16);
    // Samples overlap by their boundary token; without it each stream
    // position is seen once, all but the stream's last (tokens - 1) % 16 + 1.
    std::multiset<int32_t> seen;
    std::vector<int32_t> sample(17);
    for (int64_t i = 0; i < s.num_samples(); ++i) {
      s.get_sample(i, sample.data());
      expect_whole_document_stream(sample);
      for (int t = 0; t < 16; ++t)
        if (sample[t] != 0) seen.insert(sample[t]);
    }
    for (int32_t t : seen) EXPECT_EQ(split_tokens.count(t), 1u) << t;
    EXPECT_EQ(std::set<int32_t>(seen.begin(), seen.end()).size(), seen.size()) << "a position seen twice";
    EXPECT_GE(static_cast<int64_t>(seen.size()), static_cast<int64_t>(split_tokens.size()) - 16);
  }
  // 60,20,20 of 20 documents: [0, 12), [12, 16), [16, 20).
  EXPECT_EQ(ds[Split::train]->documents().end, 12);
  EXPECT_EQ(ds[Split::valid]->documents().begin, 12);
  EXPECT_EQ(ds[Split::test]->documents().begin, 16);
}

// Megatron's epochs: enough epochs for the requested samples; an epoch of
// which less than 80% is used is shuffled separately, so the epochs before
// it are seen in full before any of it.
TEST(GptDataset, EpochsForTheRequestedSamples) {
  TempDir dir;
  const std::string prefix = write_docs(dir, make_docs());
  GptDatasetOptions o = options("1", 8);
  GptDataset one(std::make_shared<const IndexedDataset>(prefix), Split::train, o);
  const int64_t per_epoch = one.num_samples();
  o.num_samples = 3 * per_epoch;
  GptDataset three(std::make_shared<const IndexedDataset>(prefix), Split::train, o);
  EXPECT_EQ(three.num_epochs(), 3);
  EXPECT_GE(three.num_samples(), 3 * per_epoch);
  std::map<int32_t, int> count;
  std::vector<int32_t> sample(9);
  for (int64_t i = 0; i < three.num_samples(); ++i) {
    three.get_sample(i, sample.data());
    expect_whole_document_stream(sample);
    for (int t = 0; t < 8; ++t)
      if (sample[t] != 0) ++count[sample[t]];
  }
  int full = 0;
  for (auto [t, c] : count) {
    EXPECT_LE(c, 3);
    full += c == 3;
  }
  EXPECT_GT(full, static_cast<int>(count.size()) - 8);  // all but the stream's tail, three times

  o.num_samples = per_epoch + per_epoch / 2;  // half of the second epoch: below 80%
  GptDataset half(std::make_shared<const IndexedDataset>(prefix), Split::train, o);
  EXPECT_EQ(half.num_epochs(), 2);
  std::map<int32_t, int> first;
  for (int64_t i = 0; i < per_epoch - 1; ++i) {  // positions of the first epoch (boundary samples aside)
    half.get_sample(i, sample.data());
    for (int t = 0; t < 8; ++t)
      if (sample[t] != 0) {
        EXPECT_EQ(++first[sample[t]], 1) << "token seen twice within the first epoch";
      }
  }
}

TEST(GptDataset, IndicesAreCachedAndReused) {
  TempDir dir;
  const std::string prefix = write_docs(dir, make_docs());
  auto batch = [](const GptDataset& s) {
    std::vector<int32_t> tokens(20 * 8), targets(20 * 8);
    s.get_batch(0, 20, tokens.data(), targets.data());
    return tokens;
  };
  GptDatasetOptions o = options("1", 8);
  o.num_samples = 50;
  GptDataset built(std::make_shared<const IndexedDataset>(prefix), Split::train, o);
  EXPECT_FALSE(built.loaded_from_cache());
  ASSERT_FALSE(built.cache_stem().empty());
  EXPECT_EQ(built.cache_stem().rfind(dir / "cache/GPTDataset_indices/", 0), 0u) << built.cache_stem();
  GptDataset loaded(std::make_shared<const IndexedDataset>(prefix), Split::train, o);
  EXPECT_TRUE(loaded.loaded_from_cache());
  EXPECT_EQ(batch(built), batch(loaded));
  EXPECT_EQ(loaded.num_samples(), built.num_samples());
  o.seed = 99;  // another description: another cache entry
  GptDataset other(std::make_shared<const IndexedDataset>(prefix), Split::train, o);
  EXPECT_FALSE(other.loaded_from_cache());
  EXPECT_NE(other.cache_stem(), built.cache_stem());
  o.cache_dir = dir / "elsewhere";
  GptDataset moved(std::make_shared<const IndexedDataset>(prefix), Split::train, o);
  EXPECT_EQ(moved.cache_stem().rfind(dir / "elsewhere/", 0), 0u);
}

TEST(GptDataset, SplitsAreDisjoint) {
  TempDir dir;
  const std::string prefix = write_docs(dir, make_docs());
  GptDatasets ds = open_gpt_datasets(prefix, options("60,20,20", 8));
  // Every non-eod token names its document; collect the documents each
  // split's samples draw from.
  std::array<std::set<int32_t>, kNumSplits> used;
  for (int k = 0; k < kNumSplits; ++k) {
    const GptDataset& s = *ds.splits[k];
    std::vector<int32_t> tokens(s.num_samples() * 8), targets(s.num_samples() * 8);
    s.get_batch(0, s.num_samples(), tokens.data(), targets.data());
    for (int32_t t : tokens)
      if (t != 0) used[k].insert((t - 1) / 1000);
    for (int32_t doc : used[k]) {
      EXPECT_GE(doc, s.documents().begin);
      EXPECT_LT(doc, s.documents().end);
    }
  }
  EXPECT_FALSE(used[0].empty());
  EXPECT_FALSE(used[1].empty());
  EXPECT_FALSE(used[2].empty());
}

TEST(GptDataset, TargetsAreInputsShiftedByOne) {
  TempDir dir;
  const std::string prefix = write_docs(dir, make_docs());
  GptDatasets ds = open_gpt_datasets(prefix, options("1", 12));
  const GptDataset& s = *ds[Split::train];
  const int64_t B = 7, S = 12;
  std::vector<int32_t> tokens(B * S), targets(B * S), sample(S + 1);
  s.get_batch(3, B, tokens.data(), targets.data());
  for (int64_t b = 0; b < B; ++b) {
    s.get_sample(3 + b, sample.data());
    for (int64_t t = 0; t < S; ++t) {
      EXPECT_EQ(tokens[b * S + t], sample[t]);
      EXPECT_EQ(targets[b * S + t], sample[t + 1]);
      if (t + 1 < S) {
        EXPECT_EQ(targets[b * S + t], tokens[b * S + t + 1]);
      }
    }
  }
}

TEST(GptDataset, OrderIsFixedBySeed) {
  TempDir dir;
  const std::string prefix = write_docs(dir, make_docs());
  auto batch = [&](uint64_t seed) {
    GptDatasets ds = open_gpt_datasets(prefix, options("1", 8, seed));
    std::vector<int32_t> tokens(16 * 8), targets(16 * 8);
    ds[Split::train]->get_batch(5, 16, tokens.data(), targets.data());
    return tokens;
  };
  EXPECT_EQ(batch(42), batch(42));
  EXPECT_NE(batch(42), batch(43));
}

TEST(GptDataset, ZeroWeightSplitsAreNotBuilt) {
  TempDir dir;
  const std::string prefix = write_docs(dir, make_docs());
  GptDatasets ds = open_gpt_datasets(prefix, options("80,20", 8));
  EXPECT_TRUE(ds[Split::train].has_value());
  EXPECT_TRUE(ds[Split::valid].has_value());
  EXPECT_FALSE(ds[Split::test].has_value());
}

TEST(GptDataset, RejectsTokensOutsideTheVocabulary) {
  TempDir dir;
  auto docs = make_docs();
  docs[15][2] = kVocab;  // document 15: in the valid split of 60,20,20
  const std::string prefix = write_docs(dir, docs);
  EXPECT_CLAW_ERROR(open_gpt_datasets(prefix, options("60,20,20", 8)), prefix + ".bin", "token id 20000",
                    "sequence 15", "[0, 20000)");
  auto negative = make_docs();
  negative[0][0] = -3;
  TempDir dir2;
  const std::string p2 = write_docs(dir2, negative, IndexDType::i32);
  EXPECT_CLAW_ERROR(open_gpt_datasets(p2, options("1", 8)), p2 + ".bin", "token id -3", "[0, 20000)");
}

TEST(GptDataset, RejectsASplitShorterThanOneSample) {
  TempDir dir;
  const std::string prefix = write_docs(dir, make_docs());
  // Valid gets document 19 alone: 67 tokens, one short of the 68 a sample of
  // 67 inputs needs.
  EXPECT_CLAW_ERROR(open_gpt_datasets(prefix, options("95,5", 67)), "valid split", "67 tokens", "--seq-length 67",
                    "--split 95,5");
  // A split rounded down to no documents at all.
  EXPECT_CLAW_ERROR(open_gpt_datasets(prefix, options("969,30,1", 8)), "test split", "0 tokens", "--seq-length 8");
}

TEST(GptDataset, RejectsBadOptions) {
  TempDir dir;
  const std::string prefix = write_docs(dir, make_docs());
  EXPECT_CLAW_ERROR(open_gpt_datasets(prefix, options("1", 0)), "--seq-length 0");
  GptDatasetOptions o = options("1", 8);
  o.vocab_size = 0;
  EXPECT_CLAW_ERROR(open_gpt_datasets(prefix, o), "vocabulary size 0");
  EXPECT_CLAW_ERROR(open_gpt_datasets(prefix, options("1,a", 8)), "--split");
  EXPECT_CLAW_ERROR(open_gpt_datasets(dir / "missing", options("1", 8)), dir / "missing.idx", "not found");
}

TEST(BlendedDataset, ParsesDataPath) {
  BlendSpec one = parse_data_path({"a"});
  EXPECT_EQ(one.prefixes, std::vector<std::string>{"a"});
  BlendSpec w = parse_data_path({"0.3", "a", "0.9", "b"});
  EXPECT_EQ(w.prefixes, (std::vector<std::string>{"a", "b"}));
  EXPECT_DOUBLE_EQ(w.weights[0], 0.25);
  EXPECT_DOUBLE_EQ(w.weights[1], 0.75);
  BlendSpec eq = parse_data_path({"a", "b"});
  EXPECT_DOUBLE_EQ(eq.weights[1], 0.5);
  EXPECT_CLAW_ERROR(parse_data_path({}), "--data-path is empty");
  EXPECT_CLAW_ERROR(parse_data_path({"0.3", "a", "0.7"}), "--data-path has 3 words");
  EXPECT_CLAW_ERROR(parse_data_path({"-1", "a"}), "'-1'", "not a positive weight");
  EXPECT_CLAW_ERROR(parse_data_path({"a", "0.5"}), "mixes weights and bare prefixes");
}

// Two datasets whose tokens say which dataset they came from: the blend
// takes samples in proportion to the weights and each from the right place.
TEST(BlendedDataset, DrawsEachDatasetByWeight) {
  TempDir dir;
  auto docs_a = make_docs(), docs_b = make_docs();
  for (auto& d : docs_b)
    for (auto& t : d)
      if (t != 0) t += 20000;
  std::string a = dir / "a", b = dir / "b";
  for (auto [prefix, docs] : {std::pair{a, docs_a}, std::pair{b, docs_b}}) {
    IndexedDatasetBuilder builder(prefix, IndexDType::u16);
    for (const auto& doc : docs) builder.add_document(doc);
    builder.finalize();
  }
  GptDatasetOptions o = options("1", 8);
  o.vocab_size = 50000;
  o.num_samples = 400;  // several epochs of each
  auto source = build_split_source(parse_data_path({"0.25", a, "0.75", b}), Split::train, o);
  ASSERT_EQ(source->num_samples(), 400);
  auto* blend = dynamic_cast<BlendedDataset*>(source.get());
  ASSERT_NE(blend, nullptr);
  EXPECT_EQ(blend->samples_per_dataset(), (std::vector<int64_t>{100, 300}));
  int from_b = 0;
  std::vector<int32_t> sample(9);
  for (int64_t i = 0; i < 400; ++i) {
    source->get_sample(i, sample.data());
    bool in_b = std::any_of(sample.begin(), sample.end(), [](int32_t t) { return t > 20000; });
    bool in_a = std::any_of(sample.begin(), sample.end(), [](int32_t t) { return t > 0 && t < 20000; });
    EXPECT_NE(in_a, in_b) << "a sample mixes datasets";
    from_b += in_b;
  }
  EXPECT_EQ(from_b, 300);
  // Reproducible: a second builder (from the index cache) gives the same batch.
  auto again = build_split_source(parse_data_path({"0.25", a, "0.75", b}), Split::train, o);
  std::vector<int32_t> t1(32 * 8), g1(32 * 8), t2(32 * 8), g2(32 * 8);
  source->get_batch(100, 32, t1.data(), g1.data());
  again->get_batch(100, 32, t2.data(), g2.data());
  EXPECT_EQ(t1, t2);
}

// Documents end in eod (0 here); Megatron's masks and positions.
TEST(Packing, BoundariesFromEod) {
  const int32_t eod = 0;
  // Row 0: doc [5 6 0] doc [7 0] doc [8 ...; row 1 starts mid-document.
  std::vector<int32_t> tokens = {5, 6, 0, 7, 0, 8, 9, 0, /**/ 3, 4, 0, 1, 2, 0, 0, 6};
  const int64_t B = 2, T = 8;
  std::vector<int32_t> seg(B * T, -7), pos(B * T, -7), targets(B * T, 42);
  apply_packing({.reset_position_ids = true, .reset_attention_mask = true, .eod_mask_loss = true, .eod = eod},
                tokens.data(), B, T, seg.data(), pos.data(), targets.data());
  EXPECT_EQ(seg, (std::vector<int32_t>{0, 0, 0, 3, 3, 5, 5, 5, /**/ 0, 0, 0, 3, 3, 3, 6, 7}));
  EXPECT_EQ(pos, (std::vector<int32_t>{0, 1, 2, 0, 1, 0, 1, 2, /**/ 0, 1, 2, 0, 1, 2, 0, 0}));
  for (int64_t i = 0; i < B * T; ++i) EXPECT_EQ(targets[i], tokens[i] == eod ? -1 : 42) << i;
  // Off: nothing is touched.
  std::vector<int32_t> untouched(B * T, 42);
  apply_packing({.eod = eod}, tokens.data(), B, T, nullptr, nullptr, untouched.data());
  EXPECT_EQ(untouched, std::vector<int32_t>(B * T, 42));
}

}  // namespace
}  // namespace claw::data
