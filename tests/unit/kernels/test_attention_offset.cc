#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "claw/kernels/cpu/attention.h"
#include "claw/kernels/cpu/attention_offset.h"
#include "fd.h"

namespace claw::kernels {
namespace {

using claw::testing::dot;
using claw::testing::fd_max_error;
using claw::testing::max_rel_diff;
using claw::testing::random_vector;

// One geometry: B rows of Tq queries against keys stored with room for Cap
// positions per row (Cap >= Tk).
struct Case {
  int64_t B, Tq, Tk, Cap, H, G, D;
  std::vector<int32_t> q_pos, k_len, q_lo;  // empty: null
  int64_t k_pos0 = 0;
  double cap = 0;  // the scores' soft cap (0: none)
  ScoreScale score() const { return {scale(), cap}; }
  int64_t q_size() const { return B * Tq * H * D; }
  int64_t kv_size() const { return B * Cap * G * D; }
  double scale() const { return 1.0 / std::sqrt(static_cast<double>(D)); }
  AttentionOffsets offsets() const {
    auto p = [](const std::vector<int32_t>& v) { return v.empty() ? nullptr : v.data(); };
    return {.q_pos = p(q_pos), .k_pos0 = k_pos0, .k_len = p(k_len), .q_lo = p(q_lo), .ld_kv_batch = Cap * G * D};
  }
  bool visible(int64_t b, int64_t i, int64_t j) const {
    const int64_t pos = k_pos0 + j, qp = (q_pos.empty() ? 0 : q_pos[b]) + i;
    const int64_t len = k_len.empty() ? Tk : std::min<int64_t>(k_len[b], Tk);
    return j < len && pos <= qp && pos >= (q_lo.empty() ? 0 : q_lo[b * Tq + i]);
  }
};

// The mask written out key by key, in double.
void naive_forward(const Case& c, std::vector<double>& out, std::vector<double>& lse, const std::vector<double>& q,
                   const std::vector<double>& k, const std::vector<double>& v) {
  out.assign(c.q_size(), 0.0);
  lse.assign(c.B * c.H * c.Tq, -std::numeric_limits<double>::infinity());
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h) {
      const int64_t g = h / (c.H / c.G);
      for (int64_t i = 0; i < c.Tq; ++i) {
        const double* qi = &q[((b * c.Tq + i) * c.H + h) * c.D];
        std::vector<double> s(c.Tk, -std::numeric_limits<double>::infinity());
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < c.Tk; ++j) {
          if (!c.visible(b, i, j)) continue;
          double d = 0;
          for (int64_t e = 0; e < c.D; ++e) d += qi[e] * k[((b * c.Cap + j) * c.G + g) * c.D + e];
          s[j] = c.scale() * d;
          if (c.cap > 0) s[j] = c.cap * std::tanh(s[j] / c.cap);
          mx = std::max(mx, s[j]);
        }
        if (mx == -std::numeric_limits<double>::infinity()) continue;
        double sum = 0;
        for (int64_t j = 0; j < c.Tk; ++j) sum += std::exp(s[j] - mx);
        double* oi = &out[((b * c.Tq + i) * c.H + h) * c.D];
        for (int64_t j = 0; j < c.Tk; ++j)
          for (int64_t e = 0; e < c.D; ++e) oi[e] += std::exp(s[j] - mx) / sum * v[((b * c.Cap + j) * c.G + g) * c.D + e];
        lse[(b * c.H + h) * c.Tq + i] = mx + std::log(sum);
      }
    }
}

CpuCtx ctx2() { return CpuCtx{.num_threads = 2}; }

// A KV-cache step: two rows at different lengths, queries the newest tokens,
// a cache with spare room; a document boundary on row 1; GQA.
Case decode_case(int64_t Tq) {
  Case c{.B = 2, .Tq = Tq, .Tk = 37, .Cap = 48, .H = 4, .G = 2, .D = 8};
  c.k_len = {37, 21};
  c.q_pos = {static_cast<int32_t>(37 - Tq), static_cast<int32_t>(21 - Tq)};
  c.q_lo.assign(2 * Tq, 0);
  for (int64_t i = 0; i < Tq; ++i) c.q_lo[Tq + i] = 5;
  return c;
}

