#include "claw/kernels/cpu/attention.h"
#include "claw/kernels/cpu/route.h"
#include "claw/kernels/cpu/staging.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "claw/core/error.h"
#include "claw/kernels/cpu/attention_tile.h"
#include "claw/kernels/cpu/vec_math.h"

namespace claw::kernels {
namespace {

using namespace attention_tile;  // Simd, Init, Band, Roles, tile_gemm, pack_transposed

// ---------------------------------------------------------------------------
// Visibility. Query i of a row sees keys [lo_i, i], lo_i = seg_start[i] (0
// without documents); lo_i and i both grow with i, which is what lets whole
// tiles, key rows and query columns be skipped below.

// Query block [i0, i0 + qc) of one batch row, padded to `lanes` queries
// (whole vectors). Padded lanes repeat the last query's lo, so each sees
// at least one key of the diagonal tile and its running values stay finite.
struct QueryBlock {
  int64_t i0, qc, lanes;
  const int32_t* seg;  // seg_start of the row from query i0 on; null: lo = 0
  int64_t lo(int64_t r) const { return seg ? seg[std::min(r, qc - 1)] : 0; }
};

// The part of key tile [k0, k0 + kc) that a query block needs: key rows
// [c_lo, kc) (rows before c_lo precede the documents of all its queries) and
// queries [0, n) (later queries' documents start after the tile), n_lanes
// being n rounded up to whole vectors. The diagonal tile (k0 == i0) is always
// whole: every query sees itself, and lo_i0 <= i0. Within these bounds the
// products skip by band(), whose row 0 is row c_lo.
template <typename T>
struct Tile {
  int64_t k0, kc, c_lo, n, n_lanes;
  const QueryBlock& qb;
  Tile(const QueryBlock& qb, int64_t j, int64_t blk, int64_t T_)
      : k0(j * blk), kc(std::min(blk, T_ - k0)), c_lo(std::clamp(qb.lo(0) - k0, int64_t{0}, kc)), qb(qb) {
    n = qb.seg ? std::lower_bound(qb.seg, qb.seg + qb.qc, k0 + kc) - qb.seg : qb.qc;
    n_lanes = std::min(qb.lanes, round_up(n, Simd<T>::kWidth));
  }
  bool diag() const { return k0 == qb.i0; }
  Band band() const { return {k0 + c_lo, qb.i0 - k0 - c_lo, qb.seg, n}; }
};

// Score-tile passes. s is S^T [kc keys, lanes queries] with row stride ld,
// walked one vector of queries at a time, down the keys, so per-query running
// values (max, sum) stay in registers. Because both ends of the visible range
// grow with the query, the rows of a tile split, for the lane group
// [r0, r0 + W), into runs visible to none, some, all, some, none of its lanes
// (KeyRanges); only the "some" runs pay for a mask. Rows visible to none
// were possibly never computed and are only overwritten (with zeros, where a
// later product reads them).
template <typename T>
struct KeyRanges {
  using I = typename Simd<T>::I;
  using Int = typename Simd<T>::Int;
  // Rows [c_lo, zero) none, [zero, all_lo) some, [all_lo, all_hi) all,
  // [all_hi, some) some, [some, kc) none.
  int64_t zero, all_lo, all_hi, some;
  I lo, hi;  // per lane, the first and last visible row (relative to k0)
  KeyRanges(const QueryBlock& qb, const Tile<T>& t, int64_t r0) {
    constexpr int W = Simd<T>::kWidth;
    hi = Simd<T>::iota() + static_cast<Int>(qb.i0 + r0 - t.k0);
    if (qb.seg) {
      for (int e = 0; e < W; ++e) lo[e] = static_cast<Int>(qb.lo(r0 + e) - t.k0);
    } else {
      lo = I{} - static_cast<Int>(t.k0);
    }
    auto clamp = [&](int64_t c) { return std::clamp(c, t.c_lo, t.kc); };
    zero = clamp(lo[0]);
    all_hi = clamp(int64_t{hi[0]} + 1);
    all_lo = std::min(clamp(lo[W - 1]), all_hi);
    some = clamp(int64_t{hi[W - 1]} + 1);
  }
  I visible(int64_t c) const { return (lo <= static_cast<Int>(c)) & (hi >= static_cast<Int>(c)); }
};

// e^x on fp32 lanes: fast_exp's scheme (vec_math.h; bitwise the same
// results) on whole vectors. The auto-vectorised scalar version turns its
// clamps into masked operations and costs ~1.5x more, and at D = 64 the
// exponentials are ~15% of the forward.
inline Simd<float>::V vexp(Simd<float>::V x) {
  using V = Simd<float>::V;
  using I = Simd<float>::I;
  using namespace exp_detail;
  V xc = x < kLo ? kLo : x;
  xc = xc > kHi ? kHi : xc;
  // Adding 1.5 * 2^23 rounds to an integer n held in the low mantissa bits.
  const float shifter = 12582912.0f;
  const V t = xc * kLog2e + shifter;
  const V n = t - shifter;
  const V p = exp_reduced(reduce(xc, n));
  // Vector casts between same-size types reinterpret bits: 2^n = (n + 127) << 23.
  const I scale_bits = ((I)t - 0x4B400000 + 127) << 23;
  const V y = p * (V)scale_bits;
  return x < kLo ? 0.0f : y;
}
// fp64 is the finite-difference reference: exact libm exp.
inline Simd<double>::V vexp(Simd<double>::V x) {
  for (int e = 0; e < Simd<double>::kWidth; ++e) x[e] = std::exp(x[e]);
  return x;
}

template <typename V>
V vmax(V a, V b) {
  return a > b ? a : b;
}

// One online-softmax step (Milakov & Gimelshein 2018): folds this tile's
// column maxima into m, turns s into P^T = exp(s - m_new), and leaves in alpha
// the factor exp(m_old - m_new) by which l (updated here) and O must shrink.
// The diagonal tile comes first and every lane sees a key there (itself), so
// m is finite from then on, exp(-inf - m) = 0 covers m_old = -inf, and a lane
// that sees nothing of a later tile keeps m with alpha = 1.
template <typename T>
void softmax_step(T* s, int64_t ld, const QueryBlock& qb, const Tile<T>& t, T* m, T* l, T* alpha) {
  using S = Simd<T>;
  using V = typename S::V;
  constexpr int W = S::kWidth;
  const T ninf = -std::numeric_limits<T>::infinity();
  for (int64_t r0 = 0; r0 < t.n_lanes; r0 += W) {
    const KeyRanges<T> keys(qb, t, r0);
    const V m_old = S::load(m + r0);
    // Four running maxima: one would serialise on the max latency.
    V mx4[4] = {m_old, m_old, m_old, m_old};
    int64_t c4 = keys.all_lo;
    for (; c4 + 4 <= keys.all_hi; c4 += 4)
      for (int u = 0; u < 4; ++u) mx4[u] = vmax(mx4[u], S::load(s + (c4 + u) * ld + r0));
    for (int64_t c = c4; c < keys.all_hi; ++c) mx4[0] = vmax(mx4[0], S::load(s + c * ld + r0));
    V mx = vmax(vmax(mx4[0], mx4[1]), vmax(mx4[2], mx4[3]));
    for (int64_t c = keys.zero; c < keys.all_lo; ++c)
      mx = vmax(mx, keys.visible(c) ? S::load(s + c * ld + r0) : ninf);
    for (int64_t c = keys.all_hi; c < keys.some; ++c)
      mx = vmax(mx, keys.visible(c) ? S::load(s + c * ld + r0) : ninf);
    const V a = vexp(m_old - mx);
    V sum = a * S::load(l + r0);
    auto masked = [&](int64_t c) {
      const V p = keys.visible(c) ? vexp(S::load(s + c * ld + r0) - mx) : T(0);
      S::store(s + c * ld + r0, p);
      sum += p;
    };
    for (int64_t c = t.c_lo; c < keys.zero; ++c) S::store(s + c * ld + r0, V{});
    for (int64_t c = keys.zero; c < keys.all_lo; ++c) masked(c);
    for (int64_t c = keys.all_lo; c < keys.all_hi; ++c) {
      const V p = vexp(S::load(s + c * ld + r0) - mx);
      S::store(s + c * ld + r0, p);
      sum += p;
    }
    for (int64_t c = keys.all_hi; c < keys.some; ++c) masked(c);
    for (int64_t c = keys.some; c < t.kc; ++c) S::store(s + c * ld + r0, V{});
    S::store(m + r0, mx);
    S::store(l + r0, sum);
    S::store(alpha + r0, a);
  }
}

// Backward recomputation: s (S^T) becomes P^T = exp(s - lse); dp (dP^T)
// becomes scale * dS^T = scale * P^T * (dP^T - Delta), times 1 - (s / cap)^2
// under a soft cap (s then holds the capped scores). Masked entries are 0.
// kCapped: the cap's factor, compiled out of the uncapped kernel.
template <bool kCapped, typename T>
void score_grads(T* s, T* dp, int64_t ld, const QueryBlock& qb, const Tile<T>& t, const T* lse, const T* delta,
                 T scale, T cap) {
  using S = Simd<T>;
  using V = typename S::V;
  constexpr int W = S::kWidth;
  const T inv_cap = kCapped ? T(1) / cap : T(0);
  // scale, or scale (1 - (s / cap)^2) under the cap.
  const auto factor = [&](const V& sv) -> V {
    if constexpr (!kCapped) return V{} + scale;
    const V u = sv * inv_cap;
    return scale * (T(1) - u * u);
  };
  for (int64_t r0 = 0; r0 < t.n_lanes; r0 += W) {
    const KeyRanges<T> keys(qb, t, r0);
    const V lse_v = S::load(lse + r0), delta_v = S::load(delta + r0);
    auto zero = [&](int64_t c) {
      S::store(s + c * ld + r0, V{});
      S::store(dp + c * ld + r0, V{});
    };
    auto masked = [&](int64_t c) {
      const auto vis = keys.visible(c);
      const V sv = S::load(s + c * ld + r0);
      const V p = vis ? vexp(sv - lse_v) : T(0);
      S::store(s + c * ld + r0, p);
      S::store(dp + c * ld + r0, vis ? factor(sv) * p * (S::load(dp + c * ld + r0) - delta_v) : T(0));
    };
    for (int64_t c = t.c_lo; c < keys.zero; ++c) zero(c);
    for (int64_t c = keys.zero; c < keys.all_lo; ++c) masked(c);
    for (int64_t c = keys.all_lo; c < keys.all_hi; ++c) {
      const V sv = S::load(s + c * ld + r0);
      const V p = vexp(sv - lse_v);
      S::store(s + c * ld + r0, p);
      S::store(dp + c * ld + r0, factor(sv) * p * (S::load(dp + c * ld + r0) - delta_v));
    }
    for (int64_t c = keys.all_hi; c < keys.some; ++c) masked(c);
    for (int64_t c = keys.some; c < t.kc; ++c) zero(c);
  }
}

// ---------------------------------------------------------------------------
// Scheduling.

struct Dims {
  int64_t B, T, H, G, D, blk;
  const int32_t* seg_start;  // [B, T] or null
  double cap = 0;            // the scores' soft cap (0: none)
  int64_t num_blocks() const { return (T + blk - 1) / blk; }
  int64_t heads_per_group() const { return H / G; }
  // Offsets of row t of head h (q, out, dq, dout) or kv head g (k, v, dk, dv).
  int64_t q_off(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * H + h) * D; }
  int64_t kv_off(int64_t b, int64_t t, int64_t g) const { return ((b * T + t) * G + g) * D; }
  int64_t ldq() const { return H * D; }
  int64_t ldkv() const { return G * D; }
  template <typename E>
  QueryBlock query_block(int64_t b, int64_t i) const {
    const int64_t i0 = i * blk, qc = std::min(blk, T - i0);
    return {i0, qc, round_up(qc, Simd<E>::kWidth), seg_start ? seg_start + b * T + i0 : nullptr};
  }
  // Row stride of packed [rows, D] blocks: whole vectors, so rows stay aligned.
  template <typename T>
  int64_t d_padded() const {
    return round_up(D, Simd<T>::kWidth);
  }
};

// Runs fn(task, scratch) for every task in [0, n). Tasks are handed out one at
// a time (causal tasks differ in cost), and each worker allocates its scratch
// once. Which worker runs a task never changes what the task computes.
template <typename T, typename F>
void run_tasks(const CpuCtx& ctx, int64_t n, int64_t scratch_size, F&& fn) {
  std::atomic<int64_t> next{0};
  const int64_t workers = std::min<int64_t>(std::max(ctx.num_threads, 1), n);
  parallel_for(ctx, workers, 1, [&](int64_t, int64_t) {
    // Cache-line aligned, so tile rows (whole vectors) never straddle lines.
    constexpr size_t kLine = 64;
    std::vector<T> buf(scratch_size + kLine / sizeof(T));
    void* p = buf.data();
    size_t space = buf.size() * sizeof(T);
    T* scratch = static_cast<T*>(std::align(kLine, scratch_size * sizeof(T), p, space));
    for (int64_t t = next.fetch_add(1); t < n; t = next.fetch_add(1)) fn(t, scratch);
  });
}

void check_dims(int64_t B, int64_t T, int64_t H, int64_t G, int64_t D, int64_t block) {
  CLAW_CHECK(B >= 0 && T >= 0 && D >= 1 && G >= 1 && H >= G && H % G == 0,
             "attention: B={} T={} H={} G={} D={} (need H a multiple of G)", B, T, H, G, D);
  CLAW_CHECK(block >= 16 && block % 16 == 0, "attention: block={} must be a positive multiple of 16", block);
}

// The kernel relies on 0 <= seg_start[i] <= i and seg_start non-decreasing
// along each row (see the header); O(B T), against O(B H T^2 D) for the work.
void check_segments(const int32_t* seg_start, int64_t B, int64_t T) {
  if (!seg_start) return;
  for (int64_t b = 0; b < B; ++b) {
    const int32_t* row = seg_start + b * T;
    for (int64_t t = 0; t < T; ++t)
      CLAW_CHECK(row[t] >= (t > 0 ? row[t - 1] : 0) && row[t] <= t,
                 "attention: seg_start[{}, {}] = {} (previous {}) must lie in [previous, {}]", b, t, row[t],
                 t > 0 ? row[t - 1] : 0, t);
  }
}

// Strided operands are copied into contiguous scratch before they serve as
// the B (vector) side of a tile product: rows H * D or G * D floats apart sit
// a multiple of 1 KiB apart for common shapes, map to a quarter of the L1
// sets and evict each other (a 64-row V block read in place runs the P V
// product at ~135 GFLOP/s, packed at ~175 including the copy).
template <typename T>
void pack_rows(T* dst, int64_t ldd, const T* src, int64_t lds, int64_t rows, int64_t D) {
  for (int64_t r = 0; r < rows; ++r) std::copy_n(src + r * lds, D, dst + r * ldd);
}

// Carves per-task scratch into 64-byte aligned pieces; the same sequence of
// take() calls with a null base measures the size to allocate.
template <typename T>
class Carver {
 public:
  explicit Carver(T* base) : p_(base) {}
  T* take(int64_t n) {
    T* r = p_ ? p_ + used_ : nullptr;
    used_ += round_up(n, Simd<T>::kWidth);
    return r;
  }
  int64_t used() const { return used_; }

