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
#include "claw/core/json_depth.h"

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

// Reading metadata.json: every value is checked for its type and range, and a
// bad one is named by the file and its JSON path ("state.layout.dp"), so
// nothing downstream meets a value of the wrong kind.
std::string describe(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::object: return "an object";
    case nlohmann::json::value_t::array: return "an array";
    case nlohmann::json::value_t::string: return "a string";
    case nlohmann::json::value_t::boolean: return v.get<bool>() ? "true" : "false";
    case nlohmann::json::value_t::null: return "null";
    default: return v.dump();
  }
}

std::string join_path(const std::string& at, const std::string& key) { return at.empty() ? key : at + "." + key; }
std::string index_path(const std::string& at, size_t i) { return fmt::format("{}[{}]", at, i); }

[[noreturn]] void bad(const std::string& file, const std::string& at, const std::string& expected,
                      const nlohmann::json& got) {
  fail("{}: {}: expected {}, got {}", file, at, expected, describe(got));
}

const nlohmann::json& member(const nlohmann::json& obj, const std::string& file, const std::string& at,
                             const char* key) {
  if (!obj.is_object()) bad(file, at, "an object", obj);
  const auto it = obj.find(key);
  if (it == obj.end())
    fail("{}: {}: missing (not a claw checkpoint, or written by another version)", file, join_path(at, key));
  return *it;
}

const nlohmann::json* optional_member(const nlohmann::json& obj, const std::string& file, const std::string& at,
                                      const char* key) {
  if (!obj.is_object()) bad(file, at, "an object", obj);
  const auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

int64_t integer(const nlohmann::json& v, const std::string& file, const std::string& at, int64_t lo,
                int64_t hi = INT64_MAX) {
  const std::string expected = hi == INT64_MAX ? fmt::format("an integer >= {}", lo)
                                               : fmt::format("an integer in [{}, {}]", lo, hi);
  if (!v.is_number_integer()) bad(file, at, expected, v);
  // JSON's non-negative integers parse as unsigned: both bounds for them too
  // (a checksum_block of 0 passed here and divided by zero).
  const bool out = v.is_number_unsigned()
                       ? v.get<uint64_t>() > static_cast<uint64_t>(hi) || (lo > 0 && v.get<uint64_t>() < static_cast<uint64_t>(lo))
                       : v.get<int64_t>() < lo || v.get<int64_t>() > hi;
  if (out) bad(file, at, expected, v);
  return v.get<int64_t>();
}

uint64_t unsigned_integer(const nlohmann::json& v, const std::string& file, const std::string& at) {
  if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
    bad(file, at, "an integer >= 0", v);
  return v.get<uint64_t>();
}

std::string string(const nlohmann::json& v, const std::string& file, const std::string& at) {
  if (!v.is_string()) bad(file, at, "a string", v);
  return v.get<std::string>();
}

bool boolean(const nlohmann::json& v, const std::string& file, const std::string& at) {
  if (!v.is_boolean()) bad(file, at, "true or false", v);
  return v.get<bool>();
}

const nlohmann::json& array(const nlohmann::json& v, const std::string& file, const std::string& at) {
  if (!v.is_array()) bad(file, at, "an array", v);
  return v;
}

const nlohmann::json& object(const nlohmann::json& v, const std::string& file, const std::string& at) {
  if (!v.is_object()) bad(file, at, "an object", v);
  return v;
}

// Dimensions, offsets and sizes: at most 2^40 each; a tensor at most 2^56
// elements (2^59 bytes), so no count or byte offset derived from them overflows.
constexpr int64_t kMaxExtent = int64_t{1} << 40;
constexpr int64_t kMaxElements = int64_t{1} << 56;

std::vector<int64_t> extents(const nlohmann::json& v, const std::string& file, const std::string& at) {
  std::vector<int64_t> out;
  const nlohmann::json& a = array(v, file, at);
  if (a.size() > 8) fail("{}: {}: {} dimensions; a checkpoint tensor has at most 8", file, at, a.size());
  for (size_t i = 0; i < a.size(); ++i) out.push_back(integer(a[i], file, index_path(at, i), 0, kMaxExtent));
  return out;
}

// The "state" section: what a resumed run continues from. Each field is
// optional (an imported checkpoint has fewer); a present one must be valid.
void check_state(const nlohmann::json& st, const std::string& file) {
  object(st, file, "state");
  for (const char* key : {"consumed_train_samples", "consumed_valid_samples", "optimizer_steps"})
    if (const nlohmann::json* v = optional_member(st, file, "state", key)) integer(*v, file, join_path("state", key), 0);
  for (const char* key : {"global_batch_size", "seq_length"})
    if (const nlohmann::json* v = optional_member(st, file, "state", key)) integer(*v, file, join_path("state", key), 1);
  if (const nlohmann::json* v = optional_member(st, file, "state", "seed")) unsigned_integer(*v, file, "state.seed");
  if (const nlohmann::json* rng = optional_member(st, file, "state", "rng")) {
    object(*rng, file, "state.rng");
    if (const nlohmann::json* v = optional_member(*rng, file, "state.rng", "kind")) string(*v, file, "state.rng.kind");
    if (const nlohmann::json* v = optional_member(*rng, file, "state.rng", "seed"))
      unsigned_integer(*v, file, "state.rng.seed");
  }
  if (const nlohmann::json* layout = optional_member(st, file, "state", "layout")) {
    object(*layout, file, "state.layout");
    for (const char* key : {"world_size", "tp", "pp", "dp"})
      if (const nlohmann::json* v = optional_member(*layout, file, "state.layout", key))
        integer(*v, file, join_path("state.layout", key), 1, INT32_MAX);
    if (const nlohmann::json* v = optional_member(*layout, file, "state.layout", "zero_stage"))
      integer(*v, file, "state.layout.zero_stage", 0, 3);
    if (const nlohmann::json* v = optional_member(*layout, file, "state.layout", "sequence_parallel"))
      boolean(*v, file, "state.layout.sequence_parallel");
  }
}
}  // namespace

