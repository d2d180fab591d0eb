#include "claw/model/vocab_parallel.h"

#include <cmath>
#include <limits>
#include <vector>

#include "claw/core/dtype.h"
#include "claw/core/error.h"
#include "claw/kernels/cpu/vec_math.h"

namespace claw::model {
namespace {

// Checked on every rank before any collective: all ranks see the same
// targets, so a bad one fails everywhere (no rank is left in an all-reduce).
void check_targets(const int32_t* targets, const VocabShard& s, int64_t N) {
  for (int64_t n = 0; n < N; ++n)
    CLAW_CHECK(targets[n] < s.V, "vocab-parallel cross-entropy target {} at row {} is not below the vocabulary size {}",
               targets[n], n, s.V);
}

// out[n] = W_local[tokens[n] - v0] for the tokens this rank holds, else 0.
template <typename T>
void local_lookup(const CpuCtx& ctx, T* out, const int32_t* tokens, const T* w_local, const VocabShard& shard,
                  int64_t N, int64_t C) {
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(C, 1));
  parallel_for(ctx, N, grain, [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      T* o = out + n * C;
      if (shard.holds(tokens[n])) {
        const T* w = w_local + (tokens[n] - shard.begin) * C;
        std::copy(w, w + C, o);
      } else {
        std::fill(o, o + C, T(0));
      }
    }
  });
}

// dW_local[tokens[n] - v0] += dout[n] for the tokens this rank holds. As
// kernels::embedding_backward: threads own whole 64-byte lines of channels,
// so no two threads write one line and each sum runs in row order.
template <typename T>
void local_scatter_add(const CpuCtx& ctx, T* dw_local, const T* dout, const int32_t* tokens,
                       const VocabShard& shard, int64_t N, int64_t C) {
  constexpr int64_t kLine = 64 / sizeof(T);
  const int64_t lines = (C + kLine - 1) / kLine;
  parallel_for(ctx, lines, 4, [&](int64_t lb, int64_t le) {
    const int64_t cb = lb * kLine, ce = std::min(C, le * kLine);
    for (int64_t n = 0; n < N; ++n) {
      if (!shard.holds(tokens[n])) continue;
      const T* d = dout + n * C;
      T* w = dw_local + (tokens[n] - shard.begin) * C;
      for (int64_t c = cb; c < ce; ++c) w[c] += d[c];
    }
  });
}

void check_sequence_rows(const comm::Group& tp, int64_t N) {
  CLAW_CHECK(N % tp.size() == 0, "sequence-parallel embedding: {} tokens do not split over {} tensor-parallel ranks",
             N, tp.size());
}

}  // namespace

int64_t tp_padded_vocab_size(int64_t V, int64_t divisible_by, int tp) {
  CLAW_CHECK(V > 0 && divisible_by > 0 && tp > 0, "V={} divisible_by={} tp={}", V, divisible_by, tp);
  const int64_t m = divisible_by * tp;
  return (V + m - 1) / m * m;
}

VocabShard VocabShard::of(int64_t V, int64_t Vp, int rank, int size) {
  CLAW_CHECK(V > 0 && V <= Vp, "vocabulary needs 0 < V <= Vp, got V={} Vp={}", V, Vp);
  CLAW_CHECK(size > 0 && rank >= 0 && rank < size, "rank {} of {}", rank, size);
  CLAW_CHECK(Vp % size == 0,
             "the padded vocabulary {} does not split over {} tensor-parallel ranks (pad it with "
             "tp_padded_vocab_size)",
             Vp, size);
  const int64_t per = Vp / size;
  return {.V = V, .Vp = Vp, .begin = rank * per, .end = (rank + 1) * per};
}

template <typename T>
void vocab_parallel_embedding_forward(const CpuCtx& ctx, comm::Group& tp, T* out, const int32_t* tokens,
                                      const T* w_local, const VocabShard& shard, int64_t N, int64_t C) {
  local_lookup(ctx, out, tokens, w_local, shard, N, C);
  tp.all_reduce(out, N * C, dtype_of<T>::value, comm::ReduceOp::sum);
}

template <typename T>
void vocab_parallel_embedding_backward(const CpuCtx& ctx, T* dw_local, const T* dout, const int32_t* tokens,
                                       const VocabShard& shard, int64_t N, int64_t C) {
  if (dw_local) local_scatter_add(ctx, dw_local, dout, tokens, shard, N, C);
}

template <typename T>
void vocab_parallel_embedding_forward_sp(const CpuCtx& ctx, comm::Group& tp, T* out_piece, T* work,
                                         const int32_t* tokens, const T* w_local, const VocabShard& shard, int64_t N,
                                         int64_t C) {
  check_sequence_rows(tp, N);
  local_lookup(ctx, work, tokens, w_local, shard, N, C);
  tp.reduce_scatter(work, out_piece, N / tp.size() * C, dtype_of<T>::value, comm::ReduceOp::sum);
}

