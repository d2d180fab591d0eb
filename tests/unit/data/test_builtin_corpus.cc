// The built-in corpus: built from the raw speeches exactly once, through
// the preprocess engine, with the documents, eod tokens and dtype Megatron's
// preprocess_data.py would write.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "claw/data/builtin_corpus.h"
#include "claw/data/file_io.h"
#include "claw/data/gpt2_bpe.h"
#include "claw/data/gpt_dataset.h"
#include "claw/data/indexed_dataset.h"
#include "expect_error.h"
#include "temp_dir.h"

namespace claw::data {
namespace {

namespace fs = std::filesystem;
using claw::testing::TempDir;

const std::string kRealData = CLAW_DATA_DIR;

std::vector<int32_t> tokens_of(const IndexedDataset& d, int64_t doc) {
  std::vector<int32_t> out;
  for (int64_t s = d.document_index(doc); s < d.document_index(doc + 1); ++s) {
    std::vector<int32_t> seq(d.sequence_length(s));
    d.read_tokens(s, 0, d.sequence_length(s), seq.data());
    out.insert(out.end(), seq.begin(), seq.end());
  }
  return out;
}

TEST(BuiltinCorpus, MissingRawFilesSayRunFetchData) {
  TempDir dir;
  EXPECT_CLAW_ERROR(ensure_builtin_corpus(dir.path(), 1), dir / "sotu", "not found", "scripts/fetch-data");
  fs::create_directory(dir / "sotu");
  EXPECT_CLAW_ERROR(ensure_builtin_corpus(dir.path(), 1), dir / "sotu", "no .txt files", "scripts/fetch-data");
  dir.write("sotu/1790_a.txt", "Fellow-Citizens");
  EXPECT_CLAW_ERROR(ensure_builtin_corpus(dir.path(), 1), dir / "gpt2/encoder.json", "scripts/fetch-data");
  EXPECT_FALSE(fs::exists(builtin_corpus_prefix(dir.path()) + ".idx"));
}

TEST(BuiltinCorpus, BuildsSortedDocumentsWithEodOnce) {
  TempDir dir;
  fs::create_directory_symlink(kRealData + "/gpt2", dir / "gpt2");
  fs::create_directory(dir / "sotu");
  dir.write("sotu/1801_b.txt", "Second speech.\n");
  dir.write("sotu/1790_a.txt", "First speech, it's short.");
  dir.write("sotu/2000_c.txt", "Third: \u00e9l\u00e8ve  caf\u00e9");
  dir.write("sotu/README.md", "not a speech");

  const std::string prefix = ensure_builtin_corpus(dir.path(), 2);
  EXPECT_EQ(prefix, dir / "sotu_gpt2_text_document");
  const Gpt2Bpe bpe = Gpt2Bpe::load(kRealData + "/gpt2");
  IndexedDataset d(prefix);
  EXPECT_EQ(d.dtype(), IndexDType::u16);
  ASSERT_EQ(d.num_documents(), 3);
  const char* texts[] = {"First speech, it's short.", "Second speech.\n", "Third: \u00e9l\u00e8ve  caf\u00e9"};
  for (int doc = 0; doc < 3; ++doc) {
    std::vector<int32_t> expected = bpe.encode(texts[doc]);
    expected.push_back(bpe.eod());
    EXPECT_EQ(tokens_of(d, doc), expected) << "document " << doc;
  }

  // The speeches went through `claw preprocess`'s input format: one JSONL
  // record per speech, in the same order.
  const std::string jsonl = read_file(builtin_corpus_jsonl(dir.path()), "jsonl");
  EXPECT_EQ(std::count(jsonl.begin(), jsonl.end(), '\n'), 3);
  EXPECT_EQ(jsonl.rfind("{\"file\":\"1790_a.txt\",\"text\":\"First speech, it's short.\"}\n", 0), 0u) << jsonl;

  // Present files are reused, not rebuilt.
  const auto stamp = fs::last_write_time(prefix + ".bin");
  fs::remove(dir / "sotu/1801_b.txt");
  EXPECT_EQ(ensure_builtin_corpus(dir.path(), 2), prefix);
  EXPECT_EQ(fs::last_write_time(prefix + ".bin"), stamp);
  EXPECT_EQ(IndexedDataset(prefix).num_documents(), 3);
}

TEST(BuiltinCorpus, TheStateOfTheUnionCorpus) {
  TempDir dir;
  fs::create_directory_symlink(kRealData + "/gpt2", dir / "gpt2");
  fs::create_directory_symlink(kRealData + "/sotu", dir / "sotu");
  const std::string prefix = ensure_builtin_corpus(dir.path(), 2);
  IndexedDataset d(prefix);
  const Gpt2Bpe bpe = Gpt2Bpe::load(kRealData + "/gpt2");
  ASSERT_EQ(d.num_documents(), 233);
  // 2,074,279 text tokens (identical, document by document, to tiktoken's
  // r50k_base encoding) plus one eod per speech.
  EXPECT_EQ(d.total_tokens(), 2074279 + 233);
  for (int64_t doc = 0; doc < d.num_documents(); ++doc) {
    std::vector<int32_t> t = tokens_of(d, doc);
    ASSERT_FALSE(t.empty());
    EXPECT_EQ(t.back(), bpe.eod());
    EXPECT_EQ(std::count(t.begin(), t.end(), bpe.eod()), 1) << "document " << doc;
  }
  std::vector<int32_t> first = tokens_of(d, 0);
  first.pop_back();
  EXPECT_EQ(bpe.decode(first), read_file(kRealData + "/sotu/1790_george_washington_n.txt", "speech"));

  GptDatasetOptions o;
  o.split = "98,1,1";
  o.seq_length = 1024;
  o.vocab_size = bpe.vocab_size();
  GptDatasets ds = open_gpt_datasets(prefix, o);
  EXPECT_GT(ds[Split::train]->num_samples(), 1900);
  EXPECT_GT(ds[Split::valid]->num_samples(), 10);
  EXPECT_GT(ds[Split::test]->num_samples(), 10);
}

TEST(BuiltinCorpus, DefaultDataDirHonoursTheEnvironment) {
  const char* old = std::getenv("CLAW_DATA_DIR");
  const std::string saved = old != nullptr ? old : "";
  ::setenv("CLAW_DATA_DIR", "/somewhere/else", 1);
  EXPECT_EQ(default_data_dir(), "/somewhere/else");
  ::unsetenv("CLAW_DATA_DIR");
  EXPECT_EQ(default_data_dir(), kRealData);  // the build's CLAW_DATA_DIR
  if (old != nullptr) ::setenv("CLAW_DATA_DIR", saved.c_str(), 1);
}

}  // namespace
}  // namespace claw::data
