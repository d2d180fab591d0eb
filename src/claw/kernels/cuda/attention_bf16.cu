// Causal flash attention on the tensor cores, bf16 operands with fp32
// accumulation: what attention_forward / attention_backward run when the
// context asks for it (GpuCtx::bf16_attention, set under --bf16) and the head
// dim is 64 or 128. Same contract as attention.cu (and cpu/attention.h): the
// mask (key j visible to query i iff lo_i <= j <= i), GQA, fp32 q, k, v, out,
// dq, dk, dv in [B, T, *, D], lse [B, H, T] in natural log.
//
// Numerics: q, k, v and dout are rounded to bf16 on their way into shared
// memory (exact for --bf16's q, k, v, which the layers round where they are
// made); so are the probabilities P before P V and the score gradients dS
// before dS K and dS^T Q. Every product accumulates in fp32, softmax and its
// statistics are fp32. The result is the fp32 kernel's within bf16's
// rounding (test_cuda_kernels: ||tc - cpu|| / ||cpu|| under 1e-2).
//
// Decomposition (tiles of 64 queries by 64 keys, 4 warps of 16 rows each,
// mma.sync.m16n8k16; shared tiles are bf16 rows of D + 8 elements, so that the
// 32-bit fragment loads and ldmatrix rows of a warp fall in distinct banks):
//   forward  one block per (query tile, h, b); each warp keeps its 16 queries'
//            Q fragments in registers, streams the key tiles the tile can see
//            (from lo of its first query to the diagonal) through shared
//            memory, forms S = Q K^T, the online softmax in registers (a
//            row's values live in the 4 threads of a quad: two shuffles), and
//            O += P V with P's accumulators re-packed as A fragments (no trip
//            through shared memory) and V's B fragments by ldmatrix.trans.
//   dK, dV   one block per (key tile, kv head g, b), each warp 16 keys; over
//            the group's query heads and the query tiles that see the tile:
//            S^T = K Q^T, P^T from lse, dV += P^T dO, dP^T = V dO^T,
//            dS^T = P^T (dP^T - Delta), dK += dS^T Q. The block owns its rows
//            of dk and dv: written once, no atomics.
//   dQ       one block per (query tile, h, b), each warp 16 queries, over the
//            forward's key tiles: S = Q K^T, P, dP = dO V^T, dS, dQ += dS K.
//   Delta = rowsum(dO * O) comes from attention.cu's kernel (ctx.workspace).
#include <cuda_bf16.h>

#include <climits>
#include <cstdint>

#include "claw/core/error.h"
#include "claw/kernels/cuda/check.cuh"
#include "claw/kernels/cuda/ops.h"

