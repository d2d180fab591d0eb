// Running gtest in every rank of an MPI job: every rank runs every test (the
// tests are collective), only rank 0 prints, and the job's result is the
// worst rank's.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "claw/comm/world.h"
#include "claw/kernels/cpu/blas.h"

namespace claw::testing_mpi {

// The start of an MPI test's main: the BLAS kernel choice, gtest's flags, and
// the world (collectives time out after 2 minutes instead of hanging ctest).
inline std::unique_ptr<comm::World> init(int& argc, char** argv) {
  kernels::ensure_fast_blas(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return comm::World::create({.timeout = std::chrono::seconds(120)});
}

inline int run_all_tests_on_every_rank(comm::World& world) {
  if (world.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  return world.world_group()->all_reduce_value(rc, comm::ReduceOp::max);
}

}  // namespace claw::testing_mpi
