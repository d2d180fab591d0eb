#include "claw/runtime/runtime.h"

#include <algorithm>
#include <filesystem>
#include <optional>

#include <fmt/ranges.h>

#include "claw/ckpt/checkpoint.h"
#include "claw/core/arena.h"
#include "claw/core/error.h"
#include "claw/core/log.h"
#include "claw/kernels/cpu/blas.h"
#include "claw/plan/hardware.h"
#include "claw/runtime/memory_report.h"

namespace claw::runtime {

namespace {
// DiLoCo's outer momentum in checkpoints: "optim.diloco_momentum.<param>".
const std::string kDilocoMomentum = "diloco_momentum";

// The planner's view of this run (src/claw/plan): its memory model is the
// allocation, which check_memory verifies.
plan::Layout plan_layout(const comm::RankGrid& grid, const RuntimeConfig& c, int chunks, parallel::ScheduleKind kind) {
  const ParallelConfig& p = c.parallel;
  return {.tp = grid.tp, .cp = grid.cp, .pp = grid.pp, .dp = grid.dp, .ep = grid.ep, .etp = grid.etp,
          .sequence_parallel = p.sequence_parallel,
          .virtual_stages = chunks, .schedule = kind, .micro_batch_size = c.micro_batch_size,
          .zero_stage = p.zero_stage(), .overlap_grad_reduce = p.dp.overlap_grad_reduce,
          .overlap_param_gather = p.dp.overlap_param_gather, .instances = grid.instances,
          .diloco_inner_steps = p.dp.diloco_inner_steps, .diloco_delta_bits = p.dp.diloco_delta_bits,
          .recompute_num_layers = c.recompute_layers,
          .first_stage_layers = p.decoder_first_pipeline_num_layers,
          .last_stage_layers = p.decoder_last_pipeline_num_layers};
}
}  // namespace

Runtime::Runtime(RuntimeConfig cfg, comm::World& world) : cfg_(std::move(cfg)), world_(world) {
  cfg_.resolve_and_validate(world_.size());
  const comm::RankGrid grid = comm::RankGrid::make(world_.size(), cfg_.parallel.sizes);
  const model::ModelConfig& mc = cfg_.model;
  const ParallelConfig& par = cfg_.parallel;

  // Ranks on one node share its cores.
  cpu_ = kernels::make_cpu_ctx(cfg_.num_threads > 0 ? cfg_.num_threads
                                                    : std::max(1, kernels::default_num_threads() / world_.local_size()));
  if (const int gpu = cfg_.cuda_device(); gpu >= 0) {
    device_ = std::make_unique<kernels::cuda::Device>(gpu);
    device_->ctx().allow_tf32 = cfg_.allow_tf32;
    device_->ctx().bf16_attention = mc.gemm_dtype == DType::bf16;
    cpu_.gpu = &device_->ctx();
    const kernels::cuda::DeviceInfo& d = device_->info();
    log::info("cuda", "device {}: {} (sm_{}{}, {} SMs, {} free of {}), CUDA runtime {}.{}, driver {}.{}", gpu, d.name,
              d.cc_major, d.cc_minor, d.multiprocessors, format_bytes(static_cast<double>(d.free_bytes)),
              format_bytes(static_cast<double>(d.total_bytes)), d.runtime_version / 1000,
              d.runtime_version % 1000 / 10, d.driver_version / 1000, d.driver_version % 1000 / 10);
  }
  pstate_ = comm::ParallelState::create(world_, par.sizes);
  tp_groups_ = std::make_unique<model::TpGroups>(
      model::make_tensor_parallel(world_, *pstate_, mc, par.sequence_parallel));
  // Dense parameters are replicated over dp x cp (the CP ranks hold other
  // tokens of the same samples): gradients reduce, and ZeRO shards, there.
  comm::Group& dp_group = grid.cp > 1 ? pstate_->dp_cp() : pstate_->dp();
  if (world_.size() > 1)
    log::info("parallel", "{} ranks ({}): {}{}{}; ZeRO stage {}, {} thread(s) per rank", world_.size(),
              world_.backend(), pstate_->describe(), par.sequence_parallel ? ", sequence parallel" : "",
              grid.cp > 1 ? fmt::format(", context parallel ({}, {} tokens a rank)", par.cp_comm_type,
                                        cfg_.seq_length / grid.cp)
                          : "",
              par.dp.zero_stage, cpu_.num_threads);

  // This rank's pipeline stage: one model chunk per virtual stage it holds.
  const int64_t B = cfg_.micro_batch_size, T = cfg_.seq_length / grid.cp;  // this rank's tokens of a row
  const parallel::PipelineLayout layout = par.pipeline_layout(mc.num_layers, grid.pp);
  const parallel::ScheduleConfig schedule = par.schedule_config(grid.pp, cfg_.micro_batches(grid.dp), layout.chunks);
  const model::Recompute recompute{cfg_.recompute_layers};
  // Under --num-distributed-optimizer-instances ZeRO shards over one instance.
  comm::Group& shard_group = pstate_->dp_intra();
  model::StoreOptions storage = parallel::store_options(par.dp.zero_stage, shard_group.size(), shard_group.rank());
  storage.device = device_.get();
  storage.freeze = cfg_.freeze;
  storage.expert_shards = pstate_->expert_dp().size();
  storage.expert_shard = pstate_->expert_dp().rank();
  storage.dtypes.master = cfg_.main_params_dtype;
  // --bf16 on the GPU: the layers' products read a bf16 copy of the weights,
  // refreshed after each optimizer step, instead of rounding them per product.
  if (device_ && mc.gemm_dtype == DType::bf16) storage.dtypes.compute = DType::bf16;
  const int stage = pstate_->pp().rank();
  const plan::Job job{.model = mc, .seq_length = cfg_.seq_length, .global_batch_size = cfg_.global_batch_size,
                      .freeze = cfg_.freeze};
  // claw's CPU storage: fp32 values and gradients, the moments in their dtypes.
  plan::Precision storage_precision = plan::precision("fp32");
  storage_precision.moment_bytes = static_cast<double>(par.dp.optimizer_bytes_per_element) / 2;
  storage_precision.fp8_moments = par.dp.optimizer_fp8_moments;
  storage_precision.main_params_dtype = cfg_.main_params_dtype;
  planned_ = plan::stage_memory(job, plan_layout(grid, cfg_, layout.chunks, schedule.kind), stage, storage_precision,
                                nullptr, storage.shard);
  // Before any allocation: a plan larger than the node would end in the OOM
  // killer, without a word. The device adds the runtime's own overhead.
  {
    const plan::Device device = plan::Catalog::builtin().device("cpu");
    plan::StageMemory node = plan::stage_memory(job, plan_layout(grid, cfg_, layout.chunks, schedule.kind), stage,
                                                storage_precision, &device);
    if (!cfg_.training) node.optimizer = 0;
    if (device_)
      check_device_memory(node, device_->info());
    else
      check_node_memory(node, pstate_->world());
  }
  parallel::Instances instances{.intra = &shard_group, .chunk_elements = par.inter_dc_chunk_bytes / 4};
  for (const auto& g : pstate_->dp_inter()) instances.inter.push_back(g.get());
  std::vector<model::GPT*> chunks;
  std::vector<parallel::DataParallel*> dps;
  std::string ranges;
  for (int c = 0; c < layout.chunks; ++c) {
    const parallel::LayerRange r = layout.at(stage, c);
    chunks_.push_back(std::make_unique<model::GPT>(
        mc, storage, tp_groups_->tp,
        model::PipelineStage{.first_layer = r.first, .num_layers = r.count,
                             .pre_process = stage == 0 && c == 0,
                             .post_process = stage == grid.pp - 1 && c == layout.chunks - 1}));
    chunks_.back()->init_weights(cpu_, cfg_.seed);
    chunks_.back()->set_context_parallel(&pstate_->cp(), model::parse_cp_comm_type(par.cp_comm_type));
    dps_.push_back(std::make_unique<parallel::DataParallel>(*chunks_.back(), dp_group, par.dp, &pstate_->expert_dp(),
                                                            &instances));
    chunks.push_back(chunks_.back().get());
    dps.push_back(dps_.back().get());
    ranges += fmt::format("{}[{}, {})", c ? " " : "", r.first, r.first + r.count);
  }
  if (grid.instances > 1) log_hierarchical_reduction(grid.instances, shard_group.size());
  if (grid.pp == 1) {
    const ArenaPlan acts = model::plan_activations(mc, B, T, recompute, tp_groups_->tp.dims());
    MemoryPlan plan = make_memory_plan(dps_.front()->memory(), par.dp.zero_stage, shard_group.size(), acts);
    if (!cfg_.training) plan.optimizer = 0;
    plan.frozen_params = chunks_.front()->store().frozen_numel();
    plan.master = chunks_.front()->store().master_dtype();
    plan.activation_dtype = mc.activation_dtype();
    log::info("memory", "{}", format_memory_plan(plan, mc, chunks_.front()->store().numel(), B, T, recompute.layers));
  }
  model_ = std::make_unique<ModelChunks>(chunks, dps, pstate_->pp(), pstate_->embedding(), schedule, B, T, recompute);

  record_allocation();
  if (grid.pp > 1) log_pipeline(schedule, stage, ranges);
}

// What crosses the long haul each step: every rank all-reduces its owned
// block (1 / ranks-per-instance of the gradients) across the instances,
// 2 (N - 1) / N of it sent per rank by a ring.
void Runtime::log_hierarchical_reduction(int instances, int ranks_per_instance) const {
  const ParallelConfig& par = cfg_.parallel;
  int64_t elements = 0;
  for (const auto& c : chunks_)
    for (const model::StoreRegion& reg : c->store().regions())
      if (reg.trainable && reg.group == "dp") elements += reg.total;
  const int n = instances, per = ranks_per_instance;
  log::info("parallel",
            "hierarchical gradient reduction: {} fp32 gradient elements on this stage reduce-scatter inside each "
            "instance of {} ranks, then each rank all-reduces its {} across the {} instances ({} sent per rank and "
            "step{})",
            elements, per, elements / per, n, format_bytes(static_cast<double>(elements) / per * 4 * 2 * (n - 1) / n),
            par.inter_dc_chunk_bytes > 0
                ? fmt::format(", in chunks of {} over {} streams",
                              format_bytes(static_cast<double>(par.inter_dc_chunk_bytes)), par.sizes.inter_streams)
                : "");
}

// The arenas this rank allocated, by kind (check_memory compares them with the plan).
void Runtime::record_allocation() {
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const parallel::DataParallelMemory dm = dps_[c]->memory();
    allocated_.values += dm.values;
    allocated_.grads += dm.grads;
    allocated_.gathered += dm.gather_slots;
    allocated_.staging += dm.staging_slots;
    allocated_.activations += chunks_[c]->activation_bytes();
  }
}

