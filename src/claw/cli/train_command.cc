#include "claw/cli/train_command.h"

#include <unistd.h>

#include <algorithm>
#include <set>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include <cmath>

#include <fmt/ranges.h>

#include "claw/ckpt/checkpoint.h"
#include "claw/ckpt/hf.h"
#include "claw/cli/ckpt_command.h"
#include "claw/cli/flags.h"
#include "claw/model/config_flags.h"
#include "claw/cli/train_args.h"
#include "claw/comm/world.h"
#include "claw/core/error.h"
#include "claw/core/exit_signal.h"
#include "claw/core/fault_injector.h"
#include "claw/core/log.h"
#include "claw/model/config.h"
#include "claw/plan/search.h"
#include "claw/optim/adamw.h"
#include "claw/optim/lr_schedule.h"
#include "claw/train/config.h"
#include "claw/train/evaluator.h"
#include "claw/train/trainer.h"

namespace claw::cli {

using F = Flag<TrainArgs>;

namespace {

// Batch, length, iterations, evaluation and logging.
std::vector<F> training_flags() {
  using A = TrainArgs;
  return {
      int_flag<A>("micro-batch-size", "sequences per forward/backward",
                  [](A& a) -> auto& { return a.train.micro_batch_size; }),
      int_flag<A>("global-batch-size", "sequences per optimizer step (0: micro-batch-size)",
                  [](A& a) -> auto& { return a.train.global_batch_size; }),
      int_flag<A>("seq-length", "tokens per sequence", [](A& a) -> auto& { return a.train.seq_length; }),
      int_flag<A>("train-iters", "optimizer steps", [](A& a) -> auto& { return a.train.train_iters; }),
      int_flag<A>("eval-interval", "steps between validation runs (0: never)",
                  [](A& a) -> auto& { return a.train.eval_interval; }),
      int_flag<A>("eval-iters", "validation micro-batches per run", [](A& a) -> auto& { return a.train.eval_iters; }),
      int_flag<A>("log-interval", "steps between progress lines", [](A& a) -> auto& { return a.train.log_interval; }),
  };
}

// Stragglers, silent data corruption and hangs.
std::vector<F> resilience_flags() {
  using A = TrainArgs;
  return {
      int_flag<A>("straggler-report-interval",
                  "steps between comparisons of the ranks' own work (wall time less communication waits); 0: off",
                  [](A& a) -> auto& { return a.train.straggler_report_interval; }),
      double_flag<A>("straggler-threshold", "a rank slower than this fraction of the median rank's speed is named",
                     [](A& a) -> auto& { return a.train.straggler_threshold; }),
      string_flag<A>("rerun-mode",
                     "validate_results: a step whose loss or gradient norm is not finite or spikes is run again and "
                     "a rank whose result does not reproduce is named (silent data corruption); disabled: off",
                     [](A& a) -> auto& { return a.train.sdc.rerun_mode; }),
      double_flag<A>("spiky-loss-factor", "a loss or gradient norm this many times the largest of the last 50 steps is "
                     "a spike (re-run with --rerun-mode validate_results)",
                     [](A& a) -> auto& { return a.train.sdc.spiky_factor; }),
      int_flag<A>("check-weight-hash-across-dp-replicas-interval",
                  "every N steps the data-parallel replicas compare a hash of their parameters and a diverging rank "
                  "is named (0: off)",
                  [](A& a) -> auto& { return a.train.sdc.weight_hash_interval; }),
      switch_flag<A>("no-hang-detection",
                     "do not watch the sections of a step (data, forward_backward, optimizer, evaluation, checkpoint, "
                     "logging) for hangs",
                     [](A& a) -> auto& { return a.train.watchdog.hang_detection; }, false),
      double_flag<A>("hang-timeout-factor",
                     "a section hangs when it runs longer than this multiple of the longest duration seen so far",
                     [](A& a) -> auto& { return a.train.watchdog.factor; }),
      double_flag<A>("hang-timeout-min", "seconds: the floor of a learned section timeout",
                     [](A& a) -> auto& { return a.train.watchdog.min_s; }),
      double_flag<A>("hang-timeout-initial",
                     "seconds: a section's timeout until it has been seen 3 times (the first steps, the first save)",
                     [](A& a) -> auto& { return a.train.watchdog.initial_s; }),
      F{"hang-timeout", "fixed timeouts in seconds instead of learned ones, e.g. 'checkpoint=600,optimizer=30'", false,
        [](A& a, const std::string& v) {
          a.train.watchdog.fixed.clear();
          for (size_t b = 0; b < v.size();) {
            size_t e = v.find(',', b);
            if (e == std::string::npos) e = v.size();
            const std::string item = v.substr(b, e - b);
            const size_t eq = item.find('=');
            if (eq == std::string::npos)
              fail("--hang-timeout: '{}' is not SECTION=SECONDS (e.g. 'checkpoint=600,optimizer=30')", item);
            const comm::Section s = comm::parse_section(item.substr(0, eq), "--hang-timeout");
            a.train.watchdog.fixed[s] = parse_double("hang-timeout", item.substr(eq + 1));
            b = e + 1;
          }
        },
        [](const A& a) {
          std::string out;
          for (const auto& [s, t] : a.train.watchdog.fixed) out += fmt::format("{}{}={:g}", out.empty() ? "" : ",", comm::section_name(s), t);
          return out;
        },
        "SECTION=S[,SECTION=S...]"},
  };
}

// Seed, threads, device, precision, metrics, recomputation, frozen parameters.
std::vector<F> run_flags() {
  using A = TrainArgs;
  return {
      int_flag<A>("seed", "seed for initialisation, data order and dropout",
                  [](A& a) -> auto& { return a.train.seed; }),
      int_flag<A>("num-threads", "CPU threads (0: all this process may use)",
                  [](A& a) -> auto& { return a.train.num_threads; }),
      string_flag<A>("device", "where the model runs: cpu, or cuda[:N] (a build with the CUDA backend)",
                     [](A& a) -> auto& { return a.train.device; }),
      F{"bf16", "the linear layers and the output layer multiply bf16 operands (fp32 accumulation and parameters)", true,
        [](A& a, const std::string& v) {
          if (!parse_bool("bf16", v)) return;
          if (a.train.fp16) fail("--bf16 and --fp16 exclude each other");
          a.model.gemm_dtype = DType::bf16;
        },
        [](const A& a) { return std::string(a.model.gemm_dtype == DType::bf16 ? "true" : "false"); }},
      F{"fp16", "the blocks' linear layers multiply f16 operands (IEEE overflow), with loss scaling", true,
        [](A& a, const std::string& v) {
          if (!parse_bool("fp16", v)) return;
          if (a.model.gemm_dtype == DType::bf16) fail("--bf16 and --fp16 exclude each other");
          a.model.gemm_dtype = DType::f16;
          a.train.fp16 = true;
        },
        [](const A& a) { return std::string(a.train.fp16 ? "true" : "false"); }},
      double_flag<A>("loss-scale", "--fp16: a static loss scale (0: dynamic)",
                     [](A& a) -> auto& { return a.train.loss_scaling.loss_scale; }),
      double_flag<A>("initial-loss-scale", "--fp16: the dynamic loss scale's start",
                     [](A& a) -> auto& { return a.train.loss_scaling.initial_loss_scale; }),
      double_flag<A>("min-loss-scale", "--fp16: the dynamic loss scale's floor",
                     [](A& a) -> auto& { return a.train.loss_scaling.min_loss_scale; }),
      int_flag<A>("loss-scale-window", "--fp16: steps without overflow before the scale doubles",
                  [](A& a) -> auto& { return a.train.loss_scaling.loss_scale_window; }),
      int_flag<A>("hysteresis", "--fp16: overflows tolerated before the scale halves",
                  [](A& a) -> auto& { return a.train.loss_scaling.hysteresis; }),
      switch_flag<A>("allow-tf32", "with --device cuda: fp32 GEMMs on TF32 tensor cores (faster, ~1e-3 relative)",
                     [](A& a) -> auto& { return a.train.allow_tf32; }),
      string_flag<A>("metrics-file", "write one JSON object per step to this file",
                     [](A& a) -> auto& { return a.train.metrics_file; }),
      string_flag<A>("tensorboard-dir", "write the metrics' scalars as TensorBoard events into this directory",
                     [](A& a) -> auto& { return a.train.tensorboard_dir; }),
      double_flag<A>("peak-gflops", "MFU denominator in GFLOP/s per rank (0: the calibrated fp32 GEMM peak)",
                     [](A& a) -> auto& { return a.train.peak_gflops; }),
      string_flag<A>("peak-cache-dir", "directory of the calibrated GEMM peak cache (default: ~/.cache/claw)",
                     [](A& a) -> auto& { return a.train.peak_cache_dir; }),
      string_flag<A>("recompute-granularity", "full: recompute blocks' activations in backward (default: off)",
                     [](A& a) -> auto& { return a.train.recompute_granularity; }),
      string_flag<A>("recompute-method", "block: recompute the first --recompute-num-layers blocks",
                     [](A& a) -> auto& { return a.train.recompute_method; }),
      int_flag<A>("recompute-num-layers", "blocks to recompute with --recompute-granularity full (0: all)",
                  [](A& a) -> auto& { return a.train.recompute_num_layers; }),
      F{"freeze",
        "parameters that do not train: glob patterns over their names, comma-separated (e.g. "
        "'layers.*.attention.*,embedding.*'); they keep their values and get no gradients or optimizer state",
        false,
        [](A& a, const std::string& v) {
          a.train.freeze.clear();
          for (size_t b = 0; !v.empty();) {  // an empty piece is kept: --freeze refuses it by name
            const size_t e = v.find(',', b);
            a.train.freeze.push_back(v.substr(b, e == std::string::npos ? std::string::npos : e - b));
            if (e == std::string::npos) break;
            b = e + 1;
          }
        },
        [](const A& a) { return fmt::format("{}", fmt::join(a.train.freeze, ",")); }, "PATTERN[,PATTERN...]"},
  };
}

// Optimizer and schedule.
std::vector<F> optimizer_flags() {
  using A = TrainArgs;
  return {
      double_flag<A>("lr", "peak learning rate", [](A& a) -> auto& { return a.lr.max_lr; }),
      double_flag<A>("min-lr", "learning rate at the end of decay", [](A& a) -> auto& { return a.lr.min_lr; }),
      int_flag<A>("lr-warmup-iters", "linear warmup steps", [](A& a) -> auto& { return a.lr.warmup_iters; }),
      int_flag<A>("lr-decay-iters", "steps over which the lr decays (0: train-iters)",
                  [](A& a) -> auto& { return a.lr.decay_iters; }),
      F{"lr-decay-style", "constant, linear or cosine", false,
        [](A& a, const std::string& v) { a.lr.style = optim::parse_decay_style(v); },
        [](const A& a) { return optim::to_string(a.lr.style); }, "{constant,linear,cosine}"},
      double_flag<A>("weight-decay", "decoupled weight decay of matrices",
                     [](A& a) -> auto& { return a.adam.weight_decay; }),
      double_flag<A>("adam-beta1", "AdamW beta1", [](A& a) -> auto& { return a.adam.beta1; }),
      double_flag<A>("adam-beta2", "AdamW beta2", [](A& a) -> auto& { return a.adam.beta2; }),
      double_flag<A>("adam-eps", "AdamW epsilon", [](A& a) -> auto& { return a.adam.eps; }),
      double_flag<A>("clip-grad", "clip the global gradient norm to this (0: off)",
                     [](A& a) -> auto& { return a.adam.clip_grad; }),
      F{"use-precision-aware-optimizer", "AdamW's moments in the dtypes --exp-avg-dtype and --exp-avg-sq-dtype name",
        true, [](A& a, const std::string& v) { a.adam.precision_aware = parse_bool("use-precision-aware-optimizer", v); },
        [](const A& a) { return std::string(a.adam.precision_aware ? "true" : "false"); }},
      F{"exp-avg-dtype", "dtype AdamW stores its first moment in (with --use-precision-aware-optimizer; fp8: E4M3 with a scale per 128)", false,
        [](A& a, const std::string& v) { a.adam.exp_avg_dtype = optim::parse_optimizer_dtype("exp-avg-dtype", v); },
        [](const A& a) { return optim::optimizer_dtype_name(a.adam.exp_avg_dtype); }, "{fp32,bf16,fp16,fp8}"},
      F{"exp-avg-sq-dtype", "dtype AdamW stores its second moment in (with --use-precision-aware-optimizer; fp8: E5M2 with a scale per 128)", false,
        [](A& a, const std::string& v) {
          a.adam.exp_avg_sq_dtype = optim::parse_optimizer_dtype("exp-avg-sq-dtype", v);
        },
        [](const A& a) { return optim::optimizer_dtype_name(a.adam.exp_avg_sq_dtype); }, "{fp32,bf16,fp8}"},
      F{"main-params-dtype",
        "dtype the master weights are stored in (fp16: with --use-precision-aware-optimizer; the layers read an fp32 "
        "working copy of each layer while it runs)",
        false,
        [](A& a, const std::string& v) {
          if (v != "fp32" && v != "fp16") fail("--main-params-dtype {}: expected fp32 or fp16", v);
          a.adam.main_params_dtype = optim::parse_optimizer_dtype("main-params-dtype", v);
        },
        [](const A& a) { return optim::optimizer_dtype_name(a.adam.main_params_dtype); }, "{fp32,fp16}"},
  };
}

// Data.
std::vector<F> data_flags() {
  using A = TrainArgs;
  return {
      words_flag<A>("data-path",
                    "Megatron .bin/.idx prefix, or a blend W1 PREFIX1 W2 PREFIX2 ... (default: the built-in corpus)",
                    [](A& a) -> auto& { return a.data.data_path; }),
      string_flag<A>("data-cache-path", "directory for the cached sample indices (default: <data dir>/cache)",
                     [](A& a) -> auto& { return a.data.data_cache_path; }),
      string_flag<A>("tokenizer-type", "tokenizer of the data (its eod marks documents; its vocabulary must fit)",
                     [](A& a) -> auto& { return a.data.tokenizer.type; }),
      string_flag<A>("vocab-file", "GPT-2 encoder.json (default: the built-in one)",
                     [](A& a) -> auto& { return a.data.tokenizer.vocab_file; }),
      string_flag<A>("merge-file", "GPT-2 vocab.bpe (default: the built-in one)",
                     [](A& a) -> auto& { return a.data.tokenizer.merge_file; }),
      string_flag<A>("tokenizer-model", "tiktoken rank file, SentencePiece .model, or tokenizer.json (or its model directory)",
                     [](A& a) -> auto& { return a.data.tokenizer.model_file; }),
      switch_flag<A>("reset-position-ids", "restart positions at each document of a packed sequence",
                     [](A& a) -> auto& { return a.data.packing.reset_position_ids; }),
      switch_flag<A>("reset-attention-mask", "no attention across documents of a packed sequence",
                     [](A& a) -> auto& { return a.data.packing.reset_attention_mask; }),
      switch_flag<A>("sft",
                     "fine-tune on `claw preprocess --sft` data: whole conversations, loss on the assistant tokens "
                     "(sets --reset-position-ids and --reset-attention-mask)",
                     [](A& a) -> auto& { return a.data.sft; }),
      switch_flag<A>("dpo",
                     "Direct Preference Optimization on `claw preprocess --dpo` pairs against the starting model "
                     "(reference log-probabilities cached next to the data)",
                     [](A& a) -> auto& { return a.train.dpo.enabled; }),
      double_flag<A>("dpo-beta", "DPO's beta: how far the policy may move from the reference",
                     [](A& a) -> auto& { return a.train.dpo.beta; }),
      string_flag<A>("dpo-loss-type", "sigmoid (DPO), ipo or hinge",
                     [](A& a) -> auto& { return a.train.dpo.loss_type; }),
      switch_flag<A>("eod-mask-loss", "no loss on predictions made from an end-of-document token",
                     [](A& a) -> auto& { return a.data.packing.eod_mask_loss; }),
      string_flag<A>("split", "train,valid,test weights over documents",
                     [](A& a) -> auto& { return a.data.split; }),
      string_flag<A>("data-dir", "directory of the built-in corpus (default: $CLAW_DATA_DIR or the build's data/)",
                     [](A& a) -> auto& { return a.data.data_dir; }),
  };
}

// Parallelism (ranks come from the launcher: mpirun -np N / srun -n N; data parallel = the rest).
std::vector<F> parallelism_flags() {
  using A = TrainArgs;
  return {
      F{"parallel", "manual: the layout flags below; auto: the planner picks them for the launched ranks", false,
        [](A& a, const std::string& v) {
          if (v != "manual" && v != "auto") fail("--parallel '{}' is not one of: manual, auto", v);
          a.parallel_mode = v;
        },
        [](const A& a) { return a.parallel_mode; }, "{manual,auto}"},
      int_flag<A>("tensor-model-parallel-size", "tensor-parallel ranks per model replica",
                  [](A& a) -> auto& { return a.parallel.sizes.tp; }),
      switch_flag<A>("sequence-parallel",
                     "with tensor parallelism: norms, dropout and residual adds on 1/TP of the sequence per rank",
                     [](A& a) -> auto& { return a.parallel.sequence_parallel; }),
      int_flag<A>("pipeline-model-parallel-size", "pipeline stages",
                  [](A& a) -> auto& { return a.parallel.sizes.pp; }),
      string_flag<A>("pipeline-schedule", "gpipe, 1f1b, interleaved (implied by a virtual stage size) or zb-h1",
                     [](A& a) -> auto& { return a.parallel.pipeline_schedule; }),
      int_flag<A>("num-layers-per-virtual-pipeline-stage", "layers per model chunk: interleaved 1F1B",
                  [](A& a) -> auto& { return a.parallel.num_layers_per_virtual_pipeline_stage; }),
      int_flag<A>("decoder-first-pipeline-num-layers", "layers of the first pipeline stage (the rest even)",
                  [](A& a) -> auto& { return a.parallel.decoder_first_pipeline_num_layers; }),
      int_flag<A>("decoder-last-pipeline-num-layers", "layers of the last pipeline stage (the rest even)",
                  [](A& a) -> auto& { return a.parallel.decoder_last_pipeline_num_layers; }),
      int_flag<A>("context-parallel-size", "context-parallel ranks (the sequence split, two balanced chunks a rank)",
                  [](A& a) -> auto& { return a.parallel.sizes.cp; }),
      string_flag<A>("cp-comm-type", "context-parallel attention: p2p (ring, any heads) or a2a (heads for sequence)",
                     [](A& a) -> auto& { return a.parallel.cp_comm_type; }),
      int_flag<A>("expert-model-parallel-size", "expert-parallel ranks (MoE)",
                  [](A& a) -> auto& { return a.parallel.sizes.ep; }),
      int_flag<A>("expert-tensor-parallel-size", "tensor-parallel ranks of each expert (MoE; 0: the dense TP size)",
                  [](A& a) -> auto& { return a.parallel.sizes.etp; }),
      string_flag<A>("parallel-order", "rank grid order, fastest-varying first",
                     [](A& a) -> auto& { return a.parallel.sizes.order; }),
      switch_flag<A>("use-distributed-optimizer", "shard AdamW state over data-parallel ranks (ZeRO stage 1)",
                     [](A& a) -> auto& { return a.parallel.use_distributed_optimizer; }),
      int_flag<A>("zero-stage",
                  "0: replicate; 1: shard optimizer state; 2: also gradients; 3: also parameters (gathered per layer)",
                  [](A& a) -> auto& { return a.parallel.dp.zero_stage; }),
      int_flag<A>("ddp-bucket-size", "elements per gradient all-reduce bucket (0: max(40M, 1M x data-parallel size))",
                  [](A& a) -> auto& { return a.parallel.dp.bucket_size; }),
      switch_flag<A>("overlap-grad-reduce", "reduce a bucket's gradients while backward continues",
                     [](A& a) -> auto& { return a.parallel.dp.overlap_grad_reduce; }),
      switch_flag<A>("overlap-param-gather", "ZeRO-3: gather the next layer's parameters while this one runs",
                     [](A& a) -> auto& { return a.parallel.dp.overlap_param_gather; }),
      int_flag<A>("num-distributed-optimizer-instances",
                  "split the data-parallel ranks into this many instances (data centres), each with a whole "
                  "ZeRO-sharded optimizer: gradients reduce-scatter inside an instance, then all-reduce across",
                  [](A& a) -> auto& { return a.parallel.sizes.instances; }),
      int_flag<A>("data-centers", "the same as --num-distributed-optimizer-instances",
                  [](A& a) -> auto& { return a.parallel.sizes.instances; }),
      int_flag<A>("inter-dc-chunk-bytes", "cut the all-reduce across instances into chunks of this size (0: one)",
                  [](A& a) -> auto& { return a.parallel.inter_dc_chunk_bytes; }),
      int_flag<A>("inter-dc-streams", "communicators across instances: chunks in flight together",
                  [](A& a) -> auto& { return a.parallel.sizes.inter_streams; }),
      int_flag<A>("diloco-inner-steps",
                  "DiLoCo across the instances: each trains this many steps alone, then an outer Nesterov step "
                  "averages their parameter deltas (0: synchronous hierarchical reduction)",
                  [](A& a) -> auto& { return a.parallel.dp.diloco_inner_steps; }),
      double_flag<A>("diloco-outer-lr", "DiLoCo's outer learning rate",
                     [](A& a) -> auto& { return a.parallel.dp.diloco_outer_lr; }),
      double_flag<A>("diloco-outer-momentum", "DiLoCo's outer Nesterov momentum",
                     [](A& a) -> auto& { return a.parallel.dp.diloco_outer_momentum; }),
      int_flag<A>("diloco-delta-bits",
                  "DiLoCo's parameter deltas across the instances: 32 (fp32, all-reduced), 8 or 4 (packed in "
                  "blocks of 128 with a scale each, all-gathered)",
                  [](A& a) -> auto& { return a.parallel.dp.diloco_delta_bits; }),
      int_flag<A>("diloco-fragments",
                  "streaming DiLoCo: the outer step in this many fragments spread over each round",
                  [](A& a) -> auto& { return a.parallel.dp.diloco_fragments; }),
      double_flag<A>("distributed-timeout-minutes", "deadline of every collective wait; then the job aborts",
                     [](A& a) -> auto& { return a.parallel.distributed_timeout_minutes; }),
      switch_flag<A>("log-all-ranks", "print info lines from every rank (default: rank 0 only)",
                     [](A& a) -> auto& { return a.parallel.log_all_ranks; }),
  };
}

// Checkpoints (docs/checkpoints.md).
std::vector<F> checkpoint_flags() {
  using A = TrainArgs;
  return {
      string_flag<A>("save", "directory to save checkpoints in (each rank writes its shards)",
                     [](A& a) -> auto& { return a.ckpt.save; }),
      int_flag<A>("save-interval", "steps between checkpoints (0: only at the end)",
                  [](A& a) -> auto& { return a.ckpt.save_interval; }),
      switch_flag<A>("async-save", "write checkpoints in the background; a step waits only for the in-memory snapshot",
                     [](A& a) -> auto& { return a.ckpt.async_save; }),
      int_flag<A>("keep-last-checkpoints", "keep only the newest K complete checkpoints (0: all)",
                  [](A& a) -> auto& { return a.ckpt.keep_last; }),
      string_flag<A>("load", "resume from this directory's latest complete checkpoint (any parallel layout)",
                     [](A& a) -> auto& { return a.ckpt.load; }),
      int_flag<A>("ckpt-step", "with --load: this iteration instead of the latest (-1: latest)",
                  [](A& a) -> auto& { return a.ckpt.ckpt_step; }),
      switch_flag<A>("load-fallback", "with --load: if the checkpoint fails its checksums, load the previous one",
                     [](A& a) -> auto& { return a.ckpt.load_fallback; }),
      switch_flag<A>("no-load-optim", "with --load: parameters only (fresh optimizer state)",
                     [](A& a) -> auto& { return a.ckpt.no_load_optim; }),
      switch_flag<A>("finetune",
                     "with --load: the parameters only, and start at iteration 0 (fresh optimizer, schedule and data)",
                     [](A& a) -> auto& { return a.ckpt.finetune; }),
      string_flag<A>("load-hf",
                     "fine-tune a Hugging Face directory (config.json + safetensors, GPT-2 or Llama): its shape "
                     "replaces the model flags, its weights load as --finetune (imported under --save)",
                     [](A& a) -> auto& { return a.ckpt.load_hf; }),
      int_flag<A>("exit-interval", "stop (after saving, with --save) when the step is a multiple of this (0: never)",
                  [](A& a) -> auto& { return a.ckpt.exit_interval; }),
  };
}

}  // namespace

const std::vector<F>& train_flags() {
  using A = TrainArgs;
  static const std::vector<F> flags = [] {
    std::vector<F> all = concat(model::model_shape_flags<A>([](A& a) -> model::ModelConfig& { return a.model; }),
                                model::fp8_flags<A>([](A& a) -> model::ModelConfig& { return a.model; }));
    for (const auto& group : {training_flags(), resilience_flags(), run_flags(), optimizer_flags(), data_flags(),
                              parallelism_flags(), checkpoint_flags()})
      all = concat(std::move(all), group);
    return all;
  }();
  return flags;
}

std::string resolved_config(const TrainArgs& a) {
  return config_table(fmt::format("resolved config (model preset: {})", a.model.name), flag_values(train_flags(), a));
}

namespace {

// --parallel auto: the planner's fastest layout that fits (src/claw/plan)
// among those claw train runs, for the ranks launched; flags given
// explicitly pin their part. Every rank computes the same choice.
void choose_layout(TrainArgs& a, const comm::World& world, const FlagBinder<TrainArgs>& given) {
  plan::Cluster cluster;
  // One device of the planner is one rank: on the CPU the ranks of a node share its cores,
  // memory and bandwidth.
  cluster.device = plan::Catalog::builtin().device("cpu").shared_by(world.local_size());
  cluster.num_devices = world.size();
  cluster.devices_per_node = world.local_size();
  if (a.train.global_batch_size == 0) a.train.global_batch_size = a.train.micro_batch_size * world.size();
  const plan::Job job{.model = a.model, .seq_length = a.train.seq_length,
                      .global_batch_size = a.train.global_batch_size, .freeze = a.train.freeze};
  plan::Constraints pins;
  pins.claw_trainer = true;
  const auto int_of = [&](const char* flag) { return static_cast<int>(parse_int(flag, given.value(flag))); };
  if (given.given("tensor-model-parallel-size")) pins.tp = int_of("tensor-model-parallel-size");
  if (given.given("pipeline-model-parallel-size")) pins.pp = int_of("pipeline-model-parallel-size");
  if (given.given("context-parallel-size")) pins.cp = int_of("context-parallel-size");
  if (given.given("expert-model-parallel-size")) pins.ep = int_of("expert-model-parallel-size");
  if (given.given("micro-batch-size")) pins.micro_batch_size = a.train.micro_batch_size;
  if (given.given("ddp-bucket-size")) pins.ddp_bucket_size = a.parallel.dp.bucket_size;
  if (given.given("zero-stage") || given.given("use-distributed-optimizer")) pins.zero_stage = a.parallel.zero_stage();
  if (given.given("sequence-parallel")) pins.sequence_parallel = true;
  if (given.given("recompute-granularity")) pins.recompute = !a.train.recompute_granularity.empty();
  if (given.given("num-layers-per-virtual-pipeline-stage") || given.given("pipeline-schedule") ||
      given.given("decoder-first-pipeline-num-layers") || given.given("decoder-last-pipeline-num-layers") ||
      given.given("recompute-num-layers"))
    fail("--parallel auto chooses the pipeline schedule, virtual stages and recompute itself; drop "
         "--num-layers-per-virtual-pipeline-stage / --pipeline-schedule / --decoder-*-pipeline-num-layers / "
         "--recompute-num-layers, or use --parallel manual");
  const plan::SearchResult r = plan::search(job, cluster, plan::precision("fp32"), pins);
  if (r.ranked.empty()) fail("--parallel auto: no layout fits on {} ranks: {}", world.size(), r.none_fit);
  const plan::Estimate& best = r.ranked.front();
  const plan::Layout& l = best.layout;
  a.parallel.sizes.tp = l.tp;
  a.parallel.sizes.pp = l.pp;
  a.parallel.sizes.cp = l.cp;
  a.parallel.sizes.ep = l.ep;
  a.parallel.sizes.etp = l.etp;
  a.parallel.sequence_parallel = l.sequence_parallel && l.tp > 1;
  a.parallel.pipeline_schedule = std::string(parallel::to_string(l.schedule));
  a.parallel.num_layers_per_virtual_pipeline_stage = l.virtual_stages > 1 ? l.layers_per_virtual_stage(job) : 0;
  a.parallel.use_distributed_optimizer = false;
  a.parallel.dp.zero_stage = l.zero_stage;
  a.parallel.dp.overlap_grad_reduce = l.overlap_grad_reduce;
  a.parallel.dp.overlap_param_gather = l.overlap_param_gather;
  a.train.micro_batch_size = l.micro_batch_size;
  a.train.recompute_granularity = l.recompute() ? "full" : "";
  a.train.recompute_num_layers = 0;
  log::info("plan", "--parallel auto: {} of {} layouts fitting {:.2f} GiB per rank ({} considered); predicted "
            "{:.0f} tokens/s, {:.3f} s/step, {:.2f} GiB per rank ({}); flags: {}",
            l.describe(), r.ranked.size(), cluster.device.memory_bytes / 1073741824.0, r.considered,
            best.tokens_per_s, best.time.total, best.memory.total() / 1073741824.0, plan::describe(best.memory),
            l.flags(job));
}

}  // namespace

// Joins the job (mpirun/srun ranks, or one process) with --distributed-
// timeout-minutes as every wait's deadline, sets up logging, lets
// --parallel auto pick the layout, and resolves the batch over the
// data-parallel ranks.
std::unique_ptr<comm::World> join_job(const TrainArgs& args) {
  if (!(args.parallel.distributed_timeout_minutes > 0))
    fail("--distributed-timeout-minutes must be positive, got {}", args.parallel.distributed_timeout_minutes);
  const auto timeout =
      std::chrono::milliseconds(static_cast<int64_t>(args.parallel.distributed_timeout_minutes * 60'000));
  std::unique_ptr<comm::World> world = comm::World::create({.timeout = timeout, .faults = args.faults});
  log::set_rank(world->rank(), world->size());
  log::set_all_ranks(args.parallel.log_all_ranks);
  return world;
}

std::unique_ptr<comm::World> launch(TrainArgs& args, const FlagBinder<TrainArgs>& given) {
  std::unique_ptr<comm::World> world = join_job(args);
  if (args.parallel_mode == "auto") choose_layout(args, *world, given);
  const comm::RankGrid grid = comm::RankGrid::make(world->size(), args.parallel.sizes);
  args.train.resolve_and_validate(grid.dp);
  return world;
}

namespace {

// The checkpoint --load starts from, if there is one yet (ckpt::find_checkpoint);
// a missing directory is left to the loader to report.
std::optional<std::string> checkpoint_to_load(const train::CheckpointConfig& c) {
  std::error_code ec;
  if (c.load.empty() || !std::filesystem::is_directory(c.load, ec)) return std::nullopt;
  return ckpt::find_checkpoint(c.load, c.ckpt_step, c.load_fallback, /*log_fallback=*/false);
}

}  // namespace

void use_weights_model(TrainArgs& a, const GivenFlags& given, const std::string& preset) {
  if (!a.ckpt.load_hf.empty()) {
    if (!a.ckpt.load.empty()) fail("--load-hf and --load both name weights to start from; give one");
    const model::ModelConfig hf =
        ckpt::model_from_hf_config(ckpt::read_hf_config(a.ckpt.load_hf, "--load-hf"), a.ckpt.load_hf + "/config.json");
    a.model = model::model_over_weights(hf, a.model, given, preset, "--load-hf " + a.ckpt.load_hf);
    // The directory's own tokenizer (and with it its chat template) unless
    // the flags name another.
    if (!given("tokenizer-type") && std::filesystem::exists(std::filesystem::path(a.ckpt.load_hf) / "tokenizer.json"))
      a.data.tokenizer = data::TokenizerOptions{.type = "HFTokenizer", .model_file = a.ckpt.load_hf};
    return;
  }
  const std::optional<std::string> dir = checkpoint_to_load(a.ckpt);
  if (!dir) return;
  model::ModelConfig recorded;
  try {
    const ckpt::Metadata meta = ckpt::Metadata::read(*dir);
    if (!meta.model.is_object() || meta.model.empty()) return;  // a checkpoint from before models were recorded
    recorded = model::model_from_flags_json(meta.model, "checkpoint " + *dir);
  } catch (const Error& e) {  // unreadable: the loader reports it (or falls back) in its turn
    log::warn("train", "--load {}: the model recorded in {} is unreadable ({}); the flags' model is used", a.ckpt.load,
              *dir, e.what());
    return;
  }
  a.model = model::model_over_weights(recorded, a.model, given, preset, "checkpoint " + *dir);
}

// Rank 0 writes the directory as a one-rank claw checkpoint (under --save,
// where every rank can read it, else a temporary directory: one node), and
// every rank loads it as --finetune at its own layout.
void import_hf_for_finetune(TrainArgs& a, comm::World& world) {
  static std::string tmp;  // a directory this process removes at exit
  std::string dir;
  if (!a.ckpt.save.empty()) {
    dir = a.ckpt.save + "/imported_hf";
  } else {
    if (world.size() > 1 && world.local_size() != world.size())
      fail("--load-hf over several nodes needs --save DIR on storage every node reads (the import goes there)");
    // Named by rank 0's process id, which every rank of the node learns.
    int64_t pid = ::getpid();
    world.world_group()->broadcast(&pid, 1, DType::i64, 0);
    tmp = fmt::format("{}/claw_load_hf_{}", std::filesystem::temp_directory_path().string(), pid);
    dir = tmp;
    if (world.rank() == 0)
      std::atexit([] {
        std::error_code ec;
        std::filesystem::remove_all(tmp, ec);
      });
  }
  std::shared_ptr<comm::Group> everyone = world.world_group();
  if (world.rank() == 0) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    log::info("train", "--load-hf: {}", import_hf_checkpoint(a.ckpt.load_hf, dir));
  }
  everyone->barrier();
  a.ckpt.load = dir;
  a.ckpt.finetune = true;
}

namespace {

struct TrainCommand {
  std::string preset;
  std::string config_file;
  std::vector<std::string> test_faults;
  std::unique_ptr<FlagBinder<TrainArgs>> binder;

  void run() {
    TrainArgs args;
    // Precedence: defaults < preset < TOML < command line. The preset may
    // come from either source; the command line wins.
    std::vector<std::pair<std::string, std::string>> toml;
    if (!config_file.empty()) toml = read_toml_config(config_file, train_flags(), {"model"});
    std::string name = preset;
    if (name.empty())
      for (const auto& [k, v] : toml)
        if (k == "model") name = v;
    if (!name.empty()) args.model = model::model_preset(name);
    for (const auto& [k, v] : toml) {
      if (k == "model") continue;
      auto it = std::find_if(train_flags().begin(), train_flags().end(), [&](const F& f) { return f.name == k; });
      it->set(args, v);
    }
    binder->apply(args);
    const GivenFlags given = [&](const std::string& flag) {
      return binder->given(flag) || std::any_of(toml.begin(), toml.end(), [&](const auto& kv) { return kv.first == flag; });
    };
    use_weights_model(args, given, name);
    // Under `claw launch` the supervisor's heartbeat URL, the attempt and
    // the heartbeat period come in the environment.
    if (const char* url = std::getenv("CLAW_SUPERVISOR"); url && *url) {
      args.train.watchdog.supervisor = url;
      if (const char* v = std::getenv("CLAW_LAUNCH_ATTEMPT")) args.train.watchdog.attempt = std::atoi(v);
      if (const char* v = std::getenv("CLAW_SUPERVISOR_TOKEN")) args.train.watchdog.token = v;
      if (const char* v = std::getenv("CLAW_HEARTBEAT_INTERVAL")) args.train.watchdog.heartbeat_interval_s = std::atof(v);
    }
    if (!test_faults.empty())
      args.ckpt.faults = args.faults = std::make_shared<FaultInjector>(FaultInjector::parse(test_faults));
    std::unique_ptr<comm::World> world = launch(args, *binder);
    if (!args.ckpt.load_hf.empty()) import_hf_for_finetune(args, *world);
    log::info("train", "{}", resolved_config(args));
    args.ckpt.model_flags = model::model_flags_json(args.model);
    for (const F& f : train_flags()) args.ckpt.args[f.name] = f.get(args);
    args.ckpt.args["model"] = args.model.name;
    train::Trainer trainer(args.model, args.train, args.lr, args.adam, args.data, args.parallel, *world, args.ckpt);
    const train::TrainResult r = trainer.run();
    if (r.stopped_by)
      throw CleanExit(ExitCode::stopped,
                      fmt::format("stopped by {} after step {}{} (exit code {})", ExitSignalGuard::name(r.stopped_by),
                                  r.steps, args.ckpt.save.empty() ? "" : "; resume with --load " + args.ckpt.save,
                                  static_cast<int>(ExitCode::stopped)));
  }
};

// The flags `claw eval` reads: the model's architecture (which must agree
// with the checkpoint) and what its forward pass computes, the batch, the
// data, the layout and the checkpoint. Training's other flags (optimizer,
// schedule, saving, dropout, LoRA's shape, data parallelism's optimizer
// sharding and overlap, resilience) would change nothing here: unknown to it.
const std::vector<F>& eval_flags() {
  static const std::vector<F> flags = [] {
    const std::set<std::string> other = {
        "num-layers", "hidden-size", "num-attention-heads", "num-query-groups", "kv-channels", "ffn-hidden-size",
        "make-vocab-size-divisible-by", "max-position-embeddings", "normalization", "norm-epsilon",
        "position-embedding-type", "rotary-base", "swiglu", "disable-bias-linear", "vocab-size",
        "untie-embeddings-and-output-weights", "num-experts", "moe-router-topk", "moe-router-score-function",
        "moe-router-enable-expert-bias", "moe-ffn-hidden-size", "moe-shared-expert-intermediate-size",
        "moe-layer-freq", "moe-expert-capacity-factor", "moe-token-drop-policy",
        "micro-batch-size", "global-batch-size", "seq-length", "eval-iters",
        "num-threads", "device", "bf16", "fp16", "allow-tf32",
        "data-path", "data-cache-path", "tokenizer-type", "vocab-file", "merge-file", "tokenizer-model",
        "reset-position-ids", "reset-attention-mask", "sft", "eod-mask-loss", "split", "data-dir",
        "parallel", "tensor-model-parallel-size", "sequence-parallel", "pipeline-model-parallel-size",
        "pipeline-schedule", "num-layers-per-virtual-pipeline-stage", "decoder-first-pipeline-num-layers",
        "decoder-last-pipeline-num-layers", "context-parallel-size", "cp-comm-type", "expert-model-parallel-size",
        "expert-tensor-parallel-size", "parallel-order", "distributed-timeout-minutes", "log-all-ranks",
        "load", "ckpt-step"};
    std::vector<F> out;
    for (const F& f : train_flags())
      if (other.count(f.name) || f.name.starts_with("fp8-") || f.name.starts_with("num-layers-at-") ||
          f.name == "first-last-layers-bf16")
        out.push_back(f);
    return out;
  }();
  return flags;
}

// `claw eval --load DIR`: the checkpoint's model (its recorded flags; the
// command line overrides the rest) at any layout the launched ranks allow,
// evaluated on --eval-iters global batches of --data-path (all of it the
// evaluation set unless --split says otherwise).
struct EvalCommand {
  std::string logits_file, grads_file;
  std::unique_ptr<FlagBinder<TrainArgs>> binder;

  void run() {
    TrainArgs args;
    args.data.split = "1,0,0";
    binder->apply(args);
    if (args.ckpt.load.empty()) fail("claw eval: --load DIR (a checkpoint) is required");
    if (!args.ckpt.save.empty()) fail("claw eval does not save; drop --save");
    if (args.train.dpo.enabled)
      fail("claw eval --dpo is not supported: claw train --dpo reports the DPO loss and rewards of its validation "
           "split (--split, --eval-interval)");
    const std::string dir = ckpt::resolve_load_dir(args.ckpt.load, args.ckpt.ckpt_step);
    const ckpt::Metadata meta = ckpt::Metadata::read(dir);
    // The checkpoint's model; the command line's flags for the rest.
    args.model = model::model_over_weights(model::model_from_flags_json(meta.model, "checkpoint " + dir), args.model,
                                    [&](const std::string& f) { return binder->given(f); }, "", "checkpoint " + dir);
    args.train.train_iters = std::max<int64_t>(1, args.train.eval_iters);
    args.train.eval_interval = 0;
    std::unique_ptr<comm::World> world = launch(args, *binder);
    auto config = flag_values(eval_flags(), args);
    config.insert(config.end(), {{"logits-file", logits_file}, {"grads-file", grads_file}});
    log::info("eval", "{}", config_table(fmt::format("resolved config (checkpoint {})", dir), config));
    args.ckpt.load = dir;
    args.ckpt.ckpt_step = -1;
    train::Evaluator evaluator(args.model, args.train, args.data, args.parallel, *world, args.ckpt);
    const double loss = evaluator.evaluate_train_split(args.train.train_iters);
    if (world->rank() == 0)
      fmt::print("eval: {} (iteration {}), {}: loss {:.6f}, perplexity {:.4f} over {} sequences of {} tokens\n", dir,
                 meta.iteration, fmt::join(args.data.data_path.empty() ? std::vector<std::string>{"built-in corpus"}
                                                                        : args.data.data_path, " "),
                 loss, std::exp(loss), args.train.train_iters * args.train.global_batch_size, args.train.seq_length);
    if (!logits_file.empty()) evaluator.write_logits(logits_file);
    if (!grads_file.empty()) evaluator.write_gradients(grads_file);
  }
};

}  // namespace

void add_eval_command(CLI::App& app) {
  auto cmd = std::make_shared<EvalCommand>();
  CLI::App* sub = app.add_subcommand("eval", "loss and perplexity of a checkpoint (--load DIR) on a dataset");
  sub->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  sub->add_option("--logits-file", cmd->logits_file,
                  "also write the first micro-batch's tokens and logits as safetensors (TP = PP = 1)");
  sub->add_option("--grads-file", cmd->grads_file,
                  "also write the first global batch's loss and the gradients of the trainable parameters (LoRA: the "
                  "adapters') as safetensors (one rank)");
  static const TrainArgs defaults;
  cmd->binder = std::make_unique<FlagBinder<TrainArgs>>(*sub, eval_flags(), defaults);
  sub->callback([cmd] { cmd->run(); });
}

std::vector<std::string> train_flag_names() {
  std::vector<std::string> out = {"model"};
  for (const F& f : train_flags()) out.push_back(f.name);
  return out;
}

std::vector<std::string> train_switch_names() {
  std::vector<std::string> out;
  for (const F& f : train_flags())
    if (f.is_switch) out.push_back(f.name);
  return out;
}

void add_train_command(CLI::App& app) {
  auto cmd = std::make_shared<TrainCommand>();
  CLI::App* sub = app.add_subcommand("train", "train a model (no arguments: gpt2-tiny on the built-in corpus)");
  // A flag given twice takes its last value, as with Megatron's argparse.
  sub->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  sub->add_option("--model", cmd->preset,
                  "model preset; later flags override its fields (" +
                      [] {
                        std::string s;
                        for (const auto& n : model::preset_names()) s += (s.empty() ? "" : ", ") + n;
                        return s;
                      }() +
                      ")")
      ->default_str("gpt2-tiny");
  sub->add_option("--config", cmd->config_file, "TOML file of flag = value pairs; command-line flags override it");
  // Hidden (no group): failures on demand for tests/e2e/parallel (core/fault_injector.h).
  sub->add_option("--test-fault", cmd->test_faults, "a fault or mutation (core/fault_injector.h lists them)")
      ->group("")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  static const TrainArgs defaults;
  cmd->binder = std::make_unique<FlagBinder<TrainArgs>>(*sub, train_flags(), defaults);
  sub->callback([cmd] { cmd->run(); });
}

}  // namespace claw::cli
