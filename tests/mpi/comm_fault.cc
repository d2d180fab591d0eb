// A tiny job for the fault tests (comm_fault.sh): all_reduces in a loop on
// the world group, ending the way claw's main does when one fails.
//
//   CLAW_TEST_HANG_OPERATION=1:world:5   rank 1 never joins all_reduce #5: the
//                                        others time out after 3 s, print the
//                                        error and their flight records, and
//                                        abort the job.
//   CLAW_TEST_KILL_RANK=R                rank R kills itself with SIGKILL before
//   CLAW_TEST_KILL_AFTER=N (default 3)   its operation N+1.
//   CLAW_TEST_SPLIT_LATE_RANK=R          the ranks create a group first, rank R
//                                        30 s late: the others time out in
//                                        World::split after 3 s.
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
#include "claw/core/log.h"

using namespace claw;
using namespace std::chrono_literals;

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

double epoch_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

int main() {
  constexpr int kOps = 20;
  int rank = -1, size = 0;
  try {
    auto world = comm::World::create(comm::WorldOptions{.timeout = 3s});
    rank = world->rank();
    size = world->size();
    log::set_rank(rank, size);
    if (const int late = env_int("CLAW_TEST_SPLIT_LATE_RANK", -1); late >= 0) {
      if (rank == late) std::this_thread::sleep_for(30s);
      std::vector<int> all(size);
      for (int r = 0; r < size; ++r) all[r] = r;
      world->split("late", {all});
    }
    comm::Group& g = *world->world_group();
    const int kill_rank = env_int("CLAW_TEST_KILL_RANK", -1);
    const int kill_after = env_int("CLAW_TEST_KILL_AFTER", 3);
    std::vector<float> buf(1024);
    for (int i = 1; i <= kOps; ++i) {
      if (rank == kill_rank && i == kill_after + 1) {
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
        comm::abort_job(3);
        return 3;
      }
    }
    if (rank == 0) std::printf("comm_fault: all %d operations completed\n", kOps);
    return 0;
  } catch (const std::exception& e) {
    // As claw's main: print (rank-tagged), then the flight record and abort.
    std::fprintf(stderr, "[rank %d/%d] comm_fault: error at %.3f: %s\n", rank, size, epoch_seconds(), e.what());
    std::fflush(stderr);
    comm::abort_job(1);
    return 1;
  }
}
