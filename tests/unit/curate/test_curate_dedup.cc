// Dedup of `claw curate` (claw/curate/dedup.h, minhash.h): text
// simplification, exact dedup with and without normalisation, MinHash-LSH
// near-duplicates found and unrelated documents kept, results independent
// of add order, thread count and memory budget (a tiny one forces spilling),
// and the signature's estimated Jaccard against the true Jaccard of the
// shingle sets within a stated binomial bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "claw/curate/dedup.h"
#include "expect_error.h"
#include "temp_dir.h"

namespace claw::curate {
namespace {

using claw::testing::TempDir;

std::string words_of(std::string_view text, const TextNorm& norm = {}) {
  std::string out;
  std::vector<uint32_t> starts;
  normalize_words(text, norm, out, starts);
  return out;
}

// Random text over a fixed vocabulary of made-up words: two documents drawn
// independently share essentially no 5-gram.
class TextGen {
 public:
  explicit TextGen(uint64_t seed) : rng_(seed) {
    std::uniform_int_distribution<int> len(3, 9), letter('a', 'z');
    for (int i = 0; i < 5000; ++i) {
      std::string w;
      for (int n = len(rng_); n > 0; --n) w.push_back(static_cast<char>(letter(rng_)));
      vocab_.push_back(w);
    }
  }
  std::vector<std::string> words(int n) {
    std::vector<std::string> out;
    for (int i = 0; i < n; ++i) out.push_back(word());
    return out;
  }
  const std::string& word() { return vocab_[std::uniform_int_distribution<size_t>(0, vocab_.size() - 1)(rng_)]; }
  // `edits` substitutions at distinct random positions.
  std::vector<std::string> edit(std::vector<std::string> w, int edits) {
    std::vector<size_t> pos(w.size());
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = i;
    std::shuffle(pos.begin(), pos.end(), rng_);
    for (int e = 0; e < edits; ++e) w[pos[e]] = "edit" + std::to_string(e) + word();
    return w;
  }
  std::mt19937_64& rng() { return rng_; }

 private:
  std::mt19937_64 rng_;
  std::vector<std::string> vocab_;
};

std::string join(const std::vector<std::string>& w) {
  std::string s;
  for (const auto& x : w) s += (s.empty() ? "" : " ") + x;
  return s;
}

double true_jaccard(const MinHasher& h, std::string_view a, std::string_view b) {
  MinHasher::Scratch s;
  auto sa = h.shingles(a, s);
  std::unordered_set<uint64_t> A(sa.begin(), sa.end());
  auto sb = h.shingles(b, s);
  std::unordered_set<uint64_t> B(sb.begin(), sb.end());
  size_t inter = 0;
  for (uint64_t x : A) inter += B.count(x);
  return static_cast<double>(inter) / static_cast<double>(A.size() + B.size() - inter);
}

TEST(CurateNormalize, SimplifiesLikeDatatrove) {
  // datatrove's simplify_text: lowercase, numbers (with one decimal part) to
  // 0, punctuation to spaces, diacritics stripped, white space collapsed.
  EXPECT_EQ(words_of("  Hello,   World!\n\tIt's 3.14 -- 1,000,000 x2y\u00A0"), "hello world it s 0 0 0 x0y");
  EXPECT_EQ(words_of("Caf\u00E9 NA\u00CFVE \u00C9cole, Stra\u00DFe"), "cafe naive ecole straße");
  // A combining accent (decomposed input) is dropped inside the word; a
  // soft hyphen is a format character, dropped too.
  EXPECT_EQ(words_of("cafe\u0301 co\u00ADoperate"), "cafe cooperate");
  // Non-ASCII punctuation and symbols separate; digits of other scripts are numbers.
  EXPECT_EQ(words_of("a\u2014b\u201Cc\u201D \u00ABd\u00BB e\u2026f \u0661\u0662\u0663 g\u00A9h"), "a b c d e f 0 g h");
  // Greek and Cyrillic lowercase; invalid UTF-8 separates.
  EXPECT_EQ(words_of("\u0391\u0398\u0397\u039D\u0391 \u041C\u041E\u0421\u041A\u0412\u0410 a\xFF" "b"),
            "αθηνα москва a b");
  EXPECT_EQ(words_of("Hello 42", TextNorm{.lowercase = false, .normalize_numbers = false}), "Hello 42");
  EXPECT_EQ(words_of(" ,.;  "), "");

  std::string out;
  std::vector<uint32_t> starts;
  EXPECT_EQ(normalize_words("ab  c, d", {}, out, starts), 3u);
  EXPECT_EQ(starts, (std::vector<uint32_t>{0, 3, 5}));
}

TEST(CurateNormalize, SpaceCaseKeepsPunctuation) {
  std::string out;
  normalize_space_case("  Hello,\t\n WORLD!\u00A0\u00C9t\u00C9  ", out);
  EXPECT_EQ(out, "hello, world! été");
  normalize_space_case("", out);
  EXPECT_EQ(out, "");
}

TEST(CurateMinHash, ShinglesAreWordNgrams) {
  MinHashParams p;
  p.ngram = 3;
  MinHasher h(p);
  MinHasher::Scratch s;
  EXPECT_EQ(h.shingles("one two", s).size(), 0u);  // fewer words than ngram
  EXPECT_EQ(h.shingles("One, two; three four!", s).size(), 2u);
  // Punctuation, case and spacing do not change the shingles.
  std::vector<uint64_t> a(h.shingles("One, two; three four!", s).begin(), h.shingles("One, two; three four!", s).end());
  auto b = h.shingles("one two three   FOUR", s);
  EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end()));
}

