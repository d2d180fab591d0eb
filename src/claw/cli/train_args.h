// What `claw train`, `claw eval` and `claw rl` share: the training
// configuration their flags write, the flag table, and joining the job.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "claw/cli/flags.h"
#include "claw/comm/world.h"
#include "claw/core/fault_injector.h"
#include "claw/model/config.h"
#include "claw/optim/adamw.h"
#include "claw/optim/lr_schedule.h"
#include "claw/train/config.h"

namespace claw::cli {

struct TrainArgs {
  model::ModelConfig model = model::model_preset("gpt2-tiny");
  train::TrainConfig train;
  optim::LrSchedule lr;
  optim::AdamWConfig adam;
  train::DataConfig data;
  train::ParallelConfig parallel;
  train::CheckpointConfig ckpt;
  std::string parallel_mode = "manual";  // --parallel manual|auto
  std::shared_ptr<const FaultInjector> faults;  // --test-fault (hidden; the fault tests only)
  TrainArgs() {
    // The default job: a small model that visibly learns the built-in corpus in a few minutes.
    lr.max_lr = 1e-3;
    lr.min_lr = 1e-4;
    lr.warmup_iters = 10;
    adam.beta2 = 0.95;
    adam.weight_decay = 0.1;
  }
};

// `claw train`'s flags (model, training, optimizer, data, layout, checkpoints).
const std::vector<Flag<TrainArgs>>& train_flags();
// The "resolved config" printout of every flag's value.
std::string resolved_config(const TrainArgs& a);
// Joins the job (mpirun/srun ranks, or one process) with --distributed-
// timeout-minutes as every wait's deadline and sets up rank-aware logging.
std::unique_ptr<comm::World> join_job(const TrainArgs& args);
// join_job(), then lets --parallel auto pick the layout, and resolves the batch over the
// data-parallel ranks.
std::unique_ptr<comm::World> launch(TrainArgs& args, const FlagBinder<TrainArgs>& given);
// Whether the user set a flag (on the command line or in a --config file).
using GivenFlags = std::function<bool(const std::string&)>;
// The model of a run that starts from weights: --load-hf DIR's config.json,
// or the recorded model of the checkpoint --load names, when there is one
// yet. Its architecture is the weights' and a flag or --model preset
// (`preset`, if given) that disagrees is an error naming both values; the
// other model flags keep their given values, else take the weights'
// (model/config_flags.h: model::model_over_weights). --load-hf DIR with a
// tokenizer.json also sets the data's tokenizer to it (HFTokenizer) unless
// --tokenizer-type is given.
void use_weights_model(TrainArgs& a, const GivenFlags& given, const std::string& preset);
// --load-hf DIR: rank 0 imports it as a claw checkpoint that every rank
// loads as --finetune.
void import_hf_for_finetune(TrainArgs& a, comm::World& world);

}  // namespace claw::cli
