// Applies claw's casts (core/dtype_convert.h, core/block_formats.h) to the
// float32 values of a raw file, for formats_reference.py to compare with
// PyTorch's casts and with its own OCP-MX/NVFP4 reference:
//
//   formats_dump IN.f32 OUTDIR
//
// writes OUTDIR/NAME.bin, raw little-endian:
//   bf16, f16              uint16 codes (round to nearest even, IEEE overflow)
//   e4m3, e5m2             uint8 codes, dtype_convert's casts (e4m3 saturates, e5m2 overflows to inf)
//   e4m3_sat, e5m2_sat     uint8 codes of quantize_rne (both saturate: training casts)
//   e2m1                   uint8 codes
//   mx_e4m3, mx_e5m2       element codes, then the E8M0 scales (floor rule, blocks of 32)
//   mx_e4m3_rceil          the same with the rceil rule
//   nvfp4                  element codes, then the E4M3 block scales (blocks of 16, tensor amax of the whole input)
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "claw/core/block_formats.h"
#include "claw/core/dtype_convert.h"

using namespace claw;

namespace {

template <typename T>
void write(const std::string& path, const std::vector<T>& a, const std::vector<uint8_t>& b = {}) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(a.data()), static_cast<std::streamsize>(a.size() * sizeof(T)));
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  if (!f) {
    std::fprintf(stderr, "formats_dump: cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: formats_dump IN.f32 OUTDIR\n");
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary | std::ios::ate);
  if (!in) {
    std::fprintf(stderr, "formats_dump: cannot read %s\n", argv[1]);
    return 1;
  }
  const auto bytes = static_cast<size_t>(in.tellg());
  std::vector<float> x(bytes / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(x.data()), static_cast<std::streamsize>(x.size() * sizeof(float)));
  const std::string out = argv[2];
  const auto n = static_cast<int64_t>(x.size());

  std::vector<uint16_t> h(x.size());
  convert(DType::f32, x.data(), DType::bf16, h.data(), n);
  write(out + "/bf16.bin", h);
  convert(DType::f32, x.data(), DType::f16, h.data(), n);
  write(out + "/f16.bin", h);

  std::vector<uint8_t> c(x.size());
  convert(DType::f32, x.data(), DType::e4m3, c.data(), n);
  write(out + "/e4m3.bin", c);
  convert(DType::f32, x.data(), DType::e5m2, c.data(), n);
  write(out + "/e5m2.bin", c);
  for (ElemFormat f : {ElemFormat::e4m3, ElemFormat::e5m2, ElemFormat::e2m1}) {
    for (int64_t i = 0; i < n; ++i) c[i] = elem_code(f, quantize_rne(f, x[i]));
    write(out + "/" + elem_format_name(f) + (f == ElemFormat::e2m1 ? "" : "_sat") + ".bin", c);
  }

  std::vector<uint8_t> s(static_cast<size_t>((n + 15) / 16));
  auto mx = [&](ElemFormat f, MxScaleRule rule, const std::string& name) {
    s.resize(static_cast<size_t>((n + 31) / 32));
    mx_quantize(f, x.data(), n, c.data(), s.data(), 32, rule);
    write(out + "/" + name + ".bin", c, s);
  };
  mx(ElemFormat::e4m3, MxScaleRule::floor, "mx_e4m3");
  mx(ElemFormat::e5m2, MxScaleRule::floor, "mx_e5m2");
  mx(ElemFormat::e4m3, MxScaleRule::rceil, "mx_e4m3_rceil");

  float amax = 0;
  for (float v : x)
    if (std::isfinite(v)) amax = std::max(amax, std::fabs(v));
  s.resize(static_cast<size_t>((n + 15) / 16));
  nvfp4_quantize(x.data(), n, amax, c.data(), s.data());
  write(out + "/nvfp4.bin", c, s);
  return 0;
}
