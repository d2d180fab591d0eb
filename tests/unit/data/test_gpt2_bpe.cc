// GPT-2 byte-level BPE: pre-tokenization, golden ids from an independent
// implementation, round trips, special tokens and bad files.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "claw/data/gpt2_bpe.h"
#include "claw/data/pretokenizer.h"
#include "expect_error.h"
#include "temp_dir.h"

namespace claw::data {
namespace {

using namespace std::string_view_literals;

// The GPT-2 files come from scripts/fetch-data (run by scripts/setup). When
// they are missing, load() throws an Error that names the file and says to
// run scripts/fetch-data, and every test below fails with that message.
const Gpt2Bpe& gpt2() {
  static const Gpt2Bpe tokenizer = Gpt2Bpe::load(std::string(CLAW_DATA_DIR) + "/gpt2");
  return tokenizer;
}

struct Golden {
  std::string_view text;
  std::vector<int32_t> ids;
};

// Expected ids from tiktoken@1.0.22 (npm), encoding r50k_base (= GPT-2),
// encode_ordinary(); a one-off generation, so CI needs neither node nor
// tiktoken. tiktoken's regex engine uses the same Unicode White_Space
// definition of \s as Python's `regex` module that GPT-2 used (checked on
// U+0085 and U+FEFF, where JavaScript's \s differs).
const std::vector<Golden>& golden_ordinary() {
  static const std::vector<Golden> cases = {
    {"Hello world, this is a test."sv, {15496, 995, 11, 428, 318, 257, 1332, 13}},
    {""sv, {}},
    {" "sv, {220}},
    {"   leading spaces"sv, {220, 220, 3756, 9029}},
    {"trailing spaces   "sv, {9535, 4386, 9029, 220, 220, 220}},
    {"Tabs\tand\t\tmixed \t whitespace"sv, {51, 8937, 197, 392, 197, 197, 76, 2966, 220, 197, 13216, 10223}},
    {"line one\nline two\n\nline four\n"sv, {1370, 530, 198, 1370, 734, 198, 198, 1370, 1440, 198}},
    {"\r\nWindows\r\nnewlines\r\n"sv, {201, 198, 11209, 201, 198, 3605, 6615, 201, 198}},
    {"I'm can't won't they're we've he'll she'd it's"sv,
     {40, 1101, 460, 470, 1839, 470, 484, 821, 356, 1053, 339, 1183, 673, 1549, 340, 338}},
    {"'s 'S 'LL ''s ''' 'sup"sv, {338, 705, 50, 705, 3069, 10148, 82, 705, 7061, 705, 37330}},
    {"DON'T SHOUT, don't whisper"sv, {41173, 6, 51, 6006, 12425, 11, 836, 470, 31992}},
    {"1234567890 3.14159 1,000,000 2021-01-01"sv,
     {10163, 2231, 30924, 3829, 513, 13, 1415, 19707, 352, 11, 830, 11, 830, 33448, 12, 486, 12, 486}},
    {"x=1+2*3/4; y = (a[i] - b{j}) % 5"sv,
     {87, 28, 16, 10, 17, 9, 18, 14, 19, 26, 331, 796, 357, 64, 58, 72, 60, 532, 275, 90, 73, 30072, 4064, 642}},
    {"café naïve résumé Ærøskøbing"sv,
     {66, 1878, 2634, 41492, 40560, 16345, 2634, 6184, 228, 81, 24172, 8135, 24172, 4623}},
    {"e\u0301 combining acute"sv, {68, 136, 223, 19771, 14352}},
    {"中文分词测试，日本語のテキスト、한국어 텍스트"sv,
     {40792, 23877, 229, 26344, 228, 46237, 235, 38184, 233, 46237, 243, 171, 120, 234, 33768, 98, 17312, 105, 45739,
      252, 5641, 24336, 25084, 43302, 23513, 47991, 250, 166, 113, 255, 168, 244, 112, 220, 169, 227, 235, 168, 232,
      97, 169, 232, 116}},
    {"Emoji: 😀👍🏽 👨\u200d👩\u200d👧 🇺🇸!"sv,
     {36, 5908, 7285, 25, 30325, 222, 41840, 235, 8582, 237, 121, 50169, 101, 447, 235, 41840, 102, 447, 235, 41840,
      100, 12520, 229, 118, 8582, 229, 116, 0}},
    {"ﬁne ﬂour"sv, {171, 105, 223, 710, 27332, 105, 224, 454}},
    {"Ⅻ ½ ² ٣٤ 〇"sv, {158, 227, 104, 25208, 1587, 110, 18923, 96, 149, 97, 220, 5099, 229}},
    {"non\u00a0breaking\u2003em\u3000ideographic"sv, {13159, 1849, 13395, 447, 225, 368, 5099, 222, 485, 6826}},
    {"NEL\u0085and\u2028LS"sv, {45, 3698, 126, 227, 392, 447, 101, 6561}},
    {"zero\u200bwidth\ufeffBOM"sv, {22570, 9525, 10394, 171, 119, 123, 33, 2662}},
    {"<|endoftext|>"sv, {27, 91, 437, 1659, 5239, 91, 29}},
    {"Hello<|endoftext|>World"sv, {15496, 27, 91, 437, 1659, 5239, 91, 29, 10603}},
    {"    def f(x):\n        return x**2\n"sv,
     {220, 220, 220, 825, 277, 7, 87, 2599, 198, 220, 220, 220, 220, 220, 220, 220, 1441, 2124, 1174, 17, 198}},
    {"https://example.com/path?q=1&r=two#frag"sv,
     {5450, 1378, 20688, 13, 785, 14, 6978, 30, 80, 28, 16, 5, 81, 28, 11545, 2, 8310, 363}},
    {"user@example.com #hashtag @mention $100.00"sv,
     {7220, 31, 20688, 13, 785, 1303, 17831, 12985, 2488, 434, 295, 720, 3064, 13, 405}},
    {"!!!???... ---- ~~~"sv, {10185, 28358, 986, 13498, 220, 4907, 93}},
    {"\x00\x01\x1f control"sv, {188, 189, 219, 1630}},
    {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"sv,
     {24794, 24794, 24794, 24794, 24794, 24794, 24794, 24794, 24794, 24794}},
    {"ʰʲ ǅungla ߊ"sv, {134, 108, 134, 110, 220, 131, 227, 2150, 5031, 220, 155, 232}},
    {"Mr. O'Neill's \"quoted\" 'single'"sv, {5246, 13, 440, 6, 26538, 338, 366, 421, 5191, 1, 705, 29762, 6}},
    {"Fellow-Citizens of the Senate and House of Representatives:"sv,
     {37, 5037, 12, 34, 34100, 286, 262, 3845, 290, 2097, 286, 17132, 25}},
    {"   \n\n  \t"sv, {220, 220, 220, 628, 220, 220, 197}},
    {"a  b   c    d"sv, {64, 220, 275, 220, 220, 269, 220, 220, 220, 288}},
    {"𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟘𝟙𝟚"sv,
     {47728, 242, 246, 47728, 242, 104, 47728, 242, 99, 47728, 242, 254, 47728, 242, 105, 47728, 242, 94, 47728, 242,
      95, 220, 47728, 253, 246, 47728, 253, 247, 47728, 253, 248}},
  };
  return cases;
}

// Same oracle, encode(text, "all"): literal special tokens become their ids.
const std::vector<Golden>& golden_special() {
  static const std::vector<Golden> cases = {
    {"Hello<|endoftext|>World"sv, {15496, 50256, 10603}},
    {"<|endoftext|><|endoftext|>"sv, {50256, 50256}},
    {"a <|endoftext|> b"sv, {64, 220, 50256, 275}},
    {"<|endoftext|"sv, {27, 91, 437, 1659, 5239, 91}},
  };
  return cases;
}

std::string show(std::string_view s) {
  std::string out;
  for (unsigned char c : s)
    out += (c >= 0x20 && c < 0x7f) ? std::string(1, static_cast<char>(c)) : fmt::format("\\x{:02x}", c);
  return out;
}

TEST(Gpt2Pretokenizer, MatchesPythonRegex) {
  // Expected pieces from Python's `regex` module with GPT-2's pattern.
  struct Case {
    std::string_view text;
    std::vector<std::string_view> pieces;
  };
  const std::vector<Case> cases = {
      {"a   b"sv, {"a"sv, "  "sv, " b"sv}},
      {"x\n\n y"sv, {"x"sv, "\n\n"sv, " y"sv}},
      {"it's 'sup"sv, {"it"sv, "'s"sv, " '"sv, "sup"sv}},
      {" \t x"sv, {" \t"sv, " x"sv}},
      {"end  "sv, {"end"sv, "  "sv}},
      {"price: $9.99!"sv, {"price"sv, ":"sv, " $"sv, "9"sv, "."sv, "99"sv, "!"sv}},
      {"e\u0301t\u00e9"sv, {"e"sv, "\u0301"sv, "t\u00e9"sv}},
      {"a\u3000\u3000b"sv, {"a"sv, "\u3000"sv, "\u3000"sv, "b"sv}},
      {""sv, {}},
  };
  for (const Case& c : cases) EXPECT_EQ(pretokenize(Pretokenizer::gpt2, c.text), c.pieces) << show(c.text);
}

TEST(Gpt2Pretokenizer, InvalidUtf8IsOtherAndTilesTheInput) {
  // Bytes Python could not hold in a str still split into pieces that
  // cover the input exactly.
  const std::string_view text = "ab\xff\xfe cd\xc3 \xe2\x82"sv;
  std::string joined;
  for (std::string_view p : pretokenize(Pretokenizer::gpt2, text)) joined += p;
  EXPECT_EQ(joined, text);
  EXPECT_EQ(pretokenize(Pretokenizer::gpt2, "ab\xff\xfe"sv), (std::vector<std::string_view>{"ab"sv, "\xff\xfe"sv}));
}

TEST(Gpt2Bpe, HelloWorld) {
  EXPECT_EQ(gpt2().encode("Hello world, this is a test."),
            (std::vector<int32_t>{15496, 995, 11, 428, 318, 257, 1332, 13}));
  EXPECT_EQ(gpt2().vocab_size(), 50257);
  EXPECT_EQ(gpt2().eod(), 50256);
  EXPECT_EQ(gpt2().name(), "gpt2-bpe");
}

TEST(Gpt2Bpe, GoldenIds) {
  for (const Golden& g : golden_ordinary()) {
    EXPECT_EQ(gpt2().encode(g.text), g.ids) << show(g.text);
    EXPECT_EQ(gpt2().decode(g.ids), g.text) << show(g.text);
  }
}

TEST(Gpt2Bpe, SpecialTokensOnlyWhenAsked) {
  for (const Golden& g : golden_special()) {
    EXPECT_EQ(gpt2().encode(g.text, SpecialTokens::recognise), g.ids) << show(g.text);
    EXPECT_EQ(gpt2().decode(g.ids), g.text) << show(g.text);
  }
  // By default the literal string is text: no id 50256 can be injected.
  std::vector<int32_t> ids = gpt2().encode("a <|endoftext|> b");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), gpt2().eod()), 0);
  EXPECT_EQ(gpt2().decode(ids), "a <|endoftext|> b");
}

