#include "claw/train/trainer.h"

#include <algorithm>
#include <optional>
#include <chrono>
#include <thread>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "claw/ckpt/checkpoint.h"
#include "claw/core/arena.h"
#include "claw/core/error.h"
#include "claw/comm/watchdog.h"
#include "claw/core/exit_signal.h"
#include "claw/core/log.h"
#include "claw/data/sample_source.h"
#include "claw/kernels/cpu/bf16_gemm.h"
#include "claw/kernels/cpu/blas.h"
#include "claw/kernels/cpu/peak.h"
#include "claw/data/dpo_dataset.h"
#include "claw/train/dpo.h"
#include "claw/train/job.h"
#include "claw/train/metrics.h"
#include "claw/train/progress.h"
#include "claw/train/run_data.h"
#include "claw/train/step.h"

namespace claw::train {

namespace {
using clock = std::chrono::steady_clock;
double seconds_since(clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); }

// The forward GEMMs of one micro-batch on one tensor-parallel rank (QKV,
// attention output, MLP in and out, one LM-head chunk of rows): the shapes
// the MFU peak is calibrated on, besides 2048^3.
std::vector<kernels::GemmShape> model_gemm_shapes(const model::ModelConfig& m, int64_t rows, int tp) {
  const int64_t C = m.hidden_size, D = m.head_dim(), F = m.ffn() / tp;
  const int64_t qkv = (m.num_attention_heads + 2 * m.kv_heads()) * D / tp;
  return {{rows, qkv, C}, {rows, C, m.num_attention_heads * D / tp},
          {rows, m.mlp == model::Mlp::swiglu ? 2 * F : F, C}, {rows, C, F},
          {std::min<int64_t>(rows, 256), m.padded_vocab_size(tp) / tp, C}};
}
}  // namespace

Trainer::Trainer(model::ModelConfig model, TrainConfig train, optim::LrSchedule lr, optim::AdamWConfig adam,
                 DataConfig data, ParallelConfig parallel, comm::World& world, CheckpointConfig ckpt)
    : model_cfg_(std::move(model)),
      cfg_(train),
      lr_(lr),
      adam_cfg_(adam),
      data_cfg_(std::move(data)),
      par_cfg_(std::move(parallel)),
      world_(world),
      ckpt_cfg_(std::move(ckpt)) {
  // Everything is validated before any allocation or file is touched; every
  // rank validates the same configuration, so all refuse it together.
  cfg_.resolve_and_validate(comm::RankGrid::make(world_.size(), par_cfg_.sizes).dp);
  model_cfg_.fp8.seed = cfg_.seed;
  if ((model_cfg_.fp8.enabled() || model_cfg_.gemm_dtype == DType::f16) && cfg_.device != "cpu")
    fail("--fp8-format, --fp4 and --fp16 emulate their formats on the CPU for now (--device cpu, not {}); --bf16 "
         "runs on the GPU",
         cfg_.device);
  if (cfg_.dpo.enabled && par_cfg_.sizes.cp > 1)
    fail("--dpo with --context-parallel-size {}: a pair's log-probabilities would be summed across the CP ranks; "
         "not available yet (train DPO with --context-parallel-size 1)",
         par_cfg_.sizes.cp);
  const JobConfig job = job_config();
  validate_job(job);
  runtime::RuntimeConfig rt = training_runtime_config(job);
  rt.resolve_and_validate(world_.size());
  par_cfg_ = rt.parallel;
  // Default decay length: the whole run (at least past warmup, so a short
  // run with the default warmup is valid and simply ends while warming up).
  if (lr_.decay_iters == 0) lr_.decay_iters = std::max(cfg_.train_iters, lr_.warmup_iters + 1);
  lr_.validate();

  // The groups and this rank's model chunks, their engines and executor;
  // the optimizer and loss scaler.
  TrainingJob parts = build_training_job(job, std::move(rt), world_);
  runtime_ = std::move(parts.runtime);
  optimizer_ = std::move(parts.optimizer);
  loss_scaler_ = std::move(parts.loss_scaler);
  const CpuCtx& cpu = runtime_->cpu();
  RunData d = open_run_data(data_cfg_, cfg_, model_cfg_, runtime_->parallel_state(), cpu.num_threads);
  train_data_ = std::move(d.train);
  valid_data_ = std::move(d.valid);
  batch_ = std::move(d.batch);
  batch_->set_device(runtime_->device());
  setup_checkpointing();
  if (cfg_.dpo.enabled) setup_dpo();
}

