#include "claw/cli/curate_command.h"

#include <algorithm>
#include <cstdlib>
#include <memory>

#include <fmt/format.h>

#include "claw/cli/flags.h"
#include "claw/cli/progress.h"
#include "claw/core/error.h"
#include "claw/curate/fasttext_stages.h"
#include "claw/curate/pipeline.h"
#include "claw/kernels/cpu/blas.h"

namespace claw::cli {
namespace {

struct CurateArgs {
  std::string config;
  curate::CurateOptions options;
  int64_t log_interval = 100000;
  CurateArgs() { options.threads = kernels::default_num_threads(); }
};

using F = Flag<CurateArgs>;

const std::vector<F>& curate_flags() {
  using A = CurateArgs;
  static const std::vector<F> flags = {
      string_flag<A>("config", "the pipeline: a TOML file with [input], [output] and [[stage]] tables",
                     [](A& a) -> auto& { return a.config; }),
      int_flag<A>("threads", "worker threads (default: the CPUs this process may use)",
                  [](A& a) -> auto& { return a.options.threads; }),
      switch_flag<A>("skip-bad-lines",
                     "count and drop lines that are not UTF-8 JSON objects with a text field, and empty files "
                     "(default: stop at the first)",
                     [](A& a) -> auto& { return a.options.skip_bad_lines; }),
      int_flag<A>("num-tasks", "split the input shards between this many tasks (default: $SLURM_ARRAY_TASK_COUNT or 1)",
                  [](A& a) -> auto& { return a.options.num_tasks; }),
      int_flag<A>("task-id", "this task's number in [0, --num-tasks) (default: $SLURM_ARRAY_TASK_ID or 0)",
                  [](A& a) -> auto& { return a.options.task_id; }),
      int_flag<A>("log-interval", "documents between progress lines when stderr is not a terminal",
                  [](A& a) -> auto& { return a.log_interval; }),
  };
  return flags;
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? static_cast<int>(parse_int(name, v)) : fallback;
}

struct CurateCommand {
  std::unique_ptr<FlagBinder<CurateArgs>> binder;

