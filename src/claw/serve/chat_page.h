// The chat page `claw serve` answers GET / with: one static HTML file with
// its JavaScript inline (no build step, nothing fetched from elsewhere). It
// lists the model from /v1/models, keeps the conversation in the page, and
// streams each reply from /v1/chat/completions (server-sent events read
// with fetch's ReadableStream). With --api-key the page asks for the key
// and sends it as a bearer token; the page itself needs none.
#pragma once

#include <string_view>

namespace claw::serve {

extern const std::string_view kChatPage;

}  // namespace claw::serve
