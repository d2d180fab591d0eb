#include "claw/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "claw/ckpt/checkpoint.h"
#include "claw/ckpt/safetensors.h"
#include "claw/core/arena.h"
#include "claw/core/error.h"
#include "claw/core/log.h"
#include "claw/data/builtin_corpus.h"
#include "claw/data/blended_dataset.h"
#include "claw/data/gpt_dataset.h"
#include "claw/kernels/cpu/blas.h"
#include "claw/kernels/cpu/peak.h"
#include "claw/model/gpt.h"
#include "claw/parallel/pipeline_layout.h"
#include "claw/plan/hardware.h"
#include "claw/plan/memory_model.h"
#include "claw/train/memory_report.h"
#include "claw/train/metrics.h"
#include "claw/train/progress.h"
#include "claw/train/step.h"

namespace claw::train {

namespace {
using clock = std::chrono::steady_clock;
double seconds_since(clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); }

// The planner's view of this run (src/claw/plan): its memory model is the
// allocation, which the constructor checks.
plan::Layout plan_layout(const comm::RankGrid& grid, const TrainConfig& t, const ParallelConfig& p, int chunks,
                         parallel::ScheduleKind kind, int64_t num_layers) {
  return {.tp = grid.tp, .cp = grid.cp, .pp = grid.pp, .dp = grid.dp, .sequence_parallel = p.sequence_parallel,
          .virtual_stages = chunks, .schedule = kind, .micro_batch_size = t.micro_batch_size,
          .zero_stage = p.zero_stage(), .overlap_grad_reduce = p.dp.overlap_grad_reduce,
          .overlap_param_gather = p.dp.overlap_param_gather,
          .recompute_num_layers = t.recomputed_layers(num_layers),
          .first_stage_layers = p.decoder_first_pipeline_num_layers,
          .last_stage_layers = p.decoder_last_pipeline_num_layers};
}

void check_against_plan(const plan::StageMemory& planned, const plan::ArenaBytes& allocated) {
  const plan::ArenaBytes& p = planned.arenas;
  CLAW_CHECK(p.values == allocated.values && p.grads == allocated.grads && p.optimizer == allocated.optimizer &&
                 p.gathered == allocated.gathered && p.staging == allocated.staging &&
                 p.activations == allocated.activations,
             "the planner's memory model ({} B) differs from the allocation ({} B)", p.total(), allocated.total());
  log::info("memory", "arenas {} B on this rank (pipeline stage {}), as the planner's memory model predicts",
            allocated.total(), planned.stage);
}

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
  model_cfg_.validate();
  const comm::RankGrid grid = comm::RankGrid::make(world_.size(), par_cfg_.sizes);
  const auto not_yet = [](const char* flag, int v, const char* what) {
    if (v > 1)
      fail("{} {}: {} is not available in this build yet; claw trains data- and tensor-parallel (with ZeRO and "
           "sequence parallelism) only",
           flag, v, what);
  };
  not_yet("--context-parallel-size", grid.cp, "context parallelism");
  not_yet("--expert-model-parallel-size", grid.ep, "expert parallelism");
  model::validate_tensor_parallel(model_cfg_, grid.tp, par_cfg_.sequence_parallel, cfg_.seq_length);
  par_cfg_.dp.zero_stage = par_cfg_.zero_stage();
  par_cfg_.dp.validate(grid.dp);
  cfg_.resolve_and_validate(grid.dp);
  parallel::PipelineLayout layout;
  parallel::ScheduleConfig schedule;
  if (grid.pp > 1) {
    layout = parallel::make_pipeline_layout(
        {.num_layers = model_cfg_.num_layers, .stages = grid.pp,
         .layers_per_virtual_stage = par_cfg_.num_layers_per_virtual_pipeline_stage,
         .first_stage_layers = par_cfg_.decoder_first_pipeline_num_layers,
         .last_stage_layers = par_cfg_.decoder_last_pipeline_num_layers});
    schedule = {.kind = parallel::parse_schedule_kind(par_cfg_.pipeline_schedule), .stages = grid.pp,
                .microbatches = static_cast<int>(cfg_.grad_accumulation_steps(grid.dp)), .chunks = layout.chunks};
    if (layout.chunks > 1 && schedule.kind == parallel::ScheduleKind::one_f_one_b)
      schedule.kind = parallel::ScheduleKind::interleaved;  // implied by --num-layers-per-virtual-pipeline-stage
    schedule.validate();
    if (par_cfg_.zero_stage() >= 2 || par_cfg_.dp.overlap_grad_reduce || par_cfg_.dp.overlap_param_gather)
      fail("with --pipeline-model-parallel-size {} use --zero-stage 0 or 1 (or --use-distributed-optimizer) "
           "without --overlap-grad-reduce / --overlap-param-gather: gradients are reduced after the pipeline's "
           "last backward",
           grid.pp);
    if (cfg_.recomputed_layers(model_cfg_.num_layers) > 0)
      fail("--recompute-granularity with --pipeline-model-parallel-size > 1 is not available yet");
  } else if (par_cfg_.num_layers_per_virtual_pipeline_stage > 0 || par_cfg_.decoder_first_pipeline_num_layers >= 0 ||
             par_cfg_.decoder_last_pipeline_num_layers >= 0) {
    fail("--num-layers-per-virtual-pipeline-stage and --decoder-first/last-pipeline-num-layers need "
         "--pipeline-model-parallel-size > 1");
  }
  // Default decay length: the whole run (at least past warmup, so a short
  // run with the default warmup is valid and simply ends while warming up).
  if (lr_.decay_iters == 0) lr_.decay_iters = std::max(cfg_.train_iters, lr_.warmup_iters + 1);
  lr_.validate();
  adam_cfg_.validate();
  if (ckpt_cfg_.save_interval < 0) fail("--save-interval must be >= 0 (0: save only at the end), got {}",
                                       ckpt_cfg_.save_interval);
  if (ckpt_cfg_.save_interval > 0 && ckpt_cfg_.save.empty()) fail("--save-interval needs --save DIR");
  if (ckpt_cfg_.async_save && ckpt_cfg_.save.empty()) fail("--async-save needs --save DIR");
  if (ckpt_cfg_.exit_interval < 0) fail("--exit-interval must be >= 0, got {}", ckpt_cfg_.exit_interval);
  if (ckpt_cfg_.ckpt_step >= 0 && ckpt_cfg_.load.empty()) fail("--ckpt-step needs --load DIR");
  if (cfg_.seq_length > model_cfg_.max_position_embeddings)
    fail("--seq-length {} exceeds --max-position-embeddings {} (the longest sequence the model's positions cover); "
         "use --seq-length <= {} or raise --max-position-embeddings",
         cfg_.seq_length, model_cfg_.max_position_embeddings, model_cfg_.max_position_embeddings);
  // Before any allocation: a plan larger than the node would end in the OOM killer, without a word.
  const plan::Device cpu = plan::Catalog::builtin().device("cpu");
  check_node_memory(plan::stage_memory({.model = model_cfg_, .seq_length = cfg_.seq_length,
                                        .global_batch_size = cfg_.global_batch_size},
                                       plan_layout(grid, cfg_, par_cfg_, grid.pp > 1 ? layout.chunks : 1,
                                                   grid.pp > 1 ? schedule.kind : parallel::ScheduleKind::one_f_one_b,
                                                   model_cfg_.num_layers),
                                       grid.pp_rank(world_.rank()), plan::precision("fp32"), &cpu),
                    *world_.world_group());

