#include "claw/data/bpe_encoder.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <functional>

#include "claw/core/error.h"
#include "claw/data/bpe_hash.h"

namespace claw::data {
namespace {

constexpr uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// Pieces up to this many bytes merge on stack arrays (see the header).
constexpr int32_t kSmallPiece = 32;

}  // namespace

BpeEncoder::BpeEncoder(const std::vector<std::string>& token_bytes, const std::vector<BpeMerge>& merges,
                       bool whole_piece_first)
    : whole_piece_first_(whole_piece_first) {
  const size_t n = token_bytes.size();
  CLAW_CHECK(n < static_cast<size_t>(INT32_MAX), "{} token ids", n);
  offsets_.reserve(n + 1);
  offsets_.push_back(0);
  for (const std::string& t : token_bytes) {
    blob_ += t;
    offsets_.push_back(blob_.size());
  }

  // bytes -> id, at most half full.
  const size_t token_slots = std::bit_ceil(std::max<size_t>(2 * n, 16));
  tokens_.assign(token_slots, -1);
  token_mask_ = token_slots - 1;
  for (int32_t id = 0; id < static_cast<int32_t>(n); ++id) {
    std::string_view t = this->token_bytes(id);
    if (t.empty()) continue;
    uint64_t slot = hash_bytes(t) & token_mask_;
    while (tokens_[slot] >= 0) {
      CLAW_CHECK(this->token_bytes(tokens_[slot]) != t, "ids {} and {} have the same bytes", tokens_[slot], id);
      slot = (slot + 1) & token_mask_;
    }
    tokens_[slot] = id;
  }
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    std::optional<int32_t> id = find_token(std::string_view(&c, 1));
    CLAW_CHECK(id.has_value(), "no token for byte 0x{:02x}", b);
    byte_ids_[b] = *id;
  }

  const size_t pair_slots = std::bit_ceil(std::max<size_t>(2 * merges.size(), 16));
  pairs_.assign(pair_slots, PairSlot{kEmptyKey, 0, 0});
  pair_shift_ = 64 - std::countr_zero(pair_slots);
  for (const BpeMerge& m : merges) {
    CLAW_CHECK(m.left >= 0 && m.right >= 0 && m.result >= 0 && static_cast<size_t>(m.result) < n &&
                   static_cast<size_t>(std::max(m.left, m.right)) < n,
               "merge ({}, {}) -> {} outside [0, {})", m.left, m.right, m.result, n);
    CLAW_CHECK(token_bytes[m.result] == token_bytes[m.left] + token_bytes[m.right] && !token_bytes[m.left].empty() &&
                   !token_bytes[m.right].empty(),
               "merge ({}, {}) -> {}: bytes do not concatenate", m.left, m.right, m.result);
    insert_pair(m);
  }
}

void BpeEncoder::insert_pair(const BpeMerge& m) {
  const uint64_t key = pair_key(m.left, m.right);
  uint64_t slot = fibonacci_slot(key, pair_shift_);
  const uint64_t mask = pairs_.size() - 1;
  while (pairs_[slot].key != kEmptyKey) {
    CLAW_CHECK(pairs_[slot].key != key, "pair ({}, {}) merges twice", m.left, m.right);
    slot = (slot + 1) & mask;
  }
  pairs_[slot] = PairSlot{key, m.rank, m.result};
  ++pair_count_;
}

const BpeEncoder::PairSlot* BpeEncoder::find_pair(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  const uint64_t mask = pairs_.size() - 1;
  for (uint64_t slot = fibonacci_slot(key, pair_shift_);; slot = (slot + 1) & mask) {
    const PairSlot& p = pairs_[slot];
    if (p.key == key) return &p;
    if (p.key == kEmptyKey) return nullptr;
  }
}

std::optional<int32_t> BpeEncoder::find_token(std::string_view bytes) const {
  for (uint64_t slot = hash_bytes(bytes) & token_mask_;; slot = (slot + 1) & token_mask_) {
    const int32_t id = tokens_[slot];
    if (id < 0) return std::nullopt;
    if (token_bytes(id) == bytes) return id;
  }
}

