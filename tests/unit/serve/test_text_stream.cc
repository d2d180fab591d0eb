// TextStream: the pieces it hands out add up to the decoded text (up to a
// stop string), never retract anything, hold back partial UTF-8 and partial
// stop strings, and decode incrementally the way the whole sequence decodes
// (a SentencePiece-like tokenizer drops the space of the first piece only).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "claw/serve/text_stream.h"

namespace claw::serve {
namespace {

// Pieces with SentencePiece's word-start marker ("_" here, a space when
// decoded, except at the very start) and bytes of a 3-byte character split
// over two tokens.
class PieceTokenizer final : public data::Tokenizer {
 public:
  std::string decode(std::span<const int32_t> ids) const override {
    std::string out;
    for (int32_t id : ids) out += kPieces[id];
    for (size_t at; (at = out.find('_')) != std::string::npos;) out.replace(at, 1, " ");
    if (!out.empty() && out[0] == ' ') out.erase(0, 1);  // no space before the first word
    return out;
  }
  int32_t vocab_size() const override { return static_cast<int32_t>(std::size(kPieces)); }
  int32_t eod() const override { return 0; }
  std::string name() const override { return "pieces"; }
  static constexpr const char* kPieces[] = {"_the", "_cat", "s", "_sat", "\xe2\x82", "\xac", "_on", "\n", "_mat", "!"};

 protected:
  std::vector<int32_t> encode_impl(std::string_view, data::SpecialTokens) const override { return {}; }
};

std::string run(const data::Tokenizer& tok, const std::vector<int32_t>& ids, std::vector<std::string> stop,
                bool* stopped) {
  TextStream s(tok, std::move(stop));
  std::string out;
  for (int32_t id : ids) {
    out += s.push(id);
    if (s.stopped()) break;
  }
  out += s.finish();
  *stopped = s.stopped();
  return out;
}

TEST(TextStream, PiecesAddUpToTheWholeDecode) {
  PieceTokenizer tok;
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> ids(1 + rng() % 30);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % tok.vocab_size());
    bool stopped = false;
    EXPECT_EQ(run(tok, ids, {}, &stopped), tok.decode(ids)) << trial;
    EXPECT_FALSE(stopped);
  }
}

TEST(TextStream, StopStringsEndTheTextBeforeThem) {
  PieceTokenizer tok;
  std::mt19937 rng(4);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> ids(1 + rng() % 30);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % tok.vocab_size());
    const std::string full = tok.decode(ids);
    for (const std::string stop : {"t s", "cats", "\xe2\x82\xac on", "\n"}) {
      bool stopped = false;
      const std::string got = run(tok, ids, {stop, "zzz"}, &stopped);
      const size_t at = full.find(stop);
      EXPECT_EQ(stopped, at != std::string::npos) << trial;
      EXPECT_EQ(got, at == std::string::npos ? full : full.substr(0, at)) << trial << " stop " << stop;
    }
  }
}

TEST(TextStream, HoldsBackHalfACharacter) {
  PieceTokenizer tok;
  TextStream s(tok, {});
  EXPECT_EQ(s.push(1), "cat");
  EXPECT_EQ(s.push(4), "");  // the first two bytes of the euro sign wait for the third
  EXPECT_EQ(s.push(5), "\xe2\x82\xac");
  TextStream t(tok, {});
  t.push(4);
  EXPECT_EQ(t.finish(), "\xe2\x82");  // never completed: handed out at the end
  EXPECT_EQ(valid_utf8(t.text()), "\xef\xbf\xbd\xef\xbf\xbd");  // one U+FFFD a byte
}

}  // namespace
}  // namespace claw::serve
