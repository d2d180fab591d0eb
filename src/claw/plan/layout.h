// A training job and one parallel layout of it: what the planner evaluates.
//
// A layout fixes every choice the trainer's flags make: TP x CP x PP x DP
// ranks (the rank grid, DESIGN.md), sequence parallelism, virtual pipeline
// stages and the schedule, the micro-batch size, the ZeRO stage, overlap and
// activation recompute. validate_layout refuses one the trainer would refuse,
// naming the flags.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "claw/model/config.h"
#include "claw/parallel/pipeline_layout.h"
#include "claw/parallel/pipeline_schedule.h"

namespace claw::plan {

// Bytes per element of what a rank holds (Megatron's mixed precision keeps
// 16-bit weights, fp32 main gradients, an fp32 master copy and fp32 Adam
// moments: 2 + 4 + 4 + 8 bytes per parameter, the last 12 sharded by the
// distributed optimizer; claw's CPU trainer is fp32 throughout: 4 + 4 + 8).
struct Precision {
  std::string compute = "fp32";  // dtype of the GEMMs: the peak the cost model uses
  double param_bytes = 4, grad_bytes = 4, master_bytes = 0, moment_bytes = 4, activation_bytes = 4;
  // Attention kernel of the stack: flash-style (claw's: the T x T scores are never stored, causal blocks
  // skipped), or unfused as in Megatron before flash attention (scores, softmax and dropout mask
  // materialised: 5 a s^2 b bytes per layer, Korthikanti et al. 2022, and memory-bound passes over them).
  bool flash_attention = true;
  // Under "fp8": the blocks whose GEMMs stay bf16 (--fp8-layer-selection
  // auto's choice, or --first-last-layers-bf16): they run at the bf16 peak.
  std::vector<int64_t> high_precision_layers;
  // The stored master weights of claw's trainer (--main-params-dtype): f16
  // halves the parameter arena and adds an fp32 working slot per unit in use.
  DType main_params_dtype = DType::f32;
  // Moments stored in FP8 (moment_bytes counts their 1-byte codes): each adds
  // a 4-byte scale per 128 elements (optim/adamw.h).
  int fp8_moments = 0;
};
// "fp32" (claw's CPU trainer), "bf16"/"fp16" (mixed precision as above),
// "fp8" (bf16 storage, fp8 GEMMs); throws naming the valid names.
Precision precision(const std::string& name);

struct Job {
  model::ModelConfig model;
  int64_t seq_length = 2048;        // --seq-length
  int64_t global_batch_size = 1;    // --global-batch-size, sequences
  // --freeze: glob patterns of parameters that do not train (no gradients,
  // no optimizer state).
  std::vector<std::string> freeze;
};

struct Layout {
  int tp = 1, cp = 1, pp = 1, dp = 1;  // --tensor/context/pipeline-model-parallel-size; DP: the rest
  int ep = 1;                          // --expert-model-parallel-size (MoE)
  int etp = 0;                         // --expert-tensor-parallel-size (0: tp)
  bool sequence_parallel = false;      // --sequence-parallel
  int virtual_stages = 1;              // model chunks per stage (interleaved when > 1)
  parallel::ScheduleKind schedule = parallel::ScheduleKind::one_f_one_b;
  int64_t micro_batch_size = 1;        // --micro-batch-size
  int zero_stage = 0;                  // --zero-stage (1 = --use-distributed-optimizer)
  bool overlap_grad_reduce = false;    // --overlap-grad-reduce
  bool overlap_param_gather = false;   // --overlap-param-gather
  int64_t ddp_bucket_size = 0;         // --ddp-bucket-size, elements (0: Megatron's max(40M, 1M x DP))
  int instances = 1;                   // --num-distributed-optimizer-instances: ZeRO shards over dp x cp / instances
  int64_t diloco_inner_steps = 0;      // --diloco-inner-steps (> 0: DiLoCo's outer state per rank)
  int diloco_delta_bits = 32;          // --diloco-delta-bits (< 32: packed deltas' buffers)
  // Across data centres without instances: one flat data-parallel group
  // whose collectives span the long haul (the cost model's comparison).
  bool flat_across_data_centers = false;
  int64_t recompute_num_layers = 0;    // --recompute-granularity full: blocks recomputed per model chunk
                                       // (capped at the chunk's; the search uses 0 or all)
  int64_t first_stage_layers = -1;     // --decoder-first-pipeline-num-layers (-1: even)
  int64_t last_stage_layers = -1;      // --decoder-last-pipeline-num-layers (-1: even)

  int world() const { return tp * cp * pp * dp; }
  int expert_tp() const { return etp > 0 ? etp : tp; }
  // Ranks holding the same experts (world / (ETP x EP x PP)).
  int expert_dp() const { return world() / (expert_tp() * ep * pp); }
  // Whether experts reduce over a group of their own ("expert_dp").
  bool expert_region() const { return ep > 1 || expert_tp() != tp; }
  // Micro-batches per step on each data-parallel rank.
  int64_t microbatches(const Job& job) const { return job.global_batch_size / (micro_batch_size * dp); }
  int64_t layers_per_virtual_stage(const Job& job) const { return job.model.num_layers / (pp * virtual_stages); }
  bool recompute() const { return recompute_num_layers > 0; }
  // "TP8 SP CP1 PP4 v2 DP16 mb1 ZeRO-1 recompute" style.
  std::string describe() const;
  // The `claw train` flags that select it.
  std::string flags(const Job& job) const;
};

// The layer split of a layout and the schedule config it runs (as the
// trainer makes them: virtual stages imply the interleaved schedule).
parallel::PipelineLayout pipeline_layout(const Job& job, const Layout& layout);
parallel::ScheduleConfig schedule_config(const Job& job, const Layout& layout, int chunks);

// Throws claw::Error naming the flags when the layout does not fit the job
// (sizes that do not divide, batch not splitting, TP over heads/groups/FFN,
// interleaving rules, CP over the sequence). world: the ranks it must fill
// (0: any).
void validate_layout(const Job& job, const Layout& layout, int world = 0);

}  // namespace claw::plan
