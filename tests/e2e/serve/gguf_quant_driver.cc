// claw's side of gguf_quants.py's checks against gguf-py and llama.cpp:
//
//   gguf_quant_driver dequant FILE.gguf OUT.f32
//     every tensor as claw dequantizes it (gguf::Reader::read_f32), one after
//     another in the file's order; stdout: a JSON list of {"name", "type",
//     "count"} in the same order.
//   gguf_quant_driver linear TYPE K N M W.bin X.f32 Y.f32 XQ.bin
//     Y = X W^T through claw's linear layer (kernels::weight_linear_forward)
//     for N rows of GGUF type TYPE (ggml's id) in W.bin and M rows of K
//     activations; XQ.bin gets the activations as quantized to the type's
//     vec-dot type (ggml_quantize_activations), M rows.
//   gguf_quant_driver quantize TYPE K N W.f32 OUT.bin
//     N rows of K weights to GGUF type TYPE as claw writes them
//     (kernels::quantize_rows).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "claw/ckpt/gguf.h"
#include "claw/core/error.h"
#include "claw/kernels/cpu/quant.h"

namespace {

std::vector<char> slurp(const char* path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) claw::fail("cannot read {}", path);
  return {std::istreambuf_iterator<char>(f), {}};
}

void spill(const char* path, const void* p, size_t n) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
  if (!f.flush()) claw::fail("cannot write {}", path);
}

int dequant(const char* file, const char* out_path) {
  const claw::ckpt::gguf::Reader r(file);
  std::ofstream out(out_path, std::ios::binary);
  nlohmann::json list = nlohmann::json::array();
  for (const auto& t : r.tensors()) {
    const std::vector<float> v = r.read_f32(t);
    out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
    list.push_back({{"name", t.name}, {"type", claw::ckpt::gguf::ggml_type_name(t.type)}, {"count", v.size()}});
  }
  if (!out.flush()) claw::fail("cannot write {}", out_path);
  std::printf("%s\n", list.dump().c_str());
  return 0;
}

int linear(char** a) {
  using namespace claw::kernels;
  const auto type = static_cast<GgmlType>(std::atoi(a[0]));
  const int64_t K = std::atoll(a[1]), N = std::atoll(a[2]), M = std::atoll(a[3]);
  const std::optional<WeightType> wt = weight_type_of(type);
  if (!wt) claw::fail("type {} is not a matrix type", a[0]);
  const std::vector<char> w = slurp(a[4]), x = slurp(a[5]);
  const WeightMatrix W = WeightMatrix::from_bytes(*wt, N, K, {w.begin(), w.end()});
  std::vector<float> y(static_cast<size_t>(M * N));
  weight_linear_forward(claw::CpuCtx{2}, y.data(), reinterpret_cast<const float*>(x.data()), W, nullptr, M);
  spill(a[6], y.data(), y.size() * sizeof(float));
  const GgmlType xt = ggml_vec_dot_type(type);
  const size_t xb = ggml_row_bytes(xt, K);
  std::vector<uint8_t> xq(xb * static_cast<size_t>(M));
  for (int64_t m = 0; m < M; ++m)
    ggml_quantize_activations(xt, reinterpret_cast<const float*>(x.data()) + m * K, xq.data() + m * xb, K);
  spill(a[7], xq.data(), xq.size());
  return 0;
}

int quantize(char** a) {
  using namespace claw::kernels;
  const auto type = static_cast<GgmlType>(std::atoi(a[0]));
  const int64_t K = std::atoll(a[1]), N = std::atoll(a[2]);
  const std::optional<WeightType> wt = weight_type_of(type);
  if (!wt || !weight_type_quantizable(*wt)) claw::fail("claw does not write type {}", a[0]);
  const std::vector<char> w = slurp(a[3]);
  std::vector<uint8_t> out(weight_row_bytes(*wt, K) * static_cast<size_t>(N));
  quantize_rows(*wt, reinterpret_cast<const float*>(w.data()), out.data(), N, K);
  spill(a[4], out.data(), out.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (!((mode == "dequant" && argc == 4) || (mode == "linear" && argc == 10) || (mode == "quantize" && argc == 7))) {
    std::fprintf(stderr,
                 "usage: %s dequant FILE.gguf OUT.f32\n       %s linear TYPE K N M W.bin X.f32 Y.f32 XQ.bin\n"
                 "       %s quantize TYPE K N W.f32 OUT.bin\n",
                 argv[0], argv[0], argv[0]);
    return 2;
  }
  try {
    if (mode == "quantize") return quantize(argv + 2);
    return mode == "dequant" ? dequant(argv[2], argv[3]) : linear(argv + 2);
  } catch (const claw::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