namespace claw::kernels::cuda {
namespace {

constexpr int kRows = 64;      // queries (or keys) per block, 16 per warp
constexpr int kCols = 64;      // keys (or queries) per streamed tile
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;

template <int kD>
__host__ __device__ constexpr int lds() {  // bf16 row stride of a shared tile
  return kD + 8;
}

struct Dims {
  int T, H, G, D;
  float scale;
};

// ---- tensor-core primitives -------------------------------------------------------

// c += a b for one m16n8k16 tile: a row-major 16 x 16, b column-major 16 x 8
// (b[k][n] with k the pair inside a register), c 16 x 8 fp32.
__device__ inline void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8 x 8 bf16 matrices transposed: lane l gives the address of row l % 8
// of matrix l / 8; register j receives {M_j[2t][g], M_j[2t + 1][g]}.
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const __nv_bfloat16* p) {
  const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

__device__ inline uint32_t ld32(const __nv_bfloat16* p) { return *reinterpret_cast<const uint32_t*>(p); }

__device__ inline uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The A fragment of rows [16 w, 16 w + 16) and columns [16 kk, 16 kk + 16) of a
// row-major shared tile (stride ld).
__device__ inline void load_a(uint32_t (&a)[4], const __nv_bfloat16* tile, int ld, int row0, int col0, int g, int t) {
  const __nv_bfloat16* p = tile + (row0 + g) * ld + col0 + 2 * t;
  a[0] = ld32(p);
  a[1] = ld32(p + 8 * ld);
  a[2] = ld32(p + 8);
  a[3] = ld32(p + 8 * ld + 8);
}

// acc[nb] (16 x 8 blocks, nb < kN) += A (16 x kK, fragments from tile rows
// row0..row0+15) times B^T where B's rows are tile2 rows nb * 8 + n (so
// b[k][n] = tile2[n][k]): S = X Y^T with both operands row-major in shared memory.
template <int kN, int kK>
__device__ inline void mm_abt(float (&acc)[kN][4], const __nv_bfloat16* a_tile, int lda, int row0,
                              const __nv_bfloat16* b_tile, int ldb, int g, int t) {
#pragma unroll
  for (int kk = 0; kk < kK / 16; ++kk) {
    uint32_t a[4];
    load_a(a, a_tile, lda, row0, 16 * kk, g, t);
#pragma unroll
    for (int nb = 0; nb < kN; ++nb) {
      const __nv_bfloat16* p = b_tile + (nb * 8 + g) * ldb + 16 * kk + 2 * t;
      mma(acc[nb], a, ld32(p), ld32(p + 8));
    }
  }
}

// acc[nd] (16 x 8 blocks over kD columns) += P (16 x 64, as 8 accumulator
// blocks of 16 x 8, re-packed to bf16 A fragments) times the shared tile
// rows 0..63 (64 x kD, row-major: B fragments by ldmatrix.trans).
template <int kD>
__device__ inline void mm_pv(float (&acc)[kD / 8][4], const float (&p)[8][4], const __nv_bfloat16* tile, int lane) {
  constexpr int LD = lds<kD>();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    uint32_t a[4];
    a[0] = pack_bf16(p[2 * kk][0], p[2 * kk][1]);
    a[1] = pack_bf16(p[2 * kk][2], p[2 * kk][3]);
    a[2] = pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]);
    a[3] = pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3]);
    const int m = lane / 8, r = lane % 8;
#pragma unroll
    for (int nd = 0; nd < kD / 8; nd += 2) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, tile + (16 * kk + (m & 1) * 8 + r) * LD + (nd + (m >> 1)) * 8);
      mma(acc[nd], a, b[0], b[1]);
      mma(acc[nd + 1], a, b[2], b[3]);
    }
  }
}

// rows [row0, row0 + 64) of src (row stride `stride` floats, D columns) as
// bf16 into a shared tile; rows past T are zeros. D % 4 == 0, rows 16-byte aligned.
template <int kD>
__device__ inline void load_tile(__nv_bfloat16* dst, const float* src, int64_t stride, int row0, int T) {
  constexpr int LD = lds<kD>(), kQuads = kD / 4;
  for (int idx = threadIdx.x; idx < kRows * kQuads; idx += kThreads) {
    const int r = idx / kQuads, d = (idx % kQuads) * 4;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (row0 + r < T) v = *reinterpret_cast<const float4*>(src + static_cast<int64_t>(row0 + r) * stride + d);
    uint2 packed;
    packed.x = pack_bf16(v.x, v.y);
    packed.y = pack_bf16(v.z, v.w);
    *reinterpret_cast<uint2*>(dst + r * LD + d) = packed;
  }
}

// The mask: key j is visible to query i, whose document starts at lo
// (query_lo: INT_MAX past T, so nothing is visible there).
__device__ inline bool visible(int j, int lo, int i) { return j >= lo && j <= i; }

__device__ inline int query_lo(const int32_t* seg, int b, int i, int T) {
  if (i >= T) return INT_MAX;
  return seg ? seg[static_cast<int64_t>(b) * T + i] : 0;
}

// Accumulator element e of block nb: local row g + 8 (e >= 2), column nb * 8 + 2 t + (e & 1).
__device__ inline int acc_col(int nb, int t, int e) { return nb * 8 + 2 * t + (e & 1); }

