#include <gtest/gtest.h>

#include <cmath>

#include "claw/core/error.h"
#include "claw/optim/lr_schedule.h"

namespace claw::optim {
namespace {

TEST(LrSchedule, WarmupThenCosineToTheFloor) {
  LrSchedule s{.max_lr = 1.0, .min_lr = 0.1, .warmup_iters = 4, .decay_iters = 14, .style = DecayStyle::cosine};
  EXPECT_DOUBLE_EQ(s.at(0), 0.25);
  EXPECT_DOUBLE_EQ(s.at(3), 1.0);
  EXPECT_DOUBLE_EQ(s.at(4), 1.0);                       // decay starts at its top
  EXPECT_NEAR(s.at(9), 0.1 + 0.9 * 0.5, 1e-12);         // half-way: cos(pi/2) = 0
  EXPECT_DOUBLE_EQ(s.at(14), 0.1);
  EXPECT_DOUBLE_EQ(s.at(1000), 0.1);
  for (int i = 5; i < 14; ++i) EXPECT_LT(s.at(i), s.at(i - 1));
}

TEST(LrSchedule, LinearAndConstant) {
  LrSchedule lin{.max_lr = 2.0, .min_lr = 0.0, .warmup_iters = 0, .decay_iters = 10, .style = DecayStyle::linear};
  EXPECT_DOUBLE_EQ(lin.at(0), 2.0);
  EXPECT_DOUBLE_EQ(lin.at(5), 1.0);
  LrSchedule con{.max_lr = 2.0, .warmup_iters = 2, .style = DecayStyle::constant};
  EXPECT_DOUBLE_EQ(con.at(0), 1.0);
  EXPECT_DOUBLE_EQ(con.at(100), 2.0);
}

TEST(LrSchedule, BadSettingsNameTheFlag) {
  LrSchedule s{.max_lr = 1.0, .min_lr = 2.0, .decay_iters = 10};
  EXPECT_THROW(s.validate(), Error);
  EXPECT_THROW(parse_decay_style("exponential"), Error);
  LrSchedule w{.max_lr = 1.0, .warmup_iters = 10, .decay_iters = 10};
  EXPECT_THROW(w.validate(), Error);
}

}  // namespace
}  // namespace claw::optim
