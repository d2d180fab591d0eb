// Layer assignment to pipeline stages and chunks (Megatron-Core's rules).
#include <gtest/gtest.h>

#include <string>

#include "claw/core/error.h"
#include "claw/parallel/pipeline_layout.h"

namespace claw::parallel {
namespace {

using Ranges = std::vector<std::vector<LayerRange>>;

std::string error_of(const PipelineLayoutConfig& c) {
  try {
    make_pipeline_layout(c);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(PipelineLayout, EvenStages) {
  const PipelineLayout l = make_pipeline_layout({.num_layers = 8, .stages = 4});
  EXPECT_EQ(l.chunks, 1);
  EXPECT_EQ(l.ranges, (Ranges{{{0, 2}}, {{2, 2}}, {{4, 2}}, {{6, 2}}}));
  EXPECT_EQ(make_pipeline_layout({.num_layers = 5, .stages = 1}).ranges, (Ranges{{{0, 5}}}));
}

TEST(PipelineLayout, InterleavedChunksVisitEveryStageInTurn) {
  // 16 layers, 4 stages, 2 layers per virtual stage: v = 2, virtual stage
  // c*4 + s holds layers [(c*4 + s)*2, +2).
  const PipelineLayout l = make_pipeline_layout({.num_layers = 16, .stages = 4, .layers_per_virtual_stage = 2});
  EXPECT_EQ(l.chunks, 2);
  EXPECT_EQ(l.at(0, 0), (LayerRange{0, 2}));
  EXPECT_EQ(l.at(3, 0), (LayerRange{6, 2}));
  EXPECT_EQ(l.at(0, 1), (LayerRange{8, 2}));
  EXPECT_EQ(l.at(3, 1), (LayerRange{14, 2}));
  // Every layer exactly once.
  std::vector<int> seen(16, 0);
  for (const auto& stage : l.ranges)
    for (const LayerRange& r : stage)
      for (int64_t i = r.first; i < r.first + r.count; ++i) ++seen[i];
  for (int v : seen) EXPECT_EQ(v, 1);
}

TEST(PipelineLayout, UnevenFirstAndLastStages) {
  EXPECT_EQ(make_pipeline_layout({.num_layers = 10, .stages = 4, .first_stage_layers = 1, .last_stage_layers = 3})
                .ranges,
            (Ranges{{{0, 1}}, {{1, 3}}, {{4, 3}}, {{7, 3}}}));
  EXPECT_EQ(make_pipeline_layout({.num_layers = 7, .stages = 3, .first_stage_layers = 1}).ranges,
            (Ranges{{{0, 1}}, {{1, 3}}, {{4, 3}}}));
  EXPECT_EQ(make_pipeline_layout({.num_layers = 5, .stages = 2, .last_stage_layers = 1}).ranges,
            (Ranges{{{0, 4}}, {{4, 1}}}));
  EXPECT_EQ(make_pipeline_layout({.num_layers = 5, .stages = 2, .first_stage_layers = 2, .last_stage_layers = 3})
                .ranges,
            (Ranges{{{0, 2}}, {{2, 3}}}));
}

TEST(PipelineLayout, BadLayoutsNameTheFlags) {
  EXPECT_NE(error_of({.num_layers = 6, .stages = 4}).find("--num-layers 6 is not divisible by "
                                                          "--pipeline-model-parallel-size 4"),
            std::string::npos);
  EXPECT_NE(error_of({.num_layers = 12, .stages = 4, .layers_per_virtual_stage = 2})
                .find("--num-layers-per-virtual-pipeline-stage 2"),
            std::string::npos);
  EXPECT_NE(error_of({.num_layers = 11, .stages = 4, .first_stage_layers = 1}).find("leaves 10 layers for 3"),
            std::string::npos);
  EXPECT_NE(error_of({.num_layers = 4, .stages = 2, .first_stage_layers = 1, .last_stage_layers = 2})
                .find("--decoder-last-pipeline-num-layers 2"),
            std::string::npos);
  EXPECT_NE(error_of({.num_layers = 8, .stages = 1, .first_stage_layers = 2}).find("need "
                                                                                   "--pipeline-model-parallel-size > 1"),
            std::string::npos);
  EXPECT_NE(error_of({.num_layers = 8, .stages = 2, .layers_per_virtual_stage = 2, .first_stage_layers = 2})
                .find("cannot be combined"),
            std::string::npos);
  EXPECT_NE(error_of({.num_layers = 8, .stages = 4, .first_stage_layers = 0}).find("at least 1"), std::string::npos);
}

}  // namespace
}  // namespace claw::parallel
