// A streaming stage of `claw curate`: sees one document at a time, keeps it
// (possibly rewriting its text) or removes it with a reason. Cleaners, PII
// redaction, language ID and the heuristic and classifier filters are
// streaming stages; deduplication needs the whole corpus and is a pass of
// its own (dedup.h).
//
// Thread-safety: process() is called from many worker threads at once on
// different documents; a stage keeps no mutable state outside `counters`,
// which belongs to the calling thread.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include <toml++/toml.h>

#include "claw/curate/document.h"

namespace claw::curate {

class Stage {
 public:
  virtual ~Stage() = default;
  // The stage's kind as written in the TOML ("gopher_quality").
  virtual std::string_view kind() const = 0;
  // Empty to keep `doc`, else the reason it is removed (a short snake_case
  // tag, e.g. "gopher_short_doc", the names datatrove uses where it has one).
  // Stage-specific figures go to counters.add(); docs/bytes in and out and
  // the time are counted by the caller.
  virtual std::string_view process(Document& doc, StageCounters& counters) const = 0;
};

// Reads a stage's keys from its TOML table. Every key is checked: an unknown
// key or a value of the wrong type is a claw::Error naming `where` (e.g.
// "pipeline.toml [[stage]] 3 (gopher_quality)") and the key, and listing the
// keys the stage accepts.
class StageKeys {
 public:
  StageKeys(const toml::table& table, std::string where);
  // Each returns the key's value, or `fallback` when the key is absent.
  double number(std::string_view key, double fallback);
  int64_t integer(std::string_view key, int64_t fallback);
  bool boolean(std::string_view key, bool fallback);
  std::string string(std::string_view key, std::string fallback);
  std::vector<std::string> strings(std::string_view key, std::vector<std::string> fallback);
  // An array of [integer, number] pairs ([[2, 0.2], [3, 0.18]]: datatrove's
  // lists of tuples).
  std::vector<std::pair<int64_t, double>> number_pairs(std::string_view key,
                                                       std::vector<std::pair<int64_t, double>> fallback);
  // An inline table of numbers ({ fr = 0.5, de = 0.7 }).
  std::map<std::string, double> numbers(std::string_view key);
  // A threshold that can be switched off: absent -> fallback; `false` -> off
  // (returns false); a number -> that value.
  bool optional_number(std::string_view key, double fallback, double& value);
  // Call after reading every key: throws on a key that was not read.
  void check_all_read() const;
  const std::string& where() const { return where_; }

 private:
  const toml::table& table_;
  std::string where_;
  std::vector<std::string> read_;
};

}  // namespace claw::curate
