// Mutation fuzzing of the readers of files claw writes (GGUF, safetensors,
// PEFT adapters, checkpoint metadata, tokenizer files, JSONL): a valid file,
// mutated a few bytes at a time (flips, random and boundary bytes, 32- and
// 64-bit boundary integers over a field, insertions, deletions, repeats,
// truncation), handed to the reader. Each case must be read, or refused with
// a claw::Error that names the file (exit 1 in the CLI); any other
// exception (exit 3, "report a bug"), a crash or a hang fails the test.
// Deterministic: the seed and the case number reproduce a case.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "claw/core/error.h"

namespace claw::testing {

inline std::string mutate(const std::string& valid, std::mt19937_64& rng) {
  std::string b = valid;
  auto pos = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  const int ops = 1 + static_cast<int>(rng() % 4);
  for (int o = 0; o < ops; ++o) {
    switch (rng() % 9) {
      case 0:  // flip a bit
        if (!b.empty()) b[pos(b.size())] ^= static_cast<char>(1 << (rng() % 8));
        break;
      case 1:  // a random byte
        if (!b.empty()) b[pos(b.size())] = static_cast<char>(rng());
        break;
      case 2: {  // a boundary byte
        static const char k[] = {0, 1, 0x7f, static_cast<char>(0x80), static_cast<char>(0xff), '"', '[', '{', '\\'};
        if (!b.empty()) b[pos(b.size())] = k[rng() % sizeof k];
        break;
      }
      case 3: {  // a boundary integer over 4 or 8 bytes (lengths, counts, offsets)
        static const uint64_t k[] = {0, 1, 0x7fffffff, 0x80000000, 0xffffffff, 0x7fffffffffffffffull,
                                     0xffffffffffffffffull, 1ull << 40};
        const uint64_t v = k[rng() % (sizeof k / sizeof k[0])];
        const size_t w = rng() % 2 ? 4 : 8;
        if (b.size() >= w) std::memcpy(b.data() + pos(b.size() - w + 1), &v, w);
        break;
      }
      case 4:  // insert random bytes
        b.insert(pos(b.size() + 1), std::string(1 + rng() % 8, static_cast<char>(rng())));
        break;
      case 5:  // delete a range
        if (!b.empty()) {
          const size_t at = pos(b.size());
          b.erase(at, 1 + rng() % std::min<size_t>(64, b.size() - at));
        }
        break;
      case 6: {  // repeat a range
        const size_t at = pos(b.size()), n = std::min<size_t>(1 + rng() % 64, b.size() - at);
        b.insert(pos(b.size() + 1), b.substr(at, n));
        break;
      }
      case 7:  // truncate
        b.resize(pos(b.size() + 1));
        break;
      default: {  // a decimal digit string (JSON numbers, lengths in text)
        static const char* k[] = {"-1", "0", "99999999999999999999", "1e400", "-0", "4294967296", "nan"};
        const char* s = k[rng() % (sizeof k / sizeof k[0])];
        b.insert(pos(b.size() + 1), s);
        break;
      }
    }
  }
  return b;
}

// A JSON text with one value replaced by a value of another type (or a key
// removed): valid JSON whose fields are wrong, what byte mutations rarely
// reach.
inline std::string mutate_json(const std::string& valid, std::mt19937_64& rng) {
  nlohmann::json j = nlohmann::json::parse(valid);
  std::vector<nlohmann::json*> nodes;
  std::vector<nlohmann::json*> stack{&j};
  while (!stack.empty()) {
    nlohmann::json* n = stack.back();
    stack.pop_back();
    nodes.push_back(n);
    if (n->is_structured())
      for (auto& child : *n) stack.push_back(&child);
  }
  nlohmann::json& target = *nodes[rng() % nodes.size()];
  if (target.is_object() && !target.empty() && rng() % 3 == 0) {
    auto it = target.begin();
    std::advance(it, static_cast<long>(rng() % target.size()));
    target.erase(it);
  } else {
    static const char* values[] = {"null", "true", "-1", "0", "1e300", "18446744073709551615", "-9223372036854775808",
                                   "\"x\"", "\"\"", "[]", "{}", "[1, \"a\"]", "{\"a\": [null]}", "0.5"};
    target = nlohmann::json::parse(values[rng() % (sizeof values / sizeof values[0])]);
  }
  return j.dump();
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

struct FuzzCounts {
  int cases = 0, read = 0, refused = 0;
};

// `cases` mutations of `valid`, each handed to `read`, which must return or
// throw claw::Error whose message contains `names` (the file). Returns the
// counts; failures are reported with the case number.
// With json, every other case is mutate_json's.
inline FuzzCounts fuzz(const std::string& what, const std::string& valid, int cases, uint64_t seed,
                       const std::function<void(const std::string& bytes)>& read, const std::string& names,
                       bool json = false) {
  FuzzCounts c;
  std::mt19937_64 rng(seed);
  for (int i = 0; i < cases; ++i) {
    const std::string bytes = json && i % 2 ? mutate_json(valid, rng) : mutate(valid, rng);
    ++c.cases;
    // CLAW_FUZZ_LAST=FILE: each case written there first (the one that
    // crashed is left behind).
    if (const char* last = std::getenv("CLAW_FUZZ_LAST")) write_bytes(last, bytes);
    try {
      read(bytes);
      ++c.read;
    } catch (const claw::Error& e) {
      ++c.refused;
      if (std::string(e.what()).find(names) == std::string::npos) {
        ADD_FAILURE() << what << " case " << i << " (seed " << seed << "): the error does not name " << names << ": "
                      << e.what();
        return c;
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << " case " << i << " (seed " << seed << "): not a claw::Error (exit 3): " << e.what();
      return c;
    }
  }
  std::printf("fuzz %s: %d cases, %d read, %d refused with an error naming the file\n", what.c_str(), c.cases, c.read,
              c.refused);
  return c;
}

}  // namespace claw::testing
