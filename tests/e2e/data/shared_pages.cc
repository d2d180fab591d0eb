// Two ranks mapping the same dataset share one physical copy.
//
//   dataset_shared_pages PREFIX
//
// Forks before anything is mapped, so the two processes map the dataset
// independently, as two ranks on one node do. Each opens IndexedDataset
// (mmap of .bin and .idx) and reads every token. The figures come from
// /proc/self/smaps for the .bin mapping: Rss counts the pages mapped in the
// process, Pss divides each page by the number of processes mapping it. So
// one process alone has Pss = Rss, and with both mapping it each has
// Pss = Rss / 2: one copy in memory, half charged to each.
//
// Prints one machine-readable line per figure and exits 1 unless
// Pss/Rss is within [0.95, 1] alone and [0.45, 0.55] shared, with Rss at
// least 90% of the .bin size (every page touched).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "claw/data/indexed_dataset.h"

namespace {

struct Figures {
  long rss_kb = -1, pss_kb = -1;
};

// Rss and Pss of this process's mapping of `path`.
Figures mapping_figures(const std::string& path) {
  std::ifstream smaps("/proc/self/smaps");
  Figures f;
  std::string line;
  bool in_mapping = false;
  while (std::getline(smaps, line)) {
    // Mapping header lines start with an address range "start-end perms ...";
    // field lines with a capitalised name and a colon.
    const size_t colon = line.find(':');
    const bool header = colon == std::string::npos || line.find(' ') < colon;
    if (header) {
      in_mapping = line.size() >= path.size() && line.compare(line.size() - path.size(), path.size(), path) == 0;
      continue;
    }
    long kb = 0;
    if (in_mapping && std::sscanf(line.c_str(), "Rss: %ld kB", &kb) == 1) f.rss_kb = kb;
    if (in_mapping && std::sscanf(line.c_str(), "Pss: %ld kB", &kb) == 1) f.pss_kb = kb;
  }
  return f;
}

// Reads every token, so every page of the .bin mapping is resident.
void touch_every_token(const claw::data::IndexedDataset& d) { d.token_range(0, d.num_sequences()); }

void send(int fd, char c) {
  if (::write(fd, &c, 1) != 1) std::_Exit(2);
}
void receive(int fd) {
  char c;
  if (::read(fd, &c, 1) != 1) std::_Exit(2);
}

void report(const char* who, const char* phase, const Figures& f, long bin_kb) {
  std::printf("shared_pages process=%s phase=%s bin_kb=%ld rss_kb=%ld pss_kb=%ld pss_over_rss=%.3f\n", who, phase,
              bin_kb, f.rss_kb, f.pss_kb, f.rss_kb > 0 ? static_cast<double>(f.pss_kb) / f.rss_kb : 0.0);
  std::fflush(stdout);
}

bool within(const Figures& f, double lo, double hi, long bin_kb) {
  if (f.rss_kb < 0.9 * bin_kb) return false;
  const double r = static_cast<double>(f.pss_kb) / f.rss_kb;
  return r >= lo && r <= hi;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DATASET_PREFIX\n", argv[0]);
    return 2;
  }
  // smaps names a mapping by its resolved path.
  const std::filesystem::path given = argv[1];
  const std::string prefix =
      (std::filesystem::canonical(given.has_parent_path() ? given.parent_path() : ".") / given.filename()).string();
  const std::string bin = claw::data::bin_path(prefix);
  const long bin_kb = static_cast<long>(std::filesystem::file_size(bin) / 1024);

  int to_child[2], to_parent[2];
  if (::pipe(to_child) != 0 || ::pipe(to_parent) != 0) return 2;
  const pid_t pid = ::fork();
  if (pid < 0) return 2;
  if (pid == 0) {
    // Second rank: map once the first has measured itself alone.
    receive(to_child[0]);
    const claw::data::IndexedDataset d(prefix);
    touch_every_token(d);
    const Figures f = mapping_figures(bin);
    report("second", "shared", f, bin_kb);
    send(to_parent[1], within(f, 0.45, 0.55, bin_kb) ? 'y' : 'n');
    receive(to_child[0]);  // keep the mapping until the first has measured
    std::_Exit(0);
  }

  bool ok = true;
  {
    const claw::data::IndexedDataset d(prefix);
    touch_every_token(d);
    const Figures alone = mapping_figures(bin);
    report("first", "alone", alone, bin_kb);
    ok = within(alone, 0.95, 1.0, bin_kb) && ok;
    send(to_child[1], 'g');
    char verdict;
    if (::read(to_parent[0], &verdict, 1) != 1) return 2;
    ok = verdict == 'y' && ok;
    const Figures shared = mapping_figures(bin);
    report("first", "shared", shared, bin_kb);
    ok = within(shared, 0.45, 0.55, bin_kb) && ok;
    send(to_child[1], 'g');
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::printf("shared_pages %s: two processes mapping %s hold one copy (Pss = Rss / 2 each)\n", ok ? "ok" : "FAIL",
              bin.c_str());
  return ok ? 0 : 1;
}
