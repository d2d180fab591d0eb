// The comm layer on 1..4 ranks (tests/e2e/parallel/CMakeLists.txt registers np 1-4 and
// a run without mpirun). Every rank runs the same tests in the same order, so
// collectives match; values are small integers, so every expected result is
// exact in f32/f64/i32/i64 whatever the reduction order.
//
// A test must not return early on one rank while others still issue
// collectives (that desynchronises every later test), so checks inside
// collectives use EXPECT, never ASSERT. Exceptions are not caught by gtest
// here: a TimeoutError (or any throw) reaches main, which prints it and
// aborts the job, as claw's own main does. Point-to-point tests are in
// test_comm_p2p.cc (the same binary).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <thread>
#include <type_traits>
#include <vector>

#include "claw/comm/world.h"
#include "comm_test.h"

using namespace claw;
using namespace claw::comm;
using namespace std::chrono_literals;

namespace {
World* g_world = nullptr;
}  // namespace

Group& world() { return *g_world->world_group(); }

namespace {

// Contribution of `rank` to element i: small integers, negative for some
// elements of signed types so that max and min differ from sum's pattern.
constexpr int K = 20;
template <typename T>
T value(int rank, int64_t i) {
  const int64_t k = i % K + 1;
  const int64_t s = (std::is_signed_v<T> && i % 3 == 1) ? -1 : 1;
  return static_cast<T>(s * (rank + 1) * k);
}
template <typename T>
T expected(int n, int64_t i, ReduceOp op) {
  const int64_t k = i % K + 1;
  const int64_t s = (std::is_signed_v<T> && i % 3 == 1) ? -1 : 1;
  switch (op) {
    case ReduceOp::sum: return static_cast<T>(s * k * n * (n + 1) / 2);
    case ReduceOp::max: return static_cast<T>(s > 0 ? k * n : -k);
    case ReduceOp::min: return static_cast<T>(s > 0 ? k : -k * n);
  }
  return T{};
}

const char* op_name(ReduceOp op) { return op == ReduceOp::sum ? "sum" : op == ReduceOp::max ? "max" : "min"; }

// Counts: empty, one, odd, not a multiple of any group size, and big enough
// (4-8 MB) that Open MPI switches to its segmented/ring algorithms.
const int64_t kCounts[] = {0, 1, 7, 1001, (1 << 20) + 3};

template <typename T>
void check_all_reduce(Group& g) {
  const int n = g.size();
  for (int64_t count : kCounts)
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
      std::vector<T> buf(count + 1);
      for (int64_t i = 0; i < count; ++i) buf[i] = value<T>(g.rank(), i);
      const T guard = static_cast<T>(123);
      buf[count] = guard;
      g.all_reduce(buf.data(), count, dtype_of<T>::value, op);
      EXPECT_EQ(first_mismatch(buf, 0, count, [&](int64_t i) { return expected<T>(n, i, op); }), -1)
          << dtype_name(dtype_of<T>::value) << " " << op_name(op) << " count " << count << " on " << g.name();
      EXPECT_EQ(buf[count], guard) << "all_reduce wrote past its count";
    }
}

template <typename T>
void check_reduce_scatter(Group& g, const std::vector<int64_t>& counts, bool in_place, ReduceOp op) {
  const int n = g.size(), r = g.rank();
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  int64_t displ = 0;
  for (int j = 0; j < r; ++j) displ += counts[j];
  std::vector<T> send(total);
  for (int64_t i = 0; i < total; ++i) send[i] = value<T>(r, i);
  std::vector<T> recv;
  if (in_place) {
    recv = send;
    g.reduce_scatter(recv.data(), recv.data(), counts, dtype_of<T>::value, op);
  } else {
    recv.assign(counts[r] + 1, static_cast<T>(77));
    g.reduce_scatter(send.data(), recv.data(), counts, dtype_of<T>::value, op);
    EXPECT_EQ(recv[counts[r]], static_cast<T>(77)) << "reduce_scatter wrote past this rank's block";
  }
  EXPECT_EQ(first_mismatch(recv, 0, counts[r], [&](int64_t i) { return expected<T>(n, displ + i, op); }), -1)
      << dtype_name(dtype_of<T>::value) << " " << op_name(op) << (in_place ? " in place" : "") << " block "
      << counts[r] << " on " << g.name();
}

// All-gather payload: identifies the source rank and the index exactly.
template <typename T>
T gather_value(int rank, int64_t i) {
  return static_cast<T>(rank * 1000 + i % 1000);
}