void Runtime::log_pipeline(const parallel::ScheduleConfig& schedule, int stage, const std::string& ranges) const {
  size_t acts = 0, params = 0;
  for (const auto& m : chunks_) {
    acts += m->activation_bytes();
    params += m->store().value_bytes() + m->store().grad_bytes() + m->store().compute_bytes();
  }
  const std::vector<int> slots = parallel::PipelineExecutor::slots_needed(model_->executor().schedule(), stage);
  log::info("pipeline", "{} schedule, {} micro-batches per step; stage {} holds layers {}; activations {} in {} "
            "slot(s) per chunk, parameters + gradients {}{}",
            parallel::to_string(schedule.kind), schedule.microbatches, stage, ranges,
            format_bytes(static_cast<double>(acts)), fmt::join(slots, "/"), format_bytes(static_cast<double>(params)),
            cfg_.training ? ", optimizer " + format_bytes(static_cast<double>(planned_.arenas.optimizer)) : "");
}

Runtime::~Runtime() = default;

const MemoryResource& Runtime::memory() const { return device_ ? device_->memory() : host_memory(); }

void Runtime::check_memory(const optim::AdamW* optimizer) const {
  plan::ArenaBytes p = planned_.arenas, a = allocated_;
  if (optimizer)
    a.optimizer = optimizer->state_bytes();
  else
    p.optimizer = 0;  // evaluation: no optimizer state
  CLAW_CHECK(p.values == a.values && p.grads == a.grads && p.optimizer == a.optimizer && p.gathered == a.gathered &&
                 p.staging == a.staging && p.activations == a.activations,
             "the planner's memory model ({} B) differs from the allocation ({} B): values {} / {}, gradients {} / "
             "{}, optimizer {} / {}, gathered {} / {}, staging {} / {}, activations {} / {}",
             p.total(), a.total(), p.values, a.values, p.grads, a.grads, p.optimizer, a.optimizer, p.gathered,
             a.gathered, p.staging, a.staging, p.activations, a.activations);
  log::info("memory", "arenas {} B on this rank (pipeline stage {}), as the planner's memory model predicts",
            a.total(), planned_.stage);
}

