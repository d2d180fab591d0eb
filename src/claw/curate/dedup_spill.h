// The spill machinery the deduplicators share (dedup.cc, minhash_dedup.cc):
// a private work directory, whole reads and writes of its files, sorted
// runs merged with bounded memory (SpillSorter), union-find, and the
// fixed-size entries each pass sorts. Internal to curate/.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "claw/core/error.h"
#include "claw/curate/dedup.h"
#include "claw/data/file_io.h"

namespace claw::curate::spill {

using data::FileDescriptor;

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

inline FileDescriptor open_or_fail(const std::string& path, int flags) {
  FileDescriptor fd(::open(path.c_str(), flags | O_CLOEXEC, 0600));
  if (fd.get() < 0) fail("cannot open dedup spill file {}: {}", path, std::strerror(errno));
  return fd;
}

inline void write_all(const FileDescriptor& fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd.get(), p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("cannot write dedup spill file {}: {}", path, std::strerror(w < 0 ? errno : ENOSPC));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

inline void pwrite_all(const FileDescriptor& fd, const void* data, size_t n, uint64_t offset, const std::string& path,
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

inline void pread_all(const FileDescriptor& fd, void* data, size_t n, uint64_t offset, const std::string& path,
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
inline std::vector<Duplicate> duplicates_of(UnionFind& uf, DedupStats& stats) {
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

inline void atomic_max(std::atomic<uint64_t>& a, uint64_t v) {
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

}  // namespace claw::curate::spill
