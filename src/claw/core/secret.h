// Shared secrets: an API key, the token that authenticates a job's
// heartbeats to its supervisor.
#pragma once

#include <string>
#include <string_view>

namespace claw {

// a == b in a time that depends on their lengths only, not on where they
// first differ (a secret must not be guessable byte by byte from timings).
bool same_secret(std::string_view a, std::string_view b);

// `bytes` bytes from the kernel's random source, as hex.
std::string random_secret(size_t bytes = 32);

}  // namespace claw