void Trainer::setup_dpo() {
  const auto* train = dynamic_cast<const data::DpoDataset*>(train_data_.get());
  const auto* valid = dynamic_cast<const data::DpoDataset*>(valid_data_.get());
  CLAW_CHECK(train != nullptr, "--dpo reads a DPO dataset");
  std::vector<const data::DpoDataset*> sources = {train};
  if (valid) sources.push_back(valid);
  if (dpo_reference_.empty()) {
    // The model as it starts is the reference: named by where it came from.
    std::error_code ec;
    const std::string from =
        !ckpt_cfg_.load_hf.empty() ? "hf:" + std::filesystem::absolute(ckpt_cfg_.load_hf, ec).string()
        : !loaded_dir_.empty()     ? "ckpt:" + std::filesystem::absolute(loaded_dir_, ec).string()
                                   : fmt::format("init:seed {}", cfg_.seed);
    const std::string key = fmt::format("{}|{}|seq {}|{} sequences|{}", from, ckpt_cfg_.model_flags.dump(),
                                        cfg_.seq_length, train->num_sequences(), train->prefix());
    dpo_reference_ = dpo_reference_cache(train->prefix(), key);
  } else if (!std::filesystem::exists(dpo_reference_)) {
    fail("--dpo: the checkpoint's reference log-probabilities {} are gone; they were computed from the model this "
         "DPO run started from (start again from it with --finetune)", dpo_reference_);
  }
  const auto reference = dpo_reference_logps(*runtime_, *batch_, sources, dpo_reference_, cfg_.seed);
  auto by_sequence = [reference](const data::DpoDataset* d) {
    return [reference, d](int64_t sample) { return (*reference)[static_cast<size_t>(d->sequence_of(sample))]; };
  };
  dpo_train_ = std::make_unique<DpoLoss>(cfg_.dpo, by_sequence(train));
  if (valid) dpo_valid_ = std::make_unique<DpoLoss>(cfg_.dpo, by_sequence(valid));
  log::info("dpo", "{} loss, beta {}: {} training pairs{}", cfg_.dpo.loss_type, cfg_.dpo.beta, train->num_pairs(),
            valid ? fmt::format(", {} validation pairs", valid->num_pairs()) : "");
}

void Trainer::dpo_metrics(DpoLoss& loss, const std::string& prefix, nlohmann::json& rec) {
  const DpoSums s = loss.take();
  double v[5] = {s.pairs, s.loss, s.chosen_reward, s.rejected_reward, s.correct};
  comm::ParallelState& ps = runtime_->parallel_state();
  for (comm::Group* g : {&ps.pp(), &ps.dp()})
    if (g->size() > 1) g->all_reduce(v, 5, DType::f64);
  const double n = std::max(v[0], 1.0);
  rec[prefix + "rewards/chosen"] = v[2] / n;
  rec[prefix + "rewards/rejected"] = v[3] / n;
  rec[prefix + "rewards/margins"] = (v[2] - v[3]) / n;
  rec[prefix + "rewards/accuracies"] = v[4] / n;
}

// MoE routing over the step: each auxiliary loss summed over the layers and
// averaged over the global batch's micro-batches (the weight it has in the
// objective), and the most loaded expert's tokens over the mean, the worst
// layer of any rank (1 is perfect balance, E the worst).
void Trainer::moe_metrics(nlohmann::json& rec) {
  runtime::ModelChunks& m = runtime_->model();
  const model::MoeStats s = m.take_moe_stats();
  const double micro_batches = std::max(1.0, m.dp_sum(static_cast<double>(s.micro_batches)));
  rec["moe_aux_loss"] = m.pp_sum(m.dp_sum(s.aux_loss)) / micro_batches * model_cfg_.moe.aux_loss_coeff;
  rec["moe_z_loss"] = m.pp_sum(m.dp_sum(s.z_loss)) / micro_batches * model_cfg_.moe.z_loss_coeff;
  rec["moe_load_max_over_mean"] =
      runtime_->parallel_state().world().all_reduce_value(s.max_load_over_mean, comm::ReduceOp::max);
}

Trainer::~Trainer() = default;

void Trainer::setup_checkpointing() {
  if (!ckpt_cfg_.load.empty()) load_checkpoint();
  saver_ = make_saver(job_config(), *runtime_, *optimizer_);
}

JobConfig Trainer::job_config() const {
  return {.model = model_cfg_, .train = cfg_, .adam = adam_cfg_, .parallel = par_cfg_, .ckpt = ckpt_cfg_};
}

