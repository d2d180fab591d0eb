#include "claw/ckpt/gguf.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "claw/core/dtype_convert.h"
#include "claw/core/error.h"

namespace claw::ckpt::gguf {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF"
constexpr uint64_t kDefaultAlignment = 32;

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Sequential little-endian reads with bounds checks against the file size.
class Cursor {
 public:
  Cursor(const std::string& path) : path_(path), f_(path, std::ios::binary) {
    if (!f_) fail("{}: cannot open ({})", path, std::strerror(errno));
    f_.seekg(0, std::ios::end);
    size_ = static_cast<uint64_t>(f_.tellg());
    f_.seekg(0);
  }
  uint64_t size() const { return size_; }
  uint64_t pos() const { return pos_; }
  void bytes(void* out, uint64_t n, const char* what) {
    if (n > size_ - pos_) fail("{}: truncated: {} at byte {} runs past the end ({} bytes)", path_, what, pos_, size_);
    f_.read(static_cast<char*>(out), static_cast<std::streamsize>(n));
    if (!f_) fail("{}: read failed at byte {}", path_, pos_);
    pos_ += n;
  }
  template <typename T>
  T get(const char* what) {
    T v;
    bytes(&v, sizeof v, what);
    return v;
  }
  std::string string(const char* what) {
    const uint64_t n = get<uint64_t>(what);
    if (n > size_ - pos_) fail("{}: {} at byte {} claims {} bytes, past the end of the file", path_, what, pos_, n);
    std::string s(n, '\0');
    bytes(s.data(), n, what);
    return s;
  }

 private:
  std::string path_;
  std::ifstream f_;
  uint64_t size_ = 0, pos_ = 0;
};

nlohmann::json read_value(Cursor& c, uint32_t type, const std::string& key, const std::string& path, int depth) {
  switch (static_cast<ValueType>(type)) {
    case ValueType::u8: return c.get<uint8_t>("a value");
    case ValueType::i8: return c.get<int8_t>("a value");
    case ValueType::u16: return c.get<uint16_t>("a value");
    case ValueType::i16: return c.get<int16_t>("a value");
    case ValueType::u32: return c.get<uint32_t>("a value");
    case ValueType::i32: return c.get<int32_t>("a value");
    case ValueType::f32: return c.get<float>("a value");
    case ValueType::boolean: return c.get<uint8_t>("a value") != 0;
    case ValueType::string: return c.string("a string value");
    case ValueType::u64: return c.get<uint64_t>("a value");
    case ValueType::i64: return c.get<int64_t>("a value");
    case ValueType::f64: return c.get<double>("a value");
    case ValueType::array: {
      if (depth > 0) fail("{}: metadata {}: nested arrays are not supported", path, key);
      const uint32_t et = c.get<uint32_t>("an array type");
      const uint64_t n = c.get<uint64_t>("an array length");
      if (n > c.size() - c.pos()) fail("{}: metadata {}: an array of {} elements cannot fit the file", path, key, n);
      nlohmann::json a = nlohmann::json::array();
      for (uint64_t i = 0; i < n; ++i) a.push_back(read_value(c, et, key, path, depth + 1));
      return a;
    }
  }
  fail("{}: metadata {} has value type {}; GGUF defines 0..12", path, key, type);
}

}  // namespace

std::string ggml_type_name(uint32_t t) { return kernels::ggml_type_label(t); }