template <typename T>
void check_all_gather(Group& g, const std::vector<int64_t>& counts, bool in_place) {
  const int n = g.size(), r = g.rank();
  std::vector<int64_t> displs(n, 0);
  for (int j = 1; j < n; ++j) displs[j] = displs[j - 1] + counts[j - 1];
  const int64_t total = displs[n - 1] + counts[n - 1];
  std::vector<T> recv(total + 1, static_cast<T>(-1));
  recv[total] = static_cast<T>(55);
  std::vector<T> send(counts[r]);
  for (int64_t i = 0; i < counts[r]; ++i) send[i] = gather_value<T>(r, i);
  if (in_place) {
    std::copy(send.begin(), send.end(), recv.begin() + displs[r]);
    g.all_gather(nullptr, recv.data(), counts, dtype_of<T>::value);
  } else {
    g.all_gather(send.data(), recv.data(), counts, dtype_of<T>::value);
  }
  for (int j = 0; j < n; ++j)
    EXPECT_EQ(first_mismatch(recv, displs[j], displs[j] + counts[j],
                             [&](int64_t i) { return gather_value<T>(j, i - displs[j]); }),
              -1)
        << "block of rank " << j << (in_place ? " (in place)" : "") << " on " << g.name();
  EXPECT_EQ(recv[total], static_cast<T>(55)) << "all_gather wrote past the total";
}

// Uneven per-rank counts with a zero in the middle (rank 1 when there is one).
std::vector<int64_t> uneven_counts(int n, int64_t base) {
  std::vector<int64_t> c(n);
  for (int j = 0; j < n; ++j) c[j] = j == 1 ? 0 : base + 3 * j + 1;
  return c;
}

// all_to_all: how many elements rank `src` sends to rank `dst` (zeros included)
// and what they are.
int64_t a2a_count(int src, int dst, int64_t scale) { return ((src * 3 + dst * 5 + 1) % 4) * scale; }
int64_t a2a_value(int src, int dst, int64_t i) { return src * 1000000 + dst * 10000 + i % 10000; }

template <typename T>
void check_all_to_all(Group& g, int64_t scale) {
  const int n = g.size(), r = g.rank();
  std::vector<int64_t> sc(n), rc(n);
  for (int j = 0; j < n; ++j) {
    sc[j] = a2a_count(r, j, scale);
    rc[j] = a2a_count(j, r, scale);
  }
  std::vector<T> send, recv(std::accumulate(rc.begin(), rc.end(), int64_t{0}) + 1, static_cast<T>(-1));
  for (int j = 0; j < n; ++j)
    for (int64_t i = 0; i < sc[j]; ++i) send.push_back(static_cast<T>(a2a_value(r, j, i)));
  recv.back() = static_cast<T>(9);
  g.all_to_all(send.data(), sc, recv.data(), rc, dtype_of<T>::value);
  int64_t off = 0;
  for (int j = 0; j < n; ++j) {
    EXPECT_EQ(first_mismatch(recv, off, off + rc[j], [&](int64_t i) { return static_cast<T>(a2a_value(j, r, i - off)); }),
              -1)
        << "all_to_all block from rank " << j << " scale " << scale << " on " << g.name();
    off += rc[j];
  }
  EXPECT_EQ(recv.back(), static_cast<T>(9));
}

}  // namespace

// ---------------------------------------------------------------- world

