// Causal flash attention on the GPU, fp32: the CUDA side of cpu/attention.h
// (same mask: key j visible to query i iff lo_i <= j <= i, lo = seg_start or
// 0; GQA: query head h reads kv head h / (H / G); q, out, dq, dout
// [B, T, H, D], k, v, dk, dv [B, T, G, D], lse [B, H, T]; dq, dk, dv are
// overwritten). S = scale * (Q K^T) is formed as the dot product times scale.
//
// Parallel decomposition (tiles of 64 queries by 64 keys, 256 threads as a
// 16 x 16 grid (ty, tx); D padded to kD = 64 or 128 in shared memory, with
// zeros, so any D <= 128 works):
//   forward    one block per (query tile, h, b). Q stays in shared memory;
//              key tiles from the first one a query of the tile can see
//              (lo of its first row: lo is non-decreasing) to the diagonal
//              stream through shared memory (K, V). Thread (ty, tx) holds the
//              scores of queries ty + 16 i and keys tx + 16 j (i, j < 4); a
//              row's 16 threads are one half-warp, so row max and sum are
//              shuffles. Online softmax (running max m, running sum l,
//              rescaled accumulator); P goes through shared memory (over the
//              K tile) for P V, where the thread holds queries ty + 16 i and
//              channels 4 tx + 64 k + (0..3).
//   backward   Delta = rowsum(dO * O) first (one warp per (b, t, h) row, into
//              ctx.workspace), then two kernels, no float atomics:
//              dK/dV: one block per (key tile, kv head g, b), looping over
//              the H/G query heads of the group and the query tiles that can
//              see the key tile (from the diagonal until lo of a tile's first
//              query passes the tile's last key); it recomputes S^T and dP^T,
//              forms P^T and dS^T in shared memory and accumulates dV += P^T dO
//              and dK += scale dS^T Q in registers; the block owns its dk, dv
//              rows, so each is written once.
//              dQ: one block per (query tile, h, b) over the same key tiles as
//              forward, recomputing S and dP and accumulating dQ += scale dS K.
//   Every product is a register-tiled outer product over float4 loads of
//   row-major shared tiles with a row stride of kD + 4 floats (or 68), which
//   keeps both operand reads free of bank conflicts.
// Shared memory: forward 3 tiles (52 KB at kD = 64, 101 KB at 128), dQ
// 4 tiles + 1 score tile (87 / 152 KB), dK/dV 4 + 2 (104 / 170 KB).
// seg_start is trusted (0 <= seg_start[i] <= i, non-decreasing along a row);
// the CPU checks it, the GPU cannot without a copy back.
#include <climits>
#include <initializer_list>
#include <cmath>
#include <cstdint>

#include "claw/core/error.h"
#include "claw/kernels/cuda/check.cuh"
#include "claw/kernels/cuda/ops.h"

