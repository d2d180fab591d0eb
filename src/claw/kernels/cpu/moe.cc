#include "claw/kernels/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "claw/core/error.h"
#include "claw/kernels/cpu/blas.h"
#include "claw/kernels/cpu/rowwise_linear.h"

namespace claw::kernels {

MoeScore parse_moe_score(std::string_view s) {
  if (s == "softmax") return MoeScore::softmax;
  if (s == "sigmoid") return MoeScore::sigmoid;
  fail("--moe-router-score-function {}: expected softmax or sigmoid", s);
}

MoeDrop parse_moe_drop(std::string_view s) {
  if (s == "probs") return MoeDrop::probs;
  if (s == "position") return MoeDrop::position;
  fail("--moe-token-drop-policy {}: expected probs (keep the largest weights) or position (keep the first tokens)",
       s);
}

namespace {
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// The value an expert is chosen by: its logit or score, plus its bias.
double selection_key(const float* v, const float* bias, int64_t e) {
  return static_cast<double>(v[e]) + (bias ? bias[e] : 0.0);
}

// Orders indices by a key, larger first (ties: the lower index).
template <typename Key>
auto by_key_descending(const Key& key) {
  return [&key](int32_t a, int32_t b) {
    const double ka = key(a), kb = key(b);
    return ka > kb || (ka == kb && a < b);
  };
}

// The k largest of v[0..E) + bias (ties: the lower index), best first; with
// `allowed` (non-null), among the experts whose entry is 1 only.
void top_k(const float* v, const float* bias, int64_t E, int64_t k, std::vector<int32_t>& idx, int32_t* out,
           const uint8_t* allowed = nullptr) {
  idx.resize(static_cast<size_t>(E));
  std::iota(idx.begin(), idx.end(), 0);
  if (allowed) std::erase_if(idx, [&](int32_t e) { return !allowed[e]; });
  const auto key = [&](int32_t e) { return selection_key(v, bias, e); };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), by_key_descending(key));
  std::copy_n(idx.begin(), k, out);
}

// Group-limited routing: allowed[e] = 1 for the experts of the g groups whose
// two largest keys (v + bias) have the largest sum.
void allowed_groups(const float* v, const float* bias, int64_t E, const MoeTopK& topk, std::vector<double>& group_score,
                    std::vector<int32_t>& groups, std::vector<uint8_t>& allowed) {
  const int64_t G = topk.num_groups, per = E / G;
  group_score.assign(static_cast<size_t>(G), 0.0);
  for (int64_t grp = 0; grp < G; ++grp) {
    double best = -INFINITY, second = -INFINITY;
    for (int64_t e = grp * per; e < (grp + 1) * per; ++e) {
      const double key = selection_key(v, bias, e);
      if (key > best) {
        second = best, best = key;
      } else if (key > second) {
        second = key;
      }
    }
    group_score[static_cast<size_t>(grp)] = best + second;
  }
  groups.resize(static_cast<size_t>(G));
  std::iota(groups.begin(), groups.end(), 0);
  const auto key = [&](int32_t grp) { return group_score[static_cast<size_t>(grp)]; };
  std::partial_sort(groups.begin(), groups.begin() + topk.group_topk, groups.end(), by_key_descending(key));
  allowed.assign(static_cast<size_t>(E), 0);
  for (int64_t j = 0; j < topk.group_topk; ++j)
    std::fill_n(allowed.begin() + groups[static_cast<size_t>(j)] * per, per, uint8_t{1});
}

void check_topk(int64_t E, int64_t k, const MoeTopK& topk) {
  if (!topk.grouped()) return;
  const int64_t G = topk.num_groups;
  if (E % G != 0 || E / G < 2)
    fail("--moe-router-num-groups {}: must divide the {} experts into groups of at least 2", G, E);
  if (topk.group_topk < 1 || topk.group_topk > G)
    fail("--moe-router-group-topk {}: must be in [1, --moe-router-num-groups {}]", topk.group_topk, G);
  if (k > topk.group_topk * (E / G))
    fail("--moe-router-topk {}: more than the {} experts of --moe-router-group-topk {} groups of {}", k,
         topk.group_topk * (E / G), topk.group_topk, E / G);
}
}  // namespace

