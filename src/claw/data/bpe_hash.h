// Hashes for the BPE tables: XXH3 (xxHash 0.8, inlined) for byte strings,
// whose short-input path suits pre-tokenized pieces of a few bytes, and a
// Fibonacci multiplicative hash for id pairs.
#pragma once

#include <cstdint>
#include <string_view>

// Pieces and tokens are short: XXH3's SIMD code serves only inputs over 240
// bytes, and GCC 12 warns falsely inside its AVX-512 variant.
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_SCALAR
#include <xxhash.h>

namespace claw::data {

inline uint64_t hash_bytes(std::string_view s) { return XXH3_64bits(s.data(), s.size()); }

// Slot of a 64-bit key in a table of 2^(64 - shift) slots: the top bits of
// key * 2^64/phi (Knuth, TAOCP vol. 3, 6.4), which spread consecutive ids.
inline uint64_t fibonacci_slot(uint64_t key, int shift) { return (key * 0x9E3779B97F4A7C15ull) >> shift; }

}  // namespace claw::data
