// The training loop's observers: what happens around each step besides the
// step itself (train/step.h), one small object each. Trainer::run calls, for
// every step, begin_step on each observer, runs the step, then end_step on
// each in order, and finish on each after the last step. Every observer
// runs on every rank in the same order, so the collectives inside them
// (timings, straggler reports, signals) match up across the job.
//
//   Throughput         step time (the slowest rank's), tokens/s, MFU against
//                      the measured peak, the metrics record's core fields
//   StragglerReport    the ranks' own work compared every N steps
//   PipelineTiming     per-stage wall, idle and pass times (PP > 1)
//   SdcCheck           the replicas' weight hashes every N steps
//   StopSignals        SIGTERM/SIGUSR1 and --exit-interval: save and stop
//   CheckpointCadence  --save-interval, the saves' cost and outcome
//   Progress           the metrics file, TensorBoard and the progress lines
//   StepHook           a function of the trainer's own (evaluation, DPO and
//                      MoE metrics)
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "claw/ckpt/checkpoint.h"
#include "claw/comm/watchdog.h"
#include "claw/kernels/cpu/peak.h"
#include "claw/model/config.h"
#include "claw/runtime/runtime.h"
#include "claw/train/config.h"
#include "claw/train/metrics.h"
#include "claw/train/sdc.h"
#include "claw/train/step.h"

namespace claw::train {

struct TrainResult;

// The hang watchdog's sections and a `claw launch` supervisor's heartbeats
// (comm/watchdog.h), if either is on: the loop and the observers say which
// section of which step they are in.
class Sections {
 public:
  Sections(const TrainConfig& cfg, int rank, int world_size);
  void enter(comm::Section s) {
    if (watchdog_) watchdog_->enter(s, step_);
  }
  void set_step(int64_t step) { step_ = step; }
  comm::Watchdog* watchdog() { return watchdog_ ? &*watchdog_ : nullptr; }

 private:
  std::optional<comm::Watchdog> watchdog_;
  int64_t step_ = 0;
};

// One step as the observers see it: what the step gave, and what they add.
struct StepState {
  int64_t step = 0;  // from 1
  bool last = false;  // the run's last step
  double lr = 0;
  StepResult result;
  double local_seconds = 0;  // this rank's wall time of the step
  double own_seconds = 0;    // of which not blocked in communication
  double seconds = 0;        // the step's time: the slowest rank's (Throughput)
  nlohmann::json rec;        // the metrics record
  bool exiting = false;      // save and stop after this step (StopSignals)
  int signal = 0;            // the signal the ranks agreed on (0: none)
};

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void begin_step(StepState&) {}
  virtual void end_step(StepState&) {}
  virtual void finish(TrainResult&) {}
};

class Throughput : public StepObserver {
 public:
  // Measures or reads the peak MFU is quoted against (the GPU's BF16 GEMM
  // rate, or the calibrated fp32 GEMM peak of every rank) and logs it.
  Throughput(const model::ModelConfig& model, const TrainConfig& cfg, runtime::Runtime& runtime, int world_size);
  void end_step(StepState& s) override;
  double tokens_per_step() const { return tokens_per_step_; }
  double flops_per_step() const { return flops_per_step_; }
  double mfu(double seconds) const { return flops_per_step_ / seconds / (peak_ * 1e9); }

 private:
  const TrainConfig& cfg_;
  runtime::Runtime& runtime_;
  int world_size_;
  double tokens_per_step_, flops_per_step_;
  double peak_;  // GFLOP/s of the whole job
  kernels::PeakKey peak_key_;
  kernels::PeakCacheOptions peak_cache_;
};

class StragglerReport : public StepObserver {
 public:
  StragglerReport(const TrainConfig& cfg, comm::Group& everyone) : cfg_(cfg), everyone_(everyone) {}
  void end_step(StepState& s) override;

 private:
  const TrainConfig& cfg_;
  comm::Group& everyone_;
  double own_s_ = 0;  // this rank's own work since the last report
};

class PipelineTiming : public StepObserver {
 public:
  explicit PipelineTiming(runtime::Runtime& runtime) : runtime_(runtime) {}
  void end_step(StepState& s) override;

 private:
  runtime::Runtime& runtime_;
};

class SdcCheck : public StepObserver {
 public:
  SdcCheck(SdcMonitor& sdc, runtime::Runtime& runtime, Sections& sections)
      : sdc_(sdc), runtime_(runtime), sections_(sections) {}
  void end_step(StepState& s) override;

 private:
  SdcMonitor& sdc_;
  runtime::Runtime& runtime_;
  Sections& sections_;
};

class StopSignals : public StepObserver {
 public:
  StopSignals(const CheckpointConfig& ckpt, comm::Group& everyone) : ckpt_(ckpt), everyone_(everyone) {}
  void end_step(StepState& s) override;

 private:
  const CheckpointConfig& ckpt_;
  comm::Group& everyone_;
};

class CheckpointCadence : public StepObserver {
 public:
  // `save(iteration)` writes a checkpoint through `saver` (the trainer's).
  CheckpointCadence(const CheckpointConfig& ckpt, ckpt::Saver& saver, Sections& sections, int64_t last_saved,
                    std::function<void(int64_t)> save)
      : ckpt_(ckpt), saver_(saver), sections_(sections), last_saved_(last_saved), save_(std::move(save)) {}
  // Inside the step, before the update: an asynchronous save's snapshot
  // still reading the values and moments must be done.
  void before_update();
  void end_step(StepState& s) override;
  // A step whose non-finite result reproduced: the state before it is kept.
  void save_before_failing(int64_t step);
  // Waits for the last save; fails if it did not commit.
  void finish(TrainResult& r) override;

 private:
  const CheckpointConfig& ckpt_;
  ckpt::Saver& saver_;
  Sections& sections_;
  int64_t last_saved_;
  std::function<void(int64_t)> save_;
  double blocked_s_ = 0;  // this step's time in the saver
  std::optional<std::pair<int64_t, std::string>> failed_;  // the latest save that failed
};

class Progress : public StepObserver {
 public:
  // `resumed_at`: the iteration a --load resumed from (0: a fresh run), for the metrics file.
  Progress(const TrainConfig& cfg, int rank, const Throughput& throughput, bool dpo, int64_t resumed_at);
  void end_step(StepState& s) override;

 private:
  const TrainConfig& cfg_;
  const Throughput& throughput_;
  bool dpo_;
  MetricsWriter metrics_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

class StepHook : public StepObserver {
 public:
  explicit StepHook(std::function<void(StepState&)> end) : end_(std::move(end)) {}
  void end_step(StepState& s) override { end_(s); }

 private:
  std::function<void(StepState&)> end_;
};

}  // namespace claw::train