namespace claw::kernels::cuda {
namespace {

constexpr int kTile = 64;      // queries and keys per tile
constexpr int kThreads = 256;  // 16 x 16
constexpr int kLdP = kTile + 4;  // row stride of score tiles in shared memory

template <int kD>
__host__ __device__ constexpr int ld_of() {
  return kD + 4;
}

// dst[r, d] (row stride kD + 4) = src[(row0 + r) * stride + d] for row0 + r < T
// and d < D, else 0.
template <int kD>
__device__ inline void load_tile(float* dst, const float* src, int64_t stride, int row0, int T, int D, bool vec4) {
  constexpr int LD = ld_of<kD>();
  if (vec4) {
    constexpr int kQuads = kD / 4;
    for (int idx = threadIdx.x; idx < kTile * kQuads; idx += kThreads) {
      const int r = idx / kQuads, d = (idx % kQuads) * 4;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (row0 + r < T && d < D) v = *reinterpret_cast<const float4*>(src + static_cast<int64_t>(row0 + r) * stride + d);
      *reinterpret_cast<float4*>(dst + r * LD + d) = v;
    }
  } else {
    for (int idx = threadIdx.x; idx < kTile * kD; idx += kThreads) {
      const int r = idx / kD, d = idx % kD;
      dst[r * LD + d] = (row0 + r < T && d < D) ? src[static_cast<int64_t>(row0 + r) * stride + d] : 0.f;
    }
  }
}

// acc[i][j] += sum_{k < kK} A[(ty + 16 i) * ld + k] * B[(tx + 16 j) * ld + k]   (A B^T)
template <int kK>
__device__ inline void mm_abt(float (&acc)[4][4], const float* A, const float* B, int ld, int ty, int tx) {
#pragma unroll 2
  for (int k = 0; k < kK; k += 4) {
    float4 a[4], b[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = *reinterpret_cast<const float4*>(A + (ty + 16 * i) * ld + k);
#pragma unroll
    for (int j = 0; j < 4; ++j) b[j] = *reinterpret_cast<const float4*>(B + (tx + 16 * j) * ld + k);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        acc[i][j] += a[i].x * b[j].x;
        acc[i][j] += a[i].y * b[j].y;
        acc[i][j] += a[i].z * b[j].z;
        acc[i][j] += a[i].w * b[j].w;
      }
  }
}

// acc[i][4 q + e] += sum_{k < kTile} A[(ty + 16 i) * lda + k] * B[k * ldb + 64 q + 4 tx + e]   (A B)
template <int kD>
__device__ inline void mm_ab(float (&acc)[4][kD / 16], const float* A, int lda, const float* B, int ldb, int ty,
                             int tx) {
  constexpr int kQ = kD / 64;
#pragma unroll 2
  for (int k = 0; k < kTile; k += 4) {
    float4 a[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = *reinterpret_cast<const float4*>(A + (ty + 16 * i) * lda + k);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
      for (int q = 0; q < kQ; ++q) {
        const float4 b = *reinterpret_cast<const float4*>(B + (k + kk) * ldb + 64 * q + 4 * tx);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float av = kk == 0 ? a[i].x : kk == 1 ? a[i].y : kk == 2 ? a[i].z : a[i].w;
          acc[i][4 * q + 0] += av * b.x;
          acc[i][4 * q + 1] += av * b.y;
          acc[i][4 * q + 2] += av * b.z;
          acc[i][4 * q + 3] += av * b.w;
        }
      }
    }
  }
}

// Sum / max over the 16 threads of a half-warp (one score row).
__device__ inline float row_sum16(float v) {
  for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float row_max16(float v) {
  for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// lo of query i (INT_MAX for rows past T: nothing visible).
__device__ inline int query_lo(const int32_t* seg, int b, int i, int T) {
  if (i >= T) return INT_MAX;
  return seg ? seg[static_cast<int64_t>(b) * T + i] : 0;
}

struct Dims {
  int T, H, G, D;
  float scale;
};

template <int kD>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(float* out, float* lse, const float* q, const float* k, const float* v, Dims dm,
                             const int32_t* seg, bool vec4) {
  constexpr int LD = ld_of<kD>();
  constexpr int kC = kD / 16;  // output channels per thread
  extern __shared__ float4 smem4[];
  float* Qs = reinterpret_cast<float*>(smem4);
  float* Ks = Qs + kTile * LD;  // also P (64 x kLdP <= 64 x LD) once S is in registers
  float* Vs = Ks + kTile * LD;
  int* lo_s = reinterpret_cast<int*>(Vs + kTile * LD);
  const int T = dm.T, H = dm.H, G = dm.G, D = dm.D;
  const int i0 = blockIdx.x * kTile, h = blockIdx.y, b = blockIdx.z, g = h / (H / G);
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t q_stride = static_cast<int64_t>(H) * D, kv_stride = static_cast<int64_t>(G) * D;
  const float* qb = q + static_cast<int64_t>(b) * T * q_stride + static_cast<int64_t>(h) * D;
  const float* kb = k + static_cast<int64_t>(b) * T * kv_stride + static_cast<int64_t>(g) * D;
  const float* vb = v + static_cast<int64_t>(b) * T * kv_stride + static_cast<int64_t>(g) * D;

  load_tile<kD>(Qs, qb, q_stride, i0, T, D, vec4);
  if (threadIdx.x < kTile) lo_s[threadIdx.x] = query_lo(seg, b, i0 + threadIdx.x, T);
  __syncthreads();
  const int lo_min = lo_s[0];
  const int i_last = min(i0 + kTile - 1, T - 1);
  int lo_r[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) lo_r[i] = lo_s[ty + 16 * i];

  float m[4], l[4], acc[4][kC];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.f;
#pragma unroll
    for (int c = 0; c < kC; ++c) acc[i][c] = 0.f;
  }

  for (int kt = lo_min / kTile; kt <= i_last / kTile; ++kt) {
    const int j0 = kt * kTile;
    __syncthreads();  // the previous tile's P V is done with Ks (P) and Vs
    load_tile<kD>(Ks, kb, kv_stride, j0, T, D, vec4);
    load_tile<kD>(Vs, vb, kv_stride, j0, T, D, vec4);
    __syncthreads();
    float s[4][4] = {};
    mm_abt<kD>(s, Qs, Ks, LD, ty, tx);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int qi = i0 + ty + 16 * i;
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int kj = j0 + tx + 16 * j;
        s[i][j] = (kj >= lo_r[i] && kj <= qi) ? s[i][j] * dm.scale : -INFINITY;
        mx = fmaxf(mx, s[i][j]);
      }
      const float m_new = fmaxf(m[i], row_max16(mx));
      float alpha = 1.f, psum = 0.f;
      if (m_new == -INFINITY) {
#pragma unroll
        for (int j = 0; j < 4; ++j) s[i][j] = 0.f;
      } else {
        alpha = expf(m[i] - m_new);  // 0 while m[i] is -inf
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          s[i][j] = expf(s[i][j] - m_new);
          psum += s[i][j];
        }
      }
      m[i] = m_new;
      l[i] = l[i] * alpha + psum;  // this thread's part of the row sum
#pragma unroll
      for (int c = 0; c < kC; ++c) acc[i][c] *= alpha;
    }
    __syncthreads();  // all threads are done reading Ks
    float* Ps = Ks;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) Ps[(ty + 16 * i) * kLdP + tx + 16 * j] = s[i][j];
    __syncthreads();
    mm_ab<kD>(acc, Ps, kLdP, Vs, LD, ty, tx);
  }

  float* ob = out + static_cast<int64_t>(b) * T * q_stride + static_cast<int64_t>(h) * D;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = ty + 16 * i, qi = i0 + r;
    const float lt = row_sum16(l[i]);
    if (qi >= T) continue;
    const float inv = 1.f / lt;
    float* orow = ob + static_cast<int64_t>(qi) * q_stride;
