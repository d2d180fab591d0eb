// The `claw preprocess` engine: Megatron's document/sequence/eod layout,
// output independent of chunking and worker count, bad input (fatal or
// skipped, always naming the line), zstd input, and no file left behind by
// a failed run.
#include <gtest/gtest.h>
#include <zstd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "claw/data/file_io.h"
#include "claw/data/gpt2_bpe.h"
#include "claw/data/indexed_dataset.h"
#include "claw/data/jsonl_record.h"
#include "claw/data/preprocess.h"
#include "expect_error.h"
#include "temp_dir.h"

namespace claw::data {
namespace {

namespace fs = std::filesystem;
using claw::testing::TempDir;

const std::string kRealData = CLAW_DATA_DIR;

// One id per byte plus an eod; the vocabulary size is a parameter so the
// dtype rule can be probed.
class BytesTokenizer final : public Tokenizer {
 public:
  explicit BytesTokenizer(int32_t vocab = 257) : vocab_(vocab) {}
  std::string decode(std::span<const int32_t> ids) const override {
    std::string out;
    for (int32_t id : ids) out += static_cast<char>(id);
    return out;
  }
  int32_t vocab_size() const override { return vocab_; }
  int32_t eod() const override { return vocab_ - 1; }
  std::string name() const override { return "bytes"; }

 private:
  std::vector<int32_t> encode_impl(std::string_view text, SpecialTokens) const override {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  int32_t vocab_;
};

// Fails on any text containing "boom", as a tokenizer might on input it
// cannot handle.
class FailingTokenizer final : public Tokenizer {
 public:
  std::string decode(std::span<const int32_t>) const override { return {}; }
  int32_t vocab_size() const override { return 257; }
  int32_t eod() const override { return 256; }
  std::string name() const override { return "failing"; }

