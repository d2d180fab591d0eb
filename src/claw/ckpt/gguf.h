// GGUF, the single-file model format of llama.cpp (version 3, little
// endian):
//
//   "GGUF" u32 version  u64 tensor_count  u64 kv_count
//   kv_count x   { string key, u32 value_type, value }
//   tensor_count x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset }
//   padding to general.alignment (32 unless given), then the tensor data,
//   each tensor at its offset from there (aligned)
//
// Strings are u64 length + bytes; arrays u32 element type + u64 count +
// elements. ne[0] is the innermost (contiguous) dimension: a PyTorch
// [out, in] matrix has ne = {in, out}. This file reads and writes the
// container; gguf_model.h maps claw models onto it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "claw/kernels/cpu/ggml_quants.h"
#include "claw/kernels/cpu/quant.h"

namespace claw::ckpt::gguf {

// ggml's tensor types (kernels/cpu/ggml_quants.h has those claw reads).
using kernels::GgmlType;
std::string ggml_type_name(uint32_t t);
// Bytes of n elements (n a multiple of the type's block); throws for types
// claw does not read and for shapes that are not whole blocks.
size_t ggml_bytes(uint32_t type, int64_t n, const std::string& what);
using kernels::ggml_type_of;

struct TensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // innermost first
  uint32_t type = 0;
  uint64_t offset = 0;  // from the data section's start
  int64_t numel() const;
  // PyTorch order (outermost first).
  std::vector<int64_t> shape() const { return {ne.rbegin(), ne.rend()}; }
};

class Reader {
 public:
  // Reads the header, metadata and tensor table; checks every tensor lies
  // inside the file. Errors name the path and what is wrong.
  explicit Reader(std::string path);
  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  // Metadata as JSON: integers, floats, bools, strings and arrays of them.
  const nlohmann::json& metadata() const { return kv_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(const std::string& name) const;
  // A tensor's bytes as stored.
  std::vector<uint8_t> read(const TensorInfo& t) const;
  // As fp32 (any type claw reads, as gguf-py's dequantize gives it).
  std::vector<float> read_f32(const TensorInfo& t) const;

 private:
  std::string path_;
  uint32_t version_ = 0;
  nlohmann::json kv_ = nlohmann::json::object();
  std::vector<TensorInfo> tensors_;
  uint64_t data_start_ = 0, file_size_ = 0;
};

enum class ValueType : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8, array = 9, u64 = 10,
  i64 = 11, f64 = 12
};

class Writer {
 public:
  void add_u32(const std::string& key, uint32_t v);
  void add_i32(const std::string& key, int32_t v);
  void add_f32(const std::string& key, float v);
  void add_bool(const std::string& key, bool v);
  void add_string(const std::string& key, const std::string& v);
  void add_strings(const std::string& key, const std::vector<std::string>& v);
  void add_i32s(const std::string& key, const std::vector<int32_t>& v);
  void add_bools(const std::string& key, const std::vector<bool>& v);
  // shape in PyTorch order; data already in `type` (ggml_bytes of the shape).
  void add_tensor(const std::string& name, const std::vector<int64_t>& shape, GgmlType type,
                  std::vector<uint8_t> data);
  // Writes the file through a temporary name in the same directory.
  void write(const std::string& path) const;

 private:
  std::string kv_;  // encoded key/value records
  uint64_t kv_count_ = 0;
  struct Pending {
    TensorInfo info;
    std::vector<uint8_t> data;
  };
  std::vector<Pending> tensors_;
  uint64_t data_size_ = 0;
};

}  // namespace claw::ckpt::gguf
