#include "claw/data/builtin_corpus.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "claw/core/error.h"
#include "claw/core/log.h"
#include "claw/data/file_io.h"
#include "claw/data/gpt2_bpe.h"
#include "claw/data/indexed_dataset.h"
#include "claw/data/jsonl_record.h"
#include "claw/data/preprocess.h"

#ifndef CLAW_DEFAULT_DATA_DIR
#error "CLAW_DEFAULT_DATA_DIR must be defined by the build (src/claw/data/CMakeLists.txt)"
#endif

namespace claw::data {
namespace {

namespace fs = std::filesystem;

// Writes one {"text": speech, "file": name} line per speech, published by
// rename so a concurrent builder never reads a partial file.
void write_speeches_jsonl(const std::vector<std::string>& files, const std::string& path) {
  TempFileWriter out(path);
  for (const std::string& f : files) {
    std::string text = read_file(f, "built-in corpus speech");
    if (size_t bad = find_invalid_utf8(text); bad != std::string::npos)
      fail("built-in corpus: {} is not valid UTF-8 (byte {}); run scripts/fetch-data to restore the speeches", f,
           bad);
    const std::string line =
        nlohmann::json{{"text", std::move(text)}, {"file", fs::path(f).filename().string()}}.dump() + "\n";
    out.write(line.data(), line.size());
  }
  out.commit();
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

std::string builtin_corpus_jsonl(const std::string& data_dir) { return data_dir + "/sotu.jsonl"; }

std::string ensure_builtin_corpus(const std::string& data_dir, int num_threads) {
  const std::string prefix = builtin_corpus_prefix(data_dir);
  if (path_exists(idx_path(prefix)) && path_exists(bin_path(prefix))) return prefix;

  const std::vector<std::string> files = list_speeches(data_dir + "/sotu");
  const Gpt2Bpe tokenizer = Gpt2Bpe::load(data_dir + "/gpt2");
  const std::string jsonl = builtin_corpus_jsonl(data_dir);
  log::info("data", "building the built-in corpus {} from {} speeches in {}", prefix, files.size(),
            data_dir + "/sotu");
  write_speeches_jsonl(files, jsonl);

  PreprocessOptions options;
  options.input = jsonl;
  options.output_prefix = data_dir + "/sotu_gpt2";
  options.append_eod = true;
  options.workers = std::max(1, num_threads);
  CLAW_CHECK(preprocess_output_prefix(options.output_prefix, "text") == prefix);
  const PreprocessResult r = preprocess(options, tokenizer);
  log::info("data",
            "built-in corpus: {} documents, {} tokens, {} ({:.1f} MB of JSONL in {:.2f} s on {} workers; the same as "
            "`claw preprocess --input {} --output-prefix {} --vocab-file {}/gpt2/encoder.json --merge-file "
            "{}/gpt2/vocab.bpe --append-eod`)",
            r.totals.documents, r.totals.tokens, index_dtype_name(r.dtype), r.totals.text_bytes / 1e6,
            r.totals.seconds, options.workers, jsonl, options.output_prefix, data_dir, data_dir);
  return prefix;
}

}  // namespace claw::data
