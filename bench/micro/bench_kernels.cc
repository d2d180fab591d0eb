// Memory-bound CPU kernels at GPT-2 124M training sizes: forward + backward
// time per kernel, with 1 and 2 threads.
//
// Sizes: N = B*T = 1024 rows (B = 1, T = 1024), C = 768, MLP width 4C, 12
// heads of 64; cross-entropy over V = 50257 classes padded to Vp = 50304,
// gradient in place; AdamW, sum_squares and first_non_finite over the 124M
// parameters (124,475,904 with the padded vocabulary).
//
// GB_per_s counts the bytes a kernel must move at least (each array read or
// written once per pass; a read-modify-write counts twice). The yardstick is
// a plain parallel copy over buffers of the same total size (src + dst = the
// bytes the kernel touches), timed in the same run with the same threads:
// pct_copy = GB_per_s / copy GB_per_s. Small working sets live in cache, so
// the copy peer is measured per size.
//
// Every (kernel, threads) variant is first run once and checked against the
// fp64 kernel (or the kernel's definition) on the same inputs; a failure
// prints a check=FAILED line and exits nonzero. Output, one line per figure:
//   kernel=layernorm threads=2 ms=0.410 GB_per_s=38.4 copy_GB_per_s=50.2 pct_copy=76
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "claw/core/philox.h"
#include "claw/kernels/cpu/activations.h"
#include "claw/kernels/cpu/adamw.h"
#include "claw/kernels/cpu/blas.h"
#include "bench_util.h"
#include "claw/kernels/cpu/cross_entropy.h"
#include "claw/kernels/cpu/dropout.h"
#include "claw/kernels/cpu/embedding.h"
#include "claw/kernels/cpu/layernorm.h"
#include "claw/kernels/cpu/reduce.h"
#include "claw/kernels/cpu/rmsnorm.h"
#include "claw/kernels/cpu/rope.h"

namespace {

using claw::CpuCtx;
using claw::RandomStream;
using namespace claw::kernels;

constexpr int64_t kB = 1, kT = 1024, kN = kB * kT, kC = 768, kHidden = 4 * kC, kHeads = 12, kHeadDim = 64;
constexpr int64_t kV = 50257, kVp = 50304;
constexpr int64_t kParams = 124475904;  // GPT-2 124M with wte padded to Vp rows
constexpr int kThreadCounts[] = {1, 2};

using claw::bench::best_seconds;
using claw::bench::now;

// Uniform [lo, hi) from a counter-based stream, so inputs are the same in
// every run and cheap to make at 124M elements.
std::vector<float> uniform(int64_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::vector<float> v(n);
  const RandomStream rng(seed, claw::hash_name("bench_kernels"));
  parallel_for(CpuCtx{2}, n, 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) v[i] = lo + (hi - lo) * rng.uniform(static_cast<uint64_t>(i));
  });
  return v;
}
std::vector<double> to_f64(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Copy bandwidth over src + dst = `bytes`, per thread count (the peer).
double copy_gbps(double bytes, int threads) {
  static std::map<std::pair<int64_t, int>, double> cache;
  const int64_t n = std::max<int64_t>(1024, static_cast<int64_t>(bytes / 2 / sizeof(float)));
  auto key = std::make_pair(n, threads);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  std::vector<float> src(n, 1.f), dst(n);
  const CpuCtx ctx{threads};
  const double s = best_seconds([&] {
    parallel_for(ctx, n, 1 << 14, [&](int64_t b, int64_t e) { std::copy(src.data() + b, src.data() + e, dst.data() + b); });
  });
  return cache[key] = 2.0 * n * sizeof(float) / s / 1e9;
}

void report(const char* kernel, int threads, double seconds, double bytes) {
  const double gbps = bytes / seconds / 1e9, copy = copy_gbps(bytes, threads);
  std::printf("kernel=%s threads=%d ms=%.3f GB_per_s=%.1f copy_GB_per_s=%.1f pct_copy=%.0f\n", kernel, threads,
              seconds * 1e3, gbps, copy, 100.0 * gbps / copy);
  std::fflush(stdout);
}

// Relative error with an absolute floor, as tests/unit/fd.h's max_rel_diff.
template <typename A, typename B>
double max_rel_err(const A* got, const B* ref, int64_t n, double floor = 1.0) {
  double worst = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    double r = static_cast<double>(ref[i]);
    double e = std::abs(static_cast<double>(got[i]) - r) / std::max(floor, std::abs(r));
    if (!(e <= worst)) worst = e;  // NaN sticks
    if (std::isnan(e)) break;
  }
  return worst;
}

