// tiktoken rank files: golden ids from tiktoken for cl100k_base and
// o200k_base, rank-file semantics on tiny vocabularies, special tokens, and
// bad files reported with their line.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "claw/data/tiktoken.h"
#include "claw/data/tokenizer_factory.h"
#include "expect_error.h"
#include "temp_dir.h"

namespace claw::data {
namespace {

using namespace std::string_view_literals;

// The rank files come from scripts/fetch-data; when missing, the
// constructor's error names the file and says to run it.
const TikTokenizer& encoding(const std::string& name) {
  static const TikTokenizer cl100k(std::string(CLAW_DATA_DIR) + "/tiktoken/cl100k_base.tiktoken");
  static const TikTokenizer o200k(std::string(CLAW_DATA_DIR) + "/tiktoken/o200k_base.tiktoken");
  return name == "cl100k_base" ? cl100k : o200k;
}

struct Golden {
  std::string_view text;
  std::vector<int32_t> ids;
};

std::string show(std::string_view s) {
  std::string out;
  for (unsigned char c : s)
    out += (c >= 0x20 && c < 0x7f) ? std::string(1, static_cast<char>(c)) : fmt::format("\\x{:02x}", c);
  return out;
}

// From tiktoken@1.0.22 (npm): encode_ordinary(text), then encode(text, "all").
TEST(TikTokenizer, Cl100kGoldenIds) {
  const TikTokenizer& t = encoding("cl100k_base");
  const std::vector<Golden> ordinary = {
      {"Hello world, this is a test."sv, {9906, 1917, 11, 420, 374, 264, 1296, 13}},
      {"I'M HE'S they'Re x'\u017fup"sv, {40, 28703, 11947, 13575, 814, 50527, 865, 6, 129, 123, 455}},
      {"    def f(x):\n        return x**2\n"sv, {262, 711, 282, 2120, 997, 286, 471, 865, 334, 17, 198}},
      {"1234567 3.14159"sv, {4513, 10961, 22, 220, 18, 13, 9335, 2946}},
      {"\u4e2d\u6587\u5206\u8bcd \u65e5\u672c\u8a9e \ud55c\uad6d\uc5b4"sv,
       {16325, 17161, 17620, 6744, 235, 76502, 22656, 45918, 252, 62398, 89059, 255, 32179}},
      {"Emoji: \U0001f600\U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467"sv,
       {93831, 25, 91416, 9468, 239, 235, 9468, 237, 121, 62904, 101, 378, 235, 9468, 239, 102, 378, 235, 9468, 239,
        100}},
      {"parseHTTPResponse getID"sv, {6534, 9412, 2647, 636, 926}},
      {"a//b\n/\r\n\r\n"sv, {64, 322, 65, 198, 73634}},
      {"<|endoftext|>"sv, {27, 91, 8862, 728, 428, 91, 29}},
  };
  for (const Golden& g : ordinary) {
    EXPECT_EQ(t.encode(g.text), g.ids) << show(g.text);
    EXPECT_EQ(t.decode(g.ids), g.text) << show(g.text);
  }
  EXPECT_EQ(t.encode("<|endoftext|>", SpecialTokens::recognise), (std::vector<int32_t>{100257}));
  EXPECT_EQ(t.encode("a<|endoftext|>b<|endofprompt|>", SpecialTokens::recognise),
            (std::vector<int32_t>{64, 100257, 65, 100276}));
  EXPECT_EQ(t.vocab_size(), 100277);
  EXPECT_EQ(t.eod(), 100257);
  EXPECT_EQ(t.name(), "cl100k_base");
  EXPECT_EQ(t.decode(std::vector<int32_t>{100258, 100276}), "<|fim_prefix|><|endofprompt|>");
  // Ids between the last rank and the specials belong to no token.
  EXPECT_CLAW_ERROR(t.decode(std::vector<int32_t>{100256}), "100256", "unused");
  EXPECT_CLAW_ERROR(t.decode(std::vector<int32_t>{100277}), "100277", "[0, 100277)");
}

TEST(TikTokenizer, O200kGoldenIds) {
  const TikTokenizer& t = encoding("o200k_base");
  const std::vector<Golden> ordinary = {
      {"Hello world, this is a test."sv, {13225, 2375, 11, 495, 382, 261, 1746, 13}},
      {"I'M HE'S they'Re x'\u017fup"sv, {40, 95346, 18638, 31233, 1023, 146756, 1215, 6, 70067, 817}},
      {"    def f(x):\n        return x**2\n"sv, {271, 1056, 285, 4061, 1883, 309, 622, 1215, 410, 17, 198}},
      {"1234567 3.14159"sv, {7633, 19354, 22, 220, 18, 13, 16926, 4621}},
      {"\u4e2d\u6587\u5206\u8bcd \u65e5\u672c\u8a9e \ud55c\uad6d\uc5b4"sv,
       {10667, 2957, 31892, 17428, 40909, 52971, 5959}},
      {"Emoji: \U0001f600\U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467"sv,
       {96950, 25, 88038, 82514, 52622, 121, 61138, 101, 2524, 28823, 102, 2524, 28823, 100}},
      {"parseHTTPResponse getID"sv, {4841, 17893, 3186, 717, 1240}},
      {"a//b\n/\r\n\r\n"sv, {64, 393, 65, 198, 197432}},
      {"<|endoftext|>"sv, {27, 91, 419, 1440, 919, 91, 29}},
  };
  for (const Golden& g : ordinary) {
    EXPECT_EQ(t.encode(g.text), g.ids) << show(g.text);
    EXPECT_EQ(t.decode(g.ids), g.text) << show(g.text);
  }
  EXPECT_EQ(t.encode("a<|endoftext|>b<|endofprompt|>", SpecialTokens::recognise),
            (std::vector<int32_t>{64, 199999, 65, 200018}));
  EXPECT_EQ(t.vocab_size(), 200019);
  EXPECT_EQ(t.eod(), 199999);
}

TEST(TikTokenizer, FactoryBuildsItAndNamesMissingFiles) {
  TokenizerOptions o;
  o.type = "TikTokenizer";
  EXPECT_CLAW_ERROR(make_tokenizer(o), "--tokenizer-model");
  o.model_file = std::string(CLAW_DATA_DIR) + "/tiktoken/cl100k_base.tiktoken";
  EXPECT_EQ(make_tokenizer(o)->encode("Hello world, this is a test.").front(), 9906);
  o.model_file = "/nonexistent/cl100k_base.tiktoken";
  EXPECT_CLAW_ERROR(make_tokenizer(o), "/nonexistent/cl100k_base.tiktoken", "scripts/fetch-data");
  o.type = "NoSuchTokenizer";
  EXPECT_CLAW_ERROR(make_tokenizer(o), "'NoSuchTokenizer'", "GPT2BPETokenizer", "TikTokenizer");
}

std::string base64(std::string_view bytes) {
  static constexpr std::string_view digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 2]);
    out += digits[v >> 18 & 63];
    out += digits[v >> 12 & 63];
    out += i + 1 < bytes.size() ? digits[v >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? digits[v & 63] : '=';
  }
  return out;
}