 private:
  std::vector<int32_t> encode_impl(std::string_view text, SpecialTokens) const override {
    if (text.find("boom") != std::string_view::npos) fail("tokenizer cannot encode '{}'", text);
    return {1};
  }
};

std::vector<std::vector<int32_t>> sequences_of(const IndexedDataset& d, int64_t doc) {
  std::vector<std::vector<int32_t>> out;
  for (int64_t s = d.document_index(doc); s < d.document_index(doc + 1); ++s) {
    std::vector<int32_t> seq(d.sequence_length(s));
    d.read_tokens(s, 0, d.sequence_length(s), seq.data());
    out.push_back(seq);
  }
  return out;
}

std::vector<int32_t> ids(std::string_view text, int32_t eod = -1) {
  std::vector<int32_t> out;
  for (unsigned char c : text) out.push_back(c);
  if (eod >= 0) out.push_back(eod);
  return out;
}

PreprocessOptions options_for(const TempDir& dir, const std::string& input) {
  PreprocessOptions o;
  o.input = input;
  o.output_prefix = dir / "out";
  return o;
}

std::vector<std::string> files_in(const TempDir& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path())) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// A corpus of n lines with varied lengths, unicode and escapes.
std::string varied_corpus(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) {
    std::string text = "doc " + std::to_string(i) + ": ";
    for (int k = 0; k < i % 17; ++k) text += k % 3 == 0 ? "caf\\u00e9 " : k % 3 == 1 ? "\\u4e2d\\u6587 " : "word\\n";
    s += "{\"id\": " + std::to_string(i) + ", \"text\": \"" + text + "\"}\n";
  }
  return s;
}

TEST(Preprocess, OneDocumentPerLineWithGpt2AndEod) {
  TempDir dir;
  const std::string input = dir.write("in.jsonl",
                                      "{\"text\": \"Hello world, this is a test.\"}\n"
                                      "{\"text\": \"caf\\u00e9 <|endoftext|> \\ud83d\\ude00\", \"meta\": {\"x\": 1}}\n");
  const Gpt2Bpe bpe = Gpt2Bpe::load(kRealData + "/gpt2");
  PreprocessOptions o = options_for(dir, input);
  o.append_eod = true;
  o.workers = 2;
  const PreprocessResult r = preprocess(o, bpe);
  ASSERT_EQ(r.output_prefixes, std::vector<std::string>{dir / "out_text_document"});
  EXPECT_EQ(r.dtype, IndexDType::u16);
  EXPECT_EQ(r.totals.documents, 2);
  EXPECT_EQ(r.totals.lines, 2);

  IndexedDataset d(r.output_prefixes[0]);
  EXPECT_EQ(d.dtype(), IndexDType::u16);
  ASSERT_EQ(d.num_documents(), 2);
  std::vector<int32_t> first = {15496, 995, 11, 428, 318, 257, 1332, 13, 50256};
  EXPECT_EQ(sequences_of(d, 0), (std::vector<std::vector<int32_t>>{first}));
  // "<|endoftext|>" in a corpus is text, never the control id.
  std::vector<int32_t> second = bpe.encode("caf\u00e9 <|endoftext|> \U0001F600");
  second.push_back(bpe.eod());
  EXPECT_EQ(sequences_of(d, 1), (std::vector<std::vector<int32_t>>{second}));
  EXPECT_EQ(r.totals.tokens, d.total_tokens());
  EXPECT_EQ(files_in(dir), (std::vector<std::string>{"in.jsonl", "out_text_document.bin", "out_text_document.idx"}));
}

TEST(Preprocess, ListsOfSentencesAndEmptyTextsAsMegatron) {
  TempDir dir;
  const std::string input = dir.write("in.jsonl",
                                      "{\"text\": [\"ab\", \"\", \"c\"]}\n"
                                      "{\"text\": \"\"}\n"
                                      "{\"text\": []}\n"
                                      "{\"text\": [\"de\", \"\"]}\n");
  BytesTokenizer t;
  for (bool eod : {true, false}) {
    PreprocessOptions o = options_for(dir, input);
    o.append_eod = eod;
    IndexedDataset d(preprocess(o, t).output_prefixes[0]);
    ASSERT_EQ(d.num_documents(), 4);
    const int32_t e = eod ? t.eod() : -1;
    // Texts without tokens are dropped; eod ends the last remaining one.
    EXPECT_EQ(sequences_of(d, 0), (std::vector<std::vector<int32_t>>{ids("ab"), ids("c", e)}));
    EXPECT_TRUE(sequences_of(d, 1).empty()) << "an empty text is a document without sequences (no eod either)";
    EXPECT_TRUE(sequences_of(d, 2).empty());
    EXPECT_EQ(sequences_of(d, 3), (std::vector<std::vector<int32_t>>{ids("de", e)}));
    EXPECT_EQ(d.num_sequences(), 3);
  }
}

TEST(Preprocess, OneAlignedOutputPerKey) {
  TempDir dir;
  const std::string input = dir.write("in.jsonl",
                                      "{\"title\": \"T1\", \"body\": \"first\"}\n"
                                      "{\"title\": \"T2\", \"body\": [\"se\", \"cond\"]}\n");
  BytesTokenizer t;
  PreprocessOptions o = options_for(dir, input);
  o.json_keys = {"body", "title"};
  const PreprocessResult r = preprocess(o, t);
  ASSERT_EQ(r.output_prefixes, (std::vector<std::string>{dir / "out_body_document", dir / "out_title_document"}));
  IndexedDataset body(r.output_prefixes[0]), title(r.output_prefixes[1]);
  EXPECT_EQ(sequences_of(body, 1), (std::vector<std::vector<int32_t>>{ids("se"), ids("cond")}));
  EXPECT_EQ(sequences_of(title, 1), (std::vector<std::vector<int32_t>>{ids("T2")}));
  EXPECT_EQ(r.totals.documents, 2);
  EXPECT_EQ(r.totals.tokens, body.total_tokens() + title.total_tokens());
}

TEST(Preprocess, ChunksAndWorkersDoNotChangeTheOutput) {
  TempDir dir;
  const std::string input = dir.write("in.jsonl", varied_corpus(400));
  const Gpt2Bpe bpe = Gpt2Bpe::load(kRealData + "/gpt2");
  PreprocessOptions o = options_for(dir, input);
  o.append_eod = true;
  o.output_prefix = dir / "serial";
  preprocess(o, bpe);
  for (size_t chunk : {size_t{1}, size_t{100}, size_t{4096}}) {
    o.output_prefix = dir / "parallel";
    o.chunk_bytes = chunk;
    o.workers = 4;
    const PreprocessResult r = preprocess(o, bpe);
    EXPECT_EQ(r.totals.documents, 400);
    EXPECT_EQ(r.totals.lines, 400);
    for (const char* ext : {".bin", ".idx"})
      EXPECT_EQ(read_file(dir / "parallel_text_document" + ext, "output"),
                read_file(dir / "serial_text_document" + ext, "output"))
          << ext << " with chunks of " << chunk << " bytes";
  }
}

TEST(Preprocess, DtypeFollowsMegatronsRule) {
  TempDir dir;
  const std::string input = dir.write("in.jsonl", "{\"text\": \"x\"}\n");
  PreprocessOptions o = options_for(dir, input);
  o.append_eod = true;
  EXPECT_EQ(preprocess(o, BytesTokenizer(65499)).dtype, IndexDType::u16);
  const PreprocessResult wide = preprocess(o, BytesTokenizer(65500));
  EXPECT_EQ(wide.dtype, IndexDType::i32);
  EXPECT_EQ(sequences_of(IndexedDataset(wide.output_prefixes[0]), 0)[0], (std::vector<int32_t>{'x', 65499}));

  o.dtype = IndexDType::i32;
  EXPECT_EQ(preprocess(o, BytesTokenizer(300)).dtype, IndexDType::i32);
  o.dtype = IndexDType::u8;
  EXPECT_CLAW_ERROR(preprocess(o, BytesTokenizer(300)), "--dtype uint8", "up to 255", "300 ids", "--dtype uint16");
  o.dtype = IndexDType::u16;
  EXPECT_CLAW_ERROR(preprocess(o, BytesTokenizer(100277)), "--dtype uint16", "up to 65535", "100277 ids",
                    "--dtype int32");
}

TEST(Preprocess, BadLinesAreFatalAndNameTheEarliestLine) {
  TempDir dir;
  std::string corpus = varied_corpus(200);
  // Lines 3 and 150 are bad; with tiny chunks on 4 workers the later one
  // may well be parsed first, but the error must name line 3.
  size_t pos = 0;
  for (int line = 1; line < 3; ++line) pos = corpus.find('\n', pos) + 1;
  corpus.insert(pos, "{\"text\": oops}\n");
  pos = 0;
  for (int line = 1; line < 150; ++line) pos = corpus.find('\n', pos) + 1;
  corpus.insert(pos, "not json\n");
  const std::string input = dir.write("in.jsonl", corpus);
  PreprocessOptions o = options_for(dir, input);
  o.workers = 4;
  o.chunk_bytes = 64;
  for (int repeat = 0; repeat < 5; ++repeat)
    EXPECT_CLAW_ERROR(preprocess(o, BytesTokenizer()), input + ":3: malformed JSON at byte 9", "--skip-bad-lines");
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"in.jsonl"}) << "a failed run leaves no file";

  o.skip_bad_lines = true;
  const PreprocessResult r = preprocess(o, BytesTokenizer());
  EXPECT_EQ(r.totals.skipped_lines, 2);
  EXPECT_EQ(r.totals.documents, 200);
  EXPECT_EQ(r.totals.lines, 202);
  IndexedDataset d(r.output_prefixes[0]);
  EXPECT_EQ(d.num_documents(), 200);
  EXPECT_EQ(sequences_of(d, 2)[0], ids("doc 2: caf\u00e9 \u4e2d\u6587 "));
}

