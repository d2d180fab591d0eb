#include "claw/launch/supervisor.h"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fcntl.h>

#include <fstream>
#include <sstream>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "claw/core/clock.h"
#include "claw/comm/heartbeat.h"
#include "claw/core/error.h"
#include "claw/core/exit_signal.h"
#include "claw/core/log.h"
#include "claw/core/secret.h"

namespace claw::launch {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

void LaunchConfig::validate() const {
  if (launcher != "auto" && launcher != "mpirun" && launcher != "srun")
    fail("--launcher must be auto, mpirun or srun, got '{}'", launcher);
  if (nproc < 1) fail("--nproc must be >= 1, got {}", nproc);
  if (command.empty()) fail("claw launch needs the job after `--`, e.g. `claw launch --nproc 4 -- train --save ckpt ...`");
  if (command[0].rfind("-", 0) == 0)
    fail("the job after `--` starts with a claw subcommand (train, rl, ...), not the flag '{}'", command[0]);
  if (max_restarts < 0) fail("--max-restarts must be >= 0, got {}", max_restarts);
  if (!(heartbeat_interval_s > 0)) fail("--heartbeat-interval must be > 0 seconds, got {}", heartbeat_interval_s);
  if (!(heartbeat_timeout_s > heartbeat_interval_s))
    fail("--heartbeat-timeout ({} s) must be longer than --heartbeat-interval ({} s)", heartbeat_timeout_s,
         heartbeat_interval_s);
  if (!hostfile.empty() && !fs::exists(hostfile)) fail("--hostfile {}: no such file", hostfile);
  if (min_ranks < 0 || min_ranks > nproc) fail("--min-ranks must be in [0, --nproc {}] (0: not elastic), got {}", nproc, min_ranks);
  if (min_ranks > 0 && (hostfile.empty() || launcher == "srun"))
    fail("--min-ranks (elastic restart) needs mpirun with --hostfile: the supervisor probes its hosts");
  if (!(probe_timeout_s > 0)) fail("--host-probe-timeout must be > 0 seconds, got {}", probe_timeout_s);
}

std::string flag_value(const std::vector<std::string>& args, const std::string& flag) {
  std::string value;
  for (size_t k = 0; k < args.size(); ++k) {
    if (args[k] == flag && k + 1 < args.size()) value = args[k + 1];
    else if (args[k].rfind(flag + "=", 0) == 0) value = args[k].substr(flag.size() + 1);
  }
  return value;
}

std::vector<std::string> with_flag(std::vector<std::string> args, const std::string& flag, const std::string& value) {
  bool set = false;
  for (size_t k = 0; k < args.size(); ++k) {
    if (args[k] == flag && k + 1 < args.size()) {
      args[k + 1] = value;
      set = true;
    } else if (args[k].rfind(flag + "=", 0) == 0) {
      args[k] = flag + "=" + value;
      set = true;
    }
  }
  if (!set) {
    args.push_back(flag);
    args.push_back(value);
  }
  return args;
}

std::vector<std::string> without_flag(std::vector<std::string> args, const std::string& flag, bool takes_value) {
  std::vector<std::string> out;
  for (size_t k = 0; k < args.size(); ++k) {
    if (args[k] == flag) {
      if (takes_value) ++k;
      continue;
    }
    if (args[k].rfind(flag + "=", 0) == 0) continue;
    out.push_back(args[k]);
  }
  return out;
}

std::vector<std::pair<std::string, int>> read_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("--hostfile {}: cannot read", path);
  std::vector<std::pair<std::string, int>> hosts;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string host, w;
    if (!(words >> host)) continue;
    int slots = 1;
    while (words >> w)
      if (w.rfind("slots=", 0) == 0) {
        try {
          slots = std::stoi(w.substr(6));
        } catch (const std::exception&) {
          slots = 0;
        }
        if (slots < 1) fail("--hostfile {} line {}: '{}' is not slots=N with N >= 1", path, n, w);
      }
    hosts.emplace_back(host, slots);
  }
  if (hosts.empty()) fail("--hostfile {}: no hosts", path);
  return hosts;
}

namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// What the heartbeats say about one rank of the current attempt.
struct RankState {
  std::string host;
  int64_t pid = 0;
  Clock::time_point last_beat;
  int64_t step = 0;
  std::string section;
  bool exited = false;
};

// The state the heartbeat server and the supervising loop share.
struct Board {
  std::mutex mu;
  int attempt = 0;
  std::map<int, RankState> ranks;
  std::vector<std::pair<int, std::string>> hangs;  // rank, report
  int64_t last_step = 0;                           // the highest step any rank finished in this attempt
  int64_t forged = 0;                              // heartbeats refused for want of the token
  std::optional<int64_t> first_step;               // the first step this attempt finished
  Clock::time_point first_step_at;
  std::string abort_reason;                        // set: the ranks of this attempt are told to end
  std::vector<std::string> suspects;               // host names the job suspects of corrupting data
};

class EventLog {
 public:
  explicit EventLog(const std::string& path) {
    if (path.empty()) return;
    out_.open(path, std::ios::app);
    if (!out_) fail("--events-file {}: cannot open for writing", path);
  }
  void write(nlohmann::json e) {
    if (!out_.is_open()) return;
    e["time"] = unix_now();
    out_ << e.dump() << "\n";
    out_.flush();
  }

 private:
  std::ofstream out_;
};

std::string checkpoint_iteration(const std::string& save) {
  if (save.empty()) return "";
  std::ifstream in(fs::path(save) / "latest_checkpointed_iteration.txt");
  std::string it;
  if (!(in >> it)) return "";
  return it;
}

std::string this_host() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

// The processes left of an attempt, from /proc: those of its launcher's
// process group, and the supervisor's children (run() makes it the child
// subreaper, so the ranks a dead launcher left behind become its children:
// Open MPI starts each local rank in a process group of its own). `live`
// gets those not yet exited (a zombie has: its files are closed); `zombies`
// the supervisor's children waiting to be reaped.
void attempt_processes(pid_t pgid, std::vector<pid_t>& live, bool& zombies) {
  live.clear();
  zombies = false;
  const pid_t self = getpid();
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string stat;
    if (!std::getline(in, stat)) continue;  // gone meanwhile
    // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 1));
    char state = 0;
    long ppid = 0, pgrp = 0;
    if (!(rest >> state >> ppid >> pgrp)) continue;
    const bool ours = pgrp == pgid || ppid == self;
    if (!ours) continue;
    if (state == 'Z' || state == 'X')
      zombies = zombies || ppid == self;
    else
      live.push_back(static_cast<pid_t>(std::atol(name.c_str())));
  }
}

