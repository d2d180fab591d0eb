// EXPECT_CLAW_ERROR(statement, "part", ...): the statement must throw
// claw::Error whose message contains every part (the file, the flag, the
// offending value, the valid range: whatever the user needs to fix it).
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <string_view>

#include "claw/core/error.h"

namespace claw::testing {

template <typename F>
std::string error_message(F&& fn) {
  try {
    fn();
  } catch (const claw::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a claw::Error";
  return {};
}

inline void expect_parts(const std::string& msg, std::initializer_list<std::string_view> parts) {
  for (std::string_view p : parts)
    EXPECT_NE(msg.find(p), std::string::npos) << "error message lacks \"" << p << "\": " << msg;
}

}  // namespace claw::testing

#define EXPECT_CLAW_ERROR(statement, ...) \
  ::claw::testing::expect_parts(::claw::testing::error_message([&] { statement; }), {__VA_ARGS__})
