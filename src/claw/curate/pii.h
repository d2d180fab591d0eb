// The "pii" stage: personal data replaced by a token per kind.
//
//   email = true          local@domain.tld                 -> "<EMAIL_ADDRESS>"
//   ip = true             IPv4 dotted quads, IPv6 (inet_pton) -> "<IP_ADDRESS>"
//   phone = true          10-15 digits grouped as phone numbers are written
//                         ("+1 (555) 123-4567", "555.123.4567",
//                         "+44 20 7946 0958")                -> "<PHONE_NUMBER>"
//   credit_card = true    13-19 digits, optionally in groups split by a
//                         space or dash, passing the Luhn check -> "<CREDIT_CARD>"
//   email_token, ip_token, phone_token, credit_card_token: the replacements
//
// Documents are never removed. Counts: the items redacted, per kind.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "claw/curate/stage.h"

namespace claw::curate {

std::unique_ptr<Stage> make_pii_redactor(StageKeys& keys);

// The Luhn checksum over the digits of `number` (other characters skipped).
bool luhn_valid(std::string_view number);

}  // namespace claw::curate
