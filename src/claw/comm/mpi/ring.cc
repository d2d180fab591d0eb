#include "claw/comm/mpi/ring.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "claw/comm/mpi/communicator.h"
#include "claw/core/error.h"

namespace claw::comm::mpi {

CollectiveAlgo collective_algo() {
  static const CollectiveAlgo algo = [] {
    const char* v = std::getenv("CLAW_COMM_ALGO");
    const std::string s = v ? v : "auto";
    if (s == "auto" || s.empty()) return CollectiveAlgo::automatic;
    if (s == "ring") return CollectiveAlgo::ring;
    if (s == "mpi") return CollectiveAlgo::mpi;
    fail("CLAW_COMM_ALGO={}: expected auto (the ring across hosts, MPI's collectives inside one), ring or mpi", s);
  }();
  return algo;
}

bool runs_on_ring(const Request& r, int size, bool spans_hosts) {
  if (size < 2) return false;
  if (r.kind != OpKind::all_reduce && r.kind != OpKind::reduce_scatter && r.kind != OpKind::all_gather) return false;
  switch (collective_algo()) {
    case CollectiveAlgo::mpi: return false;
    case CollectiveAlgo::ring: return true;
    case CollectiveAlgo::automatic: return spans_hosts && r.bytes() >= kRingMinBytes;
  }
  return false;
}

namespace {

using detail::OpState;

template <typename T>
void reduce_into(T* dst, const T* a, const T* b, int64_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(a[i] + b[i]);
      break;
    case ReduceOp::max:
      for (int64_t i = 0; i < n; ++i) dst[i] = std::max(a[i], b[i]);
      break;
    case ReduceOp::min:
      for (int64_t i = 0; i < n; ++i) dst[i] = std::min(a[i], b[i]);
      break;
  }
}

// dst = a (op) b over n elements of `t`; dst may be a.
void reduce_bytes(std::byte* dst, const std::byte* a, const std::byte* b, int64_t n, DType t, ReduceOp op) {
  switch (t) {
    case DType::f32: return reduce_into(reinterpret_cast<float*>(dst), reinterpret_cast<const float*>(a),
                                        reinterpret_cast<const float*>(b), n, op);
    case DType::f64: return reduce_into(reinterpret_cast<double*>(dst), reinterpret_cast<const double*>(a),
                                        reinterpret_cast<const double*>(b), n, op);
    case DType::i32: return reduce_into(reinterpret_cast<int32_t*>(dst), reinterpret_cast<const int32_t*>(a),
                                        reinterpret_cast<const int32_t*>(b), n, op);
    case DType::i64: return reduce_into(reinterpret_cast<int64_t*>(dst), reinterpret_cast<const int64_t*>(a),
                                        reinterpret_cast<const int64_t*>(b), n, op);
    case DType::u16: return reduce_into(reinterpret_cast<uint16_t*>(dst), reinterpret_cast<const uint16_t*>(a),
                                        reinterpret_cast<const uint16_t*>(b), n, op);
    case DType::u8: return reduce_into(reinterpret_cast<uint8_t*>(dst), reinterpret_cast<const uint8_t*>(a),
                                       reinterpret_cast<const uint8_t*>(b), n, op);
    default: CLAW_CHECK(false, "ring reduction of {}: reduce in f32", dtype_name(t));
  }
}

// Tags of the ring's messages: one per chunk, from the top of the tag range
// down, away from the small tags of the group's own send/recv.
int ring_tag_base() {
  void* attr = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &attr, &found);
  const int ub = found ? *static_cast<int*>(attr) : 32767;
  return ub;
}

// One ring operation's transfers, waited for as a communication thread that
// shares cores with compute should: test, yield a few times, then sleep
// (20 us doubling to 200 us) between tests while nothing completes.
class Ring {
 public:
  Ring(MPI_Comm comm, int rank, int size, const OpState& op, DType t)
      : comm_(comm), rank_(rank), n_(size), op_(op), es_(static_cast<int64_t>(dtype_size(t))), dtype_(t) {
    tag_base_ = ring_tag_base();
  }
  ~Ring() { abandon(); }

  int left() const { return (rank_ - 1 + n_) % n_; }
  int right() const { return (rank_ + 1) % n_; }
  int block(int k) const { return ((k % n_) + n_) % n_; }

