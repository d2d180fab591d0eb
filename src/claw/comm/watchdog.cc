#include "claw/comm/watchdog.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "claw/comm/heartbeat.h"

#include "claw/comm/world.h"
#include "claw/core/error.h"

namespace claw::comm {

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kSectionNames[] = {"idle",     "data",    "forward_backward", "optimizer",
                                         "evaluation", "checkpoint", "logging"};
static_assert(std::size(kSectionNames) == static_cast<size_t>(Section::count));

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// The rank's last words go straight to stderr: the main thread may be stuck
// inside MPI and the process ends right after.
[[noreturn]] void end_rank(const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
  std::_Exit(static_cast<int>(ExitCode::comm));
}

}  // namespace

std::string_view section_name(Section s) { return kSectionNames[static_cast<size_t>(s)]; }

Section parse_section(std::string_view name, std::string_view flag) {
  for (size_t k = 1; k < std::size(kSectionNames); ++k)
    if (name == kSectionNames[k]) return static_cast<Section>(k);
  std::string valid;
  for (size_t k = 1; k < std::size(kSectionNames); ++k) valid += fmt::format("{}{}", k > 1 ? ", " : "", kSectionNames[k]);
  fail("{}: unknown section '{}' (valid: {})", flag, name, valid);
}

void WatchdogOptions::validate() const {
  if (!(factor >= 1)) fail("--hang-timeout-factor must be >= 1 (a multiple of the longest duration seen), got {}", factor);
  if (!(min_s > 0)) fail("--hang-timeout-min must be > 0 seconds, got {}", min_s);
  if (!(initial_s > 0)) fail("--hang-timeout-initial must be > 0 seconds, got {}", initial_s);
  for (const auto& [s, t] : fixed)
    if (!(t > 0)) fail("--hang-timeout {}={}: a timeout must be > 0 seconds", section_name(s), t);
  if (!(heartbeat_interval_s > 0)) fail("the heartbeat interval must be > 0 seconds, got {}", heartbeat_interval_s);
}

struct Watchdog::Client {
  Client(const std::string& url, const std::string& token) : http(url) {
    if (!token.empty()) http.set_bearer_token_auth(token.c_str());
    http.set_connection_timeout(2, 0);
    http.set_read_timeout(5, 0);
    http.set_write_timeout(5, 0);
    http.set_keep_alive(true);
  }
  httplib::Client http;
};