// A rank file: byte b has rank b, then `extra` tokens from rank 256.
std::string rank_file(const std::vector<std::string>& extra) {
  std::string s;
  for (int b = 0; b < 256; ++b) s += fmt::format("{} {}\n", base64(std::string(1, static_cast<char>(b))), b);
  for (size_t i = 0; i < extra.size(); ++i) s += fmt::format("{} {}\n", base64(extra[i]), 256 + i);
  return s;
}

TEST(TikTokenizer, EverySplitMergesAtTheTokensRank) {
  claw::testing::TempDir dir;
  // "bc" (256) beats "ab" (257); then "a" + "bc" merge to "abc" although
  // the rank file never says which split makes it (GPT-2's vocab.bpe would
  // list only one, see Gpt2Bpe.TinyVocabularyMergesByRank).
  const std::string path = dir.write("tiny.tiktoken", rank_file({"bc", "ab", "abc"}));
  TikTokenizer t(path, "gpt2");
  EXPECT_EQ(t.name(), "tiny");
  EXPECT_EQ(t.encode("xabc"), (std::vector<int32_t>{'x', 258}));
  EXPECT_EQ(t.encode("abab"), (std::vector<int32_t>{257, 257}));
  // <|endoftext|> follows the largest rank for an encoding claw does not know.
  EXPECT_EQ(t.eod(), 259);
  EXPECT_EQ(t.vocab_size(), 260);
  EXPECT_EQ(t.encode("ab<|endoftext|>", SpecialTokens::recognise), (std::vector<int32_t>{257, 259}));
}