// Kills what is left of an attempt (its launcher's process group and the
// ranks it started in groups of their own) and waits until none of it runs,
// so that the next attempt does not find the last one's ranks still holding
// the checkpoint directory's lock (seen on a loaded 2-core machine: the ranks
// outlived a SIGKILLed mpirun by seconds).
void end_process_group(pid_t pgid, double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  std::vector<pid_t> live;
  bool zombies = false;
  for (;;) {
    killpg(pgid, SIGKILL);
    attempt_processes(pgid, live, zombies);
    for (const pid_t p : live) kill(p, SIGKILL);
    while (zombies && waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    if (live.empty() && !zombies) return;
    if (Clock::now() > deadline) {
      log::warn("launch", "{} process(es) of the last attempt (process group {} and the ranks it started) still run "
                "{:g} s after SIGKILL", live.size(), pgid, timeout_s);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// The exit code of a waitpid status (128 + signal for a killed launcher, as a shell says).
int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}

std::string describe_code(int code) {
  switch (code) {
    case 0: return "success";
    case 1: return "a bad flag, config or file (exit 1)";
    case 2: return "a command line that does not parse (exit 2)";
    case 3: return "an internal error (exit 3)";
    case 4: return "a communication failure: a peer died or hung (exit 4)";
    case 5: return "a non-finite loss or gradient (exit 5)";
    case 6: return "stopped by a signal after saving (exit 6)";
    default:
      if (code > 128 && code < 160) return fmt::format("a rank killed by signal {} ({})", code - 128, strsignal(code - 128));
      return fmt::format("exit code {}", code);
  }
}

// Runs each argv in its own process group, all at once; per argv its exit
// code (-1: not ended within timeout_s, killed) and its standard output.
std::vector<std::pair<int, std::string>> run_all(const std::vector<std::vector<std::string>>& argvs,
                                                 double timeout_s) {
  const size_t n = argvs.size();
  std::vector<pid_t> pids(n, -1);
  std::vector<int> out_fd(n, -1);
  for (size_t k = 0; k < n; ++k) {
    int fds[2];
    if (pipe(fds) != 0) continue;
    const pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      const int null = open("/dev/null", O_WRONLY);
      dup2(fds[1], 1);
      dup2(null, 2);
      close(fds[0]);
      std::vector<char*> c;
      for (const std::string& a : argvs[k]) c.push_back(const_cast<char*>(a.c_str()));
      c.push_back(nullptr);
      execvp(c[0], c.data());
      _exit(127);
    }
    close(fds[1]);
    if (pid < 0) {
      close(fds[0]);
      continue;
    }
    setpgid(pid, pid);
    pids[k] = pid;
    out_fd[k] = fds[0];
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
  }
  std::vector<std::pair<int, std::string>> results(n, {-1, ""});
  std::vector<bool> done(n, false);
  const auto drain = [&](size_t k) {
    char buf[4096];
    for (ssize_t got; out_fd[k] >= 0 && (got = read(out_fd[k], buf, sizeof buf)) > 0;)
      results[k].second.append(buf, static_cast<size_t>(got));
  };
  size_t left = 0;
  for (size_t k = 0; k < n; ++k) left += pids[k] > 0 ? 1 : (done[k] = true, 0);
  for (const auto t0 = Clock::now(); left > 0 && seconds_since(t0) < timeout_s;) {
    for (size_t k = 0; k < n; ++k) {
      if (done[k]) continue;
      drain(k);
      int status = 0;
      if (waitpid(pids[k], &status, WNOHANG) == pids[k]) {
        drain(k);
        results[k].first = exit_code(status);
        done[k] = true;
        --left;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (size_t k = 0; k < n; ++k) {
    if (!done[k]) {
      killpg(pids[k], SIGKILL);
      waitpid(pids[k], nullptr, 0);
    }
    if (out_fd[k] >= 0) close(out_fd[k]);
  }
  return results;
}

// The flags that pin a layout: dropped when the planner lays the job out
// again on fewer ranks (the second: whether the flag takes a value).
constexpr std::pair<const char*, bool> kLayoutFlags[] = {
    {"--tensor-model-parallel-size", true},  {"--pipeline-model-parallel-size", true},
    {"--context-parallel-size", true},       {"--expert-model-parallel-size", true},
    {"--expert-tensor-parallel-size", true}, {"--num-layers-per-virtual-pipeline-stage", true},
    {"--pipeline-schedule", true},           {"--decoder-first-pipeline-num-layers", true},
    {"--decoder-last-pipeline-num-layers", true}, {"--recompute-num-layers", true},
    {"--sequence-parallel", false},          {"--parallel", true}};

// A bad configuration or a bug fails again the same way: not restarted.
bool restartable(int code) { return code != 1 && code != 2 && code != 3; }

// A rank's heartbeat on the board (POST /heartbeat: one JSON object); the
// reply tells a rank of an attempt that is over, or aborted, to stop.
// A heartbeat must carry the job's token (CLAW_SUPERVISOR_TOKEN, which only
// the job's processes are given): anything else that can reach the port
// could otherwise report a hang and restart the job.
void on_heartbeat(Board& board, const std::string& token, const httplib::Request& req, httplib::Response& res) {
  if (!same_secret(req.get_header_value("Authorization"), "Bearer " + token)) {
    res.status = 401;
    res.set_content(R"j({"error":"a heartbeat needs the job's token (Authorization: Bearer $CLAW_SUPERVISOR_TOKEN)"})j",
                    "application/json");
    std::lock_guard<std::mutex> lk(board.mu);
    if (board.forged++ == 0)
      log::warn("launch", "a heartbeat from {} without the job's token: refused (and every later one)",
                req.remote_addr);
    return;
  }
  const std::optional<comm::Heartbeat> m = comm::Heartbeat::from_json(nlohmann::json::parse(req.body, nullptr, false));
  if (!m) {
    res.status = 400;
    res.set_content(R"({"error":"a heartbeat is a JSON object with rank and attempt"})", "application/json");
    return;
  }
  comm::HeartbeatReply reply;
  std::lock_guard<std::mutex> lk(board.mu);
  if (m->attempt != board.attempt || !board.abort_reason.empty()) {
    reply = {.abort = true,
             .reason = m->attempt != board.attempt ? fmt::format("attempt {} is over", m->attempt)
                                                   : board.abort_reason};
  } else {
    RankState& r = board.ranks[m->rank];
    r.host = m->host;
    r.pid = m->pid;
    r.last_beat = Clock::now();
    r.step = m->step;
    r.section = m->section;
    if (m->event == "exit") r.exited = true;
    if (m->event == "step") {
      board.last_step = std::max(board.last_step, r.step);
      if (!board.first_step) {
        board.first_step = r.step;
        board.first_step_at = Clock::now();
      }
    }
    if (m->event == "hang") board.hangs.emplace_back(m->rank, m->report);
    if (m->event == "suspect")
      for (const std::string& h : m->hosts)
        if (std::find(board.suspects.begin(), board.suspects.end(), h) == board.suspects.end())
          board.suspects.push_back(h);
  }
  res.set_content(reply.to_json().dump(), "application/json");
}

// How one attempt ended: the launcher's wait status, and what the
// supervisor saw itself when it ended the attempt (a hang, a silent rank).
struct AttemptEnd {
  int status = 0;
  std::string failure;
  bool forwarded_stop = false;  // SIGTERM/SIGUSR1 passed on to the job
};

// `claw launch`: the heartbeat server, then attempts until the job
// completes, stops on request, fails in a way a restart would repeat, or
// runs out of restarts (or, elastic, of hosts).
class Supervisor {
 public:
  explicit Supervisor(const LaunchConfig& cfg)
      : cfg_(cfg),
        launcher_(cfg.launcher != "auto" ? cfg.launcher : (std::getenv("SLURM_JOB_ID") ? "srun" : "mpirun")),
        remote_(!cfg.hostfile.empty() || launcher_ == "srun"),
        save_(flag_value(cfg.command, "--save")),
        events_(cfg.events_file),
        job_(cfg.command),
        nproc_(cfg.nproc),
        hostfile_(cfg.hostfile) {
    if (save_.empty()) log::warn("launch", "the job has no --save: a restart starts it again from step 0");
  }

  ~Supervisor() {
    server_.stop();
    if (server_thread_.joinable()) server_thread_.join();
  }

  int run() {
    start_server();
    const ExitSignalGuard signals;  // SIGTERM/SIGUSR1: stop the job cleanly, no restart
    // Ranks whose launcher dies become the supervisor's children, to be
    // ended before the next attempt (end_process_group).
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    for (int attempt = 0;; ++attempt) {
      const pid_t child = spawn(attempt);
      const AttemptEnd end = watch(child, attempt);
      const int code = exit_code(end.status);
      int64_t last_step = 0;
      {
        std::lock_guard<std::mutex> lk(board_.mu);
        last_step = board_.last_step;
        if (board_.abort_reason.empty()) board_.abort_reason = "the job ended";
      }
      // Ranks a dead launcher left behind, gone before anything else starts.
      end_process_group(child, 30);
      if (end.failure.empty() && code == 0) {
        log::info("launch", "the job completed{}", attempt > 0 ? fmt::format(" after {} restart(s)", attempt) : "");
        events_.write({{"event", "done"}, {"attempt", attempt}, {"restarts", attempt}});
        return 0;
      }
      if (end.failure.empty() && end.forwarded_stop) {
        log::info("launch", "the job stopped on request: {}; not restarted", describe_code(code));
        events_.write({{"event", "stopped"}, {"attempt", attempt}, {"code", code}});
        return code;
      }
      // The launcher itself killed (not a rank: mpirun exits with 128 + the
      // signal of a rank it saw killed) is named as such.
      const std::string failure = !end.failure.empty() ? end.failure
                                  : WIFSIGNALED(end.status)
                                      ? fmt::format("the launcher ({} pid {}) was killed by signal {} ({})", launcher_,
                                                    child, WTERMSIG(end.status), strsignal(WTERMSIG(end.status)))
                                      : describe_code(code);
      failed_at_ = Clock::now();
      // The furthest the job has got, over every attempt: an attempt that
      // died before its first step lost what the one before it had done.
      lost_from_ = std::max(lost_from_, last_step);
      events_.write({{"event", "failure"}, {"attempt", attempt}, {"reason", failure}, {"code", code},
                     {"last_step", last_step}});
      if (end.failure.empty() && !WIFSIGNALED(end.status) && !restartable(code)) {
        log::error("launch", "the job failed with {}: not restarted (a restart would fail the same way)", failure);
        return code;
      }
      if (attempt >= cfg_.max_restarts) {
        log::error("launch", "the job failed ({}) and --max-restarts {} are used up", failure, cfg_.max_restarts);
        return code == 0 ? static_cast<int>(ExitCode::comm) : code;
      }
      log::warn("launch", "attempt {} failed after step {}: {}; restarting ({} of {})", attempt + 1, last_step,
                failure, attempt + 1, cfg_.max_restarts);
      if (cfg_.min_ranks == 0) {
        std::lock_guard<std::mutex> lk(board_.mu);
        if (!board_.suspects.empty())
          log::warn("launch", "the job suspects host(s) {} of silent data corruption; they stay in (leaving hosts "
                    "out needs --hostfile and --min-ranks)", fmt::join(board_.suspects, ", "));
      } else if (!shrink(attempt)) {
        return code == 0 ? static_cast<int>(ExitCode::comm) : code;
      }
    }
  }

 private:
  void start_server() {
    server_.Post("/heartbeat",
                 [this](const httplib::Request& req, httplib::Response& res) { on_heartbeat(board_, token_, req, res); });
    const std::string bind = remote_ ? "0.0.0.0" : "127.0.0.1";
    const int port = server_.bind_to_any_port(bind);
    if (port < 0) fail("claw launch: cannot listen for heartbeats on {}", bind);
    auto ended = std::make_shared<std::atomic<bool>>(false);
    server_thread_ = std::thread([this, ended] {
      server_.listen_after_bind();
      *ended = true;
    });
    // stop() reaches the server only once it runs: a supervisor that fails
    // just after this must not wait forever in its destructor.
    while (!server_.is_running() && !*ended) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const std::string advertised =
        !cfg_.supervisor_host.empty() ? cfg_.supervisor_host : remote_ ? this_host() : "127.0.0.1";
    url_ = fmt::format("http://{}:{}", advertised, port);
    log::info("launch", "heartbeats at {}/heartbeat (every {:g} s; a rank silent {:g} s has failed); {} ranks via {}; "
              "up to {} restart(s)", url_, cfg_.heartbeat_interval_s, cfg_.heartbeat_timeout_s, cfg_.nproc, launcher_,
              cfg_.max_restarts);
  }

  // The launcher's command line for this attempt: --load of the last
  // checkpoint from the second attempt on.
  std::vector<std::string> launcher_argv(int attempt) {
    std::vector<std::string> command = job_;
    std::string resume_from;
    if (attempt > 0 && !(resume_from = checkpoint_iteration(save_)).empty())
      command = with_flag(command, "--load", save_);
    std::vector<std::string> argv;
    if (launcher_ == "mpirun") {
      argv = {"mpirun", "-np", std::to_string(nproc_)};
      if (!hostfile_.empty()) argv.insert(argv.end(), {"--hostfile", hostfile_});
      for (const char* v : {"CLAW_SUPERVISOR", "CLAW_SUPERVISOR_TOKEN", "CLAW_LAUNCH_ATTEMPT", "CLAW_HEARTBEAT_INTERVAL"})
        argv.insert(argv.end(), {"-x", v});
    } else {
      argv = {"srun", "-n", std::to_string(nproc_)};
    }
    argv.insert(argv.end(), cfg_.launcher_args.begin(), cfg_.launcher_args.end());
    argv.push_back(cfg_.binary);
    argv.insert(argv.end(), command.begin(), command.end());
    log::info("launch", "attempt {}{}: {}", attempt + 1,
              attempt == 0            ? std::string()
              : resume_from.empty()   ? " (no checkpoint yet: from step 0)"
                                      : fmt::format(" resuming from iteration {} in {}", resume_from, save_),
              fmt::join(argv, " "));
    events_.write({{"event", "start"}, {"attempt", attempt}, {"resume_from", resume_from}});
    return argv;
  }

  // The launcher of this attempt in a process group of its own, which dies
  // with the supervisor.
  pid_t spawn(int attempt) {
    {
      std::lock_guard<std::mutex> lk(board_.mu);
      board_.attempt = attempt;
      board_.ranks.clear();
      board_.hangs.clear();
      board_.last_step = 0;
      board_.first_step.reset();
      board_.abort_reason.clear();
    }
    std::vector<std::string> argv = launcher_argv(attempt);
    const pid_t parent = getpid();
    const pid_t child = fork();
    if (child < 0) fail("claw launch: fork failed: {}", strerror(errno));
    if (child == 0) {
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // the supervisor dies: so does the launcher
      if (getppid() != parent) _exit(127);
      setenv("CLAW_SUPERVISOR", url_.c_str(), 1);
      setenv("CLAW_SUPERVISOR_TOKEN", token_.c_str(), 1);
      setenv("CLAW_LAUNCH_ATTEMPT", std::to_string(attempt).c_str(), 1);
      setenv("CLAW_HEARTBEAT_INTERVAL", fmt::format("{}", cfg_.heartbeat_interval_s).c_str(), 1);
      std::vector<char*> cargv;
      for (std::string& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      signal(SIGTERM, SIG_DFL);
      signal(SIGUSR1, SIG_DFL);
      execvp(cargv[0], cargv.data());
      std::fprintf(stderr, "claw launch: cannot run %s: %s\n", cargv[0], strerror(errno));
      _exit(127);
    }
    setpgid(child, child);
    return child;
  }

  // Watches the launcher and the heartbeats until the attempt ends.
  AttemptEnd watch(pid_t child, int attempt) {
    AttemptEnd end;
    std::optional<Clock::time_point> hang_seen_at;  // the first hang report of this attempt
    bool resumed_logged = false;
    for (;;) {
      if (waitpid(child, &end.status, WNOHANG) == child) return end;
      if (const int sig = ExitSignalGuard::received(); sig != 0 && !end.forwarded_stop) {
        log::info("launch", "{} received: asking the job to save and stop (SIGUSR1 to {})", ExitSignalGuard::name(sig),
                  launcher_);
        kill(child, SIGUSR1);
        end.forwarded_stop = true;
      }
      {
        std::lock_guard<std::mutex> lk(board_.mu);
        if (failed_at_ && board_.first_step && !resumed_logged) {
          log_resumed(attempt);
          resumed_logged = true;
        }
        end.failure = board_failure(hang_seen_at);
        if (!end.failure.empty()) board_.abort_reason = end.failure;
      }
      if (!end.failure.empty()) {
        killpg(child, SIGKILL);  // the launcher and the ranks it started here; remote ranks hear "abort"
        waitpid(child, &end.status, 0);
        return end;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  // After a restart, the first step: how long the job took to resume and
  // how many steps it lost (board_.mu held).
  void log_resumed(int attempt) {
    const double t = std::chrono::duration<double>(board_.first_step_at - *failed_at_).count();
    const int64_t from = *board_.first_step - 1;
    log::info("launch", "resumed: step {} ran {:.1f} s after the failure was detected; the job went on from "
              "iteration {}, {} step(s) lost", *board_.first_step, t, from, std::max<int64_t>(0, lost_from_ - from));
    events_.write({{"event", "resumed"}, {"attempt", attempt}, {"from_iteration", from},
                   {"lost_steps", std::max<int64_t>(0, lost_from_ - from)}, {"time_to_resume_s", t}});
  }

  // A hang a rank reported, or a rank silent past --heartbeat-timeout: the
  // failure to end the attempt with, or empty (board_.mu held).
  std::string board_failure(std::optional<Clock::time_point>& hang_seen_at) {
    if (board_.hangs.empty()) {
      for (const auto& [r, s] : board_.ranks)
        if (!s.exited && seconds_since(s.last_beat) > cfg_.heartbeat_timeout_s) {
          const std::string failure =
              fmt::format("rank {} ({} pid {}) sent no heartbeat for {:.1f} s (--heartbeat-timeout {:g}); "
                          "it was in section {} after step {}",
                          r, s.host, s.pid, seconds_since(s.last_beat), cfg_.heartbeat_timeout_s, s.section, s.step);
          log::error("launch", "{}", failure);
          return failure;
        }
      return {};
    }
    const auto& [rank, report] = board_.hangs.front();
    if (!hang_seen_at) hang_seen_at = Clock::now();
    std::vector<std::string> silent;
    for (const auto& [r, s] : board_.ranks)
      if (!s.exited && seconds_since(s.last_beat) > 3 * cfg_.heartbeat_interval_s)
        silent.push_back(fmt::format("rank {} ({} pid {}, silent {:.1f} s in section {})", r, s.host, s.pid,
                                     seconds_since(s.last_beat), s.section));
    // A rank that stopped just before the hang was seen may not have
    // missed three heartbeats yet: the report waits up to that long
    // for it to be named (the reporting ranks wait for the verdict).
    if (silent.empty() && seconds_since(*hang_seen_at) <= 3 * cfg_.heartbeat_interval_s) return {};
    const std::string failure = fmt::format(
        "rank {} reported a hang{}", rank,
        silent.empty() ? std::string() : fmt::format("; no heartbeat from {}", fmt::join(silent, ", ")));
    log::error("launch", "{}\n{}", failure, report);
    return failure;
  }

  // Elastic restart: the hosts that still answer the launcher (less those
  // the job named in a silent data corruption, when they can be spared)
  // in a new host file, and the job laid out again by the planner. False:
  // fewer than --min-ranks slots remain.
  bool shrink(int attempt) {
    const auto hosts = read_hostfile(hostfile_);
    std::vector<std::vector<std::string>> probes;
    for (const auto& [host, slots] : hosts) {
      std::vector<std::string> p = {"mpirun", "-np", "1", "--host", host + ":1"};
      p.insert(p.end(), cfg_.launcher_args.begin(), cfg_.launcher_args.end());
      p.push_back("hostname");  // the name its ranks report: how a suspect host is recognised
      probes.push_back(std::move(p));
    }
    const auto probed = run_all(probes, cfg_.probe_timeout_s);
    std::vector<std::string> suspects;
    {
      std::lock_guard<std::mutex> lk(board_.mu);
      suspects = board_.suspects;
    }
    std::vector<std::pair<std::string, int>> alive;
    std::vector<std::string> gone;
    int slots = 0, suspect_slots = 0;
    for (size_t k = 0; k < hosts.size(); ++k) {
      const auto& [probe_code, out] = probed[k];
      const std::string name = out.substr(0, out.find_first_of("\r\n"));
      const bool suspect = std::find(suspects.begin(), suspects.end(), name) != suspects.end();
      if (probe_code == 0 && !suspect) {
        alive.push_back(hosts[k]);
        slots += hosts[k].second;
      } else if (probe_code == 0) {
        suspect_slots += hosts[k].second;
        gone.push_back(fmt::format("{} (host name {}: the job named it in a silent data corruption)",
                                   hosts[k].first, name));
      } else {
        gone.push_back(fmt::format("{} ({})", hosts[k].first,
                                   probe_code < 0 ? fmt::format("no answer in {:g} s", cfg_.probe_timeout_s)
                                                  : fmt::format("the probe exited {}", probe_code)));
      }
    }
    // A suspect host that cannot be spared stays in.
    if (suspect_slots > 0 && slots < cfg_.min_ranks) {
      log::warn("launch", "suspect host(s) {} cannot be left out: {} slot(s) would remain, fewer than --min-ranks {}",
                fmt::join(suspects, ", "), slots, cfg_.min_ranks);
      gone.erase(std::remove_if(gone.begin(), gone.end(),
                                [](const std::string& g) { return g.find("silent data corruption") != std::string::npos; }),
                 gone.end());
      alive.clear();
      slots = 0;
      for (size_t k = 0; k < hosts.size(); ++k)
        if (probed[k].first == 0) {
          alive.push_back(hosts[k]);
          slots += hosts[k].second;
        }
    }
    if (gone.empty()) return true;
    if (slots < cfg_.min_ranks) {
      log::error("launch", "host(s) gone: {}; {} rank slot(s) remain, fewer than --min-ranks {}: giving up",
                 fmt::join(gone, ", "), slots, cfg_.min_ranks);
      events_.write({{"event", "gave_up"}, {"attempt", attempt}, {"slots", slots}});
      return false;
    }
    nproc_ = std::min(nproc_, slots);
    hostfile_ = fmt::format("{}/claw_launch_hosts.{}.{}",
                            cfg_.events_file.empty() ? fs::temp_directory_path().string()
                                                     : fs::absolute(cfg_.events_file).parent_path().string(),
                            getpid(), attempt + 1);
    std::ofstream out(hostfile_);
    for (const auto& [host, n] : alive) out << host << " slots=" << n << "\n";
    if (!out) fail("claw launch: cannot write the host file {}", hostfile_);
    for (const auto& [flag, takes_value] : kLayoutFlags) job_ = without_flag(job_, flag, takes_value);
    job_ = with_flag(job_, "--parallel", "auto");
    log::warn("launch", "host(s) gone: {}; the job goes on with {} rank(s) on {} host(s) ({}) in the layout the "
              "planner chooses (--parallel auto), its checkpoint resharded", fmt::join(gone, ", "), nproc_,
              alive.size(), hostfile_);
    events_.write({{"event", "shrink"}, {"attempt", attempt}, {"nproc", nproc_}, {"hostfile", hostfile_}});
    return true;
  }

  const LaunchConfig& cfg_;
  const std::string launcher_;
  const bool remote_;
  const std::string save_;
  Board board_;
  EventLog events_;
  httplib::Server server_;
  std::thread server_thread_;
  std::string url_;
  // What the next attempt runs: an elastic restart shrinks them.
  std::vector<std::string> job_;
  int nproc_;
  std::string hostfile_;
  std::optional<Clock::time_point> failed_at_;
  const std::string token_ = random_secret();  // authenticates the job's heartbeats
  int64_t lost_from_ = 0;  // the last step any attempt finished before the failure
};

}  // namespace

int supervise(const LaunchConfig& cfg) {
  cfg.validate();
  return Supervisor(cfg).run();
}

}  // namespace claw::launch
