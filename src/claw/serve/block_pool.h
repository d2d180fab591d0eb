// The KV cache's blocks: who holds them, and which full blocks can be reused
// by a later request with the same prefix.
//
// A block holds block_size consecutive positions of one sequence (every
// layer's keys and values; the storage is serve/paged_kv_cache.h's). A
// sequence's block table lists its blocks in position order. Blocks are
// reference counted: a block shared by several sequences (a common prompt
// prefix) is freed when the last one lets go.
//
// Prefix caching. A full block is identified by the hash of its tokens
// chained with its predecessor's hash, so equal hashes mean equal prefixes
// up to and including the block (128-bit XXH3; a block also keeps its tokens
// and parent hash, and a lookup compares them, so a hash collision cannot
// hand out wrong keys and values). When a block's last holder releases it,
// a block with a hash stays in the table and joins the free list at its
// tail: a new request whose prompt starts with the same blocks takes them
// back (a hit) instead of recomputing them. allocate() takes the free list's
// head, the least recently released block, and drops its hash then (LRU
// eviction). A sequence releases its blocks last to first, so of one
// sequence the deepest blocks, the least likely to be shared, go first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace claw::serve {

struct BlockHash {
  uint64_t lo = 0, hi = 0;
  bool operator==(const BlockHash&) const = default;
};

class BlockPool {
 public:
  static constexpr int64_t kMaxBlockSize = 256;
  BlockPool(int64_t num_blocks, int64_t block_size, bool prefix_caching);
  // Throws naming --block-size unless 1 <= block_size <= kMaxBlockSize.
  static void check_block_size(int64_t block_size);

  int64_t num_blocks() const { return static_cast<int64_t>(ref_.size()); }
  int64_t block_size() const { return block_size_; }
  bool prefix_caching() const { return prefix_caching_; }
  // Blocks nobody holds (empty or cached): what allocate() can hand out.
  int64_t num_free() const { return num_free_; }
  int64_t num_used() const { return num_blocks() - num_free_; }
  int32_t ref_count(int32_t block) const { return ref_[block]; }

  // A block for new tokens (reference count 1), evicting the least recently
  // released cached block if need be; -1 when every block is held.
  int32_t allocate();
  // One more holder of a block found by lookup() (it may be on the free list).
  void retain(int32_t block);
  // One holder less; at zero the block joins the free list's tail.
  void release(int32_t block);

  // The hash of a block of tokens following a block with hash `parent`
  // (a zero hash for the first block).
  static BlockHash hash(const BlockHash& parent, const int32_t* tokens, int64_t n);
  // The cached block with this hash, parent and tokens, or -1.
  int32_t lookup(const BlockHash& h, const BlockHash& parent, const int32_t* tokens) const;
  // Records a block that just became full (no-op without prefix caching, or
  // when an equal block is already cached: the first stays).
  void register_full(int32_t block, const BlockHash& h, const BlockHash& parent, const int32_t* tokens);

  // Lookups and hits, in blocks (for /metrics and logs).
  mutable int64_t queries = 0, hits = 0;
  void count_lookup(int64_t looked_up, int64_t found) const {
    queries += looked_up;
    hits += found;
  }

 private:
  struct HashOf {
    size_t operator()(const BlockHash& h) const { return static_cast<size_t>(h.lo); }
  };
  struct Cached {
    bool valid = false;
    BlockHash hash, parent;
    std::vector<int32_t> tokens;
  };
  void unlink(int32_t b);
  void push_tail(int32_t b);

  int64_t block_size_;
  bool prefix_caching_;
  std::vector<int32_t> ref_;
  // Free list (doubly linked through prev_/next_, -1 ends), oldest at head_.
  std::vector<int32_t> prev_, next_;
  std::vector<bool> on_list_;
  int32_t head_ = -1, tail_ = -1;
  int64_t num_free_ = 0;
  std::vector<Cached> cached_;
  std::unordered_map<BlockHash, int32_t, HashOf> table_;
};

}  // namespace claw::serve