void BpeEncoder::encode_piece(std::string_view piece, Scratch& scratch, std::vector<int32_t>& out) const {
  CLAW_CHECK(!piece.empty() && piece.size() < static_cast<size_t>(INT32_MAX), "piece of {} bytes", piece.size());
  if (piece.size() == 1) {
    out.push_back(byte_ids_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (whole_piece_first_) {
    if (std::optional<int32_t> id = find_token(piece)) {
      out.push_back(*id);
      return;
    }
  }
  if (piece.size() <= static_cast<size_t>(kSmallPiece))
    merge_small(piece, out);
  else
    merge_heap(piece, scratch, out);
}

// Symbols in an array; rank[i] is the rank of the pair (sym[i], sym[i + 1]).
// Each merge scans for the lowest rank and closes the gap: O(n^2) on at
// most 32 entries, cheaper than any heap at this size.
void BpeEncoder::merge_small(std::string_view piece, std::vector<int32_t>& out) const {
  int32_t sym[kSmallPiece], rank[kSmallPiece], result[kSmallPiece];
  int32_t m = static_cast<int32_t>(piece.size());
  for (int32_t i = 0; i < m; ++i) sym[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
  auto update = [&](int32_t i) {
    const PairSlot* p = find_pair(sym[i], sym[i + 1]);
    rank[i] = p != nullptr ? p->rank : INT32_MAX;
    result[i] = p != nullptr ? p->result : -1;
  };
  for (int32_t i = 0; i + 1 < m; ++i) update(i);
  while (m > 1) {
    int32_t best = 0;
    for (int32_t i = 1; i + 1 < m; ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == INT32_MAX) break;
    sym[best] = result[best];
    // Remove symbol best + 1 and the pair starting there.
    for (int32_t i = best + 1; i + 1 < m; ++i) {
      sym[i] = sym[i + 1];
      rank[i] = rank[i + 1];
      result[i] = result[i + 1];
    }
    --m;
    if (best > 0) update(best - 1);
    if (best + 1 < m) update(best);
  }
  out.insert(out.end(), sym, sym + m);
}

// Symbols form a linked list over byte positions; a merge keeps the left
// position and unlinks the right one (id -1). The heap holds (rank, left
// position) candidates; an entry is stale when the pair at that position no
// longer has that rank, and is skipped when popped. Two pairs with the same
// rank make the same token, so acting on any entry whose rank matches the
// position's current pair is a valid lowest-rank, leftmost merge.
void BpeEncoder::merge_heap(std::string_view piece, Scratch& s, std::vector<int32_t>& out) const {
  const int32_t n = static_cast<int32_t>(piece.size());
  s.id.resize(n);
  s.next.resize(n);
  s.prev.resize(n);
  s.rank.resize(n);
  s.result.resize(n);
  s.heap.clear();
  for (int32_t i = 0; i < n; ++i) {
    s.id[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
    s.next[i] = i + 1 < n ? i + 1 : -1;
    s.prev[i] = i - 1;
  }
  const auto cmp = std::greater<std::pair<int32_t, int32_t>>();
  auto update = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = s.next[left];
    const PairSlot* p = right >= 0 ? find_pair(s.id[left], s.id[right]) : nullptr;
    s.rank[left] = p != nullptr ? p->rank : INT32_MAX;
    s.result[left] = p != nullptr ? p->result : -1;
    if (p != nullptr) {
      s.heap.emplace_back(p->rank, left);
      std::push_heap(s.heap.begin(), s.heap.end(), cmp);
    }
  };
  for (int32_t i = 0; i < n; ++i) update(i);
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), cmp);
    const auto [rank, left] = s.heap.back();
    s.heap.pop_back();
    if (s.id[left] < 0 || s.rank[left] != rank) continue;
    const int32_t right = s.next[left];
    s.id[left] = s.result[left];
    s.id[right] = -1;
    s.next[left] = s.next[right];
    if (s.next[right] >= 0) s.prev[s.next[right]] = left;
    update(s.prev[left]);
    update(left);
  }
  for (int32_t i = 0; i >= 0; i = s.next[i]) out.push_back(s.id[i]);
}

}  // namespace claw::data
