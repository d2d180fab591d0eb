// A tiny job for the fault tests (comm_fault.sh): all_reduces in a loop on
// the world group, ending the way claw's main does when one fails (the
// error's exit code passed to abort_job).
//
//   --test-fault hang:1:world:5    rank 1 never joins all_reduce #5 (the
//                                  injector passed in WorldOptions): the
//                                  others time out after 3 s, print the
//                                  error and their flight records, and abort
//                                  the job with the retryable code 4.
//   --kill-rank R [--kill-after N] rank R kills itself with SIGKILL before
//                                  its operation N+1 (N = 3 by default).
//   --split-late-rank R            the ranks create a group first, rank R
//                                  30 s late: the others time out in
//                                  World::split after 3 s.
//
// Prints "comm_fault: all N operations completed" on rank 0 when nothing fails.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "claw/comm/world.h"
#include "claw/core/fault_injector.h"
#include "claw/core/log.h"

using namespace claw;
using namespace std::chrono_literals;

namespace {

double epoch_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct Args {
  std::vector<std::string> faults;
  int kill_rank = -1, kill_after = 3, split_late_rank = -1;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--test-fault")
      a.faults.push_back(v);
    else if (k == "--kill-rank")
      a.kill_rank = std::stoi(v);
    else if (k == "--kill-after")
      a.kill_after = std::stoi(v);
    else if (k == "--split-late-rank")
      a.split_late_rank = std::stoi(v);
    else
      fail("comm_fault: unknown flag {}", k);
  }
  if (argc % 2 == 0) fail("comm_fault: flag {} has no value", argv[argc - 1]);
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  constexpr int kOps = 20;
  int rank = -1, size = 0;
  try {
    const Args args = parse(argc, argv);
    auto world = comm::World::create(comm::WorldOptions{
        .timeout = 3s, .faults = std::make_shared<FaultInjector>(FaultInjector::parse(args.faults))});
    rank = world->rank();
    size = world->size();
    log::set_rank(rank, size);
    if (args.split_late_rank >= 0) {
      if (rank == args.split_late_rank) std::this_thread::sleep_for(30s);
      std::vector<int> all(size);
      for (int r = 0; r < size; ++r) all[r] = r;
      world->split("late", {all});
    }
    comm::Group& g = *world->world_group();
    std::vector<float> buf(1024);
    for (int i = 1; i <= kOps; ++i) {
      if (rank == args.kill_rank && i == args.kill_after + 1) {
        // The script measures from this time stamp to the end of the job.
        std::printf("[rank %d/%d] comm_fault: killing myself with SIGKILL before operation %d at %.3f\n", rank, size,
                    i, epoch_seconds());
        std::fflush(stdout);
        std::raise(SIGKILL);
      }
      for (float& x : buf) x = static_cast<float>(rank + i);
      g.all_reduce(buf.data(), static_cast<int64_t>(buf.size()), DType::f32);
      const float want = static_cast<float>(size * i + size * (size - 1) / 2);
      if (buf[0] != want || buf.back() != want) {
        std::fprintf(stderr, "[rank %d/%d] comm_fault: operation %d gave %g, expected %g\n", rank, size, i, buf[0],
                     want);
        comm::abort_job(static_cast<int>(ExitCode::internal));
        return static_cast<int>(ExitCode::internal);
      }
    }
    if (rank == 0) std::printf("comm_fault: all %d operations completed\n", kOps);
    return 0;
  } catch (const Error& e) {
    // As claw's main: print (rank-tagged), then the flight record, and abort with the error's code.
    std::fprintf(stderr, "[rank %d/%d] comm_fault: error at %.3f: %s\n", rank, size, epoch_seconds(), e.what());
    std::fflush(stderr);
    comm::abort_job(static_cast<int>(e.exit_code()));
    return static_cast<int>(e.exit_code());
  }
}
