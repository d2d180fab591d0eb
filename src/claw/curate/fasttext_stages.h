// Stages on fastText models (Debian's libfasttext): language identification
// and a quality classifier, and the trainer of that classifier.
//
// "language" (as datatrove's LanguageFilter with FT176LID):
//   model = "<data>/lid/lid.176.ftz"  fastText's lid.176 (scripts/fetch-data)
//   languages = ["en"]                keep a document when one of these
//                                     scores above its threshold; [] keeps
//                                     every document whose best language
//                                     scores above the threshold
//   threshold = 0.65
//   thresholds = { fr = 0.5 }         per language, over `threshold`
//   label_only = false                annotate, never remove
// The text is predicted with newlines as spaces, every label scored (k=-1).
// Adds metadata "language" (best label) and "language_score". Reason:
// "language" (below threshold).
//
// "classifier": a supervised fastText model (train_fasttext_classifier)
//   model = "quality.bin", label = "hq", threshold = 0.5: keep when
//   P(label) >= threshold. Adds metadata "<label>_score". Reason:
//   "classifier_score".
//
// Thread-safety: prediction is const in fastText; one model per stage.
#pragma once

#include <memory>
#include <string>

#include "claw/curate/stage.h"

namespace claw::curate {

std::unique_ptr<Stage> make_language_filter(StageKeys& keys);
std::unique_ptr<Stage> make_classifier_filter(StageKeys& keys);

struct ClassifierTraining {
  std::string input;                   // JSONL with a text and a label field
  std::string text_key = "text", label_key = "label";
  std::string output;                  // the model, fastText .bin
  int epochs = 25, word_ngrams = 2, dim = 50, min_count = 1, threads = 1;
  double lr = 0.5;
  double validation_fraction = 0.1;    // lines held out (a seeded random draw) for the report
  uint64_t seed = 1;
};

struct ClassifierReport {
  int64_t train_examples = 0, validation_examples = 0;
  double validation_accuracy = 0;      // top-1 on the held-out lines
  std::vector<std::string> labels;
};

// Trains and saves (whole or not at all); bad lines are claw::Error naming
// the file and line.
ClassifierReport train_fasttext_classifier(const ClassifierTraining& t);

}  // namespace claw::curate
