// Silent data corruption: catching a step whose result a fault changed.
//
// A step is suspect when its loss or gradient norm is not finite, or spikes
// above spiky_factor times the largest of the last `window` steps. The ranks
// agree on it (one all-reduce: a flipped bit may show on one data-parallel
// replica only) and run the step again from the same parameters and batch;
// the computation is deterministic, so each rank compares its own
// gradients' fingerprint (the sum of squares of the gradients it holds, as
// bits) between the two runs:
//   - some rank's gradients differ: the fault was transient; those ranks are
//     named, and the step goes on with the second run's gradients;
//   - every rank reproduces: it is the data or the model, not the hardware.
//     A spike is logged and training goes on; a non-finite result ends the
//     job as before (ExitCode::non_finite), after saving the state before
//     the step so a restart loses nothing.
// Every `weight_hash_interval` steps the data-parallel replicas compare a
// hash of their parameters, which must be bitwise equal; the ranks outside
// the majority (both, for two replicas) are named and the job ends with
// ExitCode::non_finite: the state is corrupt, resume from the last checkpoint.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "claw/comm/group.h"
#include "claw/runtime/model_chunks.h"

namespace claw::train {

struct SdcConfig {
  std::string rerun_mode = "validate_results";  // --rerun-mode validate_results|disabled (Megatron's names)
  double spiky_factor = 10;                     // --spiky-loss-factor: a spike is this many times the recent maximum
  int64_t window = 50;                          // steps the recent maximum is taken over
  int64_t min_history = 5;                      // steps seen before spikes are judged
  int64_t weight_hash_interval = 0;             // --check-weight-hash-across-dp-replicas-interval (0: off)
  bool rerun() const { return rerun_mode == "validate_results"; }
  void validate() const;  // throws claw::Error naming the flag
};

// Thrown when the agreed re-run of a non-finite step reproduced it: every
// rank throws it at the same step, so the trainer may save before ending.
class ReproducedNonFinite : public NonFiniteError {
 public:
  using NonFiniteError::NonFiniteError;
};

class SdcMonitor {
 public:
  // `world`: every rank of the job (they agree on re-runs); `dp`: this
  // rank's data-parallel replicas (the weight hash).
  SdcMonitor(SdcConfig cfg, comm::Group& world, comm::Group* dp);

  // Whether the step that gave (loss, grad_norm) on this rank must run
  // again: collective over the world, the same answer on every rank.
  bool suspect(double loss, double grad_norm);
  // After the re-run: the world ranks whose fingerprints differed between
  // the runs (collective; the same list on every rank).
  std::vector<int> unreproduced(uint64_t first, uint64_t second);
  // A step's result that training went on with.
  void observe(double loss, double grad_norm);
  // Every weight_hash_interval steps (step from 1): compares the replicas'
  // parameter hashes and fails naming the diverging ranks. Collective over dp.
  void check_replicas(const runtime::ModelChunks& model, int64_t step);

  const SdcConfig& config() const { return cfg_; }
  comm::Group& world() const { return world_; }
  int64_t reruns() const { return reruns_; }
  int64_t transient() const { return transient_; }
  // The hosts of the ranks check_replicas named (for the supervisor).
  const std::vector<std::string>& suspect_hosts() const { return suspect_hosts_; }

 private:
  SdcConfig cfg_;
  comm::Group& world_;
  comm::Group* dp_;
  std::deque<double> losses_, norms_;
  int64_t reruns_ = 0, transient_ = 0;
  std::vector<std::string> suspect_hosts_;
};

// The bits of a double, for fingerprints compared bitwise.
uint64_t bits_of(double v);
// "world rank 2 (host vm, pid 123)" for each rank of `ranks`, and their
// hosts: gathered over `group` (collective).
struct RankHosts {
  std::string description;
  std::vector<std::string> hosts;
};
RankHosts describe_ranks(comm::Group& group, const std::vector<int>& ranks);

}  // namespace claw::train
