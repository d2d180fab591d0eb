// The comm layer's point-to-point transfers on 1..4 ranks: part of
// test_comm (tests/e2e/parallel/CMakeLists.txt), under the rules of test_comm.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <string>
#include <vector>

#include "claw/core/error.h"
#include "comm_test.h"

using namespace claw;
using namespace claw::comm;

// ---------------------------------------------------------------- point-to-point

// Every rank sends to both neighbours and receives from both, all posted
// before any wait, in an order that differs between even and odd ranks; with
// blocking transfers this ring would deadlock.
TEST(SendRecv, RingBothDirectionsPostedBeforeWaiting) {
  const int n = world().size(), r = world().rank();
  if (n == 1) GTEST_SKIP() << "no peer";
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  for (int64_t count : {int64_t{1}, int64_t{1000}, int64_t{(1 << 20) + 7}}) {  // eager and rendezvous protocols
    std::vector<float> to_right(count), to_left(count), from_left(count, -1), from_right(count, -1);
    for (int64_t i = 0; i < count; ++i) {
      to_right[i] = static_cast<float>(r * 100000 + i % 100000);
      to_left[i] = static_cast<float>(-(r * 100000 + i % 100000));
    }
    std::vector<Work> works;
    // Tag 1 travels rightwards, tag 2 leftwards (with two ranks left == right).
    if (r % 2 == 0) {
      works.push_back(world().send_async(to_right.data(), count, DType::f32, right, 1));
      works.push_back(world().send_async(to_left.data(), count, DType::f32, left, 2));
      works.push_back(world().recv_async(from_left.data(), count, DType::f32, left, 1));
      works.push_back(world().recv_async(from_right.data(), count, DType::f32, right, 2));
    } else {
      works.push_back(world().recv_async(from_right.data(), count, DType::f32, right, 2));
      works.push_back(world().recv_async(from_left.data(), count, DType::f32, left, 1));
      works.push_back(world().send_async(to_left.data(), count, DType::f32, left, 2));
      works.push_back(world().send_async(to_right.data(), count, DType::f32, right, 1));
    }
    for (auto it = works.rbegin(); it != works.rend(); ++it) it->wait();
    for (const Work& w : works) EXPECT_TRUE(w.test());
    EXPECT_EQ(first_mismatch(from_left, 0, count, [&](int64_t i) { return static_cast<float>(left * 100000 + i % 100000); }),
              -1)
        << "count " << count;
    EXPECT_EQ(
        first_mismatch(from_right, 0, count, [&](int64_t i) { return static_cast<float>(-(right * 100000 + i % 100000)); }),
        -1)
        << "count " << count;
  }
}

// Blocking ping-pong between ranks 0 and 1; the others wait at the barrier.
TEST(SendRecv, BlockingPingPong) {
  const int n = world().size(), r = world().rank();
  if (n == 1) GTEST_SKIP() << "no peer";
  for (int64_t i = 0; i < 20; ++i) {
    int64_t v = -1;
    if (r == 0) {
      v = 10 * i;
      world().send(&v, 1, DType::i64, 1, 7);
      world().recv(&v, 1, DType::i64, 1, 7);
      EXPECT_EQ(v, 10 * i + 1);
    } else if (r == 1) {
      world().recv(&v, 1, DType::i64, 0, 7);
      EXPECT_EQ(v, 10 * i);
      v += 1;
      world().send(&v, 1, DType::i64, 0, 7);
    }
  }
  world().barrier();
}

// A receive posted before a collective completes after it (the transfer is
// polled between operations), and the collective is not held up by it.
TEST(SendRecv, ReceiveInFlightAcrossCollectives) {
  const int n = world().size(), r = world().rank();
  if (n == 1) GTEST_SKIP() << "no peer";
  std::vector<int32_t> msg(4096, -1);
  Work rx;
  if (r == 0) rx = world().recv_async(msg.data(), 4096, DType::i32, n - 1, 3);
  EXPECT_EQ(world().all_reduce_value<int64_t>(1), n);
  EXPECT_EQ(world().all_reduce_value<int64_t>(2), 2 * n);
  if (r == n - 1) {
    std::iota(msg.begin(), msg.end(), 0);
    world().send(msg.data(), 4096, DType::i32, 0, 3);
  }
  if (r == 0) {
    rx.wait();
    std::vector<int32_t> want(4096);
    std::iota(want.begin(), want.end(), 0);
    EXPECT_EQ(msg, want);
  }
  world().barrier();
}

// An abandoned receive (its peer given up, as claw rl does with a lost
// rollout worker) fails at once with the reason and is cancelled inside
// MPI: the message sent afterwards goes to the next receive posted, not into
// the abandoned buffer, and a timed-out receive is cancelled the same way.
TEST(SendRecv, AbandonedReceiveIsCancelled) {
  const int n = world().size(), r = world().rank();
  if (n == 1) GTEST_SKIP() << "no peer";
  int64_t gone = -1, late = -1, next = -1;
  if (r == 0) {
    Work a = world().recv_async(&gone, 1, DType::i64, 1, 11);
    a.abandon("the peer is lost");
    EXPECT_THROW(
        {
          try {
            a.wait();
          } catch (const CommError& e) {
            EXPECT_NE(std::string(e.what()).find("abandoned: the peer is lost"), std::string::npos) << e.what();
            throw;
          }
        },
        CommError);
    EXPECT_THROW(world().recv(&late, 1, DType::i64, 1, 11, {.timeout = std::chrono::milliseconds(50)}), TimeoutError);
  }
  world().barrier();  // both receives are cancelled before the message is sent
  if (r == 1) {
    const int64_t v = 42;
    world().send(&v, 1, DType::i64, 0, 11);
  }
  if (r == 0) {
    world().recv(&next, 1, DType::i64, 1, 11);
    EXPECT_EQ(next, 42);
    EXPECT_EQ(gone, -1);
    EXPECT_EQ(late, -1);
  }
  world().barrier();
}

