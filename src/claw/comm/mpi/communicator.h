// The MPI backend's handle of a communicator, and MPI status codes turned
// into exceptions (STYLE.md #15, #22). Included only by the backend's own
// files: nothing above comm/ sees MPI.
#pragma once

#include <mpi.h>

#include <string>
#include <string_view>

namespace claw::comm::mpi {

std::string error_string(int code);

// Throws CommError "`what` failed: MPI's message" unless rc is MPI_SUCCESS.
void check(int rc, std::string_view what);
#define CLAW_MPI_CHECK(call) ::claw::comm::mpi::check((call), #call)

// Owns one MPI communicator and frees it (MPI_Comm_free) when destroyed or
// reset while MPI is running. MPI_COMM_WORLD is borrowed, never freed. Move-
// only. Freeing is local in effect but must not race with an operation on
// the communicator: the owner drains its thread first (MpiGroup).
class Communicator {
 public:
  Communicator() = default;
  explicit Communicator(MPI_Comm comm) : comm_(comm) {}
  ~Communicator() { reset(); }
  Communicator(Communicator&& o) noexcept : comm_(o.comm_) { o.comm_ = MPI_COMM_NULL; }
  Communicator& operator=(Communicator&& o) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // MPI_Comm_split of `parent` with errors returned as codes (not fatal).
  static Communicator split(MPI_Comm parent, int color, int key);

  MPI_Comm get() const { return comm_; }
  // Frees the communicator now (a no-op for MPI_COMM_WORLD, after MPI_Finalize, or when empty).
  void reset();
  // Forgets it without freeing: the job is being aborted and a thread may
  // still be inside MPI on it.
  void release() { comm_ = MPI_COMM_NULL; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

}  // namespace claw::comm::mpi
