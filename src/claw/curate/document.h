// The unit of `claw curate`: one document of a corpus as it moves through
// the stages of a pipeline (pipeline.h), and what a stage reports about it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace claw::curate {

struct Document {
  std::string text;    // the text field; cleaning and redaction stages rewrite it
  std::string id;      // the record's id field, or "<file>:<line>" when it has none
  std::string source;  // the input file
  int64_t line = 0;    // its 1-based line (JSONL) or 0 (one file per document)
  std::string record;  // the input record as JSON text; the writer replaces its text field
  // What stages learnt about the document ("language" -> "en",
  // "language_score" -> 0.93): written to the record's "metadata" object.
  std::map<std::string, std::string, std::less<>> labels;
  std::map<std::string, double, std::less<>> scores;
};

// Counters one worker thread keeps for one stage; summed over threads for
// the report. `counts` holds a stage's own figures under stable names
// ("email", "ip", ... for PII; the removal reason for filters).
struct StageCounters {
  int64_t docs_in = 0, docs_out = 0;
  int64_t bytes_in = 0, bytes_out = 0;
  double seconds = 0;
  std::map<std::string, int64_t, std::less<>> counts;

  void add(std::string_view what, int64_t n = 1) {
    auto it = counts.find(what);
    if (it == counts.end()) it = counts.emplace(std::string(what), 0).first;
    it->second += n;
  }
  void merge(const StageCounters& o) {
    docs_in += o.docs_in, docs_out += o.docs_out, bytes_in += o.bytes_in, bytes_out += o.bytes_out;
    seconds += o.seconds;
    for (const auto& [k, v] : o.counts) add(k, v);
  }
};

}  // namespace claw::curate