TEST(World, Info) {
  const int n = g_world->size();
  EXPECT_GE(n, 1);
  EXPECT_GE(g_world->rank(), 0);
  EXPECT_LT(g_world->rank(), n);
  EXPECT_EQ(world().size(), n);
  EXPECT_EQ(world().rank(), g_world->rank());
  EXPECT_EQ(world().name(), "world");
  std::vector<int> all(n);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(world().world_ranks(), all);
  EXPECT_GE(g_world->local_size(), 1);
  EXPECT_LT(g_world->local_rank(), g_world->local_size());
  if (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK"))
    EXPECT_EQ(g_world->backend().rfind("mpi (", 0), 0u) << g_world->backend();
  else
    EXPECT_EQ(g_world->backend(), "single process");
  // The launcher's world size, when a script knows it (srun_launch.sh).
  if (const char* want = std::getenv("CLAW_TEST_EXPECT_WORLD_SIZE")) {
    EXPECT_EQ(n, std::atoi(want)) << "rank " << g_world->rank() << " sees a world of " << n;
  }
  // All ranks agree on the size (and so on the test sequence).
  EXPECT_EQ(world().all_reduce_value<int64_t>(n, ReduceOp::max), n);
  EXPECT_EQ(world().all_reduce_value<int64_t>(n, ReduceOp::min), n);
}

// ---------------------------------------------------------------- all_reduce

TEST(AllReduce, F32) { check_all_reduce<float>(world()); }
TEST(AllReduce, F64) { check_all_reduce<double>(world()); }
TEST(AllReduce, I32) { check_all_reduce<int32_t>(world()); }
TEST(AllReduce, I64) { check_all_reduce<int64_t>(world()); }
TEST(AllReduce, U16) { check_all_reduce<uint16_t>(world()); }
TEST(AllReduce, U8) { check_all_reduce<uint8_t>(world()); }

TEST(AllReduce, Value) {
  const int n = world().size(), r = world().rank();
  EXPECT_EQ(world().all_reduce_value<int64_t>(r), int64_t{n} * (n - 1) / 2);
  EXPECT_EQ(world().all_reduce_value<double>(r + 0.5, ReduceOp::max), n - 0.5);
  EXPECT_EQ(world().all_reduce_value<float>(r + 0.25f, ReduceOp::min), 0.25f);
  EXPECT_EQ(world().all_reduce_value<int32_t>(1), n);
}

// 16-bit floats are not reduced: every rank, one included, gets an Error
// when it submits (the same on all ranks, so the job stays in step).
TEST(AllReduce, LowPrecisionReductionIsAnError) {
  std::vector<uint16_t> buf(8, 0x3f80);
  for (DType dt : {DType::bf16, DType::f16}) {
    EXPECT_THROW(world().all_reduce(buf.data(), 8, dt), Error);
    EXPECT_THROW(world().reduce_scatter(buf.data(), buf.data(), 8 / world().size(), dt), Error);
  }
  // The communication thread carries on after the failed operation.
  EXPECT_EQ(world().all_reduce_value<int64_t>(1), world().size());
}

// ---------------------------------------------------------------- reduce_scatter

TEST(ReduceScatter, EqualBlocks) {
  const int n = world().size();
  for (int64_t c : {int64_t{1}, int64_t{5}, int64_t{(1 << 18) + 1}})
    for (bool in_place : {false, true}) {
      const std::vector<int64_t> counts(n, c);
      check_reduce_scatter<float>(world(), counts, in_place, ReduceOp::sum);
      check_reduce_scatter<double>(world(), counts, in_place, ReduceOp::max);
      check_reduce_scatter<int64_t>(world(), counts, in_place, ReduceOp::min);
      check_reduce_scatter<int32_t>(world(), counts, in_place, ReduceOp::sum);
    }
}

TEST(ReduceScatter, UnevenBlocks) {
  const int n = world().size();
  for (int64_t base : {int64_t{0}, int64_t{10}, int64_t{100000}})
    for (bool in_place : {false, true})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
        check_reduce_scatter<float>(world(), uneven_counts(n, base), in_place, op);
        check_reduce_scatter<int64_t>(world(), uneven_counts(n, base), in_place, op);
      }
}

TEST(ReduceScatter, EqualFormTakesOneCount) {
  const int n = world().size(), r = world().rank();
  const int64_t c = 33;
  std::vector<double> send(n * c), recv(c);
  for (int64_t i = 0; i < n * c; ++i) send[i] = value<double>(r, i);
  world().reduce_scatter(send.data(), recv.data(), c, DType::f64);
  EXPECT_EQ(first_mismatch(recv, 0, c, [&](int64_t i) { return expected<double>(n, r * c + i, ReduceOp::sum); }), -1);
  // In place with one count.
  world().reduce_scatter(send.data(), send.data(), c, DType::f64);
  EXPECT_EQ(first_mismatch(send, 0, c, [&](int64_t i) { return expected<double>(n, r * c + i, ReduceOp::sum); }), -1);
}

// ---------------------------------------------------------------- all_gather

TEST(AllGather, EqualBlocks) {
  const int n = world().size();
  for (int64_t c : {int64_t{1}, int64_t{6}, int64_t{(1 << 18) + 5}})
    for (bool in_place : {false, true}) {
      check_all_gather<float>(world(), std::vector<int64_t>(n, c), in_place);
      check_all_gather<int64_t>(world(), std::vector<int64_t>(n, c), in_place);
      check_all_gather<double>(world(), std::vector<int64_t>(n, c), in_place);
      check_all_gather<uint8_t>(world(), std::vector<int64_t>(n, c), in_place);
    }
}

TEST(AllGather, UnevenBlocks) {
  const int n = world().size();
  for (int64_t base : {int64_t{0}, int64_t{3}, int64_t{70001}})
    for (bool in_place : {false, true}) {
      check_all_gather<float>(world(), uneven_counts(n, base), in_place);
      check_all_gather<int32_t>(world(), uneven_counts(n, base), in_place);
      check_all_gather<uint16_t>(world(), uneven_counts(n, base), in_place);
    }
}

TEST(AllGather, EqualFormTakesOneCount) {
  const int n = world().size(), r = world().rank();
  const int64_t c = 17;
  std::vector<int64_t> send(c), recv(n * c, -1);
  for (int64_t i = 0; i < c; ++i) send[i] = gather_value<int64_t>(r, i);
  world().all_gather(send.data(), recv.data(), c, DType::i64);
  EXPECT_EQ(first_mismatch(recv, 0, n * c, [&](int64_t i) { return gather_value<int64_t>(i / c, i % c); }), -1);
  std::fill(recv.begin(), recv.end(), -1);
  std::copy(send.begin(), send.end(), recv.begin() + r * c);
  world().all_gather(nullptr, recv.data(), c, DType::i64);
  EXPECT_EQ(first_mismatch(recv, 0, n * c, [&](int64_t i) { return gather_value<int64_t>(i / c, i % c); }), -1);
}