std::vector<ckpt::Shard> Runtime::checkpoint_shards(const optim::AdamW* optimizer) const {
  const int replica = pstate_->dp_cp().rank() / pstate_->dp_intra().size();
  const bool diloco = cfg_.parallel.dp.diloco_inner_steps > 0;
  std::vector<ckpt::Shard> shards =
      ckpt::collect_shards(model_->stores(), optimizer,
                           {.zero_stage = cfg_.parallel.zero_stage(), .optimizer = optimizer != nullptr,
                            .replica = replica, .per_instance_optimizer = diloco});
  if (device_) {
    ensure_mirrors(optimizer);
    for (ckpt::Shard& s : shards) s.data = host_mirror(s.data);
  }
  // DiLoCo's outer momentum ("optim.diloco_momentum.<param>", the same on
  // every instance), beside the moments of the same owned elements and
  // written by instance 0's rank that writes them (host memory on any device).
  if (optimizer && diloco) {
    const std::string first =
        ckpt::optimizer_tensor(ckpt::instance_state_name(optim::AdamW::state_names().front(), replica), "");
    const size_t n = shards.size();
    for (size_t i = 0; i < n; ++i) {
      if (shards[i].tensor.rfind(first, 0) != 0) continue;
      for (const auto& dp : dps_)
        if (float* m = dp->outer_momentum(*shards[i].spec, shards[i].begin)) {
          ckpt::Shard s = shards[i];
          s.tensor = ckpt::optimizer_tensor(kDilocoMomentum, s.spec->name);
          s.data = m;
          s.dtype = DType::f32;
          s.write = s.write && replica == 0;
          shards.push_back(std::move(s));
          break;
        }
    }
  }
  return shards;
}

