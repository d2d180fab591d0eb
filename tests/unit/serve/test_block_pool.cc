// The block pool: reference counts, the free list's order (uncached blocks
// first, then cached ones least recently released first), prefix lookups
// that check tokens and parent, eviction dropping the hash.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "claw/core/error.h"
#include "claw/serve/block_pool.h"

namespace claw::serve {
namespace {

std::vector<int32_t> block_tokens(int32_t first) {
  std::vector<int32_t> t(4);
  std::iota(t.begin(), t.end(), first);
  return t;
}

TEST(BlockPool, RefCountsAndFreeCounts) {
  BlockPool pool(3, 4, true);
  EXPECT_EQ(pool.num_free(), 3);
  const int32_t a = pool.allocate(), b = pool.allocate(), c = pool.allocate();
  EXPECT_EQ(pool.allocate(), -1);
  EXPECT_EQ(pool.num_used(), 3);
  pool.retain(b);
  pool.release(b);
  EXPECT_EQ(pool.ref_count(b), 1);
  pool.release(a);
  pool.release(b);
  pool.release(c);
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_THROW(pool.release(c), Error);
  EXPECT_THROW(BlockPool(2, 0, true), Error);
  EXPECT_THROW(BlockPool(2, 300, true), Error);
}

TEST(BlockPool, CachedBlocksAreReusedThenEvictedLeastRecentFirst) {
  BlockPool pool(3, 4, true);
  const std::vector<int32_t> t0 = block_tokens(0), t1 = block_tokens(10);
  const BlockHash h0 = BlockPool::hash({}, t0.data(), 4), h1 = BlockPool::hash(h0, t1.data(), 4);
  EXPECT_FALSE(h0 == BlockPool::hash({}, t1.data(), 4));
  EXPECT_FALSE(h1 == BlockPool::hash({}, t1.data(), 4));  // the parent is part of the hash
  const int32_t b0 = pool.allocate(), b1 = pool.allocate(), plain = pool.allocate();
  pool.register_full(b0, h0, {}, t0.data());
  pool.register_full(b1, h1, h0, t1.data());
  EXPECT_EQ(pool.lookup(h0, {}, t0.data()), b0);
  EXPECT_EQ(pool.lookup(h1, h0, t1.data()), b1);
  EXPECT_EQ(pool.lookup(h1, {}, t1.data()), -1);  // wrong parent
  EXPECT_EQ(pool.lookup(h0, {}, t1.data()), -1);  // wrong tokens
  // Released deepest first, as a sequence does; the uncached block goes to the head.
  pool.release(b1);
  pool.release(b0);
  pool.release(plain);
  EXPECT_EQ(pool.num_free(), 3);
  // A hit takes a cached block back off the free list.
  EXPECT_EQ(pool.lookup(h0, {}, t0.data()), b0);
  pool.retain(b0);
  EXPECT_EQ(pool.num_free(), 2);
  pool.release(b0);
  // Allocation: the uncached block, then b1 (released before b0), evicting it.
  EXPECT_EQ(pool.allocate(), plain);
  EXPECT_EQ(pool.allocate(), b1);
  EXPECT_EQ(pool.lookup(h1, h0, t1.data()), -1);
  EXPECT_EQ(pool.lookup(h0, {}, t0.data()), b0);
  EXPECT_EQ(pool.allocate(), b0);
  EXPECT_EQ(pool.lookup(h0, {}, t0.data()), -1);
}

TEST(BlockPool, WithoutPrefixCachingNothingIsFound) {
  BlockPool pool(2, 4, false);
  const std::vector<int32_t> t0 = block_tokens(0);
  const BlockHash h0 = BlockPool::hash({}, t0.data(), 4);
  const int32_t b = pool.allocate();
  pool.register_full(b, h0, {}, t0.data());
  pool.release(b);
  EXPECT_EQ(pool.lookup(h0, {}, t0.data()), -1);
}

}  // namespace
}  // namespace claw::serve
