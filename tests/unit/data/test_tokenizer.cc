// The Tokenizer interface seen through a minimal implementation: what a new
// tokenizer gets from the base class (default encode_batch, the as_text
// default for special tokens).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "claw/data/tokenizer.h"

namespace claw::data {
namespace {

// One id per byte; "<eod>" is id 256 when recognised.
class ByteTokenizer final : public Tokenizer {
 public:
  std::string decode(std::span<const int32_t> ids) const override {
    std::string out;
    for (int32_t id : ids) out += id == 256 ? std::string("<eod>") : std::string(1, static_cast<char>(id));
    return out;
  }
  int32_t vocab_size() const override { return 257; }
  int32_t eod() const override { return 256; }
  std::string name() const override { return "bytes"; }

 private:
  std::vector<int32_t> encode_impl(std::string_view text, SpecialTokens special) const override {
    std::vector<int32_t> ids;
    for (size_t i = 0; i < text.size(); ++i) {
      if (special == SpecialTokens::recognise && text.substr(i, 5) == "<eod>") {
        ids.push_back(256);
        i += 4;
      } else {
        ids.push_back(static_cast<unsigned char>(text[i]));
      }
    }
    return ids;
  }
};

TEST(Tokenizer, SpecialTokensAreTextByDefault) {
  ByteTokenizer t;
  const Tokenizer& base = t;
  EXPECT_EQ(base.encode("a<eod>").size(), 6u);
  EXPECT_EQ(base.encode("a<eod>", SpecialTokens::recognise), (std::vector<int32_t>{'a', 256}));
}

TEST(Tokenizer, DefaultBatchEncodeKeepsDocumentOrder) {
  ByteTokenizer t;
  std::vector<std::string> texts;
  for (int i = 0; i < 37; ++i)
    texts.push_back(std::string(static_cast<size_t>(i * 7 % 23), static_cast<char>('a' + i % 26)));
  for (int threads : {1, 2, 4}) {
    auto batch = t.encode_batch(texts, threads);
    ASSERT_EQ(batch.size(), texts.size());
    for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(batch[i], t.encode(texts[i]));
  }
  auto special = t.encode_batch(std::vector<std::string>{"x<eod>"}, 2, SpecialTokens::recognise);
  EXPECT_EQ(special[0], (std::vector<int32_t>{'x', 256}));
}

}  // namespace
}  // namespace claw::data