// Non-reducing transfers carry 16- and 8-bit floats as raw bits.
TEST(AllGather, LowPrecisionBitsArePreserved) {
  const int n = world().size(), r = world().rank();
  const int64_t c = 9;
  for (DType dt : {DType::bf16, DType::f16}) {
    std::vector<uint16_t> send(c), recv(n * c);
    for (int64_t i = 0; i < c; ++i) send[i] = static_cast<uint16_t>(0xff00 + r * 16 + i);  // includes NaN patterns
    world().all_gather(send.data(), recv.data(), c, dt);
    EXPECT_EQ(first_mismatch(recv, 0, n * c, [&](int64_t i) { return static_cast<uint16_t>(0xff00 + (i / c) * 16 + i % c); }),
              -1)
        << dtype_name(dt);
  }
  for (DType dt : {DType::e4m3, DType::e5m2}) {
    std::vector<uint8_t> send(c), recv(n * c);
    for (int64_t i = 0; i < c; ++i) send[i] = static_cast<uint8_t>(0x7f + r * 16 + i);
    world().all_gather(send.data(), recv.data(), c, dt);
    EXPECT_EQ(first_mismatch(recv, 0, n * c, [&](int64_t i) { return static_cast<uint8_t>(0x7f + (i / c) * 16 + i % c); }),
              -1)
        << dtype_name(dt);
  }
}

// ---------------------------------------------------------------- all_to_all

TEST(AllToAll, UnevenCountsWithZeros) {
  for (int64_t scale : {int64_t{1}, int64_t{7}, int64_t{50000}}) {
    check_all_to_all<int64_t>(world(), scale);
    check_all_to_all<float>(world(), scale);
  }
}

TEST(AllToAll, EqualCounts) {
  const int n = world().size(), r = world().rank();
  const int64_t c = 1000;
  std::vector<int64_t> sc(n, c);
  std::vector<double> send(n * c), recv(n * c, -1);
  for (int64_t i = 0; i < n * c; ++i) send[i] = static_cast<double>(a2a_value(r, i / c, i % c));
  world().all_to_all(send.data(), sc, recv.data(), sc, DType::f64);
  EXPECT_EQ(first_mismatch(recv, 0, n * c, [&](int64_t i) { return static_cast<double>(a2a_value(i / c, r, i % c)); }),
            -1);
}

// ---------------------------------------------------------------- broadcast

TEST(Broadcast, FromEveryRoot) {
  const int n = world().size(), r = world().rank();
  for (int64_t count : {int64_t{1}, int64_t{999}, int64_t{(1 << 20) + 1}})
    for (int root = 0; root < n; ++root) {
      std::vector<int64_t> buf(count + 1, -1);
      if (r == root)
        for (int64_t i = 0; i < count; ++i) buf[i] = gather_value<int64_t>(root, i) + i;
      buf[count] = 4242;
      world().broadcast(buf.data(), count, DType::i64, root);
      EXPECT_EQ(first_mismatch(buf, 0, count, [&](int64_t i) { return gather_value<int64_t>(root, i) + i; }), -1)
          << "root " << root << " count " << count;
      EXPECT_EQ(buf[count], 4242);
    }
  std::vector<float> f(5, r == 0 ? 2.5f : 0.f);
  world().broadcast(f.data(), 5, DType::f32, 0);
  EXPECT_EQ(f, std::vector<float>(5, 2.5f));
}

// ---------------------------------------------------------------- barrier

TEST(Barrier, BlockingAndPolled) {
  for (int i = 0; i < 5; ++i) world().barrier();
  Work w = world().barrier_async();
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!w.test() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  EXPECT_TRUE(w.test());
  w.wait();  // waiting again on a completed operation is fine
}

