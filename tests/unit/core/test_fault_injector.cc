// FaultInjector specs (the hidden --test-fault flag) and the exit codes the
// error types carry.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "claw/core/error.h"
#include "claw/core/fault_injector.h"

namespace claw {

namespace {
std::string parse_error(const std::vector<std::string>& specs) {
  try {
    FaultInjector::parse(specs);
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), ExitCode::bad_input);
    return e.what();
  }
  ADD_FAILURE() << "accepted " << specs.front();
  return {};
}
}  // namespace

TEST(FaultInjector, EmptyInjectsNothing) {
  const FaultInjector f = FaultInjector::parse({});
  EXPECT_TRUE(f.empty());
  EXPECT_FALSE(f.hangs(0, "world", 1));
  EXPECT_FALSE(f.crashes_in_save(10, 0, 1));
}

TEST(FaultInjector, HangMatchesRankGroupAndSequenceOnly) {
  const FaultInjector f = FaultInjector::parse({"hang:1:dp:12"});
  EXPECT_FALSE(f.empty());
  EXPECT_TRUE(f.hangs(1, "dp", 12));
  EXPECT_FALSE(f.hangs(0, "dp", 12));
  EXPECT_FALSE(f.hangs(1, "pp", 12));
  EXPECT_FALSE(f.hangs(1, "dp", 11));
  EXPECT_FALSE(f.crashes_in_save(12, 1, 2));
  EXPECT_EQ(FaultInjector::describe_hang(1, "dp", 12), "hang:1:dp:12");
}

TEST(FaultInjector, CrashInSaveIsTheLastRanksAtThatIteration) {
  const FaultInjector f = FaultInjector::parse({"crash-in-save:10", "hang:0:world:3"});
  EXPECT_TRUE(f.crashes_in_save(10, 3, 4));
  EXPECT_FALSE(f.crashes_in_save(10, 2, 4));
  EXPECT_FALSE(f.crashes_in_save(5, 3, 4));
  EXPECT_TRUE(f.crashes_in_save(10, 0, 1));
  EXPECT_TRUE(f.hangs(0, "world", 3));
}

TEST(FaultInjector, BadSpecsNameTheFlagAndTheValidForms) {
  for (const char* bad : {"hang:1:dp", "hang:x:dp:3", "hang:1::3", "hang:1:dp:0", "hang:-1:dp:3", "hang:1:dp:3x"})
    EXPECT_NE(parse_error({bad}).find("--test-fault '" + std::string(bad) + "': expected hang:RANK:GROUP:SEQ"),
              std::string::npos)
        << bad;
  EXPECT_NE(parse_error({"crash-in-save:"}).find("expected crash-in-save:ITER"), std::string::npos);
  EXPECT_NE(parse_error({"crash:3"}).find("unknown fault; valid: hang:RANK:GROUP:SEQ, crash-in-save:ITER"),
            std::string::npos);
}

TEST(ExitCodes, EachErrorTypeCarriesItsCode) {
  EXPECT_EQ(Error("x").exit_code(), ExitCode::bad_input);
  EXPECT_EQ(InternalError("x").exit_code(), ExitCode::internal);
  EXPECT_EQ(CommError("x").exit_code(), ExitCode::comm);
  EXPECT_EQ(NonFiniteError("x").exit_code(), ExitCode::non_finite);
  try {
    fail<NonFiniteError>("step {}: loss is {}", 3, "nan");
  } catch (const Error& e) {  // caught as the base, still carrying its code
    EXPECT_EQ(e.exit_code(), ExitCode::non_finite);
    EXPECT_STREQ(e.what(), "step 3: loss is nan");
  }
  try {
    CLAW_CHECK(1 + 1 == 3, "arithmetic");
    ADD_FAILURE() << "CLAW_CHECK(false) did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), ExitCode::internal);
  }
  // The codes are the documented ones (README "Exit codes"): supervisors match on the numbers.
  EXPECT_EQ(static_cast<int>(ExitCode::bad_input), 1);
  EXPECT_EQ(static_cast<int>(ExitCode::usage), 2);
  EXPECT_EQ(static_cast<int>(ExitCode::internal), 3);
  EXPECT_EQ(static_cast<int>(ExitCode::comm), 4);
  EXPECT_EQ(static_cast<int>(ExitCode::non_finite), 5);
}

}  // namespace claw
