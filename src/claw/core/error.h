// Errors in three tiers (STYLE.md #15):
//   claw::Error      bad input at the edge (flag, file, shape); the message names
//                    the input and what would be valid. Raised before any work.
//   CLAW_CHECK       an internal invariant; reports file:line and the condition.
//   CLAW_*_CHECK     foreign status codes (MPI, CUDA, ...) turned into Error
//                    (defined next to the backend that needs them).
// Library code throws; only main() decides how the process ends.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace claw {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws claw::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& msg);
inline std::string check_msg() { return {}; }
template <typename... Args>
std::string check_msg(fmt::format_string<Args...> f, Args&&... args) {
  return fmt::format(f, std::forward<Args>(args)...);
}
}  // namespace detail

}  // namespace claw

// CLAW_CHECK(cond) or CLAW_CHECK(cond, "fmt {}", args...): internal invariant.
#define CLAW_CHECK(cond, ...)                                                                  \
  do {                                                                                         \
    if (!(cond)) [[unlikely]]                                                                  \
      ::claw::detail::check_failed(__FILE__, __LINE__, #cond, ::claw::detail::check_msg(__VA_ARGS__)); \
  } while (0)