void moe_route(const float* logits, const float* bias, int64_t N, int64_t E, int64_t k, MoeScore score,
               double capacity_factor, MoeDrop drop, MoeRouting& r, const MoeTopK& topk) {
  CLAW_CHECK(k >= 1 && k <= E, "top-{} routing over {} experts", k, E);
  check_topk(E, k, topk);
  r.N = N, r.E = E, r.k = k;
  r.scaling = topk.scaling_factor;
  r.expert.assign(static_cast<size_t>(N * k), 0);
  r.prob.assign(static_cast<size_t>(N * k), 0.0f);
  r.kept.assign(static_cast<size_t>(N * k), 1);
  r.score.assign(static_cast<size_t>(N * E), 0.0f);
  r.lse.assign(static_cast<size_t>(N), 0.0f);
  r.routed.assign(static_cast<size_t>(E), 0);
  r.load.assign(static_cast<size_t>(E), 0);
  std::vector<int32_t> idx, aux_top(static_cast<size_t>(k)), groups;
  std::vector<float> s(static_cast<size_t>(E));
  std::vector<double> group_score;
  std::vector<uint8_t> allowed;
  // The chosen experts: the k best keys (v + bias), within the best groups when grouped.
  const auto choose = [&](const float* v, int32_t* chosen) {
    if (topk.grouped()) allowed_groups(v, bias, E, topk, group_score, groups, allowed);
    top_k(v, bias, E, k, idx, chosen, topk.grouped() ? allowed.data() : nullptr);
  };
  for (int64_t t = 0; t < N; ++t) {
    const float* l = logits + t * E;
    float* sc = r.score.data() + t * E;
    double m = l[0];
    for (int64_t e = 1; e < E; ++e) m = std::max(m, static_cast<double>(l[e]));
    double z = 0;
    for (int64_t e = 0; e < E; ++e) z += std::exp(l[e] - m);
    r.lse[static_cast<size_t>(t)] = static_cast<float>(m + std::log(z));
    int32_t* chosen = r.expert.data() + t * k;
    float* p = r.prob.data() + t * k;
    if (score == MoeScore::softmax) {
      for (int64_t e = 0; e < E; ++e) sc[e] = static_cast<float>(std::exp(l[e] - m) / z);
      choose(l, chosen);
      double mk = l[chosen[0]];
      for (int64_t j = 1; j < k; ++j) mk = std::max(mk, static_cast<double>(l[chosen[j]]));
      double zk = 0;
      for (int64_t j = 0; j < k; ++j) zk += std::exp(l[chosen[j]] - mk);
      for (int64_t j = 0; j < k; ++j) p[j] = static_cast<float>(std::exp(l[chosen[j]] - mk) / zk);
      top_k(sc, nullptr, E, k, idx, aux_top.data());
    } else {
      double total = 0;
      for (int64_t e = 0; e < E; ++e) {
        s[static_cast<size_t>(e)] = static_cast<float>(sigmoid(l[e]));
        total += s[static_cast<size_t>(e)];
      }
      for (int64_t e = 0; e < E; ++e) sc[e] = static_cast<float>(s[static_cast<size_t>(e)] / (total + 1e-20));
      choose(s.data(), chosen);
      double sum = 0;
      for (int64_t j = 0; j < k; ++j) sum += s[static_cast<size_t>(chosen[j])];
      for (int64_t j = 0; j < k; ++j)
        p[j] = k > 1 ? static_cast<float>(s[static_cast<size_t>(chosen[j])] / (sum + 1e-20))
                     : s[static_cast<size_t>(chosen[j])];
      top_k(s.data(), nullptr, E, k, idx, aux_top.data());
    }
    if (r.scaling != 1.0)
      for (int64_t j = 0; j < k; ++j) p[j] = static_cast<float>(p[j] * r.scaling);
    for (int64_t j = 0; j < k; ++j) ++r.routed[static_cast<size_t>(aux_top[static_cast<size_t>(j)])];
  }
  // Capacity: per expert, its choices in the policy's order; those past the
  // capacity are dropped.
  std::vector<std::vector<int32_t>> by_expert(static_cast<size_t>(E));
  for (int64_t i = 0; i < N * k; ++i) by_expert[static_cast<size_t>(r.expert[static_cast<size_t>(i)])].push_back(static_cast<int32_t>(i));
  if (capacity_factor > 0) {
    const auto capacity = static_cast<size_t>(std::ceil(static_cast<double>(N * k) / E * capacity_factor));
    for (auto& list : by_expert) {
      if (list.size() <= capacity) continue;
      std::vector<int32_t> keep = list;
      if (drop == MoeDrop::probs)
        std::stable_sort(keep.begin(), keep.end(),
                         [&](int32_t a, int32_t b) { return r.prob[static_cast<size_t>(a)] > r.prob[static_cast<size_t>(b)]; });
      for (size_t q = capacity; q < keep.size(); ++q) {
        r.kept[static_cast<size_t>(keep[q])] = 0;
        r.prob[static_cast<size_t>(keep[q])] = 0.0f;
      }
      std::erase_if(list, [&](int32_t i) { return !r.kept[static_cast<size_t>(i)]; });
    }
  }
  r.order.clear();
  r.offsets.assign(static_cast<size_t>(E + 1), 0);
  for (int64_t e = 0; e < E; ++e) {
    const auto& list = by_expert[static_cast<size_t>(e)];  // token order: pairs were pushed by increasing index
    r.order.insert(r.order.end(), list.begin(), list.end());
    r.load[static_cast<size_t>(e)] = static_cast<int64_t>(list.size());
    r.offsets[static_cast<size_t>(e + 1)] = static_cast<int64_t>(r.order.size());
  }
  r.row.assign(static_cast<size_t>(N * k), -1);
  for (size_t m = 0; m < r.order.size(); ++m) r.row[static_cast<size_t>(r.order[m])] = static_cast<int64_t>(m);
}

