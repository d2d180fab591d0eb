#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "claw/core/error.h"
#include "claw/train/metrics.h"
#include "claw/train/tensorboard.h"
#include "temp_dir.h"

namespace claw::train {
namespace {

// A minimal reader, independent of the writer's encoder: checks each record's
// framing and CRCs and decodes the Event fields the writer uses.
struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> values;
};

template <typename T>
T load(const std::string& s, size_t at) {
  T v;
  std::memcpy(&v, s.data() + at, sizeof(T));
  return v;
}

uint64_t varint(const std::string& s, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const auto b = static_cast<unsigned char>(s.at(at++));
    v |= uint64_t(b & 0x7F) << shift;
    if (!(b & 0x80)) return v;
  }
}

// Calls f(field, wire_type, payload-start, payload-size-or-varint) per field.
template <typename F>
void fields(const std::string& s, F f) {
  size_t at = 0;
  while (at < s.size()) {
    const uint64_t key = varint(s, at);
    const int field = int(key >> 3), wire = int(key & 7);
    switch (wire) {
      case 0: f(field, wire, at, varint(s, at)); break;
      case 1: f(field, wire, at, 8); at += 8; break;
      case 5: f(field, wire, at, 4); at += 4; break;
      case 2: {
        const uint64_t n = varint(s, at);
        f(field, wire, at, n);
        at += n;
        break;
      }
      default: FAIL() << "unexpected wire type " << wire;
    }
  }
}

std::vector<Event> read_events(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<Event> events;
  size_t at = 0;
  while (at < file.size()) {
    EXPECT_LE(at + 12, file.size());
    const auto len = load<uint64_t>(file, at);
    EXPECT_EQ(load<uint32_t>(file, at + 8), mask_crc32c(crc32c(file.data() + at, 8)));
    EXPECT_LE(at + 12 + len + 4, file.size());
    const std::string data = file.substr(at + 12, len);
    EXPECT_EQ(load<uint32_t>(file, at + 12 + len), mask_crc32c(crc32c(data.data(), data.size())));
    at += 12 + len + 4;
    Event e;
    fields(data, [&](int field, int wire, size_t p, uint64_t n) {
      if (field == 1 && wire == 1) e.wall_time = load<double>(data, p);
      if (field == 2 && wire == 0) e.step = static_cast<int64_t>(n);
      if (field == 3 && wire == 2) e.file_version = data.substr(p, n);
      if (field == 5 && wire == 2) {
        const std::string summary = data.substr(p, n);
        fields(summary, [&](int f1, int w1, size_t p1, uint64_t n1) {
          ASSERT_TRUE(f1 == 1 && w1 == 2);
          const std::string value = summary.substr(p1, n1);
          std::pair<std::string, float> tv;
          fields(value, [&](int f2, int w2, size_t p2, uint64_t n2) {
            if (f2 == 1 && w2 == 2) tv.first = value.substr(p2, n2);
            if (f2 == 2 && w2 == 5) tv.second = load<float>(value, p2);
          });
          e.values.push_back(tv);
        });
      }
    });
    events.push_back(e);
  }
  return events;
}

std::string only_event_file(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) files.push_back(entry.path().string());
  EXPECT_EQ(files.size(), 1u);
  EXPECT_EQ(std::filesystem::path(files.at(0)).filename().string().rfind("events.out.tfevents.", 0), 0u);
  return files.at(0);
}

TEST(TensorBoard, Crc32cCheckValue) {
  // The CRC-32C catalogue's check value, and the empty input.
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
}

