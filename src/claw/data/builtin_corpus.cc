#include "claw/data/builtin_corpus.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "claw/core/error.h"
#include "claw/core/log.h"
#include "claw/data/file_io.h"
#include "claw/data/gpt2_bpe.h"
#include "claw/data/indexed_dataset.h"

#ifndef CLAW_DEFAULT_DATA_DIR
#error "CLAW_DEFAULT_DATA_DIR must be defined by the build (src/claw/data/CMakeLists.txt)"
#endif

namespace claw::data {
namespace {

namespace fs = std::filesystem;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The speeches, sorted by file name; claw::Error if there are none.
std::vector<std::string> list_speeches(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail("built-in corpus: directory {} not found; run scripts/fetch-data to download the State of the Union "
         "speeches",
         dir);
  std::vector<std::string> files;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".txt" && it->is_regular_file(ec)) files.push_back(it->path().string());
  if (ec) fail("built-in corpus: cannot list {} ({})", dir, ec.message());
  if (files.empty())
    fail("built-in corpus: directory {} has no .txt files; run scripts/fetch-data to download the State of the "
         "Union speeches",
         dir);
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

std::string default_data_dir() {
  const char* env = std::getenv("CLAW_DATA_DIR");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(CLAW_DEFAULT_DATA_DIR);
}

std::string builtin_corpus_prefix(const std::string& data_dir) { return data_dir + "/sotu_gpt2_text_document"; }

std::string ensure_builtin_corpus(const std::string& data_dir, int num_threads) {
  const std::string prefix = builtin_corpus_prefix(data_dir);
  if (path_exists(idx_path(prefix)) && path_exists(bin_path(prefix))) return prefix;

  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<std::string> files = list_speeches(data_dir + "/sotu");
  const Gpt2Bpe tokenizer = Gpt2Bpe::load(data_dir + "/gpt2");
  // u16 is what Megatron picks for vocabularies under 65500 tokens.
  CLAW_CHECK(tokenizer.vocab_size() <= 65536, "GPT-2 vocabulary of {} does not fit u16", tokenizer.vocab_size());

  std::vector<std::string> texts;
  texts.reserve(files.size());
  size_t bytes = 0;
  for (const std::string& f : files) {
    texts.push_back(read_file(f, "built-in corpus speech"));
    bytes += texts.back().size();
  }
  log::info("data", "building the built-in corpus {} from {} speeches ({:.1f} MB) in {}", prefix, files.size(),
            bytes / 1e6, data_dir + "/sotu");

  const auto t1 = std::chrono::steady_clock::now();
  std::vector<std::vector<int32_t>> docs = tokenizer.encode_batch(texts, num_threads);
  const double encode_s = seconds_since(t1);

  IndexedDatasetBuilder builder(prefix, IndexDType::u16);
  for (std::vector<int32_t>& doc : docs) {
    doc.push_back(tokenizer.eod());
    builder.add_document(doc);
  }
  builder.finalize();
  log::info("data", "built-in corpus: {} documents, {} tokens (GPT-2 BPE on {} threads in {:.2f} s; {:.2f} s total)",
            builder.num_documents(), builder.num_tokens(), num_threads, encode_s, seconds_since(t0));
  return prefix;
}

}  // namespace claw::data
