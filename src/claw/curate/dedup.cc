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
#include "claw/data/file_io.h"

namespace claw::curate {

using data::FileDescriptor;

ExactNormalization parse_exact_normalization(std::string_view name) {
  if (name == "none") return ExactNormalization::none;
  if (name == "whitespace_lowercase") return ExactNormalization::whitespace_lowercase;
  fail("unknown exact dedup normalization '{}': expected none or whitespace_lowercase", name);
}

namespace {

// ---------------------------------------------------------------------------
// Files

// A private directory under the caller's workdir, removed with its files.
class WorkDir {
 public:
  WorkDir(const std::string& workdir, const char* prefix) {
    std::error_code ec;
    std::filesystem::create_directories(workdir, ec);
    if (ec) fail("cannot create dedup workdir {}: {}", workdir, ec.message());
    std::string tmpl = workdir + "/" + prefix + "-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr)
      fail("cannot create a directory in dedup workdir {}: {}", workdir, std::strerror(errno));
    path_ = std::move(tmpl);
  }
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;
  ~WorkDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

FileDescriptor open_or_fail(const std::string& path, int flags) {
  FileDescriptor fd(::open(path.c_str(), flags | O_CLOEXEC, 0600));
  if (fd.get() < 0) fail("cannot open dedup spill file {}: {}", path, std::strerror(errno));
  return fd;
}

void write_all(const FileDescriptor& fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd.get(), p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("cannot write dedup spill file {}: {}", path, std::strerror(w < 0 ? errno : ENOSPC));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void pwrite_all(const FileDescriptor& fd, const void* data, size_t n, uint64_t offset, const std::string& path,
                const char* what) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd.get(), p, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("cannot write {} {}: {}", what, path, std::strerror(w < 0 ? errno : ENOSPC));
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
}

void pread_all(const FileDescriptor& fd, void* data, size_t n, uint64_t offset, const std::string& path,
               const char* what) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::pread(fd.get(), p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail("cannot read {} {}: {}", what, path, std::strerror(errno));
    CLAW_CHECK(r > 0, "{} {} ends before offset {}", what, path, offset);
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

// Fixed-size records to a file through a buffer.
template <class E>
class RunWriter {
 public:
  RunWriter(std::string path, size_t buffer_records)
      : path_(std::move(path)), fd_(open_or_fail(path_, O_WRONLY | O_CREAT | O_TRUNC)) {
    buf_.reserve(std::max<size_t>(buffer_records, 1));
  }
  void add(const E& e) {
    buf_.push_back(e);
    if (buf_.size() == buf_.capacity()) flush();
  }
  void write(std::span<const E> es) { write_all(fd_, es.data(), es.size_bytes(), path_); }
  void close() {
    flush();
    if (::close(fd_.release()) != 0) fail("cannot write dedup spill file {}: {}", path_, std::strerror(errno));
  }

 private:
  void flush() {
    write_all(fd_, buf_.data(), buf_.size() * sizeof(E), path_);
    buf_.clear();
  }
  std::string path_;
  FileDescriptor fd_;
  std::vector<E> buf_;
};

// A spill file, removed when the last run in it has been read.
class RunFile {
 public:
  explicit RunFile(std::string path) : path_(std::move(path)) {}
  RunFile(const RunFile&) = delete;
  RunFile& operator=(const RunFile&) = delete;
  ~RunFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A sorted run: `count` records at byte `offset` of a spill file.
struct Run {
  std::shared_ptr<RunFile> file;
  uint64_t offset = 0, count = 0;
};

// Reads a sorted run (in a file, or a span in memory) one record at a time.
template <class E>
class Cursor {
 public:
  explicit Cursor(std::span<const E> mem) : pos_(mem.data()), end_(mem.data() + mem.size()) {}
  Cursor(const Run& run, size_t buffer_records)
      : run_(run),
        fd_(open_or_fail(run.file->path(), O_RDONLY)),
        buf_(std::max<size_t>(std::min<uint64_t>(buffer_records, run.count), 1)),
        offset_(run.offset),
        left_(run.count) {
    refill();
  }
  bool done() const { return pos_ == end_; }
  const E& head() const { return *pos_; }
  void next() {
    if (++pos_ == end_ && left_ > 0) refill();
  }

 private:
  void refill() {
    const auto n = static_cast<size_t>(std::min<uint64_t>(left_, buf_.size()));
    pread_all(fd_, buf_.data(), n * sizeof(E), offset_, run_.file->path(), "dedup spill file");
    offset_ += n * sizeof(E);
    left_ -= n;
    pos_ = buf_.data();
    end_ = pos_ + n;
  }

  Run run_;
  FileDescriptor fd_;
  std::vector<E> buf_;
  uint64_t offset_ = 0, left_ = 0;
  const E* pos_ = nullptr;
  const E* end_ = nullptr;
};

// Calls visit(e) for the records of every cursor in ascending order.
template <class E, class Visit>
void merge_cursors(std::vector<Cursor<E>>& cursors, Visit&& visit) {
  std::vector<size_t> heap;
  for (size_t i = 0; i < cursors.size(); ++i)
    if (!cursors[i].done()) heap.push_back(i);
  auto later = [&](size_t a, size_t b) { return cursors[b].head() < cursors[a].head(); };
  std::make_heap(heap.begin(), heap.end(), later);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    Cursor<E>& c = cursors[heap.back()];
    visit(c.head());
    c.next();
    if (c.done()) heap.pop_back();
    else std::push_heap(heap.begin(), heap.end(), later);
  }
}

// Collects fixed-size records in `parts` partitions (one per LSH band) with
// bounded memory: each partition's records are buffered, and when the
// buffers reach a third of the budget they are sorted and written to one
// spill file, a sorted run per partition. scan() returns a partition in
// sorted order, merging its runs with what is still buffered. E has
// operator< and is trivially copyable.
//
// Memory: the buffers (<= budget / 3, with up to half again while a vector
// grows), one more set being written while another fills (<= budget / 3),
// and during scan() the read buffers (budget / 2 shared by the runs).
template <class E>
class SpillSorter {
 public:
  SpillSorter(std::string dir, std::string prefix, int parts, size_t memory_bytes)
      : dir_(std::move(dir)), prefix_(std::move(prefix)), parts_(parts), buf_(parts), runs_(parts) {
    limit_ = std::max<size_t>(1, memory_bytes / 3 / (sizeof(E) * static_cast<size_t>(parts)));
    read_bytes_ = memory_bytes / 2;
  }

  // Adds recs[p] to partition p for each p. Thread-safe.
  void add(const E* recs) {
    std::unique_lock lock(mu_);
    if (buf_[0].size() == buf_[0].capacity()) {
      const size_t cap = std::min(limit_, std::max<size_t>(256, 2 * buf_[0].capacity()));
      for (auto& b : buf_) b.reserve(cap);
    }
    for (int p = 0; p < parts_; ++p) buf_[p].push_back(recs[p]);
    if (buf_[0].size() < limit_) return;
    std::vector<std::vector<E>> full(parts_);
    full.swap(buf_);
    auto file = std::make_shared<RunFile>(fmt::format("{}/{}-{}.run", dir_, prefix_, next_file_++));
    uint64_t offset = 0;
    for (int p = 0; p < parts_; ++p) {
      runs_[p].push_back({file, offset, full[p].size()});
      offset += full[p].size() * sizeof(E);
    }
    // One set of buffers is written at a time: a thread that fills the next
    // set waits here, holding mu_, so at most two sets exist.
    std::unique_lock spill(spill_mu_);
    lock.unlock();
    RunWriter<E> w(file->path(), 0);
    for (int p = 0; p < parts_; ++p) {
      std::sort(full[p].begin(), full[p].end());
      w.write(full[p]);
      std::vector<E>().swap(full[p]);
    }
    w.close();
    spilled_bytes_ += static_cast<int64_t>(offset);
    ++spills_;
  }

  // Calls visit(e) for every record of partition `part` in ascending order,
  // then frees the partition (its buffer, and each spill file once every
  // partition in it has been read). Not thread-safe: after every add() has
  // returned.
  template <class Visit>
  void scan(int part, Visit&& visit) {
    std::vector<E>& mem = buf_[part];
    std::sort(mem.begin(), mem.end());
    std::vector<Run> runs = std::move(runs_[part]);
    // Merge in passes of at most kMaxFanIn runs so that the read buffers
    // stay large enough to read efficiently.
    while (runs.size() + 1 > kMaxFanIn) {
      std::vector<Run> next;
      for (size_t g = 0; g < runs.size(); g += kMaxFanIn) {
        const size_t end = std::min(runs.size(), g + kMaxFanIn);
        if (end - g == 1) {
          next.push_back(std::move(runs[g]));
          continue;
        }
        auto file = std::make_shared<RunFile>(fmt::format("{}/{}-{}.run", dir_, prefix_, next_file_++));
        uint64_t count = 0;
        {
          const size_t records = buffer_records(end - g + 1);
          std::vector<Cursor<E>> cursors;
          for (size_t i = g; i < end; ++i) cursors.emplace_back(runs[i], records);
          RunWriter<E> w(file->path(), records);
          merge_cursors(cursors, [&](const E& e) {
            w.add(e);
            ++count;
          });
          w.close();
        }
        for (size_t i = g; i < end; ++i) runs[i] = {};
        next.push_back({std::move(file), 0, count});
      }
      runs = std::move(next);
    }
    if (runs.empty()) {
      for (const E& e : mem) visit(e);
    } else {
      std::vector<Cursor<E>> cursors;
      cursors.emplace_back(std::span<const E>(mem));
      const size_t records = buffer_records(runs.size());
      for (const Run& r : runs) cursors.emplace_back(r, records);
      merge_cursors(cursors, visit);
    }
    std::vector<E>().swap(mem);
  }

  int64_t spills() const { return spills_; }
  int64_t spilled_bytes() const { return spilled_bytes_; }

 private:
  static constexpr size_t kMaxFanIn = 64;
  static constexpr size_t kMinReadRecords = 64;

  size_t buffer_records(size_t streams) const {
    return std::max(kMinReadRecords, read_bytes_ / sizeof(E) / std::max<size_t>(streams, 1));
  }

  std::string dir_, prefix_;
  int parts_;
  size_t limit_, read_bytes_;
  std::mutex mu_;        // buf_, runs_, next_file_
  std::mutex spill_mu_;  // one spill at a time
  std::vector<std::vector<E>> buf_;
  std::vector<std::vector<Run>> runs_;
  int64_t next_file_ = 0;
  std::atomic<int64_t> spills_{0}, spilled_bytes_{0};
};

// Disjoint sets of document numbers; the root of a set is its lowest member.
class UnionFind {
 public:
  explicit UnionFind(size_t n) : parent_(n) {
    for (size_t i = 0; i < n; ++i) parent_[i] = static_cast<uint32_t>(i);
  }
  uint32_t find(uint32_t x) {
    while (parent_[x] != x) {
      parent_[x] = parent_[parent_[x]];  // path halving
      x = parent_[x];
    }
    return x;
  }
  // False when a and b were already one set.
  bool unite(uint32_t a, uint32_t b) {
    a = find(a);
    b = find(b);
    if (a == b) return false;
    if (a < b) parent_[b] = a;
    else parent_[a] = b;
    return true;
  }
  size_t size() const { return parent_.size(); }

 private:
  std::vector<uint32_t> parent_;
};

// Every set of two or more as (member, root) for each member but the root,
// sorted by member.
std::vector<Duplicate> duplicates_of(UnionFind& uf, DedupStats& stats) {
  std::vector<Duplicate> out;
  std::vector<bool> is_kept(uf.size());
  for (size_t d = 0; d < uf.size(); ++d) {
    const uint32_t r = uf.find(static_cast<uint32_t>(d));
    if (r == d) continue;
    out.push_back({d, r});
    if (!is_kept[r]) {
      is_kept[r] = true;
      ++stats.clusters;
    }
  }
  stats.removed = static_cast<int64_t>(out.size());
  return out;
}

void atomic_max(std::atomic<uint64_t>& a, uint64_t v) {
  uint64_t cur = a.load(std::memory_order_relaxed);
  while (cur < v && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

struct ExactEntry {
  uint64_t high, low, doc;
  bool operator<(const ExactEntry& o) const {
    if (high != o.high) return high < o.high;
    if (low != o.low) return low < o.low;
    return doc < o.doc;
  }
};

struct LineEntry {
  uint64_t high, low, doc;
  uint32_t line, pad;
  bool operator<(const LineEntry& o) const {
    if (high != o.high) return high < o.high;
    if (low != o.low) return low < o.low;
    if (doc != o.doc) return doc < o.doc;
    return line < o.line;
  }
};

struct BandEntry {
  uint64_t key, doc;
  bool operator<(const BandEntry& o) const { return key != o.key ? key < o.key : doc < o.doc; }
};

}  // namespace

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
    if (params.threshold > 0) {
      sig_path = dir.path() + "/signatures.bin";
      sig_fd = open_or_fail(sig_path, O_RDWR | O_CREAT | O_TRUNC);
    }
  }
  uint64_t sig_offset(uint64_t doc) const { return doc * static_cast<uint64_t>(num_perm) * sizeof(uint32_t); }

  MinHasher hasher;
  WorkDir dir;
  SpillSorter<BandEntry> sorter;
  int num_perm;
  std::string sig_path;
  FileDescriptor sig_fd;
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
  if (!signature(text, sig)) sig.clear();
  add_signature(doc, sig);
}

void MinHashDedup::add_signature(uint64_t doc, std::span<const uint32_t> sig) {
  if (doc >= UINT32_MAX) fail("MinHash dedup takes at most 2^32 - 1 documents; got document number {}", doc);
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

}  // namespace claw::curate