TEST(AttentionOffset, ForwardMatchesNaiveReference) {
  for (int64_t Tq : {1, 3, 9, 70}) {
    Case c = decode_case(std::min<int64_t>(Tq, 21));
    if (Tq == 70) c = {.B = 1, .Tq = 70, .Tk = 70, .Cap = 70, .H = 2, .G = 1, .D = 5};  // two query blocks
    auto q = random_vector(c.q_size(), 1), k = random_vector(c.kv_size(), 2), v = random_vector(c.kv_size(), 3);
    std::vector<double> ref_out, ref_lse, out(c.q_size()), lse(c.B * c.H * c.Tq);
    naive_forward(c, ref_out, ref_lse, q, k, v);
    attention_offset_forward<double>(ctx2(), out.data(), lse.data(), q.data(), k.data(), v.data(), c.B, c.Tq, c.Tk,
                                     c.H, c.G, c.D, c.scale(), c.offsets());
    EXPECT_LT(max_rel_diff(out, ref_out), 1e-12) << "Tq " << c.Tq;
    EXPECT_LT(max_rel_diff(lse, ref_lse), 1e-12) << "Tq " << c.Tq;
  }
}

// With no offsets and Tq = Tk the mask is the flash kernel's: same results
// to fp32 rounding, with and without documents.
TEST(AttentionOffset, EqualsFlashKernelWithoutOffsets) {
  const int64_t B = 2, T = 45, H = 4, G = 2, D = 16;
  std::vector<int32_t> seg(B * T, 0);
  for (int64_t i = 20; i < T; ++i) seg[T + i] = 20;
  for (bool docs : {false, true}) {
    auto qd = random_vector(B * T * H * D, 4), kd = random_vector(B * T * G * D, 5), vd = random_vector(B * T * G * D, 6);
    std::vector<float> q(qd.begin(), qd.end()), k(kd.begin(), kd.end()), v(vd.begin(), vd.end());
    std::vector<float> o1(q.size()), o2(q.size()), l1(B * H * T), l2(B * H * T);
    const double scale = 1.0 / std::sqrt(double(D));
    attention_forward<float>(ctx2(), o1.data(), l1.data(), q.data(), k.data(), v.data(), B, T, H, G, D, scale,
                             docs ? seg.data() : nullptr, 16);
    attention_offset_forward<float>(ctx2(), o2.data(), l2.data(), q.data(), k.data(), v.data(), B, T, T, H, G, D,
                                    scale, {.q_lo = docs ? seg.data() : nullptr});
    EXPECT_LT(max_rel_diff(o2, o1), 2e-6);
    EXPECT_LT(max_rel_diff(l2, l1), 2e-6);
  }
}

// Context parallelism: a query chunk against two key chunks at their
// positions, merged by lse, equals attention over the keys together; a key
// chunk wholly after the queries contributes lse = -inf and O = 0.
TEST(AttentionOffset, ChunksMergeByLogSumExp) {
  const int64_t Tq = 12, H = 2, G = 2, D = 8, q0 = 24;
  Case whole{.B = 1, .Tq = Tq, .Tk = 48, .Cap = 48, .H = H, .G = G, .D = D, .q_pos = {q0}};
  auto q = random_vector(whole.q_size(), 7), k = random_vector(whole.kv_size(), 8), v = random_vector(whole.kv_size(), 9);
  std::vector<double> ref_out, ref_lse;
  naive_forward(whole, ref_out, ref_lse, q, k, v);
  std::vector<double> out(whole.q_size(), 0.0), lse(H * Tq, -std::numeric_limits<double>::infinity());
  for (int64_t chunk = 0; chunk < 4; ++chunk) {  // keys [12 chunk, 12 chunk + 12)
    std::vector<double> o(whole.q_size()), l(H * Tq);
    attention_offset_forward<double>(ctx2(), o.data(), l.data(), q.data(), k.data() + chunk * 12 * G * D,
                                     v.data() + chunk * 12 * G * D, 1, Tq, 12, H, G, D, whole.scale(),
                                     {.q_pos = whole.q_pos.data(), .k_pos0 = chunk * 12, .ld_kv_batch = 48 * G * D});
    if (chunk == 3) {
      for (double x : l) EXPECT_EQ(x, -std::numeric_limits<double>::infinity());
      for (double x : o) EXPECT_EQ(x, 0.0);
    }
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Tq; ++i) {
        const double a = lse[h * Tq + i], b = l[h * Tq + i];
        const double m = std::max(a, b);
        if (m == -std::numeric_limits<double>::infinity()) continue;
        const double merged = m + std::log(std::exp(a - m) + std::exp(b - m));
        for (int64_t e = 0; e < D; ++e) {
          double& x = out[(i * H + h) * D + e];
          x = std::exp(a - merged) * x + std::exp(b - merged) * o[(i * H + h) * D + e];
        }
        lse[h * Tq + i] = merged;
      }
  }
  EXPECT_LT(max_rel_diff(out, ref_out), 1e-12);
  EXPECT_LT(max_rel_diff(lse, ref_lse), 1e-12);
}

