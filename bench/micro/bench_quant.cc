// The low-precision linear layer (kernels/cpu/quant.h) against the machine's
// roofs, measured in the same run:
//   decode (M = 1): weight bytes read per second, as a fraction of the copy
//                   bandwidth of a buffer larger than the caches (the
//                   memory roofline a decoding step is bound by); the
//                   product runs over copies of the matrix that together
//                   exceed the caches (256 MiB at least), as a model's
//                   layers do in a decoding step;
//   prefill (M = 128): GFLOP/s, against BLAS SGEMM on the same fp32 shape
//                   (the peer) and the fp32 batch-invariant kernel.
// Shapes are a ~1B Llama's MLP (C 2048, F 8192: up [8192, 2048], down
// [2048, 8192]).
//
//   build/bin/bench_quant [threads]
//   build/bin/bench_quant THREADS N K   one shape
//   build/bin/bench_quant --copy-only [threads]   the copy bandwidth alone (bench/drivers/bench_serve.py)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "claw/core/parallel.h"
#include "claw/kernels/cpu/blas.h"
#include "claw/kernels/cpu/quant.h"

using namespace claw;
using namespace claw::kernels;
using claw::bench::best_seconds;

int main(int argc, char** argv) {
  const bool copy_only = argc > 1 && std::string(argv[1]) == "--copy-only";
  if (copy_only) --argc, ++argv;
  const int threads = argc > 1 ? std::atoi(argv[1]) : default_num_threads();
  const CpuCtx ctx{threads};
  // Copy bandwidth: 2 x 512 MiB.
  const int64_t cn = int64_t{128} << 20;
  std::vector<float> src(cn, 1.f), dst(cn);
  const double copy_s = best_seconds(
      [&] {
        parallel_for(ctx, cn, 1 << 16, [&](int64_t b, int64_t e) { std::copy(src.data() + b, src.data() + e, dst.data() + b); });
      },
      3, 0.5);
  const double copy_gbps = 2.0 * cn * 4 / copy_s / 1e9;
  src = {};
  dst = {};
  std::printf("machine: threads=%d copy_GB_per_s=%.1f quant_isa=%s\n", threads, copy_gbps, quant_kernel_isa().c_str());
  if (copy_only) return 0;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0, 0.02f);
  std::vector<std::pair<int64_t, int64_t>> shapes = {{8192, 2048}, {2048, 8192}};
  if (argc > 3) shapes = {{std::atol(argv[2]), std::atol(argv[3])}};  // bench_quant THREADS N K
  for (auto [N, K] : shapes) {
    std::vector<float> w(N * K), x(128 * K), y(128 * N);
    for (float& v : w) v = nd(rng);
    for (float& v : x) v = nd(rng) * 50;
    const double sgemm_s = best_seconds([&] {
      gemm(false, true, 128, N, K, 1.0f, x.data(), K, w.data(), K, 0.0f, y.data(), N);
    });
    const double flops = 2.0 * 128 * N * K;
    std::printf("shape=[%ld,%ld] sgemm_M128_GFLOP_per_s=%.1f\n", long(N), long(K), flops / sgemm_s / 1e9);
    for (WeightType t : {WeightType::f32, WeightType::bf16, WeightType::f16, WeightType::q8_0, WeightType::q6_k,
                          WeightType::q5_k, WeightType::q4_k, WeightType::q4_0}) {
      const WeightMatrix W = WeightMatrix::quantize(ctx, t, w.data(), N, K);
      const size_t copies = std::max<size_t>(2, (size_t{256} << 20) / W.bytes() + 1);
      const std::vector<WeightMatrix> layers(copies, W);
      const double dec = best_seconds([&] {
                           for (const WeightMatrix& L : layers) weight_linear_forward(ctx, y.data(), x.data(), L, nullptr, 1);
                         }) / static_cast<double>(copies);
      const double pre = best_seconds([&] { weight_linear_forward(ctx, y.data(), x.data(), W, nullptr, 128); });
      const double gbps = W.bytes() / dec / 1e9;
      std::printf("shape=[%ld,%ld] type=%s decode_us=%.0f weight_GB_per_s=%.1f pct_roofline=%.0f "
                  "prefill_M128_GFLOP_per_s=%.1f vs_sgemm=%.2f\n",
                  long(N), long(K), std::string(weight_type_name(t)).c_str(), dec * 1e6, gbps,
                  100 * gbps / copy_gbps, flops / pre / 1e9, sgemm_s / pre);
      std::fflush(stdout);
    }
  }
}