// Tolerances are the unit tests' fp32-vs-fp64 bounds (see tests/unit/kernels).
void check(const char* kernel, int threads, const char* what, double err, double tol) {
  if (err <= tol) return;
  std::printf("kernel=%s threads=%d check=FAILED what=%s max_rel_err=%.3g tol=%.1g\n", kernel, threads, what, err,
              tol);
  std::exit(1);
}

void bench_embedding() {
  auto wte = uniform(kVp * kC, 1), wpe = uniform(kT * kC, 2), dout = uniform(kN * kC, 3);
  std::vector<int32_t> tokens(kN);
  const RandomStream rng(4, 0);
  for (int64_t n = 0; n < kN; ++n) tokens[n] = static_cast<int32_t>(rng.block(n)[0] % kV);
  std::vector<float> out(kN * kC), dwte(kVp * kC), dwpe(kT * kC);
  for (int threads : kThreadCounts) {
    const CpuCtx ctx = make_cpu_ctx(threads);
    std::fill(dwte.begin(), dwte.end(), 0.f);
    std::fill(dwpe.begin(), dwpe.end(), 0.f);
    embedding_forward(ctx, out.data(), tokens.data(), wte.data(), wpe.data(), kB, kT, kC);
    embedding_backward(ctx, dwte.data(), dwpe.data(), dout.data(), tokens.data(), kB, kT, kC);
    // Forward is one fp32 add per element: exact. dwte rows of the first 64
    // tokens against a double sum over every occurrence.
    double err = 0;
    for (int64_t n = 0; n < kN; ++n)
      for (int64_t c = 0; c < kC; ++c)
        err = std::max<double>(err, out[n * kC + c] != wte[tokens[n] * kC + c] + wpe[(n % kT) * kC + c]);
    check("embedding", threads, "out", err, 0.0);
    for (int64_t n = 0; n < 64; ++n) {
      std::vector<double> ref(kC, 0.0);
      for (int64_t m = 0; m < kN; ++m)
        if (tokens[m] == tokens[n])
          for (int64_t c = 0; c < kC; ++c) ref[c] += dout[m * kC + c];
      check("embedding", threads, "dwte", max_rel_err(dwte.data() + tokens[n] * kC, ref.data(), kC), 1e-6);
    }
    const double s = best_seconds([&] {
      embedding_forward(ctx, out.data(), tokens.data(), wte.data(), wpe.data(), kB, kT, kC);
      embedding_backward(ctx, dwte.data(), dwpe.data(), dout.data(), tokens.data(), kB, kT, kC);
    });
    // fwd: read a wte row and a wpe row, write out; bwd: read dout, RMW a dwte row and a dwpe row.
    report("embedding", threads, s, 8.0 * kN * kC * sizeof(float));
  }
}

void bench_layernorm() {
  auto x = uniform(kN * kC, 5, -2.f, 3.f), w = uniform(kC, 6), b = uniform(kC, 7), dy = uniform(kN * kC, 8);
  auto xd = to_f64(x), wd = to_f64(w), bd = to_f64(b), dyd = to_f64(dy);
  std::vector<double> y_ref(kN * kC), mean_ref(kN), rstd_ref(kN), dx_ref(kN * kC), dw_ref(kC, 0.0), db_ref(kC, 0.0);
  const CpuCtx one{1};
  layernorm_forward(one, y_ref.data(), mean_ref.data(), rstd_ref.data(), xd.data(), wd.data(), bd.data(), kN, kC,
                    1e-5);
  layernorm_backward(one, dx_ref.data(), dw_ref.data(), db_ref.data(), dyd.data(), xd.data(), wd.data(),
                     mean_ref.data(), rstd_ref.data(), kN, kC, false);
  std::vector<float> y(kN * kC), mean(kN), rstd(kN), dx(kN * kC), dw(kC), db(kC);
  for (int threads : kThreadCounts) {
    const CpuCtx ctx = make_cpu_ctx(threads);
    auto step = [&] {
      layernorm_forward(ctx, y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), kN, kC, 1e-5);
      layernorm_backward(ctx, dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(),
                         rstd.data(), kN, kC, false);
    };
    std::fill(dw.begin(), dw.end(), 0.f);
    std::fill(db.begin(), db.end(), 0.f);
    step();
    check("layernorm", threads, "y", max_rel_err(y.data(), y_ref.data(), kN * kC), 1e-5);
    check("layernorm", threads, "dx", max_rel_err(dx.data(), dx_ref.data(), kN * kC), 1e-5);
    // dweight sums 1024 rows of O(1) terms (size ~30): relative 1e-5 of that.
    check("layernorm", threads, "dweight", max_rel_err(dw.data(), dw_ref.data(), kC), 1e-5);
    check("layernorm", threads, "dbias", max_rel_err(db.data(), db_ref.data(), kC), 1e-5);
    const double s = best_seconds(step);
    report("layernorm", threads, s, 5.0 * kN * kC * sizeof(float));  // fwd: x, y; bwd: dy, x, dx
  }
}

