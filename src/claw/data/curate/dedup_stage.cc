#include "claw/data/curate/dedup_stage.h"

#include "claw/core/error.h"
#include "claw/data/curate/dedup.h"

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

// memory_mb: the deduplicator's buffer budget; it spills to workdir past it.
// The default keeps `claw curate` within a few hundred MB whatever the corpus.
size_t memory_budget(StageKeys& keys) {
  const int64_t mb = keys.integer("memory_mb", 256);
  if (mb < 1) fail("{}: memory_mb = {} is invalid; it must be at least 1", keys.where(), mb);
  return static_cast<size_t>(mb) << 20;
}

template <class Dedup>
class Deduplicator final : public CorpusDeduplicator {
 public:
  template <class... A>
  explicit Deduplicator(A&&... args) : dedup_(std::forward<A>(args)...) {}
  void add(uint64_t doc, std::string_view text) override { dedup_.add(doc, text); }
  std::vector<Removal> finish(StageCounters& counters) override {
    DedupStats stats;
    std::vector<Removal> r = to_removals(dedup_.finish(&stats));
    count(stats, counters);
    return r;
  }

 private:
  Dedup dedup_;
};

}  // namespace

std::unique_ptr<CorpusDeduplicator> make_deduplicator(const std::string& kind, StageKeys& keys,
                                                      const std::string& workdir) {
  if (kind == "exact_dedup") {
    const ExactNormalization norm = parse_exact_normalization(keys.string("normalization", "whitespace_lowercase"));
    const size_t budget = memory_budget(keys);
    keys.check_all_read();
    if (workdir.empty()) return nullptr;
    return std::make_unique<Deduplicator<ExactDedup>>(workdir, budget, norm);
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
  if (workdir.empty()) return nullptr;
  return std::make_unique<Deduplicator<MinHashDedup>>(p, workdir, budget);
}

}  // namespace claw::data::curate
