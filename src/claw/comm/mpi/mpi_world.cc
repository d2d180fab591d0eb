#include "claw/comm/mpi/mpi_world.h"

#include <cstdio>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>

#include "claw/comm/mpi/communicator.h"
#include "claw/comm/mpi/mpi_group.h"
#include "claw/comm/op_state.h"
#include "claw/core/error.h"

namespace claw::comm::mpi {

namespace {

// The job's world (MPI_COMM_WORLD, which it initialises and finalises), or
// a sub-world: a part of it with a communicator of its own (World::
// sub_world), whose ranks, groups and splits are the part's.
class MpiWorld final : public World {
 public:
  explicit MpiWorld(const WorldOptions& opts) : World(opts), root_(true) {
    // Open MPI begins MPI_Finalize with a fence over every process of the
    // job, which never completes once one has died (a lost rollout worker
    // under mpirun --enable-recovery: the survivors' finalize hung in one
    // run of two). claw drains and frees every communicator before it
    // finalizes, so that barrier guards nothing here: skipped, unless the
    // user set the parameter.
    setenv("OMPI_MCA_async_mpi_finalize", "1", 0);
    int provided = 0;
    CLAW_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    if (provided < MPI_THREAD_MULTIPLE)
      fail("the MPI library provides thread level {} but claw needs MPI_THREAD_MULTIPLE (3)", provided);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    library_ = std::string(version, len);
    if (auto nl = library_.find_first_of(",\n"); nl != std::string::npos) library_.resize(nl);
    detail::FlightRecorder::instance().resize(opts.flight_record_size);
    join(Communicator(MPI_COMM_WORLD), "world");
  }
  MpiWorld(const WorldOptions& opts, Communicator comm, const std::string& name, std::string library)
      : World(opts), root_(false), library_(std::move(library)) {
    join(std::move(comm), name);
  }

  ~MpiWorld() override {
    // During an error the job is about to be aborted (main calls abort_job):
    // draining or finalizing now could wait for ranks that will never
    // arrive, so every group's thread is left as it is.
    if (std::uncaught_exceptions() > 0) {
      for (const auto& w : groups_)
        if (auto g = w.lock()) g->abandon();
      world_->abandon();
      return;
    }
    // Every thread drains at once; communicators are then freed in creation
    // order, the same on every rank, and the world's last.
    const auto deadline = detail::Clock::now() + opts_.timeout;
    std::vector<std::shared_ptr<MpiGroup>> live;
    for (const auto& w : groups_)
      if (auto g = w.lock()) live.push_back(std::move(g));
    for (auto& g : live) g->begin_shutdown(deadline);
    world_->begin_shutdown(deadline);
    for (auto& g : live) g->finish_shutdown();
    world_->finish_shutdown();
    if (root_) MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return local_size_; }
  int local_rank() const override { return local_rank_; }
  std::string backend() const override { return "mpi (" + library_ + ")"; }
  std::shared_ptr<Group> world_group() override { return world_; }

  std::shared_ptr<Group> split(const std::string& name, const std::vector<std::vector<int>>& groups) override {
    auto [comm, key, members, spans_hosts] = split_comm(name, groups);
    auto g = std::make_shared<MpiGroup>(name, key, members, std::move(comm), job_rank_, opts_.timeout, opts_.faults,
                                        spans_hosts);
    groups_.push_back(g);
    return g;
  }

  std::unique_ptr<World> sub_world(const std::string& name, const std::vector<std::vector<int>>& parts) override {
    auto [comm, key, members, spans_hosts] = split_comm(name, parts);
    return std::make_unique<MpiWorld>(opts_, std::move(comm), name, library_);
  }

 private:
  // This rank's place over communicator `comm`, named `name`.
  void join(Communicator comm, const std::string& name) {
    MPI_Comm_rank(comm.get(), &rank_);
    MPI_Comm_size(comm.get(), &size_);
    {
      MPI_Comm c = MPI_COMM_NULL;
      CLAW_MPI_CHECK(MPI_Comm_split_type(comm.get(), MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &c));
      Communicator local(c);
      MPI_Comm_rank(local.get(), &local_rank_);
      MPI_Comm_size(local.get(), &local_size_);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &job_rank_);  // the flight record's rank
    std::vector<int> all(size_);
    for (int i = 0; i < size_; ++i) all[i] = i;
    world_ = std::make_shared<MpiGroup>(name, rank_, all, std::move(comm), job_rank_, opts_.timeout, opts_.faults,
                                        local_size_ < size_);
  }

  struct Split {
    Communicator comm;
    int key = -1;
    std::vector<int> members;
    bool spans_hosts = false;  // some members share no memory with this rank's host
  };
  Split split_comm(const std::string& name, const std::vector<std::vector<int>>& groups) {
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
    // On the world's thread: a split is a collective over the world's
    // communicator and must take its place among the world group's operations.
    auto comm = std::make_shared<Communicator>();
    auto spans = std::make_shared<bool>(false);
    const MPI_Comm parent = world_->comm();
    world_->thread().run_sync(
        [comm, spans, parent, color, key] {
          *comm = Communicator::split(parent, color, key);
          // Whether the new group leaves this host: a collective over it,
          // which every member makes here, right after the split.
          MPI_Comm local = MPI_COMM_NULL;
          CLAW_MPI_CHECK(MPI_Comm_split_type(comm->get(), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local));
          int n = 0, here = 0;
          MPI_Comm_size(comm->get(), &n);
          MPI_Comm_size(local, &here);
          MPI_Comm_free(&local);
          *spans = here < n;
        },
        opts_.timeout, fmt::format("creating group {} (MPI_Comm_split over the world)", name));
    return {std::move(*comm), key, std::move(members), *spans};
  }

  bool root_;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, job_rank_ = 0;
  std::string library_;
  std::shared_ptr<MpiGroup> world_;
  std::vector<std::weak_ptr<MpiGroup>> groups_;  // made by split(), in creation order
};

}  // namespace

std::unique_ptr<World> make_world(const WorldOptions& opts) { return std::make_unique<MpiWorld>(opts); }

}  // namespace claw::comm::mpi

namespace claw::comm {

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
  std::fprintf(stderr, "[claw rank %d/%d] comm: aborting the job (%d ranks, exit code %d)\n", rank, size, size,
               exit_code);
  std::fflush(stderr);
  // Other ranks that are timing out too get a moment to print their records.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  MPI_Abort(MPI_COMM_WORLD, exit_code);
}

}  // namespace claw::comm
