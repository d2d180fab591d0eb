#include "claw/serve/block_pool.h"

#include <xxhash.h>

#include <cstring>

#include "claw/core/error.h"

namespace claw::serve {

BlockPool::BlockPool(int64_t num_blocks, int64_t block_size, bool prefix_caching)
    : block_size_(block_size),
      prefix_caching_(prefix_caching),
      ref_(static_cast<size_t>(num_blocks), 0),
      prev_(ref_.size(), -1),
      next_(ref_.size(), -1),
      on_list_(ref_.size(), false),
      cached_(ref_.size()) {
  if (num_blocks < 1) fail("a KV cache needs at least one block (--num-kv-blocks, --kv-cache-memory)");
  check_block_size(block_size);
  for (int32_t b = 0; b < num_blocks; ++b) push_tail(b);
}

void BlockPool::check_block_size(int64_t block_size) {
  if (block_size < 1 || block_size > kMaxBlockSize)
    fail("--block-size {} is outside [1, {}] (16 is the usual)", block_size, kMaxBlockSize);
}

void BlockPool::unlink(int32_t b) {
  CLAW_CHECK(on_list_[b], "block {} is not free", b);
  (prev_[b] >= 0 ? next_[prev_[b]] : head_) = next_[b];
  (next_[b] >= 0 ? prev_[next_[b]] : tail_) = prev_[b];
  prev_[b] = next_[b] = -1;
  on_list_[b] = false;
  --num_free_;
}

void BlockPool::push_tail(int32_t b) {
  prev_[b] = tail_;
  next_[b] = -1;
  (tail_ >= 0 ? next_[tail_] : head_) = b;
  tail_ = b;
  on_list_[b] = true;
  ++num_free_;
}

int32_t BlockPool::allocate() {
  if (head_ < 0) return -1;
  const int32_t b = head_;
  unlink(b);
  if (cached_[b].valid) {  // evict: its prefix is no longer cached
    table_.erase(cached_[b].hash);
    cached_[b] = {};
  }
  ref_[b] = 1;
  return b;
}

void BlockPool::retain(int32_t b) {
  if (ref_[b]++ == 0) unlink(b);
}

void BlockPool::release(int32_t b) {
  CLAW_CHECK(ref_[b] > 0, "block {} released more often than held", b);
  if (--ref_[b] > 0) return;
  if (!cached_[b].valid) {
    // Nothing to reuse: hand it out before any cached block.
    prev_[b] = -1;
    next_[b] = head_;
    (head_ >= 0 ? prev_[head_] : tail_) = b;
    head_ = b;
    on_list_[b] = true;
    ++num_free_;
    return;
  }
  push_tail(b);
}

BlockHash BlockPool::hash(const BlockHash& parent, const int32_t* tokens, int64_t n) {
  CLAW_CHECK(n <= kMaxBlockSize, "a block of {} tokens (at most {})", n, kMaxBlockSize);
  uint64_t buf[2 + kMaxBlockSize / 2];
  buf[0] = parent.lo;
  buf[1] = parent.hi;
  std::memcpy(buf + 2, tokens, static_cast<size_t>(n) * sizeof(int32_t));
  const XXH128_hash_t h = XXH3_128bits(buf, 2 * sizeof(uint64_t) + static_cast<size_t>(n) * sizeof(int32_t));
  return {h.low64, h.high64};
}

int32_t BlockPool::lookup(const BlockHash& h, const BlockHash& parent, const int32_t* tokens) const {
  if (!prefix_caching_) return -1;
  const auto it = table_.find(h);
  if (it == table_.end()) return -1;
  const Cached& c = cached_[it->second];
  if (!(c.parent == parent) ||
      std::memcmp(c.tokens.data(), tokens, static_cast<size_t>(block_size_) * sizeof(int32_t)) != 0)
    return -1;
  return it->second;
}

void BlockPool::register_full(int32_t b, const BlockHash& h, const BlockHash& parent, const int32_t* tokens) {
  if (!prefix_caching_ || cached_[b].valid || table_.count(h)) return;
  table_.emplace(h, b);
  cached_[b] = {true, h, parent, std::vector<int32_t>(tokens, tokens + block_size_)};
}

}  // namespace claw::serve
