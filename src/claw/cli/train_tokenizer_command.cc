#include "claw/cli/train_tokenizer_command.h"

#include <memory>

#include "claw/cli/flags.h"
#include "claw/core/error.h"
#include "claw/data/sentencepiece_trainer.h"
#include "claw/kernels/cpu/blas.h"

namespace claw::cli {
namespace {

struct TrainTokenizerArgs {
  data::SentencePieceTrainOptions options;
  TrainTokenizerArgs() { options.num_threads = kernels::default_num_threads(); }
};

using F = Flag<TrainTokenizerArgs>;

const std::vector<F>& train_tokenizer_flags() {
  using A = TrainTokenizerArgs;
  static const std::vector<F> flags = {
      words_flag<A>("input", "text files (one sentence per line) or JSONL files (*.jsonl, *.json)",
                    [](A& a) -> auto& { return a.options.inputs; }),
      words_flag<A>("json-keys", "string fields of JSONL lines to train on (default: text)",
                    [](A& a) -> auto& { return a.options.json_keys; }),
      int_flag<A>("vocab-size", "pieces in the model, special and byte pieces included",
                  [](A& a) -> auto& { return a.options.vocab_size; }),
      F{"model-type", "bpe or unigram", false,
        [](A& a, const std::string& v) {
          if (v != "bpe" && v != "unigram") fail("--model-type '{}' is not one of: bpe, unigram", v);
          a.options.model_type = v;
        },
        [](const A& a) { return a.options.model_type; }, "{bpe,unigram}"},
      string_flag<A>("output-prefix", "writes <prefix>.model and <prefix>.vocab",
                     [](A& a) -> auto& { return a.options.output_prefix; }),
      double_flag<A>("character-coverage", "share of characters that get their own pieces",
                     [](A& a) -> auto& { return a.options.character_coverage; }),
      switch_flag<A>("no-byte-fallback", "rare characters become <unk> instead of UTF-8 byte pieces",
                     [](A& a) -> auto& { return a.options.byte_fallback; }, false),
      int_flag<A>("max-sentences", "train on a random sample of this many sentences (0: all)",
                  [](A& a) -> auto& { return a.options.max_sentences; }),
      words_flag<A>("control-symbols", "special tokens, e.g. a chat template's <|im_start|> <|im_end|> (ids 3, 4, ...)",
                    [](A& a) -> auto& { return a.options.control_symbols; }),
      int_flag<A>("seed", "seed of the sentence sample", [](A& a) -> auto& { return a.options.seed; }),
      int_flag<A>("num-threads", "training threads (default: the CPUs this process may use)",
                  [](A& a) -> auto& { return a.options.num_threads; }),
  };
  return flags;
}

struct TrainTokenizerCommand {
  std::unique_ptr<FlagBinder<TrainTokenizerArgs>> binder;

  void run() {
    TrainTokenizerArgs a;
    binder->apply(a);
    data::train_sentencepiece(a.options);
  }
};

}  // namespace

void add_train_tokenizer_command(CLI::App& app) {
  auto cmd = std::make_shared<TrainTokenizerCommand>();
  CLI::App* sub = app.add_subcommand("train-tokenizer", "train a SentencePiece tokenizer (BPE or unigram) on a corpus");
  sub->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  static const TrainTokenizerArgs defaults;
  cmd->binder = std::make_unique<FlagBinder<TrainTokenizerArgs>>(*sub, train_tokenizer_flags(), defaults);
  sub->callback([cmd] { cmd->run(); });
}

}  // namespace claw::cli