// A wait shorter than the time a peer needs throws TimeoutError naming the
// operation; the operation itself stays in flight and a later wait succeeds.
TEST(Barrier, ShortWaitTimesOutThenCompletes) {
  if (world().size() == 1) GTEST_SKIP() << "needs a peer that arrives late";
  world().barrier();
  if (world().rank() == 0) {
    Work w = world().barrier_async();
    EXPECT_FALSE(w.test());
    try {
      w.wait(50ms);
      ADD_FAILURE() << "wait(50 ms) returned although rank 1 joins the barrier 1 s later";
    } catch (const TimeoutError& e) {
      EXPECT_NE(std::string(e.what()).find("did not complete within"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("barrier"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("world"), std::string::npos) << e.what();
    }
    // The caller's shorter wait is not the operation's deadline: not a failure of the operation.
    EXPECT_EQ(w.exception(), nullptr);
    w.wait();
    EXPECT_TRUE(w.test());
  } else {
    std::this_thread::sleep_for(1s);
    world().barrier();
  }
}

// ---------------------------------------------------------------- async

// Different operations issued back to back, then waited in reverse order.
TEST(Async, BackToBackWaitedInReverse) {
  const int n = world().size(), r = world().rank();
  constexpr int kReduces = 12;
  const int64_t c = 20011;
  std::vector<std::vector<float>> bufs(kReduces, std::vector<float>(c));
  std::vector<Work> works;
  for (int k = 0; k < kReduces; ++k) {
    for (int64_t i = 0; i < c; ++i) bufs[k][i] = static_cast<float>((r + 1) * (k + 1) + i % 7);
    works.push_back(world().all_reduce_async(bufs[k].data(), c, DType::f32));
  }
  const int64_t block = 1001;
  std::vector<int64_t> rs(n * block), ag_send(block), ag(n * block, -1), bc(100, r == n - 1 ? 31 : 0);
  for (int64_t i = 0; i < n * block; ++i) rs[i] = value<int64_t>(r, i);
  for (int64_t i = 0; i < block; ++i) ag_send[i] = gather_value<int64_t>(r, i);
  works.push_back(world().reduce_scatter_async(rs.data(), rs.data(), block, DType::i64, ReduceOp::max));
  works.push_back(world().all_gather_async(ag_send.data(), ag.data(), block, DType::i64));
  works.push_back(world().broadcast_async(bc.data(), 100, DType::i64, n - 1));
  works.push_back(world().barrier_async());
  for (auto it = works.rbegin(); it != works.rend(); ++it) it->wait();
  for (int k = 0; k < kReduces; ++k)
    EXPECT_EQ(first_mismatch(bufs[k], 0, c,
                             [&](int64_t i) { return static_cast<float>((k + 1) * n * (n + 1) / 2 + n * (i % 7)); }),
              -1)
        << "all_reduce " << k;
  EXPECT_EQ(first_mismatch(rs, 0, block, [&](int64_t i) { return expected<int64_t>(n, r * block + i, ReduceOp::max); }),
            -1);
  EXPECT_EQ(first_mismatch(ag, 0, n * block, [&](int64_t i) { return gather_value<int64_t>(i / block, i % block); }), -1);
  EXPECT_EQ(bc, std::vector<int64_t>(100, 31));
}

// Polling with test() drives nothing (the communication thread does): it
// turns true by itself.
TEST(Async, TestTurnsTrue) {
  std::vector<double> buf(1 << 16, 1.0);
  Work w = world().all_reduce_async(buf.data(), 1 << 16, DType::f64);
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!w.test() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(100us);
  EXPECT_TRUE(w.test());
  EXPECT_EQ(buf[12345], static_cast<double>(world().size()));
  EXPECT_FALSE(w.describe().empty());
}

TEST(Async, DefaultWorkIsComplete) {
  Work w;
  EXPECT_TRUE(w.test());
  EXPECT_NO_THROW(w.wait());
  EXPECT_NO_THROW(w.wait(0ms));
  EXPECT_EQ(w.describe(), "completed no-op");
  const Work copy = w;
  EXPECT_TRUE(copy.test());
}

// ---------------------------------------------------------------- groups

// Two groups (even and odd world ranks) with operations interleaved with the
// world's, async, waited in reverse.
TEST(Groups, SplitEvenOdd) {
  const int n = g_world->size(), r = g_world->rank();
  std::vector<std::vector<int>> lists(std::min(n, 2));
  for (int i = 0; i < n; ++i) lists[i % 2].push_back(i);
  auto g = g_world->split("parity", lists);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->name(), "parity");
  EXPECT_EQ(g->world_ranks(), lists[r % 2]);
  EXPECT_EQ(g->size(), static_cast<int>(lists[r % 2].size()));
  EXPECT_EQ(g->rank(), r / 2);
  check_all_reduce<int64_t>(*g);
  check_all_to_all<int64_t>(*g, 3);
  check_all_gather<float>(*g, uneven_counts(g->size(), 5), false);

  int64_t in_group = r, in_world = r;
  Work a = g->all_reduce_async(&in_group, 1, DType::i64);
  Work b = world().all_reduce_async(&in_world, 1, DType::i64);
  int64_t in_group2 = 1;
  Work c = g->all_reduce_async(&in_group2, 1, DType::i64);
  c.wait();
  b.wait();
  a.wait();
  int64_t want = 0;
  for (int x : lists[r % 2]) want += x;
  EXPECT_EQ(in_group, want);
  EXPECT_EQ(in_world, int64_t{n} * (n - 1) / 2);
  EXPECT_EQ(in_group2, g->size());
}

// Members listed in reverse: group rank i is world rank n-1-i, and
// collectives follow the group's order.
TEST(Groups, SplitReversedOrder) {
  const int n = g_world->size(), r = g_world->rank();
  std::vector<int> rev(n);
  for (int i = 0; i < n; ++i) rev[i] = n - 1 - i;
  auto g = g_world->split("reversed", {rev});
  EXPECT_EQ(g->rank(), n - 1 - r);
  EXPECT_EQ(g->size(), n);
  EXPECT_EQ(g->world_ranks(), rev);
  int64_t me = r;
  std::vector<int64_t> all(n, -1);
  g->all_gather(&me, all.data(), 1, DType::i64);
  EXPECT_EQ(all, std::vector<int64_t>(rev.begin(), rev.end()));
  std::vector<int64_t> b(3, r);
  g->broadcast(b.data(), 3, DType::i64, 0);  // group root 0 = world rank n-1
  EXPECT_EQ(b, std::vector<int64_t>(3, n - 1));
  if (n > 1) {
    // p2p peers are group ranks too: group rank 0 (world n-1) sends to group rank 1 (world n-2).
    int64_t v = -1;
    if (g->rank() == 0) g->send(&me, 1, DType::i64, 1);
    if (g->rank() == 1) {
      g->recv(&v, 1, DType::i64, 0);
      EXPECT_EQ(v, n - 1);
    }
  }
  g->barrier();
}

// Pairs (0,1), (2,3), ... with a leftover singleton when the size is odd.
TEST(Groups, SplitPairs) {
  const int n = g_world->size(), r = g_world->rank();
  std::vector<std::vector<int>> lists;
  for (int i = 0; i < n; i += 2) lists.push_back(i + 1 < n ? std::vector<int>{i, i + 1} : std::vector<int>{i});
  auto g = g_world->split("pairs", lists);
  EXPECT_EQ(g->size(), static_cast<int>(lists[r / 2].size()));
  check_all_reduce<float>(*g);
  check_reduce_scatter<double>(*g, uneven_counts(g->size(), 4), true, ReduceOp::sum);
  check_all_gather<int64_t>(*g, uneven_counts(g->size(), 4), true);
  // Several groups created in a row are independent.
  auto again = g_world->split("pairs2", lists);
  EXPECT_EQ(again->all_reduce_value<int64_t>(1), g->size());
}

// A chain across groups (OpOptions::after), as the hierarchical gradient
// reduction issues it: a reduce-scatter on the world, then an all-reduce of
// each rank's block over pairs, issued together and waited only at the end.
// The all-reduce must read the block the reduce-scatter wrote.
TEST(Groups, ChainedOperationStartsAfterItsDependency) {
  const int n = g_world->size(), r = g_world->rank();
  std::vector<std::vector<int>> lists;
  for (int i = 0; i < n; i += 2) lists.push_back(i + 1 < n ? std::vector<int>{i, i + 1} : std::vector<int>{i});
  auto pairs = g_world->split("chain_pairs", lists);
  const int64_t block = int64_t{1} << 16;
  std::vector<float> in(static_cast<size_t>(block * n)), out(static_cast<size_t>(block), -1.0f);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(r + 1 + static_cast<int>(i % 7));
  for (int round = 0; round < 3; ++round) {
    Work rs = world().reduce_scatter_async(in.data(), out.data(), block, DType::f32);
    Work ar = pairs->all_reduce_async(out.data(), block, DType::f32, ReduceOp::sum, {.after = rs});
    ar.wait();
    EXPECT_TRUE(rs.test());
    for (int64_t j = 0; j < block; j += 997) {
      double want = 0;
      for (int q : lists[r / 2]) want += n * (n + 1) / 2.0 + n * ((q * block + j) % 7);
      ASSERT_EQ(out[j], want) << "round " << round << " element " << j;
    }
  }
}

// Ranks 0 and 1 together, every other rank alone: the lists of a group
// such as dp or pp of a two-rank slice.
std::vector<std::vector<int>> first_pair_lists(int n) {
  std::vector<std::vector<int>> lists{{0, 1}};
  for (int i = 2; i < n; ++i) lists.push_back({i});
  return lists;
}

// Groups progress independently. Ranks 0 and 1 share a "dp" and a "pp"
// group. Rank 0 starts an all-reduce on dp, then a send and an all-reduce on
// pp; rank 1 serves pp first and joins the dp all-reduce only when rank 0
// says so over pp, after checking that its pp operations completed while
// the dp one is still pending. With one queue for every group the pp send
// would wait behind the dp all-reduce, which waits for rank 1, which waits
// for the send: the bounded waits below would time out and end the job.
TEST(Groups, PendingCollectiveDoesNotDelayAnotherGroup) {
  const int n = g_world->size(), r = g_world->rank();
  if (n == 1) GTEST_SKIP() << "needs two ranks";
  auto dp = g_world->split("dp", first_pair_lists(n));
  auto pp = g_world->split("pp", first_pair_lists(n));
  const OpOptions bounded{.timeout = 20s};
  int64_t grad = r + 1;
  if (r == 0) {
    Work reduce = dp->all_reduce_async(&grad, 1, DType::i64);
    int64_t activation = 42, loss = 5;
    Work send = pp->send_async(&activation, 1, DType::i64, 1, 7, bounded);
    Work loss_sum = pp->all_reduce_async(&loss, 1, DType::i64, ReduceOp::sum, bounded);
    send.wait();
    loss_sum.wait();
    EXPECT_EQ(loss, 5 + 6);
    // Rank 1 cannot have joined: it waits for the message below.
    EXPECT_FALSE(reduce.test()) << "the dp all-reduce completed before rank 1 joined it";
    int64_t go = 1;
    pp->send(&go, 1, DType::i64, 1, 8, bounded);
    reduce.wait();
    EXPECT_EQ(grad, 1 + 2);
  } else if (r == 1) {
    int64_t activation = 0, loss = 6, go = 0;
    pp->recv(&activation, 1, DType::i64, 0, 7, bounded);
    EXPECT_EQ(activation, 42);
    pp->all_reduce(&loss, 1, DType::i64, ReduceOp::sum, bounded);
    EXPECT_EQ(loss, 5 + 6);
    pp->recv(&go, 1, DType::i64, 0, 8, bounded);
    dp->all_reduce(&grad, 1, DType::i64);
    EXPECT_EQ(grad, 1 + 2);
  }
  world().barrier();
}

// A per-operation timeout: a receive that no rank sends to yet fails after
// its own 200 ms (the world's deadline is 60 s), with a TimeoutError naming
// the operation and its group and carrying the retryable exit code; the
// Work reports that failure from then on. Rank 1 then sends the message, so
// that the receive does not stay posted.
TEST(Timeouts, PerOperationTimeoutNamesOperationAndGroup) {
  const int n = g_world->size(), r = g_world->rank();
  if (n == 1) GTEST_SKIP() << "needs two ranks";
  // Declared before the group: the receive completes after the timeout, and
  // the group's destructor waits for it.
  int64_t late = -1;
  auto pp = g_world->split("pp", first_pair_lists(n));
  if (r == 0) {
    Work w = pp->recv_async(&late, 1, DType::i64, 1, 9, {.timeout = 200ms});
    try {
      w.wait();
      ADD_FAILURE() << "a receive nobody sent to completed";
    } catch (const TimeoutError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("recv #1 on group pp"), std::string::npos) << m;
      EXPECT_NE(m.find("did not complete within 0.2 s (the 200 ms timeout of this operation)"), std::string::npos)
          << m;
      EXPECT_EQ(e.exit_code(), ExitCode::comm);
    }
    EXPECT_NE(w.exception(), nullptr);
    EXPECT_THROW(w.test(), TimeoutError);
    EXPECT_THROW(w.wait(), TimeoutError);
  }
  world().barrier();
  if (r == 1) {
    const int64_t v = 11;
    pp->send(&v, 1, DType::i64, 0, 9);
  }
  world().barrier();
}

