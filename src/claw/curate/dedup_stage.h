// Deduplication as a pipeline stage (pipeline.h): the documents reaching
// the stage are numbered 0..N-1 in shard and line order. Document-level
// deduplicators give each a fingerprint (exact: a 128-bit hash of the
// normalised text; MinHash: its signature), computed by the workers or, in
// a job array, by the task that owns the shard and saved beside it; the
// paragraph-level one takes the text itself (its lines' hashes are cheap
// next to reading them). finish() names the duplicates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "claw/curate/stage.h"

namespace claw::curate {

inline constexpr uint32_t kWholeDocument = UINT32_MAX;

struct Removal {
  uint64_t doc;   // the duplicate
  uint64_t kept;  // the document kept for its group (a lower number; for a paragraph, <= doc)
  uint32_t paragraph = kWholeDocument;  // paragraph-level: the line of `doc` to drop
};

class CorpusDeduplicator {
 public:
  virtual ~CorpusDeduplicator() = default;
  // Fixed size of a fingerprint, and a text's (thread-safe, no state).
  // 0: the deduplicator takes the text (add_text), not a fingerprint.
  virtual size_t fingerprint_bytes() const = 0;
  virtual void fingerprint(std::string_view text, std::span<std::byte> out) const = 0;
  // Thread-safe; every document exactly once, in any order.
  virtual void add(uint64_t doc, std::span<const std::byte> fingerprint) = 0;
  virtual void add_text(uint64_t doc, std::string_view text);
  // The duplicates, sorted by (doc, paragraph); figures go to counters.
  // Paragraph-level removals (paragraph != kWholeDocument) leave the
  // document, without those lines.
  virtual std::vector<Removal> finish(StageCounters& counters) = 0;
};

// kind "exact_dedup" (keys: normalization = "whitespace_lowercase" | "none",
// memory_mb = 256) or "minhash_dedup" (ngram = 5, bands = 14, rows = 8,
// seed, verify = true: a candidate pair is a duplicate when the exact
// Jaccard of its shingle sets reaches threshold (0.8 when threshold is 0);
// verify = false: threshold = 0 takes every LSH candidate pair, as
// datatrove, else the pair's estimated Jaccard must reach it; lowercase,
// normalize_numbers, strip_diacritics; memory_mb = 256) or
// "paragraph_dedup" (lines repeated across or within documents, all but
// the first occurrence dropped; min_chars = 1: shorter lines, blank ones
// among them, never count; memory_mb = 256); dedup.h has the algorithms. Scratch files go under workdir. With an empty workdir the
// object only fingerprints (add and finish must not be called).
std::unique_ptr<CorpusDeduplicator> make_deduplicator(const std::string& kind, StageKeys& keys,
                                                      const std::string& workdir);

}  // namespace claw::curate