void Trainer::load_checkpoint() {
  // The mutation skip-optimizer-load:RANK (tests only): that rank resumes with a fresh optimizer.
  const bool skip_optimizer = ckpt_cfg_.faults && ckpt_cfg_.faults->skips_optimizer_load(world_.rank());
  if (skip_optimizer)
    log::warn("fault", "--test-fault skip-optimizer-load: this rank does not load its optimizer state");
  const runtime::LoadedCheckpoint c = runtime_->load_checkpoint(
      {.root = ckpt_cfg_.load, .step = ckpt_cfg_.ckpt_step, .fallback = ckpt_cfg_.load_fallback,
       .optimizer = !ckpt_cfg_.no_load_optim && !ckpt_cfg_.finetune && !skip_optimizer},
      optimizer_.get());
  if (!c.loaded) {
    if (ckpt_cfg_.finetune) fail("--finetune: no checkpoint under --load {}", ckpt_cfg_.load);
    return;
  }
  loaded_dir_ = c.dir;
  if (ckpt_cfg_.finetune) {
    log::info("ckpt", "--finetune: loaded the parameters of {} (iteration {}); training starts at step 1", c.dir,
              c.iteration);
    return;
  }
  const nlohmann::json& st = c.state;
  if (cfg_.dpo.enabled) dpo_reference_ = st.value("dpo_reference", std::string());
  if (const auto it = st.find("fp8_high_precision_layers"); it != st.end()) {
    if (!it->is_array() || !std::all_of(it->begin(), it->end(), [](const nlohmann::json& v) { return v.is_number_integer(); }))
      fail("checkpoint {}: state.fp8_high_precision_layers must be a list of block indices", c.dir);
    fp8_checkpoint_choice_ = it->get<std::vector<int64_t>>();
  }
  if (loss_scaler_ && st.contains("loss_scaler")) loss_scaler_->load(st["loss_scaler"]);
  if (const model::Fp8Config& f = model_cfg_.fp8; f.enabled() && st.contains("fp8_scaling")) {
    const nlohmann::json& s = st["fp8_scaling"];
    const int64_t len = s.value("amax_history_len", int64_t{-1}), slots = s.value("slots_per_block", int64_t{-1});
    if (len == f.amax_history_len && slots == runtime_->model().fp8_slots_per_block() &&
        s.value("num_layers", int64_t{-1}) == model_cfg_.num_layers)
      runtime_->model().load_fp8_scaling_state(s.at("values").get<std::vector<double>>(), slots, len);
    else
      log::warn("ckpt", "the checkpoint's FP8 scaling state (amax history {}, {} FP8 layers per block) does not fit "
                "this run's (--fp8-amax-history-len {}): scales start afresh", len, slots, f.amax_history_len);
  }
  start_iteration_ = c.iteration;
  consumed_train_samples_ = st.value("consumed_train_samples", start_iteration_ * cfg_.global_batch_size);
  consumed_valid_samples_ = st.value("consumed_valid_samples", int64_t{0});
  if (c.optimizer) optimizer_->set_steps_taken(st.value("optimizer_steps", start_iteration_));
  const uint64_t seed = st.value("seed", cfg_.seed);
  if (seed != cfg_.seed)
    log::warn("ckpt", "the checkpoint was trained with --seed {}; this run's data order and dropout follow --seed {}",
              seed, cfg_.seed);
  const int64_t gb = st.value("global_batch_size", cfg_.global_batch_size);
  if (gb != cfg_.global_batch_size)
    log::warn("ckpt", "the checkpoint was trained with --global-batch-size {}; continuing at {} from sample {}", gb,
              cfg_.global_batch_size, consumed_train_samples_);
  log::info("ckpt", "loaded {} (iteration {}, {} samples consumed{}, saved at {}; this rank read {} of {}); "
            "resuming at step {}",
            c.dir, c.iteration, consumed_train_samples_, c.optimizer ? "" : ", optimizer state not loaded",
            st.value("layout", nlohmann::json::object()).dump(), format_bytes(static_cast<double>(c.bytes_read)),
            format_bytes(static_cast<double>(c.total_bytes)), start_iteration_ + 1);
}