// Size-1 groups: from split (every rank alone) and the free-standing
// SelfGroup. Every operation completes at once; out-of-place forms copy.
void check_size_one(Group& g) {
  EXPECT_EQ(g.size(), 1);
  EXPECT_EQ(g.rank(), 0);
  check_all_reduce<float>(g);
  check_all_reduce<int64_t>(g);
  for (bool in_place : {false, true}) {
    check_reduce_scatter<float>(g, {1234}, in_place, ReduceOp::sum);
    check_reduce_scatter<int64_t>(g, {0}, in_place, ReduceOp::max);
    check_all_gather<double>(g, {77}, in_place);
  }
  check_all_to_all<int64_t>(g, 5);
  std::vector<float> buf(10, 3.f);
  EXPECT_TRUE(g.all_reduce_async(buf.data(), 10, DType::f32).test());
  EXPECT_TRUE(g.broadcast_async(buf.data(), 10, DType::f32, 0).test());
  EXPECT_TRUE(g.barrier_async().test());
  EXPECT_EQ(buf, std::vector<float>(10, 3.f));
  EXPECT_EQ(g.all_reduce_value<int64_t>(5), 5);
  // bf16 reductions are refused on one rank too, as on many.
  std::vector<uint16_t> h(4, 1);
  EXPECT_THROW(g.all_reduce(h.data(), 4, DType::bf16), Error);
  // No peer to talk to.
  EXPECT_THROW(g.send(buf.data(), 10, DType::f32, 0), Error);
  EXPECT_THROW(g.recv(buf.data(), 10, DType::f32, 0), Error);
  EXPECT_THROW(g.send(buf.data(), 10, DType::f32, 1), Error);
  // all_to_all on one rank must send what it receives.
  std::vector<int64_t> one{3}, two{4};
  EXPECT_THROW(g.all_to_all(buf.data(), one, buf.data(), two, DType::f32), Error);
}

