// Generated tokens as text, a piece at a time, with stop strings.
//
//   TextStream out(tokenizer, {"\n\n"});
//   for each generated token:  emit(out.push(token)); if (out.stopped()) cancel;
//   at the end:                emit(out.finish());
//
// What push() returns is final: text is held back while it could still be
// the start of a stop string, or while it ends inside a UTF-8 sequence (a
// byte-level BPE token may carry half a character), so a client never sees
// text that a later token retracts. When a stop string appears, the text
// ends just before it (OpenAI's `stop`: the stop string is not returned)
// and stopped() turns true; the caller ends the request.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "claw/data/tokenizer.h"

namespace claw::serve {

class TextStream {
 public:
  TextStream(const data::Tokenizer& tokenizer, std::vector<std::string> stop);

  std::string push(int32_t token);
  // The text still held back (a partial stop string, or bytes that never
  // completed a character: those become U+FFFD).
  std::string finish();
  bool stopped() const { return stopped_; }
  // All text emitted so far.
  const std::string& text() const { return emitted_; }

 private:
  const data::Tokenizer& tok_;
  std::vector<std::string> stop_;
  std::vector<int32_t> ids_;
  size_t prefix_ = 0, read_ = 0;  // the decoding window: ids_[prefix_, read_) decoded already as context
  std::string all_;       // decoded bytes of every token
  std::string emitted_;   // the prefix of all_ handed out
  bool stopped_ = false;
};

// Bytes that are not valid UTF-8 replaced by U+FFFD (JSON needs valid text).
std::string valid_utf8(const std::string& bytes);

}  // namespace claw::serve
