// ParallelState under mpirun: every group it creates holds exactly the ranks
// that RankGrid lists for this rank, in the same order, and collectives on it
// reach exactly those ranks (an all-reduce of the world rank ids, an
// all-gather of them in group order).
//
//   mpirun -np 8 test_parallel_state      (layouts that do not factor the world are skipped)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include "claw/comm/parallel_state.h"
#include "claw/core/error.h"

namespace claw::comm {
namespace {

World* g_world = nullptr;

struct Layout {
  const char* name;
  ParallelSizes sizes;
};

// The list holding `rank`, or empty.
std::vector<int> list_of(const std::vector<std::vector<int>>& lists, int rank) {
  for (const auto& l : lists)
    if (std::find(l.begin(), l.end(), rank) != l.end()) return l;
  return {};
}

void check_group(Group& g, const std::vector<int>& expected, const std::string& what) {
  const int me = g_world->rank();
  // EXPECT, not ASSERT: every rank must still reach the collectives below.
  EXPECT_EQ(g.world_ranks(), expected) << what;
  EXPECT_EQ(g.size(), static_cast<int>(expected.size())) << what;
  if (g.rank() >= 0 && g.rank() < static_cast<int>(expected.size())) {
    EXPECT_EQ(expected[g.rank()], me) << what;
  }
  // End to end: the sum of the members' world ranks, and each member's rank in group order.
  const int64_t sum = g.all_reduce_value<int64_t>(me);
  EXPECT_EQ(sum, std::accumulate(expected.begin(), expected.end(), int64_t{0})) << what;
  std::vector<int32_t> gathered(g.size(), -1);
  const int32_t mine = me;
  g.all_gather(&mine, gathered.data(), 1, DType::i32);
  EXPECT_EQ(std::vector<int>(gathered.begin(), gathered.end()), expected) << what;
}

void check_layout(const Layout& layout) {
  const int world = g_world->size(), me = g_world->rank();
  RankGrid grid;
  try {
    grid = RankGrid::make(world, layout.sizes);
  } catch (const Error& e) {
    GTEST_SKIP() << layout.name << " does not fit " << world << " ranks: " << e.what();
  }
  std::unique_ptr<ParallelState> ps = ParallelState::create(*g_world, layout.sizes);
  EXPECT_EQ(ps->describe(), grid.describe());
  const std::string where = std::string(layout.name) + " (" + grid.describe() + "), rank " + std::to_string(me);
  std::vector<int> all(world);
  std::iota(all.begin(), all.end(), 0);
  check_group(ps->world(), all, where + " world");
  check_group(ps->tp(), list_of(grid.groups("tp"), me), where + " tp");
  check_group(ps->cp(), list_of(grid.groups("cp"), me), where + " cp");
  check_group(ps->dp(), list_of(grid.groups("dp"), me), where + " dp");
  check_group(ps->pp(), list_of(grid.groups("pp"), me), where + " pp");
  check_group(ps->dp_cp(), list_of(grid.groups("dp-cp"), me), where + " dp_cp");
  check_group(ps->mp(), list_of(grid.groups("tp-pp"), me), where + " mp");
  check_group(ps->ep(), list_of(grid.expert_groups("ep"), me), where + " ep");
  check_group(ps->expert_dp(), list_of(grid.expert_groups("dp"), me), where + " expert_dp");
  check_group(ps->embedding(), list_of(grid.embedding_groups(), me), where + " embedding");

  EXPECT_EQ(ps->tp().rank(), grid.tp_rank(me)) << where;
  EXPECT_EQ(ps->cp().rank(), grid.cp_rank(me)) << where;
  EXPECT_EQ(ps->dp().rank(), grid.dp_rank(me)) << where;
  EXPECT_EQ(ps->pp().rank(), grid.pp_rank(me)) << where;
  EXPECT_EQ(ps->tp().size(), grid.tp);
  EXPECT_EQ(ps->dp_cp().size(), grid.dp * grid.cp);
  EXPECT_EQ(ps->ep().size(), grid.ep);
  EXPECT_EQ(ps->expert_dp().size(), grid.expert_dp);
  // Embedding: first and last stage together; a middle stage alone.
  const int stage = grid.pp_rank(me);
  const bool end_stage = stage == 0 || stage == grid.pp - 1;
  EXPECT_EQ(ps->embedding().size(), end_stage ? std::min(grid.pp, 2) : 1) << where;
}

void PrintTo(const Layout& l, std::ostream* os) { *os << l.name; }

class Layouts : public testing::TestWithParam<Layout> {};

TEST_P(Layouts, GroupsMatchTheGrid) { check_layout(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    ParallelState, Layouts,
    testing::Values(Layout{"tp2_pp2", {.tp = 2, .pp = 2}},                                   // 8: dp 2
                    Layout{"tp2_cp2_pp2", {.tp = 2, .cp = 2, .pp = 2}},                      // 8: dp 1
                    Layout{"tp2_cp2_ep2_pp2", {.tp = 2, .cp = 2, .ep = 2, .pp = 2}},         // 8: expert dp 1
                    Layout{"ep4_pp2", {.ep = 4, .pp = 2}},                                   // 8: dp 4, expert dp 1
                    Layout{"pp4", {.pp = 4}},                                                // 8: middle stages
                    Layout{"tp2_pp2_pp_before_dp", {.tp = 2, .pp = 2, .order = "tp-cp-ep-pp-dp"}},
                    Layout{"dp_only", {}}),
    [](const testing::TestParamInfo<Layout>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace claw::comm

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  // A throw must end the job, not leave the other ranks in a collective.
  GTEST_FLAG_SET(catch_exceptions, false);
  std::unique_ptr<claw::comm::World> w;
  try {
    w = claw::comm::World::create({.timeout = std::chrono::seconds(60)});
    claw::comm::g_world = w.get();
    if (w->rank() != 0) {
      auto& listeners = testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
    }
    const int local = RUN_ALL_TESTS();
    // Failed on any rank means failed on every rank.
    const int64_t failed =
        w->world_group()->all_reduce_value<int64_t>(local != 0 ? 1 : 0, claw::comm::ReduceOp::max);
    if (local) std::fprintf(stderr, "[rank %d] test_parallel_state failed\n", w->rank());
    return failed ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] test_parallel_state: %s\n", w ? w->rank() : -1, e.what());
    std::fflush(stderr);
    claw::comm::abort_job(2);
    return 2;
  }
}
