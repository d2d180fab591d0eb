// A cache of BPE results per distinct piece, owned by one encoding thread.
// Natural text repeats a small set of words, so after a few kilobytes most
// pieces are hits and encoding costs a pre-tokenizer scan plus one hash
// lookup per piece.
//
// Layout: an open-addressing table of 32-byte slots (hash, piece, ids).
// Pieces of up to 8 bytes and results of up to 3 ids, which is nearly every
// English word, live in the slot itself, so a hit reads one cache line;
// longer ones live in two arenas that the slot points into.
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

#include "claw/data/bpe_hash.h"

namespace claw::data {

class BpePieceCache {
 public:
  static constexpr size_t kMaxPieceBytes = 256;
  static constexpr size_t kMaxArenaBytes = size_t{64} << 20;

  BpePieceCache();

  // The cached ids of `piece` (whose hash_bytes() is `hash`), valid until
  // the next insert(); found == false if the piece is not cached.
  struct Hit {
    bool found;
    std::span<const int32_t> ids;
  };
  Hit find(std::string_view piece, uint64_t hash) const;
  // Caches `ids` for `piece`, which must not be cached yet.
  void insert(std::string_view piece, uint64_t hash, std::span<const int32_t> ids);

  size_t size() const { return count_; }

 private:
  static constexpr size_t kInlineBytes = 8, kInlineIds = 3;
  struct Slot {
    uint64_t hash;
    uint64_t piece;              // piece_len <= kInlineBytes: its bytes, zero-padded; else offset in pieces_
    uint16_t piece_len;
    uint16_t ids_len;            // 0: empty slot (every piece has an id)
    int32_t ids[kInlineIds];     // ids_len <= kInlineIds: the ids; else ids[0] is the offset in ids_
  };
  static_assert(sizeof(Slot) == 32);

  void clear();
  void grow();

  std::vector<Slot> slots_;
  size_t count_ = 0;
  std::string pieces_;
  std::vector<int32_t> ids_;
};

// Appends the ids of `piece` to `out`: the cached ones, else those that
// `encode(piece, out)` appends, cached when there are any. Pieces over
// kMaxPieceBytes are encoded every time. The loop every BPE tokenizer runs
// per piece (bpe_tokenizer.h, hf_tokenizer.h).
template <class Encode>
void encode_cached(BpePieceCache& cache, std::string_view piece, std::vector<int32_t>& out, Encode&& encode) {
  if (piece.size() > BpePieceCache::kMaxPieceBytes) {
    encode(piece, out);
    return;
  }
  const uint64_t hash = hash_bytes(piece);
  if (BpePieceCache::Hit hit = cache.find(piece, hash); hit.found) {
    if (hit.ids.size() == 1)  // most words: no call to a general copy
      out.push_back(hit.ids[0]);
    else
      out.insert(out.end(), hit.ids.begin(), hit.ids.end());
    return;
  }
  const size_t first = out.size();
  encode(piece, out);
  if (out.size() > first) cache.insert(piece, hash, std::span<const int32_t>(out.data() + first, out.size() - first));
}

}  // namespace claw::data
