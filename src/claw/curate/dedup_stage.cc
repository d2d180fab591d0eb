#include "claw/curate/dedup_stage.h"

#include <cstring>
#include <optional>

#include "claw/core/error.h"
#include "claw/curate/dedup.h"
#include "claw/curate/minhash.h"

namespace claw::curate {
namespace {

std::vector<Removal> to_removals(const std::vector<Duplicate>& d) {
  std::vector<Removal> out;
  out.reserve(d.size());
  for (const Duplicate& x : d) out.push_back({x.doc, x.kept});
  return out;
}

void count(const DedupStats& s, StageCounters& c) {
  c.add("duplicates", s.removed);
  c.add("clusters", s.clusters);
  if (s.candidate_pairs) c.add("candidate_pairs", s.candidate_pairs);
  if (s.no_shingles) c.add("too_short_to_shingle", s.no_shingles);
  if (s.spills) c.add("spills", s.spills);
}

template <class Dedup>
std::vector<Removal> finish_and_count(Dedup& dedup, StageCounters& counters) {
  DedupStats stats;
  std::vector<Removal> r = to_removals(dedup.finish(&stats));
  count(stats, counters);
  return r;
}

// memory_mb: the deduplicator's buffer budget; it spills to workdir past it.
// The default keeps `claw curate` within a few hundred MB whatever the corpus.
size_t memory_budget(StageKeys& keys) {
  const int64_t mb = keys.integer("memory_mb", 256);
  if (mb < 1) fail("{}: memory_mb = {} is invalid; it must be at least 1", keys.where(), mb);
  return static_cast<size_t>(mb) << 20;
}

class Exact final : public CorpusDeduplicator {
 public:
  Exact(ExactNormalization norm, const std::string& workdir, size_t budget) : norm_(norm) {
    if (!workdir.empty()) dedup_.emplace(workdir, budget, norm);
  }
  size_t fingerprint_bytes() const override { return 2 * sizeof(uint64_t); }
  void fingerprint(std::string_view text, std::span<std::byte> out) const override {
    uint64_t k[2];
    ExactDedup::key(text, norm_, k);
    std::memcpy(out.data(), k, sizeof k);
  }
  void add(uint64_t doc, std::span<const std::byte> fp) override {
    uint64_t k[2];
    std::memcpy(k, fp.data(), sizeof k);
    dedup_->add_key(doc, k);
  }
  std::vector<Removal> finish(StageCounters& counters) override { return finish_and_count(*dedup_, counters); }

 private:
  ExactNormalization norm_;
  std::optional<ExactDedup> dedup_;
};

// Fingerprint: a uint32 flag (1: the text has shingles) and the signature.
class MinHash final : public CorpusDeduplicator {
 public:
  MinHash(const MinHashParams& p, const std::string& workdir, size_t budget) : hasher_(p), perm_(p.num_perm()) {
    if (!workdir.empty()) dedup_.emplace(p, workdir, budget);
  }
  // Verification needs the texts (the shingle sets): no fingerprints then.
  size_t fingerprint_bytes() const override { return hasher_.params().verify ? 0 : sizeof(uint32_t) * (1 + perm_); }
  void add_text(uint64_t doc, std::string_view text) override { dedup_->add(doc, text); }
  void fingerprint(std::string_view text, std::span<std::byte> out) const override {
    thread_local MinHasher::Scratch scratch;
    thread_local std::vector<uint32_t> sig;
    sig.assign(1 + perm_, 0);
    const auto shingles = hasher_.shingles(text, scratch);
    if (!shingles.empty()) {
      sig[0] = 1;
      hasher_.signature(shingles, std::span<uint32_t>(sig).subspan(1));
    }
    std::memcpy(out.data(), sig.data(), fingerprint_bytes());
  }
  void add(uint64_t doc, std::span<const std::byte> fp) override {
    thread_local std::vector<uint32_t> sig;
    sig.resize(1 + perm_);
    std::memcpy(sig.data(), fp.data(), fingerprint_bytes());
    dedup_->add_signature(doc, sig[0] ? std::span<const uint32_t>(sig).subspan(1) : std::span<const uint32_t>());
  }
  std::vector<Removal> finish(StageCounters& counters) override { return finish_and_count(*dedup_, counters); }

 private:
  MinHasher hasher_;
  size_t perm_;
  std::optional<MinHashDedup> dedup_;
};

// Paragraph-level: each line's hash is taken in add_text.
class Paragraphs final : public CorpusDeduplicator {
 public:
  Paragraphs(const std::string& workdir, size_t budget, size_t min_chars) {
    if (!workdir.empty()) dedup_.emplace(workdir, budget, min_chars);
  }
  size_t fingerprint_bytes() const override { return 0; }
  void fingerprint(std::string_view, std::span<std::byte>) const override {}
  void add(uint64_t, std::span<const std::byte>) override { CLAW_CHECK(false); }
  void add_text(uint64_t doc, std::string_view text) override { dedup_->add(doc, text); }
  std::vector<Removal> finish(StageCounters& counters) override {
    DedupStats stats;
    const std::vector<ParagraphDuplicate> d = dedup_->finish(&stats);
    counters.add("paragraphs_removed", stats.removed);
    counters.add("repeated_paragraphs", stats.clusters);
    if (stats.spills) counters.add("spills", stats.spills);
    std::vector<Removal> out;
    out.reserve(d.size());
    for (const ParagraphDuplicate& x : d) out.push_back({x.doc, x.kept, x.paragraph});
    return out;
  }

 private:
  std::optional<ParagraphDedup> dedup_;
};

}  // namespace

void CorpusDeduplicator::add_text(uint64_t, std::string_view) { CLAW_CHECK(false); }

std::unique_ptr<CorpusDeduplicator> make_deduplicator(const std::string& kind, StageKeys& keys,
                                                      const std::string& workdir) {
  if (kind == "exact_dedup") {
    const ExactNormalization norm = parse_exact_normalization(keys.string("normalization", "whitespace_lowercase"));
    const size_t budget = memory_budget(keys);
    keys.check_all_read();
    return std::make_unique<Exact>(norm, workdir, budget);
  }
  if (kind == "paragraph_dedup") {
    const int64_t min_chars = keys.integer("min_chars", 1);
    if (min_chars < 1) fail("{}: min_chars = {} is invalid; it must be at least 1", keys.where(), min_chars);
    const size_t budget = memory_budget(keys);
    keys.check_all_read();
    return std::make_unique<Paragraphs>(workdir, budget, static_cast<size_t>(min_chars));
  }
  CLAW_CHECK(kind == "minhash_dedup");
  MinHashParams p;
  p.ngram = static_cast<int>(keys.integer("ngram", p.ngram));
  p.bands = static_cast<int>(keys.integer("bands", p.bands));
  p.rows = static_cast<int>(keys.integer("rows", p.rows));
  p.seed = static_cast<uint64_t>(keys.integer("seed", static_cast<int64_t>(p.seed)));
  p.threshold = keys.number("threshold", p.threshold);
  p.verify = keys.boolean("verify", true);
  p.norm.lowercase = keys.boolean("lowercase", p.norm.lowercase);
  p.norm.normalize_numbers = keys.boolean("normalize_numbers", p.norm.normalize_numbers);
  p.norm.strip_diacritics = keys.boolean("strip_diacritics", p.norm.strip_diacritics);
  const size_t budget = memory_budget(keys);
  keys.check_all_read();
  try {
    p.validate();
  } catch (const Error& e) {
    fail("{}: {}", keys.where(), e.what());
  }
  return std::make_unique<MinHash>(p, workdir, budget);
}

}  // namespace claw::curate