// The automatic per-block FP8 choice. The error a single FP8 GEMM makes is
// the format's rounding, nearly the same in every layer (E5M2 gradients:
// about 6% relative); what differs between blocks is how far that error
// travels. So the calibration measures it where it ends up, in the model's
// gradients: on each calibration batch one pass with every block in 16-bit
// (the reference) and one pass per block with only that block in FP8, and
// a block's score is the relative distance of the whole gradient from the
// reference, sqrt(sum |g_b - g|^2 / sum |g|^2) over the batches. The
// gradients are those the optimizer reads (after the data-parallel
// reduction, a ZeRO rank's shard), their squares reduced as the gradient
// norm's are, so every layout scores alike. The budget's worst blocks stay
// in 16-bit. No optimizer step: the first training step zeroes the
// gradients.
void Trainer::select_fp8_layers() {
  model::Fp8Config& f = model_cfg_.fp8;
  if (!f.enabled() || f.layer_selection != "auto") return;
  runtime::ModelChunks& model = runtime_->model();
  std::vector<model::Fp8Linear*> layers;
  for (model::GPT* chunk : model.chunks())
    for (model::Fp8Linear* l : chunk->fp8_layers()) layers.push_back(l);
  const int64_t L = model_cfg_.num_layers;
  if (fp8_checkpoint_choice_) {
    f.high_precision_layers = *fp8_checkpoint_choice_;
    log::info("fp8", "layer selection from the checkpoint: blocks kept out of FP8: {}",
              f.high_precision_layers.empty() ? "none" : fmt::format("{}", fmt::join(f.high_precision_layers, ",")));
  } else {
    const auto t0 = clock::now();
    const CpuCtx& cpu = runtime_->cpu();
    std::vector<int64_t> candidates;
    for (int64_t l = 0; l < L; ++l)
      if (f.layer_in_fp8(l, L)) candidates.push_back(l);
    const auto only_in_fp8 = [&](int64_t block) {
      for (model::Fp8Linear* l : layers) l->set_active(l->block() == block);
    };
    // This rank's gradients (primary copies), as the optimizer's segments hold them.
    const auto is_primary = [](const model::Segment& s) { return s.param->spec.primary; };
    std::vector<float> reference;
    const auto squared_distance = [&]() {  // to the reference, reduced: sum |g - g_ref|^2
      double dense = 0, expert = 0;
      size_t at = 0;
      for (const model::Segment& s : optimizer_->segments()) {
        if (!is_primary(s)) continue;
        double d = 0;
        for (int64_t i = 0; i < s.n; ++i) {
          const double e = static_cast<double>(s.grad[i]) - reference[at + static_cast<size_t>(i)];
          d += e * e;
        }
        at += static_cast<size_t>(s.n);
        (s.param->spec.reduction_group == "expert_dp" ? expert : dense) += d;
      }
      return model.reduce_grad_sum_squares(dense, expert);
    };
    std::vector<double> dist(static_cast<size_t>(L), 0.0), dloss(static_cast<size_t>(L), 0.0);
    double norm2 = 0;
    for (model::Fp8Linear* l : layers) l->set_calibrating(true);
    const int64_t GB = cfg_.global_batch_size;
    for (int64_t k = 0; k < f.calibration_batches; ++k) {
      batch_->load(*train_data_, k * GB);
      const auto pass = [&] {
        return loss_gradients(model, cpu, *batch_, 0, cfg_.seed, static_cast<uint64_t>(k * GB), dpo_train_.get());
      };
      only_in_fp8(-1);
      const double loss = pass();
      reference.clear();
      for (const model::Segment& s : optimizer_->segments())
        if (is_primary(s)) reference.insert(reference.end(), s.grad, s.grad + s.n);
      norm2 += model.reduce_grad_sum_squares(optimizer_->grad_sum_squares(cpu, "dp"),
                                             optimizer_->grad_sum_squares(cpu, "expert_dp"));
      for (int64_t b : candidates) {
        only_in_fp8(b);
        dloss[static_cast<size_t>(b)] += (pass() - loss) / static_cast<double>(f.calibration_batches);
        dist[static_cast<size_t>(b)] += squared_distance();
      }
    }
    for (model::Fp8Linear* l : layers) l->set_calibrating(false);
    std::vector<double> score(static_cast<size_t>(L), 0.0);
    for (int64_t b : candidates) score[static_cast<size_t>(b)] = norm2 > 0 ? std::sqrt(dist[static_cast<size_t>(b)] / norm2) : 0;
    std::vector<int64_t> order = candidates;
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return score[static_cast<size_t>(a)] > score[static_cast<size_t>(b)]; });
    order.resize(static_cast<size_t>(std::min<int64_t>(f.bf16_layer_budget, static_cast<int64_t>(order.size()))));
    std::sort(order.begin(), order.end());
    f.high_precision_layers = order;
    std::string table;
    for (int64_t b : candidates)
      table += fmt::format("{}{}: {:.4f} ({:+.1e})", table.empty() ? "" : ", ", b, score[static_cast<size_t>(b)],
                           dloss[static_cast<size_t>(b)]);
    log::info("fp8", "calibration on {} batch(es), {} passes, in {:.1f} s: per block in FP8 alone, the relative "
              "distance of the model's gradient from the {} one (and the loss change): {}",
              f.calibration_batches, f.calibration_batches * static_cast<int64_t>(candidates.size() + 1),
              seconds_since(t0), dtype_name(model_cfg_.gemm_dtype), table);
    log::info("fp8", "layer selection (budget {}): blocks kept out of FP8: {}", f.bf16_layer_budget,
              order.empty() ? "none" : fmt::format("{}", fmt::join(order, ",")));
  }
  for (model::Fp8Linear* l : layers) l->set_active(f.layer_in_fp8(l->block(), L));
}

void Trainer::save_checkpoint(int64_t iteration) {
  const comm::RankGrid& grid = runtime_->parallel_state().grid();
  ckpt::SaveInfo info{.iteration = iteration, .model = ckpt_cfg_.model_flags, .args = ckpt_cfg_.args};
  info.state = {{"consumed_train_samples", consumed_train_samples_},
                {"consumed_valid_samples", consumed_valid_samples_},
                {"optimizer_steps", optimizer_->steps_taken()},
                {"seed", cfg_.seed},
                {"global_batch_size", cfg_.global_batch_size},
                {"seq_length", cfg_.seq_length},
                // Dropout and initialisation are Philox keyed by (seed, purpose,
                // global index), data order by the seed: the seed is the RNG state.
                {"rng", {{"kind", "philox4x32-10"}, {"seed", cfg_.seed}}},
                {"layout",
                 {{"world_size", world_.size()}, {"tp", grid.tp}, {"pp", grid.pp}, {"dp", grid.dp},
                  {"zero_stage", par_cfg_.zero_stage()}, {"sequence_parallel", par_cfg_.sequence_parallel}}}};
  if (!dpo_reference_.empty()) info.state["dpo_reference"] = dpo_reference_;
  if (loss_scaler_) info.state["loss_scaler"] = loss_scaler_->state();
  if (model_cfg_.fp8.enabled() && model_cfg_.fp8.layer_selection == "auto")
    info.state["fp8_high_precision_layers"] = model_cfg_.fp8.high_precision_layers;
  if (const model::Fp8Config& f = model_cfg_.fp8; f.enabled()) {  // amax histories and scales, every block's
    runtime::ModelChunks& model = runtime_->model();
    const int64_t slots = model.fp8_slots_per_block();
    info.state["fp8_scaling"] = {{"amax_history_len", f.amax_history_len},
                                 {"slots_per_block", slots},
                                 {"num_layers", model_cfg_.num_layers},
                                 {"values", model.fp8_scaling_state(model_cfg_.num_layers, slots, f.amax_history_len)}};
  }
  // DiLoCo: instance 0 writes the dense parameters, so every fragment takes
  // its outer step first (nothing to do at a round's end without fragments).
  runtime_->synchronize_replicas();
  runtime_->stage_to_host(optimizer_.get());  // a GPU's values and moments into their host mirrors
  saver_->save(runtime_->checkpoint_shards(optimizer_.get()), std::move(info));
}

