// The memory plan printed before step 1: parameters, gradients, optimizer
// state and activations, each from the same layout functions the allocators
// use (ParamStore, AdamW, plan_activations), so the printed plan is what
// gets allocated. Frozen parameters (--freeze) show in the parameters row;
// they hold no gradients and no optimizer state.
#pragma once

#include "claw/kernels/cuda/context.h"

#include <cstddef>
#include <string>

#include "claw/core/arena.h"
#include "claw/model/config.h"
#include "claw/parallel/data_parallel.h"
#include "claw/plan/memory_model.h"

namespace claw::comm {
class Group;
}

namespace claw::runtime {

struct MemoryPlan {
  size_t params = 0, grads = 0, optimizer = 0, activations = 0;
  size_t gathered = 0, staging = 0;  // ZeRO-3 gathered units, ZeRO-2/3 gradient staging
  int zero_stage = 0, dp = 1;
  size_t per_layer_activations = 0;  // one (not recomputed) block's saved tensors
  size_t recompute_region = 0;       // shared by recomputed blocks (they keep only their output)
  size_t half_work = 0;              // 16-bit activations: the fp32 working region stored blocks share
  DType activation_dtype = DType::f32;  // the stored blocks' saved tensors
  size_t scratch = 0;                // shared buffers (incl. the logits chunk)
  int64_t frozen_params = 0;         // elements of frozen parameters (no gradients, no optimizer state)
  DType master = DType::f32;         // the stored master weights (--main-params-dtype)
  size_t total() const { return params + grads + optimizer + gathered + staging + activations; }
};

// m: the data-parallel engine's buffers (DataParallel::memory()); acts: plan_activations(cfg, B, T).
MemoryPlan make_memory_plan(const parallel::DataParallelMemory& m, int zero_stage, int dp, const ArenaPlan& acts);
std::string format_memory_plan(const MemoryPlan& p, const model::ModelConfig& cfg, int64_t num_params, int64_t B,
                               int64_t T, int64_t recomputed_layers);

// Refuses (claw::Error), before anything is allocated, a run whose ranks on
// this node plan more memory than the node can still give
// (claw::available_memory, with a margin for the model's error). `mine` is
// this rank's plan (plan::stage_memory with the CPU device's overhead); the
// ranks of one host add theirs up over `world` (a collective: every rank calls it).
void check_node_memory(const plan::StageMemory& mine, comm::Group& world);
// The same against a GPU's free memory (--device cuda): the arenas live there.
void check_device_memory(const plan::StageMemory& mine, const kernels::cuda::DeviceInfo& device);

}  // namespace claw::runtime