 private:
  T* p_;
  int64_t used_ = 0;
};

template <typename T>
struct ForwardScratch {
  T *qt, *s, *vp, *o, *m, *l, *alpha;
  ForwardScratch(const Dims& dm, T* base) {
    Carver<T> c(base);
    const int64_t blk = dm.blk, dp = dm.d_padded<T>();
    qt = c.take(dm.D * blk);  // scale * Q^T [D, blk]
    s = c.take(blk * blk);    // S^T, then P^T [blk keys, blk queries]
    vp = c.take(blk * dp);    // V block, rows packed [blk, dp]
    o = c.take(blk * dp);     // O accumulator [blk, dp]
    m = c.take(blk);          // running max per query
    l = c.take(blk);          // running sum per query
    alpha = c.take(blk);      // per-tile rescale factor
    size = c.used();
  }
  int64_t size;
};

template <typename T>
struct BackwardScratch {
  T *qt, *dot, *qp, *dop, *kp, *s, *dp, *lse, *delta;
  BackwardScratch(const Dims& dm, T* base) {
    Carver<T> c(base);
    const int64_t blk = dm.blk, dpad = dm.d_padded<T>();
    qt = c.take(dm.D * blk);   // scale * Q^T [D, blk]
    dot = c.take(dm.D * blk);  // dO^T [D, blk]
    qp = c.take(blk * dpad);   // Q block, rows packed
    dop = c.take(blk * dpad);  // dO block, rows packed
    kp = c.take(blk * dpad);   // K block, rows packed
    s = c.take(blk * blk);     // S^T, then P^T
    dp = c.take(blk * blk);    // dP^T, then scale * dS^T
    lse = c.take(blk);         // lse per query lane
    delta = c.take(blk);       // Delta per query lane
    size = c.used();
  }
  int64_t size;
};

// Forward for query block i of head h: the diagonal key tile first (it
// overwrites O and leaves every lane a finite max), then the earlier tiles
// back to the first one holding a key that some query of the block sees.
template <typename T>
void forward_block(const Dims& dm, T* out, T* lse, const T* q, const T* k, const T* v, int64_t b, int64_t h,
                   int64_t i, T scale, T* scratch) {
  const ForwardScratch<T> w(dm, scratch);
  const int64_t blk = dm.blk, D = dm.D, dp = dm.d_padded<T>(), ldq = dm.ldq(), ldkv = dm.ldkv();
  const int64_t g = h / dm.heads_per_group();
  const QueryBlock qb = dm.query_block<T>(b, i);
  const int64_t i0 = qb.i0, qc = qb.qc;
  pack_transposed(w.qt, blk, q + dm.q_off(b, i0, h), ldq, qc, qb.lanes, D, scale);
  std::fill_n(w.m, qb.lanes, -std::numeric_limits<T>::infinity());
  std::fill_n(w.l, qb.lanes, T(0));
  for (int64_t j = i; j >= qb.lo(0) / blk; --j) {
    const Tile<T> t(qb, j, blk, dm.T);
    const int64_t rows = t.kc - t.c_lo;
    const Band band = t.band();
    tile_gemm<T>(Roles::keys_x_queries, band, {false}, rows, t.n_lanes, D, k + dm.kv_off(b, t.k0 + t.c_lo, g),
                 ldkv, 1, w.qt, blk, w.s + t.c_lo * blk, blk);
    if (dm.cap > 0) soft_cap(w.s, blk, t.c_lo, t.kc, t.n_lanes, dm.cap);
    softmax_step(w.s, blk, qb, t, w.m, w.l, w.alpha);
    pack_rows(w.vp + t.c_lo * dp, dp, v + dm.kv_off(b, t.k0 + t.c_lo, g), ldkv, rows, D);
    // O = alpha * O + P V, with A(r, c) = P^T[c, r].
    tile_gemm<T>(Roles::queries_sum_keys, band, {!t.diag(), w.alpha}, t.n, D, rows, w.s + t.c_lo * blk, 1, blk,
                 w.vp + t.c_lo * dp, dp, w.o, dp);
  }
  T* ob = out + dm.q_off(b, i0, h);
  T* lse_b = lse + (b * dm.H + h) * dm.T + i0;
  for (int64_t r = 0; r < qc; ++r) {
    const T inv = T(1) / w.l[r];
#pragma omp simd
    for (int64_t d = 0; d < D; ++d) ob[r * ldq + d] = inv * w.o[r * dp + d];
    lse_b[r] = w.m[r] + std::log(w.l[r]);
  }
}

// Where one backward task writes dk and dv rows of its kv head: in place
// (row stride G * D) or, for a later query chunk, a private partial buffer.
template <typename T>
struct KvGrads {
  T* dk;
  T* dv;
  int64_t ld;
};

// Backward for kv head g of batch b over query blocks [i_begin, i_end): every
// query head of the group, every such query block, every key tile it sees
// (diagonal first, as in the forward). dq rows of those blocks and the kv rows
// in `kv` belong to this task alone, so they accumulate in place, each
// overwritten by its first contribution. Key block j >= i_begin is first
// reached by its diagonal tile (whole) with the group's first head. Key
// blocks before i_begin (later chunks only, writing partial buffers) are
// first reached by query block i_begin, in whole tiles without documents;
// with documents it may reach some of their rows or none, so the caller
// zeroes those rows and they only accumulate.
template <typename T>
void backward_chunk(const Dims& dm, T* dq, KvGrads<T> kv, const T* dout, const T* q, const T* k, const T* v,
                    const T* out, const T* lse, int64_t b, int64_t g, int64_t i_begin, int64_t i_end, T scale,
                    T* scratch) {
  const BackwardScratch<T> w(dm, scratch);
  const int64_t blk = dm.blk, D = dm.D, dpad = dm.d_padded<T>(), ldq = dm.ldq(), ldkv = dm.ldkv();
  const int64_t hpg = dm.heads_per_group();
  for (int64_t h = g * hpg; h < (g + 1) * hpg; ++h) {
    for (int64_t i = i_begin; i < i_end; ++i) {
      const QueryBlock qb = dm.query_block<T>(b, i);
      const int64_t i0 = qb.i0, qc = qb.qc, lanes = qb.lanes;
      const T* qb_rows = q + dm.q_off(b, i0, h);
      const T* dob = dout + dm.q_off(b, i0, h);
      const T* ob = out + dm.q_off(b, i0, h);
      T* dqb = dq + dm.q_off(b, i0, h);
      pack_transposed(w.qt, blk, qb_rows, ldq, qc, lanes, D, scale);
      pack_transposed(w.dot, blk, dob, ldq, qc, lanes, D, T(1));
      pack_rows(w.qp, dpad, qb_rows, ldq, qc, D);
      pack_rows(w.dop, dpad, dob, ldq, qc, D);
      const T* lse_b = lse + (b * dm.H + h) * dm.T + i0;
      for (int64_t r = 0; r < lanes; ++r) {
        T sum = 0;
        if (r < qc) {
#pragma omp simd reduction(+ : sum)
          for (int64_t d = 0; d < D; ++d) sum += dob[r * ldq + d] * ob[r * ldq + d];
        }
        w.delta[r] = sum;
        w.lse[r] = r < qc ? lse_b[r] : T(0);
      }
      for (int64_t j = i; j >= qb.lo(0) / blk; --j) {
        const Tile<T> t(qb, j, blk, dm.T);
        const int64_t rows = t.kc - t.c_lo;
        T* s = w.s + t.c_lo * blk;
        T* dp = w.dp + t.c_lo * blk;
        T* kp = w.kp + t.c_lo * dpad;
        pack_rows(kp, dpad, k + dm.kv_off(b, t.k0 + t.c_lo, g), ldkv, rows, D);
        const Band band = t.band();
        tile_gemm<T>(Roles::keys_x_queries, band, {false}, rows, t.n_lanes, D, kp, dpad, 1, w.qt, blk, s, blk);
        tile_gemm<T>(Roles::keys_x_queries, band, {false}, rows, t.n_lanes, D, v + dm.kv_off(b, t.k0 + t.c_lo, g),
                     ldkv, 1, w.dot, blk, dp, blk);
        if (dm.cap > 0) {
          soft_cap(w.s, blk, t.c_lo, t.kc, t.n_lanes, dm.cap);
          score_grads<true>(w.s, w.dp, blk, qb, t, w.lse, w.delta, scale, static_cast<T>(dm.cap));
        } else {
          score_grads<false>(w.s, w.dp, blk, qb, t, w.lse, w.delta, scale, T(0));
        }
        const bool first = h == g * hpg && (j >= i_begin ? i == j : !dm.seg_start && i == i_begin);
        T* dkb = kv.dk + (t.k0 + t.c_lo) * kv.ld;
        T* dvb = kv.dv + (t.k0 + t.c_lo) * kv.ld;
        const Roles by_key = Roles::keys_sum_queries;
        tile_gemm(by_key, band, {!first}, rows, D, t.n, s, blk, 1, w.dop, dpad, dvb, kv.ld);  // dV (+)= P^T dO
        tile_gemm(by_key, band, {!first}, rows, D, t.n, dp, blk, 1, w.qp, dpad, dkb, kv.ld);  // dK (+)= scale dS^T Q
        tile_gemm<T>(Roles::queries_sum_keys, band, {!t.diag()}, t.n, D, rows, dp, 1, blk, kp, dpad, dqb,
                     ldq);  // dQ (+)= scale dS K
      }
    }
  }
}

// How many query chunks each (b, kv head) backward task is cut into. One,
// unless B * G tasks would leave threads idle at the end: then enough chunks
// for ~4 tasks per thread. Chunks after the first accumulate dk, dv into
// partial buffers that are summed afterwards, so results then depend on the
// thread count (still deterministic for a given one).
int64_t backward_chunks(const CpuCtx& ctx, const Dims& dm) {
  const int64_t groups = dm.B * dm.G, threads = std::max(ctx.num_threads, 1);
  if (groups == 0 || groups % threads == 0 || dm.num_blocks() < 2) return 1;
  return std::min((4 * threads + groups - 1) / groups, dm.num_blocks());
}

// Query-block boundaries of n chunks that split the blocks' total cost
// evenly. A block costs the key tiles it visits, summed over the batch rows
// (which share the boundaries): i + 1 for causal block i, fewer with
// documents. Chunk c is [bounds[c], bounds[c + 1]), possibly empty.
std::vector<int64_t> chunk_bounds(const Dims& dm, int64_t n) {
  const int64_t nb = dm.num_blocks();
  std::vector<double> cost_before(nb + 1, 0.0);  // cost of blocks [0, i)
  for (int64_t i = 0; i < nb; ++i) {
    double tiles = 0;
    for (int64_t b = 0; b < dm.B; ++b)
      tiles += static_cast<double>(i + 1 - (dm.seg_start ? dm.seg_start[b * dm.T + i * dm.blk] / dm.blk : 0));
    cost_before[i + 1] = cost_before[i] + tiles;
  }
  std::vector<int64_t> bounds(n + 1, nb);
  int64_t i = 0;
  for (int64_t c = 0; c < n; ++c) {
    const double target = cost_before[nb] * static_cast<double>(c) / static_cast<double>(n);
    while (i < nb && cost_before[i] < target) ++i;
    bounds[c] = i;
  }
  return bounds;
}

}  // namespace

