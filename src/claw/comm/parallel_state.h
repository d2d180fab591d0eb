// ParallelState: the rank grid and every process group of a run, built once.
//
// World = TP x CP x EP x DP x PP in the order string "tp-cp-ep-dp-pp", the
// first name varying fastest (Megatron-Core's RankGenerator): TP ranks are
// neighbours, PP spans the farthest. DP is derived: world / (TP x CP x PP).
// The MoE layers' experts have a grid of their own over the same ranks
// (Megatron-Core's expert RankGenerator): ETP x EP x expert-DP x PP, with
// ETP (--expert-tensor-parallel-size, default TP) in tp's place, CP = 1 and
// expert-DP = world / (ETP x EP x PP); with ETP = TP that is DP x CP / EP.
//
// RankGrid::groups() is the pure function behind it: for a token such as
// "tp", "dp", "cp-dp" or "tp-pp", the lists of world ranks that vary only
// along the named dimensions, each list in increasing order of those
// dimensions (first in the order string fastest). ParallelState::create
// passes those lists to World::split; tests/unit/comm checks them against a
// transcription of Megatron-Core's algorithm.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "claw/comm/world.h"

namespace claw::comm {

struct ParallelSizes {
  int tp = 1;  // --tensor-model-parallel-size
  int cp = 1;  // --context-parallel-size
  int ep = 1;  // --expert-model-parallel-size
  int etp = 0;  // --expert-tensor-parallel-size (0: the same as tp)
  int pp = 1;  // --pipeline-model-parallel-size
  std::string order = "tp-cp-ep-dp-pp";
  // --num-distributed-optimizer-instances (--data-centers): the dp x cp
  // ranks split into this many instances of consecutive ranks, each holding
  // a whole ZeRO-sharded optimizer (see ParallelState::dp_intra).
  int instances = 1;
  // Communicators across instances, for chunks of the long-haul all-reduce
  // in flight together (one thread and MPI communicator each).
  int inter_streams = 1;
};

// The grid of a world: sizes resolved (dp derived) and validated. Throws
// claw::Error naming the flags when the world does not factor: a size < 1,
// an order that is not a permutation of tp, cp, ep, dp, pp, TP x CP x PP not
// dividing the world, ETP x EP x PP not dividing it, or (Megatron-Core's
// assertions) pp > 1 with pipeline groups that would differ between the
// dense and the expert grid (pp not last and expert dp != dp).
struct RankGrid {
  int world = 1, tp = 1, cp = 1, ep = 1, dp = 1, pp = 1;
  int etp = 1;        // the experts' tensor-parallel size
  int expert_dp = 1;  // world / (etp * ep * pp)
  int instances = 1;  // distributed-optimizer instances (data centres); divides dp x cp
  std::string order;  // --parallel-order, lower case
  static RankGrid make(int world_size, const ParallelSizes& s);
  // Lists of world ranks for a token of the dense grid ("tp", "cp", "dp",
  // "pp", "dp-cp" / "cp-dp", "tp-pp", "tp-cp", "tp-dp-cp", ...): Megatron's
  // RankGenerator.get_ranks with sizes tp, cp, ep = 1, dp, pp. Names in a
  // token may come in any order; an unknown name throws claw::Error.
  std::vector<std::vector<int>> groups(std::string_view token) const;
  // Same over the expert grid: sizes etp, cp = 1, ep, expert_dp, pp in the
  // same order ("ep", "tp-ep", "dp" = expert data parallel, "pp").
  std::vector<std::vector<int>> expert_groups(std::string_view token) const;
  // The lists World::split needs for the embedding group: for each pipeline
  // group its first and last stage (the one rank when pp == 1, Megatron's
  // default_embedding_ranks), and each middle stage alone in a list of its
  // own (a size-1 group that it never uses).
  std::vector<std::vector<int>> embedding_groups() const;
  // Megatron-Core's partial data-parallel groups: each dp x cp group
  // (groups("dp-cp")) cut into `instances` runs of consecutive members
  // (intra: one instance, a data centre), and the members at the same place
  // of every run (inter: one rank per instance, the long haul).
  std::vector<std::vector<int>> instance_groups(bool intra) const;
  // Coordinates of a world rank in the dense grid.
  int tp_rank(int r) const, cp_rank(int r) const, dp_rank(int r) const, pp_rank(int r) const;
  int coordinate(std::string_view name, int r) const;  // name: tp, cp, ep (always 0), dp, pp
  // "world 8 = tp 2 x cp 1 x dp 2 x pp 2, ep 1 (expert dp 2)", plus ", order ..." when not the default.
  std::string describe() const;
};

// Megatron-Core's generate_masked_orthogonal_rank_groups: `sizes` in order
// (fastest first), `mask[i]` true for the dimensions that vary inside a group.
std::vector<std::vector<int>> masked_orthogonal_rank_groups(int world_size, const std::vector<int>& sizes,
                                                            const std::vector<bool>& mask);

class ParallelState {
 public:
  // Collective over the world: validates, then creates every group.
  static std::unique_ptr<ParallelState> create(World& world, const ParallelSizes& sizes);

  const RankGrid& grid() const { return grid_; }
  Group& world() { return *world_; }
  Group& tp() { return *tp_; }
  Group& cp() { return *cp_; }
  Group& dp() { return *dp_; }
  Group& pp() { return *pp_; }
  Group& dp_cp() { return *dp_cp_; }      // gradient reduction of dense parameters
  // With instances > 1: the dp x cp ranks of this rank's instance (ZeRO
  // shards and the reduce-scatter / all-gather stay inside it) and, per
  // stream, the ranks holding the same shard in the other instances (the
  // all-reduce across them). With one instance: dp_cp() and one group of one.
  Group& dp_intra() { return *dp_intra_; }
  const std::vector<std::shared_ptr<Group>>& dp_inter() const { return dp_inter_; }
  Group& mp() { return *mp_; }            // tp x pp: one model replica
  Group& ep() { return *ep_; }
  Group& expert_dp() { return *expert_dp_; }
  // First and last pipeline stage of a tp/dp/cp slice (tied embeddings);
  // on a middle stage a group of size 1 that is never used.
  Group& embedding() { return *embedding_; }
  std::string describe() const;  // grid().describe()

 private:
  RankGrid grid_;
  std::shared_ptr<Group> world_, tp_, cp_, dp_, pp_, dp_cp_, mp_, ep_, expert_dp_, embedding_, dp_intra_;
  std::vector<std::shared_ptr<Group>> dp_inter_;
};

}  // namespace claw::comm
