// safetensors files (the Hugging Face tensor container), read and written
// without a library: an 8-byte little-endian header length, a JSON header
//   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value", ...}}
// then the raw little-endian tensor bytes (offsets relative to the end of the
// header). Files are written to a temporary name and renamed, so a reader
// never sees half a file.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "claw/core/dtype.h"
#include "claw/core/tensor.h"

namespace claw::ckpt {

struct TensorView {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;
};

// Writes tensors in the given order (the header is sorted by name, as the
// format's reference implementation does).
void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Reads a whole file into memory; tensors are views into it.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView& get(const std::string& name) const;  // throws naming the file and tensor
  bool contains(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string path_;
  std::vector<uint8_t> bytes_;
  std::vector<TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// safetensors dtype strings: "F32", "F64", "BF16", "F16", "I32", "I64", "U16", "U8", "F8_E4M3", "F8_E5M2".
std::string safetensors_dtype(DType t);
DType parse_safetensors_dtype(const std::string& s, const std::string& context);

}  // namespace claw::ckpt
