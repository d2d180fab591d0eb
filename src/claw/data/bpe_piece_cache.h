// A cache of BPE results per distinct piece, owned by one encoding thread.
// Natural text repeats a small set of words, so after a few kilobytes most
// pieces are hits and encoding costs a pre-tokenizer scan plus one hash
// lookup per piece.
//
// Layout: an open-addressing table of 24-byte slots (hash, offsets) over two
// arenas (piece bytes, ids), so a lookup touches one slot and compares
// bytes, and an insert allocates nothing but arena growth.
//
// Memory is bounded: pieces over kMaxPieceBytes are not cached (they rarely
// repeat), and when the arenas pass kMaxArenaBytes the cache starts over.
//
// Thread-safety: none; one cache per thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace claw::data {

class BpePieceCache {
 public:
  static constexpr size_t kMaxPieceBytes = 256;
  static constexpr size_t kMaxArenaBytes = size_t{64} << 20;

  BpePieceCache();

  // The cached ids of `piece` (whose hash_bytes() is `hash`), or an empty
  // span with found == false.
  struct Hit {
    bool found;
    std::span<const int32_t> ids;
  };
  Hit find(std::string_view piece, uint64_t hash) const;
  // Caches `ids` for `piece`, which must not be cached yet.
  void insert(std::string_view piece, uint64_t hash, std::span<const int32_t> ids);

  size_t size() const { return count_; }

 private:
  struct Slot {
    uint64_t hash;
    uint32_t piece_offset, ids_offset;
    uint16_t piece_len, ids_len;  // ids_len == 0: empty slot (every piece has an id)
  };
  void clear();
  void grow();

  std::vector<Slot> slots_;
  size_t count_ = 0;
  std::string pieces_;
  std::vector<int32_t> ids_;
};

}  // namespace claw::data
