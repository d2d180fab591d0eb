// The MFU denominator: this machine's fp32 GEMM peak, calibrated once and
// cached, so that the same run reports the same MFU and MFU stays <= 100%.
//
// A start-up SGEMM measured in every run moves with the machine's load (one
// run divided by 197 GFLOP/s, the next by 148) and, measured low, lets a
// step exceed it. The calibration takes the best GFLOP/s of several
// repetitions over the model's own GEMM shapes and 2048^3, and keeps it in a
// small JSON file keyed by CPU model, BLAS kernel set, thread count and the
// arithmetic of the steps measured against it (fp32 BLAS, bf16 GEMMs, each
// FP8/MX emulation: a bf16 step must not raise the fp32 figure). Later
// runs reuse it; a shape the entry has not seen is measured and merged; a
// measurement or a training step faster than the entry raises it, so the
// cached figure stays an upper bound of what was ever observed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace claw::kernels {

struct GemmShape {
  int64_t m, n, k;  // C[m,n] = A[m,k] B[k,n]
  std::string name() const;  // "MxNxK"
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
};

// What the peak is measured on: one cache entry each.
struct PeakKey {
  std::string cpu;        // /proc/cpuinfo "model name"
  std::string blas_core;  // OpenBLAS kernel set in use (OPENBLAS_CORETYPE's, when set)
  int threads = 1;
  // What the steps raising this entry compute in: "fp32" (BLAS SGEMM), or
  // the training precision's name (gemm_arithmetic in train/observers.cc).
  // The calibration measures SGEMM whatever it is; only steps of this
  // arithmetic raise it.
  std::string arithmetic = "fp32";
  std::string id() const;  // "cpu|core|threads=N|arithmetic"
  static PeakKey current(int threads, std::string arithmetic = "fp32");
};

struct PeakCacheOptions {
  std::string dir;         // "" = default_peak_cache_dir()
  double seconds = 1.5;    // measuring budget over all unmeasured shapes
  bool remeasure = false;  // measure every shape again (a figure only ever rises: the best is kept)
};

struct Peak {
  double gflops = 0;       // per rank, at key.threads
  std::string provenance;  // "calibrated <date> over <shapes> (cache FILE)" / "measured now ..."
  std::string cache_file;  // "" when the cache could not be used
};

// Best GFLOP/s of one shape over repetitions in about `seconds` (at least
// three after a warm-up call), on the current BLAS thread team.
using GemmMeasure = std::function<double(const GemmShape&, double seconds)>;
double measure_gemm_gflops(const GemmShape& s, double seconds);

// $XDG_CACHE_HOME/claw, else $HOME/.cache/claw, else "" (no cache).
std::string default_peak_cache_dir();

// The cached peak for `key`, measuring (with `measure`) only the shapes in
// `shapes` + 2048^3 that the entry lacks; writes the entry back when it
// changed. A cache that cannot be read or written is warned about and the
// figure measured now is used.
Peak calibrated_gemm_peak(const PeakKey& key, const std::vector<GemmShape>& shapes, const PeakCacheOptions& opt,
                          const GemmMeasure& measure = measure_gemm_gflops);

// Something ran at `gflops` per rank, above the cached peak: record it as
// the new peak for `key` (with `why` in the entry's history). Returns the
// peak now cached (>= gflops).
double raise_gemm_peak(const PeakKey& key, double gflops, const std::string& why, const PeakCacheOptions& opt);

}  // namespace claw::kernels
