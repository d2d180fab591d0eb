// The MPI backend: MpiWorld, MpiGroup and the communication thread.
//
// One thread per process executes every operation in issue order with
// MPI's blocking collectives (Open MPI's tuned algorithms; the non-blocking
// ones go through a different, slower component) while the issuing thread
// goes on computing. Point-to-point transfers are started non-blocking and
// polled between operations, so sends and receives posted in any order
// cannot deadlock each other. Waiting is done by the caller on the
// operation's completion flag, with a deadline; the communication thread
// itself never needs one (when a peer is lost it stays inside MPI until the
// job is aborted).
#include <mpi.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "claw/comm/op_state.h"
#include "claw/comm/world.h"
#include "claw/core/error.h"
#include "claw/core/log.h"

namespace claw::comm {

namespace {

using detail::Clock;
using detail::FlightRecorder;
using detail::OpState;

std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, len);
}

#define CLAW_MPI_CHECK(call)                                                              \
  do {                                                                                    \
    int claw_mpi_rc_ = (call);                                                            \
    if (claw_mpi_rc_ != MPI_SUCCESS) ::claw::fail("{} failed: {}", #call, mpi_error_string(claw_mpi_rc_)); \
  } while (0)

MPI_Datatype mpi_type(DType t, bool reducing) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u16: return MPI_UINT16_T;
    case DType::u8: return MPI_UINT8_T;
    case DType::bf16: case DType::f16:
      if (reducing) fail("MPI reductions of {} are not supported; reduce in f32", dtype_name(t));
      return MPI_UINT16_T;
    case DType::e4m3: case DType::e5m2:
      if (reducing) fail("MPI reductions of {} are not supported; reduce in f32", dtype_name(t));
      return MPI_UINT8_T;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_SUM;
}

int to_int(int64_t n, const char* what) {
  if (n < 0 || n > INT32_MAX) fail("{}: {} elements exceed MPI's int count; use smaller buckets", what, n);
  return static_cast<int>(n);
}

std::vector<int> to_ints(const std::vector<int64_t>& v, const char* what) {
  std::vector<int> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = to_int(v[i], what);
  return out;
}

