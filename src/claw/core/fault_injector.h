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
// Mutations: the bugs the parallel parity tests exist to catch, planted one
// at a time so that a test can show its comparison catches them (ctest
// mpi_mutation_*). Each is read where the layout runs, through the group it
// runs on (comm::Group::faults), or by the trainer:
//
//   skip-grad-reduce:STEP       at training step STEP (from 1) the data-
//                               parallel engines leave their first gradient
//                               bucket unreduced: each rank keeps its own sum
//                               there, as if one all-reduce were left out
//   scale-grad:RANK:STEP:FACTOR after step STEP's gradient reduction, world
//                               rank RANK's gradients are multiplied by FACTOR
//   drop-pp-row:STEP            at step STEP the first activation each
//                               pipeline stage sends arrives with its last row
//                               (a token's hidden vector) zeroed
//   shift-cp-chunk:RANK         world rank RANK takes the second of its two
//                               context-parallel chunks of every row one token
//                               later (an off-by-one chunk boundary)
//   drop-ep-row:RANK            each MoE dispatch on world rank RANK loses the
//                               last token row it receives (zeroed)
//   skip-optimizer-load:RANK    world rank RANK resumes from a checkpoint
//                               without its optimizer state
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

  bool empty() const {
    return hangs_.empty() && crash_in_save_.empty() && inf_grad_.empty() && bit_flips_.empty() && slow_.empty() &&
           skip_grad_reduce_.empty() && scale_grad_.empty() && drop_pp_row_.empty() && shift_cp_chunk_.empty() &&
           drop_ep_row_.empty() && skip_optimizer_load_.empty();
  }
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
  // Mutations (see above). Steps count from 1.
  bool skips_grad_reduce(int64_t step) const;
  // The factor world rank `world_rank`'s gradients take after step `step`'s reduction (1: none).
  double grad_scale(int world_rank, int64_t step) const;
  bool drops_pp_row(int64_t step) const;
  // Tokens by which world rank `world_rank`'s second context-parallel chunk is shifted (0: none).
  int64_t cp_chunk_shift(int world_rank) const;
  bool drops_ep_row(int world_rank) const;
  bool skips_optimizer_load(int world_rank) const;
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
  std::vector<int64_t> skip_grad_reduce_, drop_pp_row_;
  struct ScaleGrad {
    int rank = -1;
    int64_t step = 0;
    double factor = 1;
  };
  std::vector<ScaleGrad> scale_grad_;
  std::vector<int> shift_cp_chunk_, drop_ep_row_, skip_optimizer_load_;
};

}  // namespace claw
