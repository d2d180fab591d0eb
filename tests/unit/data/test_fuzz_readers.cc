// Mutation fuzzing of the data-side readers (tests/unit/fuzz.h): JSONL
// records (parse_jsonl_line) and files (JsonlReader, plain and zstd), GPT-2
// BPE files (encoder.json, vocab.bpe) and tiktoken rank files, cut from the
// built-in data's real ones to a 300-token vocabulary. Every case read (and
// the tokenizer used) or refused with a claw::Error naming the file or line.
#include <gtest/gtest.h>

#include <zstd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "claw/data/gpt2_bpe.h"
#include "claw/data/jsonl_reader.h"
#include "claw/data/jsonl_record.h"
#include "claw/data/tiktoken.h"
#include "fuzz.h"
#include "temp_dir.h"

namespace claw::data {
namespace {

using claw::testing::fuzz;
using claw::testing::read_bytes;
using claw::testing::write_bytes;

constexpr int kCases = 3000;
const std::string kSample = "The people's  representatives, 1790: <|endoftext|> union\n\xe2\x80\x94 state";

// A record's reason names its line in the CLI; here the record itself is
// the input, so a refusal is the reason string (never an exception).
TEST(FuzzReaders, JsonlRecords) {
  const std::string valid = R"({"text": "The union \u00e9 1790", "id": 7, "meta": {"a": [1, 2.5, null, true]}})";
  const std::vector<std::string> keys = {"text"};
  std::mt19937_64 rng(11);
  int read = 0, refused = 0;
  for (int i = 0; i < kCases; ++i) {
    const std::string line = i % 2 ? claw::testing::mutate_json(valid, rng) : claw::testing::mutate(valid, rng);
    try {
      const JsonlFields f = parse_jsonl_line(line, keys);
      (f.error.empty() ? read : refused)++;
    } catch (const std::exception& e) {
      FAIL() << "case " << i << ": parse_jsonl_line threw (it returns the reason): " << e.what();
    }
  }
  std::printf("fuzz jsonl records: %d cases, %d read, %d refused with a reason\n", kCases, read, refused);
  EXPECT_GT(refused, 0);
}

std::string zstd_compress(const std::string& s) {
  std::string out(ZSTD_compressBound(s.size()), '\0');
  out.resize(ZSTD_compress(out.data(), out.size(), s.data(), s.size(), 3));
  return out;
}

TEST(FuzzReaders, JsonlFiles) {
  const claw::testing::TempDir dir;
  std::string text;
  for (int i = 0; i < 40; ++i) text += R"({"text": "line )" + std::to_string(i) + R"( of the corpus"})" + "\n";
  for (const bool zst : {false, true}) {
    const std::string path = dir.path() + (zst ? "/c.jsonl.zst" : "/c.jsonl");
    const std::string valid = zst ? zstd_compress(text) : text;
    const auto c = fuzz(zst ? "jsonl.zst" : "jsonl", valid, kCases / 2, zst ? 12 : 13, [&](const std::string& bytes) {
      write_bytes(path, bytes);
      JsonlReader r(path, "--input");
      LineChunk chunk;
      while (r.next(chunk, 256)) {
      }
    }, path);
    EXPECT_EQ(c.cases, kCases / 2);
  }
}

// encoder.json and vocab.bpe of the first 256 + 44 ids of GPT-2's (its
// first 44 merges make ids 256..299), <|endoftext|> as 300.
TEST(FuzzReaders, Gpt2BpeFiles) {
  const claw::testing::TempDir dir;
  const std::string gpt2 = std::string(CLAW_DATA_DIR) + "/gpt2";
  const nlohmann::json full = nlohmann::json::parse(read_bytes(gpt2 + "/encoder.json"));
  nlohmann::json small = nlohmann::json::object();
  for (const auto& [token, id] : full.items())
    if (id.get<int64_t>() < 300) small[token] = id;
  small["<|endoftext|>"] = 300;
  std::istringstream merges_in(read_bytes(gpt2 + "/vocab.bpe"));
  std::string merges, line;
  for (int n = 0; n < 45 && std::getline(merges_in, line); ++n) merges += line + "\n";  // #version + 44
  const std::string enc = dir.path() + "/encoder.json", bpe = dir.path() + "/vocab.bpe";
  write_bytes(enc, small.dump());
  write_bytes(bpe, merges);
  ASSERT_EQ(Gpt2Bpe(enc, bpe).vocab_size(), 301);
  for (const std::string& path : {enc, bpe}) {
    const std::string valid = read_bytes(path);
    const auto c = fuzz(path.substr(dir.path().size() + 1), valid, kCases / 2, path == enc ? 21 : 22,
                        [&](const std::string& bytes) {
                          write_bytes(path, bytes);
                          const Gpt2Bpe t(enc, bpe);
                          (void)t.decode(t.encode(kSample, SpecialTokens::recognise));
                        },
                        path, path == enc);
    write_bytes(path, valid);
    EXPECT_EQ(c.cases, kCases / 2);
  }
}

// The first 300 ranks of cl100k_base (every single byte among them), under
// another name with the cl100k pattern.
TEST(FuzzReaders, TiktokenRankFile) {
  const claw::testing::TempDir dir;
  std::istringstream in(read_bytes(std::string(CLAW_DATA_DIR) + "/tiktoken/cl100k_base.tiktoken"));
  std::string valid, line;
  for (int n = 0; n < 300 && std::getline(in, line); ++n) valid += line + "\n";
  const std::string path = dir.path() + "/small.tiktoken";
  write_bytes(path, valid);
  ASSERT_EQ(TikTokenizer(path, "cl100k").vocab_size(), 301);
  const auto c = fuzz("tiktoken", valid, kCases, 31, [&](const std::string& bytes) {
    write_bytes(path, bytes);
    const TikTokenizer t(path, "cl100k");
    (void)t.decode(t.encode(kSample, SpecialTokens::recognise));
  }, path);
  EXPECT_EQ(c.cases, kCases);
}

}  // namespace
}  // namespace claw::data