// Row values of a quad (the 4 lanes that share a row): max and sum.
__device__ inline float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ inline float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Stores a warp's 16 x kD accumulator rows (times `mul`) to dst rows row0.. (< T).
template <int kD>
__device__ inline void store_acc(float* dst, int64_t stride, int row0, int T, const float (&acc)[kD / 8][4],
                                 float mul0, float mul1, int g, int t) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = row0 + g + 8 * half;
    if (row >= T) continue;
    const float mul = half ? mul1 : mul0;
    float* p = dst + static_cast<int64_t>(row) * stride + 2 * t;
#pragma unroll
    for (int nd = 0; nd < kD / 8; ++nd)
      *reinterpret_cast<float2*>(p + nd * 8) = make_float2(acc[nd][2 * half] * mul, acc[nd][2 * half + 1] * mul);
  }
}

// ---- forward -----------------------------------------------------------------------

template <int kD>
__global__ void __launch_bounds__(kThreads)
    tc_forward_kernel(float* out, float* lse, const float* q, const float* k, const float* v, Dims dm,
                      const int32_t* seg) {
  constexpr int LD = lds<kD>();
  extern __shared__ uint4 smem_tc[];
  auto* Qs = reinterpret_cast<__nv_bfloat16*>(smem_tc);
  __nv_bfloat16* Ks = Qs + kRows * LD;
  __nv_bfloat16* Vs = Ks + kCols * LD;
  int* lo_s = reinterpret_cast<int*>(Vs + kCols * LD);
  const int T = dm.T, H = dm.H, G = dm.G, D = dm.D;
  const int i0 = blockIdx.x * kRows, h = blockIdx.y, b = blockIdx.z, kvh = h / (H / G);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t q_stride = static_cast<int64_t>(H) * D, kv_stride = static_cast<int64_t>(G) * D;
  const float* qb = q + static_cast<int64_t>(b) * T * q_stride + static_cast<int64_t>(h) * D;
  const float* kb = k + static_cast<int64_t>(b) * T * kv_stride + static_cast<int64_t>(kvh) * D;
  const float* vb = v + static_cast<int64_t>(b) * T * kv_stride + static_cast<int64_t>(kvh) * D;

  load_tile<kD>(Qs, qb, q_stride, i0, T);
  if (threadIdx.x < kRows) lo_s[threadIdx.x] = query_lo(seg, b, i0 + threadIdx.x, T);
  __syncthreads();
  const int lo_min = lo_s[0], i_last = min(i0 + kRows - 1, T - 1);
  const int r0 = 16 * warp;                      // this warp's first local row
  const int qi0 = i0 + r0 + g, qi1 = qi0 + 8;    // the thread's two queries
  const int lo0 = lo_s[r0 + g], lo1 = lo_s[r0 + g + 8];
  uint32_t qf[kD / 16][4];
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) load_a(qf[kk], Qs, LD, r0, 16 * kk, g, t);

  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
  float o[kD / 8][4];
