#include "claw/curate/fasttext_stages.h"
#include "claw/curate/fasttext_model.h"

#include <fasttext/fasttext.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "claw/core/error.h"
#include "claw/data/builtin_corpus.h"
#include "claw/data/file_io.h"
#include "claw/data/json_line.h"

namespace claw::curate {

using data::default_data_dir;
using data::for_each_line;
using data::parse_json_object;
using data::path_exists;
using data::read_file;
namespace {

namespace fs = std::filesystem;

std::shared_ptr<const FastTextModel> load_model(const std::string& path, const std::string& where) {
  if (!path_exists(path))
    fail("{}: model = \"{}\" not found{}", where, path,
         path.ends_with("lid.176.ftz") ? " (scripts/fetch-data puts fastText's lid.176 there)" : "");
  try {
    return std::make_shared<const FastTextModel>(path);
  } catch (const Error& e) {
    fail("{}: {}", where, e.what());
  }
}

// Every label's probability, best first, for one line of text (newlines as
// spaces): what fastText's predictLine(k = -1) gives, at several times its
// speed (fasttext_model.h).
const std::vector<std::pair<float, int32_t>>& predict_all(const FastTextModel& m, std::string_view text) {
  thread_local std::vector<std::pair<float, int32_t>> out;
  m.predict(text, out);
  return out;
}

// fastText's own prediction, for the trainer's held-out report.
std::vector<std::pair<fasttext::real, std::string>> predict_line(const fasttext::FastText& m, std::string_view text) {
  std::string line(text);
  std::replace(line.begin(), line.end(), '\n', ' ');
  std::istringstream in(line + "\n");  // one line, as the stage reads it
  std::vector<std::pair<fasttext::real, std::string>> out;
  m.predictLine(in, out, -1, 0.0);
  return out;
}

std::string strip_label(const std::string& label) {
  constexpr std::string_view kPrefix = "__label__";
  return label.starts_with(kPrefix) ? label.substr(kPrefix.size()) : label;
}

class LanguageFilter final : public Stage {
 public:
  explicit LanguageFilter(StageKeys& keys) {
    model_ = load_model(keys.string("model", default_data_dir() + "/lid/lid.176.ftz"), keys.where());
    languages_ = keys.strings("languages", {"en"});
    threshold_ = keys.number("threshold", 0.65);
    per_language_ = keys.numbers("thresholds");
    label_only_ = keys.boolean("label_only", false);
    keys.check_all_read();
    for (const auto& [lang, t] : per_language_)
      if (!languages_.empty() && std::find(languages_.begin(), languages_.end(), lang) == languages_.end())
        fail("{}: thresholds.{} is set but \"{}\" is not in languages", keys.where(), lang, lang);
    // Per label: its language code, and its threshold if it is wanted (else -1).
    for (int32_t i = 0; i < model_->num_labels(); ++i) {
      const std::string lang = strip_label(model_->label(i));
      const bool wanted = std::find(languages_.begin(), languages_.end(), lang) != languages_.end();
      auto t = per_language_.find(lang);
      language_.push_back(lang);
      wanted_threshold_.push_back(!wanted ? -1.0 : t == per_language_.end() ? threshold_ : t->second);
    }
    double lowest = languages_.empty() ? threshold_ : 1.0;
    for (double t : wanted_threshold_)
      if (t >= 0) lowest = std::min(lowest, t);
    cut_ = model_->threshold_below(static_cast<float>(lowest));
    for (const std::string& lang : languages_)
      if (std::find(language_.begin(), language_.end(), lang) == language_.end())
        fail("{}: languages has \"{}\", which the model does not know (it has e.g. \"{}\")", keys.where(), lang,
             language_.empty() ? std::string() : language_[0]);
  }
  std::string_view kind() const override { return "language"; }

  std::string_view process(Document& doc, StageCounters& counters) const override {
    // Only the labels that can pass a threshold are ranked (most of the
    // tree search is skipped); when none can, the best one alone, for the
    // document's label. The decisions are those of ranking every label.
    thread_local std::vector<std::pair<float, int32_t>> preds;
    thread_local std::vector<float> hidden;
    hidden.resize(model_->dim());
    preds.clear();
    if (model_->embed(doc.text, hidden.data())) {
      if (!label_only_) model_->classify(hidden.data(), preds, -1, cut_);
      if (preds.empty()) model_->classify(hidden.data(), preds, 1);
    }
    if (preds.empty()) return label_only_ ? "" : "language";
    const std::string& best = language_[preds[0].second];
    doc.labels["language"] = best;
    doc.scores["language_score"] = preds[0].first;
    counters.add(best);
    if (label_only_) return "";
    if (languages_.empty()) return preds[0].first > threshold_ ? "" : "language";
    for (const auto& [p, label] : preds)
      if (wanted_threshold_[label] >= 0 && p > wanted_threshold_[label]) return "";
    return "language";
  }