TEST(Preprocess, EachKindOfBadLineIsNamed) {
  TempDir dir;
  struct Case {
    std::string line;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"{\"text\": \"caf\xe9\"}", {":2: invalid UTF-8 at byte 13 of the line (0xe9)"}},
      {"{\"text\": \"\xed\xa0\x80\"}", {":2: invalid UTF-8 at byte 10"}},  // a surrogate
      {"{\"text\": \"x\"", {":2: malformed JSON at byte 12", "unexpected end of input"}},
      {"[\"text\"]", {":2: expected a JSON object, got an array"}},
      {"{\"body\": \"x\", \"id\": 7}", {":2: no key \"text\"", "\"body\", \"id\""}},
      {"{\"text\": null}", {":2: key \"text\" holds null, not a string or a list of strings"}},
      {"{\"text\": [\"a\", 3]}", {":2: key \"text\": element 1 of the list is a number"}},
  };
  for (const Case& c : cases) {
    const std::string input = dir.write("in.jsonl", "{\"text\": \"fine\"}\n" + c.line + "\n{\"text\": \"fine\"}\n");
    PreprocessOptions o = options_for(dir, input);
    const std::string msg = claw::testing::error_message([&] { preprocess(o, BytesTokenizer()); });
    EXPECT_EQ(msg.rfind(input + ":2: ", 0), 0u) << msg;
    for (const std::string& part : c.parts) EXPECT_NE(msg.find(part), std::string::npos) << msg << " lacks " << part;
    o.skip_bad_lines = true;
    EXPECT_EQ(preprocess(o, BytesTokenizer()).totals.skipped_lines, 1) << c.line;
  }
}