#pragma unroll
  for (int nd = 0; nd < kD / 8; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.f;

  for (int kt = lo_min / kCols; kt <= i_last / kCols; ++kt) {
    const int j0 = kt * kCols;
    __syncthreads();  // every warp is done with the previous K and V
    load_tile<kD>(Ks, kb, kv_stride, j0, T);
    load_tile<kD>(Vs, vb, kv_stride, j0, T);
    __syncthreads();
    float s[8][4];
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk)
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
        const __nv_bfloat16* p = Ks + (nb * 8 + g) * LD + 16 * kk + 2 * t;
        mma(s[nb], qf[kk], ld32(p), ld32(p + 8));
      }
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int nb = 0; nb < 8; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = j0 + acc_col(nb, t, e);
        const bool top = e < 2;
        const bool seen = top ? visible(j, lo0, qi0) : visible(j, lo1, qi1);
        s[nb][e] = seen ? s[nb][e] * dm.scale : -INFINITY;
        if (top)
          mx0 = fmaxf(mx0, s[nb][e]);
        else
          mx1 = fmaxf(mx1, s[nb][e]);
      }
    const float mn0 = fmaxf(m0, quad_max(mx0)), mn1 = fmaxf(m1, quad_max(mx1));
    // A row with nothing visible yet keeps m = -inf: its P is 0 and nothing rescales.
    const float a0 = mn0 == -INFINITY ? 1.f : __expf(m0 - mn0), a1 = mn1 == -INFINITY ? 1.f : __expf(m1 - mn1);
    const float base0 = mn0 == -INFINITY ? 0.f : mn0, base1 = mn1 == -INFINITY ? 0.f : mn1;
    float ps0 = 0.f, ps1 = 0.f;
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
      s[nb][0] = __expf(s[nb][0] - base0);  // exp(-inf) = 0 for masked keys
      s[nb][1] = __expf(s[nb][1] - base0);
      s[nb][2] = __expf(s[nb][2] - base1);
      s[nb][3] = __expf(s[nb][3] - base1);
      ps0 += s[nb][0] + s[nb][1];
      ps1 += s[nb][2] + s[nb][3];
    }
    m0 = mn0;
    m1 = mn1;
    l0 = l0 * a0 + ps0;  // this thread's part of the row sums
    l1 = l1 * a1 + ps1;
#pragma unroll
    for (int nd = 0; nd < kD / 8; ++nd) {
      o[nd][0] *= a0;
      o[nd][1] *= a0;
      o[nd][2] *= a1;
      o[nd][3] *= a1;
    }
    mm_pv<kD>(o, s, Vs, lane);
  }

  l0 = quad_sum(l0);
  l1 = quad_sum(l1);
  float* ob = out + static_cast<int64_t>(b) * T * q_stride + static_cast<int64_t>(h) * D;
  store_acc<kD>(ob, q_stride, i0 + r0, T, o, 1.f / l0, 1.f / l1, g, t);
  if (t == 0) {
    float* lb = lse + (static_cast<int64_t>(b) * H + h) * T;
    if (qi0 < T) lb[qi0] = m0 + logf(l0);
    if (qi1 < T) lb[qi1] = m1 + logf(l1);
  }
}

// ---- backward: dK and dV ---------------------------------------------------------------

