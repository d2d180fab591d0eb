#include "claw/core/error.h"

#include "claw/core/log.h"

namespace claw::detail {

void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  std::string text = fmt::format("internal check failed at {}:{}{}: {}{}{}", file, line,
                                 log::rank_tag(), cond, msg.empty() ? "" : ": ", msg);
  throw InternalError(text);
}

}  // namespace claw::detail
