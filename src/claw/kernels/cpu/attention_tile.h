// The register-tile products and packing the flash attention kernels
// (attention.cc) are built from; included by that file only.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

namespace claw::kernels::attention_tile {

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

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

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
  // {0, 1, ..., kWidth - 1}
  static I iota() {
    I lane;
    for (int e = 0; e < kWidth; ++e) lane[e] = e;
    return lane;
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

// Where the visible (key, query) pairs of a score tile lie. Key row c of the
// tile (key key0 + c) is visible to query r of the block (query i0 + r) iff
// lo_r <= key0 + c <= i0 + r. Both bounds grow with r, so the rows a query
// sees and the queries a row is seen by are intervals moving forward together:
// a band along the diagonal, cut at document boundaries.
struct Band {
  int64_t key0;
  int64_t off;        // i0 - key0: query r sees rows up to r + off
  const int32_t* lo;  // lo_r of the block's n queries, or null (all 0)
  int64_t n;
  // The first row query r sees.
  int64_t first_row(int64_t r) const { return lo ? std::max<int64_t>(0, lo[r] - key0) : 0; }
  // Queries [0, query_end(c)) see row c, or rows past it.
  int64_t query_end(int64_t c) const { return lo ? std::upper_bound(lo, lo + n, key0 + c) - lo : n; }
};

// How a tile product's dimensions map to keys and queries, so that tile_gemm
// skips the register tiles (kRows rows by whole vectors, or runs of k) that
// hold no pair of the band. Pairs outside it are exactly zero in P and dS, so
// skipping them only saves work; it never changes a result.
enum class Roles {
  keys_x_queries,    // row m = key, column n = query (S^T, dP^T)
  keys_sum_queries,  // row m = key, k = query (dV, dK)
  queries_sum_keys,  // row m = query, k = key (O, dQ)
};

// C[M, N] (+)= A B over k < K as above; B and C rows are ldb and ldc apart.
// Rows go kRows at a time, columns kVecs vectors at a time (remainders use
// smaller register tiles), and columns past the last whole vector (D not a
// multiple of the width) take a scalar loop. A row block whose k range is
// empty is still written (C = 0, or C scaled by row_scale).
template <typename T>
void tile_gemm(Roles roles, const Band& band, Init<T> init, int64_t M, int64_t N, int64_t K, const T* A, int64_t am,
               int64_t ak, const T* B, int64_t ldb, T* C, int64_t ldc) {
  constexpr int W = Simd<T>::kWidth;
  const int64_t n_vec_end = N / W * W;
  for (int64_t m0 = 0; m0 < M; m0 += kRows) {
    const int mr = static_cast<int>(std::min<int64_t>(kRows, M - m0));
    int64_t k_lo = 0, k_hi = K, n_lo = 0, n_hi = n_vec_end;
    switch (roles) {
      case Roles::keys_x_queries:
        n_lo = std::max<int64_t>(0, m0 - band.off) / W * W;
        n_hi = std::min(n_vec_end, round_up(band.query_end(m0 + mr - 1), W));
        break;
      case Roles::keys_sum_queries:
        k_lo = std::clamp<int64_t>(m0 - band.off, 0, K);
        k_hi = std::clamp<int64_t>(band.query_end(m0 + mr - 1), k_lo, K);
        break;
      case Roles::queries_sum_keys:
        k_lo = std::min(K, band.first_row(m0));
        k_hi = std::clamp<int64_t>(m0 + mr + band.off, k_lo, K);
        break;
    }
    const T* a = A + m0 * am + k_lo * ak;
    const T* b = B + k_lo * ldb;
    T* c = C + m0 * ldc;
    const Init<T> row_init{init.accumulate, init.row_scale ? init.row_scale + m0 : nullptr};
    for (int64_t n = n_lo; n < n_hi;) {
      const int nv = static_cast<int>(std::min<int64_t>(kVecs, (n_hi - n) / W));
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

}  // namespace claw::kernels::attention_tile
