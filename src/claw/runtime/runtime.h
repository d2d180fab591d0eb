// A job's runtime: everything that runs the model on this rank, built once
// from a RuntimeConfig and the launched ranks, the same way for every command
// (claw train, claw eval and those to come).
//
//   Runtime rt(cfg, world);        // collective: validates, joins the groups, builds the model
//   rt.model()                     // ModelChunks: this stage's chunks, engines, executor
//   AdamW opt(rt.model().optimizer_segments(), ...);   // training only
//   rt.check_memory(&opt);         // the allocation equals the planner's memory model
//   rt.load_checkpoint({...}, &opt);
//
// Building: the configuration is validated first (every rank validates the
// same one, so all refuse it together, before any allocation); then the
// rank grid's groups (ParallelState) and the tensor-parallel groups; then
// this rank's pipeline stage: a model chunk per virtual stage it holds (the
// whole model without pipeline parallelism), each initialised from the seed
// (by name and global index, so the same values at any layout) and given its
// data-parallel engine (always one, also on one rank: the ZeRO store layout
// and the reductions come from it); then the executor of the stage's
// schedule, which reserves the activations.
//
// What training adds (the optimizer, data, the loop, saving) is the
// trainer's; checkpoint loading is here since every command loads one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "claw/ckpt/shards.h"
#include "claw/comm/parallel_state.h"
#include "claw/comm/world.h"
#include "claw/kernels/cuda/context.h"
#include "claw/model/gpt.h"
#include "claw/model/tensor_parallel.h"
#include "claw/optim/adamw.h"
#include "claw/parallel/data_parallel.h"
#include "claw/plan/memory_model.h"
#include "claw/runtime/config.h"
#include "claw/runtime/model_chunks.h"

namespace claw::runtime {

// --load and its options.
struct LoadOptions {
  std::string root;        // --load: a checkpoint directory, or a root of iter_* directories
  int64_t step = -1;       // --ckpt-step: this iteration instead of the latest
  bool fallback = false;   // --load-fallback: an unreadable checkpoint falls back to the previous complete one
  bool optimizer = true;   // load AdamW's moments when the checkpoint has them (false: --no-load-optim)
};

struct LoadedCheckpoint {
  bool loaded = false;        // false: nothing saved yet under the root
  std::string dir;            // the checkpoint read
  int64_t iteration = 0;
  bool optimizer = false;     // AdamW's moments were loaded
  nlohmann::json state;       // the trainer's state recorded with it (Metadata::state)
  uint64_t bytes_read = 0;    // by this rank
  uint64_t total_bytes = 0;   // of the checkpoint's chunks
};

class Runtime {
 public:
  // Collective over `world`. Throws claw::Error naming the flag when the
  // configuration is invalid (before any allocation).
  Runtime(RuntimeConfig cfg, comm::World& world);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const RuntimeConfig& config() const { return cfg_; }
  comm::World& world() const { return world_; }
  comm::ParallelState& parallel_state() const { return *pstate_; }
  const CpuCtx& cpu() const { return cpu_; }
  // The GPU the model runs on (--device cuda), or null.
  const kernels::cuda::Device* device() const { return device_.get(); }
  // Where arenas of this run's tensors live (the GPU's memory, or the host's).
  const MemoryResource& memory() const;
  ModelChunks& model() { return *model_; }
  const ModelChunks& model() const { return *model_; }
  // The first chunk's data-parallel engine (communication wait times).
  parallel::DataParallel& first_dp() const { return *dps_.front(); }
  // DiLoCo: every replica to the same values (DataParallel::synchronize_replicas).
  void synchronize_replicas() {
    for (auto& dp : dps_) dp->synchronize_replicas();
  }

  // Checks every arena (and the optimizer's state, if given) against the
  // planner's memory model for this rank's stage, and logs the total.
  void check_memory(const optim::AdamW* optimizer) const;

  // This rank's shards of the checkpoint tensors (ckpt/shards.h): the
  // chunks' values, and the optimizer's moments if `optimizer` is given.
  std::vector<ckpt::Shard> checkpoint_shards(const optim::AdamW* optimizer) const;
  // Collective: reads a checkpoint (any layout) into the chunks and, if
  // given and the options and checkpoint allow, the optimizer's moments (a
  // parameter that trains now but was frozen when it was saved has none
  // there: its moments stay zero, as in a fresh run, and a line says so). The
  // training state it recorded is the caller's to restore. A root with
  // nothing saved yet is a fresh start (Megatron's behaviour, which restart
  // loops rely on: --save and --load the same directory).
  LoadedCheckpoint load_checkpoint(const LoadOptions& opts, optim::AdamW* optimizer);
  // With --device cuda a checkpoint goes through host mirrors of the device
  // arenas it reads (the chunks' values, the optimizer's moments):
  // checkpoint_shards() points into the mirrors, stage_to_host() refreshes
  // them before a save (blocking: one copy per arena), and load_checkpoint()
  // copies what it read back to the device. Nothing to do on the CPU.
  void stage_to_host(const optim::AdamW* optimizer) const;

 private:
  // The constructor's reports: the hierarchical reduction's traffic (several
  // instances), the arenas allocated (for check_memory), the pipeline stage.
  void log_hierarchical_reduction(int instances, int ranks_per_instance) const;
  void record_allocation();
  void log_pipeline(const parallel::ScheduleConfig& schedule, int stage, const std::string& ranges) const;
  std::vector<ckpt::Shard> shards_to_load(const ckpt::Metadata& meta, const std::string& dir,
                                          const optim::AdamW* optimizer, const std::vector<std::string>& all_params) const;

  RuntimeConfig cfg_;
  comm::World& world_;
  CpuCtx cpu_;
  std::unique_ptr<kernels::cuda::Device> device_;  // declared before everything allocated on it
  std::unique_ptr<comm::ParallelState> pstate_;
  std::unique_ptr<model::TpGroups> tp_groups_;
  // This stage's chunks and their engines (declared before model_, which
  // refers to them, so they outlive it).
  std::vector<std::unique_ptr<model::GPT>> chunks_;
  std::vector<std::unique_ptr<parallel::DataParallel>> dps_;
  std::unique_ptr<ModelChunks> model_;
  // Host mirrors of device arenas, made on first use (checkpoints on a GPU).
  struct Mirror {
    const uint8_t* device = nullptr;
    size_t bytes = 0;
    Arena host;
  };
  mutable std::vector<Mirror> mirrors_;
  std::vector<std::pair<const void*, size_t>> device_arenas(const optim::AdamW* optimizer) const;
  void ensure_mirrors(const optim::AdamW* optimizer) const;
  void* host_mirror(const void* device_ptr) const;
  void stage_from_host(const optim::AdamW* optimizer) const;
  plan::StageMemory planned_;
  plan::ArenaBytes allocated_;  // optimizer: 0, it is not the runtime's
};

}  // namespace claw::runtime
