#include "claw/curate/dedup.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <unordered_set>
#include <utility>
#include <vector>

#include "claw/core/error.h"
#include "claw/curate/dedup_spill.h"

namespace claw::curate {

using namespace spill;  // NOLINT: the shared machinery of the passes

// ---------------------------------------------------------------------------
// MinHashDedup

namespace {
// With threshold > 0, a bucket's documents are compared with at most this
// many earlier documents of the bucket (those that matched none before them).
constexpr int kMaxRepresentatives = 32;
}  // namespace

struct MinHashDedup::Impl {
  Impl(const MinHashParams& params, const std::string& workdir, size_t budget)
      : hasher(params),
        dir(workdir, "minhash"),
        sorter(dir.path(), "band", params.bands, budget),
        num_perm(params.num_perm()) {
    if (params.verify) {
      // Each document's shingle set, appended; its place (offset, count) at
      // 16 bytes x its number in the index.
      set_path = dir.path() + "/shingles.bin";
      set_fd = open_or_fail(set_path, O_RDWR | O_CREAT | O_TRUNC);
      index_path = dir.path() + "/shingles.idx";
      index_fd = open_or_fail(index_path, O_RDWR | O_CREAT | O_TRUNC);
    } else if (params.threshold > 0) {
      sig_path = dir.path() + "/signatures.bin";
      sig_fd = open_or_fail(sig_path, O_RDWR | O_CREAT | O_TRUNC);
    }
  }
  uint64_t sig_offset(uint64_t doc) const { return doc * static_cast<uint64_t>(num_perm) * sizeof(uint32_t); }
  void store_set(uint64_t doc, const std::vector<uint64_t>& set) {
    const uint64_t bytes = set.size() * sizeof(uint64_t);
    const uint64_t place[2] = {set_end.fetch_add(bytes), set.size()};
    pwrite_all(set_fd, set.data(), bytes, place[0], set_path, "dedup shingle file");
    pwrite_all(index_fd, place, sizeof place, doc * sizeof place, index_path, "dedup shingle index");
  }
  void load_set(uint64_t doc, std::vector<uint64_t>& set) const {
    uint64_t place[2];
    pread_all(index_fd, place, sizeof place, doc * sizeof place, index_path, "dedup shingle index");
    set.resize(place[1]);
    pread_all(set_fd, set.data(), place[1] * sizeof(uint64_t), place[0], set_path, "dedup shingle file");
  }
  std::vector<Duplicate> finish_verified(DedupStats& stats);