// The fp32/fp64 kernels; the entry points below also take 16-bit storage.
template <typename T>
void attention_forward_impl(const CpuCtx& ctx, T* out, T* lse, const T* q, const T* k, const T* v, int64_t B,
                            int64_t T_, int64_t H, int64_t G, int64_t D, ScoreScale score, const int32_t* seg_start,
                            int64_t block) {
  if (ctx.gpu && score.capped()) fail("attention soft-capping (--attn-logit-softcapping) runs on the CPU only for now");
  const double scale = score.scale;
  CLAW_ROUTE_TO_GPU(ctx, T, attention_forward, out, lse, q, k, v, B, T_, H, G, D, scale, seg_start);
  check_dims(B, T_, H, G, D, block);
  check_segments(seg_start, B, T_);
  const Dims dm{B, T_, H, G, D, block, seg_start, score.softcap};
  const int64_t nb = dm.num_blocks(), heads = B * H;
  // Head by head, so a head's K and V stay in cache across its query blocks;
  // within a head the last query blocks (which see the most keys) go first,
  // so the dynamic schedule ends on small tasks.
  run_tasks<T>(ctx, heads * nb, ForwardScratch<T>(dm, nullptr).size, [&](int64_t t, T* scratch) {
    const int64_t bh = t / nb, i = nb - 1 - t % nb;
    forward_block(dm, out, lse, q, k, v, bh / H, bh % H, i, static_cast<T>(scale), scratch);
  });
}