TEST(CurateMinHash, SignatureIsOfTheSet) {
  MinHasher h(MinHashParams{});
  std::vector<uint64_t> xs = {5, 1, 99, 1u << 31, ~uint64_t{0}};
  std::vector<uint32_t> s1(h.num_perm()), s2(h.num_perm());
  h.signature(xs, s1);
  std::vector<uint64_t> ys = {99, 5, 5, ~uint64_t{0}, 1, 1u << 31, 1};  // reordered, repeats
  h.signature(ys, s2);
  EXPECT_EQ(s1, s2);
  EXPECT_DOUBLE_EQ(MinHasher::estimate_jaccard(s1, s2), 1.0);
}

// For sets with Jaccard J, each signature entry agrees with probability J,
// so the estimate is Binomial(P, J) / P with sd sqrt(J (1 - J) / P).
// 300 pairs with J spread over [0.1, 0.9] (P = 112, so P J >= 11: the
// normal approximation holds): every z-score within 5 (P[|z| > 5] ~ 6e-7
// per pair, < 2e-4 for all), their mean within 0.35 (its sd is 1/sqrt(300)
// = 0.058: 6 sd) and their mean square within [0.7, 1.4] (its sd is
// sqrt(2/300) = 0.08). Checked over 3000 trials per J in 0.05..0.95: mean z
// within 0.03 of 0, variance within 0.05 of 1.
TEST(CurateMinHash, EstimatedJaccardMatchesTrueJaccard) {
  MinHasher h(MinHashParams{});
  const int p = h.num_perm();
  std::mt19937_64 rng(7);
  std::vector<uint32_t> sa(p), sb(p);
  double sum_z = 0, sum_z2 = 0, max_abs_z = 0;
  const int pairs = 300;
  for (int k = 0; k < pairs; ++k) {
    const int u = 400;  // |A ∪ B|
    const int shared = 40 + (k * 280) / pairs;
    std::vector<uint64_t> a, b;
    for (int i = 0; i < u; ++i) {
      const uint64_t x = rng();
      if (i < shared) a.push_back(x), b.push_back(x);
      else if (i % 2 == 0) a.push_back(x);
      else b.push_back(x);
    }
    const double j = static_cast<double>(shared) / u;
    h.signature(a, sa);
    h.signature(b, sb);
    const double z = (MinHasher::estimate_jaccard(sa, sb) - j) / std::sqrt(j * (1 - j) / p);
    sum_z += z;
    sum_z2 += z * z;
    max_abs_z = std::max(max_abs_z, std::abs(z));
  }
  EXPECT_LT(max_abs_z, 5.0);
  EXPECT_LT(std::abs(sum_z / pairs), 0.35);
  EXPECT_GT(sum_z2 / pairs, 0.7);
  EXPECT_LT(sum_z2 / pairs, 1.4);
}