  // Ranks on one node share its cores.
  cpu_ = kernels::make_cpu_ctx(cfg_.num_threads > 0
                                   ? cfg_.num_threads
                                   : std::max(1, kernels::default_num_threads() / world_.local_size()));
  pstate_ = comm::ParallelState::create(world_, par_cfg_.sizes);
  tp_groups_ = std::make_unique<model::TpGroups>(
      model::make_tensor_parallel(world_, *pstate_, model_cfg_, par_cfg_.sequence_parallel));
  comm::Group& dp_group = pstate_->dp();
  if (world_.size() > 1)
    log::info("parallel", "{} ranks ({}): {}{}; ZeRO stage {}, {} thread(s) per rank", world_.size(),
              world_.backend(), pstate_->describe(), par_cfg_.sequence_parallel ? ", sequence parallel" : "",
              par_cfg_.dp.zero_stage, cpu_.num_threads);

  // Rank 0 makes what is shared on disk (the built-in corpus, the sample
  // index caches) while the others wait; then they read what it wrote.
  comm::Group& everyone = pstate_->world();
  const bool first = world_.rank() == 0;
  if (!first) everyone.barrier();
  const std::string data_dir = data_cfg_.data_dir.empty() ? data::default_data_dir() : data_cfg_.data_dir;
  std::vector<std::string> words = data_cfg_.data_path;
  if (words.empty()) words = {data::ensure_builtin_corpus(data_dir, cpu_.num_threads)};
  const data::BlendSpec blend = data::parse_data_path(words);