// The device arenas a checkpoint reads: each chunk's values, the moments.
std::vector<std::pair<const void*, size_t>> Runtime::device_arenas(const optim::AdamW* optimizer) const {
  std::vector<std::pair<const void*, size_t>> out;
  for (const auto& c : chunks_) out.emplace_back(c->store().values(), c->store().value_bytes());
  if (optimizer && optimizer->state_bytes() > 0) {
    out.emplace_back(optimizer->exp_avg_arena().base(), optimizer->exp_avg_arena().size());
    out.emplace_back(optimizer->exp_avg_sq_arena().base(), optimizer->exp_avg_sq_arena().size());
  }
  return out;
}

void Runtime::ensure_mirrors(const optim::AdamW* optimizer) const {
  for (const auto& [base, bytes] : device_arenas(optimizer)) {
    const auto* b = static_cast<const uint8_t*>(base);
    const bool have = std::any_of(mirrors_.begin(), mirrors_.end(), [&](const Mirror& m) { return m.device == b; });
    if (!have && bytes > 0) mirrors_.push_back({b, bytes, Arena("checkpoint mirror (host)", bytes)});
  }
}

void* Runtime::host_mirror(const void* device_ptr) const {
  const auto* p = static_cast<const uint8_t*>(device_ptr);
  for (const Mirror& m : mirrors_)
    if (p >= m.device && p < m.device + m.bytes) return m.host.base() + (p - m.device);
  CLAW_CHECK(false, "checkpoint data at {} is in no device arena this runtime mirrors", device_ptr);
  return nullptr;
}

