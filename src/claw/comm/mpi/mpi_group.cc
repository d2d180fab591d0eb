#include "claw/comm/mpi/mpi_group.h"

#include <exception>

#include <fmt/format.h>

#include "claw/comm/mpi/ring.h"
#include "claw/core/error.h"

namespace claw::comm::mpi {

namespace {

using detail::FlightRecorder;
using detail::OpState;

MPI_Datatype mpi_type(DType t, bool reducing) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u16: return MPI_UINT16_T;
    case DType::u8: return MPI_UINT8_T;
    case DType::bf16: case DType::f16:
      if (reducing) fail("MPI reductions of {} are not supported; reduce in f32", dtype_name(t));
      return MPI_UINT16_T;
    case DType::e4m3: case DType::e5m2:
      if (reducing) fail("MPI reductions of {} are not supported; reduce in f32", dtype_name(t));
      return MPI_UINT8_T;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_SUM;
}

int to_int(int64_t n, const char* what) {
  if (n < 0 || n > INT32_MAX) fail("{}: {} elements exceed MPI's int count; use smaller buckets", what, n);
  return static_cast<int>(n);
}

std::vector<int> to_ints(const std::vector<int64_t>& v, const char* what) {
  std::vector<int> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = to_int(v[i], what);
  return out;
}

std::vector<int> prefix(const std::vector<int>& counts) {
  std::vector<int> d(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

bool all_equal(const std::vector<int>& v) {
  for (int x : v)
    if (x != v[0]) return false;
  return true;
}

}  // namespace

MpiGroup::MpiGroup(std::string name, int rank, std::vector<int> world_ranks, Communicator comm, int world_rank,
                   std::chrono::milliseconds timeout, std::shared_ptr<const FaultInjector> faults, bool spans_hosts)
    : Group(std::move(name), rank, std::move(world_ranks), faults),
      comm_(std::move(comm)),
      spans_hosts_(spans_hosts),
      thread_(std::make_unique<CommThread>(world_rank, std::move(faults))),
      timeout_(timeout) {}

MpiGroup::~MpiGroup() {
  if (closed_) return;
  if (std::uncaught_exceptions() > 0) {
    abandon();
    return;
  }
  begin_shutdown(detail::Clock::now() + timeout_);
  finish_shutdown();
}

void MpiGroup::begin_shutdown(detail::Clock::time_point drain_deadline) {
  if (!closed_) thread_->request_stop(drain_deadline);
}

void MpiGroup::finish_shutdown() {
  if (closed_) return;
  thread_->join();
  comm_.reset();
  closed_ = true;
}

void MpiGroup::abandon() {
  if (closed_) return;
  thread_->detach();
  (void)thread_.release();  // the detached thread still uses it
  comm_.release();
  closed_ = true;
}

Work MpiGroup::submit(Request r) {
  CLAW_CHECK(!closed_, "{} on group {} after its World ended", to_string(r.kind), name());
  if (size() == 1) {
    r.after.wait();
    detail::run_self(r);
    return Work();
  }
  auto op = std::make_shared<OpState>();
  op->kind = r.kind;
  op->group = name();
  op->span = span();
  op->seq = ++seq_;
  op->bytes = r.bytes();
  op->world_timeout = r.timeout.count() == 0;
  op->timeout = op->world_timeout ? timeout_ : r.timeout;
  op->record = FlightRecorder::instance().add(*op);
  thread_->enqueue(op, [this, r = std::move(r), op] {
    try {
      r.after.wait_dependency();
      execute(r, op);
    } catch (const CommError& e) {
      throw CommError(fmt::format("{}: {}", op->describe(), e.what()));
    }
  });
  return Work(op);
}

void MpiGroup::execute(const Request& r, const std::shared_ptr<OpState>& op) {
  const bool reducing = r.kind == OpKind::all_reduce || r.kind == OpKind::reduce_scatter;
  const MPI_Datatype t = mpi_type(r.dtype, reducing);
  const char* what = to_string(r.kind);
  const MPI_Comm comm = comm_.get();
  if (runs_on_ring(r, size(), spans_hosts_)) {
    ring_execute(r, comm, rank(), size(), *op, scratch_);
    op->complete();
    return;
  }
  switch (r.kind) {
    case OpKind::all_reduce:
      CLAW_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, r.recv, to_int(r.count, what), t, mpi_op(r.reduce), comm));
      break;
    case OpKind::reduce_scatter: {
      const std::vector<int> counts = to_ints(r.counts, what);
      const void* send = r.send == r.recv ? MPI_IN_PLACE : r.send;
      if (all_equal(counts))
        CLAW_MPI_CHECK(MPI_Reduce_scatter_block(send, r.recv, counts[0], t, mpi_op(r.reduce), comm));
      else
        CLAW_MPI_CHECK(MPI_Reduce_scatter(send, r.recv, counts.data(), t, mpi_op(r.reduce), comm));
      break;
    }
    case OpKind::all_gather: {
      const std::vector<int> counts = to_ints(r.counts, what);
      const std::vector<int> displs = prefix(counts);
      const void* send = r.send == nullptr ? MPI_IN_PLACE : r.send;
      if (all_equal(counts))
        CLAW_MPI_CHECK(MPI_Allgather(send, counts[0], t, r.recv, counts[0], t, comm));
      else
        CLAW_MPI_CHECK(MPI_Allgatherv(send, counts[rank()], t, r.recv, counts.data(), displs.data(), t, comm));
      break;
    }
    case OpKind::all_to_all: {
      const std::vector<int> sc = to_ints(r.send_counts, what), rc = to_ints(r.counts, what);
      const std::vector<int> sd = prefix(sc), rd = prefix(rc);
      CLAW_MPI_CHECK(MPI_Alltoallv(r.send, sc.data(), sd.data(), t, r.recv, rc.data(), rd.data(), t, comm));
      break;
    }
    case OpKind::broadcast:
      CLAW_MPI_CHECK(MPI_Bcast(r.recv, to_int(r.count, what), t, r.peer, comm));
      break;
    case OpKind::barrier: CLAW_MPI_CHECK(MPI_Barrier(comm)); break;
    case OpKind::send: {
      MPI_Request req;
      CLAW_MPI_CHECK(MPI_Isend(r.send, to_int(r.count, what), t, r.peer, r.tag, comm, &req));
      thread_->track(op, req);
      return;
    }
    case OpKind::recv: {
      MPI_Request req;
      CLAW_MPI_CHECK(MPI_Irecv(r.recv, to_int(r.count, what), t, r.peer, r.tag, comm, &req));
      thread_->track(op, req);
      return;
    }
  }
  op->complete();
}

}  // namespace claw::comm::mpi
