// The stage kinds of a `claw curate` pipeline and their factory.
//
//   clean              Unicode normalisation, control characters, whitespace,
//                      mojibake (cleaner.h)
//   pii                redaction of e-mail, IP, phone and card numbers (pii.h)
//   language, classifier
//                      fastText language ID and quality classifier
//                      (fasttext_stages.h)
//   gopher_quality, gopher_repetition, c4_quality, fineweb_quality
//                      heuristic filters as datatrove (heuristic_filters.h)
//   exact_dedup, minhash_dedup
//                      deduplication over the whole corpus (dedup.h); a
//                      pass of its own, see pipeline.h
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "claw/curate/stage.h"

namespace claw::curate {

const std::vector<std::string>& stage_kinds();
bool is_dedup_kind(const std::string& kind);

// A streaming stage from its keys (kind must be a streaming kind of
// stage_kinds()); checks every key.
std::unique_ptr<Stage> make_stage(const std::string& kind, StageKeys& keys);

}  // namespace claw::curate
