// SentencePiece: a model trained in the test with claw's trainer loads,
// encodes and decodes through the Tokenizer interface; special tokens,
// eod, bad files and bad training options. (ids against spm_encode:
// tests/e2e/tokenizer/sentencepiece_test.sh.)
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "claw/data/sentencepiece_tokenizer.h"
#include "claw/data/sentencepiece_trainer.h"
#include "claw/data/tokenizer_factory.h"
#include "expect_error.h"
#include "temp_dir.h"

namespace claw::data {
namespace {

// A small corpus: one long line (cut into sentences by the trainer) and
// JSONL documents with two keys.
struct TinyModel {
  claw::testing::TempDir dir;
  std::string model;
  int64_t sentences = 0;

  TinyModel() {
    std::string text;
    for (int i = 0; i < 2000; ++i) text += "the quick brown fox jumps over the lazy dog number " + std::to_string(i) + " ";
    std::string jsonl;
    for (int i = 0; i < 200; ++i)
      jsonl += "{\"text\": \"hello world " + std::to_string(i) + "\\nsecond line\", \"title\": \"doc " +
               std::to_string(i) + "\"}\n";
    SentencePieceTrainOptions o;
    o.inputs = {dir.write("long_line.txt", text), dir.write("docs.jsonl", jsonl)};
    o.json_keys = {"text", "title"};
    o.vocab_size = 300;
    o.num_threads = 2;
    o.output_prefix = dir / "m";
    sentences = train_sentencepiece(o);
    model = dir / "m.model";
  }
};

const TinyModel& tiny() {
  static const TinyModel m;
  return m;
}

TEST(SentencePiece, TrainsOnTextAndJsonl) {
  // The 100 KB line became many sentences under the trainer's 4192-byte
  // limit; each JSONL line gave three ("hello world i", "second line", "doc i").
  EXPECT_GT(tiny().sentences, 600 + 20);
  SentencePieceTokenizer t(tiny().model);
  EXPECT_EQ(t.vocab_size(), 300);
  EXPECT_EQ(t.eod(), 2);  // </s>
  EXPECT_EQ(t.piece(2), "</s>");
  EXPECT_EQ(t.name(), "sentencepiece");
}

TEST(SentencePiece, RoundTripsNormalizedText) {
  SentencePieceTokenizer t(tiny().model);
  for (const std::string s : {"the quick brown fox", "hello world 42", "unseen w\u00f6rds \u4e2d\u6587 \U0001F600"}) {
    std::vector<int32_t> ids = t.encode(s);
    ASSERT_FALSE(ids.empty());
    for (int32_t id : ids) EXPECT_TRUE(id >= 0 && id < t.vocab_size());
    EXPECT_EQ(t.decode(ids), s);  // byte fallback: no <unk>
  }
}

TEST(SentencePiece, ControlPiecesOnlyWhenAsked) {
  SentencePieceTokenizer t(tiny().model);
  const std::vector<int32_t> text = t.encode("fox</s>dog");
  EXPECT_EQ(std::count(text.begin(), text.end(), 2), 0);
  const std::vector<int32_t> special = t.encode("fox</s>dog", SpecialTokens::recognise);
  EXPECT_EQ(std::count(special.begin(), special.end(), 2), 1);
  EXPECT_EQ(t.decode(special), "fox</s>dog");
  EXPECT_EQ(t.encode("<s></s>", SpecialTokens::recognise), (std::vector<int32_t>{1, 2}));
}

TEST(SentencePiece, BatchEqualsOneByOne) {
  SentencePieceTokenizer t(tiny().model);
  const std::vector<std::string> texts = {"a", "", "the lazy dog", "hello world 7\nsecond line"};
  auto batch = t.encode_batch(texts, 2);
  ASSERT_EQ(batch.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(batch[i], t.encode(texts[i]));
}

TEST(SentencePiece, EodPieceAndBadIds) {
  EXPECT_EQ(SentencePieceTokenizer(tiny().model, "<s>").eod(), 1);
  EXPECT_CLAW_ERROR(SentencePieceTokenizer(tiny().model, "<eod>"), "no piece '<eod>'");
  SentencePieceTokenizer t(tiny().model);
  EXPECT_CLAW_ERROR(t.decode(std::vector<int32_t>{5, 300}), "token id 300", "[0, 300)", tiny().model);
  EXPECT_CLAW_ERROR(t.decode(std::vector<int32_t>{-1}), "token id -1");
}

TEST(SentencePiece, BadModelFilesNameThePath) {
  claw::testing::TempDir dir;
  EXPECT_CLAW_ERROR(SentencePieceTokenizer(dir / "none.model"), dir / "none.model", "not found", "train-tokenizer");
  const std::string bad = dir.write("bad.model", "this is not a protobuf");
  EXPECT_CLAW_ERROR(SentencePieceTokenizer{bad}, bad, "cannot load it", "expected a .model file");
  TokenizerOptions o;
  o.type = "SentencePieceTokenizer";
  EXPECT_CLAW_ERROR(make_tokenizer(o), "--tokenizer-model");
  o.model_file = tiny().model;
  EXPECT_EQ(make_tokenizer(o)->eod(), 2);
}

TEST(SentencePiece, TrainerRejectsBadOptions) {
  claw::testing::TempDir dir;
  SentencePieceTrainOptions o;
  o.output_prefix = dir / "m";
  EXPECT_CLAW_ERROR(train_sentencepiece(o), "--input", "at least one");
  o.inputs = {dir / "none.txt"};
  EXPECT_CLAW_ERROR(train_sentencepiece(o), "--input", "none.txt", "not found");
  o.inputs = {dir.write("c.txt", "some text\n")};
  o.vocab_size = 4;
  EXPECT_CLAW_ERROR(train_sentencepiece(o), "--vocab-size 4", "[8, ");
  o.vocab_size = 100;
  o.model_type = "char";
  EXPECT_CLAW_ERROR(train_sentencepiece(o), "--model-type 'char'", "bpe, unigram");
  o.model_type = "bpe";
  o.character_coverage = 1.5;
  EXPECT_CLAW_ERROR(train_sentencepiece(o), "--character-coverage 1.5");
  o.character_coverage = 1;
  o.inputs = {dir.write("bad.txt", "fine\nnot \xff fine\n")};
  EXPECT_CLAW_ERROR(train_sentencepiece(o), "bad.txt line 2", "invalid UTF-8 at byte 5");
  o.inputs = {dir.write("bad.jsonl", "{\"text\": \"x\"}\n[1, 2]\n")};
  EXPECT_CLAW_ERROR(train_sentencepiece(o), "bad.jsonl line 2", "not a JSON object");
}

}  // namespace
}  // namespace claw::data
