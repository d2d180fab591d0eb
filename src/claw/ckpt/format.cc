#include "claw/ckpt/format.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/ranges.h>
#include <xxhash.h>

#include "claw/ckpt/safetensors.h"
#include "claw/core/error.h"

namespace claw::ckpt {

namespace fs = std::filesystem;

int64_t Box::numel() const {
  int64_t n = 1;
  for (int64_t s : size) n *= s;
  return n;
}

std::vector<Box> flat_range_boxes(const std::vector<int64_t>& shape, int64_t begin, int64_t n) {
  std::vector<Box> out;
  const int nd = static_cast<int>(shape.size());
  if (n <= 0) return out;
  if (nd == 0) return {Box{}};
  // stride[d]: elements per step along d. Peel from the front: take the
  // largest aligned run that starts at `begin`, repeatedly. A run aligned to
  // dimension d covers whole slices below d.
  std::vector<int64_t> stride(nd, 1);
  for (int d = nd - 2; d >= 0; --d) stride[d] = stride[d + 1] * shape[d + 1];
  int64_t pos = begin;
  const int64_t end = begin + n;
  while (pos < end) {
    // The outermost d such that pos is a multiple of stride[d] and at least one
    // full slice of stride[d] fits before end; then take as many slices along d
    // as fit without crossing the next boundary of dimension d - 1.
    int d = nd - 1;
    for (int e = 0; e < nd; ++e)
      if (pos % stride[e] == 0 && pos + stride[e] <= end) {
        d = e;
        break;
      }
    const int64_t outer = d == 0 ? shape[0] * stride[0] : stride[d - 1];  // the enclosing slice
    const int64_t limit = std::min(end, (pos / outer + 1) * outer);
    const int64_t count = (limit - pos) / stride[d];
    Box b;
    b.offset.resize(nd);
    b.size.assign(nd, 1);
    int64_t rem = pos;
    for (int e = 0; e < nd; ++e) {
      b.offset[e] = rem / stride[e];
      rem %= stride[e];
    }
    b.size[d] = count;
    for (int e = d + 1; e < nd; ++e) b.size[e] = shape[e];
    out.push_back(std::move(b));
    pos += count * stride[d];
  }
  return out;
}

std::optional<Box> intersect(const Box& a, const Box& b) {
  CLAW_CHECK(a.ndim() == b.ndim(), "boxes of {} and {} dimensions", a.ndim(), b.ndim());
  Box r;
  r.offset.resize(a.ndim());
  r.size.resize(a.ndim());
  for (int d = 0; d < a.ndim(); ++d) {
    const int64_t lo = std::max(a.offset[d], b.offset[d]);
    const int64_t hi = std::min(a.offset[d] + a.size[d], b.offset[d] + b.size[d]);
    if (hi <= lo) return std::nullopt;
    r.offset[d] = lo;
    r.size[d] = hi - lo;
  }
  return r;
}

int64_t index_in(const Box& box, const std::vector<int64_t>& point) {
  int64_t i = 0;
  for (int d = 0; d < box.ndim(); ++d) i = i * box.size[d] + (point[d] - box.offset[d]);
  return i;
}

const TensorMeta* Metadata::find(const std::string& tensor) const {
  for (const TensorMeta& t : tensors)
    if (t.name == tensor) return &t;
  return nullptr;
}

// Checksums are 16 hex digits: JSON readers that hold numbers as doubles
// would round a 64-bit integer.
nlohmann::json chunk_to_json(const ChunkMeta& c) {
  std::vector<std::string> sums;
  for (uint64_t x : c.checksums) sums.push_back(fmt::format("{:016x}", x));
  return {{"tensor", c.tensor},      {"offsets", c.box.offset}, {"sizes", c.box.size}, {"file", c.file},
          {"byte_offset", c.offset}, {"length", c.length},      {"checksums", sums}};
}

namespace {
template <typename T>
T field(const nlohmann::json& j, const char* key, const std::string& path, const std::string& where) {
  if (!j.is_object() || !j.contains(key))
    fail("{}: {} has no field '{}' (not a claw checkpoint, or written by another version)", path, where, key);
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: {} field '{}' is malformed: {}", path, where, key, e.what());
  }
}
}  // namespace

ChunkMeta chunk_from_json(const nlohmann::json& j, const std::string& path) {
  ChunkMeta c;
  c.tensor = field<std::string>(j, "tensor", path, "a chunk");
  const std::string where = "chunk of '" + c.tensor + "'";
  c.box.offset = field<std::vector<int64_t>>(j, "offsets", path, where);
  c.box.size = field<std::vector<int64_t>>(j, "sizes", path, where);
  c.file = field<int>(j, "file", path, where);
  c.offset = field<uint64_t>(j, "byte_offset", path, where);
  c.length = field<uint64_t>(j, "length", path, where);
  for (const std::string& h : field<std::vector<std::string>>(j, "checksums", path, where)) {
    size_t used = 0;
    uint64_t v = 0;
    try {
      v = std::stoull(h, &used, 16);
    } catch (const std::exception&) {
    }
    if (h.size() != 16 || used != 16) fail("{}: {} has a checksum '{}' that is not 16 hex digits", path, where, h);
    c.checksums.push_back(v);
  }
  if (c.box.offset.size() != c.box.size.size())
    fail("{}: {} has {} offsets but {} sizes", path, where, c.box.offset.size(), c.box.size.size());
  return c;
}

