// Flags shared by the commands that run the generation engine (generate,
// chat, serve): the model to load and the engine's sizes, with vLLM's names.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "claw/serve/inference_model.h"
#include "claw/serve/engine.h"

namespace claw::cli {

struct EngineFlags {
  serve::InferenceModelOptions model;
  serve::EngineConfig engine;
  std::string kv_cache_memory;  // --kv-cache-memory: a size; empty: a quarter of the available memory
  bool no_prefix_caching = false;
  std::string kv_cache_dtype = "auto";  // --kv-cache-dtype
  // --cache-type-k/-v: llama.cpp's names for it (keys and values are held in
  // one type, so they must agree with each other and with --kv-cache-dtype).
  std::string cache_type_k, cache_type_v;
  int num_threads = 0;          // 0: the CPUs this process may use

  void add_to(CLI::App& app);
  // The engine's configuration for a loaded model: the KV blocks the memory
  // budget holds, but no more than max_num_seqs full-length sequences need.
  serve::EngineConfig resolve(const serve::InferenceModel& m) const;
  CpuCtx cpu() const;
  // This struct's flags as the run resolved them (the model's weight type,
  // the engine's sizes, the threads), for the printed configuration.
  std::vector<std::pair<std::string, std::string>> resolved(const serve::InferenceModel& m,
                                                            const serve::EngineConfig& e) const;
};

// "resolved config:" and one `  flag value` line per flag of the command,
// printed (by rank 0) once the model is loaded and before any request runs:
// what each flag came to (tests/e2e/cli/flags_apply.py checks every flag against it).
void print_resolved_config(const std::string& command, const std::vector<std::pair<std::string, std::string>>& lines);

// Tensor parallelism for the engine commands: under a launcher (mpirun,
// srun) every rank of the job holds 1/N of the model, N the world size
// (Megatron's column/row split); rank 0 takes the requests and schedules,
// the others run its steps (serve::Engine::follow). One process: no MPI.
struct EngineJob {
  std::unique_ptr<comm::World> world;
  std::unique_ptr<comm::ParallelState> parallel;  // null with one rank
  bool leader() const { return world->rank() == 0; }
  int size() const { return world->size(); }
  // The leader's engine sizes on every rank (resolve() reads this rank's
  // free memory); a broadcast, collective.
  serve::EngineConfig agree(serve::EngineConfig e) const;
};
// Starts the job and points `model` at its groups.
EngineJob start_engine_job(serve::InferenceModelOptions& model);

// --model, --dtype, --ckpt-step and the tokenizer flags.
void add_model_flags(CLI::App& app, serve::InferenceModelOptions& model);

// --temperature, --top-k, --top-p, --min-p, --seed.
void add_sampling_flags(CLI::App& app, serve::SamplingParams& p);

}  // namespace claw::cli
