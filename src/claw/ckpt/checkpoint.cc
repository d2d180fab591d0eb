#include "claw/ckpt/checkpoint.h"

#include "claw/core/clock.h"
#include "claw/ckpt/safetensors.h"
#include "claw/core/dtype_convert.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <utility>

#include <fmt/chrono.h>
#include <fmt/ranges.h>

#include "claw/core/error.h"
#include "claw/core/log.h"

namespace claw::ckpt {

namespace fs = std::filesystem;

namespace {
using clock = std::chrono::steady_clock;

constexpr uint64_t kAlign = 64;
constexpr uint64_t kPage = 4096;
uint64_t align_up(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

std::string partial_dir(const std::string& root, int64_t iteration) { return iteration_dir(root, iteration) + ".partial"; }

// `crash_halfway` (an injected fault, core/fault_injector.h): SIGKILL once
// half the file is written, as a lost node would die.
void write_all(int fd, const uint8_t* data, size_t n, const std::string& path, bool crash_halfway = false) {
  size_t done = 0;
  while (done < n) {
    if (crash_halfway && done >= n / 2) {
      ::fsync(fd);
      ::raise(SIGKILL);
    }
    size_t piece = std::min<size_t>(n - done, size_t{64} << 20);
    if (crash_halfway && done < n / 2) piece = std::min(piece, (n / 2 - done + 4095) / 4096 * 4096);
    const ssize_t w = ::pwrite(fd, data + done, piece, static_cast<off_t>(done));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("{}: write failed after {} of {} bytes: {}", path, done, n, std::strerror(errno));
    }
    done += static_cast<size_t>(w);
  }
}

// Gathers one string from every rank of `g` onto every rank.
std::vector<std::string> all_gather_strings(comm::Group& g, const std::string& mine) {
  std::vector<int64_t> lengths(g.size());
  int64_t len = static_cast<int64_t>(mine.size());
  g.all_gather(&len, lengths.data(), 1, DType::i64);
  int64_t total = 0;
  for (int64_t l : lengths) total += l;
  std::string all(static_cast<size_t>(total), '\0');
  g.all_gather(mine.data(), all.data(), lengths, DType::u8);
  std::vector<std::string> out;
  int64_t at = 0;
  for (int64_t l : lengths) {
    out.push_back(all.substr(static_cast<size_t>(at), static_cast<size_t>(l)));
    at += l;
  }
  return out;
}

}  // namespace

Saver::Saver(comm::Group& world, SaveConfig cfg) : world_(world), cfg_(std::move(cfg)) {
  if (cfg_.root.empty()) fail("--save: no directory given");
  if (cfg_.keep_last < 0) fail("--keep-last-checkpoints must be >= 0 (0 keeps all), got {}", cfg_.keep_last);
  std::error_code ec;
  std::filesystem::create_directories(cfg_.root, ec);
  if (ec) fail("--save {}: cannot create the directory ({}); checked before step 1", cfg_.root, ec.message());
  const std::string probe = fmt::format("{}/.claw_write_probe.{}", cfg_.root, world_.rank());
  const int pfd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const bool wrote = pfd >= 0 && ::write(pfd, "x", 1) == 1;
  const int err = errno;
  if (pfd >= 0) ::close(pfd);
  ::unlink(probe.c_str());
  if (!wrote) fail("--save {}: cannot write there ({}); checked before step 1", cfg_.root, std::strerror(err));
  if (world_.rank() != 0) return;
  const std::string lock = cfg_.root + "/.claw_save.lock";
  lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) fail("--save {}: cannot open {} ({})", cfg_.root, lock, std::strerror(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    std::string owner(512, '\0');
    const ssize_t n = ::pread(lock_fd_, owner.data(), owner.size(), 0);
    owner.resize(n > 0 ? static_cast<size_t>(n) : 0);
    while (!owner.empty() && (owner.back() == '\n' || owner.back() == '\0')) owner.pop_back();
    ::close(lock_fd_);
    lock_fd_ = -1;
    fail("--save {}: another job is saving checkpoints there ({}); give this one its own --save directory or stop "
         "that job",
         cfg_.root, owner.empty() ? "its owner is not recorded" : owner);
  }
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::string owner =
      fmt::format("held by pid {} on host {} since {:%Y-%m-%d %H:%M:%S} UTC\n", ::getpid(), host, fmt::gmtime(std::time(nullptr)));
  if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, owner.data(), owner.size(), 0) < 0)
    log::warn("ckpt", "--save {}: could not record the lock's owner in {} ({})", cfg_.root, lock, std::strerror(errno));
}