nlohmann::json Metadata::to_json() const {
  nlohmann::json t = nlohmann::json::array(), c = nlohmann::json::array();
  for (const TensorMeta& m : tensors)
    t.push_back({{"name", m.name}, {"shape", m.shape}, {"dtype", safetensors_dtype(m.dtype)}});
  for (const ChunkMeta& m : chunks) c.push_back(chunk_to_json(m));
  return {{"format", "claw-distributed-checkpoint"},
          {"version", version},
          {"iteration", iteration},
          {"checksum", "xxh3-64"},
          {"checksum_block", checksum_block},
          {"files", files},
          {"tensors", t},
          {"chunks", c},
          {"model", model},
          {"args", args},
          {"state", state}};
}

Metadata Metadata::from_json(const nlohmann::json& j, const std::string& path) {
  Metadata m;
  if (field<std::string>(j, "format", path, "the metadata") != "claw-distributed-checkpoint")
    fail("{}: not a claw distributed checkpoint (field 'format')", path);
  m.version = field<int>(j, "version", path, "the metadata");
  if (m.version != kFormatVersion)
    fail("{}: format version {}; this build reads version {}", path, m.version, kFormatVersion);
  m.iteration = field<int64_t>(j, "iteration", path, "the metadata");
  m.checksum_block = field<uint64_t>(j, "checksum_block", path, "the metadata");
  if (m.checksum_block == 0) fail("{}: checksum_block is 0", path);
  m.files = field<std::vector<std::string>>(j, "files", path, "the metadata");
  for (const auto& t : field<nlohmann::json>(j, "tensors", path, "the metadata")) {
    TensorMeta tm;
    tm.name = field<std::string>(t, "name", path, "a tensor");
    tm.shape = field<std::vector<int64_t>>(t, "shape", path, "tensor '" + tm.name + "'");
    tm.dtype = parse_safetensors_dtype(field<std::string>(t, "dtype", path, "tensor '" + tm.name + "'"),
                                       path + ": tensor '" + tm.name + "'");
    m.tensors.push_back(std::move(tm));
  }
  for (const auto& c : field<nlohmann::json>(j, "chunks", path, "the metadata")) {
    ChunkMeta cm = chunk_from_json(c, path);
    if (cm.file < 0 || cm.file >= static_cast<int>(m.files.size()))
      fail("{}: a chunk of '{}' names file {} of {}", path, cm.tensor, cm.file, m.files.size());
    const TensorMeta* t = m.find(cm.tensor);
    if (!t) fail("{}: a chunk names tensor '{}', which the tensor list does not have", path, cm.tensor);
    if (cm.length != static_cast<uint64_t>(cm.box.numel()) * dtype_size(t->dtype))
      fail("{}: a chunk of '{}' has length {} for {} elements", path, cm.tensor, cm.length, cm.box.numel());
    m.chunks.push_back(std::move(cm));
  }
  m.model = j.value("model", nlohmann::json::object());
  m.args = j.value("args", nlohmann::json::object());
  m.state = j.value("state", nlohmann::json::object());
  return m;
}

Metadata Metadata::read(const std::string& dir) {
  const std::string path = dir + "/metadata.json";
  std::ifstream f(path);
  if (!f) fail("{}: cannot open (not a complete claw checkpoint directory)", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
  return from_json(j, path);
}

std::string iteration_dir(const std::string& root, int64_t iteration) {
  return fmt::format("{}/iter_{:07d}", root, iteration);
}

std::string latest_file(const std::string& root) { return root + "/latest_checkpointed_iteration.txt"; }

std::string rank_file_name(int rank) { return fmt::format("rank_{:05d}.bin", rank); }

std::optional<int64_t> read_latest(const std::string& root) {
  std::ifstream f(latest_file(root));
  if (!f) return std::nullopt;
  std::string text;
  std::getline(f, text);
  try {
    size_t used = 0;
    const int64_t it = std::stoll(text, &used);
    if (used == text.size() && it >= 0) return it;
  } catch (const std::exception&) {
  }
  fail("{}: '{}' is not an iteration number", latest_file(root), text);
}

std::vector<int64_t> complete_iterations(const std::string& root) {
  std::vector<int64_t> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() != 12 || name.rfind("iter_", 0) != 0) continue;
    if (!std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    if (fs::exists(e.path() / "metadata.json", ec)) out.push_back(std::stoll(name.substr(5)));
  }
  std::sort(out.begin(), out.end());
  return out;
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) fail("{}: cannot open directory to sync it: {}", dir, std::strerror(errno));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) fail("{}: fsync failed: {}", dir, std::strerror(errno));
}

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fail("{}: cannot create: {}", tmp, std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      fail("{}: write failed: {}", tmp, std::strerror(errno));
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    fail("{}: fsync failed: {}", tmp, std::strerror(errno));
  }
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("{}: cannot rename into place: {}", path, std::strerror(errno));
  fsync_dir(fs::path(path).parent_path().string());
}

uint64_t checksum(const void* data, size_t n) { return XXH3_64bits(data, n); }

std::string shape_string(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

}  // namespace claw::ckpt
