// MinHash signatures of documents for near-duplicate detection (Broder,
// "On the resemblance and containment of documents", 1997), shingled the
// way datatrove's MinhashDedupSignature does (pipeline/dedup/minhash.py):
// the text is simplified (utils/text.py simplify_text: lowercase, numbers
// to "0", punctuation to spaces, diacritics stripped), split into words, and
// each run of `ngram` consecutive words, joined by one space, is a shingle
// hashed to 64 bits. Two documents' resemblance is the Jaccard similarity
// J = |A ∩ B| / |A ∪ B| of their shingle sets.
//
// The signature holds P = bands * rows minimums: sig[i] = min over shingles
// x of h_i(x), h_i(x) = ((a_i x + b_i) mod 2^64) >> 32 with a_i odd, so each
// h_i is a permutation of the 64-bit hashes kept to its top 32 bits, and
// P[sig_A[i] == sig_B[i]] = J. The fraction of equal entries estimates J
// with standard deviation sqrt(J (1 - J) / P) (<= 0.047 at P = 112).
// LSH (Indyk-Motwani; Leskovec, Rajaraman, Ullman, "Mining of Massive
// Datasets" ch. 3.4) cuts the signature into `bands` bands of `rows`
// entries; two documents are candidates when some band is equal, which
// happens with probability 1 - (1 - J^rows)^bands (lsh_probability).
//
// Differences from datatrove, by design: words are split on white space and
// punctuation per code point (datatrove runs spaCy's English tokenizer on
// the simplified text, which also splits "cannot" into "can not"); shingles
// are hashed with XXH3-64 instead of XXH64; the permutations are
// multiply-add mod 2^64 instead of mod 2^61 - 1 with numpy's parameters. So
// signatures are not bit-equal to datatrove's; their statistics are the same.
//
// Thread-safety: a MinHasher is immutable after construction and may be
// used from any number of threads, each with its own Scratch.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace claw::curate {

// How text is simplified before it is split into words (datatrove's
// TextNormConfig defaults). Punctuation, symbols, control characters and
// white space always separate words; nonspacing marks and format characters
// (soft hyphen, zero-width joiners) are dropped without separating.
struct TextNorm {
  bool lowercase = true;          // simple Unicode lowercase mapping (ICU u_tolower)
  bool normalize_numbers = true;  // a run of digits of any script, with at most one decimal part
                                  // ("3.14", "1,5"; "1,000,000" is "0,0"), becomes "0"
  bool strip_diacritics = true;   // a letter becomes its canonical decomposition (NFD) less its
                                  // nonspacing marks when that is one code point: "é" -> "e"
};

// Splits UTF-8 `text` into simplified words: `out` receives the words joined
// by single spaces and `word_starts` the byte offset of each word in `out`
// (both cleared first). Bytes that are not valid UTF-8 separate words.
// Returns the number of words.
size_t normalize_words(std::string_view text, const TextNorm& norm, std::string& out,
                       std::vector<uint32_t>& word_starts);

// The normalisation of exact dedup's "whitespace_lowercase": every run of
// Unicode white space becomes one ' ', leading and trailing space is
// removed, and every other code point is lowercased; punctuation is kept.
// `out` is cleared first.
void normalize_space_case(std::string_view text, std::string& out);

// Parameters of MinHash-LSH dedup; the defaults are datatrove's MinhashConfig
// (5-grams, 14 bands x 8 rows: candidates above J ~ (1/14)^(1/8) = 0.72).
struct MinHashParams {
  int ngram = 5;           // words per shingle
  int bands = 14;          // LSH bands (datatrove: num_buckets)
  int rows = 8;            // signature entries per band (datatrove: hashes_per_bucket)
  uint64_t seed = 1;       // chooses the permutations; equal seeds give equal signatures
  double threshold = 0.0;  // 0: every LSH candidate pair is a duplicate (datatrove); else a
                           // candidate pair is one only if its estimated Jaccard >= threshold
  TextNorm norm;           // text simplification before shingling
  // Verification (NeMo Curator's false-positive check, made exact): each
  // candidate pair's shingle sets are compared and the pair is a duplicate
  // only if their Jaccard similarity is at least jaccard(); a document is
  // removed only for a kept document it was verified against (dedup.h).
  // Needs the texts (MinHashDedup::add), not signatures alone.
  bool verify = false;
  double jaccard() const { return threshold > 0 ? threshold : 0.8; }  // what verification requires

  int num_perm() const { return bands * rows; }
  // claw::Error naming the field and its valid range.
  void validate() const;
};

// P[two documents with Jaccard s share a band] = 1 - (1 - s^rows)^bands.
double lsh_probability(double s, int bands, int rows);

class MinHasher {
 public:
  // Validates `params` (claw::Error).
  explicit MinHasher(const MinHashParams& params);

  const MinHashParams& params() const { return params_; }
  int num_perm() const { return params_.num_perm(); }

  // Buffers one thread reuses from document to document, so that shingling
  // allocates nothing once they have grown to the largest document.
  struct Scratch {
    std::string words;
    std::vector<uint32_t> word_starts;
    std::vector<uint64_t> shingles;
  };

  // XXH3-64 of each run of `ngram` consecutive simplified words joined by
  // one space, in text order, repeats included. Empty when the text has
  // fewer than `ngram` words (datatrove writes no signature for those
  // either). The span points into `scratch`.
  std::span<const uint64_t> shingles(std::string_view text, Scratch& scratch) const;

  // The distinct shingles of a text, sorted (what exact Jaccard is taken of).
  void shingle_set(std::string_view text, Scratch& scratch, std::vector<uint64_t>& out) const;
  // |A n B| / |A u B| of two sorted sets of distinct shingles (0 when both are empty).
  static double jaccard(std::span<const uint64_t> a, std::span<const uint64_t> b);

  // sig (num_perm() entries) = the MinHash signature of a non-empty shingle
  // multiset (repeats do not change it).
  void signature(std::span<const uint64_t> shingles, std::span<uint32_t> sig) const;

  // The LSH bucket key of band `band` (0 <= band < bands): a 64-bit hash of
  // its `rows` signature entries. Equal bands give equal keys; unequal
  // ones collide with probability 2^-64.
  uint64_t band_key(std::span<const uint32_t> sig, int band) const;

  // The fraction of equal entries: an unbiased estimate of the Jaccard
  // similarity of the two shingle sets.
  static double estimate_jaccard(std::span<const uint32_t> a, std::span<const uint32_t> b);

 private:
  MinHashParams params_;
  std::vector<uint64_t> a_, b_;  // h_i(x) = a_i x + b_i, padded to a multiple of the SIMD block
};

}  // namespace claw::curate