std::vector<int> prefix(const std::vector<int>& counts) {
  std::vector<int> d(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

bool all_equal(const std::vector<int>& v) {
  for (int x : v)
    if (x != v[0]) return false;
  return true;
}

// The test hook that simulates a hung rank: CLAW_TEST_HANG_OPERATION=RANK:GROUP:SEQ
// makes that rank's communication thread stop before that operation.
struct HangHook {
  int rank = -1;
  std::string group;
  uint64_t seq = 0;
  static HangHook from_env() {
    HangHook h;
    const char* s = std::getenv("CLAW_TEST_HANG_OPERATION");
    if (!s || !*s) return h;
    std::string v = s;
    size_t a = v.find(':'), b = v.rfind(':');
    if (a == std::string::npos || a == b) fail("CLAW_TEST_HANG_OPERATION='{}' is not RANK:GROUP:SEQ", v);
    h.rank = std::stoi(v.substr(0, a));
    h.group = v.substr(a + 1, b - a - 1);
    h.seq = std::stoull(v.substr(b + 1));
    return h;
  }
};

class Engine {
 public:
  Engine(int world_rank, std::chrono::milliseconds drain_limit)
      : hang_(HangHook::from_env()), world_rank_(world_rank), drain_limit_(drain_limit) {
    thread_ = std::thread([this] { loop(); });
  }
  ~Engine() { stop(); }

  void stop() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopping_ = true;
      stop_deadline_ = Clock::now() + drain_limit_;
    }
    cv_.notify_all();
    if (std::uncaught_exceptions() > 0)
      thread_.detach();  // the job is being aborted; the thread may be stuck inside MPI
    else
      thread_.join();
  }

  // Runs `fn` on the communication thread after everything issued before it.
  void enqueue(std::shared_ptr<OpState> op, std::function<void()> fn) {
    bool wake;
    {
      std::lock_guard<std::mutex> lk(mu_);
      queue_.push_back({std::move(op), std::move(fn)});
      wake = sleeping_;
    }
    // No wake-up (a system call) while the thread is busy: it takes the next
    // task before it sleeps.
    if (wake) cv_.notify_one();
  }
  // A non-blocking MPI request started by a task; completes `op` when done.
  void track(std::shared_ptr<OpState> op, MPI_Request req) { inflight_.push_back({std::move(op), req}); }

  // Runs fn on the communication thread and waits (setup: communicator splits).
  // Like every wait, this one has a deadline: a rank that never makes the
  // same call must not leave the others inside MPI forever. `fn` may outlive
  // the caller (timeout), so it owns what it writes.
  void run_sync(std::function<void()> fn, std::chrono::milliseconds timeout, const std::string& what) {
    auto op = std::make_shared<OpState>();
    op->group = "world";
    op->timeout = timeout;
    enqueue(op, [fn = std::move(fn), op] {
      fn();
      op->complete();
    });
    try {
      Work(op).wait();
    } catch (const TimeoutError&) {
      throw TimeoutError(fmt::format(
          "{} did not complete within {:.1f} s (--distributed-timeout-minutes): a rank did not make the same call, "
          "hangs, or died",
          what, std::chrono::duration<double>(timeout).count()));
    }
  }

 private:
  struct Task {
    std::shared_ptr<OpState> op;
    std::function<void()> fn;
  };
  struct Inflight {
    std::shared_ptr<OpState> op;
    MPI_Request req;
  };

  void poll_inflight() {
    for (size_t i = 0; i < inflight_.size();) {
      int flag = 0;
      int rc = MPI_Test(&inflight_[i].req, &flag, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS || flag) {
        inflight_[i].op->complete(rc == MPI_SUCCESS ? nullptr
                                                    : std::make_exception_ptr(Error(fmt::format(
                                                          "{}: {}", inflight_[i].op->describe(), mpi_error_string(rc)))));
        inflight_.erase(inflight_.begin() + static_cast<long>(i));
      } else {
        ++i;
      }
    }
  }

  // At exit, transfers that no peer matched within the deadline are
  // cancelled and reported instead of holding the process forever.
  void abandon_inflight() {
    for (Inflight& f : inflight_) {
      log::warn("comm", "at exit, {} was never matched by its peer; cancelled", f.op->describe());
      MPI_Cancel(&f.req);
      MPI_Request_free(&f.req);
      f.op->complete(std::make_exception_ptr(Error(f.op->describe() + " cancelled at exit: never matched")));
    }
    inflight_.clear();
  }

  void loop() {
    for (;;) {
      Task t;
      {
        std::unique_lock<std::mutex> lk(mu_);
        if (queue_.empty()) {
          sleeping_ = true;
          if (inflight_.empty())
            cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
          else
            cv_.wait_for(lk, std::chrono::microseconds(50), [&] { return stopping_ || !queue_.empty(); });
          sleeping_ = false;
        }
        if (queue_.empty()) {
          if (stopping_ && inflight_.empty()) return;
          if (stopping_ && Clock::now() > stop_deadline_) {
            abandon_inflight();
            return;
          }
          lk.unlock();
          poll_inflight();
          continue;
        }
        t = std::move(queue_.front());
        queue_.pop_front();
      }
      if (t.op && hang_.rank == world_rank_ && t.op->group == hang_.group && t.op->seq == hang_.seq) {
        FlightRecorder::instance().set(t.op->record, FlightRecorder::State::running);
        log::warn("comm", "test hook CLAW_TEST_HANG_OPERATION: this rank never joins {}", t.op->describe());
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
      }
      if (t.op && t.op->record) FlightRecorder::instance().set(t.op->record, FlightRecorder::State::running);
      try {
        t.fn();
      } catch (...) {
        if (t.op) t.op->complete(std::current_exception());
      }
      if (!inflight_.empty()) poll_inflight();
    }
  }

  HangHook hang_;
  int world_rank_;
  std::chrono::milliseconds drain_limit_;
  Clock::time_point stop_deadline_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool sleeping_ = false;           // the thread waits on cv_ (guarded by mu_)
  std::vector<Inflight> inflight_;  // touched only by the communication thread
  bool stopping_ = false;
  std::thread thread_;
};

class MpiGroup final : public Group {
 public:
  MpiGroup(std::string name, int rank, std::vector<int> world_ranks, MPI_Comm comm, Engine& engine,
           std::chrono::milliseconds timeout)
      : Group(std::move(name), rank, std::move(world_ranks)), comm_(comm), engine_(engine), timeout_(timeout) {}
  ~MpiGroup() override {
    // Freed at MPI_Finalize (MPI_Comm_free is collective-safe only when no operation is pending).
  }

