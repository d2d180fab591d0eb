#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "claw/core/error.h"
#include "claw/kernels/cpu/attention.h"
#include "fd.h"

namespace claw::kernels {
namespace {

using claw::testing::dot;
using claw::testing::fd_max_error;
using claw::testing::random_vector;

// seg_start [B, T] as a vector; empty means null (plain causal).
using Segments = std::vector<int32_t>;
const int32_t* ptr(const Segments& seg) { return seg.empty() ? nullptr : seg.data(); }

// seg_start of rows packed with documents of the given lengths (row b's
// lengths sum to T): each token points at its document's first token.
Segments documents(const std::vector<std::vector<int64_t>>& rows) {
  Segments seg;
  for (const auto& lengths : rows) {
    int32_t start = 0;
    for (int64_t len : lengths) {
      seg.insert(seg.end(), len, start);
      start += static_cast<int32_t>(len);
    }
  }
  return seg;
}

struct Case {
  int64_t B, T, H, G, D, block;
  double cap = 0;  // the scores' soft cap (0: none)
  int64_t q_size() const { return B * T * H * D; }
  int64_t kv_size() const { return B * T * G * D; }
  double scale() const { return 1.0 / std::sqrt(static_cast<double>(D)); }
  ScoreScale score() const { return {scale(), cap}; }
};

// Materialises every T x T score matrix with the explicit mask: query i sees
// keys [lo, i], lo = seg_start[b, i] (0 without segments); double throughout.
void naive_forward(const Case& c, std::vector<double>& out, std::vector<double>& lse, const std::vector<double>& q,
                   const std::vector<double>& k, const std::vector<double>& v, const Segments& seg = {}) {
  out.assign(c.q_size(), 0.0);
  lse.assign(c.B * c.H * c.T, 0.0);
  std::vector<double> s(c.T);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h) {
      const int64_t g = h / (c.H / c.G);
      for (int64_t i = 0; i < c.T; ++i) {
        const double* qi = &q[((b * c.T + i) * c.H + h) * c.D];
        const int64_t lo = seg.empty() ? 0 : seg[b * c.T + i];
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = lo; j <= i; ++j) {
          const double* kj = &k[((b * c.T + j) * c.G + g) * c.D];
          double dotp = 0;
          for (int64_t d = 0; d < c.D; ++d) dotp += qi[d] * kj[d];
          s[j] = c.scale() * dotp;
          if (c.cap > 0) s[j] = c.cap * std::tanh(s[j] / c.cap);
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int64_t j = lo; j <= i; ++j) sum += std::exp(s[j] - mx);
        double* oi = &out[((b * c.T + i) * c.H + h) * c.D];
        for (int64_t j = lo; j <= i; ++j) {
          const double p = std::exp(s[j] - mx) / sum;
          const double* vj = &v[((b * c.T + j) * c.G + g) * c.D];
          for (int64_t d = 0; d < c.D; ++d) oi[d] += p * vj[d];
        }
        lse[(b * c.H + h) * c.T + i] = mx + std::log(sum);
      }
    }
}

template <typename T>
std::vector<T> cast(const std::vector<double>& x) {
  return std::vector<T>(x.begin(), x.end());
}

// Largest |a - ref| relative to the largest |ref|; NaN if any entry is NaN.
template <typename T>
double rel_error(const std::vector<T>& a, const std::vector<double>& ref) {
  double err = 0, mag = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double e = std::abs(static_cast<double>(a[i]) - ref[i]);
    if (std::isnan(e)) return e;
    err = std::max(err, e);
    mag = std::max(mag, std::abs(ref[i]));
  }
  return err / std::max(mag, 1e-30);
}

struct Inputs {
  std::vector<double> q, k, v;
};
// Queries scaled up so scores span several units: the online-softmax rescaling
// then matters and a wrong running max would show.
Inputs make_inputs(const Case& c, uint64_t seed) {
  return {random_vector(c.q_size(), seed, -3, 3), random_vector(c.kv_size(), seed + 1),
          random_vector(c.kv_size(), seed + 2)};
}

