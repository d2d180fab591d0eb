// MpiGroup: a Group over one MPI communicator, which it owns together with
// the thread that runs its operations (comm_thread.h).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "claw/comm/group.h"
#include "claw/comm/mpi/comm_thread.h"
#include "claw/comm/mpi/communicator.h"
#include "claw/core/fault_injector.h"

namespace claw::comm::mpi {

class MpiGroup final : public Group {
 public:
  // `timeout`: the world's deadline, for operations without their own.
  // `spans_hosts`: some members are on other hosts (ring.h picks the
  // algorithm by it).
  MpiGroup(std::string name, int rank, std::vector<int> world_ranks, Communicator comm, int world_rank,
           std::chrono::milliseconds timeout, std::shared_ptr<const FaultInjector> faults, bool spans_hosts);
  // Drains and frees, as shutdown() (or abandons during an error, as abandon()).
  ~MpiGroup() override;

  MPI_Comm comm() const { return comm_.get(); }
  CommThread& thread() { return *thread_; }

  // Shutting down, in two halves so that many groups drain at once: the
  // thread finishes what was issued (transfers unmatched at the deadline are
  // cancelled), then the communicator is freed. Operations issued after
  // begin_shutdown() are internal errors.
  void begin_shutdown(detail::Clock::time_point drain_deadline);
  void finish_shutdown();
  // An error is unwinding towards MPI_Abort: the thread may be inside MPI,
  // so it is left running, and the communicator is not freed.
  void abandon();

 protected:
  Work submit(Request r) override;

 private:
  void execute(const Request& r, const std::shared_ptr<detail::OpState>& op);

  Communicator comm_;
  bool spans_hosts_;
  std::vector<std::byte> scratch_;  // the ring's staging (used on the thread only)
  std::unique_ptr<CommThread> thread_;
  std::chrono::milliseconds timeout_;
  uint64_t seq_ = 0;
  bool closed_ = false;
};

}  // namespace claw::comm::mpi