void bench_rmsnorm() {
  auto x = uniform(kN * kC, 9, -2.f, 3.f), w = uniform(kC, 10), dy = uniform(kN * kC, 11);
  auto xd = to_f64(x), wd = to_f64(w), dyd = to_f64(dy);
  std::vector<double> y_ref(kN * kC), rstd_ref(kN), dx_ref(kN * kC), dw_ref(kC, 0.0);
  const CpuCtx one{1};
  rmsnorm_forward(one, y_ref.data(), rstd_ref.data(), xd.data(), wd.data(), kN, kC, 1e-6);
  rmsnorm_backward(one, dx_ref.data(), dw_ref.data(), dyd.data(), xd.data(), wd.data(), rstd_ref.data(), kN, kC,
                   false);
  std::vector<float> y(kN * kC), rstd(kN), dx(kN * kC), dw(kC);
  for (int threads : kThreadCounts) {
    const CpuCtx ctx = make_cpu_ctx(threads);
    auto step = [&] {
      rmsnorm_forward(ctx, y.data(), rstd.data(), x.data(), w.data(), kN, kC, 1e-6);
      rmsnorm_backward(ctx, dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), kN, kC, false);
    };
    std::fill(dw.begin(), dw.end(), 0.f);
    step();
    check("rmsnorm", threads, "y", max_rel_err(y.data(), y_ref.data(), kN * kC), 1e-5);
    check("rmsnorm", threads, "dx", max_rel_err(dx.data(), dx_ref.data(), kN * kC), 1e-5);
    check("rmsnorm", threads, "dweight", max_rel_err(dw.data(), dw_ref.data(), kC), 1e-5);
    const double s = best_seconds(step);
    report("rmsnorm", threads, s, 5.0 * kN * kC * sizeof(float));
  }
}

void bench_rope() {
  std::vector<float> cos(kT * kHeadDim / 2), sin(kT * kHeadDim / 2);
  std::vector<double> cos_d(cos.size()), sin_d(sin.size());
  rope_table(cos.data(), sin.data(), kT, kHeadDim, 10000.0);
  rope_table(cos_d.data(), sin_d.data(), kT, kHeadDim, 10000.0);
  const auto q0 = uniform(kN * kC, 12);
  auto ref = to_f64(q0);
  rope_forward(CpuCtx{1}, ref.data(), cos_d.data(), sin_d.data(), kB, kT, kHeads, kHeadDim);
  for (int threads : kThreadCounts) {
    const CpuCtx ctx = make_cpu_ctx(threads);
    auto q = q0;
    rope_forward(ctx, q.data(), cos.data(), sin.data(), kB, kT, kHeads, kHeadDim);
    check("rope", threads, "fwd", max_rel_err(q.data(), ref.data(), kN * kC), 1e-6);
    rope_backward(ctx, q.data(), cos.data(), sin.data(), kB, kT, kHeads, kHeadDim);
    check("rope", threads, "bwd(fwd(x)) = x", max_rel_err(q.data(), q0.data(), kN * kC), 1e-6);
    const double s = best_seconds([&] {
      rope_forward(ctx, q.data(), cos.data(), sin.data(), kB, kT, kHeads, kHeadDim);
      rope_backward(ctx, q.data(), cos.data(), sin.data(), kB, kT, kHeads, kHeadDim);
    });
    report("rope", threads, s, 4.0 * kN * kC * sizeof(float));  // in place: read + write, twice (one of q, k)
  }
}

void bench_gelu() {
  const int64_t n = kN * kHidden;
  auto x = uniform(n, 13, -6.f, 6.f), dy = uniform(n, 14);
  auto xd = to_f64(x), dyd = to_f64(dy);
  std::vector<double> y_ref(n), dx_ref(n);
  gelu_forward(CpuCtx{1}, y_ref.data(), xd.data(), n);
  gelu_backward(CpuCtx{1}, dx_ref.data(), dyd.data(), xd.data(), n);
  std::vector<float> y(n), dx(n);
  for (int threads : kThreadCounts) {
    const CpuCtx ctx = make_cpu_ctx(threads);
    auto step = [&] {
      gelu_forward(ctx, y.data(), x.data(), n);
      gelu_backward(ctx, dx.data(), dy.data(), x.data(), n);
    };
    step();
    check("gelu", threads, "y", max_rel_err(y.data(), y_ref.data(), n), 1e-6);
    check("gelu", threads, "dx", max_rel_err(dx.data(), dx_ref.data(), n), 1e-6);
    report("gelu", threads, best_seconds(step), 5.0 * n * sizeof(float));  // fwd: x, y; bwd: dy, x, dx
  }
}