TEST(Groups, SplitIntoSingletons) {
  const int n = g_world->size(), r = g_world->rank();
  std::vector<std::vector<int>> lists(n);
  for (int i = 0; i < n; ++i) lists[i] = {i};
  auto g = g_world->split("alone", lists);
  EXPECT_EQ(g->world_ranks(), std::vector<int>{r});
  check_size_one(*g);
  world().barrier();
}

TEST(Groups, SelfGroup) {
  SelfGroup g("self", g_world->rank());
  EXPECT_EQ(g.name(), "self");
  EXPECT_EQ(g.world_ranks(), std::vector<int>{g_world->rank()});
  check_size_one(g);
}

// Bad splits are refused on every rank before any communication.
TEST(Groups, SplitValidation) {
  const int n = g_world->size();
  std::vector<int> all(n);
  std::iota(all.begin(), all.end(), 0);
  std::vector<int> twice = all;
  twice.push_back(0);
  EXPECT_THROW(g_world->split("twice", {twice}), Error);
  EXPECT_THROW(g_world->split("outside", {all, {n}}), Error);
  // Rank 0 left out: every rank must refuse (not only rank 0, which would
  // leave the others in MPI_Comm_split).
  if (n > 1) {
    EXPECT_THROW(g_world->split("missing", {std::vector<int>(all.begin() + 1, all.end())}), Error);
  }
  // The world still works afterwards.
  EXPECT_EQ(world().all_reduce_value<int64_t>(1), n);
}

