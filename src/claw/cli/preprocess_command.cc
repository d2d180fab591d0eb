#include "claw/cli/preprocess_command.h"


#include <algorithm>
#include <cstdio>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "claw/cli/flags.h"
#include "claw/cli/progress.h"
#include "claw/core/error.h"
#include "claw/core/log.h"
#include "claw/data/builtin_corpus.h"
#include "claw/data/preprocess.h"
#include "claw/data/sft.h"
#include "claw/data/tokenizer_factory.h"
#include "claw/kernels/cpu/blas.h"

namespace claw::cli {
namespace {

struct PreprocessArgs {
  data::PreprocessOptions options;
  data::TokenizerOptions tokenizer;
  std::string dtype = "auto";
  int64_t log_interval = 1000;
  bool split_sentences = false;
  bool keep_newlines = false;
  PreprocessArgs() { options.workers = kernels::default_num_threads(); }
};

using F = Flag<PreprocessArgs>;

// --dtype takes Megatron's (numpy's) names of the integer dtypes.
std::optional<data::IndexDType> parse_dtype(const std::string& v) {
  if (v == "auto") return std::nullopt;
  for (uint8_t code = 1; code <= 8; ++code) {
    const auto t = static_cast<data::IndexDType>(code);
    if (data::index_dtype_is_integer(t) && v == data::index_dtype_numpy_name(t)) return t;
  }
  fail("--dtype '{}' is not one of: auto, uint8, int8, int16, uint16, int32, int64", v);
}

const std::vector<F>& preprocess_flags() {
  using A = PreprocessArgs;
  static const std::vector<F> flags = {
      string_flag<A>("input", "JSONL corpus, one JSON object per line; zstd-compressed input is detected",
                     [](A& a) -> auto& { return a.options.input; }),
      words_flag<A>("json-keys", "keys whose text to tokenize, one output dataset per key (default: text)",
                    [](A& a) -> auto& { return a.options.json_keys; }),
      switch_flag<A>("split-sentences", "not supported (give a JSON list of sentences instead)",
                     [](A& a) -> auto& { return a.split_sentences; }),
      switch_flag<A>("keep-newlines", "not supported (only meaningful with --split-sentences)",
                     [](A& a) -> auto& { return a.keep_newlines; }),
      string_flag<A>("tokenizer-type", fmt::format("one of: {}", fmt::join(data::tokenizer_types(), ", ")),
                     [](A& a) -> auto& { return a.tokenizer.type; }),
      string_flag<A>("vocab-file", "GPT-2 encoder.json (default with GPT2BPETokenizer: the built-in one)",
                     [](A& a) -> auto& { return a.tokenizer.vocab_file; }),
      string_flag<A>("merge-file", "GPT-2 vocab.bpe (default with GPT2BPETokenizer: the built-in one)",
                     [](A& a) -> auto& { return a.tokenizer.merge_file; }),
      string_flag<A>("tokenizer-model", "tiktoken rank file, SentencePiece .model, or tokenizer.json (or its model directory)",
                     [](A& a) -> auto& { return a.tokenizer.model_file; }),
      string_flag<A>("tiktoken-pattern", "pre-tokenizer of a tiktoken rank file (default: from its name)",
                     [](A& a) -> auto& { return a.tokenizer.tiktoken_pattern; }),
      switch_flag<A>("append-eod", "end every document with the tokenizer's end-of-document token",
                     [](A& a) -> auto& { return a.options.append_eod; }),
      switch_flag<A>("sft",
                     "supervised fine-tuning data: \"messages\" conversations or \"prompt\"/\"completion\" "
                     "lines; writes <prefix>_sft_document and its loss mask <prefix>_sft_document_loss_mask",
                     [](A& a) -> auto& { return a.options.sft; }),
      switch_flag<A>("dpo",
                     "preference pairs for DPO: \"prompt\", \"chosen\", \"rejected\" (text or messages) lines; "
                     "writes <prefix>_dpo_document (chosen then rejected per document) and its loss mask",
                     [](A& a) -> auto& { return a.options.dpo; }),
      string_flag<A>("chat-template",
                     "with --sft or --dpo: llama3, chatml, plain or a Jinja template FILE.jinja (default: from the tokenizer's "
                     "vocabulary)",
                     [](A& a) -> auto& { return a.options.chat_template; }),
      string_flag<A>("output-prefix", "writes <prefix>_<key>_document.bin/.idx per key",
                     [](A& a) -> auto& { return a.options.output_prefix; }),
      int_flag<A>("workers", "tokenizing threads (default: the CPUs this process may use)",
                  [](A& a) -> auto& { return a.options.workers; }),
      int_flag<A>("log-interval", "documents between progress lines when stderr is not a terminal",
                  [](A& a) -> auto& { return a.log_interval; }),
      switch_flag<A>("skip-bad-lines",
                     "skip lines that are not valid UTF-8 JSON objects with the keys (default: stop at the first)",
                     [](A& a) -> auto& { return a.options.skip_bad_lines; }),
      F{"dtype", "token dtype of the output (auto: uint16 if the vocabulary has < 65500 ids, else int32)", false,
        [](A& a, const std::string& v) {
          parse_dtype(v);
          a.dtype = v;
        },
        [](const A& a) { return a.dtype; }, "{auto,uint8,int8,int16,uint16,int32,int64}"},
  };
  return flags;
}

double fraction(const data::PreprocessProgress& p) {
  return p.input_size > 0 ? std::min(1.0, static_cast<double>(p.input_bytes) / p.input_size) : 1.0;
}

std::string rates(const data::PreprocessProgress& p) {
  const double s = std::max(p.seconds, 1e-9);
  return fmt::format("{} documents, {:.0f} docs/s, {:.1f} MB/s, {:.0f} tokens/s", p.documents, p.documents / s,
                     p.text_bytes / 1e6 / s, p.tokens / s);
}

struct PreprocessCommand {
  std::unique_ptr<FlagBinder<PreprocessArgs>> binder;