template <typename T>
void attention_backward_impl(const CpuCtx& ctx, T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k,
                             const T* v, const T* out, const T* lse, int64_t B, int64_t T_, int64_t H, int64_t G,
                             int64_t D, ScoreScale score, const int32_t* seg_start, int64_t block) {
  if (ctx.gpu && score.capped()) fail("attention soft-capping (--attn-logit-softcapping) runs on the CPU only for now");
  const double scale = score.scale;
  CLAW_ROUTE_TO_GPU(ctx, T, attention_backward, dq, dk, dv, dout, q, k, v, out, lse, B, T_, H, G, D, scale, seg_start);
  check_dims(B, T_, H, G, D, block);
  check_segments(seg_start, B, T_);
  const Dims dm{B, T_, H, G, D, block, seg_start, score.softcap};
  const int64_t groups = B * G, chunks = backward_chunks(ctx, dm);
  const std::vector<int64_t> bounds = chunk_bounds(dm, chunks);
  // Partial dk, dv of chunks 1.. of every group: [groups][chunks - 1][2][T, D];
  // chunk c writes (and the sum below reads) its rows [0, bounds[c + 1] * block).
  const int64_t partial_size = (chunks - 1) * groups * 2 * T_ * D;
  const auto partial = std::make_unique_for_overwrite<T[]>(partial_size);
  auto partial_of = [&](int64_t grp, int64_t c) {
    T* p = partial.get() + ((grp * (chunks - 1) + (c - 1)) * 2) * T_ * D;
    return KvGrads<T>{p, p + T_ * D, D};
  };
  run_tasks<T>(ctx, groups * chunks, BackwardScratch<T>(dm, nullptr).size, [&](int64_t t, T* scratch) {
    const int64_t grp = t / chunks, c = t % chunks, b = grp / G, g = grp % G;
    const KvGrads<T> kv = c == 0 ? KvGrads<T>{dk + dm.kv_off(b, 0, g), dv + dm.kv_off(b, 0, g), dm.ldkv()}
                                 : partial_of(grp, c);
    if (c > 0 && seg_start && bounds[c] < bounds[c + 1]) {  // see backward_chunk: key blocks before i_begin
      const int64_t rows = std::min(T_, bounds[c] * block);
      std::fill_n(kv.dk, rows * D, T(0));
      std::fill_n(kv.dv, rows * D, T(0));
    }
    backward_chunk(dm, dq, kv, dout, q, k, v, out, lse, b, g, bounds[c], bounds[c + 1], static_cast<T>(scale),
                   scratch);
  });
  if (chunks == 1) return;
  parallel_for(ctx, groups * T_, 64, [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      const int64_t grp = row / T_, t = row % T_, b = grp / G, g = grp % G;
      T* dkr = dk + dm.kv_off(b, t, g);
      T* dvr = dv + dm.kv_off(b, t, g);
      // Chunk 0 wrote only the key rows its query blocks reach.
      if (t >= bounds[1] * block) {
        std::fill_n(dkr, D, T(0));
        std::fill_n(dvr, D, T(0));
      }
      for (int64_t c = 1; c < chunks; ++c) {
        if (bounds[c] == bounds[c + 1] || t >= bounds[c + 1] * block) continue;
        const KvGrads<T> p = partial_of(grp, c);
        for (int64_t d = 0; d < D; ++d) {
          dkr[d] += p.dk[t * D + d];
          dvr[d] += p.dv[t * D + d];
        }
      }
    }
  });
}


