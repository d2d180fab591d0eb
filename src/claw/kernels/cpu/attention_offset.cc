#include "claw/kernels/cpu/attention_offset.h"
#include "claw/kernels/cpu/route.h"
#include "claw/kernels/cpu/staging.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "claw/core/error.h"
#include "claw/kernels/cpu/blas.h"

namespace claw::kernels {
namespace {

constexpr int64_t kQueryBlock = 64;

struct Geometry {
  int64_t B, Tq, Tk, H, G, D;
  AttentionOffsets off;
  int64_t ldq() const { return H * D; }
  int64_t ldkv() const { return G * D; }
  int64_t kv_batch() const { return off.ld_kv_batch > 0 ? off.ld_kv_batch : Tk * G * D; }
  int64_t keys(int64_t b) const { return off.k_len ? std::min<int64_t>(off.k_len[b], Tk) : Tk; }
  // Visible keys of query i of row b: [first, end) in key indices (may be empty).
  int64_t first(int64_t b, int64_t i) const {
    return off.q_lo ? std::clamp<int64_t>(off.q_lo[b * Tq + i] - off.k_pos0, 0, keys(b)) : 0;
  }
  int64_t end(int64_t b, int64_t i) const {
    const int64_t qp = (off.q_pos ? off.q_pos[b] : 0) + i;
    return std::clamp<int64_t>(qp - off.k_pos0 + 1, 0, keys(b));
  }
};

void check(const Geometry& g) {
  CLAW_CHECK(g.B >= 0 && g.Tq >= 0 && g.Tk >= 0 && g.D >= 1 && g.G >= 1 && g.H % g.G == 0,
             "attention_offset: B={} Tq={} Tk={} H={} G={} D={} (need H a multiple of G)", g.B, g.Tq, g.Tk, g.H, g.G,
             g.D);
  CLAW_CHECK(g.kv_batch() >= g.Tk * g.G * g.D, "attention_offset: ld_kv_batch {} < Tk * G * D = {}", g.kv_batch(),
             g.Tk * g.G * g.D);
  if (!g.off.q_lo) return;
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t i = 1; i < g.Tq; ++i)
      CLAW_CHECK(g.off.q_lo[b * g.Tq + i] >= g.off.q_lo[b * g.Tq + i - 1],
                 "attention_offset: q_lo[{}, {}] = {} decreases (previous {})", b, i, g.off.q_lo[b * g.Tq + i],
                 g.off.q_lo[b * g.Tq + i - 1]);
}

// Turns the score rows s [rows, n] (keys [j0, j0 + n)) into probabilities:
// with lse given (backward) p = exp(s - lse); otherwise the softmax, whose lse
// is stored. Keys a query does not see get p = 0; a query seeing none gets
// lse = -inf.
template <typename T>
void probabilities(const Geometry& g, int64_t b, int64_t i0, int64_t rows, int64_t j0, int64_t n, T* s, T* lse,
                   const T* lse_in) {
  const T ninf = -std::numeric_limits<T>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    T* row = s + r * n;
    const int64_t lo = std::max<int64_t>(g.first(b, i0 + r) - j0, 0), hi = std::max<int64_t>(g.end(b, i0 + r) - j0, lo);
    std::fill(row, row + std::min(lo, n), T(0));
    std::fill(row + std::min(hi, n), row + n, T(0));
    if (lse_in) {
      const T l = lse_in[r];
      for (int64_t j = lo; j < hi; ++j) row[j] = std::exp(row[j] - l);
      continue;
    }
    if (lo >= hi) {
      lse[r] = ninf;
      continue;
    }
    T m = row[lo];
    for (int64_t j = lo + 1; j < hi; ++j) m = std::max(m, row[j]);
    T sum = 0;
    for (int64_t j = lo; j < hi; ++j) sum += row[j] = std::exp(row[j] - m);
    const T inv = T(1) / sum;
    for (int64_t j = lo; j < hi; ++j) row[j] *= inv;
    lse[r] = m + std::log(sum);
  }
}

// The keys the queries [i0, i0 + rows) of row b see, together: [j0, j1).
std::pair<int64_t, int64_t> key_span(const Geometry& g, int64_t b, int64_t i0, int64_t rows) {
  const int64_t j0 = g.first(b, i0), j1 = g.end(b, i0 + rows - 1);
  return {j0, std::max(j0, j1)};
}

}  // namespace

