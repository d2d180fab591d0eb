// fixed_order_attention_forward, training's attention in the engine's order:
// bitwise what paged_attention_forward gives each document as a sequence of
// its own (any block size, scattered blocks), and the softmax attention it
// stands for (a double-precision reference) with its log-sum-exp; with and
// without a sliding window (7 keys: windows cross the 16-key tiles).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "claw/core/error.h"
#include "claw/kernels/cpu/paged_attention.h"

namespace claw::kernels {
namespace {

struct Case {
  int64_t H, G, D;
  std::vector<std::vector<int64_t>> rows;  // document lengths per row, each row summing to T
  int64_t T() const { return std::accumulate(rows[0].begin(), rows[0].end(), int64_t{0}); }
  int64_t B() const { return static_cast<int64_t>(rows.size()); }
};

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<int32_t> seg_starts(const Case& c) {
  std::vector<int32_t> seg;
  for (const auto& lengths : c.rows) {
    int32_t start = 0;
    for (int64_t len : lengths) {
      seg.insert(seg.end(), static_cast<size_t>(len), start);
      start += static_cast<int32_t>(len);
    }
  }
  return seg;
}

struct Inputs {
  std::vector<float> q, k, v;
  explicit Inputs(const Case& c)
      : q(random_floats(c.B() * c.T() * c.H * c.D, 1)),
        k(random_floats(c.B() * c.T() * c.G * c.D, 2)),
        v(random_floats(c.B() * c.T() * c.G * c.D, 3)) {}
};

// Each document of each row as its own sequence of a paged cache, its
// blocks taken from a shuffled pool, its tokens all new in one step.
std::vector<float> paged(const Case& c, const Inputs& in, int64_t block_size, int64_t window, double cap = 0) {
  const int64_t T = c.T(), H = c.H, G = c.G, D = c.D;
  int64_t blocks = 0;
  for (const auto& lengths : c.rows)
    for (int64_t len : lengths) blocks += (len + block_size - 1) / block_size;
  std::vector<int32_t> pool(static_cast<size_t>(blocks));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937(7));
  std::vector<float> keys(static_cast<size_t>(blocks * G * block_size * D)), values(keys.size());
  const KvView K{KvDtype::f32, keys.data()}, V{KvDtype::f32, values.data()};
  std::vector<PagedSeq> seqs;
  std::vector<int64_t> starts;  // each sequence's first token, as a row of [B, T]
  size_t next = 0;
  for (int64_t b = 0; b < c.B(); ++b) {
    int64_t t0 = 0;
    for (int64_t len : c.rows[static_cast<size_t>(b)]) {
      const int32_t* table = pool.data() + next;
      next += static_cast<size_t>((len + block_size - 1) / block_size);
      for (int64_t p = 0; p < len; ++p)
        for (int64_t g = 0; g < G; ++g) {
          const int64_t row = kv_row(table[p / block_size], p % block_size, g, G, block_size);
          const int64_t src = ((b * T + t0 + p) * G + g) * D;
          kv_store_row(K, row, in.k.data() + src, D);
          kv_store_row(V, row, in.v.data() + src, D);
        }
      seqs.push_back({.first_row = b * T + t0, .num_tokens = len, .context = 0, .blocks = table});
      t0 += len;
    }
  }
  std::vector<float> out(in.q.size());
  paged_attention_forward(CpuCtx{2}, out.data(), in.q.data(), K, V, block_size, seqs.data(),
                          static_cast<int64_t>(seqs.size()), H, G, D, {1.0 / std::sqrt(double(D)), cap}, window);
  return out;
}

const Case kCases[] = {
    {4, 2, 64, {{17, 23}, {40}}},     // D known to the compiler; a document crosses a 16-key tile
    {3, 3, 24, {{5, 1, 34}, {40}}},   // any D; one-token documents
    {2, 1, 128, {{33}, {20, 13}}},    // grouped-query, the other specialised D
};

TEST(FixedOrderAttention, EqualsPagedAttentionPerDocumentBitwise) {
  for (const Case& c : kCases) {
    const Inputs in(c);
    const std::vector<int32_t> seg = seg_starts(c);
    const int64_t B = c.B(), T = c.T();
    std::vector<float> out(in.q.size()), lse(static_cast<size_t>(B * c.H * T));
    for (int64_t window : {0, 7})
      for (double cap : {0.0, 1.5})  // Gemma 2's soft cap too
        for (int threads : {1, 2}) {
          fixed_order_attention_forward(CpuCtx{threads}, out.data(), lse.data(), in.q.data(), in.k.data(),
                                        in.v.data(), B, T, c.H, c.G, c.D, {1.0 / std::sqrt(double(c.D)), cap},
                                        seg.data(), window);
          for (int64_t block_size : {1, 5, 16}) {
            const std::vector<float> want = paged(c, in, block_size, window, cap);
            ASSERT_EQ(0, std::memcmp(want.data(), out.data(), out.size() * sizeof(float)))
                << "D " << c.D << ", block size " << block_size << ", " << threads << " threads, window " << window
                << ", cap " << cap;
          }
        }
  }
}

TEST(FixedOrderAttention, IsSoftmaxAttentionWithItsLogSumExp) {
  for (const Case& c : kCases) {
    const Inputs in(c);
    const std::vector<int32_t> seg = seg_starts(c);
    const int64_t B = c.B(), T = c.T(), H = c.H, G = c.G, D = c.D;
    std::vector<float> out(in.q.size()), lse(static_cast<size_t>(B * H * T));
    const double scale = 1.0 / std::sqrt(double(D));
    for (const auto& [window, cap] : {std::pair<int64_t, double>{0, 0.0}, {7, 0.0}, {7, 1.5}}) {
    fixed_order_attention_forward(CpuCtx{2}, out.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), B, T, H, G,
                                  D, {scale, cap}, seg.data(), window);
    double worst = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h) {
          const int64_t g = h / (H / G), seg_lo = seg[static_cast<size_t>(b * T + t)];
          const int64_t lo = window > 0 ? std::max(seg_lo, t - window + 1) : seg_lo;
          const float* q = in.q.data() + ((b * T + t) * H + h) * D;
          std::vector<double> s;
          auto at = [&](const std::vector<float>& x, int64_t j, int64_t i) {
            return double(x[static_cast<size_t>(((b * T + j) * G + g) * D + i)]);
          };
          for (int64_t j = lo; j <= t; ++j) {
            double d = 0;
            for (int64_t i = 0; i < D; ++i) d += double(q[i]) * at(in.k, j, i);
            s.push_back(cap > 0 ? cap * std::tanh(scale * d / cap) : scale * d);
          }
          const double m = *std::max_element(s.begin(), s.end());
          double z = 0;
          for (double x : s) z += std::exp(x - m);
          worst = std::max(worst, std::abs(lse[static_cast<size_t>((b * H + h) * T + t)] - (m + std::log(z))));
          for (int64_t i = 0; i < D; ++i) {
            double o = 0;
            for (int64_t j = lo; j <= t; ++j)
              o += std::exp(s[static_cast<size_t>(j - lo)] - m) / z * at(in.v, j, i);
            worst = std::max(worst, std::abs(out[static_cast<size_t>(((b * T + t) * H + h) * D + i)] - o));
          }
        }
    EXPECT_LT(worst, 1e-5) << "D " << D << ", window " << window << ", cap " << cap;
    }
  }
}

TEST(FixedOrderAttention, RejectsADocumentStartAfterItsToken) {
  const Case c{2, 2, 16, {{8}}};
  const Inputs in(c);
  std::vector<int32_t> seg(8, 0);
  seg[3] = 4;
  std::vector<float> out(in.q.size()), lse(16);
  try {
    fixed_order_attention_forward(CpuCtx{1}, out.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), 1, 8, 2,
                                  2, 16, 0.25, seg.data());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("seg_start 4 at token 3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace claw::kernels
