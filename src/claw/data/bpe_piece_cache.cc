#include "claw/data/bpe_piece_cache.h"

#include <cstring>

#include "claw/core/error.h"

namespace claw::data {
namespace {

constexpr size_t kInitialSlots = 1024;

}  // namespace

BpePieceCache::BpePieceCache() { clear(); }

void BpePieceCache::clear() {
  slots_.assign(kInitialSlots, Slot{});
  count_ = 0;
  pieces_.clear();
  ids_.clear();
}

BpePieceCache::Hit BpePieceCache::find(std::string_view piece, uint64_t hash) const {
  const uint64_t mask = slots_.size() - 1;
  for (uint64_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.ids_len == 0) return {false, {}};
    if (s.hash == hash && s.piece_len == piece.size() &&
        std::memcmp(pieces_.data() + s.piece_offset, piece.data(), piece.size()) == 0)
      return {true, std::span<const int32_t>(ids_.data() + s.ids_offset, s.ids_len)};
  }
}

void BpePieceCache::insert(std::string_view piece, uint64_t hash, std::span<const int32_t> ids) {
  if (piece.size() > kMaxPieceBytes) return;
  CLAW_CHECK(!ids.empty() && ids.size() <= piece.size(), "{} ids for a {}-byte piece", ids.size(), piece.size());
  if (pieces_.size() + ids_.size() * sizeof(int32_t) > kMaxArenaBytes) clear();
  if (2 * (count_ + 1) > slots_.size()) grow();
  Slot s{hash, static_cast<uint32_t>(pieces_.size()), static_cast<uint32_t>(ids_.size()),
         static_cast<uint16_t>(piece.size()), static_cast<uint16_t>(ids.size())};
  pieces_.append(piece);
  ids_.insert(ids_.end(), ids.begin(), ids.end());
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