Saver::~Saver() {
  // A save still pending at destruction (an error unwinding the trainer) is
  // abandoned: its thread finishes writing, nothing is committed.
  if (thread_.joinable()) thread_.join();
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

std::optional<std::pair<int64_t, Saver::Timing>> Saver::take_committed() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(committed_, std::nullopt);
}

std::optional<std::pair<int64_t, std::string>> Saver::take_failed() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(failed_, std::nullopt);
}

Saver::Timing Saver::last_timing() const {
  std::lock_guard<std::mutex> lock(mu_);
  return timing_;
}

void Saver::save(const std::vector<Shard>& shards, SaveInfo info) {
  if (pending_) finish();
  const auto t0 = clock::now();
  const std::string partial = partial_dir(cfg_.root, info.iteration);
  if (world_.rank() == 0) {
    std::error_code ec;
    fs::create_directories(cfg_.root, ec);
    if (ec) fail("--save {}: cannot create the directory: {}", cfg_.root, ec.message());
    fs::remove_all(partial, ec);  // left by a writer that died
    fs::create_directory(partial, ec);
    if (ec) fail("--save {}: cannot create {}: {}", cfg_.root, partial, ec.message());
  }
  if (thread_.joinable()) thread_.join();  // prepare()'s page touching
  std::vector<Piece> pieces;
  const uint64_t at = layout(shards, &pieces);
  ensure_buffer(at);
  info_ = std::move(info);
  chunks_.clear();
  {
    std::lock_guard<std::mutex> lock(mu_);
    phase_ = Phase::snapshot;
    error_.clear();
    timing_ = {};
    timing_.bytes = at;
  }
  world_.barrier();  // the .partial directory exists for everyone
  pending_ = true;
  const std::string path = partial + "/" + rank_file_name(world_.rank());
  thread_ = std::thread([this, pieces = std::move(pieces), path]() mutable { run_background(std::move(pieces), path); });
  add_blocked(seconds_since(t0));
  if (!cfg_.async) finish();
}

uint64_t Saver::layout(const std::vector<Shard>& shards, std::vector<Piece>* pieces) {
  // This rank's file: its chunks back to back, 64-byte aligned.
  tensors_.clear();
  std::map<std::string, bool> seen;
  uint64_t at = 0;
  for (const Shard& s : shards) {
    if (!seen[s.tensor]) {
      seen[s.tensor] = true;
      tensors_.push_back({s.tensor, checkpoint_shape(*s.spec), s.dtype});
    }
    if (!s.write) continue;
    for (const ShardPiece& p : shard_pieces(s)) {
      ChunkMeta c{.tensor = s.tensor, .box = p.box, .file = world_.rank(), .offset = at,
                  .length = static_cast<uint64_t>(p.box.numel()) * dtype_size(s.dtype)};
      at = align_up(at + c.length);
      pieces->push_back({s.at(p.local_begin - s.begin), std::move(c)});
    }
  }
  return at;
}

void Saver::ensure_buffer(uint64_t file_bytes) {
  // O_DIRECT writes whole pages: the file ends padded to one.
  buffer_bytes_ = (file_bytes + kPage - 1) / kPage * kPage;
  if (buffer_bytes_ <= buffer_capacity_) return;
  buffer_.reset(static_cast<uint8_t*>(std::aligned_alloc(kPage, std::max(kPage, buffer_bytes_))));
  if (!buffer_) fail("checkpoint: cannot allocate a {} B snapshot buffer", buffer_bytes_);
  buffer_capacity_ = buffer_bytes_;
}

uint64_t Saver::prepare(const std::vector<Shard>& shards) {
  if (pending_ || thread_.joinable()) return buffer_capacity_;
  std::vector<Piece> pieces;
  ensure_buffer(layout(shards, &pieces));
  // Fault the pages in now, in the background: a first snapshot that also
  // page-faults 4 KiB at a time can outlast the step it overlaps.
  thread_ = std::thread([buf = buffer_.get(), n = buffer_bytes_] {
    for (uint64_t i = 0; i < n; i += kPage) buf[i] = 0;
  });
  return buffer_bytes_;
}