template <int kD>
__global__ void __launch_bounds__(kThreads)
    tc_dkdv_kernel(float* dk, float* dv, const float* dout, const float* q, const float* k, const float* v,
                   const float* lse, const float* delta, Dims dm, const int32_t* seg) {
  constexpr int LD = lds<kD>();
  extern __shared__ uint4 smem_tc[];
  auto* Ks = reinterpret_cast<__nv_bfloat16*>(smem_tc);
  __nv_bfloat16* Vs = Ks + kRows * LD;
  __nv_bfloat16* Qs = Vs + kRows * LD;
  __nv_bfloat16* dOs = Qs + kCols * LD;
  float* lse_s = reinterpret_cast<float*>(dOs + kCols * LD);
  float* delta_s = lse_s + kCols;
  int* lo_s = reinterpret_cast<int*>(delta_s + kCols);
  const int T = dm.T, H = dm.H, G = dm.G, D = dm.D;
  const int j0 = blockIdx.x * kRows, kvh = blockIdx.y, b = blockIdx.z, group = H / G;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t q_stride = static_cast<int64_t>(H) * D, kv_stride = static_cast<int64_t>(G) * D;
  const int64_t kv_off = static_cast<int64_t>(b) * T * kv_stride + static_cast<int64_t>(kvh) * D;
  load_tile<kD>(Ks, k + kv_off, kv_stride, j0, T);
  load_tile<kD>(Vs, v + kv_off, kv_stride, j0, T);
  const int r0 = 16 * warp;
  const int kj0 = j0 + r0 + g, kj1 = kj0 + 8;  // the thread's two keys
  const int j_last = min(j0 + kRows - 1, T - 1);

  float dkacc[kD / 8][4], dvacc[kD / 8][4];
#pragma unroll
  for (int nd = 0; nd < kD / 8; ++nd)
#pragma unroll
    for (int e = 0; e < 4; ++e) dkacc[nd][e] = dvacc[nd][e] = 0.f;

  for (int hh = 0; hh < group; ++hh) {
    const int h = kvh * group + hh;
    const int64_t q_off = static_cast<int64_t>(b) * T * q_stride + static_cast<int64_t>(h) * D;
    const float* lb = lse + (static_cast<int64_t>(b) * H + h) * T;
    const float* db = delta + (static_cast<int64_t>(b) * H + h) * T;
    for (int it = blockIdx.x; it * kCols < T; ++it) {
      const int i0 = it * kCols;
      // lo is non-decreasing along a row: once a tile's first query starts
      // past this key tile, no later query sees it.
      if (query_lo(seg, b, i0, T) > j_last) break;
      __syncthreads();  // every warp is done with the previous Q and dO
      load_tile<kD>(Qs, q + q_off, q_stride, i0, T);
      load_tile<kD>(dOs, dout + q_off, q_stride, i0, T);
      if (threadIdx.x < kCols) {
        const int i = i0 + threadIdx.x;
        lo_s[threadIdx.x] = query_lo(seg, b, i, T);
        lse_s[threadIdx.x] = i < T ? lb[i] : 0.f;
        delta_s[threadIdx.x] = i < T ? db[i] : 0.f;
      }
      __syncthreads();
      // S^T = K Q^T (16 keys x 64 queries), then P^T.
      float p[8][4];
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) p[nb][0] = p[nb][1] = p[nb][2] = p[nb][3] = 0.f;
      mm_abt<8, kD>(p, Ks, LD, r0, Qs, LD, g, t);
#pragma unroll
      for (int nb = 0; nb < 8; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int c = acc_col(nb, t, e), i = i0 + c, j = e < 2 ? kj0 : kj1;
          const bool seen = visible(j, lo_s[c], i);
          p[nb][e] = seen ? __expf(p[nb][e] * dm.scale - lse_s[c]) : 0.f;
        }
      // dV += P^T dO
      mm_pv<kD>(dvacc, p, dOs, lane);
      // dP^T = V dO^T (16 keys x 64 queries), dS^T = P^T (dP^T - Delta)
      float ds[8][4];
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) ds[nb][0] = ds[nb][1] = ds[nb][2] = ds[nb][3] = 0.f;
      mm_abt<8, kD>(ds, Vs, LD, r0, dOs, LD, g, t);
#pragma unroll
      for (int nb = 0; nb < 8; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) ds[nb][e] = p[nb][e] * (ds[nb][e] - delta_s[acc_col(nb, t, e)]);
      // dK += dS^T Q (scaled once at the end)
      mm_pv<kD>(dkacc, ds, Qs, lane);
    }
  }
  store_acc<kD>(dk + kv_off, kv_stride, j0 + r0, T, dkacc, dm.scale, dm.scale, g, t);
  store_acc<kD>(dv + kv_off, kv_stride, j0 + r0, T, dvacc, 1.f, 1.f, g, t);
}

// ---- backward: dQ ------------------------------------------------------------------------