// The fp32/fp64 kernels; the entry points below also take 16-bit storage.
template <typename T>
void attention_offset_forward_impl(const CpuCtx& ctx, T* out, T* lse, const T* q, const T* k, const T* v,
                                   int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t G, int64_t D,
                                   ScoreScale scale, const AttentionOffsets& off) {
  CLAW_CPU_ONLY(ctx, attention_offset_forward);
  const Geometry g{B, Tq, Tk, H, G, D, off};
  check(g);
  const int64_t group = H / G;
  parallel_for_dynamic(ctx, B * H, [&](int64_t task) {
    const int64_t b = task / H, h = task % H, kv = h / group;
    std::vector<T> s, l(kQueryBlock);
    for (int64_t i0 = 0; i0 < Tq; i0 += kQueryBlock) {
      const int64_t rows = std::min(kQueryBlock, Tq - i0);
      const auto [j0, j1] = key_span(g, b, i0, rows);
      const int64_t n = j1 - j0;
      const T* qb = q + (b * Tq + i0) * g.ldq() + h * D;
      T* ob = out + (b * Tq + i0) * g.ldq() + h * D;
      T* lb = lse + (b * H + h) * Tq + i0;
      if (n == 0) {
        for (int64_t r = 0; r < rows; ++r) {
          std::fill(ob + r * g.ldq(), ob + r * g.ldq() + D, T(0));
          lb[r] = -std::numeric_limits<T>::infinity();
        }
        continue;
      }
      s.resize(rows * n);
      const T* kb = k + b * g.kv_batch() + j0 * g.ldkv() + kv * D;
      const T* vb = v + b * g.kv_batch() + j0 * g.ldkv() + kv * D;
      gemm(false, true, rows, n, D, static_cast<T>(scale.scale), qb, g.ldq(), kb, g.ldkv(), T(0), s.data(), n);
      if (scale.capped()) soft_cap(s.data(), n, 0, rows, n, scale.softcap);
      probabilities<T>(g, b, i0, rows, j0, n, s.data(), lb, nullptr);
      gemm(false, false, rows, D, n, T(1), s.data(), n, vb, g.ldkv(), T(0), ob, g.ldq());
    }
  });
}

template <typename T>
void attention_offset_backward_impl(const CpuCtx& ctx, T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k,
                                    const T* v, const T* out, const T* lse, int64_t B, int64_t Tq, int64_t Tk,
                                    int64_t H, int64_t G, int64_t D, ScoreScale scale, const AttentionOffsets& off) {
  CLAW_CPU_ONLY(ctx, attention_offset_backward);
  const Geometry g{B, Tq, Tk, H, G, D, off};
  check(g);
  const int64_t group = H / G;
  const T sc = static_cast<T>(scale.scale), inv_cap = scale.capped() ? static_cast<T>(1.0 / scale.softcap) : T(0);
  parallel_for_dynamic(ctx, B * G, [&](int64_t task) {
    const int64_t b = task / G, kv = task % G;
    const int64_t base = b * g.kv_batch() + kv * D;
    for (int64_t j = 0; j < Tk; ++j) {
      std::fill_n(dk + base + j * g.ldkv(), D, T(0));
      std::fill_n(dv + base + j * g.ldkv(), D, T(0));
    }
    std::vector<T> p, dp, capped, delta(kQueryBlock);
    for (int64_t h = kv * group; h < (kv + 1) * group; ++h)
      for (int64_t i0 = 0; i0 < Tq; i0 += kQueryBlock) {
        const int64_t rows = std::min(kQueryBlock, Tq - i0);
        const int64_t at = (b * Tq + i0) * g.ldq() + h * D;
        const auto [j0, j1] = key_span(g, b, i0, rows);
        const int64_t n = j1 - j0;
        if (n == 0) {
          for (int64_t r = 0; r < rows; ++r) std::fill_n(dq + at + r * g.ldq(), D, T(0));
          continue;
        }
        p.resize(rows * n);
        dp.resize(rows * n);
        const T* kb = k + base + j0 * g.ldkv();
        const T* vb = v + base + j0 * g.ldkv();
        gemm(false, true, rows, n, D, sc, q + at, g.ldq(), kb, g.ldkv(), T(0), p.data(), n);
        if (scale.capped()) {  // the capped scores, kept for dS's factor 1 - (s / cap)^2
          soft_cap(p.data(), n, 0, rows, n, scale.softcap);
          capped = p;
        }
        probabilities<T>(g, b, i0, rows, j0, n, p.data(), nullptr, lse + (b * H + h) * Tq + i0);
        gemm(false, true, rows, n, D, T(1), dout + at, g.ldq(), vb, g.ldkv(), T(0), dp.data(), n);
        for (int64_t r = 0; r < rows; ++r) {
          T d = 0;
          for (int64_t e = 0; e < D; ++e) d += dout[at + r * g.ldq() + e] * out[at + r * g.ldq() + e];
          for (int64_t j = 0; j < n; ++j) dp[r * n + j] = sc * p[r * n + j] * (dp[r * n + j] - d);
          if (scale.capped())
            for (int64_t j = 0; j < n; ++j) {
              const T u = capped[r * n + j] * inv_cap;
              dp[r * n + j] *= T(1) - u * u;
            }
        }
        // dp now holds scale * dS.
        gemm(false, false, rows, D, n, T(1), dp.data(), n, kb, g.ldkv(), T(0), dq + at, g.ldq());
        gemm(true, false, n, D, rows, T(1), dp.data(), n, q + at, g.ldq(), T(1), dk + base + j0 * g.ldkv(), g.ldkv());
        gemm(true, false, n, D, rows, T(1), p.data(), n, dout + at, g.ldq(), T(1), dv + base + j0 * g.ldkv(),
             g.ldkv());
      }
  });
}