#pragma unroll
    for (int qq = 0; qq < kD / 64; ++qq)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int d = 64 * qq + 4 * tx + e;
        if (d < D) orow[d] = acc[i][4 * qq + e] * inv;
      }
    if (tx == 0) lse[(static_cast<int64_t>(b) * H + h) * T + qi] = m[i] + logf(lt);
  }
}

// delta[(b H + h) T + t] = sum_d dout[b, t, h, d] out[b, t, h, d]: one warp per row.
__global__ void attention_delta_kernel(float* delta, const float* dout, const float* out, int64_t rows, int T, int H,
                                       int D) {
  const int lane = threadIdx.x % 32;
  for (int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; row < rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.x / 32) {
    const float* a = dout + row * D;
    const float* o = out + row * D;
    float s = 0.f;
    for (int d = lane; d < D; d += 32) s += a[d] * o[d];
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) {
      const int64_t bt = row / H;
      const int h = static_cast<int>(row % H);
      const int64_t b = bt / T, t = bt % T;
      delta[(b * H + h) * T + t] = s;
    }
  }
}

template <int kD>
__device__ inline void store_rows(float* dst, int64_t stride, int row0, int T, int D, const float (&acc)[4][kD / 16],
                                  int ty, int tx) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int t = row0 + ty + 16 * i;
    if (t >= T) continue;
    float* row = dst + static_cast<int64_t>(t) * stride;
#pragma unroll
    for (int qq = 0; qq < kD / 64; ++qq)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int d = 64 * qq + 4 * tx + e;
        if (d < D) row[d] = acc[i][4 * qq + e];
      }
  }
}

