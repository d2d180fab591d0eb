// The memory model: what one rank holds during a training step, per
// pipeline stage. It is built from the functions the trainer allocates with,
// called on a shape-only model (GPT with StoreOptions::allocate false and
// comm::ShapeGroup groups), so for claw's own runs the model is the
// allocation, to the byte (the trainer checks that it is):
//
//   parameters, gradients    ParamStore::layout (ZeRO-3 / ZeRO-2 shard them over DP; frozen
//                            parameters (Job::freeze) have values only)
//   optimizer state          DataParallel::plan_memory: AdamW's two moments (and the
//                            master copy under mixed precision) of the rank's segments
//   ZeRO-2/3 buffers         DataParallel::plan_memory: gradient staging, gathered units
//   activations              model::plan_activations for the micro-batch, with one set per
//                            micro-batch in flight on the stage under the schedule
//                            (PipelineExecutor::slots_needed walks the action list)
//   communication buffers    the collective library's temporaries for the largest gradient
//                            collective (DataParallel::plan_memory's buckets and pieces) times
//                            the device's collective_temp factors (measured for OpenMPI 4.1)
//   runtime                  the catalog's per-device overhead
//
// The per-layer activation sizes follow Korthikanti et al. 2022 ("Reducing
// Activation Recomputation in Large Transformer Models", section 4): TP
// divides the attention and MLP internals, SP the rest, full recompute keeps
// only each block's input. The in-flight count of 1F1B is min(p - s, m) on
// stage s (Narayanan et al. 2021, section 2.2.1), more for interleaving
// (Megatron-Core's warm-up count); the schedule walk gives both exactly.
// Mixed precision scales claw's fp32 sizes by the precision's bytes.
// Context parallelism is modelled as each rank holding T / CP tokens' activations.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "claw/plan/hardware.h"
#include "claw/plan/layout.h"

namespace claw::plan {

// Exact fp32 bytes of claw's arenas on one rank of a stage.
struct ArenaBytes {
  size_t values = 0, grads = 0, optimizer = 0, gathered = 0, staging = 0, activations = 0;
  size_t total() const { return values + grads + optimizer + gathered + staging + activations; }
};

struct StageMemory {
  int stage = 0;
  ArenaBytes arenas;            // claw's fp32 arenas (what the CPU trainer allocates)
  int64_t param_elements = 0;   // parameters this rank's chunks hold (before ZeRO-3 sharding)
  int64_t frozen_elements = 0;  // of which frozen: no gradients, no optimizer state
  std::vector<int> slots;       // activation sets per chunk
  // Bytes at the layout's precision.
  double params = 0, grads = 0, optimizer = 0, zero_buffers = 0, activations = 0, comm_buffers = 0, runtime = 0;
  double total() const { return params + grads + optimizer + zero_buffers + activations + comm_buffers + runtime; }
};

// One rank of pipeline stage `stage`. device: its runtime overhead and
// collective temporaries (none without one: claw's arenas alone). dp_rank:
// the data-parallel rank (of dp x cp) whose ZeRO shard is counted; the first
// holds the largest when the shards do not divide evenly.
StageMemory stage_memory(const Job& job, const Layout& layout, int stage, const Precision& prec,
                         const Device* device = nullptr, int dp_rank = 0);
// The stage that needs the most memory (the first and last differ by the
// embedding and output layer and by micro-batches in flight; with uneven
// stages every stage is checked).
StageMemory peak_memory(const Job& job, const Layout& layout, const Precision& prec, const Device* device = nullptr);

// "params 1.2 GiB + grads ... + activations ... = total" for tables.
std::string describe(const StageMemory& m);

}  // namespace claw::plan
