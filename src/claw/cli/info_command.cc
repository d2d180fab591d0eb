#include "claw/cli/info_command.h"

#include <cstdio>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "claw/kernels/cpu/bf16_gemm.h"
#include "claw/kernels/cpu/blas.h"
#include "claw/kernels/cpu/peak.h"
#include "claw/kernels/cuda/context.h"
#include "claw/runtime/config.h"

namespace claw::cli {

void add_info_command(CLI::App& app) {
  auto threads = std::make_shared<int>(0);
  auto cache_dir = std::make_shared<std::string>();
  auto recalibrate = std::make_shared<bool>(false);
  auto device = std::make_shared<std::string>("cpu");
  CLI::App* sub = app.add_subcommand("info", "show the BLAS kernel in use, threads, measured SGEMM GFLOP/s and the "
                                             "calibrated GEMM peak (the MFU denominator)");
  sub->add_option("--num-threads", *threads, "threads for the SGEMM measurement (0: all available)");
  sub->add_option("--peak-cache-dir", *cache_dir, "directory of the calibrated GEMM peak cache (default: ~/.cache/claw)");
  sub->add_flag("--recalibrate-peak", *recalibrate,
                 "measure the cached GEMM peak's shapes again (a cache calibrated on a loaded machine only rises)");
  sub->add_option("--device", *device,
                  "cuda[:N]: also name the GPU and measure its BF16 and fp32 cuBLAS GEMM peaks (the GPU MFU denominator)");
  sub->callback([threads, cache_dir, recalibrate, device] {
    kernels::BlasInfo b = kernels::blas_info();
    int n = *threads > 0 ? *threads : kernels::default_num_threads();
    kernels::make_cpu_ctx(n);
    fmt::print("blas_config: {}\nblas_core: {}\nbest_core_for_cpu: {}\nblas_threading: {}\nthreads: {}\n", b.config,
               b.core, b.best_core.empty() ? "(generic)" : b.best_core,
               b.parallel == 2 ? "openmp" : b.parallel == 1 ? "pthreads" : "sequential", n);
    fmt::print("sgemm_2048_gflops: {:.1f}\n", kernels::measure_sgemm_gflops(2048, 1.0));
    fmt::print("cpu_precision_flags: {}\nbf16_gemm: {}\nbf16_gemm_2048_gflops: {:.1f}\n", kernels::cpu_precision_flags(),
               kernels::bf16_gemm_kernel(), kernels::measure_bf16_gemm_gflops(2048, 1.0));
    // The figure `claw train` divides by at this thread count (calibrated now if nothing is cached).
    const kernels::Peak p = kernels::calibrated_gemm_peak(kernels::PeakKey::current(n), {}, {.dir = *cache_dir, .remeasure = *recalibrate});
    fmt::print("gemm_peak_gflops: {:.1f}\ngemm_peak_provenance: {}\n", p.gflops, p.provenance);
    fmt::print("cuda_backend: {}\ncuda_devices: {}\n", kernels::cuda::cuda_built() ? "built" : "not built",
               kernels::cuda::device_count());
    if (*device == "cpu") return;
    runtime::RuntimeConfig probe;
    probe.device = *device;
    const int index = probe.cuda_device();
    kernels::cuda::Device gpu(index);
    const kernels::cuda::DeviceInfo& d = gpu.info();
    fmt::print("gpu: {}\ngpu_compute_capability: {}.{}\ngpu_multiprocessors: {}\ngpu_memory_bytes: {}\n"
               "cuda_runtime: {}\ncuda_driver: {}\n",
               d.name, d.cc_major, d.cc_minor, d.multiprocessors, d.total_bytes, d.runtime_version, d.driver_version);
    fmt::print("gpu_bf16_gemm_tflops: {:.1f}\n", kernels::cuda::measure_bf16_gemm_tflops(gpu.ctx()));
    fmt::print("gpu_fp32_gemm_tflops: {:.1f}\n", kernels::cuda::measure_fp32_gemm_tflops(gpu.ctx()));
  });
}

}  // namespace claw::cli
