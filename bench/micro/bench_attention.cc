// Causal flash attention on CPU: forward and backward times for the GPT-2
// training shapes, plain and packed (rows of documents with seg_start), with
// the single-core SGEMM rate measured in the same run as the yardstick.
//
// FLOPs counted are only those the mask allows: each T x T x D product over
// the lower triangle is 2 * B * H * (T^2 / 2) * D; over a packed row, the sum
// of 2 * H * (L^2 / 2) * D over its documents of length L. Forward has two
// (Q K^T, P V); backward five (Q K^T recomputed, dO V^T, P^T dO, dS^T Q,
// dS K). Masked work on tiles a diagonal or a document boundary crosses, the
// softmax exponentials and the packing are overhead, not credited.
//
// Each shape is checked against a naive fp64 attention (out, dq, dk, dv of the
// first and last kv heads and their query heads) before it is timed. Output:
// one line per figure, e.g.
//   kernel=attention pass=fwd B=4 T=256 H=12 G=12 D=64 block=128 threads=2 ms=... gflops=... pct_sgemm_core=...
// where pct_sgemm_core = gflops / (threads * single-core SGEMM 1024^3 GFLOP/s).
// Packed shapes add docs=MIN-MAX to the shape: each row is filled with
// documents of uniformly random length in [MIN, MAX] (fixed seed; the last
// one cut to fit) and gflops counts only the within-document work. Their
// peer, per_doc_ms, is the same documents run as one plain causal call each
// (what a caller without seg_start would do); per_doc_ratio = per_doc_ms / ms.
// Times are the best of several repetitions; on a machine shared with other
// work, the 2-thread figures are only meaningful when both cores were free.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "claw/kernels/cpu/attention.h"
#include "claw/kernels/cpu/blas.h"
#include "bench_util.h"

namespace {

using claw::CpuCtx;
using namespace claw::kernels;

using claw::bench::best_seconds;
using claw::bench::now;

double sgemm_gflops(int64_t n) {
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  const double s = best_seconds([&] { gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n); },
                                3, n >= 512 ? 0.5 : 0.1);
  return 2.0 * n * n * n / s / 1e9;
}

struct Shape {
  int64_t B, T, H, G, D;
  int64_t block = kAttentionBlock;
  int64_t doc_min = 0, doc_max = 0;  // packed rows of documents of these lengths; 0: plain causal
  int64_t q_size() const { return B * T * H * D; }
  int64_t kv_size() const { return B * T * G * D; }
};

// seg_start [B, T] of rows filled with random-length documents, the
// documents, and the sum of L^2 over them; empty and B * T^2 for a plain
// causal shape.
struct Document {
  int64_t b, start, len;
};
struct Packing {
  std::vector<int32_t> seg_start;
  std::vector<Document> docs;
  double sum_sq = 0;
};
Packing pack_documents(const Shape& s) {
  Packing p;
  if (s.doc_min == 0) {
    p.sum_sq = double(s.B) * s.T * s.T;
    return p;
  }
  std::mt19937 gen(7);
  std::uniform_int_distribution<int64_t> length(s.doc_min, s.doc_max);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t start = 0; start < s.T;) {
      const int64_t len = std::min(length(gen), s.T - start);
      p.seg_start.insert(p.seg_start.end(), len, static_cast<int32_t>(start));
      p.docs.push_back({b, start, len});
      p.sum_sq += double(len) * len;
      start += len;
    }
  return p;
}