template <typename T>
void check_forward(const Case& c, double tol, const Segments& seg = {}) {
  const Inputs in = make_inputs(c, 10 * c.T + c.D);
  std::vector<double> ref_out, ref_lse;
  naive_forward(c, ref_out, ref_lse, in.q, in.k, in.v, seg);
  auto q = cast<T>(in.q), k = cast<T>(in.k), v = cast<T>(in.v);
  std::vector<T> out(c.q_size()), lse(c.B * c.H * c.T);
  for (int threads : {1, 2}) {
    attention_forward<T>(CpuCtx{threads}, out.data(), lse.data(), q.data(), k.data(), v.data(), c.B, c.T, c.H,
                         c.G, c.D, c.score(), ptr(seg), c.block);
    EXPECT_LT(rel_error(out, ref_out), tol) << "out, T=" << c.T << " D=" << c.D << " threads=" << threads;
    EXPECT_LT(rel_error(lse, ref_lse), tol) << "lse, T=" << c.T << " D=" << c.D << " threads=" << threads;
  }
}

// T not a multiple of the block, T = 1, T below one SIMD width, D with a
// partial vector, GQA (G = 2 and G = 1), MHA, B = 2, and several block sizes.
const Case kForwardCases[] = {
    {2, 37, 4, 2, 24, 16}, {1, 1, 2, 1, 16, 16},  {2, 5, 4, 1, 24, 16},  {1, 100, 4, 1, 24, 32},
    {2, 64, 4, 4, 64, 64}, {1, 200, 2, 2, 64, 64}, {2, 70, 6, 3, 40, 48}, {1, 33, 2, 2, 130, 16},
};

// Tolerances relative to the largest |reference|: fp32 errors seen are up to
// ~4e-7 (a few ulps after sums over <= 200 keys), fp64 ~1e-15.
TEST(Attention, ForwardMatchesNaiveFloat) {
  for (const Case& c : kForwardCases) check_forward<float>(c, 2e-6);
}

TEST(Attention, ForwardMatchesNaiveDouble) {
  for (const Case& c : kForwardCases) check_forward<double>(c, 1e-13);
}

// L = sum(w * out): dq, dk, dv against central differences of the double forward.
void check_backward_fd(const Case& c, int backward_threads = 2, const Segments& seg = {}) {
  Inputs in = make_inputs(c, 100 + c.T);
  auto w = random_vector(c.q_size(), 7);
  std::vector<double> out(c.q_size()), lse(c.B * c.H * c.T);
  // One thread for the thousands of tiny forward calls: on a loaded machine a
  // parallel region can wait a scheduler tick for its second thread.
  auto loss = [&] {
    attention_forward<double>(CpuCtx{1}, out.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), c.B, c.T,
                              c.H, c.G, c.D, c.score(), ptr(seg), c.block);
    return dot(w, out);
  };
  loss();
  // NaN-filled: every gradient element must be overwritten.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> dq(c.q_size(), nan), dk(c.kv_size(), nan), dv(c.kv_size(), nan);
  attention_backward<double>(CpuCtx{backward_threads}, dq.data(), dk.data(), dv.data(), w.data(), in.q.data(),
                             in.k.data(), in.v.data(), out.data(), lse.data(), c.B, c.T, c.H, c.G, c.D, c.score(),
                             ptr(seg), c.block);
  // fd.h's 1e-6; the errors seen are ~1e-8 (central-difference truncation).
  EXPECT_LT(fd_max_error(in.q, dq, loss), 1e-6) << "dq";
  EXPECT_LT(fd_max_error(in.k, dk, loss), 1e-6) << "dk";
  EXPECT_LT(fd_max_error(in.v, dv, loss), 1e-6) << "dv";
}

// GQA (two query heads per kv head), B = 2, three blocks of 16 with a partial
// last one, and D = 12 (one full fp64 vector plus a tail).
TEST(Attention, BackwardMatchesFiniteDifferencesGqa) { check_backward_fd({2, 37, 4, 2, 12, 16}); }

// MHA, T spanning four blocks exactly.
TEST(Attention, BackwardMatchesFiniteDifferencesMha) { check_backward_fd({1, 64, 2, 2, 16, 16}); }

// T = 1 (a single visible key: P = 1, so dq = dk = 0).
TEST(Attention, BackwardMatchesFiniteDifferencesSingleToken) { check_backward_fd({2, 1, 2, 1, 8, 16}); }

// B * G = 1 cannot keep two threads busy, so each kv head's backward is cut
// into query chunks whose dk, dv partials are summed afterwards (five blocks
// in five chunks by area: {0, 1}, {2}, {3}, {4} and an empty one).
TEST(Attention, BackwardMatchesFiniteDifferencesSplitAcrossThreads) { check_backward_fd({1, 70, 2, 1, 8, 16}); }

