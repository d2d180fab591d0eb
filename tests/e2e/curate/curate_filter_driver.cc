// The heuristic filters of `claw curate` (heuristic_filters.h) on JSONL, for
// tests/e2e/curate/curate_vs_datatrove.py:
//
//   curate_filter_driver KIND [key=value ...] [--print-text] < docs.jsonl
//
// KIND is a stage kind (gopher_quality, gopher_repetition, c4_quality,
// fineweb_quality), or `words` / `sentences` for text_stats' spaCy word and
// sentence split. Each key=value is a TOML assignment of the stage's table
// (e.g. min_doc_words=10, stop_words=["the"]). Reads records with "id" and
// "text"; writes "id\tkeep" or "id\t<reason>" per record (with
// --print-text, a kept record also gets "\t" and its text as a JSON
// string), "id\t[tokens]" for words and "id\t[sentences]" for sentences.
// The time spent in the filter, and documents per second, go to stderr.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "claw/core/error.h"
#include "claw/curate/heuristic_filters.h"
#include "claw/curate/text_stats.h"

namespace curate = claw::curate;

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s KIND [key=value ...] [--print-text] < docs.jsonl\n", argv[0]);
    return 2;
  }
  const std::string kind = argv[1];
  std::string toml_text;
  bool print_text = false;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--print-text") {
      print_text = true;
      continue;
    }
    const size_t eq = arg.find('=');
    if (eq == std::string::npos) throw claw::Error(fmt::format("argument '{}' is not key=value", arg));
    toml_text += fmt::format("{} = {}\n", arg.substr(0, eq), arg.substr(eq + 1));
  }
  const toml::table table = toml::parse(toml_text);
  std::unique_ptr<curate::Stage> stage;
  if (kind != "words" && kind != "sentences") {
    curate::StageKeys keys(table, fmt::format("curate_filter_driver ({})", kind));
    if (kind == "gopher_quality")
      stage = curate::make_gopher_quality(keys);
    else if (kind == "gopher_repetition")
      stage = curate::make_gopher_repetition(keys);
    else if (kind == "c4_quality")
      stage = curate::make_c4_quality(keys);
    else if (kind == "fineweb_quality")
      stage = curate::make_fineweb_quality(keys);
    else
      throw claw::Error(fmt::format("unknown kind '{}'", kind));
  }

  std::ios::sync_with_stdio(false);
  std::string line, out;
  curate::StageCounters counters;
  double seconds = 0;
  int64_t docs = 0;
  std::vector<std::string_view> parts;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    const nlohmann::json record = nlohmann::json::parse(line);
    curate::Document doc;
    doc.text = record.at("text").get<std::string>();
    const nlohmann::json& id = record.at("id");
    doc.id = id.is_string() ? id.get<std::string>() : id.dump();
    out = doc.id + '\t';
    const auto t0 = std::chrono::steady_clock::now();
    if (stage) {
      const std::string_view reason = stage->process(doc, counters);
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (reason.empty()) {
        out += "keep";
        if (print_text) out += '\t' + nlohmann::json(doc.text).dump();
      } else {
        out += reason;
      }
    } else {
      parts.clear();
      if (kind == "words")
        curate::text::split_into_words(doc.text, parts);
      else
        curate::text::split_into_sentences(doc.text, parts);
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      nlohmann::json array = nlohmann::json::array();
      for (std::string_view p : parts) array.push_back(std::string(p));
      out += array.dump();
    }
    ++docs;
    out += '\n';
    std::cout << out;
  }
  std::cerr << fmt::format("{}: {} documents in {:.3f} s of filtering: {:.0f} docs/s\n", kind, docs, seconds,
                           seconds > 0 ? docs / seconds : 0.0);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "curate_filter_driver: %s\n", e.what());
  return 1;
}