template <typename T>
void attention_forward(const CpuCtx& ctx, T* out, acc_t<T>* lse, const T* q, const T* k, const T* v, int64_t B,
                       int64_t T_, int64_t H, int64_t G, int64_t D, ScoreScale scale, const int32_t* seg_start,
                       int64_t block) {
  if constexpr (is_half_storage_v<T>) {
    CLAW_CPU_ONLY(ctx, attention_forward);
    const int64_t nq = B * T_ * H * D, nkv = B * T_ * G * D;
    const std::vector<float> qf = widened(ctx, q, nq), kf = widened(ctx, k, nkv), vf = widened(ctx, v, nkv);
    std::vector<float> o(static_cast<size_t>(nq));
    attention_forward_impl<float>(ctx, o.data(), lse, qf.data(), kf.data(), vf.data(), B, T_, H, G, D, scale,
                                  seg_start, block);
    narrow_into(ctx, o, out);
  } else {
    attention_forward_impl(ctx, out, lse, q, k, v, B, T_, H, G, D, scale, seg_start, block);
  }
}

template <typename T>
void attention_backward(const CpuCtx& ctx, T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k,
                        const T* v, const T* out, const acc_t<T>* lse, int64_t B, int64_t T_, int64_t H,
                        int64_t G, int64_t D, ScoreScale scale, const int32_t* seg_start, int64_t block) {
  if constexpr (is_half_storage_v<T>) {
    CLAW_CPU_ONLY(ctx, attention_backward);
    const int64_t nq = B * T_ * H * D, nkv = B * T_ * G * D;
    const std::vector<float> qf = widened(ctx, q, nq), kf = widened(ctx, k, nkv), vf = widened(ctx, v, nkv);
    const std::vector<float> of = widened(ctx, out, nq), dof = widened(ctx, dout, nq);
    std::vector<float> dqf(static_cast<size_t>(nq)), dkf(static_cast<size_t>(nkv)), dvf(static_cast<size_t>(nkv));
    attention_backward_impl<float>(ctx, dqf.data(), dkf.data(), dvf.data(), dof.data(), qf.data(), kf.data(),
                                   vf.data(), of.data(), lse, B, T_, H, G, D, scale, seg_start, block);
    narrow_into(ctx, dqf, dq);
    narrow_into(ctx, dkf, dk);
    narrow_into(ctx, dvf, dv);
  } else {
    attention_backward_impl(ctx, dq, dk, dv, dout, q, k, v, out, lse, B, T_, H, G, D, scale, seg_start, block);
  }
}

#define CLAW_INSTANTIATE(T)                                                                                 \
  template void attention_forward<T>(const CpuCtx&, T*, acc_t<T>*, const T*, const T*, const T*, int64_t,   \
                                     int64_t, int64_t, int64_t, int64_t, ScoreScale, const int32_t*, int64_t);  \
  template void attention_backward<T>(const CpuCtx&, T*, T*, T*, const T*, const T*, const T*, const T*,   \
                                      const T*, const acc_t<T>*, int64_t, int64_t, int64_t, int64_t,       \
                                      int64_t, ScoreScale, const int32_t*, int64_t);
CLAW_INSTANTIATE(float)
CLAW_INSTANTIATE(double)
CLAW_INSTANTIATE(bfloat16)
CLAW_INSTANTIATE(float16)
#undef CLAW_INSTANTIATE

}  // namespace claw::kernels