void moe_route_backward(const float* logits, const MoeRouting& r, MoeScore score, const float* dprob,
                        const double* aux_dscore, double z_scale, float* dlogits) {
  const int64_t N = r.N, E = r.E, k = r.k;
  std::vector<double> g(static_cast<size_t>(k));
  for (int64_t t = 0; t < N; ++t) {
    const float* l = logits + t * E;
    float* dl = dlogits + t * E;
    std::fill_n(dl, E, 0.0f);
    const int32_t* chosen = r.expert.data() + t * k;
    for (int64_t j = 0; j < k; ++j)
      g[static_cast<size_t>(j)] = r.kept[static_cast<size_t>(t * k + j)] ? dprob[t * k + j] * r.scaling : 0.0;
    // The combine weights of the chosen experts (before the capacity mask and the scaling).
    if (score == MoeScore::softmax) {
      double mk = l[chosen[0]];
      for (int64_t j = 1; j < k; ++j) mk = std::max(mk, static_cast<double>(l[chosen[j]]));
      std::vector<double> p(static_cast<size_t>(k));
      double zk = 0;
      for (int64_t j = 0; j < k; ++j) zk += (p[static_cast<size_t>(j)] = std::exp(l[chosen[j]] - mk));
      double dot = 0;
      for (int64_t j = 0; j < k; ++j) dot += (p[static_cast<size_t>(j)] /= zk) * g[static_cast<size_t>(j)];
      for (int64_t j = 0; j < k; ++j)
        dl[chosen[j]] += static_cast<float>(p[static_cast<size_t>(j)] * (g[static_cast<size_t>(j)] - dot));
    } else {
      std::vector<double> s(static_cast<size_t>(k));
      double sum = 0;
      for (int64_t j = 0; j < k; ++j) sum += (s[static_cast<size_t>(j)] = sigmoid(l[chosen[j]]));
      double dot = 0;
      if (k > 1)
        for (int64_t j = 0; j < k; ++j) dot += g[static_cast<size_t>(j)] * s[static_cast<size_t>(j)] / (sum + 1e-20);
      for (int64_t j = 0; j < k; ++j) {
        const double sj = s[static_cast<size_t>(j)];
        const double ds = k > 1 ? (g[static_cast<size_t>(j)] - dot) / (sum + 1e-20) : g[static_cast<size_t>(j)];
        dl[chosen[j]] += static_cast<float>(ds * sj * (1 - sj));
      }
    }
    if (aux_dscore) {  // d/d logits of sum_i a_i score_ti
      const float* sc = r.score.data() + t * E;
      double dot = 0;
      for (int64_t e = 0; e < E; ++e) dot += aux_dscore[e] * sc[e];
      if (score == MoeScore::softmax) {
        for (int64_t e = 0; e < E; ++e) dl[e] += static_cast<float>(sc[e] * (aux_dscore[e] - dot));
      } else {  // score = s / S: d/ds_e = (a_e - dot) / S, ds/dl = s (1 - s)
        double S = 0;
        for (int64_t e = 0; e < E; ++e) S += sigmoid(l[e]);
        for (int64_t e = 0; e < E; ++e) {
          const double se = sigmoid(l[e]);
          dl[e] += static_cast<float>((aux_dscore[e] - dot) / (S + 1e-20) * se * (1 - se));
        }
      }
    }
    if (z_scale != 0) {  // d lse^2 = 2 lse softmax
      const double lse = r.lse[static_cast<size_t>(t)];
      for (int64_t e = 0; e < E; ++e) dl[e] += static_cast<float>(z_scale * 2 * lse * std::exp(l[e] - lse));
    }
  }
}

