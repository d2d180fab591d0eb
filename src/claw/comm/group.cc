#include "claw/comm/group.h"

#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "claw/comm/op_state.h"
#include "claw/core/error.h"

namespace claw::comm {

const char* to_string(OpKind k) {
  switch (k) {
    case OpKind::all_reduce: return "all_reduce";
    case OpKind::reduce_scatter: return "reduce_scatter";
    case OpKind::all_gather: return "all_gather";
    case OpKind::all_to_all: return "all_to_all";
    case OpKind::broadcast: return "broadcast";
    case OpKind::send: return "send";
    case OpKind::recv: return "recv";
    case OpKind::barrier: return "barrier";
  }
  return "?";
}

int64_t Request::bytes() const {
  const int64_t es = static_cast<int64_t>(dtype_size(dtype));
  switch (kind) {
    case OpKind::all_reduce: case OpKind::broadcast: case OpKind::send: case OpKind::recv: return count * es;
    case OpKind::reduce_scatter: case OpKind::all_gather:
      return std::accumulate(counts.begin(), counts.end(), int64_t{0}) * es;
    case OpKind::all_to_all:
      return std::accumulate(send_counts.begin(), send_counts.end(), int64_t{0}) * es;
    case OpKind::barrier: return 0;
  }
  return 0;
}

Work Group::checked_submit(Request r) {
  const auto n = static_cast<size_t>(size());
  CLAW_CHECK(r.timeout.count() >= 0, "{} on {}: negative timeout {} ms", to_string(r.kind), name_, r.timeout.count());
  CLAW_CHECK(r.count >= 0, "{} on {}: negative count {}", to_string(r.kind), name_, r.count);
  if (r.kind == OpKind::reduce_scatter || r.kind == OpKind::all_gather || r.kind == OpKind::all_to_all)
    CLAW_CHECK(r.counts.size() == n, "{} on {}: {} counts for {} ranks", to_string(r.kind), name_, r.counts.size(), n);
  if (r.kind == OpKind::all_to_all)
    CLAW_CHECK(r.send_counts.size() == n, "all_to_all on {}: {} send counts for {} ranks", name_,
               r.send_counts.size(), n);
  if (r.kind == OpKind::send || r.kind == OpKind::recv || r.kind == OpKind::broadcast)
    CLAW_CHECK(r.peer >= 0 && r.peer < size(), "{} on {}: rank {} outside [0, {})", to_string(r.kind), name_, r.peer,
               size());
  // Checked here, not in a backend, so that one rank refuses what many would.
  const bool reducing = r.kind == OpKind::all_reduce || r.kind == OpKind::reduce_scatter;
  const bool low = r.dtype == DType::bf16 || r.dtype == DType::f16 || r.dtype == DType::e4m3 || r.dtype == DType::e5m2;
  if (reducing && low)
    fail("{} of {} on group {}: reductions of 16- and 8-bit floats are not supported; reduce in f32",
         to_string(r.kind), dtype_name(r.dtype), name_);
  if (r.kind == OpKind::send || r.kind == OpKind::recv)
    CLAW_CHECK(r.peer != rank_, "{} on {}: rank {} to itself", to_string(r.kind), name_, rank_);
  return submit(std::move(r));
}

Work Group::all_reduce_async(void* buf, int64_t count, DType dt, ReduceOp op, const OpOptions& o) {
  return checked_submit({.kind = OpKind::all_reduce, .dtype = dt, .reduce = op, .send = buf, .recv = buf,
                         .count = count, .timeout = o.timeout, .after = o.after});
}

Work Group::reduce_scatter_async(const void* send, void* recv, std::span<const int64_t> counts, DType dt,
                                 ReduceOp op, const OpOptions& o) {
  return checked_submit({.kind = OpKind::reduce_scatter, .dtype = dt, .reduce = op, .send = send, .recv = recv,
                         .counts = {counts.begin(), counts.end()}, .timeout = o.timeout, .after = o.after});
}

Work Group::reduce_scatter_async(const void* send, void* recv, int64_t count, DType dt, ReduceOp op,
                                 const OpOptions& o) {
  const std::vector<int64_t> counts(size(), count);
  return reduce_scatter_async(send, recv, counts, dt, op, o);
}

Work Group::all_gather_async(const void* send, void* recv, std::span<const int64_t> counts, DType dt,
                             const OpOptions& o) {
  return checked_submit({.kind = OpKind::all_gather, .dtype = dt, .send = send, .recv = recv,
                         .counts = {counts.begin(), counts.end()}, .timeout = o.timeout, .after = o.after});
}

Work Group::all_gather_async(const void* send, void* recv, int64_t count, DType dt, const OpOptions& o) {
  const std::vector<int64_t> counts(size(), count);
  return all_gather_async(send, recv, counts, dt, o);
}

Work Group::all_to_all_async(const void* send, std::span<const int64_t> send_counts, void* recv,
                             std::span<const int64_t> recv_counts, DType dt, const OpOptions& o) {
  return checked_submit({.kind = OpKind::all_to_all, .dtype = dt, .send = send, .recv = recv,
                         .counts = {recv_counts.begin(), recv_counts.end()},
                         .send_counts = {send_counts.begin(), send_counts.end()}, .timeout = o.timeout,
                         .after = o.after});
}

Work Group::broadcast_async(void* buf, int64_t count, DType dt, int root, const OpOptions& o) {
  return checked_submit({.kind = OpKind::broadcast, .dtype = dt, .send = buf, .recv = buf, .count = count,
                         .peer = root, .timeout = o.timeout, .after = o.after});
}

Work Group::send_async(const void* buf, int64_t count, DType dt, int peer, int tag, const OpOptions& o) {
  return checked_submit(
      {.kind = OpKind::send, .dtype = dt, .send = buf, .count = count, .peer = peer, .tag = tag, .timeout = o.timeout,
       .after = o.after});
}

Work Group::recv_async(void* buf, int64_t count, DType dt, int peer, int tag, const OpOptions& o) {
  return checked_submit(
      {.kind = OpKind::recv, .dtype = dt, .recv = buf, .count = count, .peer = peer, .tag = tag, .timeout = o.timeout,
       .after = o.after});
}

Work Group::barrier_async(const OpOptions& o) {
  return checked_submit({.kind = OpKind::barrier, .timeout = o.timeout, .after = o.after});
}

namespace detail {

void run_self(const Request& r) {
  // memcpy with an empty range still needs valid pointers; an empty
  // operation may come with null buffers.
  auto copy = [&] {
    const size_t bytes = static_cast<size_t>(r.counts[0]) * dtype_size(r.dtype);
    if (bytes > 0 && r.send != nullptr && r.send != r.recv) std::memcpy(r.recv, r.send, bytes);
  };
  switch (r.kind) {
    case OpKind::reduce_scatter:
    case OpKind::all_gather:
      copy();
      break;
    case OpKind::all_to_all:
      CLAW_CHECK(r.send_counts[0] == r.counts[0], "all_to_all on one rank: sends {} but receives {}",
                 r.send_counts[0], r.counts[0]);
      copy();
      break;
    case OpKind::all_reduce: case OpKind::broadcast: case OpKind::barrier: break;
    case OpKind::send: case OpKind::recv: CLAW_CHECK(false, "point-to-point transfer in a group of one rank");
  }
}

}  // namespace detail

Work SelfGroup::submit(Request r) {
  r.after.wait();
  detail::run_self(r);
  return Work();
}

namespace {
std::vector<int> iota_ranks(int size) {
  CLAW_CHECK(size >= 1, "a group of {} ranks", size);
  std::vector<int> r(static_cast<size_t>(size));
  for (int k = 0; k < size; ++k) r[static_cast<size_t>(k)] = k;
  return r;
}
}  // namespace

ShapeGroup::ShapeGroup(std::string name, int size, int rank) : Group(std::move(name), rank, iota_ranks(size)) {
  CLAW_CHECK(rank >= 0 && rank < size, "rank {} of a {}-rank group", rank, size);
}

Work ShapeGroup::submit(Request r) {
  CLAW_CHECK(false, "group {} is a planning shape and cannot run {}", name(), static_cast<int>(r.kind));
  return Work();
}

}  // namespace claw::comm
