// Discrete-event simulation of a pipeline schedule (pipeline_schedule.h): runs
// every stage's action list with given costs and reports whether it finishes,
// how long it takes, where the stages wait, and how many micro-batches each
// stage holds. The planner and the tests use it on the same lists the executor
// runs (DESIGN.md principle 5).
//
// Model. Each stage is one sequential worker with a clock; it executes its list
// in order. A compute action takes its cost (a full backward costs
// backward_input + backward_weight) and needs its inputs on this stage: a
// forward the activation of virtual stage vs - 1 (received, or produced here
// when that virtual stage lives on the same stage), a backward the forward of
// the same (micro-batch, chunk) and the output gradient (received, produced
// here, or none on the last virtual stage), a weight pass its input pass. A
// send takes no time: it is posted when reached (non-blocking) and its data
// arrives p2p_latency later. A recv takes no stage time but completes only at
// max(now, send time + latency) once the matching send (same kind and
// micro-batch, from the virtual stage next door, to this stage) has been
// posted; until then the stage waits. Because the only cross-stage coupling is
// recv-after-send, the times computed do not depend on the order the stages
// are stepped in (each time is a max-plus function of earlier ones).
//
// Results. Deadlock: no stage can move and some have actions left; each such
// stage is reported with the action it is stuck on and why (a recv whose
// send is not reached, or one that no stage will ever send; a compute whose
// input never arrived). Busy time = sum of compute costs; idle = makespan -
// busy (waits before, between and after); bubble fraction = (makespan p -
// sum busy) / (makespan p) = sum idle / (makespan p). In flight on a stage: the
// (micro-batch, chunk) forwards whose backward (input part) has not completed
// there, which is what sizes the activation arena; with v chunks each unit is
// 1/v of a stage's layers. Pending weight: forwards whose weight-gradient
// pass has not completed (equal to in flight unless the backward is split).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "claw/parallel/pipeline_schedule.h"

namespace claw::parallel {

// Per-action costs in any time unit, the same on every stage and chunk.
struct ActionCosts {
  double forward = 1.0;
  double backward_input = 1.0;   // a full backward costs backward_input + backward_weight
  double backward_weight = 1.0;
  double p2p_latency = 0.0;      // from a send being posted to its data being receivable
};

// Cost of a compute action on a stage (for uneven stages); transfers are never passed.
using ComputeCost = std::function<double(int stage, const Action& action)>;

struct StageStats {
  double busy = 0.0;          // sum of compute costs
  double idle = 0.0;          // makespan - busy
  double finish = 0.0;        // when its last action completed
  int peak_inflight = 0;      // max forwards whose backward (input part) is not done
  int peak_pending_weight = 0;  // max forwards whose weight gradient is not done
};

struct Stuck {
  int stage = 0;
  size_t index = 0;  // position in stages[stage]
  Action action;
  std::string reason;
};

struct SimResult {
  bool deadlock_free = true;
  std::vector<Stuck> stuck;            // one per stage that cannot finish, when deadlocked
  std::vector<std::string> defects;    // sends never received, repeated actions
  double makespan = 0.0;
  double total_busy = 0.0;
  double bubble_fraction = 0.0;
  std::vector<StageStats> stages;
  // One line per problem (stuck stages, defects); empty when none.
  std::string describe() const;
};

SimResult simulate(const Schedule& schedule, const ActionCosts& costs);
SimResult simulate(const Schedule& schedule, const ComputeCost& cost, double p2p_latency);

}  // namespace claw::parallel
