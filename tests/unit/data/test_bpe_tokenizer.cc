// The shared byte-level BPE machinery: the core's two merge paths (stack
// arrays up to 32 bytes, a heap beyond) against a naive reference on random
// vocabularies, the per-thread piece cache, and special-token matching.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "claw/data/bpe_encoder.h"
#include "claw/data/bpe_hash.h"
#include "claw/data/bpe_piece_cache.h"
#include "claw/data/bpe_tokenizer.h"

namespace claw::data {
namespace {

struct RandomVocabulary {
  std::vector<std::string> token_bytes;
  std::vector<BpeMerge> merges;
};

// Byte b is token b; then `n` merges of random adjacent tokens of random
// text over "abcde", each making a new token, ranked in random order.
RandomVocabulary random_vocabulary(std::mt19937& rng, int n) {
  RandomVocabulary v;
  for (int b = 0; b < 256; ++b) v.token_bytes.emplace_back(1, static_cast<char>(b));
  std::map<std::string, int32_t> id_of;
  for (int b = 0; b < 256; ++b) id_of[v.token_bytes[b]] = b;
  std::vector<int32_t> ranks(n);
  for (int i = 0; i < n; ++i) ranks[i] = i;
  std::shuffle(ranks.begin(), ranks.end(), rng);
  std::vector<int32_t> pool = {'a', 'b', 'c', 'd', 'e'};
  while (static_cast<int>(v.merges.size()) < n) {
    const int32_t l = pool[rng() % pool.size()], r = pool[rng() % pool.size()];
    const std::string bytes = v.token_bytes[l] + v.token_bytes[r];
    if (id_of.contains(bytes) || bytes.size() > 12) continue;
    const int32_t id = static_cast<int32_t>(v.token_bytes.size());
    v.token_bytes.push_back(bytes);
    id_of[bytes] = id;
    v.merges.push_back(BpeMerge{l, r, id, ranks[v.merges.size()]});
    pool.push_back(id);
  }
  return v;
}

// Textbook BPE: merge the lowest-rank adjacent pair, leftmost first.
std::vector<int32_t> naive_bpe(const RandomVocabulary& v, const std::string& piece) {
  std::map<std::pair<int32_t, int32_t>, std::pair<int32_t, int32_t>> table;  // -> (rank, result)
  for (const BpeMerge& m : v.merges) table[{m.left, m.right}] = {m.rank, m.result};
  std::vector<int32_t> sym;
  for (unsigned char c : piece) sym.push_back(c);
  for (;;) {
    int32_t best = -1, best_rank = INT32_MAX;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = table.find({sym[i], sym[i + 1]});
      if (it != table.end() && it->second.first < best_rank) {
        best = static_cast<int32_t>(i);
        best_rank = it->second.first;
      }
    }
    if (best < 0) return sym;
    sym[best] = table[{sym[best], sym[best + 1]}].second;
    sym.erase(sym.begin() + best + 1);
  }
}

TEST(BpeEncoder, BothMergePathsMatchTextbookBpe) {
  std::mt19937 rng(42);
  for (int vocab = 0; vocab < 5; ++vocab) {
    const RandomVocabulary v = random_vocabulary(rng, 300);
    const BpeEncoder encoder(v.token_bytes, v.merges, false);
    EXPECT_EQ(encoder.num_merges(), 300u);
    BpeEncoder::Scratch scratch;
    for (int trial = 0; trial < 300; ++trial) {
      // Lengths on both sides of the 32-byte switch to the heap.
      std::string piece(1 + rng() % 120, 'a');
      for (char& c : piece) c = static_cast<char>('a' + rng() % 5);
      std::vector<int32_t> got;
      encoder.encode_piece(piece, scratch, got);
      ASSERT_EQ(got, naive_bpe(v, piece)) << piece;
    }
  }
}

TEST(BpeEncoder, WholePieceFirstLooksUpTheWholePiece) {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
  bytes.push_back("xyz");  // 256: no merge makes it
  BpeEncoder::Scratch scratch;
  std::vector<int32_t> out;
  BpeEncoder(bytes, {}, true).encode_piece("xyz", scratch, out);
  EXPECT_EQ(out, (std::vector<int32_t>{256}));
  out.clear();
  BpeEncoder(bytes, {}, false).encode_piece("xyz", scratch, out);
  EXPECT_EQ(out, (std::vector<int32_t>{'x', 'y', 'z'}));
  EXPECT_EQ(BpeEncoder(bytes, {}, false).find_token("xyz"), 256);
  EXPECT_FALSE(BpeEncoder(bytes, {}, false).find_token("xy").has_value());
}

TEST(BpePieceCache, FindsWhatWasInsertedAndSkipsLongPieces) {
  // Pieces of 1..20 bytes (inline up to 8, in the arena beyond) with 1..5
  // ids (inline up to 3), including pieces that differ only by a trailing
  // zero byte, through several table growths.
  BpePieceCache cache;
  std::vector<std::string> pieces;
  for (int i = 0; i < 20000; ++i) pieces.push_back(std::to_string(i).substr(0, 1 + i % 5) + std::string(i % 16, 'x'));
  std::sort(pieces.begin(), pieces.end());
  pieces.erase(std::unique(pieces.begin(), pieces.end()), pieces.end());
  pieces.push_back(std::string("a"));
  pieces.push_back(std::string("a\0", 2));
  pieces.push_back(std::string("a\0\0\0\0\0\0\0", 8));
  auto ids_of = [](size_t i) {
    std::vector<int32_t> ids;
    for (size_t k = 0; k <= i % 5; ++k) ids.push_back(static_cast<int32_t>(i * 10 + k));
    return ids;
  };
  for (size_t i = 0; i < pieces.size(); ++i) {
    ASSERT_FALSE(cache.find(pieces[i], hash_bytes(pieces[i])).found) << i;
    std::vector<int32_t> ids = ids_of(i);
    if (ids.size() > pieces[i].size()) ids.resize(pieces[i].size());
    cache.insert(pieces[i], hash_bytes(pieces[i]), ids);
  }
  EXPECT_EQ(cache.size(), pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    BpePieceCache::Hit hit = cache.find(pieces[i], hash_bytes(pieces[i]));
    ASSERT_TRUE(hit.found) << i;
    std::vector<int32_t> ids = ids_of(i);
    if (ids.size() > pieces[i].size()) ids.resize(pieces[i].size());
    ASSERT_EQ(std::vector<int32_t>(hit.ids.begin(), hit.ids.end()), ids) << i;
  }
  const std::string long_piece(BpePieceCache::kMaxPieceBytes + 1, 'x');
  cache.insert(long_piece, hash_bytes(long_piece), std::vector<int32_t>{1});
  EXPECT_FALSE(cache.find(long_piece, hash_bytes(long_piece)).found);
}

// Bytes 0..255 and specials "<s>" (256) and "<s>x" (257).
BpeTokenizer tokenizer_with_specials() {
  BpeVocabulary v;
  v.name = "bytes";
  for (int b = 0; b < 256; ++b) v.token_bytes.emplace_back(1, static_cast<char>(b));
  v.specials = {{"<s>", 256}, {"<s>x", 257}};
  v.eod = 256;
  return BpeTokenizer(std::move(v));
}

TEST(BpeTokenizer, SpecialTokensLeftmostThenLongest) {
  const BpeTokenizer t = tokenizer_with_specials();
  using V = std::vector<int32_t>;
  EXPECT_EQ(t.encode("a<s>xb", SpecialTokens::recognise), (V{'a', 257, 'b'}));
  EXPECT_EQ(t.encode("<s><s>", SpecialTokens::recognise), (V{256, 256}));
  EXPECT_EQ(t.encode("<<s>x<s", SpecialTokens::recognise), (V{'<', 257, '<', 's'}));
  EXPECT_EQ(t.encode("<s>", SpecialTokens::as_text), (V{'<', 's', '>'}));
  EXPECT_EQ(t.decode(V{'a', 257, 256}), "a<s>x<s>");
  EXPECT_EQ(t.vocab_size(), 258);
}

}  // namespace
}  // namespace claw::data
