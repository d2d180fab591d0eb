#include "claw/data/curate/dedup_stage.h"

#include <cstring>
#include <optional>

#include "claw/core/error.h"
#include "claw/data/curate/dedup.h"
#include "claw/data/curate/minhash.h"

namespace claw::data::curate {
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
  size_t fingerprint_bytes() const override { return sizeof(uint32_t) * (1 + perm_); }
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

}  // namespace

std::unique_ptr<CorpusDeduplicator> make_deduplicator(const std::string& kind, StageKeys& keys,
                                                      const std::string& workdir) {
  if (kind == "exact_dedup") {
    const ExactNormalization norm = parse_exact_normalization(keys.string("normalization", "whitespace_lowercase"));
    const size_t budget = memory_budget(keys);
    keys.check_all_read();
    return std::make_unique<Exact>(norm, workdir, budget);
  }
  CLAW_CHECK(kind == "minhash_dedup");
  MinHashParams p;
  p.ngram = static_cast<int>(keys.integer("ngram", p.ngram));
  p.bands = static_cast<int>(keys.integer("bands", p.bands));
  p.rows = static_cast<int>(keys.integer("rows", p.rows));
  p.seed = static_cast<uint64_t>(keys.integer("seed", static_cast<int64_t>(p.seed)));
  p.threshold = keys.number("threshold", p.threshold);
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

}  // namespace claw::data::curate