template <int kD>
__global__ void __launch_bounds__(kThreads)
    tc_dq_kernel(float* dq, const float* dout, const float* q, const float* k, const float* v, const float* lse,
                 const float* delta, Dims dm, const int32_t* seg) {
  constexpr int LD = lds<kD>();
  extern __shared__ uint4 smem_tc[];
  auto* Qs = reinterpret_cast<__nv_bfloat16*>(smem_tc);
  __nv_bfloat16* dOs = Qs + kRows * LD;
  __nv_bfloat16* Ks = dOs + kRows * LD;
  __nv_bfloat16* Vs = Ks + kCols * LD;
  int* lo_s = reinterpret_cast<int*>(Vs + kCols * LD);
  const int T = dm.T, H = dm.H, G = dm.G, D = dm.D;
  const int i0 = blockIdx.x * kRows, h = blockIdx.y, b = blockIdx.z, kvh = h / (H / G);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t q_stride = static_cast<int64_t>(H) * D, kv_stride = static_cast<int64_t>(G) * D;
  const int64_t q_off = static_cast<int64_t>(b) * T * q_stride + static_cast<int64_t>(h) * D;
  const int64_t kv_off = static_cast<int64_t>(b) * T * kv_stride + static_cast<int64_t>(kvh) * D;
  load_tile<kD>(Qs, q + q_off, q_stride, i0, T);
  load_tile<kD>(dOs, dout + q_off, q_stride, i0, T);
  if (threadIdx.x < kRows) lo_s[threadIdx.x] = query_lo(seg, b, i0 + threadIdx.x, T);
  __syncthreads();
  const int lo_min = lo_s[0], i_last = min(i0 + kRows - 1, T - 1);
  const int r0 = 16 * warp;
  const int qi0 = i0 + r0 + g, qi1 = qi0 + 8;
  const int lo0 = lo_s[r0 + g], lo1 = lo_s[r0 + g + 8];
  const float* lb = lse + (static_cast<int64_t>(b) * H + h) * T;
  const float* db = delta + (static_cast<int64_t>(b) * H + h) * T;
  const float lse0 = qi0 < T ? lb[qi0] : 0.f, lse1 = qi1 < T ? lb[qi1] : 0.f;
  const float del0 = qi0 < T ? db[qi0] : 0.f, del1 = qi1 < T ? db[qi1] : 0.f;

  float dqacc[kD / 8][4];
#pragma unroll
  for (int nd = 0; nd < kD / 8; ++nd) dqacc[nd][0] = dqacc[nd][1] = dqacc[nd][2] = dqacc[nd][3] = 0.f;

  for (int kt = lo_min / kCols; kt <= i_last / kCols; ++kt) {
    const int j0 = kt * kCols;
    __syncthreads();
    load_tile<kD>(Ks, k + kv_off, kv_stride, j0, T);
    load_tile<kD>(Vs, v + kv_off, kv_stride, j0, T);
    __syncthreads();
    float p[8][4], ds[8][4];
#pragma unroll
    for (int nb = 0; nb < 8; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) p[nb][e] = ds[nb][e] = 0.f;
    mm_abt<8, kD>(p, Qs, LD, r0, Ks, LD, g, t);   // S = Q K^T
    mm_abt<8, kD>(ds, dOs, LD, r0, Vs, LD, g, t);  // dP = dO V^T
#pragma unroll
    for (int nb = 0; nb < 8; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = j0 + acc_col(nb, t, e);
        const bool top = e < 2;
        const bool seen = top ? visible(j, lo0, qi0) : visible(j, lo1, qi1);
        const float pe = seen ? __expf(p[nb][e] * dm.scale - (top ? lse0 : lse1)) : 0.f;
        ds[nb][e] = pe * (ds[nb][e] - (top ? del0 : del1));
      }
    mm_pv<kD>(dqacc, ds, Ks, lane);  // dQ += dS K (scaled at the end)
  }
  store_acc<kD>(dq + q_off, q_stride, i0 + r0, T, dqacc, dm.scale, dm.scale, g, t);
}

// ---- launches ------------------------------------------------------------------------------

template <int kD>
constexpr size_t tile_bytes() {
  return static_cast<size_t>(kRows) * lds<kD>() * sizeof(__nv_bfloat16);
}

template <typename Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  CLAW_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

Dims dims_of(int64_t T, int64_t H, int64_t G, int64_t D, double scale) {
  return Dims{static_cast<int>(T), static_cast<int>(H), static_cast<int>(G), static_cast<int>(D),
              static_cast<float>(scale)};
}

