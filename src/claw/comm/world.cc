#include "claw/comm/world.h"

#include <cstdlib>

#include "claw/comm/mpi/mpi_world.h"
#include "claw/core/error.h"

namespace claw::comm {

namespace {

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
  std::unique_ptr<World> sub_world(const std::string& name, const std::vector<std::vector<int>>& parts) override {
    CLAW_CHECK(parts.size() == 1 && parts[0] == std::vector<int>{0}, "sub-world {} of a single-process world", name);
    return std::make_unique<SingleWorld>(opts_);
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
  if (launched_by_mpi_launcher()) return mpi::make_world(opts);
  if (const char* n = std::getenv("SLURM_NTASKS"); n && std::atoi(n) > 1 && std::getenv("SLURM_PROCID"))
    fail("started by srun with {} tasks but without an MPI plugin (no PMIx/PMI environment); use srun --mpi=pmix", n);
  return std::make_unique<SingleWorld>(opts);
}

std::unique_ptr<World> World::single() { return std::make_unique<SingleWorld>(WorldOptions{}); }

}  // namespace claw::comm
