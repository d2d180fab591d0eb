// What the files of test_comm share: the world every test runs on (made
// by test_comm.cc's main). The rules of test_comm.cc's header hold in every
// file: all ranks run the same tests in the same order, EXPECT inside
// collectives, never ASSERT.
#pragma once

#include <cstdint>
#include <vector>

#include "claw/comm/group.h"

claw::comm::Group& world();

// Index of the first mismatch, or -1 (one EXPECT per buffer, not per element).
template <typename T, typename F>
int64_t first_mismatch(const std::vector<T>& v, int64_t begin, int64_t end, F&& want) {
  for (int64_t i = begin; i < end; ++i)
    if (v[i] != want(i)) return i;
  return -1;
}
