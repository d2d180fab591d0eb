#include "claw/comm/heartbeat.h"

namespace claw::comm {

nlohmann::json Heartbeat::to_json() const {
  nlohmann::json j = {{"event", event}, {"attempt", attempt}, {"rank", rank},     {"world_size", world_size},
                      {"host", host},   {"pid", pid},         {"step", step},     {"section", section},
                      {"section_s", section_s}};
  if (loss) j["loss"] = *loss;
  if (!report.empty()) j["report"] = report;
  if (!hosts.empty()) j["hosts"] = hosts;
  return j;
}

std::optional<Heartbeat> Heartbeat::from_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("rank") || !j.contains("attempt")) return std::nullopt;
  Heartbeat h;
  h.event = j.value("event", h.event);
  h.attempt = j.value("attempt", h.attempt);
  h.rank = j.value("rank", h.rank);
  h.world_size = j.value("world_size", h.world_size);
  h.host = j.value("host", h.host);
  h.pid = j.value("pid", h.pid);
  h.step = j.value("step", h.step);
  h.section = j.value("section", h.section);
  h.section_s = j.value("section_s", h.section_s);
  if (j.contains("loss") && j["loss"].is_number()) h.loss = j["loss"].get<double>();
  h.report = j.value("report", h.report);
  if (j.contains("hosts") && j["hosts"].is_array())
    for (const auto& x : j["hosts"])
      if (x.is_string()) h.hosts.push_back(x.get<std::string>());
  return h;
}

nlohmann::json HeartbeatReply::to_json() const {
  nlohmann::json j = {{"abort", abort}};
  if (abort) j["reason"] = reason;
  return j;
}

HeartbeatReply HeartbeatReply::from_json(const nlohmann::json& j) {
  HeartbeatReply r;
  if (!j.is_object()) return r;
  r.abort = j.value("abort", false);
  r.reason = j.value("reason", std::string("(no reason given)"));
  return r;
}

}  // namespace claw::comm
