// Splitting row-wise kernels (norms over rows of C elements) across the thread team.
#pragma once

#include <algorithm>
#include <cstdint>

namespace claw::kernels {

// Rows per parallel chunk: at least ~4K elements so that a thread's work
// outweighs the ~1 us cost of starting the parallel region.
inline int64_t row_grain(int64_t C) { return std::max<int64_t>(1, 4096 / std::max<int64_t>(C, 1)); }

}  // namespace claw::kernels