  // Samples each split must provide (Megatron: train_iters x global batch;
  // validation: one run per --eval-interval plus the final one). Only the
  // splits this run reads are opened: a corpus too small for a test split
  // still trains.
  const int64_t GB = cfg_.global_batch_size;
  data::GptDatasetOptions opts{.split = data_cfg_.split,
                                .seq_length = cfg_.seq_length,
                                .vocab_size = model_cfg_.vocab_size,
                                .seed = cfg_.seed,
                                .num_samples = std::max<int64_t>(1, cfg_.train_iters) * GB,
                                .cache_dir = data_cfg_.data_cache_path};
  const auto weights = data::parse_split(data_cfg_.split);
  if (weights[0] <= 0) fail("--split {}: the training split has weight 0; give it a positive weight (e.g. 969,30,1)",
                            data_cfg_.split);
  train_data_ = data::build_split_source(blend, data::Split::train, opts);
  if (cfg_.eval_interval > 0 && cfg_.eval_iters > 0 && weights[1] > 0) {
    opts.num_samples = (cfg_.train_iters / cfg_.eval_interval + 1) * cfg_.eval_iters * GB;
    valid_data_ = data::build_split_source(blend, data::Split::valid, opts);
  }
  // The tokenizer the data was made with: its eod marks document boundaries
  // and its vocabulary must fit the model's (checked after the data, whose
  // errors are more specific: they name a file).
  data::TokenizerOptions tok = data_cfg_.tokenizer;
  if (tok.type == "GPT2BPETokenizer" && tok.vocab_file.empty() && tok.merge_file.empty()) {
    tok.vocab_file = data_dir + "/gpt2/encoder.json";
    tok.merge_file = data_dir + "/gpt2/vocab.bpe";
  }
  const auto tokenizer = data::make_tokenizer(tok);
  if (tokenizer->vocab_size() > model_cfg_.vocab_size)
    fail("--vocab-size {} is smaller than the vocabulary of the tokenizer ({}, {} ids); use --vocab-size {} or more",
         model_cfg_.vocab_size, tokenizer->name(), tokenizer->vocab_size(), tokenizer->vocab_size());
  data::PackingOptions packing = data_cfg_.packing;
  packing.eod = tokenizer->eod();
  if (first) everyone.barrier();

  log::info("data", "{}: {} training samples of {} tokens{}{}", fmt::join(words, " "), train_data_->num_samples(),
            cfg_.seq_length,
            valid_data_ ? fmt::format(", {} validation samples", valid_data_->num_samples()) : "",
            packing.any() ? fmt::format(" (packing: reset-position-ids={} reset-attention-mask={} eod-mask-loss={}, "
                                        "eod {})",
                                        packing.reset_position_ids, packing.reset_attention_mask,
                                        packing.eod_mask_loss, packing.eod)
                          : "");
  batch_ = std::make_unique<GlobalBatch>(cfg_.grad_accumulation_steps(dp_group.size()), cfg_.micro_batch_size,
                                         cfg_.seq_length, packing, dp_group.size(), dp_group.rank());