void Saver::run_background(std::vector<Piece> pieces, std::string path) {
  try {
    const auto t0 = clock::now();
    std::vector<ChunkMeta> chunks;
    for (Piece& p : pieces) {
      std::memcpy(buffer_.get() + p.chunk.offset, p.src, p.chunk.length);
      chunks.push_back(std::move(p.chunk));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      timing_.snapshot_s = seconds_since(t0);
      phase_ = Phase::writing;
    }
    cv_.notify_all();
    const auto t1 = clock::now();
    // Alignment gaps and the tail are zeros, so a file's bytes do not depend on
    // what the buffer held before.
    uint64_t end = 0;
    for (const ChunkMeta& c : chunks) {
      std::memset(buffer_.get() + end, 0, c.offset - end);
      end = c.offset + c.length;
    }
    std::memset(buffer_.get() + end, 0, buffer_bytes_ - end);
    for (ChunkMeta& c : chunks)
      for (uint64_t b = 0; b < c.length; b += kChecksumBlock)
        c.checksums.push_back(checksum(buffer_.get() + c.offset + b, std::min(kChecksumBlock, c.length - b)));
    // O_DIRECT: the page cache would cost a copy of every byte and, on a
    // loaded node, write at a fraction of the disk's speed; filesystems
    // without it (tmpfs) get buffered writes.
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
    if (fd < 0 && errno == EINVAL) fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) fail("{}: cannot create: {}", path, std::strerror(errno));
    try {
      write_all(fd, buffer_.get(), buffer_bytes_, path,
                cfg_.faults && cfg_.faults->crashes_in_save(info_.iteration, world_.rank(), world_.size()));
      if (::fsync(fd) != 0) fail("{}: fsync failed: {}", path, std::strerror(errno));
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
    std::lock_guard<std::mutex> lock(mu_);
    timing_.write_s = seconds_since(t1);
    chunks_ = std::move(chunks);
    phase_ = Phase::durable;
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = e.what();
    phase_ = Phase::failed;
  }
  cv_.notify_all();
}

void Saver::add_blocked(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  timing_.blocked_s += s;
}

void Saver::wait_phase_at_least(Phase p) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return phase_ >= p; });
}

void Saver::wait_snapshot() {
  if (!pending_) return;
  const auto t0 = clock::now();
  wait_phase_at_least(Phase::writing);
  add_blocked(seconds_since(t0));
}

std::optional<int64_t> Saver::poll() {
  if (!pending_) return std::nullopt;
  const auto t0 = clock::now();
  double state;
  {
    std::lock_guard<std::mutex> lock(mu_);
    state = phase_ == Phase::failed ? -1 : phase_ == Phase::durable ? 1 : 0;
  }
  state = world_.all_reduce_value(state, comm::ReduceOp::min);
  const bool ready = state != 0;
  if (ready) commit();  // also reports a failure on any rank
  add_blocked(seconds_since(t0));
  return ready ? std::optional<int64_t>(info_.iteration) : std::nullopt;
}

void Saver::finish() {
  if (!pending_) return;
  const auto t0 = clock::now();
  wait_phase_at_least(Phase::durable);
  add_blocked(seconds_since(t0));
  while (!poll()) {
  }
}