TEST(TensorBoard, MaskRotatesAndOffsets) {
  EXPECT_EQ(mask_crc32c(0), 0xa282ead8u);
  EXPECT_EQ(mask_crc32c(1), (1u << 17) + 0xa282ead8u);
  EXPECT_EQ(mask_crc32c(0x8000u), 1u + 0xa282ead8u);  // bit 15 wraps to bit 0
  EXPECT_EQ(mask_crc32c(0xE3069283u), ((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xa282ead8u);
}

TEST(TensorBoard, Crc32cChunksAgree) {
  // ISA-L runs a different code path per length; a byte-wise CRC over data
  // of every length up to a few vector widths must agree with it.
  std::string data;
  for (int i = 0; i < 300; ++i) data.push_back(static_cast<char>(i * 131 + 7));
  for (size_t n = 0; n <= data.size(); ++n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; ++i) {
      c ^= static_cast<unsigned char>(data[i]);
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    ASSERT_EQ(crc32c(data.data(), n), ~c) << "length " << n;
  }
}

// Known vectors: these events serialized by TensorBoard's own protobuf classes
// (tensorboard 2.21, event_pb2) and framed by its RecordWriter.
TEST(TensorBoard, VersionRecordMatchesTensorBoards) {
  const std::string want(
      "\x18\x00\x00\x00\x00\x00\x00\x00\xa3\x7f\x4b\x22\x09\x00\x00\x20\x40\xfc\x54\xd9\x41\x1a\x0d"
      "brain.Event:2\x2b\x35\x31\x10",
      40);
  EXPECT_EQ(frame_record(version_event(1700000000.5)), want);
}

TEST(TensorBoard, ScalarsRecordMatchesTensorBoards) {
  const std::string want(
      "\x34\x00\x00\x00\x00\x00\x00\x00\x5e\x33\x17\x5c\x09\x00\x00\x50\x40\xfc\x54\xd9\x41\x10\xac\x02"
      "\x2a\x26\x0a\x0e\x0a\x07lm loss\x15\x00\x00\xd0\x40\x0a\x14\x0a\x0dlearning-rate\x15\x00\x00\x80\x3e"
      "\xe8\x42\x23\x56",
      68);
  EXPECT_EQ(frame_record(scalars_event(1700000001.25, 300, {{"lm loss", 6.5}, {"learning-rate", 0.25}})), want);
}

TEST(TensorBoard, WrittenFileReadsBack) {
  claw::testing::TempDir tmp;
  const std::string dir = tmp / "run/nested";  // made by the writer
  {
    TensorBoardWriter w(dir);
    w.add_scalars(1, {{"lm loss", 10.5}, {"learning-rate", 3e-4}});
    w.add_scalars(300, {{"lm loss", 7.25}});
    // Flushed per step: readable before the writer closes.
    EXPECT_EQ(read_events(w.path()).size(), 3u);
  }
  const auto events = read_events(only_event_file(dir));
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_GT(events[0].wall_time, 1.6e9);  // seconds since 1970, after 2020
  EXPECT_TRUE(events[0].values.empty());
  EXPECT_EQ(events[1].step, 1);
  ASSERT_EQ(events[1].values.size(), 2u);
  EXPECT_EQ(events[1].values[0].first, "lm loss");
  EXPECT_EQ(events[1].values[0].second, 10.5f);
  EXPECT_EQ(events[1].values[1].first, "learning-rate");
  EXPECT_EQ(events[1].values[1].second, 3e-4f);
  EXPECT_EQ(events[2].step, 300);  // a two-byte varint
  ASSERT_EQ(events[2].values.size(), 1u);
  EXPECT_EQ(events[2].values[0].second, 7.25f);
  EXPECT_GE(events[2].wall_time, events[0].wall_time);
}

TEST(TensorBoard, MetricsWriterMapsJsonlKeysToTags) {
  claw::testing::TempDir tmp;
  {
    MetricsWriter m("", tmp / "tb");
    m.write({{"step", 3}, {"loss", 6.5}, {"lr", 1e-3}, {"grad_norm", 0.75}, {"tokens_per_s", 1234.5},
             {"mfu", 0.125}, {"mem_bytes", 1 << 30}, {"step_ms", 9.0}, {"val_loss", 6.75}});
  }
  const auto events = read_events(only_event_file(tmp / "tb"));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].step, 3);
  std::map<std::string, float> got(events[1].values.begin(), events[1].values.end());
  const std::map<std::string, float> want = {
      {"lm loss", 6.5f}, {"lm loss validation", 6.75f}, {"learning-rate", 1e-3f}, {"grad-norm", 0.75f},
      {"throughput/tokens_per_s", 1234.5f}, {"mfu", 0.125f}, {"mem-max-allocated-bytes", float(1 << 30)}};
  EXPECT_EQ(got, want);  // step_ms is not a TensorBoard scalar
}

TEST(TensorBoard, UnwritableDirNamesTheFlag) {
  claw::testing::TempDir tmp;
  const std::string file = tmp.write("plain", "x");
  try {
    TensorBoardWriter w(file + "/tb");
    FAIL() << "no error for a directory under a regular file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--tensorboard-dir " + file + "/tb"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace claw::train