// 16-bit storage is staged through the fp32 kernel (kernels/cpu/staging.h).
// Keys and values are read, and their gradients written, only where the
// kernel does: rows [0, Tk) of each batch row, so a cache's unfilled
// positions are never touched.
namespace {
int64_t kv_extent(int64_t B, int64_t Tk, int64_t G, int64_t D, const AttentionOffsets& off) {
  const int64_t row = Tk * G * D, ld = off.ld_kv_batch ? off.ld_kv_batch : row;
  return B > 0 ? (B - 1) * ld + row : 0;
}
template <typename T>
void narrow_kv_rows(const CpuCtx& ctx, const std::vector<float>& x, T* out, int64_t B, int64_t Tk, int64_t G,
                    int64_t D, const AttentionOffsets& off) {
  const int64_t row = Tk * G * D, ld = off.ld_kv_batch ? off.ld_kv_batch : row;
  parallel_for(ctx, B, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) narrow_n(x.data() + b * ld, out + b * ld, row);
  });
}
}  // namespace

template <typename T>
void attention_offset_forward(const CpuCtx& ctx, T* out, acc_t<T>* lse, const T* q, const T* k, const T* v,
                              int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t G, int64_t D, ScoreScale scale,
                              const AttentionOffsets& off) {
  if constexpr (is_half_storage_v<T>) {
    CLAW_CPU_ONLY(ctx, attention_offset_forward);
    const int64_t nq = B * Tq * H * D, nkv = kv_extent(B, Tk, G, D, off);
    const std::vector<float> qf = widened(ctx, q, nq), kf = widened(ctx, k, nkv), vf = widened(ctx, v, nkv);
    std::vector<float> o(static_cast<size_t>(nq));
    attention_offset_forward_impl<float>(ctx, o.data(), lse, qf.data(), kf.data(), vf.data(), B, Tq, Tk, H, G, D,
                                         scale, off);
    narrow_into(ctx, o, out);
  } else {
    attention_offset_forward_impl(ctx, out, lse, q, k, v, B, Tq, Tk, H, G, D, scale, off);
  }
}

template <typename T>
void attention_offset_backward(const CpuCtx& ctx, T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k,
                               const T* v, const T* out, const acc_t<T>* lse, int64_t B, int64_t Tq, int64_t Tk,
                               int64_t H, int64_t G, int64_t D, ScoreScale scale, const AttentionOffsets& off) {
  if constexpr (is_half_storage_v<T>) {
    CLAW_CPU_ONLY(ctx, attention_offset_backward);
    const int64_t nq = B * Tq * H * D, nkv = kv_extent(B, Tk, G, D, off);
    const std::vector<float> qf = widened(ctx, q, nq), kf = widened(ctx, k, nkv), vf = widened(ctx, v, nkv);
    const std::vector<float> of = widened(ctx, out, nq), dof = widened(ctx, dout, nq);
    std::vector<float> dqf(static_cast<size_t>(nq)), dkf(static_cast<size_t>(nkv)), dvf(static_cast<size_t>(nkv));
    attention_offset_backward_impl<float>(ctx, dqf.data(), dkf.data(), dvf.data(), dof.data(), qf.data(), kf.data(),
                                          vf.data(), of.data(), lse, B, Tq, Tk, H, G, D, scale, off);
    narrow_into(ctx, dqf, dq);
    narrow_kv_rows(ctx, dkf, dk, B, Tk, G, D, off);
    narrow_kv_rows(ctx, dvf, dv, B, Tk, G, D, off);
  } else {
    attention_offset_backward_impl(ctx, dq, dk, dv, dout, q, k, v, out, lse, B, Tq, Tk, H, G, D, scale, off);
  }
}

#define CLAW_INSTANTIATE(T)                                                                                      \
  template void attention_offset_forward<T>(const CpuCtx&, T*, acc_t<T>*, const T*, const T*, const T*, int64_t, \
                                            int64_t, int64_t, int64_t, int64_t, int64_t, ScoreScale,             \
                                            const AttentionOffsets&);                                            \
  template void attention_offset_backward<T>(const CpuCtx&, T*, T*, T*, const T*, const T*, const T*, const T*,  \
                                             const T*, const acc_t<T>*, int64_t, int64_t, int64_t, int64_t,      \
                                             int64_t, int64_t, ScoreScale, const AttentionOffsets&);
CLAW_INSTANTIATE(float)
CLAW_INSTANTIATE(double)
CLAW_INSTANTIATE(bfloat16)
CLAW_INSTANTIATE(float16)
#undef CLAW_INSTANTIATE

}  // namespace claw::kernels