  void run() {
    CurateArgs args;
    binder->apply(args);
    if (args.config.empty()) fail("--config is required: the pipeline's TOML file");
    if (args.log_interval < 1) fail("--log-interval {} is invalid; it must be at least 1", args.log_interval);
    curate::CurateOptions& o = args.options;
    if (!binder->given("num-tasks")) o.num_tasks = env_int("SLURM_ARRAY_TASK_COUNT", 1);
    if (!binder->given("task-id")) o.task_id = env_int("SLURM_ARRAY_TASK_ID", 0);
    const curate::CurateConfig config = curate::load_curate_config(args.config);

    ProgressLine printer("curate", args.log_interval);
    InterruptGuard interrupts;
    o.progress = [&](double f, int64_t docs, uint64_t bytes, double s) {
      InterruptGuard::check("finished shards are kept; run the same command again to resume");
      s = std::max(s, 1e-9);
      printer.update(f, docs, s, fmt::format("{} documents, {:.0f} docs/s, {:.1f} MB/s", docs, docs / s, bytes / 1e6 / s));
    };
    curate::CurateStats st;
    try {
      st = curate::run_curate(config, o);
    } catch (...) {
      printer.finish();
      throw;
    }
    printer.finish();

    const double s = std::max(st.seconds, 1e-9);
    fmt::print("curate: {} shards ({} resumed), {} documents in -> {} out ({:.1f}% kept), {:.1f} MB -> {:.1f} MB in "
               "{:.2f} s: {:.0f} docs/s, {:.1f} MB/s on {} threads; {} bad lines skipped, {} blank, {} empty files\n",
               st.shards, st.shards_resumed, st.docs_in, st.docs_out,
               st.docs_in ? 100.0 * st.docs_out / st.docs_in : 100.0, st.bytes_in / 1e6, st.bytes_out / 1e6,
               st.seconds, st.docs_in / s, st.bytes_in / 1e6 / s, o.threads, st.bad_lines, st.blank_lines,
               st.empty_files);
    fmt::print("{:<3} {:<18} {:>10} {:>10} {:>10} {:>10} {:>9} {:>11}  {}\n", "#", "stage", "docs in", "docs out",
               "MB in", "MB out", "seconds", "docs/s/thr", "counts");
    for (size_t i = 0; i < st.stages.size(); ++i) {
      const curate::StageCounters& c = st.stages[i];
      std::string counts;
      for (const auto& [k, v] : c.counts) counts += fmt::format("{}{}={}", counts.empty() ? "" : " ", k, v);
      fmt::print("{:<3} {:<18} {:>10} {:>10} {:>10.2f} {:>10.2f} {:>9.2f} {:>11.0f}  {}\n", i + 1, st.kinds[i],
                 c.docs_in, c.docs_out, c.bytes_in / 1e6, c.bytes_out / 1e6, c.seconds,
                 c.seconds > 0 ? c.docs_in / c.seconds : 0.0, counts);
    }
    fmt::print("wrote {}/shard_*.jsonl{} (kept), {}/removed/ (removed, with stage and reason), {}/stats/\n",
               config.output_dir, config.compress ? ".zst" : "", config.output_dir, config.output_dir);
    if (!st.megatron.empty()) {
      std::string data_path;
      int64_t tokens = 0;
      for (const auto& [prefix, n] : st.megatron) {
        data_path += fmt::format(" {} {}", n, prefix);
        tokens += n;
      }
      fmt::print("wrote {} Megatron datasets ({} tokens); train on them with (weights: their tokens)\n"
                 "  --data-path{}\n", st.megatron.size(), tokens, data_path);
    }
  }
};

using T = Flag<curate::ClassifierTraining>;

const std::vector<T>& train_flags() {
  using A = curate::ClassifierTraining;
  static const std::vector<T> flags = {
      string_flag<A>("input", "labelled examples: JSONL with a text and a label field",
                     [](A& a) -> auto& { return a.input; }),
      string_flag<A>("output", "the fastText model to write (.bin), for a [[stage]] kind = \"classifier\"",
                     [](A& a) -> auto& { return a.output; }),
      string_flag<A>("text-key", "the text field", [](A& a) -> auto& { return a.text_key; }),
      string_flag<A>("label-key", "the label field (one word: \"hq\", \"lq\", ...)",
                     [](A& a) -> auto& { return a.label_key; }),
      int_flag<A>("epochs", "passes over the examples", [](A& a) -> auto& { return a.epochs; }),
      double_flag<A>("lr", "fastText's learning rate", [](A& a) -> auto& { return a.lr; }),
      int_flag<A>("word-ngrams", "word n-grams as features", [](A& a) -> auto& { return a.word_ngrams; }),
      int_flag<A>("dim", "embedding size", [](A& a) -> auto& { return a.dim; }),
      int_flag<A>("min-count", "words seen fewer times are dropped", [](A& a) -> auto& { return a.min_count; }),
      int_flag<A>("threads", "training threads (1: the same model every run)", [](A& a) -> auto& { return a.threads; }),
      double_flag<A>("validation-fraction", "lines held out for the accuracy report",
                     [](A& a) -> auto& { return a.validation_fraction; }),
  };
  return flags;
}

struct TrainClassifierCommand {
  std::unique_ptr<FlagBinder<curate::ClassifierTraining>> binder;

  void run() {
    curate::ClassifierTraining t;
    binder->apply(t);
    if (t.input.empty()) fail("--input is required: JSONL lines with \"{}\" and \"{}\"", t.text_key, t.label_key);
    const curate::ClassifierReport r = curate::train_fasttext_classifier(t);
    fmt::print("train-classifier: {} examples, labels {}; held-out accuracy {:.3f} on {} examples; wrote {}\n",
               r.train_examples, fmt::join(r.labels, ", "), r.validation_accuracy, r.validation_examples, t.output);
  }
};

}  // namespace

void add_curate_command(CLI::App& app) {
  auto cmd = std::make_shared<CurateCommand>();
  CLI::App* sub = app.add_subcommand(
      "curate", "clean, filter, deduplicate and redact a corpus through a pipeline of stages (a TOML file)");
  sub->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  static const CurateArgs defaults;
  cmd->binder = std::make_unique<FlagBinder<CurateArgs>>(*sub, curate_flags(), defaults);

  auto train = std::make_shared<TrainClassifierCommand>();
  CLI::App* tsub = sub->add_subcommand(
      "train-classifier", "train a fastText quality classifier from labelled JSONL, for a classifier stage");
  tsub->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  static const curate::ClassifierTraining train_defaults;
  train->binder =
      std::make_unique<FlagBinder<curate::ClassifierTraining>>(*tsub, train_flags(), train_defaults);
  tsub->callback([train] { train->run(); });
  sub->callback([cmd, tsub] {
    if (!tsub->parsed()) cmd->run();
  });
}

}  // namespace claw::cli