 protected:
  Work submit(Request r) override {
    if (size() == 1) {
      detail::run_self(r);
      return Work();
    }
    auto op = std::make_shared<OpState>();
    op->kind = r.kind;
    op->group = name();
    op->seq = ++seq_;
    op->bytes = r.bytes();
    op->timeout = timeout_;
    op->record = FlightRecorder::instance().add(*op);
    engine_.enqueue(op, [this, r = std::move(r), op] { execute(r, op); });
    return Work(op);
  }

 private:
  void execute(const Request& r, const std::shared_ptr<OpState>& op) {
    const bool reducing = r.kind == OpKind::all_reduce || r.kind == OpKind::reduce_scatter;
    const MPI_Datatype t = mpi_type(r.dtype, reducing);
    const char* what = to_string(r.kind);
    switch (r.kind) {
      case OpKind::all_reduce:
        CLAW_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, r.recv, to_int(r.count, what), t, mpi_op(r.reduce), comm_));
        break;
      case OpKind::reduce_scatter: {
        const std::vector<int> counts = to_ints(r.counts, what);
        const void* send = r.send == r.recv ? MPI_IN_PLACE : r.send;
        if (all_equal(counts))
          CLAW_MPI_CHECK(MPI_Reduce_scatter_block(send, r.recv, counts[0], t, mpi_op(r.reduce), comm_));
        else
          CLAW_MPI_CHECK(MPI_Reduce_scatter(send, r.recv, counts.data(), t, mpi_op(r.reduce), comm_));
        break;
      }
      case OpKind::all_gather: {
        const std::vector<int> counts = to_ints(r.counts, what);
        const std::vector<int> displs = prefix(counts);
        const void* send = r.send == nullptr ? MPI_IN_PLACE : r.send;
        if (all_equal(counts))
          CLAW_MPI_CHECK(MPI_Allgather(send, counts[0], t, r.recv, counts[0], t, comm_));
        else
          CLAW_MPI_CHECK(MPI_Allgatherv(send, counts[rank()], t, r.recv, counts.data(), displs.data(), t, comm_));
        break;
      }
      case OpKind::all_to_all: {
        const std::vector<int> sc = to_ints(r.send_counts, what), rc = to_ints(r.counts, what);
        const std::vector<int> sd = prefix(sc), rd = prefix(rc);
        CLAW_MPI_CHECK(MPI_Alltoallv(r.send, sc.data(), sd.data(), t, r.recv, rc.data(), rd.data(), t, comm_));
        break;
      }
      case OpKind::broadcast:
        CLAW_MPI_CHECK(MPI_Bcast(r.recv, to_int(r.count, what), t, r.peer, comm_));
        break;
      case OpKind::barrier: CLAW_MPI_CHECK(MPI_Barrier(comm_)); break;
      case OpKind::send: {
        MPI_Request req;
        CLAW_MPI_CHECK(MPI_Isend(r.send, to_int(r.count, what), t, r.peer, r.tag, comm_, &req));
        engine_.track(op, req);
        return;
      }
      case OpKind::recv: {
        MPI_Request req;
        CLAW_MPI_CHECK(MPI_Irecv(r.recv, to_int(r.count, what), t, r.peer, r.tag, comm_, &req));
        engine_.track(op, req);
        return;
      }
    }
    op->complete();
  }

  MPI_Comm comm_;
  Engine& engine_;
  std::chrono::milliseconds timeout_;
  uint64_t seq_ = 0;
};