TEST(Gpt2Bpe, RoundTrips) {
  const std::vector<std::string> texts = {
      "Plain ASCII text with punctuation: (a), [b], {c}; d!",
      "Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e, Stra\u00dfe, \u0141\u00f3d\u017a, \u00c5ngstr\u00f6m",
      "中华人民共和国 東京都 Санкт-Петербург שלום مرحبا",
      "\U0001F600\U0001F680\U0001F9D1\u200d\U0001F4BB \U0001F3F3\ufe0f\u200d\U0001F308",
      "    indented\n\n\n\t\ttabs   \r\n  trailing   ",
      "\n",
      "\n\n\n",
      "we'll they've I'd you're she's it'll DON'T 'quoted'",
      "0 1 22 333 4444 55555 3.14159 -2.5e10 1,234,567",
      std::string("embedded\0nul", 12),
      "invalid utf-8: \xff\xfe\xc3 \xe2\x82 end",
      std::string(3000, 'a') + std::string(1000, ' ') + std::string(2000, '!'),
  };
  for (const std::string& t : texts) EXPECT_EQ(gpt2().decode(gpt2().encode(t)), t) << show(t);
}

TEST(Gpt2Bpe, BatchEqualsOneByOne) {
  std::vector<std::string> texts;
  for (const Golden& g : golden_ordinary()) texts.emplace_back(g.text);
  for (int threads : {1, 2, 3}) {
    auto batch = gpt2().encode_batch(texts, threads);
    ASSERT_EQ(batch.size(), texts.size());
    for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(batch[i], gpt2().encode(texts[i])) << "threads " << threads;
  }
  EXPECT_TRUE(gpt2().encode_batch({}, 2).empty());
}