  const model::StoreOptions storage =
      parallel::store_options(par_cfg_.dp.zero_stage, dp_group.size(), dp_group.rank());
  if (grid.pp > 1) {
    // This rank's pipeline stage: one model chunk per virtual stage it holds.
    const int stage = pstate_->pp().rank();
    std::vector<model::GPT*> chunks;
    std::vector<model::Segment> segments;
    std::string ranges;
    for (int c = 0; c < layout.chunks; ++c) {
      const parallel::LayerRange r = layout.at(stage, c);
      chunks_.push_back(std::make_unique<model::GPT>(
          model_cfg_, storage, tp_groups_->tp,
          model::PipelineStage{.first_layer = r.first, .num_layers = r.count,
                               .pre_process = stage == 0 && c == 0,
                               .post_process = stage == grid.pp - 1 && c == layout.chunks - 1}));
      chunks_.back()->init_weights(cpu_, cfg_.seed);
      chunk_dps_.push_back(std::make_unique<parallel::DataParallel>(*chunks_.back(), dp_group, par_cfg_.dp));
      for (const model::Segment& seg : chunk_dps_.back()->segments()) segments.push_back(seg);
      chunks.push_back(chunks_.back().get());
      ranges += fmt::format("{}[{}, {})", c ? " " : "", r.first, r.first + r.count);
    }
    pipeline_ = std::make_unique<parallel::PipelineExecutor>(chunks, pstate_->pp(), parallel::make_schedule(schedule),
                                                             cfg_.micro_batch_size, cfg_.seq_length);
    optimizer_ = std::make_unique<optim::AdamW>(segments, adam_cfg_);
    size_t acts = 0, params = 0;
    plan::ArenaBytes allocated;
    for (size_t c = 0; c < chunks_.size(); ++c) {
      const model::GPT& m = *chunks_[c];
      acts += m.activation_bytes();
      params += m.store().value_bytes() + m.store().grad_bytes();
      const parallel::DataParallelMemory dm = chunk_dps_[c]->memory();
      allocated.values += dm.values;
      allocated.grads += dm.grads;
      allocated.gathered += dm.gather_slots;
      allocated.staging += dm.staging_slots;
      allocated.activations += m.activation_bytes();
    }
    allocated.optimizer = optimizer_->state_bytes();
    check_against_plan(plan::stage_memory({.model = model_cfg_, .seq_length = cfg_.seq_length,
                                           .global_batch_size = cfg_.global_batch_size},
                                          plan_layout(grid, cfg_, par_cfg_, layout.chunks, schedule.kind,
                                                      model_cfg_.num_layers),
                                          stage, plan::precision("fp32")),
                       allocated);
    const std::vector<int> slots = parallel::PipelineExecutor::slots_needed(pipeline_->schedule(), stage);
    log::info("pipeline", "{} schedule, {} micro-batches per step; stage {} holds layers {}; activations {} in {} "
              "slot(s) per chunk, parameters + gradients {}, optimizer {}",
              parallel::to_string(schedule.kind), schedule.microbatches, stage, ranges,
              format_bytes(static_cast<double>(acts)), fmt::join(slots, "/"), format_bytes(static_cast<double>(params)),
              format_bytes(static_cast<double>(optimizer_->state_bytes())));
    setup_checkpointing();
    return;
  }
  model_ = std::make_unique<model::GPT>(model_cfg_, storage, tp_groups_->tp);
  model_->init_weights(cpu_, cfg_.seed);
  dp_ = std::make_unique<parallel::DataParallel>(*model_, dp_group, par_cfg_.dp);
  const model::Recompute recompute{cfg_.recomputed_layers(model_cfg_.num_layers)};
  if (recompute.layers > model_cfg_.num_layers)
    fail("--recompute-num-layers {} exceeds --num-layers {}", recompute.layers, model_cfg_.num_layers);
  ArenaPlan acts = model::plan_activations(model_cfg_, cfg_.micro_batch_size, cfg_.seq_length, recompute,
                                           tp_groups_->tp.dims());
  MemoryPlan plan = make_memory_plan(dp_->memory(), par_cfg_.dp.zero_stage, dp_group.size(), acts);
  log::info("memory", "{}", format_memory_plan(plan, model_cfg_, model_->store().numel(), cfg_.micro_batch_size,
                                               cfg_.seq_length, recompute.layers));
  model_->reserve(cfg_.micro_batch_size, cfg_.seq_length, recompute);
  optimizer_ = std::make_unique<optim::AdamW>(dp_->segments(), adam_cfg_);
  const parallel::DataParallelMemory dm = dp_->memory();
  check_against_plan(plan::stage_memory({.model = model_cfg_, .seq_length = cfg_.seq_length,
                                         .global_batch_size = cfg_.global_batch_size},
                                        plan_layout(grid, cfg_, par_cfg_, 1, parallel::ScheduleKind::one_f_one_b,
                                                    model_cfg_.num_layers),
                                        0, plan::precision("fp32")),
                     {.values = dm.values, .grads = dm.grads, .optimizer = optimizer_->state_bytes(),
                      .gathered = dm.gather_slots, .staging = dm.staging_slots,
                      .activations = model_->activation_bytes()});
  setup_checkpointing();
}

