// ParallelState: the rank grid and every process group of a run, built once.
//
// World = TP x CP x EP x DP x PP in the order string "tp-cp-ep-dp-pp", the
// first name varying fastest (Megatron-Core's RankGenerator): TP ranks are
// neighbours, PP spans the farthest. DP is derived: world / (TP x CP x PP).
// Expert parallelism splits the DP x CP ranks of the MoE layers: EP must
// divide DP x CP, and expert-data-parallel = DP x CP / EP (the expert grid
// is "tp-ep-dp-pp" with that DP and CP = 1, as Megatron-Core builds it).
//
// rank_groups() is the pure function behind it: for a token such as "tp",
// "dp", "cp-dp" or "tp-pp", the lists of world ranks that vary only along
// the named dimensions, each list in increasing order of those dimensions.
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
  int pp = 1;  // --pipeline-model-parallel-size
  std::string order = "tp-cp-ep-dp-pp";
};

// The grid of a world: sizes resolved (dp derived) and validated. Throws
// claw::Error naming the flags when the world does not factor.
struct RankGrid {
  int world = 1, tp = 1, cp = 1, ep = 1, dp = 1, pp = 1;
  int expert_dp = 1;  // dp * cp / ep
  std::string order;
  static RankGrid make(int world_size, const ParallelSizes& s);
  // Lists of world ranks for a token of the dense grid ("tp", "cp", "dp",
  // "pp", "dp-cp" / "cp-dp", "tp-pp", "tp-cp", "tp-dp-cp", ...).
  std::vector<std::vector<int>> groups(std::string_view token) const;
  // Same over the expert grid ("ep", "tp-ep", "dp" = expert data parallel, "pp").
  std::vector<std::vector<int>> expert_groups(std::string_view token) const;
  // Coordinates of a world rank in the dense grid.
  int tp_rank(int r) const, cp_rank(int r) const, dp_rank(int r) const, pp_rank(int r) const;
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
  Group& mp() { return *mp_; }            // tp x pp: one model replica
  Group& ep() { return *ep_; }
  Group& expert_dp() { return *expert_dp_; }
  Group& embedding() { return *embedding_; }  // first and last pipeline stage of a tp/dp/cp slice (tied embeddings)
  std::string describe() const;               // "world 8 = tp 2 x cp 1 x dp 2 x pp 2 (ep 1)"

 private:
  RankGrid grid_;
  std::shared_ptr<Group> world_, tp_, cp_, dp_, pp_, dp_cp_, mp_, ep_, expert_dp_, embedding_;
};

}  // namespace claw::comm
