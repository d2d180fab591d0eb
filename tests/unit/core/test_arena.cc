#include <gtest/gtest.h>

#include "claw/core/arena.h"

namespace claw {

TEST(Arena, PlanAlignsAndSums) {
  ArenaPlan plan("test");
  size_t a = plan.add("a", 10);
  size_t b = plan.add("b", 100, 128);
  size_t c = plan.add_array<float>("c", 3);
  EXPECT_EQ(a, 0u);
  EXPECT_EQ(b % 128, 0u);
  EXPECT_GE(b, 10u);
  EXPECT_GE(c, b + 100);
  EXPECT_EQ(c % 64, 0u);
  EXPECT_GE(plan.total(), c + 12);
  ASSERT_EQ(plan.entries().size(), 3u);
  EXPECT_EQ(plan.entries()[1].name, "b");
}

TEST(Arena, ZeroInitialisedAndWritable) {
  ArenaPlan plan("t");
  size_t off = plan.add_array<float>("x", 1 << 20);
  Arena arena(plan);
  float* x = arena.ptr<float>(off);
  for (int i = 0; i < (1 << 20); ++i) ASSERT_EQ(x[i], 0.0f);
  x[123] = 4.0f;
  Arena moved = std::move(arena);
  EXPECT_EQ(moved.ptr<float>(off)[123], 4.0f);
}

}  // namespace claw
