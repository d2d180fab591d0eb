// safetensors headers a file could carry that claw's writer never does:
// each a claw::Error naming the file, the tensor and the field (never a
// JSON library exception, which the CLI would report as a bug).
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "claw/ckpt/safetensors.h"
#include "expect_error.h"
#include "temp_dir.h"

namespace claw::ckpt {
namespace {

// A file of `header` (little-endian length, then the text) and `data_bytes` zero bytes.
std::string write_file(const std::string& dir, const std::string& header, size_t data_bytes = 16) {
  const std::string path = dir + "/t.safetensors";
  std::ofstream f(path, std::ios::binary);
  const uint64_t len = header.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>((len >> (8 * i)) & 0xFF));
  f << header << std::string(data_bytes, '\0');
  return path;
}

TEST(Safetensors, AWellFormedHeaderReads) {
  const claw::testing::TempDir dir;
  const std::string path =
      write_file(dir.path(), R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"__metadata__":{"a":"b"}})");
  const SafetensorsFile f(path);
  ASSERT_TRUE(f.contains("w"));
  EXPECT_EQ(f.get("w").shape, (std::vector<int64_t>{2, 2}));
}

TEST(Safetensors, EveryBadFieldIsAnErrorNamingIt) {
  const claw::testing::TempDir dir;
  struct Case {
    const char* header;
    std::vector<std::string> parts;
  };
  const std::string deep = R"({"__metadata__":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  const std::vector<Case> cases = {
      {R"([1, 2])", {"not a JSON object"}},
      {deep.c_str(), {"nested deeper than 512 levels at byte 527"}},
      {R"({"w":)", {"not valid JSON"}},
      {R"({"w":{"dtype":"F32","shape":"x","data_offsets":[0,16]}})", {"tensor 'w'", "'shape'", "not an array"}},
      {R"({"w":{"shape":[2,2],"data_offsets":[0,16]}})", {"tensor 'w'", "no 'dtype'"}},
      {R"({"w":{"dtype":"F32","shape":[2,2]}})", {"tensor 'w'", "no 'data_offsets'"}},
      {R"({"w":{"dtype":7,"shape":[2,2],"data_offsets":[0,16]}})", {"tensor 'w'", "'dtype' is not a string"}},
      {R"({"w":{"dtype":"F32","shape":[-2,2],"data_offsets":[0,16]}})", {"tensor 'w'", "'shape' holds -2"}},
      {R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[16,0]}})", {"tensor 'w'", "data_offsets"}},
      {R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})", {"tensor 'w'", "overflows"}},
      {R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,18446744073709551615]}})", {"tensor 'w'", "data_offsets"}},
      {R"({"w":[1,2]})", {"tensor 'w'", "not an object"}},
      {R"({"__metadata__":{"a":1}})", {"__metadata__ 'a'", "not a string"}},
      {R"({"__metadata__":[1]})", {"__metadata__", "not an object"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.header);
    const std::string path = write_file(dir.path(), c.header);
    const std::string msg = claw::testing::error_message([&] { SafetensorsFile f(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    for (const std::string& p : c.parts) EXPECT_NE(msg.find(p), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace claw::ckpt