Trainer::~Trainer() = default;

std::vector<ckpt::Shard> Trainer::checkpoint_shards(bool optimizer) const {
  std::vector<const model::ParamStore*> stores;
  if (model_) stores.push_back(&model_->store());
  for (const auto& c : chunks_) stores.push_back(&c->store());
  return ckpt::collect_shards(stores, optimizer_.get(),
                              {.zero_stage = par_cfg_.zero_stage(), .dp_rank = pstate_->dp().rank(),
                               .dp_size = pstate_->dp().size(), .optimizer = optimizer});
}

void Trainer::setup_checkpointing() {
  if (!ckpt_cfg_.load.empty()) load_checkpoint();
  if (!ckpt_cfg_.save.empty()) {
    saver_ = std::make_unique<ckpt::Saver>(pstate_->world(),
                                           ckpt::SaveConfig{.root = ckpt_cfg_.save, .async = ckpt_cfg_.async_save,
                                                            .keep_last = ckpt_cfg_.keep_last, .faults = ckpt_cfg_.faults});
    // The snapshot buffer is host memory beyond the planned arenas: as large
    // as what this rank writes (its share of parameters and moments).
    if (ckpt_cfg_.async_save)
      log::info("ckpt", "--async-save: {} snapshot buffer on this rank",
                format_bytes(static_cast<double>(saver_->prepare(checkpoint_shards(true)))));
  }
}

