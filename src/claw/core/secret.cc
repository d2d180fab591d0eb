#include "claw/core/secret.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "claw/core/error.h"

namespace claw {

bool same_secret(std::string_view a, std::string_view b) {
  const size_t n = std::max(a.size(), b.size());
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i)
    diff = diff | static_cast<unsigned char>((i < a.size() ? a[i] : 0) ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

std::string random_secret(size_t bytes) {
  std::vector<unsigned char> raw(bytes);
  for (size_t got = 0; got < bytes;) {
    const ssize_t n = ::getrandom(raw.data() + got, bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot read random bytes for a secret: {}", std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  std::string hex;
  for (unsigned char c : raw) hex += fmt::format("{:02x}", c);
  return hex;
}

}  // namespace claw