void Saver::commit() {
  const auto t0 = clock::now();
  thread_.join();
  pending_ = false;
  std::string error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    error = error_;
  }
  // Every rank learns whether every part is durable; a failed rank names its
  // error. A failure costs this checkpoint, not the job: the partial files
  // go (a full disk stays usable) and the next save tries again.
  const double ok = world_.all_reduce_value(error.empty() ? 1.0 : 0.0, comm::ReduceOp::min);
  if (ok == 0) {
    const std::string dir = iteration_dir(cfg_.root, info_.iteration);
    if (!error.empty()) log::warn("ckpt", "checkpoint {}: this rank's part failed: {}", dir, error);
    if (world_.rank() == 0) {
      std::error_code ec;
      fs::remove_all(partial_dir(cfg_.root, info_.iteration), ec);
    }
    world_.barrier();
    const std::string why = error.empty() ? "another rank could not write its part (its log says why)" : error;
    if (++failures_ >= cfg_.max_consecutive_failures)
      fail("checkpoint {} not saved: {}; {} saves in a row have failed, stopping", dir, why, failures_);
    if (world_.rank() == 0)
      log::warn("ckpt", "checkpoint {} not saved ({} in a row; the job stops at {}); its partial files are removed, "
                "training goes on and the next save tries again", dir, failures_, cfg_.max_consecutive_failures);
    std::lock_guard<std::mutex> lock(mu_);
    phase_ = Phase::idle;
    failed_ = {info_.iteration, why};
    return;
  }
  failures_ = 0;
  nlohmann::json mine = {{"chunks", nlohmann::json::array()}, {"tensors", nlohmann::json::array()}};
  for (const ChunkMeta& c : chunks_) mine["chunks"].push_back(chunk_to_json(c));
  for (const TensorMeta& t : tensors_)
    mine["tensors"].push_back({{"name", t.name}, {"shape", t.shape}, {"dtype", safetensors_dtype(t.dtype)}});
  const std::vector<std::string> parts = all_gather_strings(world_, mine.dump());
  if (world_.rank() == 0) {
    Metadata meta;
    meta.iteration = info_.iteration;
    meta.model = info_.model;
    meta.args = info_.args;
    meta.state = info_.state;
    std::map<std::string, size_t> index;
    const std::string partial = partial_dir(cfg_.root, info_.iteration);
    for (int r = 0; r < world_.size(); ++r) {
      meta.files.push_back(rank_file_name(r));
      const nlohmann::json j = nlohmann::json::parse(parts[r]);
      for (const auto& t : j["tensors"]) {
        const std::string name = t["name"];
        if (index.count(name)) continue;
        index[name] = meta.tensors.size();
        meta.tensors.push_back({name, t["shape"].get<std::vector<int64_t>>(),
                                parse_safetensors_dtype(t["dtype"].get<std::string>(), "checkpoint tensor " + name)});
      }
      for (const auto& c : j["chunks"]) meta.chunks.push_back(chunk_from_json(c, partial));
    }
    // Every tensor is covered exactly once (the writers' deal is a partition).
    std::map<std::string, int64_t> covered;
    for (const ChunkMeta& c : meta.chunks) covered[c.tensor] += c.box.numel();
    for (const TensorMeta& t : meta.tensors) {
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      CLAW_CHECK(covered[t.name] == n, "checkpoint tensor '{}': chunks cover {} of {} elements", t.name,
                 covered[t.name], n);
    }
    write_file_atomic(partial + "/metadata.json", meta.to_json().dump(1));
    const std::string final_dir = iteration_dir(cfg_.root, info_.iteration);
    std::error_code ec;
    fs::remove_all(final_dir, ec);  // saving an iteration again (a resumed run) replaces it
    fs::rename(partial, final_dir, ec);
    if (ec) fail("checkpoint {}: cannot rename {} into place: {}", final_dir, partial, ec.message());
    fsync_dir(cfg_.root);
    write_file_atomic(latest_file(cfg_.root), std::to_string(info_.iteration) + "\n");
    if (cfg_.keep_last > 0) {
      std::vector<int64_t> its = complete_iterations(cfg_.root);
      for (size_t i = 0; i + cfg_.keep_last < its.size(); ++i)
        if (its[i] != info_.iteration) fs::remove_all(iteration_dir(cfg_.root, its[i]), ec);
    }
    const Timing t = last_timing();
    log::info("ckpt", "saved {} ({} tensors in {} chunks; rank 0 wrote {:.1f} MiB in {:.3f} s, snapshot {:.3f} s)",
              final_dir, meta.tensors.size(), meta.chunks.size(), t.bytes / 1048576.0, t.write_s, t.snapshot_s);
  }
  world_.barrier();  // the checkpoint is visible to every rank once save/finish returns
  std::lock_guard<std::mutex> lock(mu_);
  timing_.commit_s = seconds_since(t0);
  phase_ = Phase::idle;
  committed_ = {info_.iteration, timing_};
}

