// Deduplication passes of `claw curate`: exact (documents whose normalised
// text has the same 128-bit hash) and fuzzy (MinHash + LSH, minhash.h).
// Unlike the streaming stages (stage.h) a dedup pass needs the whole
// corpus: the pipeline add()s every document, then finish() returns the
// documents to remove.
//
// Documents are numbered 0..N-1 by the caller, who may add them in any
// order from any number of threads, each number at most once. Duplicates
// form clusters; of each cluster the lowest-numbered document is kept and
// every other one is returned, with the number of the one kept. The result
// depends only on the set of (number, text) added: not on the order, the
// thread count or the memory budget.
//
// Memory is bounded by `memory_budget_bytes` plus 5 bytes per document
// number (the union-find of MinHash dedup) and the returned vector, whatever
// N: what add() collects (16 bytes per band per document for MinHash, 24
// per document for exact) is kept in a buffer of a third of the budget;
// when it is full it is sorted and written, a sorted run per LSH band, to a
// file in a private directory under `workdir` while the next third fills;
// finish() merges the runs of one band at a time (k-way, in passes of at
// most 64 runs, through read buffers that share the other half of the
// budget). With threshold > 0 the signatures are written to a file there as
// well (4 * bands * rows bytes per document) and read back per candidate
// pair. The directory and its files are removed by the destructor.
//
// Errors: a workdir that cannot be created or a spill write that fails (a
// full disk) is a claw::Error naming the path and the OS reason.
//
// Thread-safety: add() may be called from many threads at once; finish()
// is called once, after every add() has returned; nothing may be called
// after it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "claw/curate/minhash.h"

namespace claw::curate {

// A document to remove: `doc` duplicates `kept`, the lowest-numbered
// document of its cluster (kept < doc).
struct Duplicate {
  uint64_t doc = 0;
  uint64_t kept = 0;
  bool operator==(const Duplicate&) const = default;
};

// What a dedup pass found. Pair counts are per LSH band: a pair that shares
// three bands is counted three times (datatrove counts the same way).
struct DedupStats {
  int64_t documents = 0;        // documents added
  int64_t no_shingles = 0;      // MinHash: fewer words than ngram, so no signature: never a near duplicate
  int64_t candidate_pairs = 0;  // MinHash: over every band's buckets of k >= 2 documents, the k - 1 pairs
                                // (lowest document of the bucket, other)
  int64_t compared_pairs = 0;   // MinHash, threshold > 0: pairs whose signatures were compared
  int64_t verified_pairs = 0;   // MinHash: pairs accepted as duplicates: estimated Jaccard >= threshold
                                // (every candidate pair when threshold is 0)
  int64_t clusters = 0;         // groups of two or more duplicate documents
  int64_t removed = 0;          // documents returned by finish(): each cluster's size less one
  int64_t spills = 0;           // buffers written to workdir, each a file with a sorted run per band
                                // (0: everything fitted the budget)
  int64_t spilled_bytes = 0;    // their total size (the signatures of threshold > 0 not counted)
};

// The memory budget when the caller names none.
inline constexpr size_t kDefaultDedupMemory = size_t{1} << 30;

// How exact dedup normalises text before hashing it.
enum class ExactNormalization {
  none,                  // the bytes as they are
  whitespace_lowercase,  // runs of white space -> one space, trimmed, lowercased (normalize_space_case)
};

// "none" | "whitespace_lowercase"; anything else is a claw::Error listing both.
ExactNormalization parse_exact_normalization(std::string_view name);

// Exact dedup: documents whose normalised text has the same XXH3-128 hash
// are one cluster (a false match needs a 128-bit collision: ~N^2 / 2^129).
class ExactDedup {
 public:
  explicit ExactDedup(std::string workdir, size_t memory_budget_bytes = kDefaultDedupMemory,
                      ExactNormalization normalization = ExactNormalization::whitespace_lowercase);
  ~ExactDedup();
  ExactDedup(const ExactDedup&) = delete;
  ExactDedup& operator=(const ExactDedup&) = delete;

