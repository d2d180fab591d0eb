#include "claw/ckpt/safetensors.h"

#include "claw/ckpt/format.h"

#include <cstdio>
#include <cstdint>
#include <cstring>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "claw/core/error.h"

namespace claw::ckpt {

std::string safetensors_dtype(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::u16: return "U16";
    case DType::u8: return "U8";
    case DType::e4m3: return "F8_E4M3";
    case DType::e5m2: return "F8_E5M2";
  }
  return "?";
}

DType parse_safetensors_dtype(const std::string& s, const std::string& context) {
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u16, DType::u8,
                  DType::e4m3, DType::e5m2})
    if (safetensors_dtype(t) == s) return t;
  fail("{}: unsupported safetensors dtype '{}'", context, s);
}

void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  std::vector<uint64_t> sizes;
  for (const TensorView& t : tensors) {
    uint64_t n = dtype_size(t.dtype);
    for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
    header[t.name] = {{"dtype", safetensors_dtype(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
    sizes.push_back(n);
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data 8-byte aligned
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) fail("{}: cannot open for writing", tmp);
    uint64_t len = text.size();
    unsigned char le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(len >> (8 * i));
    f.write(reinterpret_cast<const char*>(le), 8);
    f.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (size_t i = 0; i < tensors.size(); ++i)
      f.write(static_cast<const char*>(tensors[i].data), static_cast<std::streamsize>(sizes[i]));
    f.flush();
    if (!f) fail("{}: write failed", tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("{}: cannot rename to {}: {}", tmp, path, std::strerror(errno));
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) fail("{}: cannot open safetensors file", path);
  auto size = static_cast<size_t>(f.tellg());
  if (size < 8) fail("{}: truncated safetensors file ({} bytes, no header)", path, size);
  bytes_.resize(size);
  f.seekg(0);
  f.read(reinterpret_cast<char*>(bytes_.data()), static_cast<std::streamsize>(size));
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i) len |= static_cast<uint64_t>(bytes_[i]) << (8 * i);
  if (len > size - 8) fail("{}: header length {} exceeds the file size {}", path, len, size);
  const nlohmann::json header = parse_json_text(
      std::string_view(reinterpret_cast<const char*>(bytes_.data()) + 8, static_cast<size_t>(len)), path,
      "the safetensors header");
  // Every field checked for its type before it is read: a damaged or foreign
  // header is an error naming the file, the tensor and the field.
  if (!header.is_object()) fail("{}: the safetensors header is not a JSON object", path);
  const size_t data0 = 8 + len;
  for (auto& [name, v] : header.items()) {
    const std::string where = fmt::format("{}: tensor '{}'", path, name);
    if (name == "__metadata__") {
      if (!v.is_object()) fail("{}: __metadata__ is not an object of strings", path);
      for (auto& [k, mv] : v.items()) {
        if (!mv.is_string()) fail("{}: __metadata__ '{}' is not a string", path, k);
        metadata_[k] = mv.get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) fail("{}: not an object with dtype, shape and data_offsets", where);
    const auto field = [&](const char* key) -> const nlohmann::json& {
      if (!v.contains(key)) fail("{}: no '{}'", where, key);
      return v[key];
    };
    const nlohmann::json& dtype = field("dtype");
    if (!dtype.is_string()) fail("{}: 'dtype' is not a string", where);
    const auto naturals = [&](const char* key) {
      const nlohmann::json& a = field(key);
      if (!a.is_array()) fail("{}: '{}' is not an array of non-negative integers", where, key);
      std::vector<uint64_t> out;
      for (const nlohmann::json& x : a) {
        if (!x.is_number_unsigned()) fail("{}: '{}' holds {}, not a non-negative integer", where, key, x.dump());
        out.push_back(x.get<uint64_t>());
      }
      return out;
    };
    const std::vector<uint64_t> shape = naturals("shape");
    const std::vector<uint64_t> off = naturals("data_offsets");
    TensorView t{name, parse_safetensors_dtype(dtype.get<std::string>(), path + ": " + name), {}, nullptr};
    uint64_t n = dtype_size(t.dtype);
    for (uint64_t d : shape) {
      if (d > static_cast<uint64_t>(INT64_MAX) || (d != 0 && n > UINT64_MAX / d))
        fail("{}: shape {} overflows", where, field("shape").dump());
      n *= d;
      t.shape.push_back(static_cast<int64_t>(d));
    }
    if (off.size() != 2 || off[0] > off[1] || off[1] - off[0] != n || off[1] > size - data0)
      fail("{}: data_offsets inconsistent with its shape or the file size", where);
    t.data = bytes_.data() + data0 + off[0];
    tensors_.push_back(std::move(t));
  }
}

bool SafetensorsFile::contains(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return true;
  return false;
}

const TensorView& SafetensorsFile::get(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return t;
  fail("{}: no tensor named '{}'", path_, name);
}

}  // namespace claw::ckpt
