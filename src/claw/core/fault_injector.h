// FaultInjector: failures on demand, for the fault tests only.
//
// Library code never looks for faults in the environment: a test builds an
// injector and passes it in through the options of what should fail
// (comm::WorldOptions::faults, ckpt::SaveConfig::faults); the claw binary
// builds one at the command-line edge from its hidden --test-fault flag.
// Specs, one per fault:
//
//   hang:RANK:GROUP:SEQ   world rank RANK never starts operation SEQ (from 1)
//                         of group GROUP ("world", "dp", "pp", ...): its peers
//                         time out, as with a hung process
//   crash-in-save:ITER    the job's last rank SIGKILLs itself halfway through
//                         writing its checkpoint file of iteration ITER, as a
//                         lost node would
//   inf-grad:STEP         after the backward of training step STEP (from 1) a
//                         gradient element becomes inf, as an f16 overflow would
//   bit-flip:RANK:STEP    on world rank RANK, the first time training step STEP
//                         (from 1) runs, bit 30 (the exponent's top bit) of
//                         the first element of the rank's reduced gradients
//                         flips, as a memory or ALU fault would
//   bit-flip:@HOST:STEP   the same on every rank whose host name is HOST (a
//                         bad host: gone once the host is left out)
//   slow:RANK:FACTOR      world rank RANK computes FACTOR times slower: after
//                         each step's forward and backward it sleeps (FACTOR -
//                         1) times their time, as a throttled node would
//
// Immutable once built, so one injector may be shared by every thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace claw {

class FaultInjector {
 public:
  // Throws claw::Error naming `flag` and the valid forms for a bad spec.
  static FaultInjector parse(const std::vector<std::string>& specs, std::string_view flag = "--test-fault");

  bool empty() const { return hangs_.empty() && crash_in_save_.empty() && inf_grad_.empty() && bit_flips_.empty() && slow_.empty(); }
  // Whether world rank `world_rank` must hang before operation `seq` of `group`.
  bool hangs(int world_rank, std::string_view group, uint64_t seq) const;
  // Whether rank `rank` of a job of `size` ranks dies while writing iteration `iteration`.
  bool crashes_in_save(int64_t iteration, int rank, int size) const;
  // Whether training step `step` (from 1) gets an infinite gradient.
  bool inf_grad(int64_t step) const;
  // Whether world rank `world_rank` (on this host) gets a flipped gradient bit at step `step` (from 1).
  bool bit_flip(int world_rank, int64_t step) const;
  static std::string this_host();
  // How many times slower world rank `rank` computes (1: not slowed).
  double slowdown(int world_rank) const;
  // The spec behind a fault, for the log line of the rank that acts on it.
  static std::string describe_hang(int world_rank, std::string_view group, uint64_t seq);

 private:
  struct Hang {
    int rank;
    std::string group;
    uint64_t seq;
  };
  std::vector<Hang> hangs_;
  std::vector<int64_t> crash_in_save_;
  std::vector<int64_t> inf_grad_;
  struct BitFlip {
    int rank = -1;
    std::string host;  // "": by rank
    int64_t step = 0;
  };
  std::vector<BitFlip> bit_flips_;
  std::vector<std::pair<int, double>> slow_;
};

}  // namespace claw
