#include "claw/train/tensorboard.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <chrono>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <isa-l/crc.h>

#include "claw/core/error.h"

namespace claw::train {
namespace {

// Protocol buffers wire format: field keys and lengths are base-128 varints,
// doubles (wire type 1) and floats (wire type 5) little-endian.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

template <typename T>
void put_le(std::string& out, T v) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // the build targets little-endian hosts only
  out.append(reinterpret_cast<const char*>(b), sizeof(T));
}

void put_key(std::string& out, int field, int wire_type) { put_varint(out, (uint64_t(field) << 3) | wire_type); }

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

// Event.wall_time (field 1), which every event carries.
std::string event_header(double wall_time) {
  std::string e;
  put_key(e, 1, 1);
  put_le(e, wall_time);
  return e;
}

double now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  // ISA-L's crc32_iscsi is CRC-32C without the final inversion, taking and
  // returning the running (inverted) register, and an int length.
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
  uint32_t c = 0xFFFFFFFFu;
  for (size_t left = n; left > 0;) {
    const int chunk = static_cast<int>(std::min<size_t>(left, INT_MAX));
    c = crc32_iscsi(p, chunk, c);
    p += chunk;
    left -= static_cast<size_t>(chunk);
  }
  return ~c;
}

uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::string frame_record(const std::string& data) {
  std::string rec;
  put_le(rec, static_cast<uint64_t>(data.size()));
  put_le(rec, mask_crc32c(crc32c(rec.data(), 8)));
  rec += data;
  put_le(rec, mask_crc32c(crc32c(data.data(), data.size())));
  return rec;
}

std::string version_event(double wall_time) {
  std::string e = event_header(wall_time);
  put_bytes(e, 3, "brain.Event:2");  // Event.file_version
  return e;
}

std::string scalars_event(double wall_time, int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;
    put_bytes(value, 1, tag);  // Summary.Value.tag
    put_key(value, 2, 5);      // Summary.Value.simple_value
    put_le(value, static_cast<float>(v));
    put_bytes(summary, 1, value);  // Summary.value
  }
  std::string e = event_header(wall_time);
  put_key(e, 2, 0);  // Event.step
  put_varint(e, static_cast<uint64_t>(step));
  put_bytes(e, 5, summary);  // Event.summary
  return e;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("--tensorboard-dir {}: cannot create the directory: {}", dir, ec.message());
  const auto secs =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  path_ = (std::filesystem::path(dir) / fmt::format("events.out.tfevents.{}.{}", secs, hostname())).string();
  f_ = std::fopen(path_.c_str(), "wb");
  if (!f_) fail("--tensorboard-dir {}: cannot open {} for writing: {}", dir, path_, std::strerror(errno));
  write_record(version_event(now()));
}

TensorBoardWriter::~TensorBoardWriter() {
  if (f_) std::fclose(f_);
}

void TensorBoardWriter::add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  write_record(scalars_event(now(), step, values));
}

void TensorBoardWriter::write_record(const std::string& data) {
  const std::string rec = frame_record(data);
  if (std::fwrite(rec.data(), 1, rec.size(), f_) != rec.size() || std::fflush(f_) != 0)
    fail("--tensorboard-dir: writing {} failed: {}", path_, std::strerror(errno));
}

}  // namespace claw::train
