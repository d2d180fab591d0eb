// Running gtest in every rank of an MPI job: every rank runs every test (the
// tests are collective), only rank 0 prints, and the job's result is the
// worst rank's.
#pragma once

#include <gtest/gtest.h>

#include "claw/comm/world.h"

namespace claw::testing_mpi {

inline int run_all_tests_on_every_rank(comm::World& world) {
  if (world.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  return world.world_group()->all_reduce_value(rc, comm::ReduceOp::max);
}

}  // namespace claw::testing_mpi