void Trainer::load_checkpoint() {
  const std::string& root = ckpt_cfg_.load;
  comm::Group& everyone = pstate_->world();
  // Megatron's behaviour, which restart loops rely on (--save and --load the
  // same directory): nothing saved yet means a fresh start.
  if (ckpt_cfg_.ckpt_step < 0 && std::filesystem::is_directory(root) &&
      !std::filesystem::exists(root + "/metadata.json") && ckpt::complete_iterations(root).empty() &&
      !ckpt::read_latest(root)) {
    log::info("ckpt", "--load {}: no checkpoint there yet; starting from iteration 0", root);
    return;
  }
  std::string dir = ckpt::resolve_load_dir(root, ckpt_cfg_.ckpt_step);
  std::vector<std::string> all_params;
  for (const model::ParamSpec& s : ckpt::model_param_specs(model_cfg_)) all_params.push_back(s.name);
  ckpt::Metadata meta;
  uint64_t bytes_read = 0;
  bool optimizer = false;
  while (true) {
    meta = ckpt::Metadata::read(dir);
    // A checkpoint without optimizer state (an import) loads its parameters;
    // the optimizer starts fresh.
    const bool has_optimizer = std::any_of(meta.tensors.begin(), meta.tensors.end(), [](const ckpt::TensorMeta& t) {
      return t.name.rfind("optim.", 0) == 0;
    });
    if (!has_optimizer && !ckpt_cfg_.no_load_optim)
      log::info("ckpt", "{} holds no optimizer state: loading the parameters, the optimizer starts fresh", dir);
    optimizer = !ckpt_cfg_.no_load_optim && has_optimizer;
    const std::vector<ckpt::Shard> shards = checkpoint_shards(optimizer);
    // A model of another shape is refused whatever --load-fallback says.
    ckpt::check_compatible(meta, dir, shards, all_params);
    std::string error;
    try {
      bytes_read = ckpt::load_shards(dir, meta, shards);
    } catch (const Error& e) {
      error = e.what();
    }
    const bool ok = everyone.all_reduce_value(error.empty() ? 1.0 : 0.0, comm::ReduceOp::min) == 1.0;
    if (ok) break;
    std::optional<int64_t> previous;
    for (int64_t it : ckpt::complete_iterations(root))
      if (it < meta.iteration) previous = it;
    if (!ckpt_cfg_.load_fallback || !previous) {
      if (!error.empty())
        fail("--load {}: {}{}", root, error,
             previous ? fmt::format(" (--load-fallback would load iteration {} instead)", *previous) : "");
      fail("--load {}: another rank could not read checkpoint {} (its log says why)", root, dir);
    }
    if (!error.empty()) log::warn("ckpt", "{}", error);
    log::info("ckpt", "checkpoint {} is unreadable; --load-fallback: loading iteration {} instead", dir, *previous);
    dir = ckpt::iteration_dir(root, *previous);
  }
  const nlohmann::json& st = meta.state;
  if (ckpt_cfg_.for_eval) {
    log::info("ckpt", "loaded {} (iteration {}) for evaluation", dir, meta.iteration);
    return;
  }
  start_iteration_ = meta.iteration;
  consumed_train_samples_ = st.value("consumed_train_samples", start_iteration_ * cfg_.global_batch_size);
  consumed_valid_samples_ = st.value("consumed_valid_samples", int64_t{0});
  if (optimizer) optimizer_->set_steps_taken(st.value("optimizer_steps", start_iteration_));
  const uint64_t seed = st.value("seed", cfg_.seed);
  if (seed != cfg_.seed)
    log::warn("ckpt", "the checkpoint was trained with --seed {}; this run's data order and dropout follow --seed {}",
              seed, cfg_.seed);
  const int64_t gb = st.value("global_batch_size", cfg_.global_batch_size);
  if (gb != cfg_.global_batch_size)
    log::warn("ckpt", "the checkpoint was trained with --global-batch-size {}; continuing at {} from sample {}", gb,
              cfg_.global_batch_size, consumed_train_samples_);
  uint64_t total = 0;
  for (const ckpt::ChunkMeta& c : meta.chunks) total += c.length;
  log::info("ckpt", "loaded {} (iteration {}, {} samples consumed{}, saved at {}; this rank read {} of {}); "
            "resuming at step {}",
            dir, meta.iteration, consumed_train_samples_, optimizer ? "" : ", optimizer state not loaded",
            st.value("layout", nlohmann::json::object()).dump(), format_bytes(static_cast<double>(bytes_read)),
            format_bytes(static_cast<double>(total)), start_iteration_ + 1);
}

void Trainer::save_checkpoint(int64_t iteration) {
  const comm::RankGrid grid = comm::RankGrid::make(world_.size(), par_cfg_.sizes);
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
  saver_->save(checkpoint_shards(true), std::move(info));
}

double Trainer::evaluate_train_split(int64_t iters) { return mean_eval_loss(*train_data_, 0, iters); }

