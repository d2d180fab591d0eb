#include "claw/plan/hardware.h"

#include <algorithm>

#include <toml++/toml.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "claw/core/error.h"

namespace claw::plan {

extern const char* const kBuiltinHardwareToml;  // generated from configs/hardware.toml

double Device::peak_flops(const std::string& dtype) const {
  auto it = peak.find(dtype);
  if (it == peak.end()) {
    std::vector<std::string> have;
    for (const auto& [k, v] : peak) have.push_back(k);
    fail("device {} has no peak for dtype {}; it has: {}", key, dtype, fmt::join(have, ", "));
  }
  return it->second;
}

double Device::gemm_fraction(double M, double N, double K, const std::string& dtype) const {
  auto s = [&](double x) { return x / (x + gemm_knee); };
  auto it = gemm_efficiency_by_dtype.find(dtype);
  return (it == gemm_efficiency_by_dtype.end() ? gemm_efficiency : it->second) * s(M) * s(N) * s(K);
}

Device Device::shared_by(int ranks) const {
  CLAW_CHECK(ranks >= 1, "shared by {} ranks", ranks);
  Device d = *this;
  d.memory_bytes /= ranks;
  d.memory_bandwidth /= ranks;
  for (auto& [k, v] : d.peak) v /= ranks;
  d.network_cpu_s_per_byte *= ranks;  // a byte's CPU time, in a share of the cores
  return d;
}

namespace {

double number(const toml::table& t, const std::string& field, const std::string& where) {
  const toml::node* n = t.get(field);
  if (!n) fail("{}: missing field {}", where, field);
  if (auto v = n->value<double>()) {
    if (!(*v >= 0)) fail("{}: {} must be a non-negative number, got {}", where, field, *v);
    return *v;
  }
  fail("{}: {} must be a number", where, field);
}

Device parse_device(const std::string& key, const toml::table& t, const std::string& origin) {
  const std::string where = fmt::format("{} [device.{}]", origin, key);
  static const std::vector<std::string> known = {
      "name", "memory_gib", "memory_gbs", "peak_tflops", "gemm_efficiency", "gemm_knee", "runtime_overhead_gib",
      "devices_per_node", "intra_node_gbs", "intra_node_latency_us", "inter_node_gbs", "inter_node_latency_us",
      "collective_temp", "network_cpu_ns_per_byte"};
  for (const auto& [k, v] : t)
    if (std::find(known.begin(), known.end(), std::string(k.str())) == known.end())
      fail("{}: unknown field '{}' (fields: {})", where, k.str(), fmt::join(known, ", "));
  Device d;
  d.key = key;
  d.name = t["name"].value_or(key);
  d.memory_bytes = number(t, "memory_gib", where) * 1024.0 * 1024.0 * 1024.0;
  d.memory_bandwidth = number(t, "memory_gbs", where) * 1e9;
  const toml::table* peak = t["peak_tflops"].as_table();
  if (!peak || peak->empty()) fail("{}: peak_tflops must be a table such as {{ bf16 = 989.4 }}", where);
  for (const auto& [k, v] : *peak) {
    auto x = v.value<double>();
    if (!x || !(*x > 0)) fail("{}: peak_tflops.{} must be a positive number", where, k.str());
    d.peak[std::string(k.str())] = *x * 1e12;
  }
  // A number, or a table by dtype whose `default` applies to the others.
  if (const toml::table* eff = t["gemm_efficiency"].as_table()) {
    for (const auto& [k, v] : *eff) {
      auto x = v.value<double>();
      if (!x || !(*x > 0 && *x <= 1)) fail("{}: gemm_efficiency.{} must be in (0, 1]", where, k.str());
      if (k.str() == "default")
        d.gemm_efficiency = *x;
      else
        d.gemm_efficiency_by_dtype[std::string(k.str())] = *x;
    }
    if (!eff->contains("default")) fail("{}: gemm_efficiency as a table needs a `default` entry", where);
  } else {
    d.gemm_efficiency = number(t, "gemm_efficiency", where);
    if (!(d.gemm_efficiency > 0 && d.gemm_efficiency <= 1)) fail("{}: gemm_efficiency must be in (0, 1]", where);
  }
  d.gemm_knee = number(t, "gemm_knee", where);
  d.runtime_overhead_bytes = number(t, "runtime_overhead_gib", where) * 1024.0 * 1024.0 * 1024.0;
  if (const toml::node* ct = t.get("collective_temp")) {
    const toml::table* tt = ct->as_table();
    if (!tt) fail("{}: collective_temp must be a table such as {{ all_reduce = 0.6, reduce_scatter = 2.4 }}", where);
    for (const auto& [k, v] : *tt) {
      auto x = v.value<double>();
      if (!x || *x < 0) fail("{}: collective_temp.{} must be a non-negative number", where, k.str());
      if (k.str() == "all_reduce") d.all_reduce_temp = *x;
      else if (k.str() == "reduce_scatter") d.reduce_scatter_temp = *x;
      else fail("{}: collective_temp.{}: expected all_reduce or reduce_scatter", where, k.str());
    }
  }
  d.devices_per_node = static_cast<int>(number(t, "devices_per_node", where));
  if (d.devices_per_node < 1) fail("{}: devices_per_node must be at least 1", where);
  d.intra_node_bandwidth = number(t, "intra_node_gbs", where) * 1e9;
  d.intra_node_latency = number(t, "intra_node_latency_us", where) * 1e-6;
  d.inter_node_bandwidth = number(t, "inter_node_gbs", where) * 1e9;
  d.inter_node_latency = number(t, "inter_node_latency_us", where) * 1e-6;
  if (t.contains("network_cpu_ns_per_byte")) {
    d.network_cpu_s_per_byte = number(t, "network_cpu_ns_per_byte", where) * 1e-9;
    if (d.network_cpu_s_per_byte < 0) fail("{}: network_cpu_ns_per_byte must not be negative", where);
  }
  if (!(d.memory_bytes > 0 && d.memory_bandwidth > 0 && d.intra_node_bandwidth > 0 && d.inter_node_bandwidth > 0))
    fail("{}: memory_gib, memory_gbs, intra_node_gbs and inter_node_gbs must be positive", where);
  return d;
}

std::map<std::string, Device> parse_devices(const toml::table& root, const std::string& origin) {
  std::map<std::string, Device> out;
  for (const auto& [k, v] : root)
    if (k.str() != "device") fail("{}: unknown table '{}' (the catalog holds [device.<name>] tables)", origin, k.str());
  const toml::table* devices = root["device"].as_table();
  if (!devices) fail("{}: no [device.<name>] tables", origin);
  for (const auto& [k, v] : *devices) {
    const toml::table* t = v.as_table();
    if (!t) fail("{}: device.{} must be a table", origin, k.str());
    out[std::string(k.str())] = parse_device(std::string(k.str()), *t, origin);
  }
  return out;
}

toml::table parse_toml(const std::string& text, const std::string& origin) {
  try {
    return toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    fail("{}:{}:{}: {}", origin, e.source().begin.line, e.source().begin.column, e.description());
  }
}

}  // namespace

Catalog Catalog::parse(const std::string& text, const std::string& origin) {
  Catalog c;
  c.devices_ = parse_devices(parse_toml(text, origin), origin);
  return c;
}

Catalog Catalog::builtin() { return parse(kBuiltinHardwareToml, "configs/hardware.toml (built in)"); }

void Catalog::merge_file(const std::string& path) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    if (e.source().begin.line == 0) fail("--hardware-catalog {}: cannot read the file: {}", path, e.description());
    fail("--hardware-catalog {}:{}:{}: {}", path, e.source().begin.line, e.source().begin.column, e.description());
  }
  for (auto& [k, d] : parse_devices(root, "--hardware-catalog " + path)) devices_[k] = std::move(d);
}

const Device& Catalog::device(const std::string& key) const {
  auto it = devices_.find(key);
  if (it == devices_.end())
    fail("--device {}: not in the hardware catalog; known devices: {} (add one with --hardware-catalog FILE)", key,
         fmt::join(keys(), ", "));
  return it->second;
}

std::vector<std::string> Catalog::keys() const {
  std::vector<std::string> k;
  for (const auto& [name, d] : devices_) k.push_back(name);
  return k;
}

const Device& Catalog::largest() const {
  CLAW_CHECK(!devices_.empty(), "empty hardware catalog");
  const Device* best = nullptr;
  for (const auto& [k, d] : devices_)
    if (!best || d.memory_bytes > best->memory_bytes) best = &d;
  return *best;
}

}  // namespace claw::plan