Watchdog::Watchdog(WatchdogOptions opt, int rank, int world_size)
    : opt_(std::move(opt)), rank_(rank), world_size_(world_size) {
  opt_.validate();
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  host_ = host;
  section_start_ns_ = now_ns();
  if (supervised()) {
    client_ = std::make_unique<Client>(opt_.supervisor, opt_.token);
    last_answer_ = Clock::now();
    if (!post("start"))
      fail("the supervisor at {} (CLAW_SUPERVISOR, set by `claw launch`) does not answer", opt_.supervisor);
  }
  if (supervised() || opt_.hang_detection) thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lk(wake_mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (supervised()) post("exit");
}

void Watchdog::enter(Section s, int64_t step) {
  const int64_t t = now_ns();
  const auto prev = static_cast<Section>(section_.load());
  if (prev != Section::idle) {
    std::lock_guard<std::mutex> lk(mu_);
    Learned& l = learned_[static_cast<int>(prev)];
    l.max_s = std::max(l.max_s, static_cast<double>(t - section_start_ns_.load()) * 1e-9);
    ++l.seen;
  }
  step_ = step;
  section_start_ns_ = t;
  section_ = static_cast<uint8_t>(s);
}

void Watchdog::step_done(int64_t step, double loss) {
  loss_ = loss;
  done_step_ = step;
  if (!supervised()) return;
  {
    std::lock_guard<std::mutex> lk(wake_mu_);
    step_pending_ = true;
  }
  wake_.notify_all();
}

double Watchdog::timeout_s(Section s, std::string* how) const {
  if (auto it = opt_.fixed.find(s); it != opt_.fixed.end()) {
    if (how) *how = "fixed by --hang-timeout";
    return it->second;
  }
  std::lock_guard<std::mutex> lk(mu_);
  const Learned& l = learned_[static_cast<int>(s)];
  if (l.seen < opt_.warmup) {
    if (how) *how = fmt::format("initial: the section was seen {} time(s), {} are needed to learn it", l.seen, opt_.warmup);
    return opt_.initial_s;
  }
  const double learned = opt_.factor * l.max_s;
  if (how)
    *how = fmt::format("learned: {:g} x {:.3f} s, the longest of {} seen{}", opt_.factor, l.max_s, l.seen,
                       learned < opt_.min_s ? fmt::format(", raised to the floor --hang-timeout-min {:g} s", opt_.min_s)
                                            : std::string());
  return std::max(opt_.min_s, learned);
}

void Watchdog::check_hang(Clock::time_point) {
  if (hang_reported_ || !opt_.hang_detection) return;
  const auto s = static_cast<Section>(section_.load());
  if (s == Section::idle) return;
  const double elapsed = static_cast<double>(now_ns() - section_start_ns_.load()) * 1e-9;
  std::string how;
  const double timeout = timeout_s(s, &how);
  if (elapsed <= timeout) return;
  hang_reported_ = true;
  std::string report = fmt::format(
      "claw: hang [rank {} of {}, {} pid {}]: section {} of step {} has run {:.1f} s, over its timeout of {:.1f} s "
      "({})",
      rank_, world_size_, host_, getpid(), section_name(s), step_.load(), elapsed, timeout, how);
  if (std::string fr = flight_record(); !fr.empty()) {
    if (fr.back() == '\n') fr.pop_back();
    report += "\n" + fr;
  }
  std::fprintf(stderr, "%s\n", report.c_str());
  std::fflush(stderr);
  // The supervisor ends the job and restarts it. Alone, the report is all:
  // a slow section is not always a hung one, and a collective that truly
  // hangs ends the job at its deadline (--distributed-timeout-minutes).
  if (supervised()) post("hang", report);
}

void Watchdog::report_suspects(const std::vector<std::string>& hosts, const std::string& reason) {
  if (supervised() && !hosts.empty()) post("suspect", reason, hosts);
}

bool Watchdog::post(const std::string& event, const std::string& report, const std::vector<std::string>& hosts) {
  Heartbeat beat{.event = event,
                 .attempt = opt_.attempt,
                 .rank = rank_,
                 .world_size = world_size_,
                 .host = host_,
                 .pid = static_cast<int64_t>(getpid()),
                 .step = done_step_.load(),
                 .section = std::string(section_name(static_cast<Section>(section_.load()))),
                 .section_s = static_cast<double>(now_ns() - section_start_ns_.load()) * 1e-9,
                 .report = report,
                 .hosts = hosts};
  if (event == "step") beat.loss = loss_.load();
  std::lock_guard<std::mutex> lk(post_mu_);
  const httplib::Result res = client_->http.Post("/heartbeat", beat.to_json().dump(), "application/json");
  if (!res || res->status != 200) {
    const double silent = std::chrono::duration<double>(Clock::now() - last_answer_).count();
    if (event != "start" && event != "exit" && silent > opt_.supervisor_timeout_s)
      end_rank(fmt::format("claw [rank {}]: the supervisor at {} has not answered for {:.0f} s: ending this rank",
                           rank_, opt_.supervisor, silent));
    return false;
  }
  last_answer_ = Clock::now();
  const HeartbeatReply reply = HeartbeatReply::from_json(nlohmann::json::parse(res->body, nullptr, false));
  if (event != "exit" && reply.abort)
    end_rank(fmt::format("claw [rank {}]: the supervisor ended attempt {} of the job: {}", rank_, opt_.attempt,
                         reply.reason));
  return true;
}

void Watchdog::run() {
  auto next_beat = Clock::now();
  for (;;) {
    bool send_step = false;
    {
      std::unique_lock<std::mutex> lk(wake_mu_);
      wake_.wait_for(lk, std::chrono::milliseconds(100), [&] { return stop_ || step_pending_; });
      if (stop_) return;
      send_step = step_pending_;
      step_pending_ = false;
    }
    const auto now = Clock::now();
    check_hang(now);
    if (!supervised()) continue;
    if (send_step) {
      post("step");
      next_beat = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt_.heartbeat_interval_s));
    } else if (now >= next_beat) {
      post("beat");
      next_beat = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt_.heartbeat_interval_s));
    }
  }
}

}  // namespace claw::comm
