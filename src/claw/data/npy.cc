#include "claw/data/npy.h"

#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "claw/core/error.h"
#include "claw/data/file_io.h"

namespace claw::data {

namespace {
constexpr char kMagic[] = "\x93NUMPY";

template <typename T> constexpr const char* descr();
template <> constexpr const char* descr<int32_t>() { return "<i4"; }
template <> constexpr const char* descr<int64_t>() { return "<i8"; }
template <> constexpr const char* descr<uint32_t>() { return "<u4"; }
template <> constexpr const char* descr<int16_t>() { return "<i2"; }
template <> constexpr const char* descr<double>() { return "<f8"; }
}  // namespace

template <typename T>
void write_npy(const std::string& path, const std::vector<T>& values, int64_t cols) {
  const int64_t n = static_cast<int64_t>(values.size());
  CLAW_CHECK(cols == 0 || n % cols == 0, "{} values do not fill rows of {}", n, cols);
  std::string shape = cols == 0 ? fmt::format("({},)", n) : fmt::format("({}, {})", n / cols, cols);
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr<T>(), shape);
  const size_t prefix = 6 + 2 + 2;  // magic, version, header length
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  TempFileWriter w(path);
  w.write(kMagic, 6);
  const unsigned char version[2] = {1, 0};
  w.write(version, 2);
  const uint16_t len = static_cast<uint16_t>(header.size());
  const unsigned char len_le[2] = {static_cast<unsigned char>(len & 0xff), static_cast<unsigned char>(len >> 8)};
  w.write(len_le, 2);
  w.write(header.data(), header.size());
  w.write(values.data(), values.size() * sizeof(T));
  w.commit();
}

template <typename T>
std::vector<T> read_npy(const std::string& path, int64_t* cols) {
  MappedFile f(path, "index cache file");
  auto b = f.bytes();
  auto bad = [&](std::string_view why) { fail("{}: not a claw index cache file ({}); delete it to rebuild", path, why); };
  if (b.size() < 10 || std::memcmp(b.data(), kMagic, 6) != 0) bad("no .npy magic");
  if (static_cast<uint8_t>(b[6]) != 1) bad("npy version is not 1.x");
  const size_t len = static_cast<uint8_t>(b[8]) | (static_cast<size_t>(static_cast<uint8_t>(b[9])) << 8);
  if (10 + len > b.size()) bad("truncated header");
  std::string_view header(reinterpret_cast<const char*>(b.data()) + 10, len);
  if (header.find(fmt::format("'descr': '{}'", descr<T>())) == std::string_view::npos) bad("unexpected dtype");
  if (header.find("'fortran_order': False") == std::string_view::npos) bad("Fortran order");
  size_t s = header.find("'shape': (");
  if (s == std::string_view::npos) bad("no shape");
  int64_t dims[2] = {0, 0};
  int rank = 0;
  for (size_t i = s + 10; i < header.size() && header[i] != ')';) {
    if (header[i] >= '0' && header[i] <= '9') {
      if (rank == 2) bad("more than 2 dimensions");
      int64_t v = 0;
      while (i < header.size() && header[i] >= '0' && header[i] <= '9') v = v * 10 + (header[i++] - '0');
      dims[rank++] = v;
    } else {
      ++i;
    }
  }
  if (rank == 0 || (rank == 2) != (cols != nullptr)) bad("unexpected rank");
  const int64_t n = rank == 1 ? dims[0] : dims[0] * dims[1];
  if (10 + len + n * sizeof(T) != b.size()) bad("size does not match the shape");
  if (cols) *cols = dims[1];
  std::vector<T> out(n);
  std::memcpy(out.data(), b.data() + 10 + len, n * sizeof(T));
  return out;
}

#define CLAW_NPY(T)                                                                 \
  template void write_npy<T>(const std::string&, const std::vector<T>&, int64_t); \
  template std::vector<T> read_npy<T>(const std::string&, int64_t*);
CLAW_NPY(int16_t)
CLAW_NPY(int32_t)
CLAW_NPY(int64_t)
CLAW_NPY(uint32_t)
CLAW_NPY(double)
#undef CLAW_NPY

}  // namespace claw::data