TEST(Preprocess, EmptyAndBlankInputs) {
  TempDir dir;
  BytesTokenizer t;
  PreprocessOptions o = options_for(dir, dir.write("empty.jsonl", ""));
  EXPECT_CLAW_ERROR(preprocess(o, t), "--input", "empty.jsonl", "empty");
  o.input = dir.write("blank.jsonl", "\n  \n\r\n");
  EXPECT_CLAW_ERROR(preprocess(o, t), "blank.jsonl", "all 3 lines are blank");
  o.input = dir.write("bad.jsonl", "x\ny\n");
  o.skip_bad_lines = true;
  EXPECT_CLAW_ERROR(preprocess(o, t), "bad.jsonl", "2 non-blank lines", "skipped");
  EXPECT_EQ(files_in(dir), (std::vector<std::string>{"bad.jsonl", "blank.jsonl", "empty.jsonl"}));

  // Blank lines between records are counted, CRLF endings and a missing
  // final newline are fine.
  o.input = dir.write("mixed.jsonl", "{\"text\": \"a\"}\r\n\n{\"text\": \"b\"}");
  const PreprocessResult r = preprocess(o, t);
  EXPECT_EQ(r.totals.lines, 3);
  EXPECT_EQ(r.totals.blank_lines, 1);
  EXPECT_EQ(r.totals.documents, 2);
  EXPECT_EQ(sequences_of(IndexedDataset(r.output_prefixes[0]), 1)[0], ids("b"));
}

TEST(Preprocess, FlagsAndPathsAreCheckedFirst) {
  TempDir dir;
  BytesTokenizer t;
  const std::string input = dir.write("in.jsonl", "{\"text\": \"a\"}\n");
  PreprocessOptions o = options_for(dir, input);
  o.output_prefix = dir / "missing/out";
  EXPECT_CLAW_ERROR(preprocess(o, t), "--output-prefix", dir / "missing", "does not exist");
  o = options_for(dir, dir / "none.jsonl");
  EXPECT_CLAW_ERROR(preprocess(o, t), "--input", "none.jsonl", "not found");
  o = options_for(dir, input);
  o.json_keys = {"text", "text"};
  EXPECT_CLAW_ERROR(preprocess(o, t), "--json-keys", "\"text\" twice");
  o = options_for(dir, input);
  o.workers = 0;
  EXPECT_CLAW_ERROR(preprocess(o, t), "--workers 0");
  o = options_for(dir, dir.path());
  EXPECT_CLAW_ERROR(preprocess(o, t), "--input", "not a regular file");
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"in.jsonl"});
}

