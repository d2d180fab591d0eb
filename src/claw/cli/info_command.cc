#include "claw/cli/info_command.h"

#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "claw/kernels/cpu/blas.h"

namespace claw::cli {

void add_info_command(CLI::App& app) {
  auto threads = std::make_shared<int>(0);
  CLI::App* sub = app.add_subcommand("info", "show the BLAS kernel in use, threads and measured SGEMM GFLOP/s");
  sub->add_option("--num-threads", *threads, "threads for the SGEMM measurement (0: all available)");
  sub->callback([threads] {
    kernels::BlasInfo b = kernels::blas_info();
    int n = *threads > 0 ? *threads : kernels::default_num_threads();
    kernels::make_cpu_ctx(n);
    fmt::print("blas_config: {}\nblas_core: {}\nbest_core_for_cpu: {}\nblas_threading: {}\nthreads: {}\n", b.config,
               b.core, b.best_core.empty() ? "(generic)" : b.best_core,
               b.parallel == 2 ? "openmp" : b.parallel == 1 ? "pthreads" : "sequential", n);
    fmt::print("sgemm_2048_gflops: {:.1f}\n", kernels::measure_sgemm_gflops(2048, 1.0));
  });
}

}  // namespace claw::cli
