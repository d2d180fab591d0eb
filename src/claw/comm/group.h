// Group: the collectives and point-to-point transfers of one set of ranks
// (DESIGN.md "Interfaces"). Layers talk to other ranks only through a Group
// handed to them by ParallelState; a group of size 1 is a no-op, so the
// single-process model is the parallel model with every group of size 1.
//
// Each operation has an async form returning Work and a blocking form (the
// async form followed by wait()), and takes OpOptions last (its timeout).
// Buffers are raw pointers with a DType; counts are elements.
//
// Ordering: the operations of one group run in the order they were issued
// (program order is the matching order, as with blocking MPI). Groups
// progress independently: an all-reduce of gradient buckets on dp that
// waits for a slow peer does not hold back a pipeline send on pp issued
// after it. So a buffer handed to an operation of one group must not be
// handed to another group's operation before the first is waited for.
//
// In-place forms follow MPI:
//   reduce_scatter(send == recv): the whole input is in recv; this rank's
//     block of the result lands at recv[0, counts[rank]).
//   all_gather(send == nullptr): this rank's block is already in place at
//     recv + displacement(rank); the others are filled in.
// Per-rank counts may differ (the v forms); displacements are the prefix sums
// of the counts.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "claw/comm/work.h"
#include "claw/core/dtype.h"
#include "claw/core/fault_injector.h"

namespace claw::comm {

enum class ReduceOp : uint8_t { sum, max, min };

// Per-operation options (gloo's and c10d's options struct).
struct OpOptions {
  // Deadline of this operation's waits; 0: the world's (--distributed-timeout-minutes).
  std::chrono::milliseconds timeout{0};
  // Start only once this operation (usually another group's) has completed:
  // a chain such as reduce-scatter inside a data centre, then all-reduce of
  // its result across data centres, issued at once and run by the groups'
  // own threads while the caller computes. A failure of `after` fails this
  // operation too. On a group of one rank the caller waits for it.
  Work after;
};

enum class OpKind : uint8_t { all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, send, recv, barrier };
const char* to_string(OpKind k);

// One operation as submitted to a backend.
struct Request {
  OpKind kind = OpKind::barrier;
  DType dtype = DType::f32;
  ReduceOp reduce = ReduceOp::sum;
  const void* send = nullptr;
  void* recv = nullptr;
  int64_t count = 0;                  // all_reduce, broadcast, send, recv
  std::vector<int64_t> counts;        // per rank: reduce_scatter / all_gather blocks, all_to_all receives
  std::vector<int64_t> send_counts;   // all_to_all sends
  int peer = 0;                       // send/recv peer or broadcast root (rank in the group)
  int tag = 0;
  std::chrono::milliseconds timeout{0};  // OpOptions::timeout
  Work after;                            // OpOptions::after
  int64_t bytes() const;              // payload of this rank, for the flight record and bandwidth
};

class Group {
 public:
  virtual ~Group() = default;
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  const std::string& name() const { return name_; }
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(world_ranks_.size()); }
  // Members as ranks of the world, in group-rank order.
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  // Where the group's traffic goes, for messages ("across 2 data centres":
  // a timeout there is most likely the long-haul link); empty by default.
  const std::string& span() const { return span_; }
  void set_span(std::string span) { span_ = std::move(span); }
  // The job's injected faults (WorldOptions::faults; tests only, null
  // without them). The layers that run a parallel layout over this group
  // read their mutations here (FaultInjector: skip-grad-reduce, drop-pp-row,
  // ...), so no test hook travels through their own interfaces.
  const FaultInjector* faults() const { return faults_.get(); }

  Work all_reduce_async(void* buf, int64_t count, DType dt, ReduceOp op = ReduceOp::sum, const OpOptions& o = {});
  Work reduce_scatter_async(const void* send, void* recv, std::span<const int64_t> counts, DType dt,
                            ReduceOp op = ReduceOp::sum, const OpOptions& o = {});
  Work all_gather_async(const void* send, void* recv, std::span<const int64_t> counts, DType dt,
                        const OpOptions& o = {});
  Work all_to_all_async(const void* send, std::span<const int64_t> send_counts, void* recv,
                        std::span<const int64_t> recv_counts, DType dt, const OpOptions& o = {});
  Work broadcast_async(void* buf, int64_t count, DType dt, int root, const OpOptions& o = {});
  Work send_async(const void* buf, int64_t count, DType dt, int peer, int tag = 0, const OpOptions& o = {});
  Work recv_async(void* buf, int64_t count, DType dt, int peer, int tag = 0, const OpOptions& o = {});
  Work barrier_async(const OpOptions& o = {});

