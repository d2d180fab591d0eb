#include "claw/curate/dedup.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <span>
#include <utility>

// Header-only xxHash (Debian's libxxhash-dev), inlined into the hot loops.
// Its AVX-512 path trips GCC 12's -Wmaybe-uninitialized inside the
// intrinsics headers; the AVX2 path is as fast for the short inputs here.
#define XXH_INLINE_ALL
#if defined(__AVX512F__) && defined(__AVX2__)
#define XXH_VECTOR 2  // XXH_AVX2
#endif
#include <xxhash.h>

#include "claw/core/error.h"
#include "claw/curate/dedup_spill.h"
#include "claw/data/file_io.h"

namespace claw::curate {

using data::FileDescriptor;

ExactNormalization parse_exact_normalization(std::string_view name) {
  if (name == "none") return ExactNormalization::none;
  if (name == "whitespace_lowercase") return ExactNormalization::whitespace_lowercase;
  fail("unknown exact dedup normalization '{}': expected none or whitespace_lowercase", name);
}

using namespace spill;  // NOLINT: the shared machinery of this file's passes

// ---------------------------------------------------------------------------
// ExactDedup

struct ExactDedup::Impl {
  Impl(const std::string& workdir, size_t budget, ExactNormalization n)
      : dir(workdir, "exact"), normalization(n), sorter(dir.path(), "exact", 1, budget) {}
  WorkDir dir;
  ExactNormalization normalization;
  SpillSorter<ExactEntry> sorter;
  std::atomic<int64_t> documents{0};
  bool finished = false;
};

ExactDedup::ExactDedup(std::string workdir, size_t memory_budget_bytes, ExactNormalization normalization)
    : impl_(std::make_unique<Impl>(workdir, memory_budget_bytes, normalization)) {}

ExactDedup::~ExactDedup() = default;

void ExactDedup::key(std::string_view text, ExactNormalization normalization, std::span<uint64_t, 2> out) {
  XXH128_hash_t h;
  if (normalization == ExactNormalization::none) {
    h = XXH3_128bits(text.data(), text.size());
  } else {
    thread_local std::string normalized;
    normalize_space_case(text, normalized);
    h = XXH3_128bits(normalized.data(), normalized.size());
  }
  out[0] = h.high64, out[1] = h.low64;
}

void ExactDedup::add(uint64_t doc, std::string_view text) {
  uint64_t k[2];
  key(text, impl_->normalization, k);
  add_key(doc, k);
}

void ExactDedup::add_key(uint64_t doc, std::span<const uint64_t, 2> key) {
  const ExactEntry e{key[0], key[1], doc};
  impl_->sorter.add(&e);
  impl_->documents.fetch_add(1, std::memory_order_relaxed);
}

std::vector<Duplicate> ExactDedup::finish(DedupStats* stats_out) {
  CLAW_CHECK(!impl_->finished, "ExactDedup::finish called twice");
  impl_->finished = true;
  DedupStats stats;
  stats.documents = impl_->documents.load();
  std::vector<Duplicate> out;
  bool have = false;
  ExactEntry first{};
  bool first_counted = false;
  impl_->sorter.scan(0, [&](const ExactEntry& e) {
    if (have && e.high == first.high && e.low == first.low) {
      out.push_back({e.doc, first.doc});
      if (!first_counted) {
        first_counted = true;
        ++stats.clusters;
      }
      return;
    }
    have = true;
    first = e;
    first_counted = false;
  });
  std::sort(out.begin(), out.end(), [](const Duplicate& a, const Duplicate& b) { return a.doc < b.doc; });
  stats.removed = static_cast<int64_t>(out.size());
  stats.spills = impl_->sorter.spills();
  stats.spilled_bytes = impl_->sorter.spilled_bytes();
  if (stats_out != nullptr) *stats_out = stats;
  return out;
}

// ---------------------------------------------------------------------------
// ParagraphDedup

struct ParagraphDedup::Impl {
  Impl(const std::string& workdir, size_t budget, size_t min)
      : dir(workdir, "paragraph"), sorter(dir.path(), "lines", 1, budget), min_chars(min) {}
  WorkDir dir;
  SpillSorter<LineEntry> sorter;
  size_t min_chars;
  std::atomic<int64_t> documents{0};
  bool finished = false;
};

ParagraphDedup::ParagraphDedup(std::string workdir, size_t memory_budget_bytes, size_t min_chars)
    : impl_(std::make_unique<Impl>(workdir, memory_budget_bytes, min_chars)) {}

ParagraphDedup::~ParagraphDedup() = default;

void ParagraphDedup::add(uint64_t doc, std::string_view text) {
  thread_local std::string normalized;
  uint32_t line = 0;
  for (size_t pos = 0; pos <= text.size(); ++line) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    normalize_space_case(text.substr(pos, eol - pos), normalized);
    pos = eol + 1;
    if (normalized.size() < std::max<size_t>(impl_->min_chars, 1)) continue;
    const XXH128_hash_t h = XXH3_128bits(normalized.data(), normalized.size());
    const LineEntry e{h.high64, h.low64, doc, line, 0};
    impl_->sorter.add(&e);
  }
  impl_->documents.fetch_add(1, std::memory_order_relaxed);
}

std::vector<ParagraphDuplicate> ParagraphDedup::finish(DedupStats* stats_out) {
  CLAW_CHECK(!impl_->finished, "ParagraphDedup::finish called twice");
  impl_->finished = true;
  DedupStats stats;
  stats.documents = impl_->documents.load();
  std::vector<ParagraphDuplicate> out;
  bool have = false, counted = false;
  LineEntry first{};
  impl_->sorter.scan(0, [&](const LineEntry& e) {
    if (have && e.high == first.high && e.low == first.low) {
      out.push_back({e.doc, e.line, first.doc, first.line});
      if (!counted) {
        counted = true;
        ++stats.clusters;
      }
      return;
    }
    have = true;
    first = e;
    counted = false;
  });
  std::sort(out.begin(), out.end(), [](const ParagraphDuplicate& a, const ParagraphDuplicate& b) {
    return a.doc != b.doc ? a.doc < b.doc : a.paragraph < b.paragraph;
  });
  stats.removed = static_cast<int64_t>(out.size());
  stats.spills = impl_->sorter.spills();
  stats.spilled_bytes = impl_->sorter.spilled_bytes();
  if (stats_out != nullptr) *stats_out = stats;
  return out;
}

std::string remove_paragraphs(std::string_view text, std::span<const uint32_t> paragraphs) {
  std::string out;
  out.reserve(text.size());
  size_t next = 0;
  uint32_t line = 0;
  for (size_t pos = 0; pos <= text.size(); ++line) {
    size_t eol = text.find('\n', pos);
    const bool last = eol == std::string_view::npos;
    if (last) eol = text.size();
    while (next < paragraphs.size() && paragraphs[next] < line) ++next;
    if (next < paragraphs.size() && paragraphs[next] == line) {
      // Removed with its '\n'; a removed last line takes the '\n' before it.
      if (last && !out.empty() && out.back() == '\n') out.pop_back();
    } else {
      out.append(text.substr(pos, eol - pos));
      if (!last) out.push_back('\n');
    }
    pos = eol + 1;
  }
  return out;
}

}  // namespace claw::curate
