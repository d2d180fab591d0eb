// comm::Watchdog: timeouts learned per section, fixed timeouts, the hang
// report, and the heartbeats a supervisor receives.
#include <httplib.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "claw/comm/watchdog.h"
#include "claw/core/error.h"

namespace claw::comm {
namespace {

using namespace std::chrono_literals;

TEST(Watchdog, TimeoutIsInitialUntilLearnedThenFactorTimesLongest) {
  WatchdogOptions o;
  o.hang_detection = false;  // no thread: the test drives the sections
  o.factor = 4;
  o.min_s = 0.01;
  o.initial_s = 100;
  o.warmup = 3;
  Watchdog w(o, 0, 1);
  EXPECT_EQ(w.timeout_s(Section::optimizer), 100);
  for (int k = 0; k < 3; ++k) {
    w.enter(Section::optimizer, k + 1);
    std::this_thread::sleep_for(k == 1 ? 30ms : 5ms);
    w.enter(Section::logging, k + 1);
  }
  std::string how;
  const double t = w.timeout_s(Section::optimizer, &how);
  EXPECT_GE(t, 4 * 0.030);
  EXPECT_LT(t, 4 * 0.5);
  EXPECT_NE(how.find("learned: 4 x"), std::string::npos) << how;
  EXPECT_NE(how.find("longest of 3 seen"), std::string::npos) << how;
  EXPECT_EQ(w.timeout_s(Section::checkpoint), 100);  // never seen
}

TEST(Watchdog, FloorAndFixedTimeouts) {
  WatchdogOptions o;
  o.hang_detection = false;
  o.min_s = 20;
  o.warmup = 1;
  o.fixed[Section::checkpoint] = 7;
  Watchdog w(o, 0, 1);
  w.enter(Section::data, 1);
  w.enter(Section::checkpoint, 1);
  w.enter(Section::idle, 1);
  std::string how;
  EXPECT_EQ(w.timeout_s(Section::data, &how), 20);
  EXPECT_NE(how.find("raised to the floor --hang-timeout-min 20 s"), std::string::npos) << how;
  EXPECT_EQ(w.timeout_s(Section::checkpoint, &how), 7);
  EXPECT_EQ(how, "fixed by --hang-timeout");
}

TEST(Watchdog, BadOptionsNameTheFlag) {
  WatchdogOptions o;
  o.factor = 0.5;
  EXPECT_THROW({ try { o.validate(); } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--hang-timeout-factor"), std::string::npos); throw; } }, Error);
  EXPECT_THROW(parse_section("forward", "--hang-timeout"), Error);
  EXPECT_EQ(parse_section("forward_backward", "--hang-timeout"), Section::forward_backward);
}

TEST(WatchdogDeathTest, UnsupervisedHangIsReportedAndTheRunGoesOn) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        WatchdogOptions o;
        o.initial_s = 0.2;
        Watchdog w(o, 3, 4);
        w.enter(Section::forward_backward, 17);
        std::this_thread::sleep_for(1s);
        w.enter(Section::logging, 17);
        std::exit(7);  // still running: the report did not end the process
      },
      testing::ExitedWithCode(7),
      "hang \\[rank 3 of 4, .*\\]: section forward_backward of step 17 has run .* over its timeout of 0.2 s");
}

// A stand-in supervisor: records the heartbeats, answers "abort" on request.
struct FakeSupervisor {
  httplib::Server server;
  std::thread thread;
  std::mutex mu;
  std::vector<nlohmann::json> got;
  bool abort = false;
  int port = 0;
  FakeSupervisor() {
    server.Post("/heartbeat", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lk(mu);
      got.push_back(nlohmann::json::parse(req.body));
      res.set_content(nlohmann::json{{"abort", abort}, {"reason", "test"}}.dump(), "application/json");
    });
    port = server.bind_to_any_port("127.0.0.1");
    thread = std::thread([this] { server.listen_after_bind(); });
  }
  ~FakeSupervisor() {
    server.stop();
    thread.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
};

TEST(Watchdog, HeartbeatsCarryStepsAndSections) {
  FakeSupervisor sup;
  {
    WatchdogOptions o;
    o.supervisor = sup.url();
    o.attempt = 2;
    o.heartbeat_interval_s = 0.05;
    Watchdog w(o, 1, 4);
    w.enter(Section::optimizer, 5);
    w.step_done(5, 3.25);
    std::this_thread::sleep_for(300ms);
  }
  std::lock_guard<std::mutex> lk(sup.mu);
  ASSERT_GE(sup.got.size(), 4u);
  EXPECT_EQ(sup.got.front()["event"], "start");
  EXPECT_EQ(sup.got.back()["event"], "exit");
  bool step = false, beat = false;
  for (const auto& m : sup.got) {
    EXPECT_EQ(m["rank"], 1);
    EXPECT_EQ(m["attempt"], 2);
    if (m["event"] == "step") {
      step = true;
      EXPECT_EQ(m["step"], 5);
      EXPECT_EQ(m["loss"], 3.25);
    }
    if (m["event"] == "beat") {
      beat = true;
      EXPECT_EQ(m["section"], "optimizer");
    }
  }
  EXPECT_TRUE(step);
  EXPECT_TRUE(beat);
}

TEST(WatchdogDeathTest, TheSupervisorsAbortEndsTheRank) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        FakeSupervisor sup;
        WatchdogOptions o;
        o.supervisor = sup.url();
        o.heartbeat_interval_s = 0.05;
        Watchdog w(o, 0, 2);
        {
          std::lock_guard<std::mutex> lk(sup.mu);
          sup.abort = true;
        }
        std::this_thread::sleep_for(5s);
      },
      testing::ExitedWithCode(static_cast<int>(ExitCode::comm)), "the supervisor ended attempt 0 of the job: test");
}

TEST(Watchdog, NoSupervisorAtTheUrlIsAnError) {
  WatchdogOptions o;
  o.supervisor = "http://127.0.0.1:1";
  EXPECT_THROW(Watchdog(o, 0, 1), Error);
}

}  // namespace
}  // namespace claw::comm
