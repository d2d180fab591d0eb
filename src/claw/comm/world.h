// World: this process's place in the job, and the factory of its groups.
//
//   auto world = comm::World::create({.timeout = minutes(10)});
//   world->rank(), world->size();
//   std::shared_ptr<Group> dp = world->split("dp", rank_lists);   // every rank calls it
//
// Launched by mpirun or srun (detected from the launcher's environment),
// World initialises MPI with MPI_THREAD_MULTIPLE (the backend is comm/mpi/);
// each group owns its communicator and a thread that runs the group's
// operations in issue order, so compute continues while buckets are reduced
// and groups do not queue behind one another. Launched alone, World is a
// single rank and never touches MPI.
//
// Failure (DESIGN.md principle 8): a wait that passes the deadline throws
// TimeoutError; when an error leaves a multi-rank job's command, main calls
// abort_job(code), which prints this rank's flight record (the last
// operations: kind, group, sequence number, bytes, state, times), leaves a
// short grace period for other ranks to print theirs, and calls MPI_Abort
// with the error's exit code (core/error.h), which mpirun passes on.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "claw/comm/group.h"
#include "claw/core/fault_injector.h"

namespace claw::comm {

struct WorldOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};  // --distributed-timeout-minutes
  int flight_record_size = 32;                                   // operations kept for the record
  std::shared_ptr<const FaultInjector> faults;                   // tests only: injected hangs (null: none)
};

class World {
 public:
  virtual ~World() = default;
  // MPI when started by a launcher (mpirun, srun), a single rank otherwise.
  static std::unique_ptr<World> create(const WorldOptions& opts);
  // A single rank, never MPI (tests, tools).
  static std::unique_ptr<World> single();

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Ranks on this node and this rank's index among them (thread budgets).
  virtual int local_size() const = 0;
  virtual int local_rank() const = 0;
  virtual std::string backend() const = 0;  // "mpi (Open MPI v4.1.4)" or "single process"
  virtual std::shared_ptr<Group> world_group() = 0;
  // Collective over the world: `groups` partitions the world ranks (each rank
  // in exactly one list, the same lists on every rank). Returns the group
  // holding this rank, its members in the list's order, named `name`.
  virtual std::shared_ptr<Group> split(const std::string& name, const std::vector<std::vector<int>>& groups) = 0;
  // Collective over the world: `parts` partitions the world ranks as for
  // split(); returns the part holding this rank as a world of its own (its
  // ranks numbered in the list's order, its groups and splits among its
  // members only): the learner and generator groups of one MPMD job. It
  // must be destroyed before this world.
  virtual std::unique_ptr<World> sub_world(const std::string& name, const std::vector<std::vector<int>>& parts) = 0;

  const WorldOptions& options() const { return opts_; }

 protected:
  explicit World(WorldOptions opts) : opts_(opts) {}
  WorldOptions opts_;
};

// Ends a multi-rank job after an error on this rank: prints the flight
// record, waits a grace period so that other ranks can print, and aborts
// every rank with `exit_code` (an ExitCode). Returns (doing nothing) in a
// single-process run.
void abort_job(int exit_code);

// The flight record of this process as text (empty when nothing was recorded).
std::string flight_record();

}  // namespace claw::comm
