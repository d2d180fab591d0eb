// What a job's runtime is built from (runtime.h): the model, its parallel
// layout, and the shape of the micro-batches it runs (Megatron flag names in
// the comments). Every command that runs the model (train, eval, and those
// to come) fills a RuntimeConfig; each config validates itself here, once,
// with errors naming the flag and what would be valid.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "claw/comm/parallel_state.h"
#include "claw/model/config.h"
#include "claw/parallel/data_parallel.h"
#include "claw/parallel/pipeline_layout.h"
#include "claw/parallel/pipeline_schedule.h"

namespace claw::runtime {

// The parallel layout and its runtime.
struct ParallelConfig {
  comm::ParallelSizes sizes;              // --tensor/--context/--expert/--pipeline-model-parallel-size
  parallel::DataParallelConfig dp;        // --zero-stage, --ddp-bucket-size, --overlap-*
  bool sequence_parallel = false;         // --sequence-parallel: norms/dropout/residual on 1/TP of the sequence
  std::string cp_comm_type = "p2p";       // --cp-comm-type p2p (ring attention) | a2a (heads for sequence)
  std::string pipeline_schedule = "1f1b";   // --pipeline-schedule gpipe|1f1b|interleaved|zb-h1
  int64_t num_layers_per_virtual_pipeline_stage = 0;  // --num-layers-per-virtual-pipeline-stage (interleaved)
  int64_t decoder_first_pipeline_num_layers = -1;     // --decoder-first-pipeline-num-layers (-1: even)
  int64_t decoder_last_pipeline_num_layers = -1;      // --decoder-last-pipeline-num-layers (-1: even)
  bool use_distributed_optimizer = false; // --use-distributed-optimizer: ZeRO stage 1 unless --zero-stage says more
  int64_t inter_dc_chunk_bytes = 0;       // --inter-dc-chunk-bytes: chunks of the all-reduce across instances (0: whole)
  double distributed_timeout_minutes = 10;  // --distributed-timeout-minutes: deadline of every wait
  bool log_all_ranks = false;             // --log-all-ranks: info lines from every rank, not only rank 0
  // The ZeRO stage in effect.
  int zero_stage() const { return use_distributed_optimizer ? std::max(1, dp.zero_stage) : dp.zero_stage; }

  // Throws claw::Error naming the flags when the layout does not run `model`
  // on `grid`: parallelisms not built yet, TP/SP not splitting the model or
  // the sequence, the ZeRO settings, the pipeline's layer split and schedule
  // for `micro_batches` per step and rank, and what pipelining excludes.
  void validate(const model::ModelConfig& model, const comm::RankGrid& grid, int64_t seq_length,
                int64_t micro_batches, int64_t recompute_layers) const;
  // The layers each stage and chunk holds (one stage, one chunk without pipeline parallelism).
  parallel::PipelineLayout pipeline_layout(int64_t num_layers, int stages) const;
  // The schedule a stage runs. One stage: 1F1B, i.e. forward k then backward
  // k for each micro-batch, whatever --pipeline-schedule says (it has no
  // bubble to fill, and the data-parallel engine overlaps its reductions
  // with exactly that order). Virtual stages imply the interleaved schedule.
  parallel::ScheduleConfig schedule_config(int stages, int64_t micro_batches, int chunks) const;
};

struct RuntimeConfig {
  model::ModelConfig model;
  ParallelConfig parallel;
  int64_t micro_batch_size = 1;   // --micro-batch-size: sequences per forward/backward
  int64_t global_batch_size = 1;  // --global-batch-size (resolved: a multiple of micro batch x data-parallel size)
  int64_t seq_length = 256;       // --seq-length: tokens per sequence
  int64_t recompute_layers = 0;   // blocks whose activations are recomputed (--recompute-granularity full)
  uint64_t seed = 1234;           // --seed: initialisation (and the run's dropout streams)
  int num_threads = 0;            // --num-threads (0: this node's threads shared by its ranks)
  std::string device = "cpu";     // --device cpu | cuda | cuda:N (kernels, arenas and the optimizer on that GPU)
  bool allow_tf32 = false;        // --allow-tf32: the GPU's fp32 GEMMs round operands to TF32 (PyTorch's allow_tf32)
  // --main-params-dtype: the master weights the store keeps (f32, or f16 with
  // an fp32 working copy per unit in use; model/param.h StoreDtypes).
  DType main_params_dtype = DType::f32;
  // false: the model only runs forward (evaluation); no optimizer state is
  // expected in the memory check.
  bool training = true;
  // --freeze: glob patterns over canonical parameter names; the matching
  // parameters keep their values and get no gradients or optimizer state.
  std::vector<std::string> freeze;

  // Micro-batches per step on each of `dp` data-parallel ranks.
  int64_t micro_batches(int dp) const { return global_batch_size / (micro_batch_size * dp); }
  // The GPU index of --device cuda[:N], or -1 for the CPU.
  int cuda_device() const;
  // Fills what depends on other fields (the ZeRO stage) and validates the
  // model, the layout on `world_size` ranks, the sequence and --freeze
  // (every pattern names a parameter, something is left to train); every rank
  // validates the same configuration, so all refuse it together.
  void resolve_and_validate(int world_size);
};

}  // namespace claw::runtime