void moe_aux_dscore(double coeff, const int64_t* routed, int64_t N, int64_t E, int64_t k, double scale, double* out) {
  for (int64_t e = 0; e < E; ++e)
    out[e] = scale * coeff * static_cast<double>(E) * static_cast<double>(routed[e]) /
             (static_cast<double>(N) * static_cast<double>(N) * static_cast<double>(k));
}

double moe_route_sums(const MoeRouting& r, double* score_sum) {
  std::fill_n(score_sum, r.E, 0.0);
  double lse2 = 0;
  for (int64_t t = 0; t < r.N; ++t) {
    for (int64_t e = 0; e < r.E; ++e) score_sum[e] += r.score[static_cast<size_t>(t * r.E + e)];
    lse2 += static_cast<double>(r.lse[static_cast<size_t>(t)]) * r.lse[static_cast<size_t>(t)];
  }
  return lse2;
}

double moe_aux_loss(double coeff, const int64_t* routed, const double* score_sum, int64_t N, int64_t E, int64_t k) {
  double sum = 0;
  for (int64_t e = 0; e < E; ++e) sum += static_cast<double>(routed[e]) * score_sum[e];
  return coeff * static_cast<double>(E) * sum / (static_cast<double>(N) * static_cast<double>(N) * static_cast<double>(k));
}

void moe_update_expert_bias(float* bias, const int64_t* load, int64_t E, double rate) {
  double mean = 0;
  for (int64_t e = 0; e < E; ++e) mean += static_cast<double>(load[e]);
  mean /= static_cast<double>(E);
  for (int64_t e = 0; e < E; ++e) {
    const double d = mean - static_cast<double>(load[e]);
    bias[e] += static_cast<float>(d > 0 ? rate : d < 0 ? -rate : 0.0);
  }
}

void moe_gather(const CpuCtx& ctx, const MoeRouting& r, const float* x, int64_t C, float* rows) {
  const auto M = static_cast<int64_t>(r.order.size());
  parallel_for(ctx, M, 64, [&](int64_t b, int64_t e) {
    for (int64_t m = b; m < e; ++m) std::copy_n(x + r.order[static_cast<size_t>(m)] / r.k * C, C, rows + m * C);
  });
}

void moe_combine(const CpuCtx& ctx, const MoeRouting& r, const float* rows, int64_t C, float* y, bool accumulate) {
  const std::vector<int64_t>& row = r.row;
  parallel_for(ctx, r.N, 16, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* yt = y + t * C;
      if (!accumulate) std::fill_n(yt, C, 0.0f);
      for (int64_t j = 0; j < r.k; ++j) {  // in choice order: a fixed summation order
        const int64_t m = row[static_cast<size_t>(t * r.k + j)];
        if (m < 0) continue;
        const float p = r.prob[static_cast<size_t>(t * r.k + j)];
        const float* src = rows + m * C;
        for (int64_t c = 0; c < C; ++c) yt[c] += p * src[c];
      }
    }
  });
}

void moe_combine_backward(const CpuCtx& ctx, const MoeRouting& r, const float* dy, const float* rows, int64_t C,
                          float* drows, float* dprob) {
  const std::vector<int64_t>& row = r.row;
  parallel_for(ctx, r.N, 16, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const float* dyt = dy + t * C;
      for (int64_t j = 0; j < r.k; ++j) {
        const int64_t m = row[static_cast<size_t>(t * r.k + j)];
        float& dp = dprob[t * r.k + j];
        if (m < 0) {
          dp = 0.0f;
          continue;
        }
        const float p = r.prob[static_cast<size_t>(t * r.k + j)];
        const float* src = rows + m * C;
        float* dst = drows + m * C;
        double dot = 0;
        for (int64_t c = 0; c < C; ++c) {
          dot += static_cast<double>(dyt[c]) * src[c];
          dst[c] = p * dyt[c];
        }
        dp = static_cast<float>(dot);
      }
    }
  });
}