void bench_swiglu() {
  const int64_t n = kN * kHidden;
  auto g = uniform(n, 15, -8.f, 8.f), u = uniform(n, 16), dy = uniform(n, 17);
  auto gd = to_f64(g), ud = to_f64(u), dyd = to_f64(dy);
  std::vector<double> y_ref(n), dg_ref(n), du_ref(n);
  swiglu_forward(CpuCtx{1}, y_ref.data(), gd.data(), ud.data(), n);
  swiglu_backward(CpuCtx{1}, dg_ref.data(), du_ref.data(), dyd.data(), gd.data(), ud.data(), n);
  std::vector<float> y(n), dg(n), du(n);
  for (int threads : kThreadCounts) {
    const CpuCtx ctx = make_cpu_ctx(threads);
    auto step = [&] {
      swiglu_forward(ctx, y.data(), g.data(), u.data(), n);
      swiglu_backward(ctx, dg.data(), du.data(), dy.data(), g.data(), u.data(), n);
    };
    step();
    check("swiglu", threads, "y", max_rel_err(y.data(), y_ref.data(), n), 1e-6);
    check("swiglu", threads, "dgate", max_rel_err(dg.data(), dg_ref.data(), n), 1e-6);
    check("swiglu", threads, "dup", max_rel_err(du.data(), du_ref.data(), n), 1e-6);
    // fwd: gate, up, y; bwd: dy, gate, up, dgate, dup.
    report("swiglu", threads, best_seconds(step), 8.0 * n * sizeof(float));
  }
}

void bench_cross_entropy() {
  const auto logits0 = uniform(kN * kVp, 18, -8.f, 8.f);
  std::vector<int32_t> targets(kN);
  const RandomStream rng(19, 0);
  for (int64_t n = 0; n < kN; ++n) targets[n] = n % 97 == 5 ? -1 : static_cast<int32_t>(rng.block(n)[0] % kV);
  // Reference: the fp64 kernel on the first rows (rows are independent); row 5 is ignored.
  constexpr int64_t kRows = 8;
  std::vector<double> ref(logits0.begin(), logits0.begin() + kRows * kVp), loss_ref(kRows), lse_ref(kRows);
  const double scale = 1.0 / kN;
  cross_entropy_forward(CpuCtx{1}, loss_ref.data(), lse_ref.data(), ref.data(), targets.data(), kRows, kV, kVp);
  cross_entropy_backward(CpuCtx{1}, ref.data(), ref.data(), lse_ref.data(), targets.data(), scale, kRows, kV, kVp);
  std::vector<float> logits, losses(kN), lse(kN);
  for (int threads : kThreadCounts) {
    const CpuCtx ctx = make_cpu_ctx(threads);
    logits = logits0;
    auto step = [&] {
      cross_entropy_forward(ctx, losses.data(), lse.data(), logits.data(), targets.data(), kN, kV, kVp);
      cross_entropy_backward(ctx, logits.data(), logits.data(), lse.data(), targets.data(), static_cast<float>(scale),
                             kN, kV, kVp);
    };
    step();
    check("cross_entropy", threads, "loss", max_rel_err(losses.data(), loss_ref.data(), kRows), 1e-5);
    check("cross_entropy", threads, "dlogits", max_rel_err(logits.data(), ref.data(), kRows * kVp, 1e-15), 1e-5);
    // Later steps run on gradients left in place: same work, finite values.
    // fwd: read logits; bwd: read logits, write dlogits (padding columns ignored).
    report("cross_entropy", threads, best_seconds(step, 3), 3.0 * kN * kV * sizeof(float));
  }
}

