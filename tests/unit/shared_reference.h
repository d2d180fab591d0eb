// The single-rank run a parallel parity test compares against, computed once.
//
// World rank 0 computes it and broadcasts it (the other ranks would compute
// the same run, each on a core the job oversubscribes already). With
// $CLAW_TEST_REFS naming a directory (tests/e2e/parallel/CMakeLists.txt: the suite's
// reference store, emptied by the fixture mpi_references at the start of a
// run) it is also computed once per suite: the first process to need it
// writes it there under its key, and the same test at another rank count
// reads it. A reference is a pure function of its key and the binary, and
// the store lives no longer than one suite's run.
//
// T: a value with `void save(RefWriter&) const` and `static T load(RefReader&)`.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "claw/comm/group.h"
#include "claw/core/error.h"

namespace claw::parity {

class RefWriter {
 public:
  template <typename V>
  void put(const std::vector<V>& v) {
    put_u64(v.size());
    append(v.data(), v.size() * sizeof(V));
  }
  void put_u64(uint64_t x) { append(&x, sizeof x); }
  void put(const std::string& s) {
    put_u64(s.size());
    append(s.data(), s.size());
  }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  void append(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
  }
  std::vector<uint8_t> bytes_;
};

class RefReader {
 public:
  explicit RefReader(const std::vector<uint8_t>& bytes) : bytes_(bytes) {}
  template <typename V>
  std::vector<V> vec() {
    std::vector<V> v(u64());
    take(v.data(), v.size() * sizeof(V));
    return v;
  }
  uint64_t u64() {
    uint64_t x = 0;
    take(&x, sizeof x);
    return x;
  }
  std::string str() {
    std::string s(u64(), '\0');
    take(s.data(), s.size());
    return s;
  }

 private:
  void take(void* p, size_t n) {
    CLAW_CHECK(at_ + n <= bytes_.size(), "reference record cut short");
    std::memcpy(p, bytes_.data() + at_, n);
    at_ += n;
  }
  const std::vector<uint8_t>& bytes_;
  size_t at_ = 0;
};

// `key` names everything the run depends on (any text: the file is named by its hash).
template <typename T, typename Compute>
T shared_reference(comm::Group& world, const std::string& key, Compute compute) {
  std::vector<uint8_t> blob;
  if (world.rank() == 0) {
    uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
    for (unsigned char c : key) h = (h ^ c) * 0x100000001b3ULL;
    char name[32];
    std::snprintf(name, sizeof name, "%016llx.ref", static_cast<unsigned long long>(h));
    const char* dir = std::getenv("CLAW_TEST_REFS");
    const std::string path = dir && *dir ? std::string(dir) + "/" + name : std::string();
    if (std::ifstream in{path, std::ios::binary}; !path.empty() && in) {
      blob.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    } else {
      RefWriter w;
      compute().save(w);
      blob = std::move(w.bytes());
      if (!path.empty()) {  // whole or not at all: a reader never sees half of it
        std::filesystem::create_directories(dir);
        const std::string part = path + ".part" + std::to_string(::getpid());
        std::ofstream(part, std::ios::binary).write(reinterpret_cast<const char*>(blob.data()),
                                                    static_cast<std::streamsize>(blob.size()));
        std::filesystem::rename(part, path);
      }
    }
  }
  int64_t n = static_cast<int64_t>(blob.size());
  world.broadcast(&n, 1, DType::i64, 0);
  blob.resize(static_cast<size_t>(n));
  world.broadcast(blob.data(), n, DType::u8, 0);
  RefReader r(blob);
  return T::load(r);
}

}  // namespace claw::parity
