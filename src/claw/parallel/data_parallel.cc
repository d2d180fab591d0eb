#include "claw/parallel/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "claw/core/error.h"
#include "claw/core/log.h"

namespace claw::parallel {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
int64_t align16(int64_t n) { return (n + 15) / 16 * 16; }
}  // namespace

void DataParallelConfig::validate(int dp) const {
  if (zero_stage < 0 || zero_stage > 3) fail("--zero-stage {} must be 0, 1, 2 or 3", zero_stage);
  if (bucket_size < 0) fail("--ddp-bucket-size {} must be positive (elements per gradient bucket)", bucket_size);
  if (max_inflight_reductions < 1) fail("at least one reduction must be allowed in flight");
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

DataParallel::DataParallel(model::GPT& model, comm::Group& dp, DataParallelConfig cfg)
    : model_(model), store_(model.store()), dp_(dp), cfg_(cfg), units_(model.units()) {
  cfg_.validate(dp.size());
  const model::StoreOptions want = store_options(cfg_.zero_stage, dp.size(), dp.rank());
  const model::StoreOptions& have = store_.options();
  CLAW_CHECK(have.shards == want.shards && have.shard == want.shard && have.shard_values == want.shard_values &&
                 have.shard_grads == want.shard_grads,
             "the model's parameter store was not built with store_options(stage {}, {}, {})", cfg_.zero_stage,
             dp.size(), dp.rank());
  if (cfg_.bucket_size == 0) cfg_.bucket_size = std::max<int64_t>(40'000'000, 1'000'000 * int64_t{dp.size()});

  const int U = static_cast<int>(units_.size());
  bucket_of_unit_.assign(U, -1);
  if (cfg_.zero_stage <= 1) {
    // Buckets of whole units from the output end; the last bucket reaches
    // the end of the padded buffer so that the all-reduce covers it all.
    int64_t hi = store_.total(), lo = hi;
    for (int u = U - 1; u >= 0; --u) {
      if (units_[u].params.empty()) continue;
      lo = units_[u].lo;
      bucket_of_unit_[u] = static_cast<int>(buckets_.size());
      if (hi - lo >= cfg_.bucket_size || u == 0) {
        buckets_.push_back({u == 0 ? 0 : lo, hi});
        hi = lo;
      }
    }
    pending_units_.assign(buckets_.size(), 0);
    bucket_work_.resize(buckets_.size());
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

// Replays one micro-batch's use and gradient orders through unbounded
// allocators with the run's rules (see before_use, grads_begin, retire).
DataParallelMemory DataParallel::plan_memory(const model::GPT& model, const DataParallelConfig& cfg) {
  const model::ParamStore& store = model.store();
  const std::vector<model::Unit>& units = model.units();
  auto size = [&](int u) { return units[u].hi - units[u].lo; };
  DataParallelMemory m;
  m.values = store.value_bytes();
  m.grads = store.grad_bytes();
  // AdamW's exp_avg + exp_avg_sq over this rank's segments (segments()).
  int64_t state = 0;
  const int64_t lo = cfg.zero_stage == 0 ? 0 : store.shard_lo(), hi = cfg.zero_stage == 0 ? store.total() : store.shard_hi();
  for (size_t k = 0; k < store.params().size(); ++k) {
    const int64_t off = static_cast<int64_t>(store.offsets()[k] / sizeof(float));
    const int64_t b = std::max(lo, off), e = std::min(hi, off + store.params()[k]->spec.local_shape().numel());
    if (b < e) state += align16(e - b);
  }
  m.optimizer = 2 * static_cast<size_t>(state) * sizeof(float);
  const int64_t bucket = cfg.bucket_size > 0 ? cfg.bucket_size
                                             : std::max<int64_t>(40'000'000, 1'000'000 * int64_t{store.options().shards});
  if (cfg.zero_stage <= 1) {  // the constructor's buckets: whole units from the output end
    int64_t hi = store.total();
    for (int u = static_cast<int>(units.size()) - 1; u >= 0; --u) {
      if (units[u].params.empty()) continue;
      if (hi - units[u].lo >= bucket || u == 0) {
        const int64_t lo = u == 0 ? 0 : units[u].lo;
        m.largest_all_reduce = std::max(m.largest_all_reduce, hi - lo);
        hi = lo;
      }
    }
  } else {
    for (int u = 0; u < static_cast<int>(units.size()); ++u)
      m.largest_reduce_scatter = std::max(m.largest_reduce_scatter, std::min(size(u), bucket));
  }
  if (cfg.zero_stage >= 2) {
    SlotAllocator a;
    std::vector<int64_t> open(units.size(), -1);
    std::deque<int64_t> inflight;
    for (const auto& ev : model.grad_order()) {
      if (size(ev.unit) == 0) continue;
      if (ev.begin) {
        if (open[ev.unit] >= 0) continue;
        while (static_cast<int>(inflight.size()) >= cfg.max_inflight_reductions) {
          a.release(inflight.front());
          inflight.pop_front();
        }
        open[ev.unit] = a.allocate(size(ev.unit));
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
  if (cfg.zero_stage >= 3) {
    int64_t cap = 0;
    for (bool training : {true, false}) {
      SlotAllocator a;
      std::vector<int64_t> res(units.size(), -1);
      const std::vector<int> order = model.use_order(training);
      for (size_t i = 0; i < order.size(); ++i) {
        const int u = order[i];
        if (res[u] < 0) res[u] = a.allocate(size(u));
        if (cfg.overlap_param_gather && i + 1 < order.size() && res[order[i + 1]] < 0)
          res[order[i + 1]] = a.allocate(size(order[i + 1]));
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
  if (cfg_.zero_stage == 0) return store_.full_segments();
  const int64_t lo = store_.shard_lo(), hi = store_.shard_hi();
  float* values = cfg_.zero_stage >= 3 ? store_.value_shard() - lo : store_.values();
  float* grads = cfg_.zero_stage >= 2 ? store_.grad_shard() - lo : store_.grads();
  std::vector<model::Segment> out;
  const auto& params = store_.params();
  for (size_t k = 0; k < params.size(); ++k) {
    const int64_t off = static_cast<int64_t>(store_.offsets()[k] / sizeof(float));
    const int64_t b = std::max(lo, off), e = std::min(hi, off + params[k]->spec.local_shape().numel());
    if (b < e) out.push_back({.param = params[k], .value = values + b, .grad = grads + b, .n = e - b, .begin = b - off});
  }
  return out;
}

std::vector<int64_t> DataParallel::counts_of(int64_t lo, int64_t hi) const {
  const int64_t S = store_.total() / dp_.size();
  std::vector<int64_t> c(dp_.size());
  for (int r = 0; r < dp_.size(); ++r) c[r] = std::max<int64_t>(0, std::min(hi, (r + 1) * S) - std::max(lo, r * S));
  return c;
}

// Points the unit's parameters' value (or gradient) tensors into `base`,
// which holds the unit's flat range; null unbinds them.
void DataParallel::bind(int unit, float* base, Tensor model::Param::*which) {
  const model::Unit& u = units_[unit];
  const auto& params = store_.params();
  for (model::Param* p : u.params) {
    const size_t k = static_cast<size_t>(std::find(params.begin(), params.end(), p) - params.begin());
    const int64_t at = static_cast<int64_t>(store_.offsets()[k] / sizeof(float)) - u.lo;
    p->*which = base ? Tensor(base + at, DType::f32, p->spec.local_shape()) : Tensor();
  }
}

void DataParallel::begin_step() {
  store_.zero_grads();
  for (int& n : pending_units_) n = 0;
  for (size_t u = 0; u < units_.size(); ++u)
    if (bucket_of_unit_[u] >= 0) ++pending_units_[bucket_of_unit_[u]];
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
  g.slot = gather_alloc_.allocate(u.hi - u.lo);
  CLAW_CHECK(g.slot >= 0, "gather slots exhausted for unit {} (plan {} floats)", u.name, gather_capacity_);
  float* dst = gathered_.ptr<float>(0) + g.slot;
  // This rank's part of the unit goes in place; the gather fills the rest.
  const int64_t S = store_.total() / dp_.size(), r = dp_.rank();
  const int64_t b = std::max(u.lo, r * S), e = std::min(u.hi, (r + 1) * S);
  if (b < e) std::memcpy(dst + (b - u.lo), store_.value_shard() + (b - r * S), (e - b) * sizeof(float));
  const std::vector<int64_t> counts = counts_of(u.lo, u.hi);
  g.work = dp_.all_gather_async(nullptr, dst, counts, DType::f32);
}

void DataParallel::before_use(int unit) {
  if (cfg_.zero_stage < 3) return;
  CLAW_CHECK(use_cursor_ < use_order_.size() && use_order_[use_cursor_] == unit,
             "unit {} used out of the planned order", units_[unit].name);
  if (resident_[unit].slot < 0) issue_gather(unit);
  const auto t0 = Clock::now();
  resident_[unit].work.wait();
  gather_wait_s_ += since(t0);
  bind(unit, gathered_.ptr<float>(0) + resident_[unit].slot, &model::Param::value);
  ++use_cursor_;
  if (cfg_.overlap_param_gather && use_cursor_ < use_order_.size() && resident_[use_order_[use_cursor_]].slot < 0)
    issue_gather(use_order_[use_cursor_]);
}

void DataParallel::after_use(int unit) {
  if (cfg_.zero_stage < 3) return;
  bind(unit, nullptr, &model::Param::value);
  gather_alloc_.release(resident_[unit].slot);
  resident_[unit] = Gathered{};
}

// ---- gradients -----------------------------------------------------------------

void DataParallel::grads_begin(int unit) {
  if (cfg_.zero_stage < 2 || open_slot_[unit] >= 0 || units_[unit].hi == units_[unit].lo) return;
  while (static_cast<int>(inflight_.size()) >= cfg_.max_inflight_reductions) retire_oldest();
  const int64_t n = units_[unit].hi - units_[unit].lo;
  const int64_t slot = staging_alloc_.allocate(n);
  CLAW_CHECK(slot >= 0, "staging slots exhausted for unit {} (plan {} floats)", units_[unit].name, staging_capacity_);
  float* base = staging_.ptr<float>(0) + slot;
  std::memset(base, 0, n * sizeof(float));
  open_slot_[unit] = slot;
  bind(unit, base, &model::Param::grad);
}

void DataParallel::grads_end(int unit) {
  if (units_[unit].hi == units_[unit].lo) return;
  if (cfg_.zero_stage <= 1) {
    if (!last_micro_) return;
    const int b = bucket_of_unit_[unit];
    if (--pending_units_[b] == 0 && cfg_.overlap_grad_reduce)
      bucket_work_[b] = dp_.all_reduce_async(store_.grads() + buckets_[b].first,
                                             buckets_[b].second - buckets_[b].first, DType::f32);
    return;
  }
  const int64_t slot = open_slot_[unit];
  float* base = staging_.ptr<float>(0) + slot;
  const model::Unit& u = units_[unit];
  Staged st{.unit = unit, .slot = slot};
  for (int64_t lo = u.lo; lo < u.hi; lo += cfg_.bucket_size) {
    const int64_t hi = std::min(u.hi, lo + cfg_.bucket_size);
    st.pieces.push_back({lo, hi});
    st.work.push_back(dp_.reduce_scatter_async(base + (lo - u.lo), base + (lo - u.lo), counts_of(lo, hi), DType::f32));
  }
  inflight_.push_back(std::move(st));
  open_slot_[unit] = -1;
  bind(unit, nullptr, &model::Param::grad);
  if (!cfg_.overlap_grad_reduce) retire_oldest();
}

// Waits for the oldest staged reduce-scatter and adds this rank's block of
// the sum into its gradient shard.
void DataParallel::retire_oldest() {
  Staged s = std::move(inflight_.front());
  inflight_.pop_front();
  const model::Unit& u = units_[s.unit];
  const int64_t S = store_.total() / dp_.size(), r = dp_.rank();
  for (size_t k = 0; k < s.pieces.size(); ++k) {
    const auto t0 = Clock::now();
    s.work[k].wait();
    grad_wait_s_ += since(t0);
    // This rank's block of the piece's sum is at the start of the piece.
    const auto [lo, hi] = s.pieces[k];
    const int64_t b = std::max(lo, r * S), e = std::min(hi, (r + 1) * S);
    const float* src = staging_.ptr<float>(0) + s.slot + (lo - u.lo);
    float* dst = store_.grad_shard() + (b - r * S);
    for (int64_t i = 0; i < e - b; ++i) dst[i] += src[i];
  }
  staging_alloc_.release(s.slot);
}

void DataParallel::finish_grad_sync() {
  const auto t0 = Clock::now();
  if (cfg_.zero_stage <= 1) {
    for (size_t b = 0; b < buckets_.size(); ++b)
      if (!cfg_.overlap_grad_reduce || pending_units_[b] != 0) {
        CLAW_CHECK(cfg_.overlap_grad_reduce == false, "bucket {} still waits for {} units", b, pending_units_[b]);
        bucket_work_[b] = dp_.all_reduce_async(store_.grads() + buckets_[b].first,
                                               buckets_[b].second - buckets_[b].first, DType::f32);
      }
    for (comm::Work& w : bucket_work_) {
      w.wait();
      w = comm::Work();
    }
    grad_wait_s_ += since(t0);
  } else {
    while (!inflight_.empty()) retire_oldest();
  }
}

void DataParallel::after_optimizer_step() {
  if (cfg_.zero_stage == 1 || cfg_.zero_stage == 2)
    dp_.all_gather(nullptr, store_.values(), store_.total() / dp_.size(), DType::f32);
}

double DataParallel::all_reduce_sum(double v) { return dp_.all_reduce_value(v); }

void DataParallel::gather_values(float* out) {
  if (cfg_.zero_stage < 3) {
    std::memcpy(out, store_.values(), store_.bytes());
    return;
  }
  dp_.all_gather(store_.value_shard(), out, store_.total() / dp_.size(), DType::f32);
}

}  // namespace claw::parallel
