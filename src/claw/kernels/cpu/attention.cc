#include "claw/kernels/cpu/attention.h"

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
#include "claw/kernels/cpu/vec_math.h"

namespace claw::kernels {
namespace {

// ---------------------------------------------------------------------------
// Tile products.
//
// Every product here has the form  C[M, N] (+)= sum_k A(m, k) B[k, n]  where
// B's rows are contiguous in n (n is the vectorised dimension) and A is read
// one scalar at a time and broadcast, so A may be stored either way round:
// A(m, k) = A[m * am + k * ak]. With Q and dO packed transposed once per
// query block this covers every product (forward K Q^T and P V; backward
// K Q^T, V dO^T, P^T dO, dS^T Q and dS K) without ever transposing K, V, P or
// dS: score tiles are kept as S^T [keys, queries], so the softmax over keys
// runs down columns, one query per SIMD lane.
//
// The register tile is written with GCC/Clang vector types rather than left to
// the auto-vectoriser: GCC prefers 256-bit vectors on AVX-512 Intel parts and
// does not reliably keep a 2-D accumulator in registers; a 6 x 64 fp32 tile in
// 24 zmm registers runs at ~180 GFLOP/s per core here, above OpenBLAS on
// 64x64x64 calls (NN ~160, NT ~100). The vector is one register of the ISA
// the build targets and the tile is sized to its register file: vectors wider
// than the registers would be split by the compiler and the tile would spill
// (512-bit vectors on AVX2 run ~30x slower).
#if defined(__AVX512F__)
constexpr int kVecBytes = 64;
constexpr int kVecs = 4;  // 6 x 4 accumulators of 32 zmm registers
#elif defined(__AVX__)
constexpr int kVecBytes = 32;
constexpr int kVecs = 2;  // 6 x 2 accumulators of 16 ymm registers
#else
constexpr int kVecBytes = 16;
constexpr int kVecs = 2;  // 6 x 2 accumulators of 16 xmm registers
#endif
constexpr int kRows = 6;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

template <typename T>
struct Simd {
  static constexpr int kWidth = kVecBytes / sizeof(T);
  typedef T V __attribute__((vector_size(kVecBytes)));
  // Integer lanes of the same width: comparison results (lane masks) and bit patterns.
  using Int = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  typedef Int I __attribute__((vector_size(kVecBytes)));
  static V load(const T* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void store(T* p, V v) { std::memcpy(p, &v, sizeof v); }
  // Mask of lanes e >= first: on a diagonal tile, the queries r0 + e that see key r0 + first.
  static I visible(int64_t first) {
    I lane;
    for (int e = 0; e < kWidth; ++e) lane[e] = e;
    return lane >= static_cast<Int>(first);
  }
};

// How a tile product treats the C it writes into.
template <typename T>
struct Init {
  bool accumulate;               // C += A B (else C = A B)
  const T* row_scale = nullptr;  // if accumulating: C[m, :] = row_scale[m] * C[m, :] + (A B)[m, :]
};

template <int MR, int NV, typename T>
void micro_tile(int64_t K, const T* A, int64_t am, int64_t ak, const T* B, int64_t ldb, T* C, int64_t ldc,
                Init<T> init) {
  using S = Simd<T>;
  using V = typename S::V;
  V acc[MR][NV];
  for (int m = 0; m < MR; ++m) {
    const T f = init.row_scale ? init.row_scale[m] : T(1);
    for (int v = 0; v < NV; ++v) acc[m][v] = init.accumulate ? f * S::load(C + m * ldc + v * S::kWidth) : V{};
  }
  for (int64_t k = 0; k < K; ++k) {
    V b[NV];
    for (int v = 0; v < NV; ++v) b[v] = S::load(B + k * ldb + v * S::kWidth);
    for (int m = 0; m < MR; ++m) {
      T a = A[m * am + k * ak];
      for (int v = 0; v < NV; ++v) acc[m][v] += a * b[v];
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int v = 0; v < NV; ++v) S::store(C + m * ldc + v * S::kWidth, acc[m][v]);
}

template <typename T>
using MicroFn = void (*)(int64_t, const T*, int64_t, int64_t, const T*, int64_t, T*, int64_t, Init<T>);

template <typename T, size_t... I>
constexpr std::array<MicroFn<T>, sizeof...(I)> micro_table(std::index_sequence<I...>) {
  return {&micro_tile<static_cast<int>(I / kVecs) + 1, static_cast<int>(I % kVecs) + 1, T>...};
}
// kMicro<T>[(mr - 1) * kVecs + (nv - 1)] handles an mr x nv remainder tile.
template <typename T>
constexpr auto kMicro = micro_table<T>(std::make_index_sequence<kRows * kVecs>{});

// Which part of a diagonal (query block == key block) tile can be skipped.
// Entries above the diagonal are masked to exactly zero in P and dS, so
// skipping them only saves work; it never changes a result.
enum class Causal {
  none,
  cols_from_row,  // row m = key, column n = query: only n >= m is needed (S^T, dP^T)
  k_from_row,     // row m = key, k = query: only k >= m contributes (dV, dK)
  k_to_row,       // row m = query, k = key: only k <= m contributes (O, dQ)
};

// C[M, N] (+)= A B over k < K as above; B and C rows are ldb and ldc apart.
// Rows go kRows at a time, columns kVecs vectors at a time (remainders use
// smaller register tiles), and columns past the last whole vector (D not a
// multiple of the width) take a scalar loop.
template <typename T>
void tile_gemm(Causal causal, Init<T> init, int64_t M, int64_t N, int64_t K, const T* A, int64_t am, int64_t ak,
               const T* B, int64_t ldb, T* C, int64_t ldc) {
  constexpr int W = Simd<T>::kWidth;
  const int64_t n_vec_end = N / W * W;
  for (int64_t m0 = 0; m0 < M; m0 += kRows) {
    const int mr = static_cast<int>(std::min<int64_t>(kRows, M - m0));
    int64_t k_lo = 0, k_hi = K, n_lo = 0;
    if (causal == Causal::cols_from_row) n_lo = m0 / W * W;
    if (causal == Causal::k_from_row) k_lo = std::min(m0, K);
    if (causal == Causal::k_to_row) k_hi = std::min(K, m0 + mr);
    const T* a = A + m0 * am + k_lo * ak;
    const T* b = B + k_lo * ldb;
    T* c = C + m0 * ldc;
    const Init<T> row_init{init.accumulate, init.row_scale ? init.row_scale + m0 : nullptr};
    for (int64_t n = n_lo; n < n_vec_end;) {
      const int nv = static_cast<int>(std::min<int64_t>(kVecs, (n_vec_end - n) / W));
      kMicro<T>[(mr - 1) * kVecs + (nv - 1)](k_hi - k_lo, a, am, ak, b + n, ldb, c + n, ldc, row_init);
      n += nv * W;
    }
    for (int m = 0; m < mr; ++m)
      for (int64_t n = n_vec_end; n < N; ++n) {
        const T f = row_init.row_scale ? row_init.row_scale[m] : T(1);
        T s = init.accumulate ? f * c[m * ldc + n] : T(0);
        for (int64_t k = 0; k < k_hi - k_lo; ++k) s += a[m * am + k * ak] * b[k * ldb + n];
        c[m * ldc + n] = s;
      }
  }
}

// In-register transpose of a 16 x 16 fp32 block: four rounds interleaving
// pairs of rows at 1, 2, 4 and 8 lanes; x[i] row i in, column i out. Used
// where a 16-float vector is one register (AVX-512).
typedef float F16 __attribute__((vector_size(64)));
inline void transpose16(F16 x[16]) {
  F16 y[16];
  for (int i = 0; i < 16; i += 2) {
    y[i] = __builtin_shufflevector(x[i], x[i + 1], 0, 16, 1, 17, 4, 20, 5, 21, 8, 24, 9, 25, 12, 28, 13, 29);
    y[i + 1] = __builtin_shufflevector(x[i], x[i + 1], 2, 18, 3, 19, 6, 22, 7, 23, 10, 26, 11, 27, 14, 30, 15, 31);
  }
  for (int i = 0; i < 16; i += 4)
    for (int j = 0; j < 2; ++j) {
      x[i + 2 * j] = __builtin_shufflevector(y[i + j], y[i + j + 2], 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12,
                                             13, 28, 29);
      x[i + 2 * j + 1] = __builtin_shufflevector(y[i + j], y[i + j + 2], 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26,
                                                 27, 14, 15, 30, 31);
    }
  for (int i = 0; i < 16; i += 8)
    for (int j = 0; j < 4; ++j) {
      y[i + j] = __builtin_shufflevector(x[i + j], x[i + j + 4], 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25,
                                         26, 27);
      y[i + j + 4] = __builtin_shufflevector(x[i + j], x[i + j + 4], 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15,
                                             28, 29, 30, 31);
    }
  for (int j = 0; j < 8; ++j) {
    x[j] = __builtin_shufflevector(y[j], y[j + 8], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
    x[j + 8] = __builtin_shufflevector(y[j], y[j + 8], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  }
}

// dst[d * ld + r] = alpha * src[r * lds + d] for r < rows; 0 for rows <= r < lanes.
// Zero lanes make padded queries produce finite scores and zero gradients.
// Runs once per query block, but at T = 256 a block serves only 2.5 key
// blocks on average, so a scalar strided copy (~1.2 us per 64 x 64 block)
// would cost ~5% of the forward; full fp32 16 x 16 blocks go through
// registers on AVX-512 (~0.4 us), the rest through a small tile.
template <typename T>
void pack_transposed(T* dst, int64_t ld, const T* src, int64_t lds, int64_t rows, int64_t lanes, int64_t D,
                     T alpha) {
  constexpr int64_t kT = 16;
  for (int64_t r0 = 0; r0 < lanes; r0 += kT)
    for (int64_t d0 = 0; d0 < D; d0 += kT) {
      const int64_t nr = std::min(kT, rows - r0), nd = std::min(kT, D - d0);
      if constexpr (std::is_same_v<T, float> && Simd<float>::kWidth == kT) {
        if (nr == kT && nd == kT) {
          F16 x[kT];
          for (int64_t r = 0; r < kT; ++r) x[r] = alpha * Simd<float>::load(src + (r0 + r) * lds + d0);
          transpose16(x);
          for (int64_t d = 0; d < kT; ++d) Simd<float>::store(dst + (d0 + d) * ld + r0, x[d]);
          continue;
        }
      }
      T tile[kT][kT];
      for (int64_t d = 0; d < nd; ++d)
        for (int64_t r = 0; r < kT; ++r) tile[d][r] = r < nr ? alpha * src[(r0 + r) * lds + d0 + d] : T(0);
      const int64_t nl = std::min(kT, lanes - r0);
      for (int64_t d = 0; d < nd; ++d) std::copy_n(tile[d], nl, dst + (d0 + d) * ld + r0);
    }
}

// ---------------------------------------------------------------------------
// Score-tile passes. s is S^T [kc keys, lanes queries] with row stride ld,
// walked one vector of queries at a time, down the keys, so per-query running
// values (max, sum) stay in registers. On a diagonal tile key c is visible to
// query r iff c <= r (same block origin): for the lane group [r0, r0 + W),
// keys c <= r0 are visible to all lanes, keys in (r0, r0 + W) to some, later
// keys to none (their entries were possibly never computed and are only
// overwritten).

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

// Which rows of a lane group need masking; see above.
struct KeyRanges {
  int64_t all, some;  // keys [0, all) visible to every lane, [all, some) to some, [some, kc) to none
  KeyRanges(bool diag, int64_t kc, int64_t r0, int64_t W)
      : all(diag ? std::min(kc, r0 + 1) : kc), some(diag ? std::min(kc, r0 + W) : kc) {}
};

// One online-softmax step (Milakov & Gimelshein 2018): folds this tile's
// column maxima into m, turns s into P^T = exp(s - m_new), and leaves in alpha
// the factor exp(m_old - m_new) by which l (updated here) and O must shrink.
// Every lane has a visible key on its first tile, so m is finite from then on
// and exp(-inf - m) = 0 covers m_old = -inf.
template <typename T>
void softmax_step(T* s, int64_t ld, int64_t kc, int64_t lanes, bool diag, T* m, T* l, T* alpha) {
  using S = Simd<T>;
  using V = typename S::V;
  constexpr int W = S::kWidth;
  const T ninf = -std::numeric_limits<T>::infinity();
  for (int64_t r0 = 0; r0 < lanes; r0 += W) {
    const KeyRanges keys(diag, kc, r0, W);
    const V m_old = S::load(m + r0);
    // Four running maxima: one would serialise on the max latency.
    V mx4[4] = {m_old, m_old, m_old, m_old};
    int64_t c4 = 0;
    for (; c4 + 4 <= keys.all; c4 += 4)
      for (int u = 0; u < 4; ++u) mx4[u] = vmax(mx4[u], S::load(s + (c4 + u) * ld + r0));
    for (int64_t c = c4; c < keys.all; ++c) mx4[0] = vmax(mx4[0], S::load(s + c * ld + r0));
    V mx = vmax(vmax(mx4[0], mx4[1]), vmax(mx4[2], mx4[3]));
    for (int64_t c = keys.all; c < keys.some; ++c)
      mx = vmax(mx, S::visible(c - r0) ? S::load(s + c * ld + r0) : ninf);
    const V a = vexp(m_old - mx);
    V sum = a * S::load(l + r0);
    for (int64_t c = 0; c < keys.all; ++c) {
      const V p = vexp(S::load(s + c * ld + r0) - mx);
      S::store(s + c * ld + r0, p);
      sum += p;
    }
    for (int64_t c = keys.all; c < keys.some; ++c) {
      const V p = S::visible(c - r0) ? vexp(S::load(s + c * ld + r0) - mx) : T(0);
      S::store(s + c * ld + r0, p);
      sum += p;
    }
    for (int64_t c = keys.some; c < kc; ++c) S::store(s + c * ld + r0, V{});
    S::store(m + r0, mx);
    S::store(l + r0, sum);
    S::store(alpha + r0, a);
  }
}

// Backward recomputation: s (S^T) becomes P^T = exp(s - lse); dp (dP^T)
// becomes scale * dS^T = scale * P^T * (dP^T - Delta). Masked entries are 0.
template <typename T>
void score_grads(T* s, T* dp, int64_t ld, int64_t kc, int64_t lanes, bool diag, const T* lse, const T* delta,
                 T scale) {
  using S = Simd<T>;
  using V = typename S::V;
  constexpr int W = S::kWidth;
  for (int64_t r0 = 0; r0 < lanes; r0 += W) {
    const KeyRanges keys(diag, kc, r0, W);
    const V lse_v = S::load(lse + r0), delta_v = S::load(delta + r0);
    for (int64_t c = 0; c < keys.all; ++c) {
      const V p = vexp(S::load(s + c * ld + r0) - lse_v);
      S::store(s + c * ld + r0, p);
      S::store(dp + c * ld + r0, scale * p * (S::load(dp + c * ld + r0) - delta_v));
    }
    for (int64_t c = keys.all; c < keys.some; ++c) {
      const auto vis = S::visible(c - r0);
      const V p = vis ? vexp(S::load(s + c * ld + r0) - lse_v) : T(0);
      S::store(s + c * ld + r0, p);
      S::store(dp + c * ld + r0, vis ? scale * p * (S::load(dp + c * ld + r0) - delta_v) : T(0));
    }
    for (int64_t c = keys.some; c < kc; ++c) {
      S::store(s + c * ld + r0, V{});
      S::store(dp + c * ld + r0, V{});
    }
  }
}

// ---------------------------------------------------------------------------
// Scheduling.

struct Dims {
  int64_t B, T, H, G, D, blk;
  int64_t num_blocks() const { return (T + blk - 1) / blk; }
  int64_t heads_per_group() const { return H / G; }
  // Offsets of row t of head h (q, out, dq, dout) or kv head g (k, v, dk, dv).
  int64_t q_off(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * H + h) * D; }
  int64_t kv_off(int64_t b, int64_t t, int64_t g) const { return ((b * T + t) * G + g) * D; }
  int64_t ldq() const { return H * D; }
  int64_t ldkv() const { return G * D; }
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

// Forward for query block i of head h.
template <typename T>
void forward_block(const Dims& dm, T* out, T* lse, const T* q, const T* k, const T* v, int64_t b, int64_t h,
                   int64_t i, T scale, T* scratch) {
  const ForwardScratch<T> w(dm, scratch);
  const int64_t blk = dm.blk, D = dm.D, dp = dm.d_padded<T>(), ldq = dm.ldq(), ldkv = dm.ldkv();
  const int64_t g = h / dm.heads_per_group();
  const int64_t i0 = i * blk, qc = std::min(blk, dm.T - i0), lanes = round_up(qc, Simd<T>::kWidth);
  pack_transposed(w.qt, blk, q + dm.q_off(b, i0, h), ldq, qc, lanes, D, scale);
  std::fill_n(w.m, lanes, -std::numeric_limits<T>::infinity());
  std::fill_n(w.l, lanes, T(0));
  for (int64_t j = 0; j <= i; ++j) {
    const int64_t k0 = j * blk, kc = std::min(blk, dm.T - k0);
    const bool diag = j == i;
    tile_gemm<T>(diag ? Causal::cols_from_row : Causal::none, {false}, kc, lanes, D, k + dm.kv_off(b, k0, g), ldkv,
                 1, w.qt, blk, w.s, blk);
    softmax_step(w.s, blk, kc, lanes, diag, w.m, w.l, w.alpha);
    pack_rows(w.vp, dp, v + dm.kv_off(b, k0, g), ldkv, kc, D);
    // O = alpha * O + P V, with A(r, c) = P^T[c, r].
    tile_gemm<T>(diag ? Causal::k_to_row : Causal::none, {j > 0, w.alpha}, qc, D, kc, w.s, 1, blk, w.vp, dp, w.o,
                 dp);
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
// query head of the group, every such query block, every key block it sees.
// dq rows of those blocks and the kv rows in `kv` belong to this task alone,
// so they accumulate in place, each overwritten by its first contribution.
template <typename T>
void backward_chunk(const Dims& dm, T* dq, KvGrads<T> kv, const T* dout, const T* q, const T* k, const T* v,
                    const T* out, const T* lse, int64_t b, int64_t g, int64_t i_begin, int64_t i_end, T scale,
                    T* scratch) {
  const BackwardScratch<T> w(dm, scratch);
  const int64_t blk = dm.blk, D = dm.D, dpad = dm.d_padded<T>(), ldq = dm.ldq(), ldkv = dm.ldkv();
  const int64_t hpg = dm.heads_per_group();
  for (int64_t h = g * hpg; h < (g + 1) * hpg; ++h) {
    for (int64_t i = i_begin; i < i_end; ++i) {
      const int64_t i0 = i * blk, qc = std::min(blk, dm.T - i0), lanes = round_up(qc, Simd<T>::kWidth);
      const T* qb = q + dm.q_off(b, i0, h);
      const T* dob = dout + dm.q_off(b, i0, h);
      const T* ob = out + dm.q_off(b, i0, h);
      T* dqb = dq + dm.q_off(b, i0, h);
      pack_transposed(w.qt, blk, qb, ldq, qc, lanes, D, scale);
      pack_transposed(w.dot, blk, dob, ldq, qc, lanes, D, T(1));
      pack_rows(w.qp, dpad, qb, ldq, qc, D);
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
      for (int64_t j = 0; j <= i; ++j) {
        const int64_t k0 = j * blk, kc = std::min(blk, dm.T - k0);
        const bool diag = j == i;
        pack_rows(w.kp, dpad, k + dm.kv_off(b, k0, g), ldkv, kc, D);
        const Causal scores = diag ? Causal::cols_from_row : Causal::none;
        tile_gemm<T>(scores, {false}, kc, lanes, D, w.kp, dpad, 1, w.qt, blk, w.s, blk);
        tile_gemm<T>(scores, {false}, kc, lanes, D, v + dm.kv_off(b, k0, g), ldkv, 1, w.dot, blk, w.dp, blk);
        score_grads(w.s, w.dp, blk, kc, lanes, diag, w.lse, w.delta, scale);
        // This task first reaches key block j with the group's first head, at
        // query block max(j, i_begin); that tile covers all kc rows, so it
        // overwrites.
        const Init<T> kv_init{!(h == g * hpg && i == std::max(j, i_begin))};
        const Causal by_key = diag ? Causal::k_from_row : Causal::none;
        T* dkb = kv.dk + k0 * kv.ld;
        T* dvb = kv.dv + k0 * kv.ld;
        tile_gemm(by_key, kv_init, kc, D, qc, w.s, blk, 1, w.dop, dpad, dvb, kv.ld);  // dV (+)= P^T dO
        tile_gemm(by_key, kv_init, kc, D, qc, w.dp, blk, 1, w.qp, dpad, dkb, kv.ld);  // dK (+)= scale dS^T Q
        tile_gemm<T>(diag ? Causal::k_to_row : Causal::none, {j > 0}, qc, D, kc, w.dp, 1, blk, w.kp, dpad, dqb,
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

// Query-block boundaries of n chunks: query block i costs i + 1 key tiles,
// so the boundaries split the triangle's area evenly. Chunk c is
// [bounds[c], bounds[c + 1]), possibly empty.
std::vector<int64_t> chunk_bounds(int64_t n, int64_t nb) {
  std::vector<int64_t> bounds(n + 1, nb);
  int64_t i = 0;
  for (int64_t c = 0; c < n; ++c) {
    const double area = 0.5 * static_cast<double>(nb) * static_cast<double>(nb + 1) * static_cast<double>(c) / n;
    while (i < nb && 0.5 * static_cast<double>(i) * static_cast<double>(i + 1) < area) ++i;
    bounds[c] = i;
  }
  return bounds;
}

}  // namespace

template <typename T>
void attention_forward(const CpuCtx& ctx, T* out, T* lse, const T* q, const T* k, const T* v, int64_t B,
                       int64_t T_, int64_t H, int64_t G, int64_t D, double scale, int64_t block) {
  check_dims(B, T_, H, G, D, block);
  const Dims dm{B, T_, H, G, D, block};
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
void attention_backward(const CpuCtx& ctx, T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k,
                        const T* v, const T* out, const T* lse, int64_t B, int64_t T_, int64_t H, int64_t G,
                        int64_t D, double scale, int64_t block) {
  check_dims(B, T_, H, G, D, block);
  const Dims dm{B, T_, H, G, D, block};
  const int64_t groups = B * G, chunks = backward_chunks(ctx, dm);
  const std::vector<int64_t> bounds = chunk_bounds(chunks, dm.num_blocks());
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

#define CLAW_INSTANTIATE(T)                                                                                 \
  template void attention_forward<T>(const CpuCtx&, T*, T*, const T*, const T*, const T*, int64_t, int64_t, \
                                     int64_t, int64_t, int64_t, double, int64_t);                          \
  template void attention_backward<T>(const CpuCtx&, T*, T*, T*, const T*, const T*, const T*, const T*,   \
                                      const T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t,     \
                                      double, int64_t);
CLAW_INSTANTIATE(float)
CLAW_INSTANTIATE(double)
#undef CLAW_INSTANTIATE

}  // namespace claw::kernels
