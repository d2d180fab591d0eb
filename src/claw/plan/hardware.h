// The hardware catalog: devices, their peaks and memory, and the links
// between them (configs/hardware.toml, built into the binary; a user's TOML
// file adds or replaces entries). The planner's cost and memory models read
// nothing else about the machine.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace claw::plan {

struct Device {
  std::string key;   // catalog name: a100, h100, h200, b200, cpu, ...
  std::string name;  // what it is
  double memory_bytes = 0;
  double memory_bandwidth = 0;             // bytes/s
  std::map<std::string, double> peak;      // dtype -> dense FLOP/s
  double gemm_efficiency = 1.0;            // ceiling of achieved / peak for large GEMMs
  std::map<std::string, double> gemm_efficiency_by_dtype;  // overrides per dtype (FP8 GEMMs reach less of theirs)
  double gemm_knee = 128;                  // see gemm_fraction
  double runtime_overhead_bytes = 0;
  // Temporaries the collective library allocates, as multiples of the
  // largest gradient all-reduce and reduce-scatter payload (MPI on the CPU;
  // NCCL's fixed buffers are part of the runtime overhead on GPUs).
  double all_reduce_temp = 0, reduce_scatter_temp = 0;
  int devices_per_node = 8;
  double intra_node_bandwidth = 0, intra_node_latency = 0;  // bytes/s per device and direction, seconds
  double inter_node_bandwidth = 0, inter_node_latency = 0;
  // Seconds of this device's compute each byte it sends between nodes costs
  // (network_cpu_ns_per_byte): CPU ranks whose TCP stack runs on the cores
  // they compute on, so that traffic, however overlapped, lengthens the
  // step. 0 where a NIC moves the data (GPUs).
  double network_cpu_s_per_byte = 0;

  // Dense peak FLOP/s for a dtype; throws naming the dtypes it has.
  double peak_flops(const std::string& dtype) const;
  // Fraction of peak a GEMM [M, K] x [K, N] in `dtype` reaches: the
  // efficiency ceiling times x / (x + knee) for each dimension.
  double gemm_fraction(double M, double N, double K, const std::string& dtype = "") const;
  // The share of this device each of `ranks` processes gets when they run
  // on it together (claw's CPU ranks on one machine): memory, peaks and
  // memory bandwidth divided, links and overhead per process unchanged.
  Device shared_by(int ranks) const;
};

class Catalog {
 public:
  // The built-in catalog (configs/hardware.toml as compiled in).
  static Catalog builtin();
  // Parses TOML text; `origin` names it in errors.
  static Catalog parse(const std::string& text, const std::string& origin);
  // Adds the devices of a TOML file, replacing those of the same name.
  void merge_file(const std::string& path);

  // Throws claw::Error listing the catalog's devices when `key` is unknown.
  const Device& device(const std::string& key) const;
  std::vector<std::string> keys() const;
  // The device with the most memory (for "what is missing" messages).
  const Device& largest() const;

 private:
  std::map<std::string, Device> devices_;
};

}  // namespace claw::plan