void Runtime::stage_to_host(const optim::AdamW* optimizer) const {
  if (!device_) return;
  ensure_mirrors(optimizer);
  for (const auto& [p, n] : device_arenas(optimizer))
    if (n > 0) kernels::cuda::copy_to_host(device_->ctx(), host_mirror(p), p, n);
}

void Runtime::stage_from_host(const optim::AdamW* optimizer) const {
  if (!device_) return;
  for (const auto& [p, n] : device_arenas(optimizer))
    if (n > 0) kernels::cuda::copy_to_device(device_->ctx(), const_cast<void*>(p), host_mirror(p), n);
}

// The tensors a load reads from checkpoint `dir` into this rank: its shards
// (and `optimizer`'s, if given), less what the checkpoint may lack (state
// of parameters frozen when it was saved, DiLoCo's outer momentum, LoRA
// adapters over a base), with an instance's moments read from instance 0's
// where the checkpoint has no others.
std::vector<ckpt::Shard> Runtime::shards_to_load(const ckpt::Metadata& meta, const std::string& dir,
                                                 const optim::AdamW* optimizer,
                                                 const std::vector<std::string>& all_params) const {
  std::vector<ckpt::Shard> shards = checkpoint_shards(optimizer);
  if (optimizer) {
    // Parameters trained now that were frozen when it was saved have no
    // optimizer state there: theirs starts at zero, as in a fresh run.
    std::vector<std::string> fresh;
    for (const std::string& n : all_params)
      for (const std::string& state : optim::AdamW::state_names())
        if (!model::matches_any(cfg_.freeze, n) && (!cfg_.model.lora.enabled() || model::lora_trains(cfg_.model.lora, n)) &&
            !meta.find(ckpt::optimizer_tensor(state, n))) {
          fresh.push_back(n);
          break;
        }
    if (!fresh.empty()) {
      log::info("ckpt", "{} has no optimizer state for {} parameter(s) that train now (frozen when it was saved?): "
                "theirs starts at zero: {}",
                dir, fresh.size(), fmt::join(fresh, ", "));
      std::erase_if(shards,
                    [&](const ckpt::Shard& s) { return s.tensor.rfind("optim.", 0) == 0 && !meta.find(s.tensor); });
    }
  }
  // A checkpoint saved without DiLoCo (or before its momentum was saved)
  // starts the outer momentum at zero; one with fewer instances (or none)
  // gives an instance without its own moments instance 0's.
  if (optimizer) {
    bool shared = false;
    for (ckpt::Shard& s : shards)
      if (const std::string base = ckpt::instance0_tensor(s.tensor); base != s.tensor && !meta.find(s.tensor)) {
        s.tensor = base;
        shared = true;
      }
    if (shared) log::info("ckpt", "{} has no optimizer state of this rank's instance: it starts from instance 0's", dir);
    const std::string prefix = ckpt::optimizer_tensor(kDilocoMomentum, "");
    const size_t before = shards.size();
    std::erase_if(shards, [&](const ckpt::Shard& s) { return s.tensor.rfind(prefix, 0) == 0 && !meta.find(s.tensor); });
    if (shards.size() != before)
      log::info("ckpt", "{} has no DiLoCo outer momentum: it starts at zero", dir);
  }
  // A checkpoint without LoRA adapters (the base model) leaves them as
  // initialised: A random, B zero, so the model starts as the base.
  if (cfg_.model.lora.enabled()) {
    const size_t before = shards.size();
    std::erase_if(shards,
                  [&](const ckpt::Shard& s) { return model::is_lora_param(s.tensor) && !meta.find(s.tensor); });
    if (shards.size() != before)
      log::info("ckpt", "{} has no LoRA adapters: they start fresh (A Kaiming-uniform, B zero)", dir);
  }
  return shards;
}

