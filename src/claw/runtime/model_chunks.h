// The model as this rank holds it, and how a step runs over it.
//
// A rank holds one pipeline stage: its model chunks (model::GPT each, in
// virtual-stage order), each chunk's data-parallel engine, and the executor
// that runs the stage's schedule over them (parallel/pipeline_executor.h).
// Without pipeline parallelism this is a one-stage pipeline of one chunk,
// the whole model, whose 1F1B list is "forward k, backward k" for each
// micro-batch with nothing sent: the same code path, not a second one. The
// engines' hooks then see what a plain gradient-accumulation loop gives them,
// so --overlap-grad-reduce and ZeRO 2/3 work there as before (with several
// stages the configuration refuses them: ParallelConfig::validate).
//
// The step protocol (train/step.h) calls begin_step, runs the executor,
// then finish_grad_sync, reduce_grad_sum_squares, the optimizer and
// after_optimizer_step. Non-owning: the chunks and engines outlive it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "claw/comm/group.h"
#include "claw/model/gpt.h"
#include "claw/parallel/data_parallel.h"
#include "claw/parallel/pipeline_executor.h"
#include "claw/parallel/pipeline_schedule.h"

namespace claw::runtime {

class ModelChunks {
 public:
  // One pipeline stage. chunks[c]: virtual stage c p + (pp's rank); dps:
  // empty (one data-parallel rank, no engine) or one engine per chunk;
  // embedding: the group of the first and last stage (tied embeddings).
  // Reserves each chunk's activations for micro-batches of [B, T].
  ModelChunks(std::vector<model::GPT*> chunks, std::vector<parallel::DataParallel*> dps, comm::Group& pp,
              comm::Group& embedding, const parallel::ScheduleConfig& schedule, int64_t B, int64_t T,
              model::Recompute recompute = {});
  // The whole model on this rank (no pipeline parallelism), `micro_batches`
  // of [B, T] per step; dp: its engine, or null.
  ModelChunks(model::GPT& model, parallel::DataParallel* dp, int64_t micro_batches, int64_t B, int64_t T,
              model::Recompute recompute = {});
  ModelChunks(const ModelChunks&) = delete;
  ModelChunks& operator=(const ModelChunks&) = delete;
  ~ModelChunks();

  const std::vector<model::GPT*>& chunks() const { return chunks_; }
  model::GPT& first() const { return *chunks_.front(); }
  model::GPT& last() const { return *chunks_.back(); }
  const std::vector<parallel::DataParallel*>& dps() const { return dps_; }
  // The first chunk's engine (null without one): sums over the data-parallel group.
  parallel::DataParallel* dp() const { return dps_.empty() ? nullptr : dps_.front(); }
  parallel::PipelineExecutor& executor() { return *exec_; }
  const parallel::PipelineExecutor& executor() const { return *exec_; }
  comm::Group& pp() const { return *pp_; }
  comm::Group& embedding() const { return *embedding_; }
  // Micro-batches per step the schedule runs.
  int micro_batches() const { return exec_->schedule().config.microbatches; }

  // Zeroes the gradients (through the engines, which also reset their buckets).
  void begin_step();
  // After the last backward: sums the tied word embeddings' two copies over
  // the first and last stage, then completes the engines' gradient reductions.
  void finish_grad_sync();
  // After the optimizer: the engines gather updated values (ZeRO 1/2), and
  // each chunk's compute copy of its parameters is refreshed from them.
  void after_optimizer_step(const CpuCtx& cpu);
  // Delayed FP8 scaling, after the last backward of a step: each FP8
  // layer's amaxes of the step reduced (max) over the ranks holding the layer
  // (tp x cp, then data-parallel), pushed into its history, next scales set
  // (model/fp8.h). Throws NonFiniteError naming a layer whose amax is NaN/inf.
  void fp8_step_end();
  // Every block's FP8 scaling state on every rank (collective over the
  // pipeline group): [num_layers][slots][Fp8Linear::scaling_state_size],
  // a slot being a layer's place among its block's FP8 layers, each filled
  // by the one stage holding the block (the others add zeros). `slots`:
  // fp8_slots_per_block(), also collective.
  int64_t fp8_slots_per_block() const;
  std::vector<double> fp8_scaling_state(int64_t num_layers, int64_t slots, int64_t history_len) const;
  void load_fp8_scaling_state(const std::vector<double>& state, int64_t slots, int64_t history_len);
  // Reduces n values of chunk c's layers over the ranks holding the same
  // layers: tp x cp, then data-parallel (FP8 amaxes).
  void reduce_over_layer_replicas(size_t c, void* buf, int64_t n, DType dt, comm::ReduceOp op) const;
  // This stage's MoE routing statistics since the last call (model/moe.h).
  model::MoeStats take_moe_stats();
  // Sums over the data-parallel group (this rank's value without an engine).
  double dp_sum(double v) const;
  // Sums over the pipeline stages (this stage's value with one stage).
  double pp_sum(double v) const;
  // The global gradient norm's sum of squares, from this rank's part (the
  // optimizer's segments: AdamW::grad_sum_squares), reduced over the groups
  // the parameters are split across, in this order: data-parallel ranks when
  // the optimizer is sharded (each rank's segments cover only its shard;
  // unsharded, the reduced gradients are whole everywhere), pipeline stages
  // (each holds other layers), tensor-parallel ranks (shards hold disjoint
  // parts; replicated copies count on one rank, ParamSpec::primary).
  // Experts reduced over their own group ("expert_dp": expert parallelism)
  // come as `expert`: summed over expert-data-parallel ranks when sharded,
  // then over the expert-parallel ranks (each holds other experts) and the
  // pipeline stages; never over TP (experts are whole on each rank).
  double reduce_grad_sum_squares(double local, double expert = 0) const;
  // The first non-finite parameter gradient on this rank, "name (gradient)"; empty if none.
  std::string first_non_finite_grad(const CpuCtx& cpu) const;

  // Every chunk's AdamW segments, in chunk order (the whole store of a chunk without an engine).
  std::vector<model::Segment> optimizer_segments() const;
  std::vector<const model::ParamStore*> stores() const;

 private:
  void build(const parallel::ScheduleConfig& schedule, int64_t B, int64_t T, model::Recompute recompute);
  std::vector<model::GPT*> chunks_;
  std::vector<parallel::DataParallel*> dps_;
  std::unique_ptr<comm::Group> own_pp_, own_embedding_;  // one-rank groups of a whole model
  comm::Group* pp_ = nullptr;
  comm::Group* embedding_ = nullptr;
  std::unique_ptr<parallel::PipelineExecutor> exec_;
};

}  // namespace claw::runtime
