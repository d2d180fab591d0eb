// RankGrid: the rank groups of Megatron-Core's RankGenerator, worked by hand.
//
// A world rank is sum(coordinate x stride) over the order string, the first
// name fastest; with the default order tp-cp-ep-dp-pp the strides are
// tp: 1, cp: tp, ep: tp*cp, dp: tp*cp*ep, pp: tp*cp*ep*dp (ep = 1 in the
// dense grid). A group of token "x" holds the ranks that differ only in x.
// rank_groups_reference.py checks the same against a transcription of
// Megatron's algorithm over many more configurations.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "claw/comm/parallel_state.h"
#include "expect_error.h"

namespace claw::comm {
namespace {

using Lists = std::vector<std::vector<int>>;

RankGrid grid(int world, int tp, int cp, int ep, int pp, std::string order = "tp-cp-ep-dp-pp") {
  return RankGrid::make(world, {.tp = tp, .cp = cp, .ep = ep, .pp = pp, .order = order});
}

// Each world rank in exactly one list, each list in increasing order.
void expect_partition(const Lists& lists, int world, const std::string& what) {
  std::vector<int> seen(world, 0);
  for (const auto& l : lists) {
    EXPECT_TRUE(std::is_sorted(l.begin(), l.end())) << what;
    for (int r : l) {
      ASSERT_TRUE(r >= 0 && r < world) << what << ": rank " << r;
      ++seen[r];
    }
  }
  for (int r = 0; r < world; ++r) EXPECT_EQ(seen[r], 1) << what << ": rank " << r;
}

// All tokens made of the five names, in the canonical name order.
std::vector<std::string> all_tokens() {
  const char* names[] = {"tp", "cp", "ep", "dp", "pp"};
  std::vector<std::string> out;
  for (int m = 1; m < 32; ++m) {
    std::string t;
    for (int i = 0; i < 5; ++i) {
      if (!(m & (1 << i))) continue;
      if (!t.empty()) t += '-';
      t += names[i];
    }
    out.push_back(t);
  }
  return out;
}

TEST(RankGrid, Sixteen_TpCpDpPp2) {
  // Strides tp 1, cp 2, dp 4, pp 8; rank = tp + 2 cp + 4 dp + 8 pp.
  const RankGrid g = grid(16, 2, 2, 1, 2);
  EXPECT_EQ(g.dp, 2);
  EXPECT_EQ(g.expert_dp, 4);  // dp x cp / ep
  EXPECT_EQ(g.groups("tp"), (Lists{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(g.groups("cp"), (Lists{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  // Groups are numbered by the fixed coordinates, tp fastest, then cp, then pp:
  // (tp 0, cp 0, pp 0) = [0, 4], (1, 0, 0) = [1, 5], (0, 1, 0) = [2, 6], ...
  EXPECT_EQ(g.groups("dp"), (Lists{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  EXPECT_EQ(g.groups("pp"), (Lists{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}}));
  // Inside a group, cp varies fastest (order), whatever the token's spelling.
  EXPECT_EQ(g.groups("dp-cp"), (Lists{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  EXPECT_EQ(g.groups("cp-dp"), g.groups("dp-cp"));
  EXPECT_EQ(g.groups("tp-pp"), (Lists{{0, 1, 8, 9}, {2, 3, 10, 11}, {4, 5, 12, 13}, {6, 7, 14, 15}}));
  EXPECT_EQ(g.groups("ep").size(), 16u);  // ep = 1 in the dense grid: every rank alone
  EXPECT_EQ(g.groups("tp-cp-ep-dp-pp"), (Lists{{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}}));
  EXPECT_EQ(g.embedding_groups(), g.groups("pp"));  // pp 2: both stages are first or last
  // 13 = 1 + 2*0 + 4*1 + 8*1
  EXPECT_EQ(g.tp_rank(13), 1);
  EXPECT_EQ(g.cp_rank(13), 0);
  EXPECT_EQ(g.dp_rank(13), 1);
  EXPECT_EQ(g.pp_rank(13), 1);
  EXPECT_EQ(g.describe(), "world 16 = tp 2 x cp 2 x dp 2 x pp 2, ep 1 (expert dp 4)");
}

TEST(RankGrid, Sixteen_ExpertGridFoldsCpIntoDp) {
  // Expert grid: tp 2, cp 1, ep 4, expert dp 1, pp 2; strides tp 1, ep 2, pp 8.
  const RankGrid g = grid(16, 2, 2, 4, 2);
  EXPECT_EQ(g.expert_dp, 1);
  EXPECT_EQ(g.expert_groups("ep"), (Lists{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  EXPECT_EQ(g.expert_groups("ep"), g.groups("dp-cp"));  // EP splits the DP x CP ranks
  Lists singles;
  for (int r = 0; r < 16; ++r) singles.push_back({r});
  EXPECT_EQ(g.expert_groups("dp"), singles);
  EXPECT_EQ(g.expert_groups("tp-ep"), (Lists{{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}}));
  EXPECT_EQ(g.expert_groups("pp"), g.groups("pp"));
  // ep 2: expert dp = 2 x 2 / 2 = 2; ep stride 2 (after tp), expert dp stride 4.
  const RankGrid h = grid(16, 2, 2, 2, 2);
  EXPECT_EQ(h.expert_groups("ep"), h.groups("cp"));
  EXPECT_EQ(h.expert_groups("dp"), h.groups("dp"));
}

TEST(RankGrid, Eight_Tp2Pp2) {
  // cp = ep = 1, dp = 8 / 4 = 2; strides tp 1, dp 2, pp 4.
  const RankGrid g = grid(8, 2, 1, 1, 2);
  EXPECT_EQ(g.dp, 2);
  EXPECT_EQ(g.groups("tp"), (Lists{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(g.groups("dp"), (Lists{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(g.groups("pp"), (Lists{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(g.groups("cp"), (Lists{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  EXPECT_EQ(g.groups("dp-cp"), g.groups("dp"));
  EXPECT_EQ(g.groups("tp-pp"), (Lists{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  EXPECT_EQ(g.expert_groups("ep"), g.groups("cp"));
  EXPECT_EQ(g.expert_groups("dp"), g.groups("dp"));
  EXPECT_EQ(g.embedding_groups(), g.groups("pp"));
  EXPECT_EQ(g.describe(), "world 8 = tp 2 x cp 1 x dp 2 x pp 2, ep 1 (expert dp 2)");
}

TEST(RankGrid, MegatronDocstringSixteen_Tp2Pp4) {
  // initialize_model_parallel's docstring: 16 GPUs, tp 2, pp 4 -> dp 2.
  const RankGrid g = grid(16, 2, 1, 1, 4);
  EXPECT_EQ(g.dp, 2);
  EXPECT_EQ(g.groups("dp"), (Lists{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(g.groups("tp"), (Lists{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(g.groups("pp"), (Lists{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  // First and last stage of each pipeline; stages 1 and 2 alone.
  EXPECT_EQ(g.embedding_groups(), (Lists{{0, 12}, {4}, {8}, {1, 13}, {5}, {9}, {2, 14}, {6}, {10}, {3, 15}, {7}, {11}}));
  EXPECT_EQ(g.pp_rank(9), 2);
  EXPECT_EQ(g.tp_rank(9), 1);
  EXPECT_EQ(g.dp_rank(9), 0);
}

TEST(RankGrid, MegatronAlgorithmDocstring) {
  // generate_masked_orthogonal_rank_groups' docstring: sizes [tp 2, dp 3, pp 4],
  // mask dp: dp_group[i] for i = tp + 2 pp holds tp + 2 dp + 6 pp.
  const Lists dp = masked_orthogonal_rank_groups(24, {2, 3, 4}, {false, true, false});
  ASSERT_EQ(dp.size(), 8u);
  EXPECT_EQ(dp[0], (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(dp[1], (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(dp[2], (std::vector<int>{6, 8, 10}));
  EXPECT_EQ(dp[7], (std::vector<int>{19, 21, 23}));
  // Its order 'tp-pp-dp' example: 8 GPUs, sizes 2-2-2, dp groups [[0,4],[1,5],[2,6],[3,7]].
  const RankGrid g = grid(8, 2, 1, 1, 2, "tp-cp-ep-pp-dp");
  EXPECT_EQ(g.groups("dp"), (Lists{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(g.groups("pp"), (Lists{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(g.dp_rank(5), 1);
  EXPECT_EQ(g.pp_rank(5), 0);
  EXPECT_EQ(g.describe(), "world 8 = tp 2 x cp 1 x dp 2 x pp 2, ep 1 (expert dp 2), order tp-cp-ep-pp-dp");
}

TEST(RankGrid, SingleRank) {
  const RankGrid g = grid(1, 1, 1, 1, 1);
  for (const std::string& t : all_tokens()) {
    EXPECT_EQ(g.groups(t), (Lists{{0}})) << t;
    EXPECT_EQ(g.expert_groups(t), (Lists{{0}})) << t;
  }
  EXPECT_EQ(g.embedding_groups(), (Lists{{0}}));
}

TEST(RankGrid, EveryTokenPartitionsTheWorld) {
  struct Case {
    int world, tp, cp, ep, pp;
    const char* order;
  };
  const Case cases[] = {{16, 2, 2, 1, 2, "tp-cp-ep-dp-pp"}, {16, 2, 2, 4, 2, "tp-cp-ep-dp-pp"},
                        {24, 3, 2, 2, 2, "tp-cp-ep-dp-pp"}, {24, 2, 3, 3, 2, "tp-cp-ep-pp-dp"},
                        {12, 1, 3, 3, 1, "pp-dp-ep-cp-tp"}, {36, 3, 1, 2, 3, "dp-tp-cp-ep-pp"},
                        {7, 1, 1, 7, 1, "tp-cp-ep-dp-pp"},  {8, 1, 1, 1, 8, "tp-cp-ep-dp-pp"}};
  for (const Case& c : cases) {
    const RankGrid g = grid(c.world, c.tp, c.cp, c.ep, c.pp, c.order);
    const std::string where = g.describe();
    for (const std::string& t : all_tokens()) {
      expect_partition(g.groups(t), c.world, where + " dense " + t);
      expect_partition(g.expert_groups(t), c.world, where + " expert " + t);
    }
    expect_partition(g.embedding_groups(), c.world, where + " embedding");
    EXPECT_EQ(g.groups("tp")[0].size(), static_cast<size_t>(g.tp));
    EXPECT_EQ(g.groups("dp-cp")[0].size(), static_cast<size_t>(g.dp * g.cp));
    EXPECT_EQ(g.expert_groups("ep")[0].size(), static_cast<size_t>(g.ep));
    EXPECT_EQ(g.expert_groups("dp")[0].size(), static_cast<size_t>(g.expert_dp));
    // A rank's coordinate is its index in the group of that dimension, and
    // a token's spelling does not change its groups.
    for (const auto& [name, coord] : {std::pair{"tp", &RankGrid::tp_rank}, std::pair{"cp", &RankGrid::cp_rank},
                                      std::pair{"dp", &RankGrid::dp_rank}, std::pair{"pp", &RankGrid::pp_rank}})
      for (const auto& l : g.groups(name))
        for (size_t i = 0; i < l.size(); ++i) EXPECT_EQ((g.*coord)(l[i]), static_cast<int>(i)) << where << " " << name;
    EXPECT_EQ(g.groups("pp-tp"), g.groups("tp-pp")) << where;
    EXPECT_EQ(g.groups("pp-dp-cp-tp"), g.groups("tp-cp-dp-pp")) << where;
  }
}

// Expert tensor parallelism 1 under TP 2 (Megatron-Core's ETP != TP): the
// expert grid is etp 1, ep, expert dp = world / (ep pp), so the dense TP
// ranks hold different experts.
TEST(RankGrid, ExpertTensorParallelDiffersFromTp) {
  const RankGrid g = RankGrid::make(4, {.tp = 2, .ep = 2, .etp = 1});
  EXPECT_EQ(g.dp, 2);
  EXPECT_EQ(g.etp, 1);
  EXPECT_EQ(g.expert_dp, 2);
  EXPECT_EQ(g.expert_groups("ep"), (Lists{{0, 1}, {2, 3}}));  // = the dense TP groups
  EXPECT_EQ(g.expert_groups("dp"), (Lists{{0, 2}, {1, 3}}));
  EXPECT_EQ(g.describe(), "world 4 = tp 2 x cp 1 x dp 2 x pp 1, ep 2 x etp 1 (expert dp 2)");
  // 8 ranks, tp 2 cp 2 pp 2, ep 2 etp 1: expert dp 2, ep groups within a stage.
  const RankGrid h = RankGrid::make(8, {.tp = 2, .cp = 2, .ep = 2, .etp = 1, .pp = 2});
  EXPECT_EQ(h.expert_dp, 2);
  EXPECT_EQ(h.expert_groups("ep"), (Lists{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(h.expert_groups("pp"), h.groups("pp"));
  EXPECT_CLAW_ERROR(RankGrid::make(4, {.tp = 2, .ep = 4, .etp = 2}), "--expert-tensor-parallel-size 2",
                    "--expert-model-parallel-size 4", "= 8", "world size 4");
  EXPECT_CLAW_ERROR(RankGrid::make(4, {.etp = -1}), "--expert-tensor-parallel-size -1");
}

TEST(RankGrid, ErrorsNameTheFlags) {
  EXPECT_CLAW_ERROR(grid(4, 3, 1, 1, 1), "world size 4", "--tensor-model-parallel-size 3",
                    "--context-parallel-size 1", "--pipeline-model-parallel-size 1", "= 3",
                    "divides the 4 ranks");
  EXPECT_CLAW_ERROR(grid(8, 2, 1, 1, 3), "--pipeline-model-parallel-size 3", "= 6");
  EXPECT_CLAW_ERROR(grid(4, 1, 1, 3, 1), "--expert-model-parallel-size 3 must divide data-parallel x context-parallel = 4");
  EXPECT_CLAW_ERROR(grid(8, 2, 2, 3, 1), "--expert-model-parallel-size 3", "= 4");  // dp 2 x cp 2
  EXPECT_CLAW_ERROR(grid(4, 0, 1, 1, 1), "--tensor-model-parallel-size 0", "at least 1");
  EXPECT_CLAW_ERROR(grid(4, 1, -1, 1, 1), "--context-parallel-size -1");
  EXPECT_CLAW_ERROR(grid(4, 1, 1, 0, 1), "--expert-model-parallel-size 0");
  EXPECT_CLAW_ERROR(grid(4, 1, 1, 1, 0), "--pipeline-model-parallel-size 0");
  for (const char* order : {"tp-dp-pp", "tp-cp-ep-dp-xx", "tp-tp-ep-dp-pp", "", "tp-cp-ep-dp-pp-tp", "tp_cp_ep_dp_pp"})
    EXPECT_CLAW_ERROR(grid(4, 1, 1, 1, 1, order), "--parallel-order", "tp, cp, ep, dp, pp");
  EXPECT_EQ(grid(4, 2, 1, 1, 1, "TP-CP-EP-DP-PP").order, "tp-cp-ep-dp-pp");
  EXPECT_CLAW_ERROR(grid(4, 2, 1, 1, 1).groups("tp-xx"), "'xx'", "tp-xx");
  // Megatron's assertions: pp not last needs expert dp == dp (ep == cp) ...
  EXPECT_CLAW_ERROR(grid(8, 1, 1, 2, 2, "tp-cp-ep-pp-dp"), "--parallel-order 'tp-cp-ep-pp-dp'", "pp last");
  // ... and the same pipeline groups (cp and ep on the same side of pp).
  EXPECT_CLAW_ERROR(grid(8, 1, 2, 2, 2, "tp-cp-pp-ep-dp"), "--parallel-order 'tp-cp-pp-ep-dp'", "pipeline groups");
  const RankGrid ok = grid(8, 1, 2, 2, 2, "tp-cp-ep-pp-dp");
  EXPECT_EQ(ok.groups("pp"), ok.expert_groups("pp"));
}

// Distributed-optimizer instances (data centres): TP 2 x CP 2 x DP 4 on 16
// ranks. The dp x cp groups are {0,2,4,...,14} + tp; two instances cut each
// into runs of 4 consecutive members (intra), and the members at the same
// place of both runs make the groups across (inter).
TEST(RankGrid, SixteenInstances_Tp2Cp2Dp4) {
  RankGrid g = RankGrid::make(16, {.tp = 2, .cp = 2, .instances = 2});
  ASSERT_EQ(g.dp, 4);
  EXPECT_EQ(g.groups("dp-cp"), (Lists{{0, 2, 4, 6, 8, 10, 12, 14}, {1, 3, 5, 7, 9, 11, 13, 15}}));
  EXPECT_EQ(g.instance_groups(true), (Lists{{0, 2, 4, 6}, {8, 10, 12, 14}, {1, 3, 5, 7}, {9, 11, 13, 15}}));
  EXPECT_EQ(g.instance_groups(false),
            (Lists{{0, 8}, {2, 10}, {4, 12}, {6, 14}, {1, 9}, {3, 11}, {5, 13}, {7, 15}}));
  expect_partition(g.instance_groups(true), 16, "intra");
  expect_partition(g.instance_groups(false), 16, "inter");
  EXPECT_NE(g.describe().find("2 distributed-optimizer instances of 4 dp x cp ranks"), std::string::npos);
  // One instance: intra is dp x cp itself, inter one rank each.
  g = RankGrid::make(4, {});
  EXPECT_EQ(g.instance_groups(true), g.groups("dp-cp"));
  EXPECT_EQ(g.instance_groups(false), (Lists{{0}, {1}, {2}, {3}}));
  EXPECT_CLAW_ERROR(RankGrid::make(8, {.tp = 2, .instances = 3}), "--num-distributed-optimizer-instances 3",
                    "data-parallel x context-parallel = 4");
  EXPECT_CLAW_ERROR(RankGrid::make(8, {.instances = 0}), "--num-distributed-optimizer-instances 0");
}

}  // namespace
}  // namespace claw::comm
