#include "claw/data/curate/dedup_stage.h"

#include <xxhash.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "claw/core/error.h"

namespace claw::data::curate {
namespace {

// Placeholder until dedup.h: exact duplicates by a 64-bit hash, in memory.
class InMemoryExact final : public CorpusDeduplicator {
 public:
  void add(uint64_t doc, std::string_view text) override {
    const uint64_t h = XXH3_64bits(text.data(), text.size());
    std::lock_guard lock(mu_);
    entries_.push_back({h, doc});
  }
  std::vector<Removal> finish(StageCounters& counters) override {
    std::sort(entries_.begin(), entries_.end());
    std::vector<Removal> out;
    for (size_t g = 0, e = 0; g < entries_.size(); g = e)
      for (e = g + 1; e < entries_.size() && entries_[e].first == entries_[g].first; ++e)
        out.push_back({entries_[e].second, entries_[g].second});
    std::sort(out.begin(), out.end(), [](const Removal& a, const Removal& b) { return a.doc < b.doc; });
    counters.add("duplicates", static_cast<int64_t>(out.size()));
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<uint64_t, uint64_t>> entries_;
};

}  // namespace

std::unique_ptr<CorpusDeduplicator> make_deduplicator(const std::string& kind, StageKeys& keys,
                                                      const std::string& workdir) {
  (void)workdir;
  keys.check_all_read();
  if (kind == "exact_dedup") return std::make_unique<InMemoryExact>();
  fail("{}: '{}' is not built yet", keys.where(), kind);
}

}  // namespace claw::data::curate