// ---------------------------------------------------------------- argument checks

// Wrong arguments throw at issue, on the issuing rank, before anything is queued
// (all ranks here make the same mistake, so the job stays in step).
TEST(Arguments, RejectedAtIssue) {
  const int n = world().size(), r = world().rank();
  std::vector<float> buf(64);
  std::vector<int64_t> wrong(n + 1, 1);
  EXPECT_THROW(world().reduce_scatter(buf.data(), buf.data(), wrong, DType::f32), Error);
  EXPECT_THROW(world().all_gather(buf.data(), buf.data(), wrong, DType::f32), Error);
  std::vector<int64_t> right(n, 1);
  EXPECT_THROW(world().all_to_all(buf.data(), wrong, buf.data(), right, DType::f32), Error);
  EXPECT_THROW(world().all_to_all(buf.data(), right, buf.data(), wrong, DType::f32), Error);
  EXPECT_THROW(world().all_reduce(buf.data(), -1, DType::f32), Error);
  EXPECT_THROW(world().broadcast(buf.data(), 4, DType::f32, n), Error);
  EXPECT_THROW(world().broadcast(buf.data(), 4, DType::f32, -1), Error);
  EXPECT_THROW(world().send(buf.data(), 4, DType::f32, r), Error);
  EXPECT_THROW(world().recv(buf.data(), 4, DType::f32, n), Error);
  // Nothing was queued: the next operation matches on every rank.
  EXPECT_EQ(world().all_reduce_value<int64_t>(2), 2 * n);
}

// ---------------------------------------------------------------- flight record

TEST(FlightRecord, ListsRecentOperations) {
  if (world().size() == 1) GTEST_SKIP() << "a world of one rank records nothing";
  int64_t v = 1;
  world().all_reduce(&v, 1, DType::i64);
  world().barrier();
  const std::string rec = flight_record();
  EXPECT_NE(rec.find("flight record: last"), std::string::npos) << rec;
  EXPECT_NE(rec.find("barrier"), std::string::npos) << rec;
  EXPECT_NE(rec.find("all_reduce"), std::string::npos) << rec;
  EXPECT_NE(rec.find("group world"), std::string::npos) << rec;
  EXPECT_NE(rec.find("done in"), std::string::npos) << rec;
  EXPECT_EQ(rec.find("RUNNING"), std::string::npos) << rec;
  EXPECT_EQ(rec.find("QUEUED"), std::string::npos) << rec;
}

// ---------------------------------------------------------------- main

namespace {

// Non-zero ranks print only their failures, tagged with the rank.
class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
                 r.message());
  }
  void OnTestEnd(const testing::TestInfo& t) override {
    if (t.result()->Failed())
      std::fprintf(stderr, "[rank %d] [  FAILED  ] %s.%s\n", rank_, t.test_suite_name(), t.name());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  // A throw (TimeoutError above all) must end the job, not desynchronise the
  // remaining tests on this rank.
  GTEST_FLAG_SET(catch_exceptions, false);
  std::unique_ptr<World> w;
  try {
    w = World::create(WorldOptions{.timeout = 60s});
    g_world = w.get();
    if (w->rank() != 0) {
      auto& listeners = testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new RankFailurePrinter(w->rank()));
    } else {
      std::printf("test_comm: %d rank(s), %s\n", w->size(), w->backend().c_str());
    }
    const int local = RUN_ALL_TESTS();
    // Every rank exits with the same code: failed anywhere means failed.
    const int64_t failed = w->world_group()->all_reduce_value<int64_t>(local != 0 ? 1 : 0, ReduceOp::max);
    if (w->rank() == 0 && failed && !local) std::printf("test_comm: another rank failed (see [rank N] lines)\n");
    return failed ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] test_comm: %s\n", g_world ? g_world->rank() : -1, e.what());
    std::fflush(stderr);
    abort_job(2);
    return 2;
  }
}