  // Blocks of the buffer, in elements.
  void set_blocks(const std::vector<int64_t>& counts) {
    counts_ = counts;
    displs_.assign(n_, 0);
    for (int b = 1; b < n_; ++b) displs_[b] = displs_[b - 1] + counts_[b - 1];
    const int64_t most = *std::max_element(counts_.begin(), counts_.end());
    // At least kRingChunkBytes a message; at most 4096 chunks a block (tags).
    chunk_ = std::max<int64_t>({1, kRingChunkBytes / es_, (most + 4095) / 4096});
    chunks_ = std::max<int64_t>(1, (most + chunk_ - 1) / chunk_);
    CLAW_CHECK(tag_base_ - chunks_ > 1024, "ring: MPI's tag range ({}) is too small for {} chunks", tag_base_, chunks_);
  }
  // Elements of chunk c of block b, and its first element.
  int64_t len(int b, int64_t c) const { return std::clamp<int64_t>(counts_[b] - c * chunk_, 0, chunk_); }
  int64_t at(int b, int64_t c) const { return displs_[b] + c * chunk_; }
  int64_t max_block() const { return chunks_ * chunk_; }

  void isend(const std::byte* p, int64_t elems, int64_t c, MPI_Request* req) {
    CLAW_MPI_CHECK(MPI_Isend(p, static_cast<int>(elems * es_), MPI_BYTE, right(), tag(c), comm_, req));
  }
  void irecv(std::byte* p, int64_t elems, int64_t c, MPI_Request* req) {
    CLAW_MPI_CHECK(MPI_Irecv(p, static_cast<int>(elems * es_), MPI_BYTE, left(), tag(c), comm_, req));
  }

  // Reduce-scatter. `in`: the whole input; `acc`: where partial sums go
  // (== in when in place, the input then clobbered; nullptr out of place);
  // `out`: this rank's block of the sum. Out of place, partial sums alternate
  // between two staging blocks: the one a chunk is summed into at step k was
  // sent from at step k - 1, and that send is waited for first.
  void reduce_scatter(const std::byte* in, std::byte* acc, std::byte* out, ReduceOp op,
                      std::vector<std::byte>& scratch) {
    const bool in_place = acc != nullptr;
    const int64_t blk = max_block() * es_;
    scratch.resize(static_cast<size_t>(blk * (in_place ? 1 : 3)));
    std::byte* tmp = scratch.data();
    std::byte* partial[2] = {tmp + blk, tmp + 2 * blk};
    const int steps = n_ - 1;
    std::vector<int> step(chunks_, 0);
    recv_.assign(chunks_, MPI_REQUEST_NULL);
    send_.assign(static_cast<size_t>(steps) * chunks_, MPI_REQUEST_NULL);  // [k * chunks + c]: step k's
    for (int64_t c = 0; c < chunks_; ++c) {
      const int s = block(rank_ - 1), v = block(rank_ - 2);
      irecv(tmp + c * chunk_ * es_, len(v, c), c, &recv_[c]);
      isend(in + at(s, c) * es_, len(s, c), c, &send_[c]);
    }
    for (int64_t left_to_do = chunks_; left_to_do > 0;) {
      for (int i : wait_some(recv_)) {
        const int64_t c = i;
        const int k = step[c], v = block(rank_ - k - 2);
        const int64_t n = len(v, c);
        const std::byte* got = tmp + c * chunk_ * es_;
        std::byte* dst;
        if (in_place) {
          dst = acc + at(v, c) * es_;
        } else if (k == steps - 1) {
          dst = out + c * chunk_ * es_;
        } else {
          if (k >= 2) wait_one(&send_[(k - 1) * chunks_ + c]);
          dst = partial[k % 2] + c * chunk_ * es_;
        }
        reduce_bytes(dst, in + at(v, c) * es_, got, n, dtype_, op);
        if (k == steps - 1) {
          --left_to_do;
          continue;
        }
        step[c] = k + 1;
        irecv(tmp + c * chunk_ * es_, len(block(rank_ - k - 3), c), c, &recv_[c]);
        isend(dst, n, c, &send_[(k + 1) * chunks_ + c]);
      }
    }
    wait_all(send_);
    if (in_place && out != acc + at(rank_, 0) * es_) std::memmove(out, acc + at(rank_, 0) * es_, counts_[rank_] * es_);
  }

  // All-gather in place: this rank's block is at buf + its displacement.
  void all_gather(std::byte* buf) {
    const int steps = n_ - 1;
    std::vector<int> step(chunks_, 0);
    recv_.assign(chunks_, MPI_REQUEST_NULL);
    send_.assign(static_cast<size_t>(steps) * chunks_, MPI_REQUEST_NULL);
    for (int64_t c = 0; c < chunks_; ++c) {
      const int s = rank_, v = block(rank_ - 1);
      irecv(buf + at(v, c) * es_, len(v, c), c, &recv_[c]);
      isend(buf + at(s, c) * es_, len(s, c), c, &send_[c]);
    }
    for (int64_t left_to_do = chunks_; left_to_do > 0;) {
      for (int i : wait_some(recv_)) {
        const int64_t c = i;
        const int k = step[c], v = block(rank_ - k - 1);
        if (k == steps - 1) {
          --left_to_do;
          continue;
        }
        step[c] = k + 1;
        const int next = block(rank_ - k - 2);
        irecv(buf + at(next, c) * es_, len(next, c), c, &recv_[c]);
        isend(buf + at(v, c) * es_, len(v, c), c, &send_[(k + 1) * chunks_ + c]);
      }
    }
    wait_all(send_);
  }

