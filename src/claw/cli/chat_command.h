// `claw chat`: a conversation with a model in the terminal.
//
//   claw chat --model DIR [--system "You are terse."] [--temperature 0.7]
//
// Each line read from stdin is a user message; the reply streams back. The
// whole conversation goes through the chat template every turn (the prefix
// cache keeps the earlier turns' keys and values, so only the new message is
// computed). /reset starts over, /exit or end of input ends.
#pragma once

#include <CLI/CLI.hpp>

namespace claw::cli {

void add_chat_command(CLI::App& app);

}  // namespace claw::cli