template <int kD>
void forward_tc(const GpuCtx& ctx, float* out, float* lse, const float* q, const float* k, const float* v, int64_t B,
                int64_t T, int64_t H, const Dims& dm, const int32_t* seg) {
  constexpr size_t smem = 3 * tile_bytes<kD>() + kRows * sizeof(int);
  allow_smem(tc_forward_kernel<kD>, smem);
  const dim3 grid(static_cast<unsigned>((T + kRows - 1) / kRows), static_cast<unsigned>(H), static_cast<unsigned>(B));
  tc_forward_kernel<kD><<<grid, kThreads, smem, stream_of(ctx)>>>(out, lse, q, k, v, dm, seg);
  CLAW_CUDA_LAUNCH_CHECK();
}

template <int kD>
void backward_tc(const GpuCtx& ctx, float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                 const float* v, const float* lse, const float* delta, int64_t B, int64_t T, int64_t H, int64_t G,
                 const Dims& dm, const int32_t* seg) {
  cudaStream_t s = stream_of(ctx);
  const auto tiles = static_cast<unsigned>((T + kRows - 1) / kRows);
  constexpr size_t smem_kv = 4 * tile_bytes<kD>() + 3 * kCols * sizeof(float);
  constexpr size_t smem_q = 4 * tile_bytes<kD>() + kRows * sizeof(int);
  allow_smem(tc_dkdv_kernel<kD>, smem_kv);
  allow_smem(tc_dq_kernel<kD>, smem_q);
  tc_dkdv_kernel<kD><<<dim3(tiles, static_cast<unsigned>(G), static_cast<unsigned>(B)), kThreads, smem_kv, s>>>(
      dk, dv, dout, q, k, v, lse, delta, dm, seg);
  CLAW_CUDA_LAUNCH_CHECK();
  tc_dq_kernel<kD><<<dim3(tiles, static_cast<unsigned>(H), static_cast<unsigned>(B)), kThreads, smem_q, s>>>(
      dq, dout, q, k, v, lse, delta, dm, seg);
  CLAW_CUDA_LAUNCH_CHECK();
}

bool aligned16(const float* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool attention_tc_supported(int64_t D, std::initializer_list<const float*> ptrs) {
  if (D != 64 && D != 128) return false;
  for (const float* p : ptrs)
    if (!aligned16(p)) return false;
  return true;
}

void attention_forward_tc(const GpuCtx& ctx, float* out, float* lse, const float* q, const float* k, const float* v,
                          int64_t B, int64_t T, int64_t H, int64_t G, int64_t D, double scale,
                          const int32_t* seg_start) {
  CLAW_CHECK(attention_tc_supported(D, {q, k, v, out}), "tensor-core attention: D={} (64 or 128) or unaligned rows", D);
  if (B == 0 || T == 0) return;
  const Dims dm = dims_of(T, H, G, D, scale);
  if (D == 64)
    forward_tc<64>(ctx, out, lse, q, k, v, B, T, H, dm, seg_start);
  else
    forward_tc<128>(ctx, out, lse, q, k, v, B, T, H, dm, seg_start);
}

void attention_backward_tc(const GpuCtx& ctx, float* dq, float* dk, float* dv, const float* dout, const float* q,
                           const float* k, const float* v, const float* lse, const float* delta, int64_t B, int64_t T,
                           int64_t H, int64_t G, int64_t D, double scale, const int32_t* seg_start) {
  CLAW_CHECK(attention_tc_supported(D, {dq, dk, dv, dout, q, k, v}),
             "tensor-core attention: D={} (64 or 128) or unaligned rows", D);
  if (B == 0 || T == 0) return;
  const Dims dm = dims_of(T, H, G, D, scale);
  if (D == 64)
    backward_tc<64>(ctx, dq, dk, dv, dout, q, k, v, lse, delta, B, T, H, G, dm, seg_start);
  else
    backward_tc<128>(ctx, dq, dk, dv, dout, q, k, v, lse, delta, B, T, H, G, dm, seg_start);
}

}  // namespace claw::kernels::cuda