class MpiWorld final : public World {
 public:
  explicit MpiWorld(const WorldOptions& opts) : World(opts) {
    int provided = 0;
    CLAW_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    if (provided < MPI_THREAD_MULTIPLE)
      fail("the MPI library provides thread level {} but claw needs MPI_THREAD_MULTIPLE (3)", provided);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm local;
    CLAW_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local));
    MPI_Comm_rank(local, &local_rank_);
    MPI_Comm_size(local, &local_size_);
    MPI_Comm_free(&local);
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    library_ = std::string(version, len);
    if (auto nl = library_.find_first_of(",\n"); nl != std::string::npos) library_.resize(nl);
    detail::FlightRecorder::instance().resize(opts.flight_record_size);
    engine_ = std::make_unique<Engine>(rank_, opts.timeout);
    std::vector<int> all(size_);
    for (int i = 0; i < size_; ++i) all[i] = i;
    world_ = std::make_shared<MpiGroup>("world", rank_, all, MPI_COMM_WORLD, *engine_, opts.timeout);
  }

  ~MpiWorld() override {
    const bool unwinding = std::uncaught_exceptions() > 0;
    engine_->stop();
    // During an error the job is about to be aborted (main calls abort_job);
    // finalizing now could wait for ranks that will never arrive. The engine
    // is left allocated: stop() detached its thread, which may still be
    // waking up on its mutex or be inside MPI until the abort.
    if (unwinding) {
      (void)engine_.release();
      return;
    }
    MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return local_size_; }
  int local_rank() const override { return local_rank_; }
  std::string backend() const override { return "mpi (" + library_ + ")"; }
  std::shared_ptr<Group> world_group() override { return world_; }

  std::shared_ptr<Group> split(const std::string& name, const std::vector<std::vector<int>>& groups) override {
    int color = -1, key = -1;
    std::vector<int> members;
    std::vector<int> seen(size_, 0);
    for (size_t g = 0; g < groups.size(); ++g)
      for (size_t i = 0; i < groups[g].size(); ++i) {
        const int r = groups[g][i];
        CLAW_CHECK(r >= 0 && r < size_, "group {}: rank {} outside the world of {}", name, r, size_);
        CLAW_CHECK(++seen[r] == 1, "group {}: rank {} listed twice", name, r);
        if (r == rank_) {
          color = static_cast<int>(g);
          key = static_cast<int>(i);
          members = groups[g];
        }
      }
    // Every rank must fail the same way: a rank missing from the lists
    // detected only by that rank would leave the others inside MPI_Comm_split.
    for (int r = 0; r < size_; ++r)
      CLAW_CHECK(seen[r] == 1, "group {}: rank {} is in none of the lists (they must partition the {} ranks)", name,
                 r, size_);
    auto comm = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
    engine_->run_sync(
        [comm, color, key] {
          CLAW_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, key, comm.get()));
          MPI_Comm_set_errhandler(*comm, MPI_ERRORS_RETURN);
        },
        opts_.timeout, fmt::format("creating group {} (MPI_Comm_split over the world)", name));
    return std::make_shared<MpiGroup>(name, key, members, *comm, *engine_, opts_.timeout);
  }

 private:
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string library_;
  std::unique_ptr<Engine> engine_;
  std::shared_ptr<Group> world_;
};

class SingleWorld final : public World {
 public:
  explicit SingleWorld(const WorldOptions& opts) : World(opts), world_(std::make_shared<SelfGroup>("world")) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_size() const override { return 1; }
  int local_rank() const override { return 0; }
  std::string backend() const override { return "single process"; }
  std::shared_ptr<Group> world_group() override { return world_; }
  std::shared_ptr<Group> split(const std::string& name, const std::vector<std::vector<int>>& groups) override {
    CLAW_CHECK(groups.size() == 1 && groups[0] == std::vector<int>{0}, "group {} of a single-process world", name);
    return std::make_shared<SelfGroup>(name);
  }

 private:
  std::shared_ptr<Group> world_;
};

bool launched_by_mpi_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  return false;
}

}  // namespace

std::unique_ptr<World> World::create(const WorldOptions& opts) {
  if (opts.timeout.count() <= 0) fail("--distributed-timeout-minutes must be positive");
  if (launched_by_mpi_launcher()) return std::make_unique<MpiWorld>(opts);
  if (const char* n = std::getenv("SLURM_NTASKS"); n && std::atoi(n) > 1 && std::getenv("SLURM_PROCID"))
    fail("started by srun with {} tasks but without an MPI plugin (no PMIx/PMI environment); use srun --mpi=pmix", n);
  return std::make_unique<SingleWorld>(opts);
}

std::unique_ptr<World> World::single() { return std::make_unique<SingleWorld>(WorldOptions{}); }

void abort_job(int exit_code) {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin) return;
  int size = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (size <= 1) return;
  const std::string rec = flight_record();
  if (!rec.empty()) {
    std::string tagged;
    for (size_t b = 0, e; b < rec.size(); b = e + 1) {
      e = rec.find('\n', b);
      if (e == std::string::npos) e = rec.size();
      tagged += fmt::format("[claw rank {}/{}] comm: {}\n", rank, size, rec.substr(b, e - b));
    }
    std::fputs(tagged.c_str(), stderr);
  }
  std::fprintf(stderr, "[claw rank %d/%d] comm: aborting the job (%d ranks)\n", rank, size, size);
  std::fflush(stderr);
  // Other ranks that are timing out too get a moment to print their records.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  MPI_Abort(MPI_COMM_WORLD, exit_code);
}

}  // namespace claw::comm
