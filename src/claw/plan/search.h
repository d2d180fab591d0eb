// The search: every valid layout of a job on a cluster, those that do not
// fit dropped (with the reason kept), the rest ranked by predicted
// throughput. Pinned fields (Constraints) are evaluated rather than
// searched. Rules that hold in practice prune the space (Narayanan et al.
// 2021, section 3.3): TP stays within a node unless pinned; sequence
// parallelism always goes with TP; context parallelism only for long
// sequences (>= 8192) unless pinned; with PP > 1 the interleaved schedule
// is tried at 2 and 4 model chunks. Among layouts within 0.5% of each other's
// throughput, the smaller TP (then the less model parallelism) wins, then the
// distributed optimizer (ZeRO-1) over replication, then less memory.
// Expert parallelism (MoE models) is tried at each power of two dividing
// both the experts and DP x CP; under TP the experts stay whole (expert TP 1).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "claw/plan/cost_model.h"

namespace claw::plan {

struct Constraints {
  std::optional<int> tp, pp, cp, dp, ep, virtual_stages, zero_stage;
  std::optional<int64_t> micro_batch_size, ddp_bucket_size;
  std::optional<bool> recompute, sequence_parallel;
  std::optional<parallel::ScheduleKind> schedule;
  // Only layouts `claw train` runs today (PP without ZeRO-2/3, overlap or
  // recompute): what --parallel auto may choose.
  bool claw_trainer = false;
};

struct SearchResult {
  std::vector<Estimate> ranked;    // fitting layouts, fastest first
  std::vector<Estimate> rejected;  // valid layouts that do not fit (why_not says why), smallest first
  int64_t considered = 0;          // valid layouts evaluated
  // Set when nothing fits: the least memory any layout needs and what it is
  // short of, e.g. "needs at least 96.0 GiB per device at any layout; h100 has 80.0 GiB (largest in the
  // catalog: h200, 141.0 GiB)".
  std::string none_fit;
};

SearchResult search(const Job& job, const Cluster& cluster, const Precision& prec, const Constraints& pins,
                    const Catalog* catalog = nullptr);

}  // namespace claw::plan
