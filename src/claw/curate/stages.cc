#include "claw/curate/stages.h"

#include <algorithm>

#include "claw/core/error.h"
#include "claw/curate/cleaner.h"
#include "claw/curate/fasttext_stages.h"
#include "claw/curate/heuristic_filters.h"
#include "claw/curate/pii.h"

namespace claw::curate {
namespace {

using Factory = std::unique_ptr<Stage> (*)(StageKeys&);

struct Kind {
  const char* name;
  Factory make;  // null: a deduplication stage
};

const std::vector<Kind>& kinds() {
  static const std::vector<Kind> k = {
      {"clean", make_cleaner},
      {"pii", make_pii_redactor},
      {"language", make_language_filter},
      {"classifier", make_classifier_filter},
      {"gopher_quality", make_gopher_quality},
      {"gopher_repetition", make_gopher_repetition},
      {"c4_quality", make_c4_quality},
      {"fineweb_quality", make_fineweb_quality},
      {"exact_dedup", nullptr},
      {"minhash_dedup", nullptr},
      {"paragraph_dedup", nullptr},
  };
  return k;
}

}  // namespace

const std::vector<std::string>& stage_kinds() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const Kind& k : kinds()) n.push_back(k.name);
    return n;
  }();
  return names;
}

bool is_dedup_kind(const std::string& kind) {
  for (const Kind& k : kinds())
    if (kind == k.name) return k.make == nullptr;
  return false;
}

std::unique_ptr<Stage> make_stage(const std::string& kind, StageKeys& keys) {
  for (const Kind& k : kinds())
    if (kind == k.name && k.make) return k.make(keys);
  CLAW_CHECK(false && "make_stage: not a streaming stage kind");
  return nullptr;
}

}  // namespace claw::curate