// Naive fp64 attention for kv head g of batch b, materialising each of its
// query heads' T x T probabilities (query i sees keys seg_start[i]..i, or
// 0..i): out and dq rows of every head of the group (head-major), and dk, dv
// rows of g summed over them.
struct GroupRef {
  std::vector<double> out, dq;  // [H / G, T, D]
  std::vector<double> dk, dv;   // [T, D]
};
GroupRef naive_group(const Shape& s, const std::vector<float>& q, const std::vector<float>& k,
                     const std::vector<float>& v, const std::vector<float>& dout,
                     const std::vector<int32_t>& seg_start, int64_t b, int64_t g, double scale) {
  const int64_t T = s.T, D = s.D, hpg = s.H / s.G;
  GroupRef r{std::vector<double>(hpg * T * D), std::vector<double>(hpg * T * D), std::vector<double>(T * D),
             std::vector<double>(T * D)};
  auto K = [&](int64_t t, int64_t d) { return double(k[((b * T + t) * s.G + g) * D + d]); };
  auto V = [&](int64_t t, int64_t d) { return double(v[((b * T + t) * s.G + g) * D + d]); };
  std::vector<double> p(T);
  for (int64_t hh = 0; hh < hpg; ++hh) {
    const int64_t h = g * hpg + hh;
    auto Q = [&](int64_t t, int64_t d) { return double(q[((b * T + t) * s.H + h) * D + d]); };
    auto dO = [&](int64_t t, int64_t d) { return double(dout[((b * T + t) * s.H + h) * D + d]); };
    double* out = &r.out[hh * T * D];
    double* dq = &r.dq[hh * T * D];
    for (int64_t i = 0; i < T; ++i) {
      const int64_t lo = seg_start.empty() ? 0 : seg_start[b * T + i];
      double mx = -1e300, sum = 0;
      for (int64_t j = lo; j <= i; ++j) {
        double dotp = 0;
        for (int64_t d = 0; d < D; ++d) dotp += Q(i, d) * K(j, d);
        p[j] = scale * dotp;
        mx = std::max(mx, p[j]);
      }
      for (int64_t j = lo; j <= i; ++j) sum += p[j] = std::exp(p[j] - mx);
      for (int64_t j = lo; j <= i; ++j) {
        p[j] /= sum;
        for (int64_t d = 0; d < D; ++d) out[i * D + d] += p[j] * V(j, d);
      }
      double delta = 0;
      for (int64_t d = 0; d < D; ++d) delta += dO(i, d) * out[i * D + d];
      for (int64_t j = lo; j <= i; ++j) {
        double dp = 0;
        for (int64_t d = 0; d < D; ++d) dp += dO(i, d) * V(j, d);
        const double ds = scale * p[j] * (dp - delta);
        for (int64_t d = 0; d < D; ++d) {
          dq[i * D + d] += ds * K(j, d);
          r.dk[j * D + d] += ds * Q(i, d);
          r.dv[j * D + d] += p[j] * dO(i, d);
        }
      }
    }
  }
  return r;
}

// Max |got - ref| / max |ref| over the [T, D] slice (b, n) of a [B, T, N, D] tensor.
double slice_error(const std::vector<float>& got, const double* ref, int64_t b, int64_t n, int64_t N, int64_t T,
                   int64_t D) {
  double err = 0, mag = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < D; ++d) {
      const double x = got[((b * T + t) * N + n) * D + d], y = ref[t * D + d];
      if (std::isnan(x)) return INFINITY;
      err = std::max(err, std::abs(x - y));
      mag = std::max(mag, std::abs(y));
    }
  return err / mag;
}

