// The heartbeat a rank sends to a `claw launch` supervisor, and its reply:
// one type for the sender (comm/watchdog.cc) and the receiver
// (launch/supervisor.cc), sent as one JSON object by HTTP POST to
// SUPERVISOR/heartbeat.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace claw::comm {

struct Heartbeat {
  // start (the rank is up), beat (periodic), step (a step finished), hang (a
  // section ran past its timeout), suspect (SDC named other hosts), exit.
  std::string event = "beat";
  int attempt = -1;  // the supervisor's restart counter the rank was started in
  int rank = -1;
  int world_size = 0;
  std::string host;
  int64_t pid = 0;
  int64_t step = 0;       // the last step finished
  std::string section;    // the section of a step the rank is in
  double section_s = 0;   // and for how long
  std::optional<double> loss;       // event step
  std::string report;               // event hang: what the watchdog saw
  std::vector<std::string> hosts;   // event suspect: the hosts named

  nlohmann::json to_json() const;
  // Null when `j` is no heartbeat (not an object with rank and attempt);
  // absent fields take the defaults above.
  static std::optional<Heartbeat> from_json(const nlohmann::json& j);
};

struct HeartbeatReply {
  bool abort = false;  // the attempt is over or being torn down: the rank ends
  std::string reason;
  nlohmann::json to_json() const;
  static HeartbeatReply from_json(const nlohmann::json& j);  // anything else: no abort
};

}  // namespace claw::comm