ChunkMeta chunk_from_json(const nlohmann::json& j, const std::string& path, const std::string& at) {
  ChunkMeta c;
  c.tensor = string(member(j, path, at, "tensor"), path, join_path(at, "tensor"));
  c.box.offset = extents(member(j, path, at, "offsets"), path, join_path(at, "offsets"));
  c.box.size = extents(member(j, path, at, "sizes"), path, join_path(at, "sizes"));
  c.file = static_cast<int>(integer(member(j, path, at, "file"), path, join_path(at, "file"), 0, INT32_MAX));
  c.offset = unsigned_integer(member(j, path, at, "byte_offset"), path, join_path(at, "byte_offset"));
  c.length = unsigned_integer(member(j, path, at, "length"), path, join_path(at, "length"));
  const std::string sums_at = join_path(at, "checksums");
  const nlohmann::json& sums = array(member(j, path, at, "checksums"), path, sums_at);
  for (size_t i = 0; i < sums.size(); ++i) {
    const std::string h = string(sums[i], path, index_path(sums_at, i));
    size_t used = 0;
    uint64_t v = 0;
    try {
      v = std::stoull(h, &used, 16);
    } catch (const std::exception&) {
    }
    if (h.size() != 16 || used != 16)
      fail("{}: {}: checksum '{}' of a chunk of '{}' is not 16 hex digits", path, index_path(sums_at, i), h, c.tensor);
    c.checksums.push_back(v);
  }
  if (c.box.offset.size() != c.box.size.size())
    fail("{}: {}: a chunk of '{}' has {} offsets but {} sizes", path, at, c.tensor, c.box.offset.size(),
         c.box.size.size());
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
  object(j, path, "the document");
  const std::string format = string(member(j, path, "", "format"), path, "format");
  if (format != "claw-distributed-checkpoint")
    fail("{}: format: '{}' is not a claw distributed checkpoint", path, format);
  m.version = static_cast<int>(integer(member(j, path, "", "version"), path, "version", 0, INT32_MAX));
  if (m.version != kFormatVersion)
    fail("{}: version: format version {}; this build reads version {}", path, m.version, kFormatVersion);
  m.iteration = integer(member(j, path, "", "iteration"), path, "iteration", 0);
  m.checksum_block = static_cast<uint64_t>(
      integer(member(j, path, "", "checksum_block"), path, "checksum_block", 1, kMaxExtent));
  const nlohmann::json& files = array(member(j, path, "", "files"), path, "files");
  for (size_t i = 0; i < files.size(); ++i) {
    std::string f = string(files[i], path, index_path("files", i));
    // Names of files beside metadata.json: nothing that leaves the directory.
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      fail("{}: {}: '{}' is not a file name in the checkpoint directory", path, index_path("files", i), f);
    m.files.push_back(std::move(f));
  }
  const nlohmann::json& tensors = array(member(j, path, "", "tensors"), path, "tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string at = index_path("tensors", i);
    TensorMeta tm;
    tm.name = string(member(tensors[i], path, at, "name"), path, join_path(at, "name"));
    tm.shape = extents(member(tensors[i], path, at, "shape"), path, join_path(at, "shape"));
    tm.dtype = parse_safetensors_dtype(string(member(tensors[i], path, at, "dtype"), path, join_path(at, "dtype")),
                                       path + ": " + join_path(at, "dtype") + " of '" + tm.name + "'");
    if (m.find(tm.name)) fail("{}: {}: tensor '{}' is listed twice", path, at, tm.name);
    int64_t numel = 1;
    for (int64_t d : tm.shape) {
      if (d > 0 && numel > kMaxElements / d)
        fail("{}: {}.shape: tensor '{}' of shape {} has more than 2^56 elements", path, at, tm.name,
             shape_string(tm.shape));
      numel *= d;
    }
    m.tensors.push_back(std::move(tm));
  }
  const nlohmann::json& chunks = array(member(j, path, "", "chunks"), path, "chunks");
  for (size_t i = 0; i < chunks.size(); ++i) {
    const std::string at = index_path("chunks", i);
    ChunkMeta cm = chunk_from_json(chunks[i], path, at);
    if (cm.file >= static_cast<int>(m.files.size()))
      fail("{}: {}.file: a chunk of '{}' names file {} of {}", path, at, cm.tensor, cm.file, m.files.size());
    const TensorMeta* t = m.find(cm.tensor);
    if (!t) fail("{}: {}.tensor: '{}' is not in the tensor list", path, at, cm.tensor);
    if (cm.box.ndim() != static_cast<int>(t->shape.size()))
      fail("{}: {}: a chunk of '{}' has {} dimensions, the tensor {}", path, at, cm.tensor, cm.box.ndim(),
           shape_string(t->shape));
    for (int d = 0; d < cm.box.ndim(); ++d)
      if (cm.box.offset[d] + cm.box.size[d] > t->shape[d])
        fail("{}: {}: a chunk of '{}' reaches {} along dimension {}, beyond the tensor's {}", path, at, cm.tensor,
             cm.box.offset[d] + cm.box.size[d], d, shape_string(t->shape));
    // Within its tensor, a chunk has no more elements than it: no overflow.
    const int64_t numel = cm.box.numel();
    if (cm.length != static_cast<uint64_t>(numel) * dtype_size(t->dtype))
      fail("{}: {}.length: a chunk of '{}' has length {} for {} elements", path, at, cm.tensor, cm.length, numel);
    if (cm.checksums.size() != (cm.length + m.checksum_block - 1) / m.checksum_block)
      fail("{}: {}.checksums: a chunk of '{}' has {} checksums for {} bytes in blocks of {}", path, at, cm.tensor,
           cm.checksums.size(), cm.length, m.checksum_block);
    m.chunks.push_back(std::move(cm));
  }
  const auto section = [&](const char* key) {
    const nlohmann::json* v = optional_member(j, path, "", key);
    return v && !v->is_null() ? object(*v, path, key) : nlohmann::json::object();  // a writer may leave it null
  };
  m.model = section("model");
  m.args = section("args");
  m.state = section("state");
  check_state(m.state, path);
  return m;
}

nlohmann::json parse_json_text(std::string_view text, const std::string& path, const std::string& what) {
  if (const size_t deep = json_too_deep(text); deep != std::string_view::npos)
    fail("{}: {} nested deeper than {} levels at byte {}", path, what, kMaxJsonDepth, deep);
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    fail("{}: {} is not valid JSON: {}", path, what, e.what());
  }
}

nlohmann::json read_json_file(const std::string& path, const std::string& what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open {}", path, what);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) fail("{}: cannot read {}", path, what);
  return parse_json_text(text, path, what);
}

Metadata Metadata::read(const std::string& dir) {
  const std::string path = dir + "/metadata.json";
  if (!std::ifstream(path)) fail("{}: cannot open (not a complete claw checkpoint directory)", path);
  return from_json(read_json_file(path, "the checkpoint's metadata"), path);
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
