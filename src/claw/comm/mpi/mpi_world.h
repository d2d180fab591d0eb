// The MPI backend's World: MPI_Init_thread (MPI_THREAD_MULTIPLE) on creation,
// every group's communicator drained and freed, then MPI_Finalize, on
// destruction. Reached only through World::create.
#pragma once

#include <memory>

#include "claw/comm/world.h"

namespace claw::comm::mpi {

std::unique_ptr<World> make_world(const WorldOptions& opts);

}  // namespace claw::comm::mpi
