// Watchdog: per-section hang detection and the heartbeats a supervisor
// (`claw launch`) listens to.
//
// The training loop says which section it is in (enter()); a thread of the
// watchdog compares the time spent in the current section with that
// section's timeout. The timeout is learned: once a section has been seen
// `warmup` times it is max(min_s, factor x the longest duration seen); before
// that it is initial_s, and a fixed value (--hang-timeout SECTION=S) replaces
// the learned one. A section over its timeout is a hang: the report names
// this rank, the section, how long it has run against its timeout, and the
// last collectives of the flight recorder.
//
// With a supervisor (its URL in WatchdogOptions::supervisor) the same thread
// sends a heartbeat every heartbeat_interval_s and at the end of every step:
// rank, host, pid, step, current section; a hang goes to the supervisor,
// which ends the job and restarts it. The supervisor's reply may tell the
// rank to end (the job is being torn down), and a supervisor that stops
// answering for supervisor_timeout_s ends the rank too, so that no rank
// outlives a killed supervisor. Without a supervisor the report is printed
// and the run goes on: a hung collective ends the job at its deadline
// (--distributed-timeout-minutes), a merely slow section finishes.
//
// The heartbeat is a plain HTTP POST of one JSON object (cpp-httplib): a
// control channel beside MPI, never a collective.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace claw::comm {

enum class Section : uint8_t { idle, data, forward_backward, optimizer, evaluation, checkpoint, logging, count };
std::string_view section_name(Section s);
// Throws claw::Error naming `flag` and the valid names.
Section parse_section(std::string_view name, std::string_view flag);

struct WatchdogOptions {
  bool hang_detection = true;  // --hang-detection
  double factor = 10;          // --hang-timeout-factor: learned timeout = factor x longest seen
  double min_s = 20;           // --hang-timeout-min: floor of a learned timeout
  double initial_s = 600;      // --hang-timeout-initial: before a section is learned
  int warmup = 3;              // durations seen before a section's timeout is learned
  std::map<Section, double> fixed;  // --hang-timeout SECTION=S
  // The supervisor (`claw launch`): its heartbeat URL ("" when there is none),
  // the launch attempt (0 first), and the heartbeat period.
  std::string supervisor;
  std::string token;  // the job's secret (CLAW_SUPERVISOR_TOKEN), sent with every heartbeat
  int attempt = 0;
  double heartbeat_interval_s = 1;
  double supervisor_timeout_s = 10;  // no answer this long: the supervisor is gone, the rank ends
  void validate() const;             // throws claw::Error naming the flag
};

class Watchdog {
 public:
  Watchdog(WatchdogOptions opt, int rank, int world_size);
  ~Watchdog();  // stops the thread; says "exit" to the supervisor
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Main thread: the previous section ends (its duration is learned) and `s`
  // begins. `step` is the training step in progress (from 1).
  void enter(Section s, int64_t step);
  // Main thread: step `step` (from 1) finished with `loss`; tells the
  // supervisor at once (its time-to-resume clock stops at the first one).
  void step_done(int64_t step, double loss);
  // Tells the supervisor which hosts the job suspects of corrupting data
  // (it leaves them out of the restart when it can).
  void report_suspects(const std::vector<std::string>& hosts, const std::string& reason);
  // The timeout of section `s` now, and how it was set ("learned: ...").
  double timeout_s(Section s, std::string* how = nullptr) const;
  bool supervised() const { return !opt_.supervisor.empty(); }

 private:
  void run();
  void check_hang(std::chrono::steady_clock::time_point now);
  // false: no answer
  bool post(const std::string& event, const std::string& report = {}, const std::vector<std::string>& hosts = {});

  WatchdogOptions opt_;
  int rank_, world_size_;
  std::string host_;
  std::atomic<uint8_t> section_{static_cast<uint8_t>(Section::idle)};
  std::atomic<int64_t> section_start_ns_{0};
  std::atomic<int64_t> step_{0};
  std::atomic<int64_t> done_step_{0};
  std::atomic<double> loss_{0};
  struct Learned {
    double max_s = 0;
    int64_t seen = 0;
  };
  mutable std::mutex mu_;  // learned_
  Learned learned_[static_cast<int>(Section::count)];
  bool hang_reported_ = false;

  struct Client;
  std::mutex post_mu_;  // the main thread (suspects) and the watchdog thread share the client
  std::unique_ptr<Client> client_;
  std::chrono::steady_clock::time_point last_answer_;

  std::mutex wake_mu_;
  std::condition_variable wake_;
  bool stop_ = false, step_pending_ = false;
  std::thread thread_;
};

}  // namespace claw::comm