// The same on text: edited copies of a document, the true Jaccard of the
// shingle sets against the estimate, each within 5 sd.
TEST(CurateMinHash, EstimatedJaccardOfEditedText) {
  MinHasher h(MinHashParams{});
  TextGen gen(11);
  MinHasher::Scratch s;
  std::vector<uint32_t> sa(h.num_perm()), sb(h.num_perm());
  for (int edits : {1, 3, 6, 10, 20, 40}) {
    const auto orig = gen.words(400);
    const std::string a = join(orig), b = join(gen.edit(orig, edits));
    const double j = true_jaccard(h, a, b);
    h.signature(h.shingles(a, s), sa);
    h.signature(h.shingles(b, s), sb);
    const double sd = std::sqrt(j * (1 - j) / h.num_perm());
    EXPECT_LE(std::abs(MinHasher::estimate_jaccard(sa, sb) - j), 5 * sd + 1e-9) << edits << " edits, J = " << j;
  }
}

// LSH needs the rows of a band to agree independently: P[band equal] =
// J^rows. 2000 pairs x 14 bands at J = 0.6 and 0.8 (rows = 8): the
// fraction of equal bands within 5 binomial sd of J^8 (sd 0.0008 and
// 0.0019). Checked over 280000 bands per J in 0.5..0.7: |z| < 1.
TEST(CurateMinHash, BandsAgreeWithProbabilityJToTheRows) {
  MinHasher h(MinHashParams{});
  std::mt19937_64 rng(99);
  std::vector<uint32_t> sa(h.num_perm()), sb(h.num_perm());
  for (double j : {0.6, 0.8}) {
    int64_t equal = 0, bands = 0;
    for (int t = 0; t < 2000; ++t) {
      const int u = 300, shared = static_cast<int>(std::lround(j * u));
      std::vector<uint64_t> a, b;
      for (int i = 0; i < u; ++i) {
        const uint64_t x = rng();
        if (i < shared) a.push_back(x), b.push_back(x);
        else if (i % 2 == 0) a.push_back(x);
        else b.push_back(x);
      }
      h.signature(a, sa);
      h.signature(b, sb);
      for (int band = 0; band < h.params().bands; ++band, ++bands)
        equal += h.band_key(sa, band) == h.band_key(sb, band);
    }
    const double p = std::pow(j, h.params().rows), observed = static_cast<double>(equal) / bands;
    EXPECT_NEAR(observed, p, 5 * std::sqrt(p * (1 - p) / bands)) << "J = " << j;
  }
}

TEST(CurateMinHash, LshProbability) {
  EXPECT_NEAR(lsh_probability(0.8, 14, 8), 0.924, 0.001);  // datatrove's comment
  EXPECT_DOUBLE_EQ(lsh_probability(1.0, 14, 8), 1.0);
  EXPECT_DOUBLE_EQ(lsh_probability(0.0, 14, 8), 0.0);
}

TEST(CurateMinHash, ParamsValidated) {
  TempDir dir;
  MinHashParams p;
  p.bands = 0;
  EXPECT_CLAW_ERROR(MinHashDedup(p, dir.path()), "bands", "0");
  p = {};
  p.ngram = 0;
  EXPECT_CLAW_ERROR(MinHasher{p}, "ngram", "0");
  p = {};
  p.threshold = 1.5;
  EXPECT_CLAW_ERROR(MinHasher{p}, "threshold", "1.5");
  EXPECT_CLAW_ERROR(parse_exact_normalization("lower"), "lower", "none", "whitespace_lowercase");
  EXPECT_EQ(parse_exact_normalization("none"), ExactNormalization::none);
}

TEST(CurateExactDedup, RemovesIdenticalKeepsFirst) {
  TempDir dir;
  ExactDedup d(dir.path());
  d.add(3, "the same text");
  d.add(0, "other text");
  d.add(1, "the same text");
  d.add(7, "  THE same\n text ");  // equal after whitespace_lowercase
  d.add(5, "the same text.");       // punctuation differs: kept
  d.add(2, "");
  d.add(4, "");
  DedupStats st;
  const auto dups = d.finish(&st);
  EXPECT_EQ(dups, (std::vector<Duplicate>{{3, 1}, {4, 2}, {7, 1}}));
  EXPECT_EQ(st.documents, 7);
  EXPECT_EQ(st.clusters, 2);
  EXPECT_EQ(st.removed, 3);
  EXPECT_EQ(st.spills, 0);

  ExactDedup raw(dir.path(), kDefaultDedupMemory, ExactNormalization::none);
  raw.add(0, "the same text");
  raw.add(1, "The same text");
  raw.add(2, "the same text");
  EXPECT_EQ(raw.finish(), (std::vector<Duplicate>{{2, 0}}));
}