size_t ggml_bytes(uint32_t type, int64_t n, const std::string& what) {
  const kernels::GgmlTypeInfo* info = kernels::ggml_type_info(type);
  if (!info || type == uint32_t(GgmlType::q8_1) || type == uint32_t(GgmlType::q8_K))
    fail("{} is {}; claw reads {} tensors", what, ggml_type_name(type), kernels::ggml_readable_types());
  if (n % info->block != 0)
    fail("{}: {} elements are not whole {} blocks of {}", what, n, info->name, info->block);
  return static_cast<size_t>(n / info->block) * info->block_bytes;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

Reader::Reader(std::string path) : path_(std::move(path)) {
  Cursor c(path_);
  file_size_ = c.size();
  if (c.size() < 24 || c.get<uint32_t>("the magic") != kMagic) fail("{}: not a GGUF file (no \"GGUF\" magic)", path_);
  version_ = c.get<uint32_t>("the version");
  if (version_ != 2 && version_ != 3) fail("{}: GGUF version {}; claw reads versions 2 and 3", path_, version_);
  const uint64_t n_tensors = c.get<uint64_t>("the tensor count"), n_kv = c.get<uint64_t>("the metadata count");
  if (n_tensors > c.size() / 24 || n_kv > c.size() / 12)
    fail("{}: header claims {} tensors and {} metadata entries, more than the file can hold", path_, n_tensors, n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string key = c.string("a metadata key");
    const uint32_t type = c.get<uint32_t>("a value type");
    kv_[key] = read_value(c, type, key, path_, 0);
  }
  uint64_t alignment = kDefaultAlignment;
  if (kv_.contains("general.alignment")) {
    const nlohmann::json& a = kv_["general.alignment"];
    if (!a.is_number_unsigned() || a.get<uint64_t>() == 0 || (a.get<uint64_t>() & (a.get<uint64_t>() - 1)))
      fail("{}: general.alignment is {}; it must be a power of two", path_, a.dump());
    alignment = a.get<uint64_t>();
  }
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    t.name = c.string("a tensor name");
    const uint32_t n_dims = c.get<uint32_t>("a tensor's dimension count");
    if (n_dims == 0 || n_dims > 4) fail("{}: tensor {} has {} dimensions; GGUF allows 1 to 4", path_, t.name, n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t e = c.get<uint64_t>("a tensor dimension");
      if (e == 0 || e > (uint64_t{1} << 40)) fail("{}: tensor {} has dimension {}", path_, t.name, e);
      t.ne.push_back(static_cast<int64_t>(e));
    }
    t.type = c.get<uint32_t>("a tensor type");
    t.offset = c.get<uint64_t>("a tensor offset");
    tensors_.push_back(std::move(t));
  }
  data_start_ = align_up(c.pos(), alignment);
  for (const TensorInfo& t : tensors_) {
    const std::string what = fmt::format("{}: tensor {}", path_, t.name);
    if (t.offset % alignment) fail("{} is at offset {}, not a multiple of the alignment {}", what, t.offset, alignment);
    const size_t bytes = ggml_bytes(t.type, t.numel(), what);
    if (const int64_t block = kernels::ggml_type_info(t.type)->block; t.ne[0] % block != 0)
      fail("{} is {} with rows of {} elements; {} rows are whole blocks of {}", what, ggml_type_name(t.type), t.ne[0],
           ggml_type_name(t.type), block);
    if (data_start_ + t.offset > file_size_ || bytes > file_size_ - data_start_ - t.offset)
      fail("{} ({} bytes at offset {}) runs past the end of the file ({} bytes)", what, bytes, t.offset, file_size_);
  }
}

const TensorInfo* Reader::find(const std::string& name) const {
  for (const TensorInfo& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

std::vector<uint8_t> Reader::read(const TensorInfo& t) const {
  std::vector<uint8_t> out(ggml_bytes(t.type, t.numel(), path_ + ": tensor " + t.name));
  std::ifstream f(path_, std::ios::binary);
  f.seekg(static_cast<std::streamoff>(data_start_ + t.offset));
  f.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size()));
  if (!f) fail("{}: cannot read tensor {}", path_, t.name);
  return out;
}

std::vector<float> Reader::read_f32(const TensorInfo& t) const {
  const std::vector<uint8_t> raw = read(t);
  std::vector<float> out(static_cast<size_t>(t.numel()));
  kernels::ggml_dequantize(static_cast<GgmlType>(t.type), raw.data(), out.data(), t.numel());
  return out;
}

namespace {

void put_raw(std::string& s, const void* p, size_t n) { s.append(static_cast<const char*>(p), n); }
template <typename T>
void put(std::string& s, T v) {
  put_raw(s, &v, sizeof v);
}
void put_string(std::string& s, const std::string& v) {
  put<uint64_t>(s, v.size());
  s += v;
}

}  // namespace

#define CLAW_GGUF_KV(key, type)         \
  put_string(kv_, key);                 \
  put<uint32_t>(kv_, uint32_t(type));   \
  ++kv_count_