 private:
  int tag(int64_t c) const { return tag_base_ - 1 - static_cast<int>(c); }

  // Indices of the requests of `reqs` that completed (at least one).
  std::vector<int> wait_some(std::vector<MPI_Request>& reqs) {
    std::vector<int> idx(reqs.size());
    for (int idle = 0;; ++idle) {
      int count = 0;
      CLAW_MPI_CHECK(MPI_Testsome(static_cast<int>(reqs.size()), reqs.data(), &count, idx.data(), MPI_STATUSES_IGNORE));
      CLAW_CHECK(count != MPI_UNDEFINED, "ring: waiting with no transfer in flight");
      if (count > 0) {
        idx.resize(count);
        return idx;
      }
      pause(idle);
    }
  }
  void wait_one(MPI_Request* req) {
    for (int idle = 0; *req != MPI_REQUEST_NULL; ++idle) {
      int flag = 0;
      CLAW_MPI_CHECK(MPI_Test(req, &flag, MPI_STATUS_IGNORE));
      if (!flag) pause(idle);
    }
  }
  void wait_all(std::vector<MPI_Request>& reqs) {
    for (int idle = 0;; ++idle) {
      int flag = 0;
      CLAW_MPI_CHECK(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &flag, MPI_STATUSES_IGNORE));
      if (flag) return;
      pause(idle);
    }
  }
  // Nothing completed on the idle-th test in a row: give the core away, and
  // give up once a waiter has (the operation's deadline passed).
  void pause(int idle) {
    if (op_.failed.load(std::memory_order_acquire))
      throw CommError("the ring's transfers were cancelled: the operation's deadline passed");
    if (idle < 8) {
      sched_yield();
      return;
    }
    const int us = std::min(200, 20 << std::min(idle - 8, 4));
    std::this_thread::sleep_for(std::chrono::microseconds(us));
  }
  // Transfers still in flight (an error or a timeout): receives cancelled,
  // every request freed, so nothing lands in a buffer its owner gave up.
  void abandon() {
    for (MPI_Request& r : recv_)
      if (r != MPI_REQUEST_NULL) {
        MPI_Cancel(&r);
        MPI_Request_free(&r);
      }
    for (MPI_Request& r : send_)
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  }

  MPI_Comm comm_;
  int rank_, n_;
  const OpState& op_;
  int64_t es_;
  DType dtype_;
  int tag_base_ = 0;
  std::vector<int64_t> counts_, displs_;
  int64_t chunk_ = 1, chunks_ = 1;
  std::vector<MPI_Request> recv_, send_;
};

// n near-equal blocks of `count` (the first count % n one larger).
std::vector<int64_t> split_evenly(int64_t count, int n) {
  std::vector<int64_t> c(n, count / n);
  for (int i = 0; i < count % n; ++i) ++c[i];
  return c;
}

}  // namespace

void ring_execute(const Request& r, MPI_Comm comm, int rank, int size, const OpState& op,
                  std::vector<std::byte>& scratch) {
  Ring ring(comm, rank, size, op, r.dtype);
  const int64_t es = static_cast<int64_t>(dtype_size(r.dtype));
  switch (r.kind) {
    case OpKind::all_reduce: {
      auto* buf = static_cast<std::byte*>(r.recv);
      ring.set_blocks(split_evenly(r.count, size));
      ring.reduce_scatter(buf, buf, buf + ring.at(rank, 0) * es, r.reduce, scratch);
      ring.all_gather(buf);
      return;
    }
    case OpKind::reduce_scatter: {
      ring.set_blocks(r.counts);
      auto* out = static_cast<std::byte*>(r.recv);
      if (r.send == r.recv) ring.reduce_scatter(out, out, out, r.reduce, scratch);  // MPI's in-place form
      else ring.reduce_scatter(static_cast<const std::byte*>(r.send), nullptr, out, r.reduce, scratch);
      return;
    }
    case OpKind::all_gather: {
      ring.set_blocks(r.counts);
      auto* buf = static_cast<std::byte*>(r.recv);
      if (r.send != nullptr) std::memcpy(buf + ring.at(rank, 0) * es, r.send, r.counts[rank] * es);
      ring.all_gather(buf);
      return;
    }
    default: CLAW_CHECK(false, "ring: {} is not a ring collective", to_string(r.kind));
  }
}

}  // namespace claw::comm::mpi