void Trainer::write_logits(const std::string& path) {
  if (!model_ || pstate_->tp().size() > 1)
    fail("--logits-file needs --tensor-model-parallel-size 1 and --pipeline-model-parallel-size 1 (it writes the "
         "whole vocabulary's logits of one rank)");
  const int64_t B = cfg_.micro_batch_size, T = cfg_.seq_length, V = model_cfg_.vocab_size;
  const int64_t Vp = model_cfg_.padded_vocab_size(1);
  batch_->load(*train_data_, 0);
  std::vector<float> logits(static_cast<size_t>(B * T * Vp));
  eval_logits(*model_, cpu_, *batch_, cfg_.seed, logits.data());
  if (world_.rank() != 0) return;
  std::vector<float> real(static_cast<size_t>(B * T * V));
  for (int64_t r = 0; r < B * T; ++r) std::copy_n(&logits[r * Vp], V, &real[r * V]);
  const MicroBatch mb = batch_->micro(0);
  ckpt::write_safetensors(path, {{"tokens", DType::i32, {B, T}, mb.tokens}, {"logits", DType::f32, {B, T, V}, real.data()}});
  log::info("eval", "wrote the logits of the first micro-batch ({} x {} tokens, vocabulary {}) to {}", B, T, V, path);
}

double Trainer::evaluate(int64_t first) { return mean_eval_loss(*valid_data_, first, cfg_.eval_iters); }

double Trainer::mean_eval_loss(const data::SampleSource& source, int64_t first, int64_t iters) {
  double total = 0;
  for (int64_t i = 0; i < iters; ++i) {
    batch_->load(source, first + i * cfg_.global_batch_size);
    total += pipeline_ ? eval_loss_pipeline(*pipeline_, cpu_, *batch_, cfg_.seed, pstate_->pp(), chunk_dps_.front().get())
                       : eval_loss(*model_, cpu_, *batch_, cfg_.seed, dp_.get());
  }
  return total / static_cast<double>(std::max<int64_t>(1, iters));
}