TEST(Gpt2Bpe, DecodeRejectsOutOfRangeIds) {
  EXPECT_CLAW_ERROR(gpt2().decode(std::vector<int32_t>{15496, 50257}), "50257", "[0, 50257)");
  EXPECT_CLAW_ERROR(gpt2().decode(std::vector<int32_t>{-1}), "-1");
}

TEST(Gpt2Bpe, MissingFilesSayRunFetchData) {
  EXPECT_CLAW_ERROR(Gpt2Bpe::load("/nonexistent/gpt2"), "/nonexistent/gpt2/encoder.json", "scripts/fetch-data");
  claw::testing::TempDir dir;
  dir.write("encoder.json", "{}");
  EXPECT_CLAW_ERROR(Gpt2Bpe::load(dir.path()), dir / "vocab.bpe", "scripts/fetch-data");
}

// A tiny byte-level vocabulary: the 256 bytes in GPT-2's alphabet (byte b
// gets id b), plus `extra` tokens, written as encoder.json.
std::string tiny_encoder(const std::vector<std::string>& extra) {
  // Bytes outside printable Latin-1 are written as U+0100 + k (GPT-2's
  // bytes_to_unicode); UTF-8 for code points below U+0800.
  auto utf8 = [](int cp) {
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
  };
  std::string json = "{";
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    std::string key = utf8(printable ? b : next++);
    if (key == "\"" || key == "\\") key = "\\" + key;
    json += fmt::format("\"{}\": {}, ", key, b);
  }
  int id = 256;
  for (const std::string& t : extra) json += fmt::format("\"{}\": {}, ", t, id++);
  json += fmt::format("\"<|endoftext|>\": {}}}", id);
  return json;
}