template <int kD>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dkdv_kernel(float* dk, float* dv, const float* dout, const float* q, const float* k,
                                   const float* v, const float* lse, const float* delta, Dims dm, const int32_t* seg,
                                   bool vec4) {
  constexpr int LD = ld_of<kD>();
  constexpr int kC = kD / 16;
  extern __shared__ float4 smem4[];
  float* Ks = reinterpret_cast<float*>(smem4);
  float* Vs = Ks + kTile * LD;
  float* Qs = Vs + kTile * LD;
  float* dOs = Qs + kTile * LD;
  float* Ps = dOs + kTile * LD;  // P^T [key, query]
  float* dSs = Ps + kTile * kLdP;  // scale dS^T [key, query]
  float* lse_s = dSs + kTile * kLdP;
  float* dl_s = lse_s + kTile;
  int* lo_s = reinterpret_cast<int*>(dl_s + kTile);
  const int T = dm.T, H = dm.H, G = dm.G, D = dm.D, group = H / G;
  const int j0 = blockIdx.x * kTile, g = blockIdx.y, b = blockIdx.z;
  const int j_last = min(j0 + kTile - 1, T - 1);
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t q_stride = static_cast<int64_t>(H) * D, kv_stride = static_cast<int64_t>(G) * D;
  const int64_t kv_off = static_cast<int64_t>(b) * T * kv_stride + static_cast<int64_t>(g) * D;

  load_tile<kD>(Ks, k + kv_off, kv_stride, j0, T, D, vec4);
  load_tile<kD>(Vs, v + kv_off, kv_stride, j0, T, D, vec4);

  float dk_acc[4][kC], dv_acc[4][kC];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int c = 0; c < kC; ++c) dk_acc[i][c] = dv_acc[i][c] = 0.f;

  for (int hh = 0; hh < group; ++hh) {
    const int h = g * group + hh;
    const int64_t q_off = static_cast<int64_t>(b) * T * q_stride + static_cast<int64_t>(h) * D;
    const float* lse_bh = lse + (static_cast<int64_t>(b) * H + h) * T;
    const float* dl_bh = delta + (static_cast<int64_t>(b) * H + h) * T;
    for (int i0 = (j0 / kTile) * kTile; i0 < T; i0 += kTile) {
      // lo is non-decreasing: once a tile's first query starts past the last key, so do all later ones.
      if (query_lo(seg, b, i0, T) > j_last) break;
      __syncthreads();  // the previous tile's products are done with Qs, dOs, Ps, dSs
      load_tile<kD>(Qs, q + q_off, q_stride, i0, T, D, vec4);
      load_tile<kD>(dOs, dout + q_off, q_stride, i0, T, D, vec4);
      if (threadIdx.x < kTile) {
        const int qi = i0 + threadIdx.x;
        lse_s[threadIdx.x] = qi < T ? lse_bh[qi] : 0.f;
        dl_s[threadIdx.x] = qi < T ? dl_bh[qi] : 0.f;
        lo_s[threadIdx.x] = query_lo(seg, b, qi, T);
      }
      __syncthreads();
      float st[4][4] = {}, dpt[4][4] = {};
      mm_abt<kD>(st, Ks, Qs, LD, ty, tx);   // S^T[key][query] (unscaled)
      mm_abt<kD>(dpt, Vs, dOs, LD, ty, tx);  // dP^T[key][query]
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int c = ty + 16 * i, kj = j0 + c;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int r = tx + 16 * j, qi = i0 + r;
          const bool vis = kj >= lo_s[r] && kj <= qi;
          const float p = vis ? expf(st[i][j] * dm.scale - lse_s[r]) : 0.f;
          Ps[c * kLdP + r] = p;
          dSs[c * kLdP + r] = vis ? dm.scale * p * (dpt[i][j] - dl_s[r]) : 0.f;
        }
      }
      __syncthreads();
      mm_ab<kD>(dv_acc, Ps, kLdP, dOs, LD, ty, tx);  // dV += P^T dO
      mm_ab<kD>(dk_acc, dSs, kLdP, Qs, LD, ty, tx);  // dK += scale dS^T Q
    }
  }
  store_rows<kD>(dk + kv_off, kv_stride, j0, T, D, dk_acc, ty, tx);
  store_rows<kD>(dv + kv_off, kv_stride, j0, T, D, dv_acc, ty, tx);
}