void run_shape(const Shape& s, const std::vector<int>& thread_counts, double sgemm_core) {
  std::mt19937 gen(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto fill = [&](int64_t n) {
    std::vector<float> x(n);
    for (auto& e : x) e = normal(gen);
    return x;
  };
  const auto q = fill(s.q_size()), k = fill(s.kv_size()), v = fill(s.kv_size()), dout = fill(s.q_size());
  std::vector<float> out(s.q_size()), lse(s.B * s.H * s.T), dq(s.q_size()), dk(s.kv_size()), dv(s.kv_size());
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.D));
  const Packing packing = pack_documents(s);
  const int32_t* seg_start = packing.seg_start.empty() ? nullptr : packing.seg_start.data();

  // (b, kv head) pairs checked: the first and the last.
  std::vector<std::pair<int64_t, int64_t>> checked{{0, 0}};
  if (s.B * s.G > 1) checked.emplace_back(s.B - 1, s.G - 1);
  std::vector<GroupRef> refs;
  for (auto [b, g] : checked) refs.push_back(naive_group(s, q, k, v, dout, packing.seg_start, b, g, scale));

  for (int threads : thread_counts) {
    const CpuCtx ctx = make_cpu_ctx(threads);
    auto fwd = [&] {
      attention_forward<float>(ctx, out.data(), lse.data(), q.data(), k.data(), v.data(), s.B, s.T, s.H, s.G, s.D,
                               scale, seg_start, s.block);
    };
    auto bwd = [&] {
      attention_backward<float>(ctx, dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(),
                                out.data(), lse.data(), s.B, s.T, s.H, s.G, s.D, scale, seg_start, s.block);
    };
    fwd();
    bwd();
    double worst = 0;
    for (size_t c = 0; c < refs.size(); ++c) {
      const auto [b, g] = checked[c];
      const GroupRef& ref = refs[c];
      const int64_t hpg = s.H / s.G;
      for (int64_t hh = 0; hh < hpg; ++hh)
        worst = std::max({worst, slice_error(out, &ref.out[hh * s.T * s.D], b, g * hpg + hh, s.H, s.T, s.D),
                          slice_error(dq, &ref.dq[hh * s.T * s.D], b, g * hpg + hh, s.H, s.T, s.D)});
      worst = std::max({worst, slice_error(dk, ref.dk.data(), b, g, s.G, s.T, s.D),
                        slice_error(dv, ref.dv.data(), b, g, s.G, s.T, s.D)});
    }
    const auto shape = [&] {
      char buf[160];
      int n = std::snprintf(buf, sizeof buf,
                            "B=%" PRId64 " T=%" PRId64 " H=%" PRId64 " G=%" PRId64 " D=%" PRId64 " block=%" PRId64,
                            s.B, s.T, s.H, s.G, s.D, s.block);
      if (s.doc_min > 0)
        std::snprintf(buf + n, sizeof buf - n, " docs=%" PRId64 "-%" PRId64, s.doc_min, s.doc_max);
      return std::string(buf);
    }();
    if (!(worst < 1e-4)) {
      std::printf("kernel=attention check=FAILED %s threads=%d max_rel_err=%.3g\n", shape.c_str(), threads, worst);
      continue;
    }
    const double tri = packing.sum_sq * s.H * s.D;  // FLOPs of one masked product (2 * L^2/2 * ... per document)
    const double t_fwd = best_seconds(fwd), t_bwd = best_seconds(bwd);
    // The per-document peer: a document's rows are contiguous in
    // [B, T, N, D]; its lse goes to [H, L] at offset (b * T + start) * H.
    double peer_fwd = 0, peer_bwd = 0;
    if (!packing.docs.empty()) {
      std::vector<float> doc_lse(lse.size());
      auto each = [&](auto&& fn) {
        for (const Document& d : packing.docs) {
          const int64_t row = d.b * s.T + d.start;
          fn(row * s.H * s.D, row * s.G * s.D, &doc_lse[row * s.H], d.len);
        }
      };
      auto fwd_docs = [&] {
        each([&](int64_t qo, int64_t ko, float* l, int64_t len) {
          attention_forward<float>(ctx, &out[qo], l, &q[qo], &k[ko], &v[ko], 1, len, s.H, s.G, s.D, scale, nullptr,
                                   s.block);
        });
      };
      auto bwd_docs = [&] {
        each([&](int64_t qo, int64_t ko, float* l, int64_t len) {
          attention_backward<float>(ctx, &dq[qo], &dk[ko], &dv[ko], &dout[qo], &q[qo], &k[ko], &v[ko], &out[qo], l,
                                    1, len, s.H, s.G, s.D, scale, nullptr, s.block);
        });
      };
      fwd_docs();
      peer_fwd = best_seconds(fwd_docs);
      peer_bwd = best_seconds(bwd_docs);
    }
    auto line = [&](const char* pass, double sec, double flops, double peer) {
      const double gf = flops / sec / 1e9;
      std::printf("kernel=attention pass=%s %s threads=%d ms=%.3f gflops=%.1f pct_sgemm_core=%.0f max_rel_err=%.1e",
                  pass, shape.c_str(), threads, sec * 1e3, gf, 100.0 * gf / (threads * sgemm_core), worst);
      if (peer > 0) std::printf(" per_doc_ms=%.3f per_doc_ratio=%.2f", peer * 1e3, peer / sec);
      std::printf("\n");
    };
    line("fwd", t_fwd, 2 * tri, peer_fwd);
    line("bwd", t_bwd, 5 * tri, peer_bwd);
    line("fwd+bwd", t_fwd + t_bwd, 7 * tri, peer_fwd + peer_bwd);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  ensure_fast_blas(argc, argv);
  make_cpu_ctx(1);
  const double sgemm64 = sgemm_gflops(64), sgemm1024 = sgemm_gflops(1024);
  std::printf("kernel=sgemm M=64 N=64 K=64 threads=1 gflops=%.1f\n", sgemm64);
  std::printf("kernel=sgemm M=1024 N=1024 K=1024 threads=1 gflops=%.1f\n", sgemm1024);
  const int max_threads = default_num_threads();
  std::vector<int> threads{1};
  if (max_threads > 1) {
    threads.push_back(max_threads);
    make_cpu_ctx(max_threads);
    std::printf("kernel=sgemm M=1024 N=1024 K=1024 threads=%d gflops=%.1f\n", max_threads, sgemm_gflops(1024));
  }
  const Shape shapes[] = {
      {4, 256, 12, 12, 64},   // GPT-2 124M micro-batch
      {8, 256, 4, 4, 64},     // gpt2-tiny
      {4, 1024, 12, 12, 64},  // GPT-2 at its full context
      {4, 2048, 12, 12, 64},
      {4, 2048, 12, 12, 64, 256},  // the larger block the header suggests for long sequences
      {1, 4096, 12, 12, 64},
      {1, 4096, 12, 12, 64, 256},
      {1, 1024, 4, 1, 128},   // multi-query, D = 128: one kv head, backward split across threads
      // Packed rows: GPT-2 124M at its full context filled with short
      // documents (~1/5 of the causal work), at the default block and at
      // 64, which wastes less around each boundary; and long documents.
      {4, 1024, 12, 12, 64, kAttentionBlock, 100, 300},
      {4, 1024, 12, 12, 64, 64, 100, 300},
      {1, 4096, 12, 12, 64, kAttentionBlock, 500, 1500},
  };
  for (const Shape& s : shapes) run_shape(s, threads, sgemm1024);
}