  MinHasher hasher;
  WorkDir dir;
  SpillSorter<BandEntry> sorter;
  int num_perm;
  std::string sig_path, set_path, index_path;
  FileDescriptor sig_fd, set_fd, index_fd;
  std::atomic<uint64_t> set_end{0};
  std::atomic<int64_t> documents{0}, no_shingles{0};
  std::atomic<uint64_t> doc_end{0};  // 1 + the highest document number added
  bool finished = false;
};

MinHashDedup::MinHashDedup(const MinHashParams& params, std::string workdir, size_t memory_budget_bytes)
    : impl_(std::make_unique<Impl>(params, workdir, memory_budget_bytes)) {}

MinHashDedup::~MinHashDedup() = default;

const MinHasher& MinHashDedup::hasher() const { return impl_->hasher; }

bool MinHashDedup::signature(std::string_view text, std::span<uint32_t> sig) const {
  thread_local MinHasher::Scratch shingling;
  const auto shingles = impl_->hasher.shingles(text, shingling);
  if (shingles.empty()) return false;
  CLAW_CHECK(sig.size() == static_cast<size_t>(impl_->num_perm));
  impl_->hasher.signature(shingles, sig);
  return true;
}

void MinHashDedup::add(uint64_t doc, std::string_view text) {
  thread_local std::vector<uint32_t> sig;
  sig.resize(static_cast<size_t>(impl_->num_perm));
  if (!impl_->hasher.params().verify) {
    if (!signature(text, sig)) sig.clear();
    return add_signature(doc, sig);
  }
  thread_local MinHasher::Scratch shingling;
  thread_local std::vector<uint64_t> set;
  impl_->hasher.shingle_set(text, shingling, set);
  if (set.empty()) {
    sig.clear();
  } else {
    impl_->hasher.signature(set, sig);
    if (doc < UINT32_MAX) impl_->store_set(doc, set);
  }
  add_signature(doc, sig, true);
}

void MinHashDedup::add_signature(uint64_t doc, std::span<const uint32_t> sig) { add_signature(doc, sig, false); }

void MinHashDedup::add_signature(uint64_t doc, std::span<const uint32_t> sig, bool from_text) {
  if (doc >= UINT32_MAX) fail("MinHash dedup takes at most 2^32 - 1 documents; got document number {}", doc);
  CLAW_CHECK(from_text || !impl_->hasher.params().verify, "MinHash verification needs the texts: add(), not add_signature()");
  thread_local std::vector<BandEntry> entries;
  Impl& im = *impl_;
  im.documents.fetch_add(1, std::memory_order_relaxed);
  atomic_max(im.doc_end, doc + 1);
  if (sig.empty()) {
    im.no_shingles.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  CLAW_CHECK(sig.size() == static_cast<size_t>(im.num_perm));
  if (im.sig_fd.get() >= 0)
    pwrite_all(im.sig_fd, sig.data(), sig.size() * sizeof(uint32_t), im.sig_offset(doc), im.sig_path,
               "dedup signature file");
  const int bands = im.hasher.params().bands;
  entries.resize(static_cast<size_t>(bands));
  for (int b = 0; b < bands; ++b) entries[b] = {im.hasher.band_key(sig, b), doc};
  im.sorter.add(entries.data());
}

std::vector<Duplicate> MinHashDedup::finish(DedupStats* stats_out) {
  Impl& im = *impl_;
  CLAW_CHECK(!im.finished, "MinHashDedup::finish called twice");
  im.finished = true;
  const MinHashParams& p = im.hasher.params();
  DedupStats stats;
  stats.documents = im.documents.load();
  stats.no_shingles = im.no_shingles.load();
  if (p.verify) {
    std::vector<Duplicate> out = im.finish_verified(stats);
    stats.spills = im.sorter.spills();
    stats.spilled_bytes = im.sorter.spilled_bytes();
    if (stats_out != nullptr) *stats_out = stats;
    return out;
  }
  UnionFind uf(im.doc_end.load());

  const auto np = static_cast<size_t>(im.num_perm);
  // The least number of equal signature entries that passes the threshold.
  const auto min_equal = static_cast<size_t>(std::ceil(p.threshold * static_cast<double>(np) - 1e-9));
  std::vector<uint32_t> rep_docs(kMaxRepresentatives);
  std::vector<uint32_t> rep_sigs(kMaxRepresentatives * np);
  std::vector<uint32_t> cur_sig(np);
  auto load_sig = [&](uint64_t doc, uint32_t* dst) {
    pread_all(im.sig_fd, dst, np * sizeof(uint32_t), im.sig_offset(doc), im.sig_path, "dedup signature file");
  };

  for (int band = 0; band < p.bands; ++band) {
    bool have = false;
    uint64_t key = 0;
    uint32_t first = 0;
    int reps = 0;
    im.sorter.scan(band, [&](const BandEntry& e) {
      const auto doc = static_cast<uint32_t>(e.doc);
      if (!have || e.key != key) {  // a new bucket
        have = true;
        key = e.key;
        first = doc;
        reps = 0;
        return;
      }
      ++stats.candidate_pairs;
      if (p.threshold <= 0) {
        uf.unite(first, doc);
        ++stats.verified_pairs;
        return;
      }
      if (reps == 0) {  // the bucket's first document, read only once the bucket has a second
        rep_docs[0] = first;
        load_sig(first, rep_sigs.data());
        reps = 1;
      }
      load_sig(doc, cur_sig.data());
      bool matched = false;
      for (int r = 0; r < reps; ++r) {
        if (uf.find(rep_docs[r]) == uf.find(doc)) {
          matched = true;
          continue;
        }
        ++stats.compared_pairs;
        const uint32_t* rs = rep_sigs.data() + static_cast<size_t>(r) * np;
        size_t equal = 0;
        for (size_t i = 0; i < np; ++i) equal += rs[i] == cur_sig[i];
        if (equal >= min_equal) {
          uf.unite(rep_docs[r], doc);
          ++stats.verified_pairs;
          matched = true;
        }
      }
      if (!matched && reps < kMaxRepresentatives) {
        rep_docs[reps] = doc;
        std::copy(cur_sig.begin(), cur_sig.end(), rep_sigs.begin() + static_cast<ptrdiff_t>(reps * np));
        ++reps;
      }
    });
  }
  std::vector<Duplicate> out = duplicates_of(uf, stats);
  stats.spills = im.sorter.spills();
  stats.spilled_bytes = im.sorter.spilled_bytes();
  if (stats_out != nullptr) *stats_out = stats;
  return out;
}

// Verified: every candidate pair (a bucket's documents against its first
// ones that matched none before them, as with a threshold) is a duplicate
// edge only if the exact Jaccard of its shingle sets reaches p.jaccard().
// Then, in document order, a document is removed for the lowest-numbered
// kept document it has an edge to: every removal is verified against the
// document it is removed for, and a chain a ~ b ~ c (a and c apart) removes
// b but not c. Independent of the order of add() and of the budget, as the
// edges are.
std::vector<Duplicate> MinHashDedup::Impl::finish_verified(DedupStats& stats) {
  const MinHashParams& p = hasher.params();
  const double need = p.jaccard();
  std::vector<std::pair<uint32_t, uint32_t>> edges;  // (higher doc, lower doc), J >= need
  std::unordered_set<uint64_t> compared;             // pairs seen in an earlier band
  std::vector<uint32_t> rep_docs;
  std::vector<std::vector<uint64_t>> rep_sets(kMaxRepresentatives);
  std::vector<uint64_t> cur;
  for (int band = 0; band < p.bands; ++band) {
    bool have = false;
    uint64_t key = 0;
    sorter.scan(band, [&](const BandEntry& e) {
      const auto doc = static_cast<uint32_t>(e.doc);
      if (!have || e.key != key) {  // a new bucket
        have = true;
        key = e.key;
        rep_docs.assign(1, doc);
        rep_sets[0].clear();  // read once the bucket has a second document
        return;
      }
      ++stats.candidate_pairs;
      if (rep_docs.size() == 1 && rep_sets[0].empty()) load_set(rep_docs[0], rep_sets[0]);
      load_set(doc, cur);
      bool matched = false;
      for (size_t r = 0; r < rep_docs.size(); ++r) {
        const uint32_t lo = std::min(rep_docs[r], doc), hi = std::max(rep_docs[r], doc);
        if (!compared.insert(uint64_t{lo} << 32 | hi).second) {
          matched = true;  // judged in an earlier band: not a representative here either
          continue;
        }
        ++stats.compared_pairs;
        if (MinHasher::jaccard(rep_sets[r], cur) >= need) {
          edges.emplace_back(hi, lo);
          ++stats.verified_pairs;
          matched = true;
        }
      }
      if (!matched && rep_docs.size() < static_cast<size_t>(kMaxRepresentatives)) {
        rep_sets[rep_docs.size()] = cur;
        rep_docs.push_back(doc);
      }
    });
  }
  std::sort(edges.begin(), edges.end());
  std::vector<bool> removed(doc_end.load());
  std::vector<Duplicate> out;
  std::unordered_set<uint32_t> kept_docs;
  for (size_t i = 0; i < edges.size();) {
    const uint32_t doc = edges[i].first;
    for (; i < edges.size() && edges[i].first == doc; ++i)
      if (!removed[doc] && !removed[edges[i].second]) {
        removed[doc] = true;
        out.push_back({doc, edges[i].second});
        kept_docs.insert(edges[i].second);
      }
  }
  stats.clusters = static_cast<int64_t>(kept_docs.size());
  stats.removed = static_cast<int64_t>(out.size());
  return out;
}

}  // namespace claw::curate