TEST(TikTokenizer, AWholePieceThatIsATokenIsThatToken) {
  claw::testing::TempDir dir;
  // No pair of "abcd"'s parts ever forms it ("bc" is a token, "abc" and
  // "bcd" are not), yet tiktoken maps the whole piece to it.
  TikTokenizer t(dir.write("tiny.tiktoken", rank_file({"bc", "abcd"})), "gpt2");
  EXPECT_EQ(t.encode("abcd"), (std::vector<int32_t>{257}));
  EXPECT_EQ(t.encode("xabcd"), (std::vector<int32_t>{'x', 'a', 256, 'd'}));
}

TEST(TikTokenizer, UnknownNamesNeedAPattern) {
  claw::testing::TempDir dir;
  const std::string path = dir.write("mine.tiktoken", rank_file({}));
  EXPECT_CLAW_ERROR(TikTokenizer{path}, path, "'mine' is not a known encoding", "cl100k_base", "--tiktoken-pattern");
  EXPECT_CLAW_ERROR(TikTokenizer(path, "cl200k"), "--tiktoken-pattern 'cl200k'", "gpt2, cl100k, o200k");
  EXPECT_EQ(TikTokenizer(path, "o200k").pretokenizer(), Pretokenizer::o200k);
}

TEST(TikTokenizer, BadFilesNameTheFileAndLine) {
  claw::testing::TempDir dir;
  auto load = [&](const std::string& text) { TikTokenizer(dir.write("t.tiktoken", text), "gpt2"); };
  const std::string good = rank_file({});
  EXPECT_CLAW_ERROR(load(good + "YWI= 256 x\n"), dir / "t.tiktoken", "line 257", "<base64 token> <rank>");
  EXPECT_CLAW_ERROR(load(good + "YWI 256\n"), "line 257", "not canonical base64");
  EXPECT_CLAW_ERROR(load(good + "Y*I= 256\n"), "line 257", "\"Y*I=\"", "not canonical base64");
  EXPECT_CLAW_ERROR(load(good + "YWJ= 256\n"), "line 257", "not canonical base64");  // non-zero bits under '='
  EXPECT_CLAW_ERROR(load(good + "YWI= -3\n"), "line 257", "rank \"-3\"", "[0, ");
  EXPECT_CLAW_ERROR(load(good + "YWI= 2x\n"), "line 257", "rank \"2x\"");
  EXPECT_CLAW_ERROR(load(good + "YWI= 7\n"), "line 257", "rank 7 is already used by line 8");
  EXPECT_CLAW_ERROR(load(good + "YQ== 300\n"), "line 257", "token \"YQ==\" already has rank 97 (line 98)");
  EXPECT_CLAW_ERROR(load(good.substr(good.find('\n') + 1)), "no token for byte 0x00");
  EXPECT_CLAW_ERROR(load(""), "has no tokens");
  // A known name promises a vocabulary: a short file, or one whose ranks
  // overlap the encoding's special tokens, is not that encoding.
  EXPECT_CLAW_ERROR(TikTokenizer(dir.write("cl100k_base.tiktoken", good)), "has 256 tokens", "cl100k_base has 100256",
                    "truncated");
  EXPECT_CLAW_ERROR(TikTokenizer(dir.write("r50k_base.tiktoken", good + "YWI= 50256\n")), "line 257",
                    "rank 50256 is <|endoftext|>'s id in r50k_base");
}

TEST(TikTokenizer, BatchEqualsOneByOne) {
  const TikTokenizer& t = encoding("o200k_base");
  const std::vector<std::string> texts = {"first document", "", "<|endoftext|> x", "\u4e2d\u6587 text\n\n", "1234"};
  for (SpecialTokens s : {SpecialTokens::as_text, SpecialTokens::recognise}) {
    auto batch = t.encode_batch(texts, 2, s);
    ASSERT_EQ(batch.size(), texts.size());
    for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(batch[i], t.encode(texts[i], s));
  }
}

}  // namespace
}  // namespace claw::data
