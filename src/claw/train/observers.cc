#include "claw/train/observers.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "claw/core/clock.h"
#include "claw/core/error.h"
#include "claw/core/exit_signal.h"
#include "claw/core/log.h"
#include "claw/core/memory.h"
#include "claw/kernels/cpu/bf16_gemm.h"
#include "claw/kernels/cuda/context.h"
#include "claw/train/progress.h"
#include "claw/train/trainer.h"

namespace claw::train {

namespace {
using clock = std::chrono::steady_clock;

// The forward GEMMs of one micro-batch on one tensor-parallel rank (QKV,
// attention output, MLP in and out, one LM-head chunk of rows): the shapes
// the MFU peak is calibrated on, besides 2048^3.
std::vector<kernels::GemmShape> model_gemm_shapes(const model::ModelConfig& m, int64_t rows, int tp) {
  const int64_t C = m.hidden_size, D = m.head_dim(), F = m.ffn() / tp;
  const int64_t qkv = (m.num_attention_heads + 2 * m.kv_heads()) * D / tp;
  return {{rows, qkv, C}, {rows, C, m.num_attention_heads * D / tp},
          {rows, m.gated_mlp() ? 2 * F : F, C}, {rows, C, F},
          {std::min<int64_t>(rows, 256), m.padded_vocab_size(tp) / tp, C}};
}

void log_precision(const model::ModelConfig& m, const CpuCtx& cpu) {
  if (const DType g = m.gemm_dtype; (g != DType::f32 || m.fp8.enabled()) && !cpu.gpu)
    log::info("train", "precision: {} GEMM operands{}; bf16 and FP8 values multiply on {}", dtype_name(g),
              m.fp8.enabled() ? " (FP8 in the FP8 blocks)" : "", kernels::bf16_gemm_kernel());
  const model::Fp8Config& f = m.fp8;
  if (!f.enabled()) return;
  std::vector<int64_t> fp8_blocks;
  for (int64_t l = 0; l < m.num_layers; ++l)
    if (f.layer_in_fp8(l, m.num_layers)) fp8_blocks.push_back(l);
  log::info("train", "fp8: {} format ({}), {} recipe{}; blocks in FP8: {} of {} ({}){}, the rest in {}",
            f.recipe == "nvfp4" ? "nvfp4" : f.format,
            f.recipe == "nvfp4"    ? "E2M1 in blocks of 16 with E4M3 scales and an fp32 tensor scale"
            : f.format == "hybrid" ? "E4M3 forward, E5M2 gradients"
                                   : "E4M3 throughout",
            f.recipe,
            f.recipe == "delayed"
                ? fmt::format(" (amax history {}, {}, margin {})", f.amax_history_len, f.amax_compute_algo, f.margin)
                : std::string(),
            fp8_blocks.size(), m.num_layers, fp8_blocks.empty() ? "none" : fmt::format("{}", fmt::join(fp8_blocks, ",")),
            f.layer_selection == "auto" ? " before the automatic selection" : "", dtype_name(m.gemm_dtype));
}
// The arithmetic a step's GEMMs run in, which keys the cached peak its
// speed may raise (kernels/cpu/peak.h).
std::string gemm_arithmetic(const model::ModelConfig& m) {
  if (m.fp8.enabled())
    return fmt::format("{}-{}+{}", m.fp8.recipe == "nvfp4" ? "nvfp4" : "fp8-" + m.fp8.format, m.fp8.recipe,
                       dtype_name(m.gemm_dtype));
  if (m.gemm_dtype != DType::f32) return fmt::format("{}-{}", dtype_name(m.gemm_dtype), kernels::bf16_gemm_kernel());
  return "fp32";
}
}  // namespace

Sections::Sections(const TrainConfig& cfg, int rank, int world_size) {
  if ((cfg.watchdog.hang_detection && world_size > 1) || !cfg.watchdog.supervisor.empty())
    watchdog_.emplace(cfg.watchdog, rank, world_size);
}

// ---- Throughput -------------------------------------------------------------------

Throughput::Throughput(const model::ModelConfig& model, const TrainConfig& cfg, runtime::Runtime& runtime,
                       int world_size)
    : cfg_(cfg),
      runtime_(runtime),
      world_size_(world_size),
      tokens_per_step_(static_cast<double>(cfg.global_batch_size * cfg.seq_length)),
      flops_per_step_(model.flops_per_token(cfg.seq_length) * tokens_per_step_),
      peak_(cfg.peak_gflops * world_size),
      peak_key_(kernels::PeakKey::current(runtime.cpu().num_threads, gemm_arithmetic(model))),
      peak_cache_{.dir = cfg.peak_cache_dir} {
  comm::ParallelState& ps = runtime_.parallel_state();
  const CpuCtx& cpu = runtime_.cpu();
  // MFU is against the whole job's peak: every rank measures SGEMM at once
  // (sharing the node as training will) and the figures add up.
  if (peak_ == 0 && runtime_.device()) {
    // On a GPU: its measured BF16 GEMM rate (cuBLAS, fp32 accumulation), the
    // denominator MFU is quoted against whatever the training precision.
    const GpuCtx& g = runtime_.device()->ctx();
    peak_ = kernels::cuda::measure_bf16_gemm_tflops(g) * 1e3;
    log::info("train", "MFU denominator: {:.1f} TFLOP/s, the measured BF16 GEMM peak of {} (8192^3, best of 20; "
              "fp32 GEMM without TF32 measures {:.1f} TFLOP/s)",
              peak_ / 1e3, runtime_.device()->info().name, kernels::cuda::measure_fp32_gemm_tflops(g) * 1.0);
  }
  if (peak_ == 0) {
    const kernels::Peak mine = kernels::calibrated_gemm_peak(
        peak_key_,
        model_gemm_shapes(model, cfg.micro_batch_size * cfg.seq_length / ps.cp().size(), ps.tp().size()),
        peak_cache_);
    peak_ = ps.world().all_reduce_value(mine.gflops);
    log::info("train", "MFU denominator: {:.1f} GFLOP/s per rank on {} thread(s) x {} rank(s), fp32 GEMM {}{}",
              mine.gflops, cpu.num_threads, world_size, mine.provenance,
              peak_key_.arithmetic == "fp32" ? "" : fmt::format(" (the entry of {} steps)", peak_key_.arithmetic));
  }
  log_precision(model, cpu);
}

void Throughput::end_step(StepState& s) {
  // Spread of step times over the ranks (a straggler shows as max >> min);
  // the step's time is the slowest rank's.
  double dt = s.local_seconds, dt_min = dt, dt_max = dt;
  if (world_size_ > 1) {
    comm::Group& everyone = runtime_.parallel_state().world();
    dt_min = everyone.all_reduce_value(dt, comm::ReduceOp::min);
    dt_max = everyone.all_reduce_value(dt, comm::ReduceOp::max);
    dt = dt_max;
  }
  s.seconds = dt;
  // A step faster than the peak means the peak was measured low: raise the
  // cached one so MFU stays a fraction of a true upper bound.
  if (cfg_.peak_gflops == 0 && !runtime_.device() && flops_per_step_ / dt / 1e9 > peak_)
    peak_ = world_size_ * kernels::raise_gemm_peak(peak_key_, flops_per_step_ / dt / 1e9 / world_size_,
                                                   fmt::format("training step {}", s.step), peak_cache_);
  parallel::DataParallel& dp = runtime_.first_dp();
  s.rec = {{"step", s.step},
           {"loss", s.result.loss},
           {"lr", s.lr},
           {"grad_norm", s.result.grad_norm},
           {"tokens_per_s", tokens_per_step_ / dt},
           {"mfu", mfu(dt)},
           {"mem_bytes", peak_rss_bytes()},
           {"step_ms", dt * 1e3},
           {"step_ms_min", dt_min * 1e3},
           {"step_ms_max", dt_max * 1e3},
           {"grad_comm_wait_ms", dp.last_grad_wait_s() * 1e3},
           {"param_gather_wait_ms", dp.last_gather_wait_s() * 1e3},
           {"tokens", static_cast<int64_t>(tokens_per_step_) * s.step}};
}

// ---- StragglerReport ----------------------------------------------------------------

// A rank's own time in a step is its wall time less the time it sat blocked
// in communication (waiting for the others), so a slow rank shows a long own
// time and the ranks that wait for it short ones. Summed over
// --straggler-report-interval steps and compared across the ranks.
void StragglerReport::end_step(StepState& s) {
  own_s_ += s.own_seconds;
  const int64_t n = cfg_.straggler_report_interval;
  if (n <= 0 || everyone_.size() <= 1 || s.step % n != 0) return;
  std::vector<double> own(static_cast<size_t>(everyone_.size()));
  everyone_.all_gather(&own_s_, own.data(), 1, DType::f64);
  own_s_ = 0;
  std::vector<double> sorted = own;
  std::sort(sorted.begin(), sorted.end());
  const size_t m = sorted.size();
  const double median = m % 2 ? sorted[m / 2] : (sorted[m / 2 - 1] + sorted[m / 2]) / 2;
  std::vector<int> slow;
  std::string speeds;
  double slowest = 1;
  for (size_t k = 0; k < m; ++k) {
    const double speed = own[k] > 0 ? median / own[k] : 1.0;  // relative to the median rank
    slowest = std::min(slowest, speed);
    if (speed < cfg_.straggler_threshold) slow.push_back(static_cast<int>(k));
    speeds += fmt::format("{}{:.2f}", k ? " " : "", speed);
  }
  s.rec["min_relative_speed"] = slowest;
  s.rec["straggler_ranks"] = slow;
  if (everyone_.rank() == 0)  // the same verdict on every rank
    for (int k : slow)
      log::warn("straggler", "rank {} ran at {:.2f} of the median rank's speed over steps {}-{} ({:.3f} s of its own "
                "work against the median's {:.3f} s; threshold {}); every rank's relative speed: {}",
                k, median / own[static_cast<size_t>(k)], s.step + 1 - n, s.step, own[static_cast<size_t>(k)], median,
                cfg_.straggler_threshold, speeds);
}

// ---- PipelineTiming -----------------------------------------------------------------

// Per-stage pipeline timing (gathered over the pipeline group): the measured
// idle time next to what the simulator predicts from the measured costs
// (bench/drivers/bench_pipeline.py).
void PipelineTiming::end_step(StepState& s) {
  comm::Group& pp = runtime_.parallel_state().pp();
  if (pp.size() <= 1) return;
  const parallel::PipelineExecutor::StepTiming& t = runtime_.model().executor().last_timing();
  constexpr int kFields = 5;
  std::vector<double> mine = {t.wall_s * 1e3, t.idle_s() * 1e3, t.forward_s * 1e3 / std::max(1, t.forwards),
                              t.backward_s * 1e3 / std::max(1, t.backwards), t.weight_s * 1e3 / std::max(1, t.weights)};
  std::vector<double> all(kFields * pp.size());
  pp.all_gather(mine.data(), all.data(), kFields, DType::f64);
  const char* names[kFields] = {"pp_step_ms", "pp_idle_ms", "pp_forward_ms", "pp_backward_ms", "pp_weight_ms"};
  for (int f = 0; f < kFields; ++f) {
    std::vector<double> per_stage;
    for (int st = 0; st < pp.size(); ++st) per_stage.push_back(all[kFields * st + f]);
    s.rec[names[f]] = per_stage;
  }
}

// ---- SdcCheck -----------------------------------------------------------------------

void SdcCheck::end_step(StepState& s) {
  sections_.enter(comm::Section::logging);
  try {
    sdc_.check_replicas(runtime_.model(), s.step);
  } catch (const NonFiniteError& e) {
    if (comm::Watchdog* w = sections_.watchdog()) w->report_suspects(sdc_.suspect_hosts(), e.what());
    throw;
  }
  if (sdc_.reruns() > 0) {
    s.rec["sdc_reruns"] = sdc_.reruns();
    s.rec["sdc_transient_faults"] = sdc_.transient();
  }
}

// ---- StopSignals --------------------------------------------------------------------

// A signal reaches the ranks at different moments: they agree after each
// step (the largest signal number any of them saw) and stop together.
void StopSignals::end_step(StepState& s) {
  s.signal = static_cast<int>(everyone_.all_reduce_value(ExitSignalGuard::received(), comm::ReduceOp::max));
  s.exiting = !s.last && ((ckpt_.exit_interval > 0 && s.step % ckpt_.exit_interval == 0) || s.signal != 0);
}

// ---- CheckpointCadence --------------------------------------------------------------

void CheckpointCadence::before_update() {
  const auto t = clock::now();
  saver_.wait_snapshot();
  blocked_s_ += seconds_since(t);
}

void CheckpointCadence::end_step(StepState& s) {
  sections_.enter(comm::Section::checkpoint);
  const auto t = clock::now();
  saver_.poll();
  if ((ckpt_.save_interval > 0 && s.step % ckpt_.save_interval == 0) || s.last || s.exiting) save_(last_saved_ = s.step);
  blocked_s_ += seconds_since(t);
  // What checkpointing cost this step (bench/drivers/bench_ckpt.py), and the
  // background work of a save committed in it.
  s.rec["ckpt_blocked_ms"] = blocked_s_ * 1e3;
  if (const auto c = saver_.take_committed()) {
    s.rec["ckpt_committed"] = c->first;
    s.rec["ckpt_bytes"] = c->second.bytes;
    s.rec["ckpt_snapshot_s"] = c->second.snapshot_s;
    s.rec["ckpt_write_s"] = c->second.write_s;
  }
  if ((failed_ = saver_.take_failed())) s.rec["ckpt_failed"] = failed_->first;
  blocked_s_ = 0;
  sections_.enter(comm::Section::logging);
}

void CheckpointCadence::save_before_failing(int64_t step) {
  if (step <= last_saved_) return;
  log::info("sdc", "saving iteration {} (the state before step {}) before ending", step, step + 1);
  sections_.enter(comm::Section::checkpoint);
  save_(step);
  saver_.finish();
}

void CheckpointCadence::finish(TrainResult& r) {
  sections_.enter(comm::Section::checkpoint);
  const auto t = clock::now();
  saver_.finish();
  if (const auto c = saver_.take_committed())
    log::info("ckpt", "waited {:.3f} s at exit for the save of iteration {}", seconds_since(t), c->first);
  if (auto f = saver_.take_failed()) failed_ = std::move(f);
  if (failed_ && failed_->first == r.steps)
    fail("the last checkpoint (iteration {}) was not saved: {}", failed_->first, failed_->second);
}

// ---- Progress -----------------------------------------------------------------------

Progress::Progress(const TrainConfig& cfg, int rank, const Throughput& throughput, bool dpo, int64_t resumed_at)
    : cfg_(cfg),
      throughput_(throughput),
      dpo_(dpo),
      metrics_(rank == 0 ? cfg.metrics_file : std::string(), rank == 0 ? cfg.tensorboard_dir : std::string(),
               resumed_at) {}

void Progress::end_step(StepState& s) {
  metrics_.write(s.rec);
  if (!(s.step % cfg_.log_interval == 0 || s.last || s.step == 1)) return;
  if (dpo_)
    log::info("dpo", "step {}: rewards chosen {:.4f} rejected {:.4f} margin {:.4f}, accuracy {:.3f}", s.step,
              s.rec["rewards/chosen"].get<double>(), s.rec["rewards/rejected"].get<double>(),
              s.rec["rewards/margins"].get<double>(), s.rec["rewards/accuracies"].get<double>());
  log::info("train", "{}", format_progress({.step = s.step, .total_steps = cfg_.train_iters, .loss = s.result.loss,
                                            .lr = s.lr, .grad_norm = s.result.grad_norm, .step_seconds = s.seconds,
                                            .tokens_per_s = throughput_.tokens_per_step() / s.seconds,
                                            .mfu = throughput_.mfu(s.seconds),
                                            .elapsed_seconds = seconds_since(start_)}));
}

}  // namespace claw::train