// The split changes only the order of the dk, dv sums, and is repeatable.
TEST(Attention, BackwardSplitMatchesUnsplitAndRepeats) {
  const Case c{1, 300, 4, 1, 64, 32};
  const Inputs in = make_inputs(c, 9);
  const auto dout = random_vector(c.q_size(), 10);
  std::vector<double> out(c.q_size()), lse(c.B * c.H * c.T);
  attention_forward<double>(CpuCtx{1}, out.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), c.B, c.T,
                            c.H, c.G, c.D, c.scale(), nullptr, c.block);
  auto grads = [&](int threads) {
    std::vector<double> g(c.q_size() + 2 * c.kv_size(), std::numeric_limits<double>::quiet_NaN());
    double* dq = g.data();
    double* dk = dq + c.q_size();
    double* dv = dk + c.kv_size();
    attention_backward<double>(CpuCtx{threads}, dq, dk, dv, dout.data(), in.q.data(), in.k.data(), in.v.data(),
                               out.data(), lse.data(), c.B, c.T, c.H, c.G, c.D, c.scale(), nullptr, c.block);
    return g;
  };
  const auto one = grads(1), two = grads(2), again = grads(2);
  EXPECT_LT(rel_error(two, one), 1e-13);
  EXPECT_EQ(0, std::memcmp(two.data(), again.data(), two.size() * sizeof(double)));
}

// ---------------------------------------------------------------------------
// Packed sequences: seg_start masks attention to each token's document.

// Documents shorter than, equal to and longer than the block, documents of
// length 1, boundaries on and off block edges, a different layout per batch
// row, a row that is one document, GQA and MHA, partial last blocks and D
// with a partial vector.
struct PackedCase {
  Case c;
  std::vector<std::vector<int64_t>> docs;  // document lengths per batch row
};
const PackedCase kPackedCases[] = {
    {{2, 70, 4, 2, 24, 16}, {{5, 16, 1, 30, 18}, {40, 30}}},
    {{2, 37, 4, 2, 24, 16}, {std::vector<int64_t>(37, 1), {37}}},
    {{1, 100, 4, 1, 24, 32}, {{32, 32, 36}}},
    {{1, 200, 2, 2, 64, 64}, {{150, 1, 49}}},
    {{1, 33, 2, 2, 130, 16}, {{3, 17, 13}}},
    {{3, 50, 6, 3, 40, 48}, {{50}, {1, 49}, {49, 1}}},
};

// Same tolerances as the causal cases: the masked sums are shorter.
TEST(Attention, ForwardWithDocumentsMatchesNaiveFloat) {
  for (const PackedCase& p : kPackedCases) check_forward<float>(p.c, 2e-6, documents(p.docs));
}

TEST(Attention, ForwardWithDocumentsMatchesNaiveDouble) {
  for (const PackedCase& p : kPackedCases) check_forward<double>(p.c, 1e-13, documents(p.docs));
}

// Documents of 10, 1, 16 and 18 tokens (one per block edge and between) and
// a second row of 20 + 25; GQA.
TEST(Attention, BackwardWithDocumentsMatchesFiniteDifferences) {
  check_backward_fd({2, 45, 4, 2, 12, 16}, 2, documents({{10, 1, 16, 18}, {20, 25}}));
}

// B * G = 1 on two threads: backward runs in query chunks of about equal
// cost, {0, 1}, {2}, {3, 4} (and two empty ones). Chunk {2} reaches key block
// 0 only from row 7 (where its first document starts), and chunk {3, 4},
// whose first document starts at token 48, never reaches key blocks 0-2:
// their partial dk, dv rows must still sum correctly.
TEST(Attention, BackwardWithDocumentsSplitAcrossThreadsMatchesFiniteDifferences) {
  check_backward_fd({1, 70, 2, 1, 8, 16}, 2, documents({{7, 40, 1, 22}}));
}

// Any seg_start with 0 <= seg_start[i] <= i, non-decreasing, is computed
// exactly, not only documents: a sliding window of the last 20 keys.
TEST(Attention, SlidingWindowMatchesNaiveAndFiniteDifferences) {
  auto window = [](const Case& c, int64_t w) {
    Segments seg(c.B * c.T);
    for (int64_t i = 0; i < c.B * c.T; ++i) seg[i] = static_cast<int32_t>(std::max<int64_t>(0, i % c.T - w + 1));
    return seg;
  };
  const Case c{2, 70, 4, 2, 24, 16};
  check_forward<float>(c, 2e-6, window(c, 20));
  check_forward<double>(c, 1e-13, window(c, 20));
  const Case small{1, 40, 2, 1, 8, 16};
  check_backward_fd(small, 2, window(small, 20));
}

