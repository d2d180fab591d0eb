#include <gtest/gtest.h>
#include <strings.h>

#include <cstdlib>

#include "claw/kernels/cpu/blas.h"

namespace claw::kernels {
namespace {

// The decision ensure_fast_blas() acts on: which OpenBLAS kernel set a CPU
// deserves, and whether the one OpenBLAS picked is good enough.
TEST(Blas, CoreChoice) {
  EXPECT_EQ(best_openblas_core(true, true), "SkylakeX");
  EXPECT_EQ(best_openblas_core(false, true), "Haswell");
  EXPECT_EQ(best_openblas_core(false, false), "");
  // The misdetection this exists for: an AVX-512 CPU handed the SSE kernels.
  EXPECT_FALSE(openblas_core_is_fast_enough("Prescott", "SkylakeX"));
  EXPECT_FALSE(openblas_core_is_fast_enough("Haswell", "SkylakeX"));
  EXPECT_TRUE(openblas_core_is_fast_enough("SkylakeX", "SkylakeX"));
  EXPECT_TRUE(openblas_core_is_fast_enough("skylakex", "SkylakeX"));
  EXPECT_TRUE(openblas_core_is_fast_enough("Cooperlake", "SkylakeX"));
  EXPECT_TRUE(openblas_core_is_fast_enough("SkylakeX", "Haswell"));
  EXPECT_FALSE(openblas_core_is_fast_enough("Nehalem", "Haswell"));
  EXPECT_TRUE(openblas_core_is_fast_enough("Prescott", ""));
}

// The test binary ran ensure_fast_blas() in main: the kernel in use is the
// best this CPU supports, or, where OPENBLAS_CORETYPE is set (by the user, or
// by claw's re-exec after a misdetection), the one it names.
TEST(Blas, FastKernelInUse) {
  BlasInfo info = blas_info();
  if (const char* forced = std::getenv("OPENBLAS_CORETYPE")) {
    EXPECT_TRUE(strcasecmp(forced, info.core.c_str()) == 0) << forced << " vs " << info.core;
    return;
  }
  EXPECT_TRUE(openblas_core_is_fast_enough(info.core, info.best_core)) << info.core << " vs " << info.best_core;
  EXPECT_EQ(info.parallel, 2) << "claw links the OpenMP flavour of OpenBLAS";
}

}  // namespace
}  // namespace claw::kernels