TEST(Preprocess, AFailureKeepsThePreviousOutput) {
  TempDir dir;
  BytesTokenizer t;
  PreprocessOptions o = options_for(dir, dir.write("good.jsonl", "{\"text\": \"old\"}\n"));
  preprocess(o, t);
  const std::string bin = read_file(dir / "out_text_document.bin", "bin");
  const std::string idx = read_file(dir / "out_text_document.idx", "idx");
  o.input = dir.write("late.jsonl", varied_corpus(300) + "{\"text\": 1}\n");
  o.chunk_bytes = 256;
  o.workers = 3;
  EXPECT_CLAW_ERROR(preprocess(o, t), "late.jsonl:301:");
  EXPECT_EQ(read_file(dir / "out_text_document.bin", "bin"), bin);
  EXPECT_EQ(read_file(dir / "out_text_document.idx", "idx"), idx);
  EXPECT_EQ(files_in(dir).size(), 4u) << "no temporaries left";
}

TEST(Preprocess, TokenizerFailureInAWorker) {
  TempDir dir;
  PreprocessOptions o = options_for(dir, dir.write("in.jsonl", varied_corpus(50) + "{\"text\": \"boom\"}\n"));
  o.workers = 2;
  o.chunk_bytes = 128;
  EXPECT_CLAW_ERROR(preprocess(o, FailingTokenizer()), "tokenizer cannot encode 'boom'");
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"in.jsonl"});
}

TEST(Preprocess, ProgressReachesTheEndOfTheInput) {
  TempDir dir;
  const std::string corpus = varied_corpus(300);
  PreprocessOptions o = options_for(dir, dir.write("in.jsonl", corpus));
  o.chunk_bytes = 1000;
  o.workers = 2;
  std::vector<PreprocessProgress> seen;
  o.progress = [&](const PreprocessProgress& p) { seen.push_back(p); };
  const PreprocessResult r = preprocess(o, BytesTokenizer());
  ASSERT_GT(seen.size(), 5u);
  for (size_t i = 1; i < seen.size(); ++i) {
    EXPECT_GE(seen[i].documents, seen[i - 1].documents);
    EXPECT_GE(seen[i].input_bytes, seen[i - 1].input_bytes);
  }
  EXPECT_EQ(seen.back().input_bytes, corpus.size());
  EXPECT_EQ(seen.back().input_size, corpus.size());
  EXPECT_EQ(seen.back().text_bytes, corpus.size());
  EXPECT_EQ(seen.back().documents, r.totals.documents);
}

TEST(Preprocess, AProgressCallbackThatThrowsCancelsTheRun) {
  TempDir dir;
  PreprocessOptions o = options_for(dir, dir.write("in.jsonl", varied_corpus(300)));
  o.chunk_bytes = 500;
  o.workers = 3;
  int calls = 0;
  o.progress = [&](const PreprocessProgress&) {
    if (++calls == 3) fail("interrupted");
  };
  EXPECT_CLAW_ERROR(preprocess(o, BytesTokenizer()), "interrupted");
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"in.jsonl"});
}

// Compresses `text` with libzstd as `frames` concatenated frames.
std::string zstd_frames(const std::string& text, int frames) {
  std::string out;
  const size_t step = text.size() / frames + 1;
  for (size_t b = 0; b < text.size(); b += step) {
    const std::string part = text.substr(b, step);
    std::string buf(ZSTD_compressBound(part.size()), '\0');
    const size_t n = ZSTD_compress(buf.data(), buf.size(), part.data(), part.size(), 3);
    EXPECT_FALSE(ZSTD_isError(n));
    out += buf.substr(0, n);
  }
  return out;
}

