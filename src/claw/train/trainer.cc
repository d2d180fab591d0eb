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

#include "claw/core/clock.h"
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
#include "claw/train/observers.h"
#include "claw/train/metrics.h"
#include "claw/train/progress.h"
#include "claw/train/run_data.h"
#include "claw/train/step.h"

namespace claw::train {

namespace {
using clock = std::chrono::steady_clock;

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
  // Silent data corruption: the replicas' weight hashes need whole, agreeing replicas.
  if (cfg_.sdc.weight_hash_interval > 0 && (par_cfg_.zero_stage() >= 3 || cfg_.device != "cpu"))
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

// The observers of a step, in the order they run (train/observers.h); the
// trainer's own parts (the objective's metrics, evaluation) as hooks.
const Throughput& Trainer::add_observers(std::vector<std::unique_ptr<StepObserver>>& out, Sections& sections,
                                         SdcMonitor& sdc, CheckpointCadence*& ckpt) {
  comm::ParallelState& ps = runtime_->parallel_state();
  auto& throughput = static_cast<Throughput&>(
      *out.emplace_back(std::make_unique<Throughput>(model_cfg_, cfg_, *runtime_, world_.size())));
  log::info("train", "{} steps of {} sequences x {} tokens ({} micro-batches of {} on each of {} data-parallel "
            "rank(s)), {:.2f} GFLOP per step",
            cfg_.train_iters, cfg_.global_batch_size, cfg_.seq_length, cfg_.grad_accumulation_steps(ps.dp().size()),
            cfg_.micro_batch_size, ps.dp().size(), throughput.flops_per_step() / 1e9);
  out.push_back(std::make_unique<StragglerReport>(cfg_, ps.world()));
  out.push_back(std::make_unique<PipelineTiming>(*runtime_));
  out.push_back(std::make_unique<StepHook>([this](StepState& s) { objective_metrics(s); }));
  out.push_back(std::make_unique<StepHook>([this, &sections](StepState& s) { evaluation_step(s, sections); }));
  out.push_back(std::make_unique<SdcCheck>(sdc, *runtime_, sections));
  out.push_back(std::make_unique<StopSignals>(ckpt_cfg_, ps.world()));
  if (saver_) {
    auto c = std::make_unique<CheckpointCadence>(ckpt_cfg_, *saver_, sections, start_iteration_,
                                                 [this](int64_t iteration) { save_checkpoint(iteration); });
    ckpt = c.get();
    out.push_back(std::move(c));
  }
  out.push_back(std::make_unique<Progress>(cfg_, world_.rank(), throughput, dpo_train_ != nullptr, start_iteration_));
  return throughput;
}

void Trainer::objective_metrics(StepState& s) {
  if (dpo_train_) dpo_metrics(*dpo_train_, "", s.rec);
  if (model_cfg_.moe.enabled()) moe_metrics(s.rec);
  if (loss_scaler_) {
    s.rec["loss_scale"] = s.result.loss_scale;
    s.rec["skipped"] = s.result.skipped;
    if (s.result.skipped) s.rec["grad_norm"] = nullptr;  // not finite: JSON has no inf
  }
}

void Trainer::evaluation_step(StepState& s, Sections& sections) {
  // Streaming DiLoCo: the run ends with every fragment's outer step, so
  // that the last evaluation, and the model saved, are one model.
  if (s.last) runtime_->synchronize_replicas();
  if (!valid_data_ || !(s.step % cfg_.eval_interval == 0 || s.last)) return;
  sections.enter(comm::Section::evaluation);
  const double val = evaluate(consumed_valid_samples_);
  consumed_valid_samples_ += cfg_.eval_iters * cfg_.global_batch_size;
  s.rec["val_loss"] = val;
  if (dpo_valid_) {
    dpo_metrics(*dpo_valid_, "val_", s.rec);
    log::info("eval", "step {}: validation DPO loss {:.4f}, reward margin {:.4f}, accuracy {:.3f}", s.step, val,
              s.rec["val_rewards/margins"].get<double>(), s.rec["val_rewards/accuracies"].get<double>());
  } else {
    log::info("eval", "step {}: validation loss {:.4f} (perplexity {:.1f})", s.step, val, std::exp(val));
  }
}

TrainResult Trainer::run() {
  comm::ParallelState& ps = runtime_->parallel_state();
  Sections sections(cfg_, world_.rank(), world_.size());
  SdcMonitor sdc(cfg_.sdc, ps.world(), ps.dp().size() > 1 ? &ps.dp() : nullptr);
  std::vector<std::unique_ptr<StepObserver>> observers;
  CheckpointCadence* ckpt = nullptr;
  add_observers(observers, sections, sdc, ckpt);
  select_fp8_layers();
  const ExitSignalGuard exit_signals;  // SIGTERM/SIGUSR1 (preemption, a supervisor): finish the step, save, stop
  if (start_iteration_ >= cfg_.train_iters)
    log::info("train", "the checkpoint is at iteration {}, --train-iters is {}: nothing to train", start_iteration_,
              cfg_.train_iters);
  const double slowdown = ckpt_cfg_.faults ? ckpt_cfg_.faults->slowdown(world_.rank()) : 1.0;  // tests: slow:RANK:F
  clock::time_point t0;
  double blocked0 = 0;
  const auto before_update = [&](const StepResult&) {
    if (slowdown > 1)  // this rank's forward and backward, (F - 1) times over
      std::this_thread::sleep_for(std::chrono::duration<double>(
          (slowdown - 1) * (seconds_since(t0) - (comm::blocked_seconds() - blocked0))));
    sections.enter(comm::Section::optimizer);
    if (ckpt) ckpt->before_update();
  };
  TrainResult result;
  const auto start = clock::now();
  for (int64_t step = start_iteration_; step < cfg_.train_iters; ++step) {
    StepState s{.step = step + 1, .last = step + 1 == cfg_.train_iters, .lr = lr_.at(step)};
    sections.set_step(s.step);
    t0 = clock::now();
    blocked0 = comm::blocked_seconds();
    for (auto& o : observers) o->begin_step(s);
    const auto sample0 = static_cast<uint64_t>(consumed_train_samples_);
    sections.enter(comm::Section::data);
    batch_->load(*train_data_, consumed_train_samples_);
    sections.enter(comm::Section::forward_backward);
    try {
      s.result = train_step(runtime_->model(), *optimizer_, runtime_->cpu(), *batch_, step, s.lr, cfg_.seed, sample0,
                            before_update, dpo_train_.get(), loss_scaler_.get(), ckpt_cfg_.faults.get(), &sdc);
    } catch (const ReproducedNonFinite&) {
      if (ckpt) ckpt->save_before_failing(step);  // every rank is here: the state before the step is kept
      throw;
    }
    if (s.result.skipped)
      log::warn("train", "step {}: gradients overflowed at loss scale {:g}: step skipped (parameters unchanged); "
                "loss scale now {:g}", s.step, s.result.loss_scale, loss_scaler_->scale());
    consumed_train_samples_ += cfg_.global_batch_size;
    if (runtime_->device()) runtime_->device()->synchronize();  // the update has run: the step's time is whole
    sections.enter(comm::Section::logging);
    s.local_seconds = seconds_since(t0);
    s.own_seconds = s.local_seconds - (comm::blocked_seconds() - blocked0);
    for (auto& o : observers) o->end_step(s);
    result.steps = s.step;
    result.final_loss = s.result.loss;
    if (s.rec.contains("val_loss")) result.final_val_loss = s.rec["val_loss"].get<double>();
    if (comm::Watchdog* w = sections.watchdog()) w->step_done(s.step, s.result.loss);
    if (s.exiting) {
      result.stopped_by = s.signal;
      log_stop(s);
      break;
    }
  }
  for (auto& o : observers) o->finish(result);
  sections.enter(comm::Section::idle);
  result.seconds = seconds_since(start);
  log::info("train", "done: {} steps in {}, final loss {:.4f}{}, peak RSS {}", result.steps,
            format_duration(result.seconds), result.final_loss,
            result.final_val_loss >= 0 ? fmt::format(", validation loss {:.4f}", result.final_val_loss) : "",
            format_bytes(static_cast<double>(peak_rss_bytes())));
  return result;
}

void Trainer::log_stop(const StepState& s) const {
  if (s.signal != 0)
    log::info("train", "{} received: stopping after step {}{}", ExitSignalGuard::name(s.signal), s.step,
              saver_ ? fmt::format(", saving iteration {} to {}", s.step, ckpt_cfg_.save)
                     : " (no --save: nothing is saved)");
  else
    log::info("train", "--exit-interval {}: stopping after step {}", ckpt_cfg_.exit_interval, s.step);
}

}  // namespace claw::train