template <int kD>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dq_kernel(float* dq, const float* dout, const float* q, const float* k, const float* v,
                                 const float* lse, const float* delta, Dims dm, const int32_t* seg, bool vec4) {
  constexpr int LD = ld_of<kD>();
  constexpr int kC = kD / 16;
  extern __shared__ float4 smem4[];
  float* Qs = reinterpret_cast<float*>(smem4);
  float* dOs = Qs + kTile * LD;
  float* Ks = dOs + kTile * LD;
  float* Vs = Ks + kTile * LD;
  float* dSs = Vs + kTile * LD;  // scale dS [query, key]
  float* lse_s = dSs + kTile * kLdP;
  float* dl_s = lse_s + kTile;
  int* lo_s = reinterpret_cast<int*>(dl_s + kTile);
  const int T = dm.T, H = dm.H, G = dm.G, D = dm.D;
  const int i0 = blockIdx.x * kTile, h = blockIdx.y, b = blockIdx.z, g = h / (H / G);
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t q_stride = static_cast<int64_t>(H) * D, kv_stride = static_cast<int64_t>(G) * D;
  const int64_t q_off = static_cast<int64_t>(b) * T * q_stride + static_cast<int64_t>(h) * D;
  const int64_t kv_off = static_cast<int64_t>(b) * T * kv_stride + static_cast<int64_t>(g) * D;

  load_tile<kD>(Qs, q + q_off, q_stride, i0, T, D, vec4);
  load_tile<kD>(dOs, dout + q_off, q_stride, i0, T, D, vec4);
  if (threadIdx.x < kTile) {
    const int qi = i0 + threadIdx.x;
    const int64_t bh = (static_cast<int64_t>(b) * H + h) * T;
    lse_s[threadIdx.x] = qi < T ? lse[bh + qi] : 0.f;
    dl_s[threadIdx.x] = qi < T ? delta[bh + qi] : 0.f;
    lo_s[threadIdx.x] = query_lo(seg, b, qi, T);
  }
  __syncthreads();
  const int lo_min = lo_s[0];
  const int i_last = min(i0 + kTile - 1, T - 1);
  int lo_r[4];
  float lse_r[4], dl_r[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    lo_r[i] = lo_s[ty + 16 * i];
    lse_r[i] = lse_s[ty + 16 * i];
    dl_r[i] = dl_s[ty + 16 * i];
  }

  float acc[4][kC];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int c = 0; c < kC; ++c) acc[i][c] = 0.f;

  for (int kt = lo_min / kTile; kt <= i_last / kTile; ++kt) {
    const int j0 = kt * kTile;
    __syncthreads();  // the previous tile's dS K is done with Ks and dSs
    load_tile<kD>(Ks, k + kv_off, kv_stride, j0, T, D, vec4);
    load_tile<kD>(Vs, v + kv_off, kv_stride, j0, T, D, vec4);
    __syncthreads();
    float s[4][4] = {}, dp[4][4] = {};
    mm_abt<kD>(s, Qs, Ks, LD, ty, tx);
    mm_abt<kD>(dp, dOs, Vs, LD, ty, tx);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = ty + 16 * i, qi = i0 + r;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int c = tx + 16 * j, kj = j0 + c;
        const bool vis = kj >= lo_r[i] && kj <= qi;
        const float p = vis ? expf(s[i][j] * dm.scale - lse_r[i]) : 0.f;
        dSs[r * kLdP + c] = vis ? dm.scale * p * (dp[i][j] - dl_r[i]) : 0.f;
      }
    }
    __syncthreads();
    mm_ab<kD>(acc, dSs, kLdP, Ks, LD, ty, tx);  // dQ += scale dS K
  }
  store_rows<kD>(dq + q_off, q_stride, i0, T, D, acc, ty, tx);
}

constexpr size_t forward_smem(int kd) { return (3 * kTile * (kd + 4) + kTile) * sizeof(float); }
constexpr size_t dkdv_smem(int kd) {
  return (4 * kTile * (kd + 4) + 2 * kTile * kLdP + 3 * kTile) * sizeof(float);
}
constexpr size_t dq_smem(int kd) { return (4 * kTile * (kd + 4) + kTile * kLdP + 3 * kTile) * sizeof(float); }

void check_dims(int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) {
  CLAW_CHECK(B >= 0 && T >= 0 && D >= 1 && G >= 1 && H >= G && H % G == 0,
             "attention: bad dims B={} T={} H={} G={} D={}", B, T, H, G, D);
  CLAW_CHECK(D <= 128, "attention (CUDA): head dim D={} is above the supported 128", D);
  CLAW_CHECK(T <= INT_MAX / 2 && B <= 65535 && H <= 65535, "attention (CUDA): B={} T={} H={} exceed one grid", B, T,
             H);
}