TEST(CurateExactDedup, TinyBudgetSpillsSameResult) {
  TextGen gen(3);
  std::vector<std::string> docs;
  for (int i = 0; i < 500; ++i) docs.push_back(i % 7 == 3 ? docs[i / 2] : join(gen.words(20)));
  TempDir dir;
  auto run = [&](size_t budget, DedupStats& st) {
    ExactDedup d(dir.path(), budget);
    for (size_t i = 0; i < docs.size(); ++i) d.add(i, docs[i]);
    return d.finish(&st);
  };
  DedupStats big, tiny;
  const auto expected = run(kDefaultDedupMemory, big);
  EXPECT_EQ(big.removed, 71);
  EXPECT_EQ(run(500, tiny), expected);  // 6 records a run
  EXPECT_GT(tiny.spills, 64);  // more than one merge pass
  EXPECT_EQ(big.spills, 0);
  // The spill files went with the objects.
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(CurateParagraphDedup, RemovesRepeatedLinesAfterTheFirst) {
  TempDir dir;
  auto run = [&](size_t budget, DedupStats& st) {
    ParagraphDedup d(dir.path(), budget, 4);
    d.add(2, "Intro of two\nshared line\n\nok\nshared line");
    d.add(0, "Shared   LINE \r\nfirst own line");
    d.add(1, "nothing shared\n");
    d.add(3, "shared line");
    return d.finish(&st);
  };
  DedupStats st, tiny;
  const auto dups = run(kDefaultDedupMemory, st);
  // "ok" is shorter than min_chars; blank lines never count.
  EXPECT_EQ(dups, (std::vector<ParagraphDuplicate>{{2, 1, 0, 0}, {2, 4, 0, 0}, {3, 0, 0, 0}}));
  EXPECT_EQ(st.documents, 4);
  EXPECT_EQ(st.clusters, 1);
  EXPECT_EQ(st.removed, 3);
  EXPECT_EQ(run(100, tiny), dups);
  EXPECT_GT(tiny.spills, 0);

  const std::vector<uint32_t> lines = {1, 4};
  EXPECT_EQ(remove_paragraphs("Intro of two\nshared line\n\nok\nshared line", lines), "Intro of two\n\nok");
  const std::vector<uint32_t> first = {0};
  EXPECT_EQ(remove_paragraphs("a\nb\n", first), "b\n");
  EXPECT_EQ(remove_paragraphs("a", first), "");
  EXPECT_EQ(remove_paragraphs("a\nb", {}), "a\nb");
}

// A corpus with planted near-duplicates: clusters of 2-4 copies of a random
// document with a few substitutions each (J >= ~0.9 between copies of one
// source: missed by LSH with probability < 1e-4 per pair), chains (c ~ b ~ a
// with a, c further apart), exact copies, short documents and unrelated ones.
struct Corpus {
  std::vector<std::string> docs;
  std::vector<int> cluster;  // planted cluster of each doc, -1 for none
};

Corpus planted_corpus(uint64_t seed, int sources) {
  TextGen gen(seed);
  Corpus c;
  for (int s = 0; s < sources; ++s) {
    const auto orig = gen.words(200 + s % 300);
    c.docs.push_back(join(orig));
    c.cluster.push_back(-1);
    if (s % 3 == 0) continue;  // unrelated
    const int copies = 1 + s % 3;
    c.cluster.back() = s;
    for (int k = 0; k < copies; ++k) {
      c.docs.push_back(s % 5 == 0 && k == 0 ? c.docs.back() : join(gen.edit(orig, 1 + k)));
      c.cluster.push_back(s);
    }
  }
  c.docs.push_back("too short");
  c.cluster.push_back(-1);
  c.docs.push_back("too short");  // exact, but has no shingles: MinHash keeps it
  c.cluster.push_back(-1);
  return c;
}

std::vector<Duplicate> minhash_run(const Corpus& c, const MinHashParams& p, const std::string& dir, size_t budget,
                                   int threads, uint64_t order_seed, DedupStats* st = nullptr) {
  std::vector<uint64_t> order(c.docs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (order_seed != 0) {
    std::mt19937_64 rng(order_seed);
    std::shuffle(order.begin(), order.end(), rng);
  }
  MinHashDedup d(p, dir, budget);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (size_t i = t; i < order.size(); i += threads) d.add(order[i], c.docs[order[i]]);
    });
  for (auto& t : pool) t.join();
  return d.finish(st);
}

