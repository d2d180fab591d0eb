// Pre-tokenizers of the tiktoken encodings: pieces against Python's `regex`
// module with tiktoken's patterns (the oracle test checks whole encodings
// against tiktoken itself), and the tiling invariant on arbitrary bytes.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "claw/data/pretokenizer.h"
#include "claw/data/pretokenizer_unicode.h"
#include "expect_error.h"

namespace claw::data {
namespace {

using namespace std::string_view_literals;

struct Case {
  std::string_view text;
  std::vector<std::string_view> pieces;
};

std::string show(std::string_view s) {
  std::string out;
  for (unsigned char c : s)
    out += (c >= 0x20 && c < 0x7f) ? std::string(1, static_cast<char>(c)) : fmt::format("\\x{:02x}", c);
  return out;
}

// Expected pieces: regex.findall(pattern, text) with the patterns of
// tiktoken_ext/openai_public.py (Python regex 2026.5.9).
TEST(Pretokenizer, Cl100kMatchesTheRegex) {
  const std::vector<Case> cases = {
      {"I'M HE'S they'Re"sv, {"I"sv, "'M"sv, " HE"sv, "'S"sv, " they"sv, "'Re"sv}},
      {"x'\u017fup"sv, {"x"sv, "'\u017f"sv, "up"sv}},
      {"(hello) world"sv, {"(hello"sv, ")"sv, " world"sv}},
      {"1234567"sv, {"123"sv, "456"sv, "7"sv}},
      {"  \n\n  x"sv, {"  \n\n"sv, " "sv, " x"sv}},
      {"a \t\r\n b"sv, {"a"sv, " \t\r\n"sv, " b"sv}},
      {"x!!\n\ny"sv, {"x"sv, "!!\n\n"sv, "y"sv}},
      {"\tfoo  bar"sv, {"\tfoo"sv, " "sv, " bar"sv}},
      {"\u4e2d\u6587 \u0661\u0662\u0663\u0664"sv, {"\u4e2d\u6587"sv, " "sv, "\u0661\u0662\u0663"sv, "\u0664"sv}},
      {"parseHTTPResponse getID"sv, {"parseHTTPResponse"sv, " getID"sv}},
      {"e\u0301t\u00e9 \u0301x"sv, {"e"sv, "\u0301t\u00e9"sv, " \u0301"sv, "x"sv}},
      {"a//b\n/"sv, {"a"sv, "//"sv, "b"sv, "\n"sv, "/"sv}},
      {"DON'T don't"sv, {"DON"sv, "'T"sv, " don"sv, "'t"sv}},
      {"end  "sv, {"end"sv, "  "sv}},
      {"x \u00a0y"sv, {"x"sv, " "sv, "\u00a0y"sv}},
      {""sv, {}},
  };
  for (const Case& c : cases) EXPECT_EQ(pretokenize(Pretokenizer::cl100k, c.text), c.pieces) << show(c.text);
}

TEST(Pretokenizer, O200kMatchesTheRegex) {
  const std::vector<Case> cases = {
      {"I'M HE'S they'Re"sv, {"I'M"sv, " HE'S"sv, " they'Re"sv}},
      {"x'\u017fup"sv, {"x'\u017f"sv, "up"sv}},
      {"(hello) world"sv, {"(hello"sv, ")"sv, " world"sv}},
      {"1234567"sv, {"123"sv, "456"sv, "7"sv}},
      {"  \n\n  x"sv, {"  \n\n"sv, " "sv, " x"sv}},
      {"a \t\r\n b"sv, {"a"sv, " \t\r\n"sv, " b"sv}},
      {"x!!\n\ny"sv, {"x"sv, "!!\n\n"sv, "y"sv}},
      {"\tfoo  bar"sv, {"\tfoo"sv, " "sv, " bar"sv}},
      {"\u4e2d\u6587 \u0661\u0662\u0663\u0664"sv, {"\u4e2d\u6587"sv, " "sv, "\u0661\u0662\u0663"sv, "\u0664"sv}},
      {"parseHTTPResponse getID"sv, {"parse"sv, "HTTPResponse"sv, " get"sv, "ID"sv}},
      {"e\u0301t\u00e9 \u0301x"sv, {"e\u0301t\u00e9"sv, " \u0301x"sv}},
      {"a//b\n/"sv, {"a"sv, "//"sv, "b"sv, "\n"sv, "/"sv}},
      {"DON'T don't"sv, {"DON'T"sv, " don't"sv}},
      {"end  "sv, {"end"sv, "  "sv}},
      {"x \u00a0y"sv, {"x"sv, " "sv, "\u00a0y"sv}},
      {""sv, {}},
  };
  for (const Case& c : cases) EXPECT_EQ(pretokenize(Pretokenizer::o200k, c.text), c.pieces) << show(c.text);
}

TEST(Pretokenizer, PiecesTileAnyBytes) {
  // Random bytes, mostly not UTF-8: every piece is non-empty and the pieces
  // concatenate to the input, whatever the pre-tokenizer.
  std::mt19937 rng(7);
  for (Pretokenizer p : {Pretokenizer::gpt2, Pretokenizer::cl100k, Pretokenizer::o200k}) {
    for (int trial = 0; trial < 2000; ++trial) {
      std::string text(rng() % 40, '\0');
      for (char& c : text) c = static_cast<char>(rng() % 4 == 0 ? " \n\r'sa1\xc5\xbf"[rng() % 10] : rng() % 256);
      std::string joined;
      for (std::string_view piece : pretokenize(p, text)) {
        ASSERT_FALSE(piece.empty()) << to_string(p) << " " << show(text);
        joined += piece;
      }
      ASSERT_EQ(joined, text) << to_string(p);
    }
  }
}

TEST(Pretokenizer, NamesRoundTripAndUnknownNamesAreErrors) {
  for (Pretokenizer p : {Pretokenizer::gpt2, Pretokenizer::cl100k, Pretokenizer::o200k})
    EXPECT_EQ(parse_pretokenizer(to_string(p), "--x"), p);
  EXPECT_CLAW_ERROR(parse_pretokenizer("cl100k_base", "--tiktoken-pattern"), "--tiktoken-pattern 'cl100k_base'",
                    "gpt2, cl100k, o200k");
}

TEST(Pretokenizer, FirstInvalidUtf8) {
  using unicode::first_invalid_utf8;
  EXPECT_EQ(first_invalid_utf8("plain ascii text, longer than eight bytes"sv), 41u);
  EXPECT_EQ(first_invalid_utf8("caf\u00e9 \u4e2d \U0001F600"sv), 14u);
  EXPECT_EQ(first_invalid_utf8("abcdefghij\xff"sv), 10u);
  EXPECT_EQ(first_invalid_utf8("ab\xc3"sv), 2u);                 // truncated
  EXPECT_EQ(first_invalid_utf8("ab\xed\xa0\x80"sv), 2u);         // a UTF-16 surrogate
  EXPECT_EQ(first_invalid_utf8("\xc0\xaf"sv), 0u);               // overlong '/'
  EXPECT_EQ(first_invalid_utf8(""sv), 0u);
}

}  // namespace
}  // namespace claw::data