TEST(Preprocess, ZstdInputGivesTheSameDataset) {
  TempDir dir;
  const std::string corpus = varied_corpus(3000);  // several MB decompressed in 1 MB steps
  std::string big;
  for (int i = 0; i < 8; ++i) big += corpus;
  PreprocessOptions o = options_for(dir, dir.write("in.jsonl", big));
  o.workers = 2;
  o.output_prefix = dir / "plain";
  preprocess(o, BytesTokenizer());
  o.input = dir.write("in.jsonl.zst", zstd_frames(big, 3));
  o.output_prefix = dir / "zstd";
  std::vector<PreprocessProgress> seen;
  o.progress = [&](const PreprocessProgress& p) { seen.push_back(p); };
  const PreprocessResult r = preprocess(o, BytesTokenizer());
  EXPECT_EQ(r.totals.text_bytes, big.size());
  EXPECT_EQ(r.totals.input_size, fs::file_size(o.input));
  EXPECT_EQ(seen.back().input_bytes, fs::file_size(o.input)) << "progress counts compressed bytes";
  for (const char* ext : {".bin", ".idx"})
    EXPECT_EQ(read_file(dir / "zstd_text_document" + ext, "out"), read_file(dir / "plain_text_document" + ext, "out"));

  // A leading skippable frame (magic 0x184D2A5?, u32 size, payload) is
  // still zstd, and skipped.
  const std::string skippable("\x50\x2a\x4d\x18\x03\x00\x00\x00" "abc", 11);
  o.input = dir.write("skip.jsonl.zst", skippable + zstd_frames(big, 2));
  o.output_prefix = dir / "skip";
  o.progress = nullptr;
  preprocess(o, BytesTokenizer());
  EXPECT_EQ(read_file(dir / "skip_text_document.bin", "out"), read_file(dir / "plain_text_document.bin", "out"));
}

TEST(Preprocess, DamagedZstdInput) {
  TempDir dir;
  const std::string z = zstd_frames(varied_corpus(500), 1);
  PreprocessOptions o = options_for(dir, dir.write("cut.jsonl.zst", z.substr(0, z.size() / 2)));
  EXPECT_CLAW_ERROR(preprocess(o, BytesTokenizer()), "--input", "cut.jsonl.zst", "truncated");
  std::string corrupt = z;
  corrupt[4] = '\xff';  // frame header descriptor with reserved bits set
  o.input = dir.write("corrupt.jsonl.zst", corrupt);
  EXPECT_CLAW_ERROR(preprocess(o, BytesTokenizer()), "corrupt.jsonl.zst", "corrupt zstd data");
  o.input = dir.write("named.jsonl.zst", "{\"text\": \"a\"}\n");
  EXPECT_CLAW_ERROR(preprocess(o, BytesTokenizer()), "named.jsonl.zst", "zstd magic");
  EXPECT_EQ(files_in(dir).size(), 3u);
}

TEST(JsonlRecord, Utf8Validation) {
  EXPECT_EQ(find_invalid_utf8("plain ascii text, long enough for the 8-byte path"), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("caf\u00e9 \u4e2d \U0001F600 \U0010FFFF"), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("abcdefgh\xc0\x80"), 8u);        // overlong NUL
  EXPECT_EQ(find_invalid_utf8("ab\xe0\x80\x80"), 2u);          // overlong 3-byte
  EXPECT_EQ(find_invalid_utf8("\xed\xa0\x80"), 0u);            // surrogate U+D800
  EXPECT_EQ(find_invalid_utf8("x\xf4\x90\x80\x80"), 1u);       // above U+10FFFF
  EXPECT_EQ(find_invalid_utf8("xy\xe4\xb8"), 2u);              // cut short at the end
  EXPECT_EQ(find_invalid_utf8("\xe4\xb8x"), 0u);               // bad continuation
  EXPECT_EQ(find_invalid_utf8("ok\x80"), 2u);                  // lone continuation
  EXPECT_EQ(find_invalid_utf8("\xff"), 0u);
}

TEST(JsonlRecord, ExtractsStringsAndLists) {
  const std::vector<std::string> keys = {"a", "b"};
  JsonlFields f = parse_jsonl_line(R"({"b": ["x", "y"], "a": "t\u00e9", "c": 1})", keys);
  EXPECT_EQ(f.error, "");
  EXPECT_EQ(f.texts, (std::vector<std::vector<std::string>>{{"t\u00e9"}, {"x", "y"}}));
  EXPECT_TRUE(is_blank_line(" \t\r"));
  EXPECT_FALSE(is_blank_line(" {}"));
}

}  // namespace
}  // namespace claw::data
