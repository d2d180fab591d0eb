#include "claw/comm/mpi/communicator.h"

#include <fmt/format.h>

#include "claw/core/error.h"

namespace claw::comm::mpi {

std::string error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, len);
}

void check(int rc, std::string_view what) {
  if (rc != MPI_SUCCESS) throw CommError(fmt::format("{} failed: {}", what, error_string(rc)));
}

Communicator& Communicator::operator=(Communicator&& o) noexcept {
  if (this != &o) {
    reset();
    comm_ = o.comm_;
    o.comm_ = MPI_COMM_NULL;
  }
  return *this;
}

Communicator Communicator::split(MPI_Comm parent, int color, int key) {
  MPI_Comm c = MPI_COMM_NULL;
  CLAW_MPI_CHECK(MPI_Comm_split(parent, color, key, &c));
  Communicator out(c);
  CLAW_MPI_CHECK(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN));
  return out;
}

void Communicator::reset() {
  if (comm_ == MPI_COMM_NULL || comm_ == MPI_COMM_WORLD) {
    comm_ = MPI_COMM_NULL;
    return;
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm_);
  comm_ = MPI_COMM_NULL;
}

}  // namespace claw::comm::mpi
