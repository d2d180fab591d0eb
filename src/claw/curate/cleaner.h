// The "clean" stage: text repairs, each optional, applied in this order.
//
//   fix_mojibake = true        UTF-8 that was decoded as Windows-1252 or
//                              Latin-1 and encoded again ("donâ€™t" ->
//                              "don’t", "cafÃ©" -> "café"): runs of such
//                              characters whose bytes form valid multi-byte
//                              UTF-8 are replaced by what they encode
//   remove_control = true      C0 controls but tab, newline and carriage
//                              return; DEL; C1 controls; the BOM
//   normalization = "NFC"      "NFC", "NFKC" (ICU) or "none"
//   normalize_whitespace = true  CR LF and CR to LF; runs of spaces, tabs
//                              and Unicode spaces to one space; spaces at
//                              line ends and 3+ newlines (to 2) removed;
//                              the text trimmed
//
// A document left empty is removed ("empty_after_cleaning"). Counts: the
// documents each repair changed.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "claw/curate/stage.h"

namespace claw::curate {

std::unique_ptr<Stage> make_cleaner(StageKeys& keys);

// The repairs on their own (tests, other stages).
std::string fix_mojibake(std::string_view text);
std::string remove_control_chars(std::string_view text);
std::string normalize_whitespace(std::string_view text);
// form: "NFC" or "NFKC"; invalid UTF-8 is a claw::Error.
std::string normalize_unicode(std::string_view text, std::string_view form);

}  // namespace claw::curate
