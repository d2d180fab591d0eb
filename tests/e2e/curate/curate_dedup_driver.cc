// Runs a dedup pass of `claw curate` (claw/curate/dedup.h) on JSONL
// from stdin, for bench/drivers/bench_dedup_quality.py and by hand:
//
//   curate_dedup_driver --mode exact|minhash|shingles [--ngram 5] [--bands 14]
//       [--rows 8] [--seed 1] [--threshold 0] [--normalization whitespace_lowercase]
//       [--threads 1] [--memory-mb 1024] [--workdir /tmp] < docs.jsonl
//
// Each input line is an object with "text" and "id" (a string or a number;
// the line number when absent). Documents are numbered by line.
//   exact, minhash: prints "removed_id\tkept_id" per removed document; on
//     stderr one "key=value ..." line with DedupStats and the timing of the
//     dedup itself (add + finish, JSON parsing excluded): seconds, docs/s, MB/s.
//   shingles: prints "id\tcount\tsum" per document: the number of shingles
//     and their XXH3-64 hashes summed mod 2^64, to check another
//     implementation's shingling against this one.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "claw/core/error.h"
#include "claw/curate/dedup.h"

namespace {

using claw::curate::DedupStats;
using claw::curate::Duplicate;

struct Options {
  std::string mode;
  claw::curate::MinHashParams minhash;
  std::string normalization = "whitespace_lowercase";
  int threads = 1;
  size_t memory_bytes = claw::curate::kDefaultDedupMemory;
  std::string workdir = "/tmp";
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "curate_dedup_driver: %s\nusage: curate_dedup_driver --mode exact|minhash|shingles [--ngram N] "
               "[--bands B] [--rows R] [--seed S] [--threshold T] [--normalization none|whitespace_lowercase] "
               "[--threads N] [--memory-mb M] [--workdir DIR] < docs.jsonl\n",
               why.c_str());
  std::exit(2);
}

long long to_int(const std::string& flag, const std::string& v) {
  size_t pos = 0;
  long long x = 0;
  try {
    x = std::stoll(v, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos == 0 || pos != v.size()) usage(flag + " expects an integer, got '" + v + "'");
  return x;
}

double to_double(const std::string& flag, const std::string& v) {
  size_t pos = 0;
  double x = 0;
  try {
    x = std::stod(v, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos == 0 || pos != v.size()) usage(flag + " expects a number, got '" + v + "'");
  return x;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage(flag + " needs a value");
    const std::string v = argv[++i];
    if (flag == "--mode") o.mode = v;
    else if (flag == "--ngram") o.minhash.ngram = static_cast<int>(to_int(flag, v));
    else if (flag == "--bands") o.minhash.bands = static_cast<int>(to_int(flag, v));
    else if (flag == "--rows") o.minhash.rows = static_cast<int>(to_int(flag, v));
    else if (flag == "--seed") o.minhash.seed = static_cast<uint64_t>(to_int(flag, v));
    else if (flag == "--threshold") o.minhash.threshold = to_double(flag, v);
    else if (flag == "--normalization") o.normalization = v;
    else if (flag == "--threads") o.threads = static_cast<int>(to_int(flag, v));
    else if (flag == "--memory-mb") o.memory_bytes = static_cast<size_t>(to_double(flag, v) * (1 << 20));
    else if (flag == "--workdir") o.workdir = v;
    else usage("unknown flag " + flag);
  }
  if (o.mode != "exact" && o.mode != "minhash" && o.mode != "shingles")
    usage("--mode must be exact, minhash or shingles");
  if (o.threads < 1) usage("--threads must be >= 1");
  return o;
}

// Calls fn(i) for i in [0, n) on `threads` threads.
template <class F>
void parallel_for(size_t n, int threads, F&& fn) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < n;) fn(i);
    });
  for (auto& t : pool) t.join();
}

int run(const Options& o) {
  std::ios::sync_with_stdio(false);
  std::vector<std::string> ids, texts;
  size_t bytes = 0;
  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  size_t line_no = 0;
  for (size_t pos = 0; pos < input.size();) {
    size_t eol = input.find('\n', pos);
    if (eol == std::string::npos) eol = input.size();
    const std::string_view line(input.data() + pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
      claw::fail("stdin line {}: expected a JSON object with a string \"text\"", line_no);
    const auto id = j.find("id");
    ids.push_back(id == j.end() ? std::to_string(line_no) : id->is_string() ? id->get<std::string>() : id->dump());
    texts.push_back(j["text"].get<std::string>());
    bytes += texts.back().size();
  }

  if (o.mode == "shingles") {
    claw::curate::MinHasher hasher(o.minhash);
    claw::curate::MinHasher::Scratch scratch;
    for (size_t i = 0; i < texts.size(); ++i) {
      uint64_t sum = 0;
      const auto sh = hasher.shingles(texts[i], scratch);
      for (uint64_t h : sh) sum += h;
      std::printf("%s\t%zu\t%llu\n", ids[i].c_str(), sh.size(), static_cast<unsigned long long>(sum));
    }
    return 0;
  }

  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  std::vector<Duplicate> dups;
  DedupStats stats;
  double add_s = 0;
  if (o.mode == "exact") {
    claw::curate::ExactDedup dedup(o.workdir, o.memory_bytes,
                                         claw::curate::parse_exact_normalization(o.normalization));
    parallel_for(texts.size(), o.threads, [&](size_t i) { dedup.add(i, texts[i]); });
    add_s = std::chrono::duration<double>(clock::now() - t0).count();
    dups = dedup.finish(&stats);
  } else {
    claw::curate::MinHashDedup dedup(o.minhash, o.workdir, o.memory_bytes);
    parallel_for(texts.size(), o.threads, [&](size_t i) { dedup.add(i, texts[i]); });
    add_s = std::chrono::duration<double>(clock::now() - t0).count();
    dups = dedup.finish(&stats);
  }
  const double total_s = std::chrono::duration<double>(clock::now() - t0).count();
  for (const Duplicate& d : dups) std::printf("%s\t%s\n", ids[d.doc].c_str(), ids[d.kept].c_str());
  std::fprintf(stderr,
               "mode=%s documents=%lld no_shingles=%lld candidate_pairs=%lld compared_pairs=%lld "
               "verified_pairs=%lld clusters=%lld removed=%lld spills=%lld spilled_bytes=%lld "
               "threads=%d bytes=%zu add_s=%.4f finish_s=%.4f seconds=%.4f docs_per_s=%.1f mb_per_s=%.2f\n",
               o.mode.c_str(), static_cast<long long>(stats.documents), static_cast<long long>(stats.no_shingles),
               static_cast<long long>(stats.candidate_pairs), static_cast<long long>(stats.compared_pairs),
               static_cast<long long>(stats.verified_pairs), static_cast<long long>(stats.clusters),
               static_cast<long long>(stats.removed), static_cast<long long>(stats.spills),
               static_cast<long long>(stats.spilled_bytes), o.threads, bytes, add_s, total_s - add_s, total_s,
               static_cast<double>(texts.size()) / total_s, static_cast<double>(bytes) / total_s / 1e6);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const claw::Error& e) {
    std::fprintf(stderr, "curate_dedup_driver: %s\n", e.what());
    return 1;
  }
}