TEST(CurateMinHashDedup, FindsPlantedNearDuplicatesOnly) {
  const Corpus c = planted_corpus(5, 120);
  TempDir dir;
  DedupStats st;
  const auto dups = minhash_run(c, MinHashParams{}, dir.path(), kDefaultDedupMemory, 1, 0, &st);
  // Expected: every planted copy removed in favour of the first document of its cluster.
  std::vector<Duplicate> expected;
  int64_t clusters = 0;
  for (size_t i = 0; i < c.docs.size(); ++i) {
    if (c.cluster[i] < 0) continue;
    const auto first =
        static_cast<uint64_t>(std::find(c.cluster.begin(), c.cluster.end(), c.cluster[i]) - c.cluster.begin());
    if (first == i) ++clusters;
    else expected.push_back({i, first});
  }
  EXPECT_EQ(dups, expected);
  EXPECT_EQ(st.documents, static_cast<int64_t>(c.docs.size()));
  EXPECT_EQ(st.no_shingles, 2);
  EXPECT_EQ(st.clusters, clusters);
  EXPECT_EQ(st.removed, static_cast<int64_t>(expected.size()));
  EXPECT_GE(st.candidate_pairs, st.removed);
  EXPECT_EQ(st.verified_pairs, st.candidate_pairs);  // threshold 0 accepts every candidate
}