// Whether every row start is 16-byte aligned (float4 tile loads).
bool rows_aligned(int64_t D, std::initializer_list<const float*> ptrs) {
  if (D % 4 != 0) return false;
  for (const float* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

template <typename Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  CLAW_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

template <int kD>
void forward_launch(const GpuCtx& ctx, float* out, float* lse, const float* q, const float* k, const float* v,
                    int64_t B, int64_t T, int64_t H, const Dims& dm, const int32_t* seg, bool vec4) {
  constexpr size_t smem = forward_smem(kD);
  allow_smem(attention_forward_kernel<kD>, smem);
  const dim3 grid(static_cast<unsigned>((T + kTile - 1) / kTile), static_cast<unsigned>(H), static_cast<unsigned>(B));
  attention_forward_kernel<kD><<<grid, kThreads, smem, stream_of(ctx)>>>(out, lse, q, k, v, dm, seg, vec4);
  CLAW_CUDA_LAUNCH_CHECK();
}

template <int kD>
void backward_launch(const GpuCtx& ctx, float* dq, float* dk, float* dv, const float* dout, const float* q,
                     const float* k, const float* v, const float* lse, const float* delta, int64_t B, int64_t T,
                     int64_t H, int64_t G, const Dims& dm, const int32_t* seg, bool vec4) {
  cudaStream_t s = stream_of(ctx);
  const unsigned tiles = static_cast<unsigned>((T + kTile - 1) / kTile);
  constexpr size_t smem_kv = dkdv_smem(kD), smem_q = dq_smem(kD);
  allow_smem(attention_backward_dkdv_kernel<kD>, smem_kv);
  allow_smem(attention_backward_dq_kernel<kD>, smem_q);
  attention_backward_dkdv_kernel<kD><<<dim3(tiles, static_cast<unsigned>(G), static_cast<unsigned>(B)), kThreads,
                                       smem_kv, s>>>(dk, dv, dout, q, k, v, lse, delta, dm, seg, vec4);
  CLAW_CUDA_LAUNCH_CHECK();
  attention_backward_dq_kernel<kD><<<dim3(tiles, static_cast<unsigned>(H), static_cast<unsigned>(B)), kThreads, smem_q,
                                     s>>>(dq, dout, q, k, v, lse, delta, dm, seg, vec4);
  CLAW_CUDA_LAUNCH_CHECK();
}

}  // namespace

void attention_forward(const GpuCtx& ctx, float* out, float* lse, const float* q, const float* k, const float* v,
                       int64_t B, int64_t T, int64_t H, int64_t G, int64_t D, double scale, const int32_t* seg_start) {
  check_dims(B, T, H, G, D);
  if (B == 0 || T == 0) return;
  if (ctx.bf16_attention && attention_tc_supported(D, {q, k, v, out}))
    return attention_forward_tc(ctx, out, lse, q, k, v, B, T, H, G, D, scale, seg_start);
  const Dims dm{static_cast<int>(T), static_cast<int>(H), static_cast<int>(G), static_cast<int>(D),
                static_cast<float>(scale)};
  const bool vec4 = rows_aligned(D, {q, k, v});
  if (D <= 64)
    forward_launch<64>(ctx, out, lse, q, k, v, B, T, H, dm, seg_start, vec4);
  else
    forward_launch<128>(ctx, out, lse, q, k, v, B, T, H, dm, seg_start, vec4);
}

void attention_backward(const GpuCtx& ctx, float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const float* out, const float* lse, int64_t B, int64_t T,
                        int64_t H, int64_t G, int64_t D, double scale, const int32_t* seg_start) {
  check_dims(B, T, H, G, D);
  if (B == 0 || T == 0) return;
  const size_t delta_bytes = static_cast<size_t>(B * H * T) * sizeof(float);
  CLAW_CHECK(ctx.workspace && ctx.workspace_bytes >= delta_bytes,
             "attention backward: GPU workspace of {} bytes is below the {} bytes Delta needs", ctx.workspace_bytes,
             delta_bytes);
  float* delta = static_cast<float*>(ctx.workspace);
  const int64_t rows = B * T * H;
  attention_delta_kernel<<<grid_for(rows * 32, 256), 256, 0, stream_of(ctx)>>>(delta, dout, out, rows, static_cast<int>(T),
                                                           static_cast<int>(H), static_cast<int>(D));
  CLAW_CUDA_LAUNCH_CHECK();
  if (ctx.bf16_attention && attention_tc_supported(D, {dq, dk, dv, dout, q, k, v}))
    return attention_backward_tc(ctx, dq, dk, dv, dout, q, k, v, lse, delta, B, T, H, G, D, scale, seg_start);
  const Dims dm{static_cast<int>(T), static_cast<int>(H), static_cast<int>(G), static_cast<int>(D),
                static_cast<float>(scale)};
  const bool vec4 = rows_aligned(D, {q, k, v, dout});
  if (D <= 64)
    backward_launch<64>(ctx, dq, dk, dv, dout, q, k, v, lse, delta, B, T, H, G, dm, seg_start, vec4);
  else
    backward_launch<128>(ctx, dq, dk, dv, dout, q, k, v, lse, delta, B, T, H, G, dm, seg_start, vec4);
}

}  // namespace claw::kernels::cuda
