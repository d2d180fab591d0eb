#include "claw/kernels/cpu/peak.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "claw/core/log.h"
#include "claw/kernels/cpu/blas.h"

namespace claw::kernels {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kFormat = "claw-gemm-peak-1";
constexpr const char* kFileName = "gemm_peak.json";

std::string now_utc() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

// The whole cache file; an unreadable or foreign one counts as empty (and is
// replaced on the next write) with a warning, never as an error: the peak
// can always be measured again.
json load(const std::string& file) {
  std::ifstream in(file);
  if (!in) return json::object();
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || j.value("format", "") != kFormat || !j.contains("entries") ||
      !j["entries"].is_object()) {
    log::warn("peak", "ignoring {}: not a {} file (it will be rewritten)", file, kFormat);
    return json::object();
  }
  return j;
}

// Union of two entries of the same key: every shape's best figure, the
// higher peak, the earlier calibration date, both raise histories.
json merge(const json& a, const json& b) {
  if (!a.is_object()) return b;
  if (!b.is_object()) return a;
  json out = a;
  const json shapes = b.value("shapes", json::object());  // items() of a temporary would dangle
  for (const auto& [shape, g] : shapes.items()) {
    const double mine = out.contains("shapes") ? out["shapes"].value(shape, 0.0) : 0.0;
    out["shapes"][shape] = std::max(g.get<double>(), mine);
  }
  out["gflops"] = std::max(a.value("gflops", 0.0), b.value("gflops", 0.0));
  if (b.contains("calibrated") && (!a.contains("calibrated") || b["calibrated"] < a["calibrated"]))
    out["calibrated"] = b["calibrated"];
  const json raised = b.value("raised", json::array());
  for (const auto& r : raised)
    if (std::find(out["raised"].begin(), out["raised"].end(), r) == out["raised"].end()) out["raised"].push_back(r);
  return out;
}

// Writes `entry` for `id`, merged with what is on disk now (another rank or
// run may have written meanwhile), through a rename so readers never see a
// half-written file. Returns false (after a warning) when it cannot.
bool store(const std::string& file, const std::string& id, const json& entry) {
  std::error_code ec;
  fs::create_directories(fs::path(file).parent_path(), ec);
  json all = load(file);
  if (all.empty()) all = {{"format", kFormat}, {"entries", json::object()}};
  all["entries"][id] = merge(all["entries"].contains(id) ? all["entries"][id] : json(), entry);
  const std::string tmp = fmt::format("{}.{}.tmp", file, getpid());
  {
    std::ofstream out(tmp);
    out << all.dump(2) << "\n";
    if (!out) {
      log::warn("peak", "cannot write the GEMM peak cache {} (the peak measured now is used)", tmp);
      fs::remove(tmp, ec);
      return false;
    }
  }
  fs::rename(tmp, file, ec);
  if (ec) {
    log::warn("peak", "cannot write the GEMM peak cache {}: {}", file, ec.message());
    fs::remove(tmp, ec);
    return false;
  }
  return true;
}

std::string cache_file(const PeakCacheOptions& opt) {
  const std::string dir = opt.dir.empty() ? default_peak_cache_dir() : opt.dir;
  return dir.empty() ? std::string() : (fs::path(dir) / kFileName).string();
}

std::string read_cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    auto first = line.find_first_not_of(" \t", colon + 1);
    return first == std::string::npos ? std::string() : line.substr(first);
  }
  return "unknown cpu";
}

}  // namespace

std::string GemmShape::name() const { return fmt::format("{}x{}x{}", m, n, k); }

std::string PeakKey::id() const { return fmt::format("{}|{}|threads={}|{}", cpu, blas_core, threads, arithmetic); }

PeakKey PeakKey::current(int threads, std::string arithmetic) {
  return {read_cpu_model(), blas_info().core, threads, std::move(arithmetic)};
}

std::string default_peak_cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return (fs::path(x) / "claw").string();
  if (const char* h = std::getenv("HOME"); h && *h) return (fs::path(h) / ".cache" / "claw").string();
  return {};
}