TrainResult Trainer::run() {
  const int64_t B = cfg_.micro_batch_size, T = cfg_.seq_length, GB = cfg_.global_batch_size;
  const int64_t accum = cfg_.grad_accumulation_steps(pstate_->dp().size());
  const double tokens_per_step = static_cast<double>(GB * T);
  const double flops_per_step = model_cfg_.flops_per_token(T) * tokens_per_step;

  // MFU is against the whole job's peak: every rank measures SGEMM at once
  // (sharing the node as training will) and the figures add up.
  comm::Group& everyone = pstate_->world();
  double peak = cfg_.peak_gflops * world_.size();
  const kernels::PeakKey peak_key = kernels::PeakKey::current(cpu_.num_threads);
  const kernels::PeakCacheOptions peak_cache{.dir = cfg_.peak_cache_dir};
  if (peak == 0) {
    const kernels::Peak mine = kernels::calibrated_gemm_peak(
        peak_key, model_gemm_shapes(model_cfg_, B * T, pstate_->tp().size()), peak_cache);
    peak = everyone.all_reduce_value(mine.gflops);
    log::info("train", "MFU denominator: {:.1f} GFLOP/s per rank on {} thread(s) x {} rank(s), fp32 GEMM {}",
              mine.gflops, cpu_.num_threads, world_.size(), mine.provenance);
  }
  log::info("train", "{} steps of {} sequences x {} tokens ({} micro-batches of {} on each of {} data-parallel "
            "rank(s)), {:.2f} GFLOP per step",
            cfg_.train_iters, GB, T, accum, B, pstate_->dp().size(), flops_per_step / 1e9);

  MetricsWriter metrics(world_.rank() == 0 ? cfg_.metrics_file : std::string(),
                        world_.rank() == 0 ? cfg_.tensorboard_dir : std::string());
  TrainResult result;
  auto start = clock::now();
  // An asynchronous save's snapshot reads the values and moments while the
  // next step's forward and backward run; the update waits for it.
  double ckpt_blocked_s = 0;  // this step's time in the saver
  const auto before_update = [&](const StepResult&) {
    if (!saver_) return;
    const auto t = clock::now();
    saver_->wait_snapshot();
    ckpt_blocked_s += seconds_since(t);
  };
  if (start_iteration_ >= cfg_.train_iters)
    log::info("train", "the checkpoint is at iteration {}, --train-iters is {}: nothing to train", start_iteration_,
              cfg_.train_iters);

  for (int64_t step = start_iteration_; step < cfg_.train_iters; ++step) {
    auto t0 = clock::now();
    const double lr = lr_.at(step);
    const uint64_t sample0 = static_cast<uint64_t>(consumed_train_samples_);
    batch_->load(*train_data_, consumed_train_samples_);
    StepResult r = pipeline_ ? train_step_pipeline(*pipeline_, pipeline_->chunks(), *optimizer_, cpu_, *batch_, step,
                                                   lr, cfg_.seed, sample0, pstate_->pp(), pstate_->embedding(),
                                                   dp_pointers(), before_update)
                             : train_step(*model_, *optimizer_, cpu_, *batch_, step, lr, cfg_.seed, sample0,
                                          before_update, dp_.get());
    consumed_train_samples_ += GB;
    const double loss = r.loss, grad_norm = r.grad_norm;
    double dt = seconds_since(t0);
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
    if (cfg_.peak_gflops == 0 && flops_per_step / dt / 1e9 > peak)
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
    if (pipeline_) {
      // Per-stage pipeline timing (gathered over the pipeline group): the
      // measured idle time next to what the simulator predicts from the
      // measured costs (bench/bench_pipeline.py).
      const parallel::PipelineExecutor::StepTiming& t = pipeline_->last_timing();
      comm::Group& pp = pstate_->pp();
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
    const bool last = step + 1 == cfg_.train_iters;
    if (valid_data_ && ((step + 1) % cfg_.eval_interval == 0 || last)) {
      double val = evaluate(consumed_valid_samples_);
      consumed_valid_samples_ += cfg_.eval_iters * GB;
      rec["val_loss"] = val;
      result.final_val_loss = val;
      log::info("eval", "step {}: validation loss {:.4f} (perplexity {:.1f})", step + 1, val, std::exp(val));
    }
    const bool exiting = ckpt_cfg_.exit_interval > 0 && (step + 1) % ckpt_cfg_.exit_interval == 0 && !last;
    if (saver_) {
      const auto t = clock::now();
      saver_->poll();
      if ((ckpt_cfg_.save_interval > 0 && (step + 1) % ckpt_cfg_.save_interval == 0) || last || exiting)
        save_checkpoint(step + 1);
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
      ckpt_blocked_s = 0;
    }
    metrics.write(rec);
    if ((step + 1) % cfg_.log_interval == 0 || last || step == 0)
      log::info("train", "{}", format_progress({.step = step + 1, .total_steps = cfg_.train_iters, .loss = loss,
                                                .lr = lr, .grad_norm = grad_norm, .step_seconds = dt,
                                                .tokens_per_s = tokens_per_step / dt,
                                                .mfu = flops_per_step / dt / (peak * 1e9),
                                                .elapsed_seconds = seconds_since(start)}));
    result.steps = step + 1;
    result.final_loss = loss;
    if (exiting) {
      log::info("train", "--exit-interval {}: stopping after step {}", ckpt_cfg_.exit_interval, step + 1);
      break;
    }
  }
  if (saver_) {
    const auto t = clock::now();
    saver_->finish();
    if (const auto c = saver_->take_committed())
      log::info("ckpt", "waited {:.3f} s at exit for the save of iteration {}", seconds_since(t), c->first);
  }
  result.seconds = seconds_since(start);
  log::info("train", "done: {} steps in {}, final loss {:.4f}{}, peak RSS {}", result.steps,
            format_duration(result.seconds), result.final_loss,
            result.final_val_loss >= 0 ? fmt::format(", validation loss {:.4f}", result.final_val_loss) : "",
            format_bytes(static_cast<double>(peak_rss_bytes())));
  return result;
}

}  // namespace claw::train