TEST(CurateMinHashDedup, IndependentOfOrderThreadsAndBudget) {
  const Corpus c = planted_corpus(9, 150);
  TempDir dir;
  for (double threshold : {0.0, 0.85, -1.0}) {  // -1: verified at 0.8
    MinHashParams p;
    p.threshold = std::max(threshold, 0.0);
    p.verify = threshold < 0;
    DedupStats ref_st, st;
    const auto ref = minhash_run(c, p, dir.path(), kDefaultDedupMemory, 1, 0, &ref_st);
    EXPECT_GT(ref.size(), 50u);
    EXPECT_EQ(ref_st.spills, 0);
    EXPECT_EQ(minhash_run(c, p, dir.path(), kDefaultDedupMemory, 4, 17), ref) << threshold;
    EXPECT_EQ(minhash_run(c, p, dir.path(), kDefaultDedupMemory, 3, 99), ref) << threshold;
    // 8 KB: the band buffers hold 12 documents, so ~30 runs per band.
    EXPECT_EQ(minhash_run(c, p, dir.path(), 8 << 10, 4, 5, &st), ref) << threshold;
    EXPECT_GT(st.spills, 10);
    EXPECT_EQ(st.candidate_pairs, ref_st.candidate_pairs);
    EXPECT_EQ(st.verified_pairs, ref_st.verified_pairs);
    EXPECT_EQ(st.clusters, ref_st.clusters);
    // 3 KB: the buffers hold 4 documents: over 64 runs per band, merged in two passes.
    EXPECT_EQ(minhash_run(c, p, dir.path(), 3 << 10, 2, 3, &st), ref) << threshold;
    EXPECT_GT(st.spills, 64);
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

// Verification: a pair at J ~ 0.8 is a candidate for sure with 40 bands of 4
// rows (1 - (1 - 0.8^4)^40 > 1 - 1e-15); its estimated Jaccard over 160
// entries has sd 0.03, so it passes threshold 0.6 and fails 0.95 (>= 5 sd
// each way). Exact copies pass any threshold.
TEST(CurateMinHashDedup, ThresholdVerifiesCandidates) {
  TextGen gen(21);
  const auto orig = gen.words(600);
  const std::string a = join(orig), b = join(gen.edit(orig, 14)), a2 = a;
  MinHashParams p;
  p.bands = 40;
  p.rows = 4;
  const double j = true_jaccard(MinHasher(p), a, b);
  ASSERT_GT(j, 0.75);
  ASSERT_LT(j, 0.85);
  TempDir dir;
  auto run = [&](double threshold, DedupStats& st) {
    p.threshold = threshold;
    MinHashDedup d(p, dir.path());
    d.add(0, a);
    d.add(1, b);
    d.add(2, a2);
    return d.finish(&st);
  };
  DedupStats st;
  EXPECT_EQ(run(0.0, st), (std::vector<Duplicate>{{1, 0}, {2, 0}}));
  EXPECT_EQ(st.compared_pairs, 0);
  EXPECT_EQ(run(0.6, st), (std::vector<Duplicate>{{1, 0}, {2, 0}}));
  EXPECT_GT(st.compared_pairs, 0);
  EXPECT_EQ(run(0.95, st), (std::vector<Duplicate>{{2, 0}}));
  EXPECT_LT(st.verified_pairs, st.candidate_pairs);
  // The boundary: a pair passes at exactly its estimated Jaccard, not one entry above.
  const MinHasher h(p);
  MinHasher::Scratch s;
  std::vector<uint32_t> sa(h.num_perm()), sb(h.num_perm());
  h.signature(h.shingles(a, s), sa);
  h.signature(h.shingles(b, s), sb);
  const double est = MinHasher::estimate_jaccard(sa, sb);
  EXPECT_EQ(run(est, st), (std::vector<Duplicate>{{1, 0}, {2, 0}}));
  EXPECT_EQ(run(est + 0.5 / h.num_perm(), st), (std::vector<Duplicate>{{2, 0}}));
}

// A chain a ~ b ~ c with a and c apart: union-find over the LSH candidates
// removes b and c for a; verification removes b (J(a, b) >= 0.8) and keeps
// c, whose only match above the threshold is the removed b.
TEST(CurateMinHashDedup, VerificationRemovesOnlyForAKeptDocumentAboveTheThreshold) {
  TextGen gen(5);
  const auto a = gen.words(800);
  const auto b = gen.edit(a, 12);
  auto c = b;
  // 12 more edits away from b, none undoing b's.
  for (int e = 0, i = 1; e < 12; i += 61, ++e) c[i] = "more" + std::to_string(e) + gen.word();
  MinHashParams p;
  p.bands = 40;
  p.rows = 4;  // every pair above ~0.5 is a candidate
  const MinHasher h(p);
  const double ab = true_jaccard(h, join(a), join(b)), bc = true_jaccard(h, join(b), join(c)),
               ac = true_jaccard(h, join(a), join(c));
  ASSERT_GE(ab, 0.8);
  ASSERT_GE(bc, 0.8);
  ASSERT_LT(ac, 0.8);
  TempDir dir;
  auto run = [&](bool verify, DedupStats& st) {
    p.verify = verify;
    MinHashDedup d(p, dir.path());
    d.add(2, join(c));
    d.add(0, join(a));
    d.add(1, join(b));
    d.add(3, "too short");
    return d.finish(&st);
  };
  DedupStats st;
  EXPECT_EQ(run(false, st), (std::vector<Duplicate>{{1, 0}, {2, 0}})) << "J(a, c) = " << ac;
  EXPECT_EQ(run(true, st), (std::vector<Duplicate>{{1, 0}}));
  EXPECT_EQ(st.verified_pairs, 2);  // a-b and b-c
  EXPECT_EQ(st.compared_pairs, 3);
  EXPECT_EQ(st.removed, 1);
  EXPECT_EQ(st.clusters, 1);
  EXPECT_EQ(st.no_shingles, 1);
}

TEST(CurateMinHashDedup, EmptyAndSparseNumbers) {
  TempDir dir;
  {
    MinHashDedup d(MinHashParams{}, dir.path());
    DedupStats st;
    EXPECT_TRUE(d.finish(&st).empty());
    EXPECT_EQ(st.documents, 0);
  }
  MinHashDedup d(MinHashParams{}, dir.path());
  const std::string text = "one two three four five six seven";
  d.add(1000, text);
  d.add(20, text);
  EXPECT_EQ(d.finish(), (std::vector<Duplicate>{{1000, 20}}));
}

}  // namespace
}  // namespace claw::curate
