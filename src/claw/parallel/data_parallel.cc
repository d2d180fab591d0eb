#include "claw/parallel/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>

#include "claw/core/clock.h"
#include "claw/core/dtype_convert.h"
#include "claw/core/error.h"
#include "claw/core/log.h"

namespace claw::parallel {

namespace {
using Clock = std::chrono::steady_clock;
int64_t align16(int64_t n) { return (n + 15) / 16 * 16; }
}  // namespace

void DataParallelConfig::validate(int dp) const {
  if (zero_stage < 0 || zero_stage > 3) fail("--zero-stage {} must be 0, 1, 2 or 3", zero_stage);
  if (bucket_size < 0) fail("--ddp-bucket-size {} must be positive (elements per gradient bucket)", bucket_size);
  if (max_inflight_reductions < 1) fail("at least one reduction must be allowed in flight");
  if (instances < 1 || dp % instances != 0)
    fail("--num-distributed-optimizer-instances {} must divide the data-parallel size {}", instances, dp);
  if (diloco_inner_steps < 0) fail("--diloco-inner-steps {} must be >= 0 (0: synchronous)", diloco_inner_steps);
  if (diloco_inner_steps > 0 && instances < 2)
    fail("--diloco-inner-steps {} needs --data-centers (--num-distributed-optimizer-instances) >= 2: DiLoCo's outer "
         "step runs across the instances",
         diloco_inner_steps);
  if (diloco_inner_steps > 0 && !(diloco_outer_lr > 0))
    fail("--diloco-outer-lr {} must be > 0", diloco_outer_lr);
  if (diloco_inner_steps > 0 && !(diloco_outer_momentum >= 0 && diloco_outer_momentum < 1))
    fail("--diloco-outer-momentum {} must be in [0, 1)", diloco_outer_momentum);
  if (diloco_delta_bits != 32 && diloco_delta_bits != 8 && diloco_delta_bits != 4)
    fail("--diloco-delta-bits {} must be 32 (fp32 deltas), 8 or 4 (packed in blocks of {} with a scale each)",
         diloco_delta_bits, kDeltaBlock);
  if (diloco_fragments < 1) fail("--diloco-fragments {} must be >= 1", diloco_fragments);
  if ((diloco_delta_bits != 32 || diloco_fragments != 1) && diloco_inner_steps == 0)
    fail("--diloco-delta-bits and --diloco-fragments shape DiLoCo's outer step: they need --diloco-inner-steps");
  if (diloco_inner_steps > 0 && diloco_fragments > diloco_inner_steps)
    fail("--diloco-fragments {} must be at most --diloco-inner-steps {}: each fragment takes its outer step on a "
         "step of its own in each round",
         diloco_fragments, diloco_inner_steps);
  if (instances > 1 && zero_stage == 0)
    fail("--num-distributed-optimizer-instances {} needs a distributed optimizer (--use-distributed-optimizer or "
         "--zero-stage 1-3): each instance holds a whole ZeRO-sharded optimizer",
         instances);
}

model::StoreOptions store_options(int zero_stage, int dp_size, int dp_rank) {
  return {.shards = dp_size, .shard = dp_rank, .shard_values = zero_stage >= 3, .shard_grads = zero_stage >= 2};
}

int64_t SlotAllocator::allocate(int64_t n) {
  n = align16(std::max<int64_t>(n, 1));
  int64_t at = 0;
  size_t i = 0;
  for (; i < live_.size(); ++i) {
    if (live_[i].off - at >= n) break;
    at = live_[i].off + align16(live_[i].n);
  }
  if (capacity_ > 0 && at + n > capacity_) return -1;
  live_.insert(live_.begin() + static_cast<long>(i), Block{at, n});
  high_ = std::max(high_, at + n);
  return at;
}

void SlotAllocator::release(int64_t offset) {
  auto it = std::find_if(live_.begin(), live_.end(), [&](const Block& b) { return b.off == offset; });
  CLAW_CHECK(it != live_.end(), "release of slot {} that is not allocated", offset);
  live_.erase(it);
}

DataParallel::DataParallel(model::GPT& model, comm::Group& dp, DataParallelConfig cfg, comm::Group* expert_dp,
                           const Instances* instances)
    : model_(model), store_(model.store()), dp_(dp), expert_dp_(expert_dp), cfg_(cfg), units_(model.units()) {
  cfg_.validate(dp.size());
  if (instances && instances->intra && instances->intra->size() < dp.size()) {
    CLAW_CHECK(!instances->inter.empty() && instances->intra->size() * instances->inter.front()->size() == dp.size(),
               "instances of {} ranks x {} do not make the data-parallel group of {}", instances->intra->size(),
               instances->inter.empty() ? 0 : instances->inter.front()->size(), dp.size());
    CLAW_CHECK(cfg_.instances == instances->inter.front()->size(), "config says {} instances, the groups {}",
               cfg_.instances, instances->inter.front()->size());
    instances_ = *instances;
  }
  comm::Group& shard_group = instances_.intra ? *instances_.intra : dp;
  const model::StoreOptions want = store_options(cfg_.zero_stage, shard_group.size(), shard_group.rank());
  const model::StoreOptions& have = store_.options();
  CLAW_CHECK(have.shards == want.shards && have.shard == want.shard && have.shard_values == want.shard_values &&
                 have.shard_grads == want.shard_grads,
             "the model's parameter store was not built with store_options(stage {}, {}, {})", cfg_.zero_stage,
             shard_group.size(), shard_group.rank());
  if (cfg_.bucket_size == 0) cfg_.bucket_size = std::max<int64_t>(40'000'000, 1'000'000 * int64_t{dp.size()});

  const int U = static_cast<int>(units_.size());
  const auto& params = store_.params();
  for (const model::Unit& u : units_) {
    unit_params_.emplace_back();
    for (const model::Param* p : u.params)
      unit_params_.back().push_back(static_cast<size_t>(std::find(params.begin(), params.end(), p) - params.begin()));
  }
  const auto& regions = store_.regions();
  for (size_t r = 0; r < regions.size(); ++r) {
    comm::Group* group = regions[r].group == "dp" ? &shard_group : regions[r].group == "expert_dp" ? expert_dp_ : nullptr;
    CLAW_CHECK(group && group->size() == regions[r].shards && group->rank() == regions[r].shard,
               "no communication group of {} ranks for reduction group '{}'", regions[r].shards, regions[r].group);
    RegionSync sync{.group = group, .hierarchical = instances_.intra && regions[r].group == "dp",
                    .trainable = regions[r].trainable};
    sync.bucket_of_unit.assign(U, -1);
    if (sync.trainable && cfg_.zero_stage <= 1) {
      // Buckets of whole units from the output end; the last bucket reaches
      // both ends of the padded region so that the all-reduces cover it all.
      int first = U;
      for (int u = U - 1; u >= 0; --u)
        if (units_[u].size(static_cast<int>(r)) > 0) first = u;
      int64_t hi = regions[r].total, lo = hi;
      for (int u = U - 1; u >= first; --u) {
        if (units_[u].size(static_cast<int>(r)) == 0) continue;
        lo = units_[u].ranges[r].first;
        sync.bucket_of_unit[u] = static_cast<int>(sync.buckets.size());
        if (hi - lo >= cfg_.bucket_size || u == first) {
          sync.buckets.push_back({u == first ? 0 : lo, hi});
          hi = lo;
        }
      }
      sync.pending_units.assign(sync.buckets.size(), 0);
      sync.bucket_work.resize(sync.buckets.size());
      sync.chain_work.resize(sync.buckets.size());
      if (sync.hierarchical) sync.owned.assign(static_cast<size_t>(regions[r].shard_size()), 0.0f);
    }
    Outer& o = outer_.emplace_back();
    if (sync.hierarchical && sync.trainable && cfg_.diloco_inner_steps > 0) {
      const int64_t n = regions[r].shard_size();
      o.anchor.assign(n, 0.0f);
      o.momentum.assign(n, 0.0f);
      o.delta.assign(n, 0.0f);
      if (cfg_.diloco_delta_bits < 32) {  // any fragments of it, packed
        const int64_t bytes = packed_delta_bytes(n, cfg_.diloco_delta_bits);
        o.packed.assign(bytes, 0);
        o.gathered.assign(bytes * cfg_.instances, 0);
      }
    }
    regions_.push_back(std::move(sync));
  }
  open_slot_.assign(U, -1);
  resident_.resize(U);
  memory_ = plan_memory(model_, cfg_);
  staging_capacity_ = static_cast<int64_t>(memory_.staging_slots / sizeof(float));
  gather_capacity_ = static_cast<int64_t>(memory_.gather_slots / sizeof(float));
  if (staging_capacity_ > 0) {
    staging_ = Arena("gradient staging", staging_capacity_ * sizeof(float));
    staging_alloc_ = SlotAllocator(staging_capacity_);
  }
  if (gather_capacity_ > 0) {
    gathered_ = Arena("gathered parameters", gather_capacity_ * sizeof(float));
    gather_alloc_ = SlotAllocator(gather_capacity_);
  }
  model_.set_hooks(this);
}

DataParallel::~DataParallel() { model_.set_hooks(nullptr); }

int64_t DataParallel::slot_offset(const model::ParamStore& store, const model::Unit& u, int r, bool grads) {
  int64_t at = 0;
  for (int q = 0; q < r; ++q)
    if (!grads || store.regions()[q].trainable) at += u.size(q);
  return at;
}

int64_t DataParallel::slot_size(const model::ParamStore& store, const model::Unit& u, bool grads) {
  return slot_offset(store, u, static_cast<int>(store.regions().size()), grads);
}

// Replays one micro-batch's use and gradient orders through unbounded
// allocators with the run's rules (see before_use, grads_begin, retire).
DataParallelMemory DataParallel::plan_memory(const model::GPT& model, const DataParallelConfig& cfg) {
  const model::ParamStore& store = model.store();
  const std::vector<model::Unit>& units = model.units();
  const auto& regions = store.regions();
  const auto values_size = [&](int u) { return slot_size(store, units[u], false); };
  const auto grads_size = [&](int u) { return slot_size(store, units[u], true); };
  DataParallelMemory m;
  m.values = store.value_bytes();
  m.grads = store.grad_bytes();
  // AdamW's exp_avg + exp_avg_sq over this rank's segments (segments()), in their dtypes.
  int64_t state = 0;
  for (const model::StoreRegion& g : regions) {
    if (!g.trainable) continue;
    const int64_t lo = cfg.zero_stage == 0 ? 0 : g.shard_lo(), hi = cfg.zero_stage == 0 ? g.total : g.shard_hi();
    for (size_t k : g.params) {
      const int64_t off = store.slot(k).offset;
      const int64_t b = std::max(lo, off), e = std::min(hi, off + store.params()[k]->spec.local_shape().numel());
      if (b < e) state += align16(e - b);
    }
  }
  m.optimizer = static_cast<size_t>(state) * cfg.optimizer_bytes_per_element +
                static_cast<size_t>(cfg.optimizer_fp8_moments * ((state + cfg.optimizer_fp8_block - 1) / cfg.optimizer_fp8_block)) *
                    sizeof(float);
  const int64_t bucket = cfg.bucket_size > 0 ? cfg.bucket_size
                                             : std::max<int64_t>(40'000'000, 1'000'000 * int64_t{store.options().shards});
  const int U = static_cast<int>(units.size());
  for (int r = 0; r < static_cast<int>(regions.size()); ++r) {
    if (!regions[r].trainable) continue;
    if (cfg.zero_stage == 1 && cfg.instances > 1 && regions[r].group == "dp")  // RegionSync::owned
      m.staging_slots += static_cast<size_t>(regions[r].shard_size()) * sizeof(float);
    if (cfg.diloco_inner_steps > 0 && cfg.instances > 1 && regions[r].group == "dp")  // anchor, momentum, deltas
      m.staging_slots += 3 * static_cast<size_t>(regions[r].shard_size()) * sizeof(float) +
                         (cfg.diloco_delta_bits < 32 ? static_cast<size_t>((1 + cfg.instances) *
                                                       packed_delta_bytes(regions[r].shard_size(), cfg.diloco_delta_bits))
                                                     : 0);
    if (cfg.zero_stage <= 1) {  // the constructor's buckets: whole units from the output end
      int first = U;
      for (int u = U - 1; u >= 0; --u)
        if (units[u].size(r) > 0) first = u;
      int64_t hi = regions[r].total;
      for (int u = U - 1; u >= first; --u) {
        if (units[u].size(r) == 0) continue;
        if (hi - units[u].ranges[r].first >= bucket || u == first) {
          const int64_t lo = u == first ? 0 : units[u].ranges[r].first;
          m.largest_all_reduce = std::max(m.largest_all_reduce, hi - lo);
          hi = lo;
        }
      }
    } else {
      for (int u = 0; u < U; ++u) m.largest_reduce_scatter = std::max(m.largest_reduce_scatter, std::min(units[u].size(r), bucket));
    }
  }
  if (cfg.zero_stage >= 2) {
    SlotAllocator a;
    std::vector<int64_t> open(units.size(), -1);
    std::deque<int64_t> inflight;
    for (const auto& ev : model.grad_order()) {
      if (grads_size(ev.unit) == 0) continue;
      if (ev.begin) {
        if (open[ev.unit] >= 0) continue;
        while (static_cast<int>(inflight.size()) >= cfg.max_inflight_reductions) {
          a.release(inflight.front());
          inflight.pop_front();
        }
        open[ev.unit] = a.allocate(grads_size(ev.unit));
      } else {
        inflight.push_back(open[ev.unit]);
        open[ev.unit] = -1;
        if (!cfg.overlap_grad_reduce) {
          a.release(inflight.front());
          inflight.pop_front();
        }
      }
    }
    m.staging_slots = static_cast<size_t>(a.high_water()) * sizeof(float);
  }
  if (store.options().values_in_slots()) {
    int64_t cap = 0;
    for (bool training : {true, false}) {
      SlotAllocator a;
      std::vector<int64_t> res(units.size(), -1);
      const std::vector<int> order = model.use_order(training);
      for (size_t i = 0; i < order.size(); ++i) {
        const int u = order[i];
        if (res[u] < 0) res[u] = a.allocate(values_size(u));
        if (cfg.overlap_param_gather && store.options().shard_values && i + 1 < order.size() && res[order[i + 1]] < 0)
          res[order[i + 1]] = a.allocate(values_size(order[i + 1]));
        a.release(res[u]);
        res[u] = -1;
      }
      cap = std::max(cap, a.high_water());
    }
    m.gather_slots = static_cast<size_t>(cap) * sizeof(float);
  }
  return m;
}

std::vector<model::Segment> DataParallel::segments() const {
  std::vector<model::Segment> out;
  const auto& params = store_.params();
  const auto& regions = store_.regions();
  for (int r = 0; r < static_cast<int>(regions.size()); ++r) {
    const model::StoreRegion& g = regions[r];
    if (!g.trainable) continue;
    const int64_t lo = cfg_.zero_stage == 0 ? 0 : g.shard_lo(), hi = cfg_.zero_stage == 0 ? g.total : g.shard_hi();
    float* grads = cfg_.zero_stage >= 2 ? store_.grad_shard(r) - lo : store_.grads(r);
    for (size_t k : g.params) {
      const int64_t off = store_.slot(k).offset;
      const int64_t b = std::max(lo, off), e = std::min(hi, off + params[k]->spec.local_shape().numel());
      if (b < e)
        out.push_back({.param = params[k], .value = store_.value_at(r, b), .grad = grads + b, .n = e - b,
                       .begin = b - off, .value_dtype = store_.master_dtype()});
    }
  }
  return out;
}

std::vector<int64_t> DataParallel::counts_of(int r, int64_t lo, int64_t hi) const {
  const model::StoreRegion& g = store_.regions()[r];
  const int64_t S = g.shard_size();
  std::vector<int64_t> c(g.shards);
  for (int q = 0; q < g.shards; ++q) c[q] = std::max<int64_t>(0, std::min(hi, (q + 1) * S) - std::max(lo, q * S));
  return c;
}

void DataParallel::bind(int unit, float* base, bool grads) {
  const model::Unit& u = units_[unit];
  for (size_t j = 0; j < u.params.size(); ++j) {
    model::Param* p = u.params[j];
    const model::ParamSlot& at = store_.slot(unit_params_[unit][j]);
    Tensor& t = grads ? p->grad : p->value;
    if (!base || (grads && !store_.regions()[at.region].trainable)) {
      t = Tensor();
      continue;
    }
    const int64_t pos = slot_offset(store_, u, at.region, grads) + at.offset - u.ranges[at.region].first;
    t = Tensor(base + pos, DType::f32, p->spec.local_shape());
  }
}

void DataParallel::begin_step() {
  store_.zero_grads();
  ++steps_;
  skip_reduce_ = dp_.faults() && dp_.faults()->skips_grad_reduce(steps_);
  // DiLoCo's first step (of the run, or after a checkpoint loaded): every
  // instance holds the same values, the anchors. Later each outer step
  // leaves its fragment's values equal to its anchor.
  if (cfg_.diloco_inner_steps > 0 && !anchored_) {
    for (size_t r = 0; r < outer_.size(); ++r)
      if (!outer_[r].anchor.empty())
        std::memcpy(outer_[r].anchor.data(), store_.value_at(static_cast<int>(r), store_.regions()[r].shard_lo()),
                    outer_[r].anchor.size() * sizeof(float));
    anchored_ = true;
  }
  for (RegionSync& g : regions_) {
    for (int& n : g.pending_units) n = 0;
    for (int b : g.bucket_of_unit)
      if (b >= 0) ++g.pending_units[b];
  }
  grad_wait_s_ = gather_wait_s_ = 0;
}

void DataParallel::begin_micro_batch(bool last) { last_micro_ = last; }

void DataParallel::begin_pass(bool training) {
  training_ = training;
  while (!inflight_.empty()) retire_oldest();
  use_order_ = model_.use_order(training);
  use_cursor_ = 0;
}

// ---- stage 3: values ---------------------------------------------------------

void DataParallel::issue_gather(int unit) {
  const model::Unit& u = units_[unit];
  Gathered& g = resident_[unit];
  g.slot = gather_alloc_.allocate(slot_size(store_, u, false));
  CLAW_CHECK(g.slot >= 0, "gather slots exhausted for unit {} (plan {} floats)", u.name, gather_capacity_);
  for (int r = 0; r < static_cast<int>(regions_.size()); ++r) {
    if (u.size(r) == 0) continue;
    const model::StoreRegion& reg = store_.regions()[r];
    const auto [lo, hi] = u.ranges[r];
    float* dst = gathered_.ptr<float>(0) + g.slot + slot_offset(store_, u, r, false);
    // This rank's part of the unit goes in place, in fp32; under ZeRO-3 the
    // gather fills the rest.
    const bool sharded = store_.options().shard_values;
    const int64_t b = sharded ? std::max(lo, reg.shard_lo()) : lo, e = sharded ? std::min(hi, reg.shard_hi()) : hi;
    if (b < e) convert(store_.master_dtype(), store_.value_at(r, b), DType::f32, dst + (b - lo), e - b);
    if (sharded) g.work.push_back(regions_[r].group->all_gather_async(nullptr, dst, counts_of(r, lo, hi), DType::f32));
  }
}

void DataParallel::before_use(int unit) {
  if (!store_.options().values_in_slots()) return;
  if (!store_.options().shard_values) {
    // fp16 masters, unsharded: the unit's working copy is widened on the
    // spot, in whatever order the schedule uses units (pipelines interleave
    // micro-batches), one unit at a time.
    if (resident_[unit].slot < 0) issue_gather(unit);
    bind(unit, gathered_.ptr<float>(0) + resident_[unit].slot, false);
    return;
  }
  CLAW_CHECK(use_cursor_ < use_order_.size() && use_order_[use_cursor_] == unit,
             "unit {} used out of the planned order", units_[unit].name);
  if (resident_[unit].slot < 0) issue_gather(unit);
  const auto t0 = Clock::now();
  for (comm::Work& w : resident_[unit].work) w.wait();
  gather_wait_s_ += seconds_since(t0);
  bind(unit, gathered_.ptr<float>(0) + resident_[unit].slot, false);
  ++use_cursor_;
  if (cfg_.overlap_param_gather && use_cursor_ < use_order_.size() && resident_[use_order_[use_cursor_]].slot < 0)
    issue_gather(use_order_[use_cursor_]);
}

void DataParallel::after_use(int unit) {
  if (!store_.options().values_in_slots()) return;
  bind(unit, nullptr, false);
  gather_alloc_.release(resident_[unit].slot);
  resident_[unit] = Gathered{};
}

// ---- gradients -----------------------------------------------------------------

void DataParallel::grads_begin(int unit) {
  const int64_t n = slot_size(store_, units_[unit], true);
  if (cfg_.zero_stage < 2 || open_slot_[unit] >= 0 || n == 0) return;
  while (static_cast<int>(inflight_.size()) >= cfg_.max_inflight_reductions) retire_oldest();
  const int64_t slot = staging_alloc_.allocate(n);
  CLAW_CHECK(slot >= 0, "staging slots exhausted for unit {} (plan {} floats)", units_[unit].name, staging_capacity_);
  float* base = staging_.ptr<float>(0) + slot;
  std::memset(base, 0, n * sizeof(float));
  open_slot_[unit] = slot;
  bind(unit, base, true);
}

void DataParallel::grads_end(int unit) {
  const model::Unit& u = units_[unit];
  if (cfg_.zero_stage <= 1) {
    if (!last_micro_) return;
    for (int r = 0; r < static_cast<int>(regions_.size()); ++r) {
      RegionSync& g = regions_[r];
      const int b = g.bucket_of_unit[unit];
      if (b < 0) continue;
      if (--g.pending_units[b] == 0 && cfg_.overlap_grad_reduce) issue_bucket(r, static_cast<size_t>(b));
    }
    return;
  }
  if (slot_size(store_, u, true) == 0) return;
  const int64_t slot = open_slot_[unit];
  float* base = staging_.ptr<float>(0) + slot;
  Staged st{.unit = unit, .slot = slot};
  for (int r = 0; r < static_cast<int>(regions_.size()); ++r) {
    if (!regions_[r].trainable || u.size(r) == 0) continue;
    const auto [ulo, uhi] = u.ranges[r];
    const int64_t at0 = slot_offset(store_, u, r, true);
    for (int64_t lo = ulo; lo < uhi; lo += cfg_.bucket_size) {
      const int64_t hi = std::min(uhi, lo + cfg_.bucket_size), at = at0 + (lo - ulo);
      st.pieces.push_back({.region = r, .lo = lo, .hi = hi, .at = at});
      const std::vector<int64_t> counts = counts_of(r, lo, hi);
      st.chain.emplace_back();
      if (take_skip(r)) {  // this rank's own block, unreduced, where the reduce-scatter leaves its result
        const int me = regions_[r].group->rank();
        const int64_t from = std::accumulate(counts.begin(), counts.begin() + me, int64_t{0});
        std::memmove(base + at, base + at + from, counts[me] * sizeof(float));
        st.work.emplace_back();
        continue;
      }
      st.work.push_back(regions_[r].group->reduce_scatter_async(base + at, base + at, counts, DType::f32));
      if (regions_[r].hierarchical && cfg_.diloco_inner_steps == 0 && counts[regions_[r].group->rank()] > 0)
        issue_inter(base + at, counts[regions_[r].group->rank()], st.work.back(), st.chain.back());
    }
  }
  inflight_.push_back(std::move(st));
  open_slot_[unit] = -1;
  bind(unit, nullptr, true);
  if (!cfg_.overlap_grad_reduce) retire_oldest();
}

bool DataParallel::take_skip(int r) {
  if (!skip_reduce_ || r != 0) return false;
  skip_reduce_ = false;
  log::warn("fault", "step {}: --test-fault skip-grad-reduce: the first gradient bucket of {} is left unreduced",
            steps_, regions_[r].group->name());
  return true;
}

float DataParallel::owned_scale(const RegionSync& g) const {
  // DiLoCo: the instance's reduced block is 1/N of its own mean gradient
  // (the loss is normalised by the global batch). x 1 is exact.
  return g.hierarchical && cfg_.diloco_inner_steps > 0 ? static_cast<float>(cfg_.instances) : 1.0f;
}

void DataParallel::issue_bucket(int r, size_t b) {
  RegionSync& g = regions_[r];
  const auto [lo, hi] = g.buckets[b];
  float* grads = store_.grads(r);
  if (take_skip(r)) return;  // each rank keeps its own sum in the bucket
  if (!g.hierarchical) {
    g.bucket_work[b] = g.group->all_reduce_async(grads + lo, hi - lo, DType::f32);
    return;
  }
  // Reduce-scatter inside the instance straight into the owned block's
  // place in `owned`, then all-reduce that block across the instances.
  const model::StoreRegion& reg = store_.regions()[r];
  const int64_t b0 = std::clamp(lo, reg.shard_lo(), reg.shard_hi()), b1 = std::clamp(hi, reg.shard_lo(), reg.shard_hi());
  float* own = g.owned.data() + (b0 - reg.shard_lo());
  g.bucket_work[b] = g.group->reduce_scatter_async(grads + lo, own, counts_of(r, lo, hi), DType::f32);
  g.chain_work[b].clear();
  if (b1 > b0 && cfg_.diloco_inner_steps == 0) issue_inter(own, b1 - b0, g.bucket_work[b], g.chain_work[b]);
}

void DataParallel::issue_inter(float* buf, int64_t n, const comm::Work& first, std::vector<comm::Work>& out) {
  const int64_t chunk = instances_.chunk_elements > 0 ? instances_.chunk_elements : n;
  for (int64_t at = 0; at < n; at += chunk) {
    comm::Group* g = instances_.inter[next_stream_++ % instances_.inter.size()];
    out.push_back(g->all_reduce_async(buf + at, std::min(chunk, n - at), DType::f32, comm::ReduceOp::sum,
                                      {.after = first}));
  }
}

// Waits for the oldest staged reduce-scatter and adds this rank's block of
// the sum into its gradient shard.
void DataParallel::retire_oldest() {
  Staged s = std::move(inflight_.front());
  inflight_.pop_front();
  for (size_t k = 0; k < s.pieces.size(); ++k) {
    const auto t0 = Clock::now();
    s.work[k].wait();
    for (const comm::Work& w : s.chain[k]) w.wait();
    grad_wait_s_ += seconds_since(t0);
    // This rank's block of the piece's sum is at the start of the piece.
    const Piece& p = s.pieces[k];
    const model::StoreRegion& g = store_.regions()[p.region];
    const int64_t b = std::max(p.lo, g.shard_lo()), e = std::min(p.hi, g.shard_hi());
    const float* src = staging_.ptr<float>(0) + s.slot + p.at;
    float* dst = store_.grad_shard(p.region) + (b - g.shard_lo());
    const float scale = owned_scale(regions_[p.region]);
    for (int64_t i = 0; i < e - b; ++i) dst[i] += scale * src[i];
  }
  staging_alloc_.release(s.slot);
}

void DataParallel::finish_grad_sync() {
  const auto t0 = Clock::now();
  if (cfg_.zero_stage <= 1) {
    for (int r = 0; r < static_cast<int>(regions_.size()); ++r) {
      RegionSync& g = regions_[r];
      for (size_t b = 0; b < g.buckets.size(); ++b)
        if (!cfg_.overlap_grad_reduce || g.pending_units[b] != 0) {
          CLAW_CHECK(cfg_.overlap_grad_reduce == false, "bucket {} still waits for {} units", b, g.pending_units[b]);
          issue_bucket(r, b);
        }
    }
    for (int r = 0; r < static_cast<int>(regions_.size()); ++r) {
      RegionSync& g = regions_[r];
      for (size_t b = 0; b < g.bucket_work.size(); ++b) {
        g.bucket_work[b].wait();
        g.bucket_work[b] = comm::Work();
        for (const comm::Work& w : g.chain_work[b]) w.wait();
        g.chain_work[b].clear();
      }
      // The reduced owned blocks, at their place in the shard (the optimizer
      // reads the owned range of the full gradient buffer).
      if (g.hierarchical && !g.owned.empty()) {
        float* dst = store_.grads(r) + store_.regions()[r].shard_lo();
        const float scale = owned_scale(g);
        for (size_t i = 0; i < g.owned.size(); ++i) dst[i] = scale * g.owned[i];
      }
    }
    grad_wait_s_ += seconds_since(t0);
  } else {
    while (!inflight_.empty()) retire_oldest();
  }
}

void DataParallel::gather_trainable_values() {
  // Frozen regions never change: only the trainable ones are gathered.
  for (int r = 0; r < static_cast<int>(regions_.size()); ++r)
    if (regions_[r].trainable)
      regions_[r].group->all_gather(nullptr, store_.value_at(r, 0), store_.regions()[r].shard_size(),
                                    store_.master_dtype());
}

void DataParallel::after_optimizer_step() {
  synced_ = false;
  if (const int64_t H = cfg_.diloco_inner_steps; H > 0) {
    ++inner_step_;
    // Fragment f's outer step after inner step (f + 1) H / P of the round.
    const int P = cfg_.diloco_fragments;
    for (int f = 0; f < P; ++f)
      if (inner_step_ == (f + 1) * H / P) {
        outer_step(f, f + 1);
        synced_ = P == 1;  // with fragments, the others have moved apart since theirs
      }
    if (inner_step_ == H) inner_step_ = 0;
  }
  if (cfg_.zero_stage == 1 || cfg_.zero_stage == 2) gather_trainable_values();
}

double DataParallel::all_reduce_sum(double v) { return dp_.all_reduce_value(v); }

double DataParallel::shard_sum(double v) {
  comm::Group& g = instances_.intra ? *instances_.intra : dp_;
  return g.size() > 1 ? g.all_reduce_value(v) : v;
}

void DataParallel::gather_values(float* out) {
  const DType master = store_.master_dtype();
  std::vector<uint8_t> whole;  // a 16-bit region, before it is widened into `out`
  for (int r = 0; r < static_cast<int>(regions_.size()); ++r) {
    const model::StoreRegion& g = store_.regions()[r];
    uint8_t* dst = reinterpret_cast<uint8_t*>(out + g.value_base);
    if (master != DType::f32) {
      whole.resize(static_cast<size_t>(g.total) * dtype_size(master));
      dst = whole.data();
    }
    if (store_.options().shard_values)
      regions_[r].group->all_gather(store_.value_at(r, g.shard_lo()), dst, g.shard_size(), master);
    else
      std::memcpy(dst, store_.value_at(r, 0), static_cast<size_t>(g.total) * dtype_size(master));
    if (master != DType::f32) convert(master, whole.data(), DType::f32, out + g.value_base, g.total);
  }
}

}  // namespace claw::parallel