 private:
  std::shared_ptr<const FastTextModel> model_;
  std::vector<std::string> languages_;
  double threshold_;
  std::map<std::string, double> per_language_;
  bool label_only_;
  std::vector<std::string> language_;      // per label of the model
  std::vector<double> wanted_threshold_;   // per label: its threshold, or -1 if not in languages
  float cut_ = 0;                          // labels below this cannot pass any threshold
};

class ClassifierFilter final : public Stage {
 public:
  explicit ClassifierFilter(StageKeys& keys) {
    const std::string path = keys.string("model", "");
    if (path.empty()) fail("{}: model = \"...\" is required (claw curate train-classifier writes one)", keys.where());
    model_ = load_model(path, keys.where());
    label_ = keys.string("label", "hq");
    threshold_ = keys.number("threshold", 0.5);
    keys.check_all_read();
    label_id_ = model_->label_id("__label__" + label_);
    if (label_id_ < 0) fail("{}: label = \"{}\" is not a label of {}", keys.where(), label_, path);
    score_key_ = label_ + "_score";
  }
  std::string_view kind() const override { return "classifier"; }

  std::string_view process(Document& doc, StageCounters&) const override {
    double p = 0;
    for (const auto& [prob, label] : predict_all(*model_, doc.text))
      if (label == label_id_) p = prob;
    doc.scores[score_key_] = p;
    return p >= threshold_ ? "" : "classifier_score";
  }

 private:
  std::shared_ptr<const FastTextModel> model_;
  std::string label_, score_key_;
  int32_t label_id_;
  double threshold_;
};

}  // namespace

std::unique_ptr<Stage> make_language_filter(StageKeys& keys) { return std::make_unique<LanguageFilter>(keys); }
std::unique_ptr<Stage> make_classifier_filter(StageKeys& keys) { return std::make_unique<ClassifierFilter>(keys); }

ClassifierReport train_fasttext_classifier(const ClassifierTraining& t) {
  if (t.output.empty()) fail("--output is required: where to write the fastText model (.bin)");
  if (t.validation_fraction < 0 || t.validation_fraction >= 1)
    fail("--validation-fraction {} is invalid; it must be in [0, 1)", t.validation_fraction);
  // fastText trains from a file of "__label__X text" lines.
  const std::string text = read_file(t.input, "--input");
  const std::string train_path = t.output + ".train.tmp";
  std::ofstream train(train_path);
  std::vector<std::pair<std::string, std::string>> held_out;  // (label, text)
  ClassifierReport r;
  std::mt19937_64 pick(t.seed);  // which lines are held out: a seeded draw, not a stride (labels may alternate)
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for_each_line(text, [&](int64_t line_no, std::string_view line) {
    if (line.find_first_not_of(" \t") == std::string_view::npos) return;
    nlohmann::json j;
    if (std::string e = parse_json_object(line, j); !e.empty()) fail("{}:{}: {}", t.input, line_no, e);
    auto tx = j.find(t.text_key), lb = j.find(t.label_key);
    if (tx == j.end() || !tx->is_string())
      fail("{}:{}: no string field \"{}\" (set --text-key)", t.input, line_no, t.text_key);
    if (lb == j.end() || !(lb->is_string() || lb->is_number()))
      fail("{}:{}: no label field \"{}\" (set --label-key)", t.input, line_no, t.label_key);
    std::string label = lb->is_string() ? lb->get<std::string>() : lb->dump();
    if (label.empty() || label.find_first_of(" \t\n") != std::string::npos)
      fail("{}:{}: label \"{}\" must be one word", t.input, line_no, label);
    std::string body = tx->get<std::string>();
    std::replace(body.begin(), body.end(), '\n', ' ');
    if (uniform(pick) < t.validation_fraction) {
      held_out.emplace_back(label, std::move(body));
    } else {
      train << "__label__" << label << ' ' << body << '\n';
      ++r.train_examples;
    }
  });
  train.close();
  if (r.train_examples == 0) {
    fs::remove(train_path);
    fail("{}: no training examples", t.input);
  }
  fasttext::Args args;
  args.input = train_path;
  args.output = t.output;
  args.model = fasttext::model_name::sup;
  args.loss = fasttext::loss_name::softmax;
  args.epoch = t.epochs;
  args.lr = t.lr;
  args.wordNgrams = t.word_ngrams;
  args.dim = t.dim;
  args.minCount = t.min_count;
  args.thread = t.threads;
  args.seed = static_cast<int>(t.seed);
  args.verbose = 0;
  fasttext::FastText ft;
  try {
    ft.train(args);
  } catch (const std::exception& e) {
    fs::remove(train_path);
    fail("training the classifier on {} failed: {}", t.input, e.what());
  }
  fs::remove(train_path);
  const std::string tmp = t.output + ".tmp";
  ft.saveModel(tmp);
  fs::rename(tmp, t.output);

  for (int32_t i = 0; i < ft.getDictionary()->nlabels(); ++i) r.labels.push_back(strip_label(ft.getDictionary()->getLabel(i)));
  int64_t right = 0;
  for (const auto& [label, body] : held_out) {
    const auto preds = predict_line(ft, body);
    right += !preds.empty() && strip_label(preds[0].second) == label;
  }
  r.validation_examples = static_cast<int64_t>(held_out.size());
  r.validation_accuracy = held_out.empty() ? 0 : static_cast<double>(right) / held_out.size();
  return r;
}

}  // namespace claw::curate
