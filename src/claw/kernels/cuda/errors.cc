// Host side of the CUDA backend's error reporting (check.cuh).
#include <cstdarg>
#include <cstdio>

#include "claw/core/error.h"

namespace claw::kernels::cuda {

void fail_call(const char* api, const char* call, const char* file, int line, const char* reason) {
  fail("{}: {} failed at {}:{}: {}", api, call, file, line, reason);
}

void fail_message(const char* format, ...) {
  char buf[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  fail("CUDA backend: {}", buf);
}

}  // namespace claw::kernels::cuda