LoadedCheckpoint Runtime::load_checkpoint(const LoadOptions& opts, optim::AdamW* optimizer) {
  const std::string& root = opts.root;
  comm::Group& everyone = pstate_->world();
  LoadedCheckpoint out;
  const std::optional<std::string> found = ckpt::find_checkpoint(root, opts.step, opts.fallback);
  if (!found) {
    log::info("ckpt", "--load {}: no checkpoint there yet; starting from iteration 0", root);
    return out;
  }
  std::string dir = *found;
  // On a GPU the chunks read into host mirrors holding the current values
  // (so what no chunk covers, such as padding, keeps them), then go over.
  stage_to_host(optimizer);
  std::vector<std::string> all_params;
  for (const model::ParamSpec& s : ckpt::model_param_specs(cfg_.model)) all_params.push_back(s.name);
  ckpt::Metadata meta;
  while (true) {
    try {
      meta = ckpt::Metadata::read(dir);
    } catch (const Error& e) {  // unparseable: the same on every rank
      const std::string base = std::filesystem::path(dir).filename().string();
      std::optional<int64_t> previous;
      if (opts.fallback && base.size() == 12 && base.rfind("iter_", 0) == 0)
        previous = ckpt::previous_complete_iteration(root, std::stoll(base.substr(5)));
      if (!previous) throw;
      log::warn("ckpt", "{}; --load-fallback: loading iteration {} instead", e.what(), *previous);
      dir = ckpt::iteration_dir(root, *previous);
      continue;
    }
    // A checkpoint without optimizer state (an import) loads its parameters;
    // the optimizer starts fresh.
    const bool has_optimizer = std::any_of(meta.tensors.begin(), meta.tensors.end(), [](const ckpt::TensorMeta& t) {
      return t.name.rfind("optim.", 0) == 0;
    });
    const bool want_optimizer = optimizer && opts.optimizer;
    if (!has_optimizer && want_optimizer)
      log::info("ckpt", "{} holds no optimizer state: loading the parameters, the optimizer starts fresh", dir);
    out.optimizer = want_optimizer && has_optimizer;
    std::vector<ckpt::Shard> shards = shards_to_load(meta, dir, out.optimizer ? optimizer : nullptr, all_params);
    // A model of another shape is refused whatever --load-fallback says.
    ckpt::check_compatible(meta, dir, shards, all_params);
    std::string error;
    try {
      out.bytes_read = ckpt::load_shards(dir, meta, shards);
    } catch (const Error& e) {
      error = e.what();
    }
    const bool ok = everyone.all_reduce_value(error.empty() ? 1.0 : 0.0, comm::ReduceOp::min) == 1.0;
    if (ok) break;
    const std::optional<int64_t> previous = ckpt::previous_complete_iteration(root, meta.iteration);
    if (!opts.fallback || !previous) {
      if (!error.empty())
        fail("--load {}: {}{}", root, error,
             previous ? fmt::format(" (--load-fallback would load iteration {} instead)", *previous) : "");
      fail("--load {}: another rank could not read checkpoint {} (its log says why)", root, dir);
    }
    if (!error.empty()) log::warn("ckpt", "{}", error);
    log::info("ckpt", "checkpoint {} is unreadable; --load-fallback: loading iteration {} instead", dir, *previous);
    dir = ckpt::iteration_dir(root, *previous);
  }
  stage_from_host(out.optimizer ? optimizer : nullptr);
  for (const auto& c : chunks_) c->store().refresh_compute(cpu_);
  out.loaded = true;
  out.dir = dir;
  out.iteration = meta.iteration;
  out.state = meta.state;
  for (const ckpt::ChunkMeta& c : meta.chunks) out.total_bytes += c.length;
  return out;
}

}  // namespace claw::runtime