double measure_gemm_gflops(const GemmShape& s, double seconds) {
  std::vector<float> a(static_cast<size_t>(s.m * s.k)), b(static_cast<size_t>(s.k * s.n)),
      c(static_cast<size_t>(s.m * s.n));
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 7) * 0.25f - 0.75f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 5) * 0.25f - 0.5f;
  using clock = std::chrono::steady_clock;
  auto run = [&] { gemm(false, false, s.m, s.n, s.k, 1.0f, a.data(), s.k, b.data(), s.n, 0.0f, c.data(), s.n); };
  run();  // warm-up: threads, pages
  double best = 0;
  const auto start = clock::now();
  for (int rep = 0; rep < 3 || std::chrono::duration<double>(clock::now() - start).count() < seconds; ++rep) {
    const auto t0 = clock::now();
    run();
    best = std::max(best, s.flops() / std::chrono::duration<double>(clock::now() - t0).count() / 1e9);
  }
  return best;
}

Peak calibrated_gemm_peak(const PeakKey& key, const std::vector<GemmShape>& shapes, const PeakCacheOptions& opt,
                          const GemmMeasure& measure) {
  const std::string file = cache_file(opt);
  const std::string id = key.id();
  json entry;
  if (!file.empty()) {
    json all = load(file);
    if (all.contains("entries") && all["entries"].contains(id)) entry = all["entries"][id];
  }
  if (!entry.is_object()) entry = json::object();

  std::vector<GemmShape> wanted = shapes;
  wanted.push_back({2048, 2048, 2048});
  std::vector<GemmShape> missing;
  for (const GemmShape& s : wanted) {
    const bool known = !opt.remeasure && entry.contains("shapes") && entry["shapes"].contains(s.name());
    const bool dup = std::any_of(missing.begin(), missing.end(), [&](const GemmShape& m) { return m.name() == s.name(); });
    if (!known && !dup && s.m > 0 && s.n > 0 && s.k > 0) missing.push_back(s);
  }
  const bool fresh = !entry.contains("calibrated");
  for (const GemmShape& s : missing) {
    const double g = measure(s, opt.seconds / static_cast<double>(missing.size()));
    const double before = entry.contains("shapes") ? entry["shapes"].value(s.name(), 0.0) : 0.0;
    entry["shapes"][s.name()] = std::max(g, before);
  }
  double best = entry.value("gflops", 0.0);
  std::string top;
  for (const auto& [name, g] : entry["shapes"].items())
    if (g.get<double>() >= best) best = g.get<double>(), top = name;
  if (top.empty()) top = "a raised step";
  entry["gflops"] = best;
  if (fresh) entry["calibrated"] = now_utc();

  Peak p{best, "", file};
  if (!missing.empty() && !file.empty() && !store(file, id, entry)) p.cache_file.clear();
  std::vector<std::string> names;
  for (const auto& [name, g] : entry["shapes"].items()) names.push_back(name);
  std::string over = fmt::format("best of {} GEMM shape(s) ({}), top {}", names.size(), fmt::join(names, ", "), top);
  const std::string where = p.cache_file.empty() ? std::string("no cache") : "cache " + p.cache_file;
  if (fresh)
    p.provenance = fmt::format("measured now, {} ({})", over, where);
  else
    p.provenance = fmt::format("calibrated {}, {}{} ({})", entry["calibrated"].get<std::string>(), over,
                               missing.empty() ? ""
                               : opt.remeasure ? fmt::format(", {} shape(s) measured again now", missing.size())
                                               : fmt::format(", {} new shape(s) measured now", missing.size()),
                               where);
  if (const auto& raised = entry.value("raised", json::array()); !raised.empty())
    p.provenance += fmt::format("; raised {} time(s), last {}: {}", raised.size(), raised.back().value("at", ""),
                                raised.back().value("why", ""));
  return p;
}

double raise_gemm_peak(const PeakKey& key, double gflops, const std::string& why, const PeakCacheOptions& opt) {
  const std::string file = cache_file(opt);
  const auto cached = [&] {
    json all = file.empty() ? json::object() : load(file);
    return all.contains("entries") && all["entries"].contains(key.id()) ? all["entries"][key.id()].value("gflops", 0.0)
                                                                         : 0.0;
  };
  if (const double c = cached(); c >= gflops) return c;
  log::warn("peak", "{:.1f} GFLOP/s observed ({}) is above the cached GEMM peak; raising the MFU denominator", gflops,
            why);
  if (file.empty()) return gflops;
  json entry = {{"gflops", gflops}, {"raised", json::array({{{"gflops", gflops}, {"why", why}, {"at", now_utc()}}})}};
  store(file, key.id(), entry);
  return std::max(gflops, cached());
}

}  // namespace claw::kernels