  // Thread-safe; hashes in the calling thread.
  void add(uint64_t doc, std::string_view text);
  // add() in two halves, for a key computed elsewhere (another process of
  // a job array): the 128-bit key of a text, and adding a document by it.
  static void key(std::string_view text, ExactNormalization normalization, std::span<uint64_t, 2> out);
  void add_key(uint64_t doc, std::span<const uint64_t, 2> key);
  // Sorted by doc.
  std::vector<Duplicate> finish(DedupStats* stats = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Fuzzy dedup (datatrove's MinhashDedupSignature -> MinhashDedupBuckets ->
// MinhashDedupCluster in one object): add() computes the signature and its
// band keys; finish() sorts each band's keys, takes every bucket of equal
// keys as candidate pairs, keeps those that pass the threshold and joins
// them with union-find. With threshold > 0 each document of a bucket is
// compared with the bucket's first documents that matched none before it
// (at most 32 of them), so a bucket of k documents costs O(32 k) comparisons
// rather than k^2 / 2.
//
// With params.verify each candidate pair is judged by the exact Jaccard of
// the two shingle sets (kept in a file under workdir: 8 bytes per distinct
// shingle, 16 per document), and a document is removed only for a kept one
// it passed against (greedy in document order over the verified pairs, not
// union-find: no chain removes a document below the threshold of the one
// kept). verified_pairs then counts pairs at or above p.jaccard().
class MinHashDedup {
 public:
  // Validates `params` (claw::Error).
  MinHashDedup(const MinHashParams& params, std::string workdir, size_t memory_budget_bytes = kDefaultDedupMemory);
  ~MinHashDedup();
  MinHashDedup(const MinHashDedup&) = delete;
  MinHashDedup& operator=(const MinHashDedup&) = delete;

  // Thread-safe; shingles and computes the signature in the calling thread.
  // Document numbers must be below 2^32 - 1.
  void add(uint64_t doc, std::string_view text);
  // add() in two halves, for signatures computed elsewhere (another process
  // of a job array): the signature of a text (num_perm() entries; false when
  // the text has fewer than `ngram` words), and adding a document by it (an
  // empty span: no shingles). Both thread-safe.
  bool signature(std::string_view text, std::span<uint32_t> sig) const;
  void add_signature(uint64_t doc, std::span<const uint32_t> sig);
  // Sorted by doc.
  std::vector<Duplicate> finish(DedupStats* stats = nullptr);

  const MinHasher& hasher() const;

 private:
  void add_signature(uint64_t doc, std::span<const uint32_t> sig, bool from_text);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A repeated paragraph: paragraph `paragraph` of `doc` repeats paragraph
// `kept_paragraph` of `kept`, its first occurrence ((kept, kept_paragraph)
// < (doc, paragraph)).
struct ParagraphDuplicate {
  uint64_t doc = 0;
  uint32_t paragraph = 0;
  uint64_t kept = 0;
  uint32_t kept_paragraph = 0;
  bool operator==(const ParagraphDuplicate&) const = default;
};

// Paragraph-level exact dedup (CCNet's line dedup; Wenzek et al. 2019): a
// paragraph is a '\n'-separated line, numbered from 0 within its document;
// lines are compared after whitespace_lowercase normalisation by their
// XXH3-128 hash, and every occurrence of a line but the first (the lowest
// (document, line)) is a duplicate, also inside one document. Lines shorter
// than `min_chars` bytes after normalisation (blank lines among them) are
// never duplicates. Memory and threads as for ExactDedup (32 bytes per
// line in the buffer).
class ParagraphDedup {
 public:
  explicit ParagraphDedup(std::string workdir, size_t memory_budget_bytes = kDefaultDedupMemory,
                          size_t min_chars = 1);
  ~ParagraphDedup();
  ParagraphDedup(const ParagraphDedup&) = delete;
  ParagraphDedup& operator=(const ParagraphDedup&) = delete;

  // Thread-safe.
  void add(uint64_t doc, std::string_view text);
  // Sorted by (doc, paragraph). Stats: clusters = distinct repeated lines,
  // removed = occurrences returned.
  std::vector<ParagraphDuplicate> finish(DedupStats* stats = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// `text` without the lines numbered in `paragraphs` (ascending), each
// removed with its '\n'.
std::string remove_paragraphs(std::string_view text, std::span<const uint32_t> paragraphs);

}  // namespace claw::curate
