// The byte-pair-encoding core shared by every byte-level BPE tokenizer in
// claw (GPT-2's encoder.json + vocab.bpe, tiktoken rank files): turns one
// pre-tokenized piece of bytes into token ids by ranked merges.
//
// A vocabulary is a set of tokens (byte strings, including all 256 single
// bytes) and a merge table: (left id, right id) -> (result id, rank), where
// result's bytes are left's then right's. Encoding a piece starts from one
// token per byte and repeatedly merges the adjacent pair with the lowest
// rank, the leftmost among equal ranks, until no adjacent pair is in the
// table. The two file formats differ only in how the table is filled:
//
//   GPT-2 (gpt2_bpe.h): one entry per line of vocab.bpe, rank = line order.
//     Only the listed split of a token merges (openai/gpt-2 encoder.py).
//   tiktoken (tiktoken.h): a token's rank is its id, and every split of a
//     token into two tokens merges to it at that rank (tiktoken's
//     byte_pair_merge compares ranks of the concatenated bytes). tiktoken
//     also maps a piece that is itself a token straight to that token
//     before merging (`whole_piece_first`); in the rare vocabulary where
//     merging would get stuck short of such a token, this changes the ids.
//
// Cost: a piece of n bytes takes O(n^2) on small stack arrays for n <= 32
// (nearly all pieces) and O(n log n) with a heap beyond, so long runs
// (minified code, a page of CJK without spaces) stay linear-ish. Tables are
// open-addressing hash maps; callers cache whole pieces (bpe_piece_cache.h).
//
// Thread-safety: immutable after construction; encode_piece() may run on
// any number of threads, each with its own Scratch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace claw::data {

struct BpeMerge {
  int32_t left, right;  // ids of two adjacent tokens
  int32_t result;       // id of the merged token: left's bytes then right's
  int32_t rank;         // lower ranks merge first
};

class BpeEncoder {
 public:
  // Buffers reused across calls of one thread (no allocation per piece).
  struct Scratch {
    std::vector<int32_t> id, next, prev, rank, result;
    std::vector<std::pair<int32_t, int32_t>> heap;
  };

  // token_bytes[id]: the bytes of token `id`, or "" for an id that BPE
  // never produces (a special token's id, an unused id). Every single byte
  // must be a token, and each merge's ids must be tokens whose bytes agree;
  // loaders check their files so that these hold (CLAW_CHECK here).
  BpeEncoder(const std::vector<std::string>& token_bytes, const std::vector<BpeMerge>& merges,
             bool whole_piece_first);

  // Appends the ids of `piece` (non-empty) to `out`.
  void encode_piece(std::string_view piece, Scratch& scratch, std::vector<int32_t>& out) const;

  int32_t byte_id(unsigned char b) const { return byte_ids_[b]; }
  // The token whose bytes are exactly `bytes`, if any.
  std::optional<int32_t> find_token(std::string_view bytes) const;
  // Bytes of token `id` (empty for ids outside the mergeable vocabulary).
  std::string_view token_bytes(int32_t id) const {
    return {blob_.data() + offsets_[id], static_cast<size_t>(offsets_[id + 1] - offsets_[id])};
  }
  int32_t num_ids() const { return static_cast<int32_t>(offsets_.size()) - 1; }
  size_t num_merges() const { return pair_count_; }

 private:
  struct PairSlot {
    uint64_t key;  // left << 32 | right; kEmptyKey when unused
    int32_t rank, result;
  };
  static constexpr uint64_t kEmptyKey = ~uint64_t{0};

  const PairSlot* find_pair(int32_t left, int32_t right) const;
  void insert_pair(const BpeMerge& m);
  void merge_small(std::string_view piece, std::vector<int32_t>& out) const;
  void merge_heap(std::string_view piece, Scratch& s, std::vector<int32_t>& out) const;

  std::string blob_;               // all token bytes, back to back
  std::vector<uint64_t> offsets_;  // token id -> [offsets_[id], offsets_[id + 1]) in blob_
  int32_t byte_ids_[256];
  std::vector<PairSlot> pairs_;    // open addressing, power-of-two size, at most half full
  int pair_shift_ = 64;            // slot = (key * golden) >> pair_shift_
  size_t pair_count_ = 0;
  std::vector<int32_t> tokens_;    // bytes -> id, open addressing on the bytes' hash (-1 = empty)
  uint64_t token_mask_ = 0;
  bool whole_piece_first_;
};

}  // namespace claw::data
