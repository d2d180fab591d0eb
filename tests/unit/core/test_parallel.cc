// An exception thrown by a worker of claw's thread team reaches the caller
// (an escaping one would make the OpenMP runtime call std::terminate).
#include <gtest/gtest.h>

#include <atomic>
#include <new>
#include <stdexcept>

#include "claw/core/parallel.h"

namespace claw {
namespace {

TEST(Parallel, WorkerExceptionReachesTheCaller) {
  for (int threads : {1, 4}) {
    std::atomic<int> ran{0};
    EXPECT_THROW(parallel_for_dynamic(CpuCtx{threads}, 1000,
                                      [&](int64_t i) {
                                        ran.fetch_add(1);
                                        if (i == 7) throw std::bad_alloc();
                                      }),
                 std::bad_alloc);
    EXPECT_GE(ran.load(), 1);
    EXPECT_THROW(parallel_for(CpuCtx{threads}, 1000, 1,
                              [&](int64_t b, int64_t e) {
                                if (b <= 500 && 500 < e) throw std::runtime_error("chunk with 500");
                              }),
                 std::runtime_error);
  }
}

TEST(Parallel, FirstExceptionKeptOthersDropped) {
  RegionErrors errors;
#pragma omp parallel num_threads(4)
  errors.guard([] { throw std::runtime_error("every thread"); });
  EXPECT_THROW(errors.rethrow(), std::runtime_error);
  RegionErrors none;
#pragma omp parallel num_threads(4)
  none.guard([] {});
  EXPECT_NO_THROW(none.rethrow());
}

}  // namespace
}  // namespace claw