// Gemma 2's soft cap, S = c tanh(S / c), at c = 2 where the scaled-up
// queries' scores reach well past it: forward against the naive reference,
// backward (the factor 1 - (S / c)^2) by finite differences, with a window.
TEST(Attention, SoftCapMatchesNaiveAndFiniteDifferences) {
  const Case c{2, 37, 4, 2, 24, 16, 2.0};
  check_forward<float>(c, 2e-6);
  check_forward<double>(c, 1e-13);
  check_backward_fd({1, 40, 2, 1, 8, 16, 2.0});
  check_backward_fd({1, 70, 2, 1, 8, 16, 2.0});  // split across threads
  Segments window(40);
  for (int64_t i = 0; i < 40; ++i) window[i] = static_cast<int32_t>(std::max<int64_t>(0, i - 11));
  check_backward_fd({1, 40, 2, 2, 8, 16, 2.0}, 2, window);
}

// The key property: attention over a packed row equals attention run on
// each document alone (outputs, lse and gradients). The separate runs are
// gathered back into the packed layout and compared relative to the largest
// entry; they differ only in rounding (tiles start at other offsets).
template <typename T>
void check_packed_equals_separate(const Case& c, const std::vector<std::vector<int64_t>>& docs, int threads,
                                  double tol) {
  const Segments seg = documents(docs);
  const Inputs in = make_inputs(c, 21);
  const auto q = cast<T>(in.q), k = cast<T>(in.k), v = cast<T>(in.v), dout = cast<T>(random_vector(c.q_size(), 22));
  const CpuCtx ctx{threads};
  std::vector<T> out(c.q_size()), lse(c.B * c.H * c.T), dq(c.q_size()), dk(c.kv_size()), dv(c.kv_size());
  attention_forward<T>(ctx, out.data(), lse.data(), q.data(), k.data(), v.data(), c.B, c.T, c.H, c.G, c.D,
                       c.scale(), seg.data(), c.block);
  attention_backward<T>(ctx, dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(),
                        lse.data(), c.B, c.T, c.H, c.G, c.D, c.scale(), seg.data(), c.block);

  std::vector<double> s_out(c.q_size()), s_lse(lse.size()), s_dq(c.q_size()), s_dk(c.kv_size()), s_dv(c.kv_size());
  for (int64_t b = 0; b < c.B; ++b) {
    int64_t start = 0;
    for (int64_t len : docs[b]) {
      const Case d{1, len, c.H, c.G, c.D, c.block};
      // Rows [start, start + len) of batch row b are contiguous in [B, T, N, D].
      auto slice = [&](const std::vector<T>& x, int64_t N) {
        const auto first = x.begin() + (b * c.T + start) * N * c.D;
        return std::vector<T>(first, first + len * N * c.D);
      };
      auto put = [&](std::vector<double>& dst, const std::vector<T>& x, int64_t N) {
        std::copy(x.begin(), x.end(), dst.begin() + (b * c.T + start) * N * c.D);
      };
      const auto dq_ = slice(q, c.H), dk_ = slice(k, c.G), dv_ = slice(v, c.G), ddout = slice(dout, c.H);
      std::vector<T> o(d.q_size()), l(c.H * len), gq(d.q_size()), gk(d.kv_size()), gv(d.kv_size());
      attention_forward<T>(ctx, o.data(), l.data(), dq_.data(), dk_.data(), dv_.data(), 1, len, c.H, c.G, c.D,
                           c.scale(), nullptr, c.block);
      attention_backward<T>(ctx, gq.data(), gk.data(), gv.data(), ddout.data(), dq_.data(), dk_.data(), dv_.data(),
                            o.data(), l.data(), 1, len, c.H, c.G, c.D, c.scale(), nullptr, c.block);
      put(s_out, o, c.H);
      put(s_dq, gq, c.H);
      put(s_dk, gk, c.G);
      put(s_dv, gv, c.G);
      for (int64_t h = 0; h < c.H; ++h)
        std::copy_n(l.begin() + h * len, len, s_lse.begin() + (b * c.H + h) * c.T + start);
      start += len;
    }
  }
  EXPECT_LT(rel_error(out, s_out), tol) << "out";
  EXPECT_LT(rel_error(lse, s_lse), tol) << "lse";
  EXPECT_LT(rel_error(dq, s_dq), tol) << "dq";
  EXPECT_LT(rel_error(dk, s_dk), tol) << "dk";
  EXPECT_LT(rel_error(dv, s_dv), tol) << "dv";
}