// Backward by central differences (fp64) through L = sum w * out, over
// offsets, per-row key lengths, documents, queries that see nothing and a
// cache with spare rows.
TEST(AttentionOffset, BackwardMatchesFiniteDifferences) {
  std::vector<Case> cases = {decode_case(1), decode_case(6)};
  Case cp{.B = 1, .Tq = 10, .Tk = 14, .Cap = 16, .H = 3, .G = 1, .D = 4, .q_pos = {4}};
  cp.k_pos0 = 2;  // queries at 4..13 see keys at 2..15: the first key row of each is causal-masked in part
  cases.push_back(cp);
  Case later{.B = 1, .Tq = 5, .Tk = 6, .Cap = 6, .H = 2, .G = 2, .D = 4, .q_pos = {0}};
  later.k_pos0 = 3;  // queries 0-2 see nothing
  cases.push_back(later);
  Case capped = decode_case(6);  // Gemma 2's soft cap, bending scores of up to ~2
  capped.cap = 0.5;
  cases.push_back(capped);
  for (const Case& c : cases) {
    auto q = random_vector(c.q_size(), 11), k = random_vector(c.kv_size(), 12), v = random_vector(c.kv_size(), 13);
    auto w = random_vector(c.q_size(), 14);
    std::vector<double> out(c.q_size()), lse(c.B * c.H * c.Tq);
    auto run = [&] {
      attention_offset_forward<double>(ctx2(), out.data(), lse.data(), q.data(), k.data(), v.data(), c.B, c.Tq, c.Tk,
                                       c.H, c.G, c.D, c.score(), c.offsets());
      return dot(w, out);
    };
    run();
    std::vector<double> ref_out, ref_lse;
    naive_forward(c, ref_out, ref_lse, q, k, v);
    EXPECT_LT(max_rel_diff(out, ref_out), 1e-12) << "out, Tq " << c.Tq << " cap " << c.cap;
    std::vector<double> dq(c.q_size()), dk(c.kv_size(), 0.0), dv(c.kv_size(), 0.0);
    attention_offset_backward<double>(ctx2(), dq.data(), dk.data(), dv.data(), w.data(), q.data(), k.data(), v.data(),
                                      out.data(), lse.data(), c.B, c.Tq, c.Tk, c.H, c.G, c.D, c.score(), c.offsets());
    EXPECT_LT(fd_max_error(q, dq, run), 1e-6) << "dq, Tq " << c.Tq;
    EXPECT_LT(fd_max_error(k, dk, run), 1e-6) << "dk, Tq " << c.Tq;
    EXPECT_LT(fd_max_error(v, dv, run), 1e-6) << "dv, Tq " << c.Tq;
  }
}

// A row's result does not depend on the other rows of the call (sampling is
// reproducible whatever shares the batch) nor on the thread count.
TEST(AttentionOffset, RowResultIndependentOfBatchAndThreads) {
  Case c = decode_case(1);
  auto qd = random_vector(c.q_size(), 21), kd = random_vector(c.kv_size(), 22), vd = random_vector(c.kv_size(), 23);
  std::vector<float> q(qd.begin(), qd.end()), k(kd.begin(), kd.end()), v(vd.begin(), vd.end());
  std::vector<float> out(q.size()), lse(c.B * c.H);
  attention_offset_forward<float>(ctx2(), out.data(), lse.data(), q.data(), k.data(), v.data(), c.B, 1, c.Tk, c.H,
                                  c.G, c.D, c.scale(), c.offsets());
  // Row 1 alone, one thread.
  const int64_t qrow = c.H * c.D, kvrow = c.Cap * c.G * c.D;
  std::vector<float> alone(qrow), lse1(c.H);
  const int32_t pos = c.q_pos[1], len = c.k_len[1], lo = c.q_lo[1];
  attention_offset_forward<float>(CpuCtx{.num_threads = 1}, alone.data(), lse1.data(), q.data() + qrow,
                                  k.data() + kvrow, v.data() + kvrow, 1, 1, c.Tk, c.H, c.G, c.D, c.scale(),
                                  {.q_pos = &pos, .k_len = &len, .q_lo = &lo, .ld_kv_batch = kvrow});
  for (int64_t e = 0; e < qrow; ++e) ASSERT_EQ(alone[e], out[qrow + e]) << e;
}

}  // namespace
}  // namespace claw::kernels