void bench_adamw() {
  auto p = uniform(kParams, 20), g = uniform(kParams, 21), m = uniform(kParams, 22, -0.01f, 0.01f);
  auto v = uniform(kParams, 23, 0.f, 1e-4f);
  AdamWHyper h;
  h.lr = 6e-4;
  h.beta2 = 0.95;
  h.weight_decay = 0.1;
  h.grad_scale = 0.9;
  h.step = 10;
  constexpr int64_t kSamples = 4096, kStride = kParams / kSamples;
  for (int threads : kThreadCounts) {
    const CpuCtx ctx = make_cpu_ctx(threads);
    // The fp64 kernel on every kStride-th element's current state.
    std::vector<double> ps(kSamples), ms(kSamples), vs(kSamples), gs(kSamples);
    for (int64_t i = 0; i < kSamples; ++i) {
      ps[i] = p[i * kStride];
      ms[i] = m[i * kStride];
      vs[i] = v[i * kStride];
      gs[i] = g[i * kStride];
    }
    adamw_update(CpuCtx{1}, ps.data(), ms.data(), vs.data(), gs.data(), kSamples, h);
    adamw_update(ctx, p.data(), m.data(), v.data(), g.data(), kParams, h);
    std::vector<float> got(kSamples);
    for (int64_t i = 0; i < kSamples; ++i) got[i] = p[i * kStride];
    check("adamw", threads, "param", max_rel_err(got.data(), ps.data(), kSamples), 1e-6);
    for (int64_t i = 0; i < kSamples; ++i) got[i] = v[i * kStride];
    check("adamw", threads, "v", max_rel_err(got.data(), vs.data(), kSamples, 1e-30), 1e-6);
    const double s = best_seconds([&] { adamw_update(ctx, p.data(), m.data(), v.data(), g.data(), kParams, h); }, 3);
    report("adamw", threads, s, 7.0 * kParams * sizeof(float));  // read p, g, m, v; write p, m, v
  }
}

void bench_dropout() {
  const int64_t n = kN * kC;
  const RandomStream rng(24, claw::hash_name("bench.dropout"));
  auto x = uniform(n, 25), dy = uniform(n, 26);
  auto xd = to_f64(x);
  std::vector<double> y_ref(n);
  dropout_forward(CpuCtx{1}, y_ref.data(), xd.data(), n, 0.1, rng, 0);
  std::vector<float> y(n), dx(n);
  for (int threads : kThreadCounts) {
    const CpuCtx ctx = make_cpu_ctx(threads);
    auto step = [&] {
      dropout_forward(ctx, y.data(), x.data(), n, 0.1, rng, 0);
      dropout_backward(ctx, dx.data(), dy.data(), n, 0.1, rng, 0);
    };
    step();
    // A mask mismatch is a relative error of 1.
    check("dropout", threads, "y", max_rel_err(y.data(), y_ref.data(), n), 1e-6);
    for (int64_t i = 0; i < n; ++i) check("dropout", threads, "mask", (y[i] == 0.f) != (dx[i] == 0.f), 0.0);
    report("dropout", threads, best_seconds(step), 4.0 * n * sizeof(float));  // fwd: x, y; bwd: dy, dx
  }
}

void bench_reduce() {
  auto grad = uniform(kParams, 27);
  long double ref = 0;
  for (float x : grad) ref += static_cast<long double>(x) * x;
  auto a = uniform(kN * kC, 28), b = uniform(kN * kC, 29);
  std::vector<float> out(kN * kC);
  for (int threads : kThreadCounts) {
    const CpuCtx ctx = make_cpu_ctx(threads);
    const double ss = sum_squares(ctx, grad.data(), kParams);
    // Double accumulation of 1.2e8 terms: ~1e-16 * sqrt(n) typical, n * 1e-16 worst.
    check("sum_squares", threads, "value", std::abs(ss - static_cast<double>(ref)) / static_cast<double>(ref), 1e-8);
    report("sum_squares", threads, best_seconds([&] { sum_squares(ctx, grad.data(), kParams); }, 3),
           1.0 * kParams * sizeof(float));

    // Worst case for the guard: the only non-finite value is the last one.
    const float last = grad.back();
    grad.back() = std::numeric_limits<float>::infinity();
    check("first_non_finite", threads, "index",
          first_non_finite(ctx, grad.data(), kParams) != kParams - 1, 0.0);
    report("first_non_finite", threads, best_seconds([&] { first_non_finite(ctx, grad.data(), kParams); }, 3),
           1.0 * kParams * sizeof(float));
    grad.back() = last;

    add(ctx, out.data(), a.data(), b.data(), kN * kC);
    for (int64_t i = 0; i < kN * kC; ++i) check("add", threads, "out", out[i] != a[i] + b[i], 0.0);
    report("add", threads, best_seconds([&] { add(ctx, out.data(), a.data(), b.data(), kN * kC); }),
           3.0 * kN * kC * sizeof(float));
  }
}

}  // namespace

int main(int argc, char** argv) {
  ensure_fast_blas(argc, argv);
  bench_embedding();
  bench_layernorm();
  bench_rmsnorm();
  bench_rope();
  bench_gelu();
  bench_swiglu();
  bench_dropout();
  bench_cross_entropy();
  bench_adamw();
  bench_reduce();
  return 0;
}
