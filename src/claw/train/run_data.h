// The data a run reads: the corpus splits (Megatron indexed datasets or the
// built-in corpus), checked against the tokenizer they were made with, and
// the buffer of this rank's share of each global batch.
#pragma once

#include <memory>

#include "claw/comm/parallel_state.h"
#include "claw/data/sample_source.h"
#include "claw/model/config.h"
#include "claw/train/batch.h"
#include "claw/train/config.h"

namespace claw::train {

struct RunData {
  std::unique_ptr<data::SampleSource> train;
  std::unique_ptr<data::SampleSource> valid;  // null: no validation
  std::unique_ptr<GlobalBatch> batch;
};

// Collective over ps.world(): rank 0 makes what is shared on disk (the
// built-in corpus, the sample index caches) while the others wait, then they
// read what it wrote. Only the splits the run reads are opened (validation
// when train.eval_interval and eval_iters ask for it), each with the samples
// it must provide. Throws naming the file or flag.
// The tokenizer options of `data` with the defaults filled: GPT-2 BPE reads
// <data dir>/gpt2/{encoder.json,vocab.bpe} unless --vocab-file/--merge-file say.
data::TokenizerOptions data_tokenizer(const DataConfig& data);

RunData open_run_data(const DataConfig& data, const TrainConfig& train, const model::ModelConfig& model,
                      comm::ParallelState& ps, int num_threads);

}  // namespace claw::train