TEST(Gpt2Bpe, TinyVocabularyMergesByRank) {
  claw::testing::TempDir dir;
  dir.write("encoder.json", tiny_encoder({"ab", "bc", "abc"}));
  // Rank 0 "b c" beats rank 1 "a b", so "abc" becomes a + bc; "ab c"
  // never applies because "ab" never forms.
  dir.write("vocab.bpe", "#version: 0.2\nb c\na b\nab c\n");
  Gpt2Bpe t = Gpt2Bpe::load(dir.path());
  EXPECT_EQ(t.vocab_size(), 260);
  EXPECT_EQ(t.eod(), 259);
  EXPECT_EQ(t.encode("abc"), (std::vector<int32_t>{'a', 257}));
  EXPECT_EQ(t.encode("abab"), (std::vector<int32_t>{256, 256}));
}

TEST(Gpt2Bpe, BadFilesNameTheFileAndLine) {
  claw::testing::TempDir dir;
  dir.write("encoder.json", tiny_encoder({"ab"}));
  dir.write("vocab.bpe", "#version: 0.2\na b\nab\n");
  EXPECT_CLAW_ERROR(Gpt2Bpe::load(dir.path()), dir / "vocab.bpe", "line 3", "two tokens");
  dir.write("vocab.bpe", "#version: 0.2\nb c\n");
  EXPECT_CLAW_ERROR(Gpt2Bpe::load(dir.path()), dir / "vocab.bpe", "line 2", "not in");
  dir.write("vocab.bpe", "#version: 0.2\nab b\n");
  EXPECT_CLAW_ERROR(Gpt2Bpe::load(dir.path()), "line 2", "earlier line");
  dir.write("encoder.json", "{\"a\": 0,");
  EXPECT_CLAW_ERROR(Gpt2Bpe::load(dir.path()), dir / "encoder.json", "invalid JSON");
  dir.write("encoder.json", "{\"a\": 0, \"b\": 5}");
  EXPECT_CLAW_ERROR(Gpt2Bpe::load(dir.path()), dir / "encoder.json", "[0, 2)");
}

}  // namespace
}  // namespace claw::data
