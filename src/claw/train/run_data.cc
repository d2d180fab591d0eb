#include "claw/train/run_data.h"

#include <algorithm>

#include <fmt/ranges.h>

#include "claw/core/error.h"
#include "claw/core/log.h"
#include "claw/data/blended_dataset.h"
#include "claw/data/builtin_corpus.h"
#include "claw/data/dpo_dataset.h"
#include "claw/data/gpt_dataset.h"

namespace claw::train {

data::TokenizerOptions data_tokenizer(const DataConfig& data) {
  data::TokenizerOptions tok = data.tokenizer;
  if (tok.type == "GPT2BPETokenizer" && tok.vocab_file.empty() && tok.merge_file.empty()) {
    const std::string dir = data.data_dir.empty() ? data::default_data_dir() : data.data_dir;
    tok.vocab_file = dir + "/gpt2/encoder.json";
    tok.merge_file = dir + "/gpt2/vocab.bpe";
  }
  return tok;
}

RunData open_run_data(const DataConfig& data_cfg, const TrainConfig& cfg, const model::ModelConfig& model,
                      comm::ParallelState& ps, int num_threads) {
  RunData out;
  comm::Group& everyone = ps.world();
  comm::Group& dp_group = ps.dp();
  const bool first = everyone.rank() == 0;
  if (!first) everyone.barrier();
  const std::string data_dir = data_cfg.data_dir.empty() ? data::default_data_dir() : data_cfg.data_dir;
  std::vector<std::string> words = data_cfg.data_path;
  if (words.empty()) words = {data::ensure_builtin_corpus(data_dir, num_threads)};
  const data::BlendSpec blend = data::parse_data_path(words);

  // Samples each split must provide (Megatron: train_iters x global batch;
  // validation: one run per --eval-interval plus the final one). A corpus
  // too small for a test split still trains.
  // The tokenizer the data was made with: its eod marks document boundaries
  // (and pads SFT samples) and its vocabulary must fit the model's (checked
  // after the data, whose errors are more specific: they name a file).
  const auto tokenizer = data::make_tokenizer(data_tokenizer(data_cfg));
  const int64_t GB = cfg.global_batch_size;
  data::GptDatasetOptions opts{.split = data_cfg.split,
                                .seq_length = cfg.seq_length,
                                .vocab_size = model.vocab_size,
                                .seed = cfg.seed,
                                .num_samples = std::max<int64_t>(1, cfg.train_iters) * GB,
                                .cache_dir = data_cfg.data_cache_path,
                                .sft = data_cfg.sft,
                                .pad_token = tokenizer->eod()};
  if (data_cfg.sft && data_cfg.data_path.empty())
    fail("--sft needs --data-path: SFT data made with claw preprocess --sft (the built-in corpus is plain text)");
  const auto weights = data::parse_split(data_cfg.split);
  if (weights[0] <= 0) fail("--split {}: the training split has weight 0; give it a positive weight (e.g. 969,30,1)",
                            data_cfg.split);
  if (cfg.dpo.enabled) {
    if (data_cfg.data_path.empty() || blend.prefixes.size() != 1)
      fail("--dpo needs --data-path PREFIX: one dataset made with claw preprocess --dpo (not the built-in corpus, "
           "not a blend)");
    if (data_cfg.sft) fail("--sft and --dpo train on different data; give one");
  }
  // A DPO dataset pairs its samples (chosen, rejected); others are read as
  // their kind says (plain, SFT, a blend).
  auto source = [&](data::Split split) -> std::unique_ptr<data::SampleSource> {
    if (cfg.dpo.enabled) return std::make_unique<data::DpoDataset>(blend.prefixes[0], split, opts, tokenizer->eod());
    return data::build_split_source(blend, split, opts);
  };
  out.train = source(data::Split::train);
  if (cfg.eval_interval > 0 && cfg.eval_iters > 0 && weights[1] > 0) {
    opts.num_samples = (cfg.train_iters / cfg.eval_interval + 1) * cfg.eval_iters * GB;
    out.valid = source(data::Split::valid);
  }
  if (tokenizer->vocab_size() > model.vocab_size)
    fail("--vocab-size {} is smaller than the vocabulary of the tokenizer ({}, {} ids); use --vocab-size {} or more",
         model.vocab_size, tokenizer->name(), tokenizer->vocab_size(), tokenizer->vocab_size());
  data::PackingOptions packing = data_cfg.packing;
  packing.eod = tokenizer->eod();
  if (data_cfg.sft) packing.reset_position_ids = packing.reset_attention_mask = true;  // a conversation sees itself
  if (first) everyone.barrier();

  log::info("data", "{}: {} training samples of {} tokens{}{}", fmt::join(words, " "), out.train->num_samples(),
            cfg.seq_length,
            out.valid ? fmt::format(", {} validation samples", out.valid->num_samples()) : "",
            packing.any() ? fmt::format(" (packing: reset-position-ids={} reset-attention-mask={} eod-mask-loss={}, "
                                        "eod {})",
                                        packing.reset_position_ids, packing.reset_attention_mask,
                                        packing.eod_mask_loss, packing.eod)
                          : "");
  const comm::Group& cp = ps.cp();
  const int64_t cp_shift = cp.faults() ? cp.faults()->cp_chunk_shift(cp.world_ranks()[cp.rank()]) : 0;
  if (cp_shift != 0 && cp.size() > 1)
    log::warn("fault", "--test-fault shift-cp-chunk: this rank's second context-parallel chunk starts {} token(s) late",
              cp_shift);
  out.batch = std::make_unique<GlobalBatch>(cfg.grad_accumulation_steps(dp_group.size()), cfg.micro_batch_size,
                                            cfg.seq_length, packing, dp_group.size(), dp_group.rank(), cp.size(),
                                            cp.rank(), cp_shift);
  return out;
}

}  // namespace claw::train