  void run() {
    PreprocessArgs args;
    binder->apply(args);
    if (args.split_sentences)
      fail("--split-sentences is not supported: claw has no NLTK punkt splitter; split the text yourself and give "
           "each document as a JSON list of sentences (each becomes a sequence, as after Megatron's splitting)");
    if (args.keep_newlines) fail("--keep-newlines only applies to --split-sentences, which claw does not support");
    if (args.log_interval < 1) fail("--log-interval {} is invalid; it must be at least 1", args.log_interval);
    args.options.dtype = parse_dtype(args.dtype);
    data::TokenizerOptions tok = args.tokenizer;
    if (tok.type == "GPT2BPETokenizer" && tok.vocab_file.empty() && tok.merge_file.empty()) {
      const std::string dir = data::default_data_dir() + "/gpt2";
      tok.vocab_file = dir + "/encoder.json";
      tok.merge_file = dir + "/vocab.bpe";
    }
    const auto tokenizer = data::make_tokenizer(tok);

    ProgressLine printer("preprocess", args.log_interval);
    InterruptGuard interrupts;
    args.options.progress = [&](const data::PreprocessProgress& p) {
      InterruptGuard::check("nothing was written under the output names");
      printer.update(fraction(p), p.documents, p.seconds, rates(p));
    };
    data::PreprocessResult r;
    try {
      r = data::preprocess(args.options, *tokenizer);
    } catch (...) {
      printer.finish();
      throw;
    }
    printer.finish();

    const data::PreprocessProgress& t = r.totals;
    const double s = std::max(t.seconds, 1e-9);
    fmt::print("preprocess: {} lines -> {} documents ({} bad lines skipped, {} blank) with {} ({} ids), {} tokens, "
               "{:.1f} MB in {:.2f} s: {:.1f} MB/s, {:.0f} docs/s, {:.0f} tokens/s on {} workers\n",
               t.lines, t.documents, t.skipped_lines, t.blank_lines, tokenizer->name(), tokenizer->vocab_size(),
               t.tokens, t.text_bytes / 1e6, t.seconds, t.text_bytes / 1e6 / s, t.documents / s, t.tokens / s,
               args.options.workers);
    for (const std::string& prefix : r.output_prefixes)
      fmt::print("wrote {}.bin and .idx ({})\n", prefix, data::index_dtype_numpy_name(r.dtype));
    if (args.options.chat())
      fmt::print("wrote {}.bin and .idx (uint8 loss mask; chat template {})\n",
                 data::sft_loss_mask_prefix(r.output_prefixes[0]), r.chat_template);
  }
};

}  // namespace

void add_preprocess_command(CLI::App& app) {
  auto cmd = std::make_shared<PreprocessCommand>();
  CLI::App* sub = app.add_subcommand(
      "preprocess", "tokenize a JSONL corpus into Megatron .bin/.idx datasets (Megatron's preprocess_data.py)");
  sub->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  static const PreprocessArgs defaults;
  cmd->binder = std::make_unique<FlagBinder<PreprocessArgs>>(*sub, preprocess_flags(), defaults);
  sub->callback([cmd] { cmd->run(); });
}

}  // namespace claw::cli
