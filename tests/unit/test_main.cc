#include <gtest/gtest.h>

#include "claw/kernels/cpu/blas.h"

int main(int argc, char** argv) {
  claw::kernels::ensure_fast_blas(argc, argv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