double Trainer::evaluate(int64_t first) {
  return mean_eval_loss(runtime_->model(), runtime_->cpu(), *batch_, *valid_data_, first, cfg_.eval_iters,
                        cfg_.global_batch_size, cfg_.seed, dpo_valid_.get());
}

TrainResult Trainer::run() {
  const int64_t B = cfg_.micro_batch_size, T = cfg_.seq_length, GB = cfg_.global_batch_size;
  comm::ParallelState& ps = runtime_->parallel_state();
  const CpuCtx& cpu = runtime_->cpu();
  const int64_t accum = cfg_.grad_accumulation_steps(ps.dp().size());
  const double tokens_per_step = static_cast<double>(GB * T);
  const double flops_per_step = model_cfg_.flops_per_token(T) * tokens_per_step;

  // MFU is against the whole job's peak: every rank measures SGEMM at once
  // (sharing the node as training will) and the figures add up.
  comm::Group& everyone = ps.world();
  double peak = cfg_.peak_gflops * world_.size();
  const kernels::PeakKey peak_key = kernels::PeakKey::current(cpu.num_threads);
  const kernels::PeakCacheOptions peak_cache{.dir = cfg_.peak_cache_dir};
  if (peak == 0 && runtime_->device()) {
    // On a GPU: its measured BF16 GEMM rate (cuBLAS, fp32 accumulation), the
    // denominator MFU is quoted against whatever the training precision.
    const GpuCtx& g = runtime_->device()->ctx();
    peak = kernels::cuda::measure_bf16_gemm_tflops(g) * 1e3;
    log::info("train", "MFU denominator: {:.1f} TFLOP/s, the measured BF16 GEMM peak of {} (8192^3, best of 20; "
              "fp32 GEMM without TF32 measures {:.1f} TFLOP/s)",
              peak / 1e3, runtime_->device()->info().name, kernels::cuda::measure_fp32_gemm_tflops(g) * 1.0);
  }
  if (peak == 0) {
    const kernels::Peak mine = kernels::calibrated_gemm_peak(
        peak_key, model_gemm_shapes(model_cfg_, B * T / ps.cp().size(), ps.tp().size()), peak_cache);
    peak = everyone.all_reduce_value(mine.gflops);
    log::info("train", "MFU denominator: {:.1f} GFLOP/s per rank on {} thread(s) x {} rank(s), fp32 GEMM {}",
              mine.gflops, cpu.num_threads, world_.size(), mine.provenance);
  }
  if (const DType g = model_cfg_.gemm_dtype; (g != DType::f32 || model_cfg_.fp8.enabled()) && !cpu.gpu)
    log::info("train", "precision: {} GEMM operands{}; bf16 and FP8 values multiply on {}", dtype_name(g),
              model_cfg_.fp8.enabled() ? " (FP8 in the FP8 blocks)" : "", kernels::bf16_gemm_kernel());
  if (const model::Fp8Config& f = model_cfg_.fp8; f.enabled()) {
    std::vector<int64_t> fp8_blocks;
    for (int64_t l = 0; l < model_cfg_.num_layers; ++l)
      if (f.layer_in_fp8(l, model_cfg_.num_layers)) fp8_blocks.push_back(l);
    log::info("train", "fp8: {} format ({}), {} recipe{}; blocks in FP8: {} of {} ({}){}, the rest in {}",
              f.recipe == "nvfp4" ? "nvfp4" : f.format,
              f.recipe == "nvfp4"    ? "E2M1 in blocks of 16 with E4M3 scales and an fp32 tensor scale"
              : f.format == "hybrid" ? "E4M3 forward, E5M2 gradients"
                                     : "E4M3 throughout",
              f.recipe,
              f.recipe == "delayed" ? fmt::format(" (amax history {}, {}, margin {})", f.amax_history_len,
                                                  f.amax_compute_algo, f.margin)
                                    : std::string(),
              fp8_blocks.size(), model_cfg_.num_layers,
              fp8_blocks.empty() ? "none" : fmt::format("{}", fmt::join(fp8_blocks, ",")),
              f.layer_selection == "auto" ? " before the automatic selection" : "", dtype_name(model_cfg_.gemm_dtype));
  }
  log::info("train", "{} steps of {} sequences x {} tokens ({} micro-batches of {} on each of {} data-parallel "
            "rank(s)), {:.2f} GFLOP per step",
            cfg_.train_iters, GB, T, accum, B, ps.dp().size(), flops_per_step / 1e9);

  MetricsWriter metrics(world_.rank() == 0 ? cfg_.metrics_file : std::string(),
                        world_.rank() == 0 ? cfg_.tensorboard_dir : std::string());
  TrainResult result;
  auto start = clock::now();
  // An asynchronous save's snapshot reads the values and moments while the
  // next step's forward and backward run; the update waits for it.
  double ckpt_blocked_s = 0;  // this step's time in the saver
  std::optional<std::pair<int64_t, std::string>> save_failed;  // the latest save that failed
  // Straggler detection: a rank's own time in a step is its wall time less
  // the time it sat blocked in communication (waiting for the others), so
  // a slow rank shows a long own time and the ranks that wait for it short
  // ones. Summed over --straggler-report-interval steps and compared across
  // the ranks every interval.
  clock::time_point step_t0;
  double step_blocked0 = 0, own_s = 0;
  // Hang detection per section of a step, and the heartbeats of a `claw
  // launch` supervisor (comm/watchdog.h).
  std::optional<comm::Watchdog> watchdog;
  if ((cfg_.watchdog.hang_detection && world_.size() > 1) || !cfg_.watchdog.supervisor.empty())
    watchdog.emplace(cfg_.watchdog, world_.rank(), world_.size());
  int64_t cur_step = 0;  // the step in progress, from 1
  // Silent data corruption: suspect steps run again, replicas compare weights.
  if (cfg_.sdc.weight_hash_interval > 0 && (par_cfg_.zero_stage() >= 3 || runtime_->device()))
    fail("--check-weight-hash-across-dp-replicas-interval needs whole parameters on every replica in host memory: "
         "not with ZeRO-3 (--zero-stage 3 shards them) or --device cuda");
  // Under DiLoCo the instances' parameters agree only right after an outer
  // step: the interval must be a multiple of --diloco-inner-steps.
  if (const int64_t h = par_cfg_.dp.diloco_inner_steps; h > 0 && cfg_.sdc.weight_hash_interval % h != 0)
    fail("--check-weight-hash-across-dp-replicas-interval {} must be a multiple of --diloco-inner-steps {}: the "
         "instances' parameters agree only after an outer step",
         cfg_.sdc.weight_hash_interval, h);
  if (cfg_.sdc.weight_hash_interval > 0 && par_cfg_.dp.diloco_fragments > 1)
    fail("--check-weight-hash-across-dp-replicas-interval with --diloco-fragments {}: streamed fragments take their "
         "outer steps at different steps, so the replicas never agree as a whole between checkpoints",
         par_cfg_.dp.diloco_fragments);
  SdcMonitor sdc(cfg_.sdc, everyone, ps.dp().size() > 1 ? &ps.dp() : nullptr);
  int64_t last_saved = start_iteration_;
  const auto section = [&](comm::Section s) {
    if (watchdog) watchdog->enter(s, cur_step);
  };
  const double slowdown = ckpt_cfg_.faults ? ckpt_cfg_.faults->slowdown(world_.rank()) : 1.0;  // tests: slow:RANK:F
  const auto before_update = [&](const StepResult&) {
    if (slowdown > 1)  // this rank's forward and backward, (F - 1) times over
      std::this_thread::sleep_for(std::chrono::duration<double>(
          (slowdown - 1) * (seconds_since(step_t0) - (comm::blocked_seconds() - step_blocked0))));
    section(comm::Section::optimizer);
    if (!saver_) return;
    const auto t = clock::now();
    saver_->wait_snapshot();
    ckpt_blocked_s += seconds_since(t);
  };
  select_fp8_layers();
  // SIGTERM/SIGUSR1 (preemption, a supervisor): finish the step, save, stop.
  const ExitSignalGuard exit_signals;
  if (start_iteration_ >= cfg_.train_iters)
    log::info("train", "the checkpoint is at iteration {}, --train-iters is {}: nothing to train", start_iteration_,
              cfg_.train_iters);

  for (int64_t step = start_iteration_; step < cfg_.train_iters; ++step) {
    auto t0 = clock::now();
    step_t0 = t0;
    step_blocked0 = comm::blocked_seconds();
    const double lr = lr_.at(step);
    const uint64_t sample0 = static_cast<uint64_t>(consumed_train_samples_);
    cur_step = step + 1;
    section(comm::Section::data);
    batch_->load(*train_data_, consumed_train_samples_);
    section(comm::Section::forward_backward);
    StepResult r;
    try {
      r = train_step(runtime_->model(), *optimizer_, cpu, *batch_, step, lr, cfg_.seed, sample0, before_update,
                     dpo_train_.get(), loss_scaler_.get(), ckpt_cfg_.faults.get(), &sdc);
    } catch (const ReproducedNonFinite&) {
      // Every rank is here: keep the state before the step, so a restart
      // (with another host, or another run) loses nothing.
      if (saver_ && step > last_saved) {
        log::info("sdc", "saving iteration {} (the state before step {}) before ending", step, step + 1);
        section(comm::Section::checkpoint);
        save_checkpoint(step);
        saver_->finish();
      }
      throw;
    }
    if (r.skipped)
      log::warn("train", "step {}: gradients overflowed at loss scale {:g}: step skipped (parameters unchanged); "
                "loss scale now {:g}", step + 1, r.loss_scale, loss_scaler_->scale());
    consumed_train_samples_ += GB;
    if (runtime_->device()) runtime_->device()->synchronize();  // the update has run: the step's time is whole
    section(comm::Section::logging);
    const double loss = r.loss, grad_norm = r.grad_norm;
    double dt = seconds_since(t0);
    own_s += dt - (comm::blocked_seconds() - step_blocked0);
    // Spread of step times over the ranks (a straggler shows as max >> min);
    // the step's time is the slowest rank's.
    double dt_min = dt, dt_max = dt;
    if (world_.size() > 1) {
      dt_min = everyone.all_reduce_value(dt, comm::ReduceOp::min);
      dt_max = everyone.all_reduce_value(dt, comm::ReduceOp::max);
      dt = dt_max;
    }

    // A step faster than the peak means the peak was measured low: raise the
    // cached one so MFU stays a fraction of a true upper bound.
    if (cfg_.peak_gflops == 0 && !runtime_->device() && flops_per_step / dt / 1e9 > peak)
      peak = world_.size() * kernels::raise_gemm_peak(peak_key, flops_per_step / dt / 1e9 / world_.size(),
                                                      fmt::format("training step {}", step + 1), peak_cache);

    nlohmann::json rec = {{"step", step + 1},
                          {"loss", loss},
                          {"lr", lr},
                          {"grad_norm", grad_norm},
                          {"tokens_per_s", tokens_per_step / dt},
                          {"mfu", flops_per_step / dt / (peak * 1e9)},
                          {"mem_bytes", peak_rss_bytes()},
                          {"step_ms", dt * 1e3},
                          {"step_ms_min", dt_min * 1e3},
                          {"step_ms_max", dt_max * 1e3},
                          {"grad_comm_wait_ms", first_dp().last_grad_wait_s() * 1e3},
                          {"param_gather_wait_ms", first_dp().last_gather_wait_s() * 1e3},
                          {"tokens", static_cast<int64_t>(tokens_per_step) * (step + 1)}};
    if (const int64_t n = cfg_.straggler_report_interval; n > 0 && world_.size() > 1 && (step + 1) % n == 0) {
      std::vector<double> own(static_cast<size_t>(world_.size()));
      everyone.all_gather(&own_s, own.data(), 1, DType::f64);
      own_s = 0;
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
      rec["min_relative_speed"] = slowest;
      rec["straggler_ranks"] = slow;
      if (world_.rank() == 0)  // the same verdict on every rank
        for (int k : slow)
          log::warn("straggler", "rank {} ran at {:.2f} of the median rank's speed over steps {}-{} ({:.3f} s of its "
                    "own work against the median's {:.3f} s; threshold {}); every rank's relative speed: {}",
                    k, median / own[static_cast<size_t>(k)], step + 2 - n, step + 1, own[static_cast<size_t>(k)], median,
                    cfg_.straggler_threshold, speeds);
    }
    if (ps.pp().size() > 1) {
      // Per-stage pipeline timing (gathered over the pipeline group): the
      // measured idle time next to what the simulator predicts from the
      // measured costs (bench/bench_pipeline.py).
      const parallel::PipelineExecutor::StepTiming& t = runtime_->model().executor().last_timing();
      comm::Group& pp = ps.pp();
      constexpr int kFields = 5;
      std::vector<double> mine = {t.wall_s * 1e3, t.idle_s() * 1e3, t.forward_s * 1e3 / std::max(1, t.forwards),
                                  t.backward_s * 1e3 / std::max(1, t.backwards),
                                  t.weight_s * 1e3 / std::max(1, t.weights)};
      std::vector<double> all(kFields * pp.size());
      pp.all_gather(mine.data(), all.data(), kFields, DType::f64);
      const char* names[kFields] = {"pp_step_ms", "pp_idle_ms", "pp_forward_ms", "pp_backward_ms", "pp_weight_ms"};
      for (int f = 0; f < kFields; ++f) {
        std::vector<double> per_stage;
        for (int s = 0; s < pp.size(); ++s) per_stage.push_back(all[kFields * s + f]);
        rec[names[f]] = per_stage;
      }
    }
    if (dpo_train_) dpo_metrics(*dpo_train_, "", rec);
    if (model_cfg_.moe.enabled()) moe_metrics(rec);
    if (loss_scaler_) {
      rec["loss_scale"] = r.loss_scale;
      rec["skipped"] = r.skipped;
      if (r.skipped) rec["grad_norm"] = nullptr;  // not finite: JSON has no inf
    }
    const bool last = step + 1 == cfg_.train_iters;
    // Streaming DiLoCo: the run ends with every fragment's outer step, so
    // that the last evaluation, and the model saved, are one model.
    if (last) runtime_->synchronize_replicas();
    if (valid_data_ && ((step + 1) % cfg_.eval_interval == 0 || last)) {
      section(comm::Section::evaluation);
      double val = evaluate(consumed_valid_samples_);
      consumed_valid_samples_ += cfg_.eval_iters * GB;
      rec["val_loss"] = val;
      result.final_val_loss = val;
      if (dpo_valid_) {
        dpo_metrics(*dpo_valid_, "val_", rec);
        log::info("eval", "step {}: validation DPO loss {:.4f}, reward margin {:.4f}, accuracy {:.3f}", step + 1, val,
                  rec["val_rewards/margins"].get<double>(), rec["val_rewards/accuracies"].get<double>());
      } else {
        log::info("eval", "step {}: validation loss {:.4f} (perplexity {:.1f})", step + 1, val, std::exp(val));
      }
    }
    // A signal reaches the ranks at different moments: they agree after
    // each step (the largest signal number any of them saw) and stop together.
    section(comm::Section::logging);
    try {
      sdc.check_replicas(runtime_->model(), step + 1);
    } catch (const NonFiniteError& e) {
      if (watchdog) watchdog->report_suspects(sdc.suspect_hosts(), e.what());
      throw;
    }
    if (sdc.reruns() > 0) {
      rec["sdc_reruns"] = sdc.reruns();
      rec["sdc_transient_faults"] = sdc.transient();
    }
    const int signal = static_cast<int>(everyone.all_reduce_value(ExitSignalGuard::received(), comm::ReduceOp::max));
    const bool exiting =
        !last && ((ckpt_cfg_.exit_interval > 0 && (step + 1) % ckpt_cfg_.exit_interval == 0) || signal != 0);
    if (saver_) {
      section(comm::Section::checkpoint);
      const auto t = clock::now();
      saver_->poll();
      if ((ckpt_cfg_.save_interval > 0 && (step + 1) % ckpt_cfg_.save_interval == 0) || last || exiting)
        save_checkpoint(last_saved = step + 1);
      ckpt_blocked_s += seconds_since(t);
      // What checkpointing cost this step (bench/bench_ckpt.py), and the
      // background work of a save committed in it.
      rec["ckpt_blocked_ms"] = ckpt_blocked_s * 1e3;
      if (const auto c = saver_->take_committed()) {
        rec["ckpt_committed"] = c->first;
        rec["ckpt_bytes"] = c->second.bytes;
        rec["ckpt_snapshot_s"] = c->second.snapshot_s;
        rec["ckpt_write_s"] = c->second.write_s;
      }
      if ((save_failed = saver_->take_failed())) rec["ckpt_failed"] = save_failed->first;
      ckpt_blocked_s = 0;
      section(comm::Section::logging);
    }
    metrics.write(rec);
    if (dpo_train_ && ((step + 1) % cfg_.log_interval == 0 || last || step == 0))
      log::info("dpo", "step {}: rewards chosen {:.4f} rejected {:.4f} margin {:.4f}, accuracy {:.3f}", step + 1,
                rec["rewards/chosen"].get<double>(), rec["rewards/rejected"].get<double>(),
                rec["rewards/margins"].get<double>(), rec["rewards/accuracies"].get<double>());
    if ((step + 1) % cfg_.log_interval == 0 || last || step == 0)
      log::info("train", "{}", format_progress({.step = step + 1, .total_steps = cfg_.train_iters, .loss = loss,
                                                .lr = lr, .grad_norm = grad_norm, .step_seconds = dt,
                                                .tokens_per_s = tokens_per_step / dt,
                                                .mfu = flops_per_step / dt / (peak * 1e9),
                                                .elapsed_seconds = seconds_since(start)}));
    result.steps = step + 1;
    result.final_loss = loss;
    if (watchdog) watchdog->step_done(step + 1, loss);
    if (exiting && signal != 0) {
      result.stopped_by = signal;
      log::info("train", "{} received: stopping after step {}{}", ExitSignalGuard::name(signal), step + 1,
                saver_ ? fmt::format(", saving iteration {} to {}", step + 1, ckpt_cfg_.save)
                       : " (no --save: nothing is saved)");
      break;
    }
    if (exiting) {
      log::info("train", "--exit-interval {}: stopping after step {}", ckpt_cfg_.exit_interval, step + 1);
      break;
    }
  }
  if (saver_) {
    section(comm::Section::checkpoint);
    const auto t = clock::now();
    saver_->finish();
    if (const auto c = saver_->take_committed())
      log::info("ckpt", "waited {:.3f} s at exit for the save of iteration {}", seconds_since(t), c->first);
    if (auto f = saver_->take_failed()) save_failed = std::move(f);
    if (save_failed && save_failed->first == result.steps)
      fail("the last checkpoint (iteration {}) was not saved: {}", save_failed->first, save_failed->second);
  }
  section(comm::Section::idle);
  result.seconds = seconds_since(start);
  log::info("train", "done: {} steps in {}, final loss {:.4f}{}, peak RSS {}", result.steps,
            format_duration(result.seconds), result.final_loss,
            result.final_val_loss >= 0 ? fmt::format(", validation loss {:.4f}", result.final_val_loss) : "",
            format_bytes(static_cast<double>(peak_rss_bytes())));
  return result;
}

}  // namespace claw::train
