// Trainer settings (Megatron flag names in the comments).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "claw/optim/loss_scaler.h"
#include <vector>

#include <nlohmann/json.hpp>

#include "claw/comm/watchdog.h"
#include "claw/core/fault_injector.h"
#include "claw/data/packing.h"
#include "claw/data/tokenizer_factory.h"
#include "claw/model/config.h"
#include "claw/runtime/config.h"
#include "claw/train/sdc.h"

namespace claw::train {

enum class DpoLossType { sigmoid, ipo, hinge };

// Preference optimization (train/dpo.h).
struct DpoConfig {
  bool enabled = false;               // --dpo: the data are claw preprocess --dpo pairs
  double beta = 0.1;                  // --dpo-beta
  std::string loss_type = "sigmoid";  // --dpo-loss-type sigmoid|ipo|hinge
  DpoLossType type() const;           // throws naming --dpo-loss-type
};

struct TrainConfig {
  bool fp16 = false;                      // --fp16: f16 GEMM operands and loss scaling
  optim::LossScaleConfig loss_scaling;    // --loss-scale, --initial-loss-scale, ...
  int64_t micro_batch_size = 8;   // --micro-batch-size: sequences per forward/backward
  int64_t global_batch_size = 0;  // --global-batch-size: sequences per optimizer step (0: = micro batch)
  int64_t seq_length = 256;       // --seq-length: tokens per sequence
  int64_t train_iters = 200;      // --train-iters: optimizer steps
  int64_t eval_interval = 50;     // --eval-interval: steps between validation runs (0: never)
  int64_t eval_iters = 10;        // --eval-iters: validation micro-batches per run
  int64_t log_interval = 1;       // --log-interval: steps between progress lines
  int64_t straggler_report_interval = 10;  // --straggler-report-interval: steps between straggler reports (0: off)
  double straggler_threshold = 0.75;       // --straggler-threshold: a rank below this speed relative to the median is named
  // Hang detection per section (--hang-timeout-*), and the heartbeats of a
  // `claw launch` supervisor (CLAW_SUPERVISOR, read by the train command).
  comm::WatchdogOptions watchdog;
  // Silent data corruption: re-running suspect steps, the replicas' weight hash (train/sdc.h).
  SdcConfig sdc;
  uint64_t seed = 1234;           // --seed: initialisation, data order, dropout
  int num_threads = 0;            // --num-threads: CPU threads (0: all this process may use)
  std::string device = "cpu";     // --device: cpu, or cuda[:N] (the CUDA backend)
  bool allow_tf32 = false;        // --allow-tf32: fp32 GEMMs on TF32 tensor cores (CUDA; ~1e-3 relative)
  std::string metrics_file;       // --metrics-file: JSONL, one object per step
  std::string tensorboard_dir;    // --tensorboard-dir: TensorBoard event files of the same scalars
  double peak_gflops = 0;         // --peak-gflops: MFU denominator per rank (0: the calibrated GEMM peak)
  std::string peak_cache_dir;     // --peak-cache-dir: where the calibrated peak is cached ("": ~/.cache/claw)
  std::string recompute_granularity;   // --recompute-granularity: "" (off) or full
  std::string recompute_method = "block";  // --recompute-method: block (the first N layers)
  int64_t recompute_num_layers = 0;    // --recompute-num-layers: N (0: all layers, with full)
  // --freeze: glob patterns over canonical parameter names ('layers.*.attention.*');
  // matching parameters keep their values and get no gradients or optimizer state.
  std::vector<std::string> freeze;
  DpoConfig dpo;

  // Micro-batches per step on each of `dp` data-parallel ranks.
  int64_t grad_accumulation_steps(int dp = 1) const { return global_batch_size / (micro_batch_size * dp); }
  // Blocks whose activations are recomputed, for a model of num_layers.
  int64_t recomputed_layers(int64_t num_layers) const;
  // Fills defaults that depend on other fields; throws naming the flag.
  // `dp`: the data-parallel size the global batch is split over.
  void resolve_and_validate(int dp = 1);
};

struct DataConfig {
  std::vector<std::string> data_path;  // --data-path: PREFIX, or W1 PREFIX1 W2 PREFIX2 ... (empty: built-in corpus)
  std::string split = "969,30,1";      // --split: train,valid,test weights over documents
  std::string data_dir;                // --data-dir: where the built-in corpus lives (empty: default)
  std::string data_cache_path;         // --data-cache-path: sample index cache ("": next to the data)
  data::TokenizerOptions tokenizer;    // --tokenizer-type etc. (eod id; vocabulary check); default: GPT-2 BPE
  data::PackingOptions packing;        // --reset-position-ids, --reset-attention-mask, --eod-mask-loss
  // --sft: the data are `claw preprocess --sft` conversations, packed whole
  // with the loss on their learned tokens only (data/sft_dataset.h); turns
  // on --reset-position-ids and --reset-attention-mask.
  bool sft = false;
};

// Checkpointing (Megatron's flags; src/claw/ckpt, docs/checkpoints.md).
struct CheckpointConfig {
  std::string save;            // --save: directory of checkpoints ("": none)
  int64_t save_interval = 0;   // --save-interval: steps between saves (0: only at the end)
  bool async_save = false;     // --async-save: write in the background; the step waits only for the snapshot
  int keep_last = 0;           // --keep-last-checkpoints: keep the newest K (0: all)
  std::string load;            // --load: directory to resume from (its latest complete checkpoint)
  int64_t ckpt_step = -1;      // --ckpt-step: load this iteration instead of the latest
  bool load_fallback = false;  // --load-fallback: a corrupt checkpoint falls back to the previous complete one
  bool no_load_optim = false;  // --no-load-optim: parameters only; fresh optimizer state and step count
  // --finetune (Megatron's): --load's parameters only, and the run starts at
  // iteration 0 (fresh optimizer, schedule, step count and data order).
  bool finetune = false;
  // --load-hf DIR: start from a Hugging Face directory (its config.json
  // sets the model; imported into a claw checkpoint and loaded as
  // --finetune; cli/train_command.cc).
  std::string load_hf;
  int64_t exit_interval = 0;   // --exit-interval: stop (saving first) when the step is a multiple of this
  std::shared_ptr<const FaultInjector> faults;  // tests only (--test-fault crash-in-save:ITER); null: none
  // Recorded in the checkpoint: the model's flags (what `claw ckpt` and
  // `claw eval` rebuild the model from) and every resolved flag.
  nlohmann::json model_flags, args;
  // Throws naming the flag: negative intervals, options without the --save/--load they need.
  void validate() const;
};

// The parallel layout: the runtime's (runtime/config.h), which validates it.
using ParallelConfig = runtime::ParallelConfig;

// What the runtime is built from: the model, the layout and the batch's
// shape (train's batch resolved: TrainConfig::resolve_and_validate).
runtime::RuntimeConfig runtime_config(const model::ModelConfig& model, const TrainConfig& train,
                                      const ParallelConfig& parallel, bool training);

}  // namespace claw::train