// fp64, blocks of 16: errors seen ~1e-15.
TEST(Attention, PackedEqualsSeparateDocumentsDouble) {
  for (int threads : {1, 2})
    check_packed_equals_separate<double>({2, 70, 4, 2, 24, 16}, {{5, 16, 1, 30, 18}, {40, 30}}, threads, 1e-12);
  // B * G = 1 on two threads: the packed backward runs split into query chunks.
  check_packed_equals_separate<double>({1, 90, 2, 1, 8, 16}, {{20, 1, 33, 36}}, 2, 1e-12);
}

// fp32 at the default block on a GPT-2-like packed row: T = 1024 made of
// documents of 100-300 tokens (the last one cut to fit). Errors seen up to
// 3.5e-7.
TEST(Attention, PackedEqualsSeparateDocumentsFloat) {
  const Case c{2, 1024, 4, 2, 64, kAttentionBlock};
  std::mt19937_64 gen(5);
  std::uniform_int_distribution<int64_t> length(100, 300);
  std::vector<std::vector<int64_t>> docs(c.B);
  for (auto& row : docs)
    for (int64_t left = c.T; left > 0; left -= row.back()) row.push_back(std::min(left, length(gen)));
  check_packed_equals_separate<float>(c, docs, 2, 1e-6);
}

// One document per row is plain causal attention through the same tiles:
// bitwise equal to seg_start = null.
TEST(Attention, SingleDocumentIsBitwisePlainCausal) {
  const Case c{2, 150, 4, 2, 64, kAttentionBlock};
  const Inputs in = make_inputs(c, 8);
  auto q = cast<float>(in.q), k = cast<float>(in.k), v = cast<float>(in.v);
  auto dout = cast<float>(random_vector(c.q_size(), 9));
  auto run = [&](const int32_t* seg) {
    std::vector<float> r(2 * c.q_size() + 2 * c.kv_size() + c.B * c.H * c.T);
    float* out = r.data();
    float* dq = out + c.q_size();
    float* dk = dq + c.q_size();
    float* dv = dk + c.kv_size();
    float* lse = dv + c.kv_size();
    attention_forward<float>(CpuCtx{2}, out, lse, q.data(), k.data(), v.data(), c.B, c.T, c.H, c.G, c.D, c.scale(),
                             seg);
    attention_backward<float>(CpuCtx{2}, dq, dk, dv, dout.data(), q.data(), k.data(), v.data(), out, lse, c.B, c.T,
                              c.H, c.G, c.D, c.scale(), seg);
    return r;
  };
  const Segments zeros(c.B * c.T, 0);
  EXPECT_EQ(run(nullptr), run(zeros.data()));
}

// The contract the kernel relies on is checked: a row starts at 0,
// seg_start never decreases and never points past its own token.
TEST(Attention, RejectsInvalidSegments) {
  const Case c{1, 4, 1, 1, 8, 16};
  std::vector<float> x(c.q_size()), lse(c.T);
  for (const Segments& seg : {Segments{1, 1, 1, 1}, Segments{-1, 0, 0, 0}, Segments{0, 0, 3, 2},
                              Segments{0, 2, 2, 2}}) {
    float* p = x.data();
    EXPECT_THROW(attention_forward<float>(CpuCtx{1}, p, lse.data(), p, p, p, c.B, c.T, c.H, c.G, c.D, c.scale(),
                                          seg.data(), c.block),
                 Error);
    EXPECT_THROW(attention_backward<float>(CpuCtx{1}, p, p, p, p, p, p, p, p, lse.data(), c.B, c.T, c.H, c.G, c.D,
                                           c.scale(), seg.data(), c.block),
                 Error);
  }
}