template <typename T>
void vocab_parallel_embedding_backward_sp(const CpuCtx& ctx, comm::Group& tp, T* dw_local, T* work,
                                          const T* dout_piece, const int32_t* tokens, const VocabShard& shard,
                                          int64_t N, int64_t C) {
  check_sequence_rows(tp, N);
  const int64_t piece = N / tp.size() * C;
  // The Group's in-place all-gather: a null send buffer, the piece already in place.
  const T* send = dout_piece == work + tp.rank() * piece ? nullptr : dout_piece;
  tp.all_gather(send, work, piece, dtype_of<T>::value);
  if (dw_local) local_scatter_add(ctx, dw_local, work, tokens, shard, N, C);
}

template <typename T>
void vocab_parallel_cross_entropy_forward(const CpuCtx& ctx, comm::Group& tp, T* losses, T* lse, const T* logits,
                                          const int32_t* targets, const VocabShard& shard, int64_t N) {
  check_targets(targets, shard, N);
  if (N == 0) return;
  const int64_t Vl = shard.rows(), real = shard.real();
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  // [0, N): row maxima; [N, 2N): target logits (-inf where another rank owns
  // the target or the row is ignored) -- both reduced by one max; [2N, 3N): sums of exp.
  // Held in double: a float converts exactly, and the sums lose nothing in transit.
  std::vector<double> buf(3 * N);
  double* mx = buf.data();
  double* tgt = mx + N;
  double* sum = tgt + N;
  parallel_for(ctx, N, 16, [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const T* row = logits + n * Vl;
      T m = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : m)
      for (int64_t j = 0; j < real; ++j) m = m > row[j] ? m : row[j];
      mx[n] = static_cast<double>(m);
      const int32_t t = targets[n];
      tgt[n] = t >= shard.begin && t < shard.begin + real ? static_cast<double>(row[t - shard.begin])
                                                                      : kNegInf;
    }
  });
  tp.all_reduce(mx, 2 * N, DType::f64, comm::ReduceOp::max);
  parallel_for(ctx, N, 16, [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const T* row = logits + n * Vl;
      const T m = static_cast<T>(mx[n]);  // a logit's value: exact in T
      sum[n] = kernels::lane_sum(real, [&](int64_t j) { return static_cast<double>(kernels::fast_exp(row[j] - m)); });
    }
  });
  tp.all_reduce(sum, N, DType::f64, comm::ReduceOp::sum);
  for (int64_t n = 0; n < N; ++n) {
    const double l = mx[n] + std::log(sum[n]);
    lse[n] = static_cast<T>(l);
    losses[n] = targets[n] < 0 ? T(0) : static_cast<T>(l - tgt[n]);
  }
}

template <typename T>
void vocab_parallel_cross_entropy_backward(const CpuCtx& ctx, T* dlogits, const T* logits, const T* lse,
                                           const int32_t* targets, T dloss_scale, const VocabShard& shard,
                                           int64_t N) {
  check_targets(targets, shard, N);
  const int64_t Vl = shard.rows(), real = shard.real();
  parallel_for(ctx, N, 1, [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const T* row = logits + n * Vl;
      T* drow = dlogits + n * Vl;
      const int32_t t = targets[n];
      if (t < 0) {
        std::fill(drow, drow + Vl, T(0));
        continue;
      }
      const T l = lse[n];
      // omp simd: drow may alias row; each element is read before it is written.
#pragma omp simd
      for (int64_t j = 0; j < real; ++j) drow[j] = dloss_scale * kernels::fast_exp(row[j] - l);
      if (t >= shard.begin && t < shard.begin + real) drow[t - shard.begin] -= dloss_scale;
      std::fill(drow + real, drow + Vl, T(0));
    }
  });
}

#define CLAW_INSTANTIATE(T)                                                                                         \
  template void vocab_parallel_embedding_forward<T>(const CpuCtx&, comm::Group&, T*, const int32_t*, const T*,      \
                                                    const VocabShard&, int64_t, int64_t);                           \
  template void vocab_parallel_embedding_backward<T>(const CpuCtx&, T*, const T*, const int32_t*,                   \
                                                     const VocabShard&, int64_t, int64_t);                          \
  template void vocab_parallel_embedding_forward_sp<T>(const CpuCtx&, comm::Group&, T*, T*, const int32_t*,         \
                                                       const T*, const VocabShard&, int64_t, int64_t);              \
  template void vocab_parallel_embedding_backward_sp<T>(const CpuCtx&, comm::Group&, T*, T*, const T*,              \
                                                        const int32_t*, const VocabShard&, int64_t, int64_t);       \
  template void vocab_parallel_cross_entropy_forward<T>(const CpuCtx&, comm::Group&, T*, T*, const T*,              \
                                                        const int32_t*, const VocabShard&, int64_t);                \
  template void vocab_parallel_cross_entropy_backward<T>(const CpuCtx&, T*, const T*, const T*, const int32_t*, T,  \
                                                         const VocabShard&, int64_t);
CLAW_INSTANTIATE(float)
CLAW_INSTANTIATE(double)
#undef CLAW_INSTANTIATE

}  // namespace claw::model
