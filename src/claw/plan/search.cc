#include "claw/plan/search.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "claw/core/error.h"
#include "claw/model/tensor_parallel.h"

namespace claw::plan {

namespace {

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int k = 1; k <= n; ++k)
    if (n % k == 0) d.push_back(k);
  return d;
}

template <typename T>
std::vector<T> pinned_or(const std::optional<T>& pin, std::vector<T> free) {
  if (pin) return {*pin};
  return free;
}

bool tp_splits(const model::ModelConfig& m, int tp) {
  try {
    model::validate_tensor_parallel(m, tp, false);
    return true;
  } catch (const Error&) {
    return false;
  }
}

double gib(double b) { return b / (1024.0 * 1024.0 * 1024.0); }

}  // namespace

SearchResult search(const Job& job, const Cluster& c, const Precision& prec, const Constraints& pin,
                    const Catalog* catalog) {
  c.validate();
  job.model.validate();
  const int N = c.num_devices;
  const model::ModelConfig& m = job.model;
  std::vector<int> tps;
  for (int t : divisors(N))
    if (t <= c.devices_per_node && tp_splits(m, t)) tps.push_back(t);
  tps = pinned_or(pin.tp, tps);
  if (pin.tp) model::validate_tensor_parallel(m, *pin.tp, false);  // a pinned TP that cannot split says why
  std::vector<int> cps = {1};
  if (job.seq_length >= 8192)
    for (int k : {2, 4, 8}) cps.push_back(k);
  cps = pinned_or(pin.cp, cps);

  SearchResult out;
  std::string first_error;
  for (int tp : tps)
    for (int cp : cps) {
      if (N % (tp * cp) != 0) continue;
      for (int pp : pinned_or(pin.pp, divisors(N / (tp * cp)))) {
        if (N % (tp * cp * pp) != 0) continue;
        const int dp = N / (tp * cp * pp);
        if (pin.dp && *pin.dp != dp) continue;
        if (!pin.pp && m.num_layers % pp != 0) continue;
        std::vector<int64_t> mbs;
        for (int64_t b : {1, 2, 4, 8, 16})
          if (job.global_batch_size % (b * dp) == 0) mbs.push_back(b);
        for (int64_t mb : pinned_or(pin.micro_batch_size, mbs)) {
          std::vector<int> vs = {1};
          if (pp > 1 && !pin.schedule)
            for (int v : {2, 4}) vs.push_back(v);
          for (int v : pinned_or(pin.virtual_stages, vs)) {
            std::vector<parallel::ScheduleKind> kinds = {v > 1 ? parallel::ScheduleKind::interleaved
                                                               : parallel::ScheduleKind::one_f_one_b};
            std::vector<int> zeros = {0};
            if (dp > 1) zeros.push_back(1);
            if (dp > 1 && pp == 1 && !pin.claw_trainer) zeros.insert(zeros.end(), {2, 3});
            std::vector<int> eps = {1};
            if (m.moe.enabled())
              for (int e = 2; e <= dp * cp; e *= 2)
                if (m.moe.num_experts % e == 0 && dp * cp % e == 0) eps.push_back(e);
            for (parallel::ScheduleKind kind : pinned_or(pin.schedule, kinds))
              for (int zero : pinned_or(pin.zero_stage, zeros))
                for (int ep : pinned_or(pin.ep, eps))
                for (bool rc : pinned_or(pin.recompute, std::vector<bool>{false, true})) {
                  Layout l;
                  l.tp = tp, l.cp = cp, l.pp = pp, l.dp = dp, l.ep = ep;
                  if (m.moe.enabled() && tp > 1) l.etp = 1;  // experts whole on each rank
                  l.sequence_parallel = pin.sequence_parallel.value_or(tp > 1);
                  l.virtual_stages = v;
                  l.schedule = kind;
                  l.micro_batch_size = mb;
                  l.zero_stage = zero;
                  l.recompute_num_layers = rc ? m.num_layers : 0;
                  const bool overlap_ok = !pin.claw_trainer || pp == 1;
                  l.overlap_grad_reduce = dp > 1 && overlap_ok;
                  l.ddp_bucket_size = pin.ddp_bucket_size.value_or(0);
                  l.overlap_param_gather = dp > 1 && zero >= 1 && overlap_ok && (!pin.claw_trainer || zero >= 3);
                  if (pin.claw_trainer && pp > 1 && (zero >= 2 || rc)) continue;
                  if (c.data_centers > 1 && dp % c.data_centers != 0) continue;
                  // Across data centres: one distributed-optimizer instance in each (hierarchical reduction).
                  if (c.data_centers > 1 && zero >= 1) l.instances = c.data_centers;
                  try {
                    validate_layout(job, l, N);
                  } catch (const Error& err) {
                    if (first_error.empty()) first_error = err.what();
                    continue;
                  }
                  ++out.considered;
                  const StageMemory mem = peak_memory(job, l, prec, &c.device);
                  if (mem.total() > c.device.memory_bytes) {
                    Estimate e;
                    e.layout = l;
                    e.memory = mem;
                    e.fits = false;
                    e.why_not = fmt::format("stage {} needs {:.1f} GiB > {:.1f} GiB ({})", mem.stage,
                                            gib(mem.total()), gib(c.device.memory_bytes), describe(mem));
                    out.rejected.push_back(std::move(e));
                    continue;
                  }
                  out.ranked.push_back(estimate(job, l, c, prec, &mem));
                }
          }
        }
      }
    }
  if (out.considered == 0)
    fail("no valid layout of {} on {} devices{}", m.name, N,
         first_error.empty() ? std::string(" (the pinned sizes leave none)") : ": " + first_error);
  // Fastest first; within 0.5% prefer no more model parallelism than needed (smaller TP, then TP x CP x PP),
  // then the distributed optimizer over replication, then less memory.
  std::stable_sort(out.ranked.begin(), out.ranked.end(), [](const Estimate& a, const Estimate& b) {
    const double ra = a.tokens_per_s, rb = b.tokens_per_s;
    if (std::abs(ra - rb) > 0.005 * std::max(ra, rb)) return ra > rb;
    if (a.layout.tp != b.layout.tp) return a.layout.tp < b.layout.tp;
    const int ma = a.layout.tp * a.layout.cp * a.layout.pp, mb = b.layout.tp * b.layout.cp * b.layout.pp;
    if (ma != mb) return ma < mb;
    const bool za = a.layout.zero_stage == 1, zb = b.layout.zero_stage == 1;
    if (za != zb) return za;
    return a.memory.total() < b.memory.total();
  });
  std::stable_sort(out.rejected.begin(), out.rejected.end(),
                   [](const Estimate& a, const Estimate& b) { return a.memory.total() < b.memory.total(); });
  if (out.ranked.empty()) {
    const double need = out.rejected.front().memory.total();
    out.none_fit = fmt::format("needs at least {:.1f} GiB per device at any layout ({}: {}); {} has {:.1f} GiB",
                               gib(need), out.rejected.front().layout.describe(),
                               describe(out.rejected.front().memory), c.device.key, gib(c.device.memory_bytes));
    if (catalog) {
      const Device& big = catalog->largest();
      out.none_fit += fmt::format(" (largest in the catalog: {}, {:.1f} GiB)", big.key, gib(big.memory_bytes));
    }
  }
  return out;
}

}  // namespace claw::plan