// The fp32 fast paths (vector exp, register tiles, in-register transpose)
// agree with fp64 on a case with several default-size blocks and a partial
// last block: errors seen ~7e-7 of the largest entry, checked at 1e-5.
TEST(Attention, FloatMatchesDouble) {
  const Case c{2, 300, 4, 2, 64, kAttentionBlock};
  const Inputs in = make_inputs(c, 3);
  const auto dout = random_vector(c.q_size(), 4);
  const CpuCtx ctx{2};
  std::vector<double> out(c.q_size()), lse(c.B * c.H * c.T), dq(c.q_size()), dk(c.kv_size()), dv(c.kv_size());
  attention_forward<double>(ctx, out.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), c.B, c.T, c.H,
                            c.G, c.D, c.scale());
  attention_backward<double>(ctx, dq.data(), dk.data(), dv.data(), dout.data(), in.q.data(), in.k.data(),
                             in.v.data(), out.data(), lse.data(), c.B, c.T, c.H, c.G, c.D, c.scale());
  auto qf = cast<float>(in.q), kf = cast<float>(in.k), vf = cast<float>(in.v), doutf = cast<float>(dout);
  std::vector<float> outf(c.q_size()), lsef(c.B * c.H * c.T), dqf(c.q_size()), dkf(c.kv_size()), dvf(c.kv_size());
  attention_forward<float>(ctx, outf.data(), lsef.data(), qf.data(), kf.data(), vf.data(), c.B, c.T, c.H, c.G,
                           c.D, c.scale());
  attention_backward<float>(ctx, dqf.data(), dkf.data(), dvf.data(), doutf.data(), qf.data(), kf.data(),
                            vf.data(), outf.data(), lsef.data(), c.B, c.T, c.H, c.G, c.D, c.scale());
  EXPECT_LT(rel_error(outf, out), 1e-5);
  EXPECT_LT(rel_error(lsef, lse), 1e-5);
  EXPECT_LT(rel_error(dqf, dq), 1e-5);
  EXPECT_LT(rel_error(dkf, dk), 1e-5);
  EXPECT_LT(rel_error(dvf, dv), 1e-5);
}

// Every output element is computed by one task in a fixed order, so results
// are bitwise equal for any thread count; gradients are overwritten, so
// garbage (NaN) already in dq, dk, dv must not leak through.
TEST(Attention, BitwiseIdenticalAcrossThreadCountsAndOverwritesGrads) {
  const Case c{2, 150, 4, 2, 64, kAttentionBlock};
  const Inputs in = make_inputs(c, 5);
  auto q = cast<float>(in.q), k = cast<float>(in.k), v = cast<float>(in.v);
  auto dout = cast<float>(random_vector(c.q_size(), 6));
  struct Result {
    std::vector<float> out, lse, dq, dk, dv;
  };
  auto run = [&](int threads, const int32_t* seg) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    Result r{std::vector<float>(c.q_size(), nan), std::vector<float>(c.B * c.H * c.T, nan),
             std::vector<float>(c.q_size(), nan), std::vector<float>(c.kv_size(), nan),
             std::vector<float>(c.kv_size(), nan)};
    attention_forward<float>(CpuCtx{threads}, r.out.data(), r.lse.data(), q.data(), k.data(), v.data(), c.B, c.T,
                             c.H, c.G, c.D, c.scale(), seg);
    attention_backward<float>(CpuCtx{threads}, r.dq.data(), r.dk.data(), r.dv.data(), dout.data(), q.data(),
                              k.data(), v.data(), r.out.data(), r.lse.data(), c.B, c.T, c.H, c.G, c.D, c.scale(),
                              seg);
    return r;
  };
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  for (const Segments& seg : {Segments{}, documents({{60, 90}, {1, 100, 49}})}) {
    const Result one = run(1, ptr(seg)), two = run(2, ptr(seg));
    EXPECT_TRUE(same(one.out, two.out));
    EXPECT_TRUE(same(one.lse, two.lse));
    EXPECT_TRUE(same(one.dq, two.dq));
    EXPECT_TRUE(same(one.dk, two.dk));
    EXPECT_TRUE(same(one.dv, two.dv));
    for (const auto* g : {&one.dq, &one.dk, &one.dv})
      EXPECT_TRUE(std::all_of(g->begin(), g->end(), [](float x) { return std::isfinite(x); }));
  }
}

// B = 0 or T = 0: nothing to compute, nothing touched.
TEST(Attention, EmptyShapesAreNoOps) {
  for (const Case& c : {Case{0, 5, 2, 1, 8, 16}, Case{3, 0, 2, 1, 8, 16}}) {
    float x = 1.0f;
    attention_forward<float>(CpuCtx{2}, &x, &x, &x, &x, &x, c.B, c.T, c.H, c.G, c.D, c.scale(), nullptr, c.block);
    attention_backward<float>(CpuCtx{2}, &x, &x, &x, &x, &x, &x, &x, &x, &x, c.B, c.T, c.H, c.G, c.D, c.scale(),
                              nullptr, c.block);
    EXPECT_EQ(x, 1.0f);
  }
}

}  // namespace
}  // namespace claw::kernels