std::string resolve_load_dir(const std::string& root, int64_t iteration, const std::string& what) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) fail("{} {}: no such directory", what, root);
  if (fs::exists(fs::path(root) / "metadata.json", ec)) return root;  // an iteration directory itself
  const std::vector<int64_t> its = complete_iterations(root);
  const auto list = [&] { return its.empty() ? std::string("none") : fmt::format("{}", fmt::join(its, ", ")); };
  if (iteration < 0) {
    const std::optional<int64_t> latest = read_latest(root);
    if (!latest) fail("{} {}: no {} (complete checkpoints: {})", what, root, latest_file(root), list());
    iteration = *latest;
  }
  if (std::find(its.begin(), its.end(), iteration) == its.end())
    fail("{} {}: no complete checkpoint of iteration {} (complete checkpoints: {})", what, root, iteration,
         list());
  return iteration_dir(root, iteration);
}

std::optional<int64_t> previous_complete_iteration(const std::string& root, int64_t iteration) {
  std::optional<int64_t> previous;
  for (int64_t c : complete_iterations(root))
    if (c < iteration) previous = c;
  return previous;
}

std::optional<std::string> find_checkpoint(const std::string& root, int64_t step, bool fallback, bool log_fallback) {
  std::error_code ec;
  if (step < 0 && fs::is_directory(root, ec) && !fs::exists(fs::path(root) / "metadata.json", ec) &&
      complete_iterations(root).empty() && !read_latest(root))
    return std::nullopt;
  if (const std::optional<int64_t> latest = read_latest(root); fallback && step < 0 && latest) {
    const std::vector<int64_t> its = complete_iterations(root);
    if (std::find(its.begin(), its.end(), *latest) == its.end()) {
      const std::optional<int64_t> previous = previous_complete_iteration(root, *latest);
      if (!previous)
        fail("--load {}: iteration {} is the latest but has no metadata.json, and no complete checkpoint precedes it",
             root, *latest);
      if (log_fallback)
        log::warn("ckpt", "--load {}: iteration {} (the latest) has no metadata.json; --load-fallback: loading "
                  "iteration {} instead", root, *latest, *previous);
      return iteration_dir(root, *previous);
    }
  }
  return resolve_load_dir(root, step);
}

void check_compatible(const Metadata& meta, const std::string& dir, const std::vector<Shard>& shards,
                      const std::vector<std::string>& all_params) {
  for (const Shard& s : shards) {
    const TensorMeta* t = meta.find(s.tensor);
    if (!t) {
      if (s.tensor.rfind("optim.", 0) == 0)
        fail("checkpoint {} has no optimizer state for '{}' (saved without it?); load with --no-load-optim", dir,
             s.tensor);
      fail("checkpoint {} has no tensor '{}': it was saved from another model (a different --num-layers, "
           "--swiglu, --untie-embeddings-and-output-weights, ...)",
           dir, s.tensor);
    }
    const std::vector<int64_t> shape = checkpoint_shape(*s.spec);
    if (t->shape != shape)
      fail("checkpoint {}: tensor '{}' has shape {} there, but {} in this model: it was saved from another model "
           "shape",
           dir, s.tensor, shape_string(t->shape), shape_string(shape));
  }
  if (!all_params.empty()) {
    for (const TensorMeta& t : meta.tensors) {
      if (t.name.rfind("model.", 0) != 0) continue;
      if (std::find(all_params.begin(), all_params.end(), t.name.substr(6)) == all_params.end())
        fail("checkpoint {} holds tensor '{}', which this model does not have: it was saved from another model "
             "(a different --num-layers, ...)",
             dir, t.name);
    }
  }
}

CheckpointReader::CheckpointReader(std::string dir, const Metadata& meta)
    : dir_(std::move(dir)), meta_(meta), fds_(meta.files.size(), -1) {
  for (const ChunkMeta& c : meta.chunks) chunks_[c.tensor].push_back(&c);
}

CheckpointReader::~CheckpointReader() {
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
}

