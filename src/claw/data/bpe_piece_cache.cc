#include "claw/data/bpe_piece_cache.h"

#include <cstring>

#include "claw/core/error.h"

namespace claw::data {
namespace {

constexpr size_t kInitialSlots = 1024;

// The bytes of s (at most 8) as a little-endian integer, zero-padded: equal
// lengths and equal values mean equal bytes. Loads overlap instead of
// looping, since pieces are short and this runs once per lookup.
uint64_t pack(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  if (n >= 4) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + n - 4, 4);
    return lo | static_cast<uint64_t>(hi) << (8 * (n - 4));
  }
  if (n == 0) return 0;
  return p[0] | static_cast<uint64_t>(p[n / 2]) << (8 * (n / 2)) | static_cast<uint64_t>(p[n - 1]) << (8 * (n - 1));
}

}  // namespace

BpePieceCache::BpePieceCache() { clear(); }

void BpePieceCache::clear() {
  slots_.assign(kInitialSlots, Slot{});
  count_ = 0;
  pieces_.clear();
  ids_.clear();
}

BpePieceCache::Hit BpePieceCache::find(std::string_view piece, uint64_t hash) const {
  const bool inline_piece = piece.size() <= kInlineBytes;
  const uint64_t packed = inline_piece ? pack(piece) : 0;
  const uint64_t mask = slots_.size() - 1;
  for (uint64_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.ids_len == 0) return {false, {}};
    if (s.hash != hash || s.piece_len != piece.size()) continue;
    if (inline_piece ? s.piece != packed : std::memcmp(pieces_.data() + s.piece, piece.data(), piece.size()) != 0)
      continue;
    if (s.ids_len <= kInlineIds) return {true, std::span<const int32_t>(s.ids, s.ids_len)};
    return {true, std::span<const int32_t>(ids_.data() + s.ids[0], s.ids_len)};
  }
}

void BpePieceCache::insert(std::string_view piece, uint64_t hash, std::span<const int32_t> ids) {
  if (piece.size() > kMaxPieceBytes) return;
  CLAW_CHECK(!ids.empty() && ids.size() <= piece.size(), "{} ids for a {}-byte piece", ids.size(), piece.size());
  if (pieces_.size() + ids_.size() * sizeof(int32_t) > kMaxArenaBytes) clear();
  if (2 * (count_ + 1) > slots_.size()) grow();
  Slot s{};
  s.hash = hash;
  s.piece_len = static_cast<uint16_t>(piece.size());
  s.ids_len = static_cast<uint16_t>(ids.size());
  if (piece.size() <= kInlineBytes) {
    s.piece = pack(piece);
  } else {
    s.piece = pieces_.size();
    pieces_.append(piece);
  }
  if (ids.size() <= kInlineIds) {
    std::copy(ids.begin(), ids.end(), s.ids);
  } else {
    s.ids[0] = static_cast<int32_t>(ids_.size());
    ids_.insert(ids_.end(), ids.begin(), ids.end());
  }
  const uint64_t mask = slots_.size() - 1;
  uint64_t i = hash & mask;
  while (slots_[i].ids_len != 0) i = (i + 1) & mask;
  slots_[i] = s;
  ++count_;
}

void BpePieceCache::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.size() * 2, Slot{});
  const uint64_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.ids_len == 0) continue;
    uint64_t i = s.hash & mask;
    while (slots_[i].ids_len != 0) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

}  // namespace claw::data