void Writer::add_u32(const std::string& key, uint32_t v) {
  CLAW_GGUF_KV(key, ValueType::u32);
  put(kv_, v);
}
void Writer::add_i32(const std::string& key, int32_t v) {
  CLAW_GGUF_KV(key, ValueType::i32);
  put(kv_, v);
}
void Writer::add_f32(const std::string& key, float v) {
  CLAW_GGUF_KV(key, ValueType::f32);
  put(kv_, v);
}
void Writer::add_bool(const std::string& key, bool v) {
  CLAW_GGUF_KV(key, ValueType::boolean);
  put<uint8_t>(kv_, v ? 1 : 0);
}
void Writer::add_string(const std::string& key, const std::string& v) {
  CLAW_GGUF_KV(key, ValueType::string);
  put_string(kv_, v);
}
void Writer::add_strings(const std::string& key, const std::vector<std::string>& v) {
  CLAW_GGUF_KV(key, ValueType::array);
  put<uint32_t>(kv_, uint32_t(ValueType::string));
  put<uint64_t>(kv_, v.size());
  for (const std::string& s : v) put_string(kv_, s);
}
void Writer::add_i32s(const std::string& key, const std::vector<int32_t>& v) {
  CLAW_GGUF_KV(key, ValueType::array);
  put<uint32_t>(kv_, uint32_t(ValueType::i32));
  put<uint64_t>(kv_, v.size());
  put_raw(kv_, v.data(), v.size() * sizeof(int32_t));
}
void Writer::add_bools(const std::string& key, const std::vector<bool>& v) {
  CLAW_GGUF_KV(key, ValueType::array);
  put<uint32_t>(kv_, uint32_t(ValueType::boolean));
  put<uint64_t>(kv_, v.size());
  for (bool b : v) put<uint8_t>(kv_, b ? 1 : 0);
}
#undef CLAW_GGUF_KV

void Writer::add_tensor(const std::string& name, const std::vector<int64_t>& shape, GgmlType type,
                        std::vector<uint8_t> data) {
  TensorInfo t{.name = name, .ne = {shape.rbegin(), shape.rend()}, .type = uint32_t(type)};
  const size_t want = ggml_bytes(t.type, t.numel(), "GGUF tensor " + name);
  CLAW_CHECK(data.size() == want, "GGUF tensor {}: {} bytes given, its shape and type take {}", name, data.size(), want);
  t.offset = data_size_;
  data_size_ = align_up(data_size_ + data.size(), kDefaultAlignment);
  tensors_.push_back({std::move(t), std::move(data)});
}

void Writer::write(const std::string& path) const {
  std::string head;
  put<uint32_t>(head, kMagic);
  put<uint32_t>(head, 3);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, kv_count_);
  head += kv_;
  for (const Pending& p : tensors_) {
    put_string(head, p.info.name);
    put<uint32_t>(head, static_cast<uint32_t>(p.info.ne.size()));
    for (int64_t e : p.info.ne) put<uint64_t>(head, static_cast<uint64_t>(e));
    put<uint32_t>(head, p.info.type);
    put<uint64_t>(head, p.info.offset);
  }
  head.resize(align_up(head.size(), kDefaultAlignment), '\0');
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) fail("{}: cannot open for writing ({})", tmp, std::strerror(errno));
    f.write(head.data(), static_cast<std::streamsize>(head.size()));
    uint64_t at = 0;
    static const char zeros[kDefaultAlignment] = {};
    for (const Pending& p : tensors_) {
      f.write(zeros, static_cast<std::streamsize>(p.info.offset - at));
      f.write(reinterpret_cast<const char*>(p.data.data()), static_cast<std::streamsize>(p.data.size()));
      at = p.info.offset + p.data.size();
    }
    f.write(zeros, static_cast<std::streamsize>(data_size_ - at));
    f.flush();
    if (!f) {
      std::remove(tmp.c_str());
      fail("{}: write failed (disk full?)", tmp);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("{}: cannot rename to {}: {}", tmp, path, std::strerror(errno));
}

}  // namespace claw::ckpt::gguf
