// claw's own ring collectives over MPI point-to-point transfers, for groups
// whose members sit on different hosts (TCP between them).
//
// Why not MPI's: Open MPI 4.1 reduce-scatters a 2-rank group across a link by
// a reduce followed by a scatter (1.5x the bytes, one direction at a time:
// 2.9x the time of the exchange it needs, bench/RESULTS.md "Across data
// centres"), and its blocking collectives poll while they wait, taking a
// core from the compute they are meant to overlap. The rings here send the
// bandwidth-optimal (n - 1) / n of the buffer each way, every chunk of a ring
// step in flight at once (a long link stays full), and wait politely: a few
// yields, then sleeps of up to 200 us between progress calls, in which the
// kernel's socket buffers keep the transfer going.
//
// reduce-scatter: n - 1 steps; at step k rank r sends its partial sum of
//   block (r - k - 1) mod n to rank r + 1 and adds the partial sum of block
//   (r - k - 2) mod n it receives from rank r - 1; after the last step it
//   holds the sum of block r. Each chunk moves on to the next step as soon
//   as it has arrived and been added, so the steps pipeline.
// all-gather: n - 1 steps forwarding block (r - k) mod n to rank r + 1.
// all-reduce: reduce-scatter over n near-equal blocks, then all-gather:
//   every rank ends with the same bits (each block is summed once, by its
//   owner, and copied).
//
// The sum of a block is taken in ring order, starting at its owner's right
// neighbour: deterministic for a given group and sizes, as MPI's is.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "claw/comm/group.h"
#include "claw/comm/op_state.h"

namespace claw::comm::mpi {

// Which algorithm runs a group's all_reduce, reduce_scatter and all_gather:
// CLAW_COMM_ALGO=auto (the default: the ring for groups spanning hosts and
// operations of at least kRingMinBytes, MPI's own otherwise), ring (every
// operation of a group of 2 or more, e.g. for tests on one host) or mpi.
enum class CollectiveAlgo : uint8_t { automatic, ring, mpi };
CollectiveAlgo collective_algo();  // read once from the environment; a bad value is a clear error

inline constexpr int64_t kRingMinBytes = 1 << 20;
// Bytes per message: a ring step's block is cut into chunks of this size.
inline constexpr int64_t kRingChunkBytes = 1 << 20;

// Whether `r` runs on the ring in a group of `size` ranks.
bool runs_on_ring(const Request& r, int size, bool spans_hosts);

// One operation on the ring of communicator `comm` (this rank `rank` of
// `size`). `op` is polled while waiting: once a waiter has given it up
// (timeout) the transfers are cancelled and CommError is thrown. `scratch`
// is the group's reusable staging memory (grown as needed).
void ring_execute(const Request& r, MPI_Comm comm, int rank, int size, const detail::OpState& op,
                  std::vector<std::byte>& scratch);

}  // namespace claw::comm::mpi