void moe_scatter_add(const CpuCtx& ctx, const MoeRouting& r, const float* drows, int64_t C, float* dx) {
  const std::vector<int64_t>& row = r.row;
  parallel_for(ctx, r.N, 16, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t)
      for (int64_t j = 0; j < r.k; ++j) {
        const int64_t m = row[static_cast<size_t>(t * r.k + j)];
        if (m < 0) continue;
        const float* src = drows + m * C;
        float* dst = dx + t * C;
        for (int64_t c = 0; c < C; ++c) dst[c] += src[c];
      }
  });
}

int64_t moe_permute_received(const CpuCtx& ctx, const int64_t* counts, int64_t ranks, int64_t El, int64_t C,
                             const float* in, float* out, bool to_expert_major, int64_t* expert_offsets) {
  // Block (q, e) starts at rank_at[q * El + e] rank-major and at
  // expert_at[e * ranks + q] expert-major.
  const auto n = static_cast<size_t>(ranks * El);
  std::vector<int64_t> rank_at(n), expert_at(n);
  int64_t at = 0;
  for (int64_t q = 0; q < ranks; ++q)
    for (int64_t e = 0; e < El; ++e) rank_at[static_cast<size_t>(q * El + e)] = at, at += counts[q * El + e];
  int64_t total = 0;
  for (int64_t e = 0; e < El; ++e) {
    if (expert_offsets) expert_offsets[e] = total;
    for (int64_t q = 0; q < ranks; ++q) expert_at[static_cast<size_t>(e * ranks + q)] = total, total += counts[q * El + e];
  }
  if (expert_offsets) expert_offsets[El] = total;
  parallel_for(ctx, ranks * El, 1, [&](int64_t b, int64_t end) {
    for (int64_t i = b; i < end; ++i) {
      const int64_t q = i / El, e = i % El, rows = counts[i];
      const int64_t r0 = rank_at[static_cast<size_t>(i)], x0 = expert_at[static_cast<size_t>(e * ranks + q)];
      const float* src = in + (to_expert_major ? r0 : x0) * C;
      float* dst = out + (to_expert_major ? x0 : r0) * C;
      std::copy_n(src, rows * C, dst);
    }
  });
  return total;
}

// The groups run one after another, each GEMM on the whole thread team (a
// CPU's BLAS threads one product well once it has a few hundred rows).
void grouped_gemm(const CpuCtx& ctx, const int64_t* offsets, int64_t E, int64_t N, int64_t K, const float* X,
                  const float* W, float beta, float* Y) {
  for (int64_t e = 0; e < E; ++e) {
    const int64_t m0 = offsets[e], M = offsets[e + 1] - m0;
    if (M > 0) gemm(ctx, false, true, M, N, K, 1.0f, X + m0 * K, K, W + e * N * K, K, beta, Y + m0 * N, N);
  }
}

void grouped_rowwise_linear(const CpuCtx& ctx, const int64_t* offsets, int64_t E, int64_t N, int64_t K, const float* X,
                            const float* W, float* Y) {
  for (int64_t e = 0; e < E; ++e) {
    const int64_t m0 = offsets[e], M = offsets[e + 1] - m0;
    if (M > 0) rowwise_linear_forward(ctx, Y + m0 * N, X + m0 * K, W + e * N * K, nullptr, M, K, N);
  }
}

void grouped_gemm_dx(const CpuCtx& ctx, const int64_t* offsets, int64_t E, int64_t N, int64_t K, const float* dY,
                     const float* W, float beta, float* dX) {
  for (int64_t e = 0; e < E; ++e) {
    const int64_t m0 = offsets[e], M = offsets[e + 1] - m0;
    if (M > 0) gemm(ctx, false, false, M, K, N, 1.0f, dY + m0 * N, N, W + e * N * K, K, beta, dX + m0 * K, K);
  }
}

void grouped_gemm_dw(const CpuCtx& ctx, const int64_t* offsets, int64_t E, int64_t N, int64_t K, const float* dY,
                     const float* X, float beta, float* dW) {
  for (int64_t e = 0; e < E; ++e) {
    const int64_t m0 = offsets[e], M = offsets[e + 1] - m0;
    float* dw = dW + e * N * K;
    if (M > 0) {
      gemm(ctx, true, false, N, K, M, 1.0f, dY + m0 * N, N, X + m0 * K, K, beta, dw, K);
    } else if (beta != 1.0f) {
      for (int64_t i = 0; i < N * K; ++i) dw[i] = beta == 0.0f ? 0.0f : beta * dw[i];
    }
  }
}

}  // namespace claw::kernels