  // Equal blocks of `count` per rank.
  Work reduce_scatter_async(const void* send, void* recv, int64_t count, DType dt, ReduceOp op = ReduceOp::sum,
                            const OpOptions& o = {});
  Work all_gather_async(const void* send, void* recv, int64_t count, DType dt, const OpOptions& o = {});

  void all_reduce(void* buf, int64_t count, DType dt, ReduceOp op = ReduceOp::sum, const OpOptions& o = {}) {
    all_reduce_async(buf, count, dt, op, o).wait();
  }
  void reduce_scatter(const void* send, void* recv, std::span<const int64_t> counts, DType dt,
                      ReduceOp op = ReduceOp::sum, const OpOptions& o = {}) {
    reduce_scatter_async(send, recv, counts, dt, op, o).wait();
  }
  void reduce_scatter(const void* send, void* recv, int64_t count, DType dt, ReduceOp op = ReduceOp::sum,
                      const OpOptions& o = {}) {
    reduce_scatter_async(send, recv, count, dt, op, o).wait();
  }
  void all_gather(const void* send, void* recv, std::span<const int64_t> counts, DType dt, const OpOptions& o = {}) {
    all_gather_async(send, recv, counts, dt, o).wait();
  }
  void all_gather(const void* send, void* recv, int64_t count, DType dt, const OpOptions& o = {}) {
    all_gather_async(send, recv, count, dt, o).wait();
  }
  void all_to_all(const void* send, std::span<const int64_t> send_counts, void* recv,
                  std::span<const int64_t> recv_counts, DType dt, const OpOptions& o = {}) {
    all_to_all_async(send, send_counts, recv, recv_counts, dt, o).wait();
  }
  void broadcast(void* buf, int64_t count, DType dt, int root, const OpOptions& o = {}) {
    broadcast_async(buf, count, dt, root, o).wait();
  }
  void send(const void* buf, int64_t count, DType dt, int peer, int tag = 0, const OpOptions& o = {}) {
    send_async(buf, count, dt, peer, tag, o).wait();
  }
  void recv(void* buf, int64_t count, DType dt, int peer, int tag = 0, const OpOptions& o = {}) {
    recv_async(buf, count, dt, peer, tag, o).wait();
  }
  void barrier(const OpOptions& o = {}) { barrier_async(o).wait(); }

  // Typed conveniences for the common scalar cases.
  template <typename T>
  T all_reduce_value(T v, ReduceOp op = ReduceOp::sum, const OpOptions& o = {}) {
    all_reduce(&v, 1, dtype_of<T>::value, op, o);
    return v;
  }

 protected:
  Group(std::string name, int rank, std::vector<int> world_ranks, std::shared_ptr<const FaultInjector> faults = {})
      : name_(std::move(name)), rank_(rank), world_ranks_(std::move(world_ranks)), faults_(std::move(faults)) {}
  virtual Work submit(Request r) = 0;

 private:
  Work checked_submit(Request r);
  std::string name_;
  int rank_;
  std::vector<int> world_ranks_;
  std::string span_;
  std::shared_ptr<const FaultInjector> faults_;
};

// The group of one rank: every operation completes at once (copies where
// send and receive buffers differ).
class SelfGroup final : public Group {
 public:
  explicit SelfGroup(std::string name, int world_rank = 0) : Group(std::move(name), 0, {world_rank}) {}

 protected:
  Work submit(Request r) override;
};

// A group that knows its size and this rank's place in it but cannot
// communicate: for planning, where a model is built for its shapes only
// (the planner sizes a rank of a 1024-rank job on one machine). Any
// operation is an internal error.
class ShapeGroup final : public Group {
 public:
  ShapeGroup(std::string name, int size, int rank);

 protected:
  Work submit(Request r) override;
};

}  // namespace claw::comm