const uint8_t* CheckpointReader::read_bytes(const ChunkMeta& c, uint64_t lo, uint64_t hi) {
  const uint64_t B = meta_.checksum_block;
  const uint64_t b0 = lo / B, b1 = (hi + B - 1) / B;
  if (c.checksums.size() != (c.length + B - 1) / B)
    fail("{}/metadata.json: a chunk of '{}' has {} checksums for {} bytes", dir_, c.tensor, c.checksums.size(),
         c.length);
  const uint64_t begin = b0 * B, end = std::min(c.length, b1 * B);
  buf_.resize(end - begin);
  const std::string path = dir_ + "/" + meta_.files[c.file];
  int& fd = fds_[c.file];
  if (fd < 0) {
    fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  }
  size_t done = 0;
  while (done < buf_.size()) {
    const ssize_t r = ::pread(fd, buf_.data() + done, buf_.size() - done, static_cast<off_t>(c.offset + begin + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      struct stat st {};
      ::fstat(fd, &st);
      fail("{}: truncated: tensor '{}' needs bytes [{}, {}) of it, the file has {} bytes", path, c.tensor,
           c.offset + begin, c.offset + end, st.st_size);
    }
    done += static_cast<size_t>(r);
  }
  for (uint64_t b = b0; b < b1 && b * B < c.length; ++b) {
    const uint64_t o = b * B - begin, n = std::min(B, c.length - b * B);
    if (checksum(buf_.data() + o, n) != c.checksums[b])
      fail("{}: checksum mismatch in tensor '{}' (bytes [{}, {}) of the file): the checkpoint is corrupt", path,
           c.tensor, c.offset + b * B, c.offset + b * B + n);
  }
  bytes_read_ += buf_.size();
  return buf_.data() + (lo - begin);
}

namespace {
// Copies the elements of `region` (inside both boxes) from `src` (row-major
// over src_box, element 0 at src_box's offset, of type `from`) to `dst`
// (row-major over dst_box, of type `to`), converting when the types differ.
void copy_region(const Box& region, const Box& src_box, const void* src, DType from, const Box& dst_box, void* dst,
                 DType to) {
  const int nd = region.ndim();
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  const int64_t fs = static_cast<int64_t>(dtype_size(from)), ts = static_cast<int64_t>(dtype_size(to));
  if (nd == 0) {
    convert(from, s, to, d, 1);
    return;
  }
  std::vector<int64_t> p = region.offset;
  const int64_t run = region.size[nd - 1];
  while (true) {
    convert(from, s + index_in(src_box, p) * fs, to, d + index_in(dst_box, p) * ts, run);
    int d_ = nd - 2;
    for (; d_ >= 0; --d_) {
      if (++p[d_] < region.offset[d_] + region.size[d_]) break;
      p[d_] = region.offset[d_];
    }
    if (d_ < 0) return;
  }
}
}  // namespace

void CheckpointReader::read_box(const std::string& tensor, const Box& target, void* dst, DType dst_dtype) {
  const auto it = chunks_.find(tensor);
  if (it == chunks_.end()) return;
  const TensorMeta* t = meta_.find(tensor);
  CLAW_CHECK(t, "checkpoint chunk of unknown tensor '{}'", tensor);
  const uint64_t es = dtype_size(t->dtype);
  for (const ChunkMeta* c : it->second) {
    const std::optional<Box> I = intersect(target, c->box);
    if (!I) continue;
    std::vector<int64_t> last = I->offset;
    for (int d = 0; d < I->ndim(); ++d) last[d] += I->size[d] - 1;
    const uint64_t lo = static_cast<uint64_t>(index_in(c->box, I->offset)) * es;
    const uint64_t hi = static_cast<uint64_t>(index_in(c->box, last) + 1) * es;
    const uint8_t* src = read_bytes(*c, lo, hi) - lo;
    copy_region(*I, c->box, src, t->dtype, target, dst, dst_dtype);
  }
}

void CheckpointReader::load(const std::vector<Shard>& shards) {
  for (const Shard& s : shards) {
    std::memset(s.data, 0, static_cast<size_t>(s.n) * dtype_size(s.dtype));  // all-zero bits are 0 in every float type
    for (const ShardPiece& p : shard_pieces(s)) read_box(s.tensor, p.box, s.at(p.local_begin - s.begin), s.dtype);
  }
}

std::vector<float> CheckpointReader::tensor(const std::string& name) {
  const TensorMeta* t = meta_.find(name);
  if (!t) fail("checkpoint {} has no tensor '{}'", dir_, name);
  Box whole;
  whole.offset.assign(t->shape.size(), 0);
  whole.size = t->shape;
  std::vector<float> out(static_cast<size_t>(whole.numel()));
  read_box(name, whole, out.data(), DType::f32);
  return out;
}

uint64_t load_shards(const std::string& dir, const Metadata& meta, const std::vector<Shard>& shards) {
  check_compatible(meta, dir, shards);
  CheckpointReader reader(dir, meta);
  reader.load(shards);
  return reader.bytes_read();
}

}  // namespace claw::ckpt
