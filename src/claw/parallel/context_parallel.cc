#include "claw/parallel/context_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "claw/core/error.h"
#include "claw/kernels/cpu/attention_offset.h"

namespace claw::parallel {

CpChunks CpChunks::of(int64_t T, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size) fail("context-parallel rank {} of {}", rank, size);
  if (T % (2 * int64_t{size}) != 0)
    fail("--seq-length {} is not a multiple of 2 x --context-parallel-size {} (each rank holds two balanced chunks)",
         T, size);
  return {.rank = rank, .size = size, .chunk = T / (2 * int64_t{size})};
}

template <typename T>
std::vector<T> cp_slice(const CpChunks& c, const T* full, int64_t B, int64_t width) {
  const int64_t Tc = c.chunk, TL = c.local_tokens(), Tfull = 2 * Tc * c.size;
  std::vector<T> out(static_cast<size_t>(B * TL * width));
  for (int64_t b = 0; b < B; ++b)
    for (int i = 0; i < 2; ++i)
      std::copy_n(full + (b * Tfull + c.index(i) * Tc) * width, Tc * width, out.data() + (b * TL + i * Tc) * width);
  return out;
}
template std::vector<float> cp_slice(const CpChunks&, const float*, int64_t, int64_t);
template std::vector<int32_t> cp_slice(const CpChunks&, const int32_t*, int64_t, int64_t);

RingAttention::RingAttention(comm::Group* group, int64_t B, int64_t T_local, int64_t H, int64_t G, int64_t D,
                             double scale)
    : group_(group && group->size() > 1 ? group : nullptr),
      B_(B),
      H_(H),
      G_(G),
      D_(D),
      scale_(scale) {
  const int size = group_ ? group_->size() : 1, rank = group_ ? group_->rank() : 0;
  CLAW_CHECK(T_local % 2 == 0, "ring attention: {} local tokens are not two chunks", T_local);
  chunks_ = CpChunks::of(T_local * size, rank, size);
}

void RingAttention::start_hop(const float* send, float* recv, int64_t n) {
  const int size = group_->size(), rank = group_->rank();
  hop_.clear();
  hop_.push_back(group_->recv_async(recv, n, DType::f32, (rank + size - 1) % size));
  hop_.push_back(group_->send_async(send, n, DType::f32, (rank + 1) % size));
}

void RingAttention::finish_hop() {
  for (const comm::Work& w : hop_) w.wait();
  hop_.clear();
}

template <typename F>
void RingAttention::each_pair(int src, F&& f) const {
  for (int64_t b = 0; b < B_; ++b)
    for (int qi = 0; qi < 2; ++qi)
      for (int ki = 0; ki < 2; ++ki) {
        const int64_t qc = chunks_.index(qi), kc = chunks_.index(ki, src);
        if (kc > qc) continue;  // every key after every query
        f(b, qi, ki, qc, kc);
      }
}

void RingAttention::forward(const CpuCtx& ctx, float* out, float* lse, const float* q, const float* k, const float* v,
                            const int32_t* q_lo) {
  const int64_t Tc = chunks_.chunk, TL = chunks_.local_tokens(), H = H_, G = G_, D = D_;
  const int64_t kv = B_ * TL * G * D;
  const int size = chunks_.size;
  std::fill_n(out, B_ * TL * H * D, 0.0f);
  std::fill_n(lse, B_ * H * TL, -std::numeric_limits<float>::infinity());
  part_out_.resize(static_cast<size_t>(Tc * H * D));
  part_lse_.resize(static_cast<size_t>(H * Tc));
  const float *bk = k, *bv = v;
  int cur = 0;
  if (group_) {  // the block in hand is sent on as it is: k and v in one buffer
    for (auto& b : block_) b.resize(static_cast<size_t>(2 * kv));
    std::copy_n(k, kv, block_[0].data());
    std::copy_n(v, kv, block_[0].data() + kv);
  }
  for (int s = 0; s < size; ++s) {
    const int src = (chunks_.rank + size - s) % size;
    if (group_) {
      bk = block_[cur].data();
      bv = bk + kv;
      if (s + 1 < size) start_hop(block_[cur].data(), block_[1 - cur].data(), 2 * kv);
    }
    each_pair(src, [&](int64_t b, int qi, int ki, int64_t qc, int64_t kc) {
      const int32_t q_pos = static_cast<int32_t>(qc * Tc);
      const int64_t q0 = b * TL + qi * Tc, k0 = b * TL + ki * Tc;
      const kernels::AttentionOffsets off{.q_pos = &q_pos, .k_pos0 = kc * Tc, .q_lo = q_lo ? q_lo + q0 : nullptr};
      kernels::attention_offset_forward(ctx, part_out_.data(), part_lse_.data(), q + q0 * H * D, bk + k0 * G * D,
                                        bv + k0 * G * D, 1, Tc, Tc, H, G, D, scale_, off);
      // Merge by log-sum-exp into the rows of (b, qi).
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < Tc; ++i) {
          const double l2 = part_lse_[static_cast<size_t>(h * Tc + i)];
          if (std::isinf(l2)) continue;  // this query saw none of these keys
          float& l1f = lse[(b * H + h) * TL + qi * Tc + i];
          const double l1 = l1f, m = std::max(l1, l2);
          const double l = m + std::log(std::exp(l1 - m) + std::exp(l2 - m));
          const auto w1 = static_cast<float>(std::exp(l1 - l)), w2 = static_cast<float>(std::exp(l2 - l));
          float* o = out + ((q0 + i) * H + h) * D;
          const float* p = part_out_.data() + (i * H + h) * D;
          for (int64_t d = 0; d < D; ++d) o[d] = w1 * o[d] + w2 * p[d];
          l1f = static_cast<float>(l);
        }
    });
    if (group_ && s + 1 < size) {
      finish_hop();
      cur = 1 - cur;
    }
  }
}

void RingAttention::backward(const CpuCtx& ctx, float* dq, float* dk, float* dv, const float* dout, const float* q,
                             const float* k, const float* v, const float* out, const float* lse,
                             const int32_t* q_lo) {
  const int64_t Tc = chunks_.chunk, TL = chunks_.local_tokens(), H = H_, G = G_, D = D_;
  const int64_t kv = B_ * TL * G * D;
  const int size = chunks_.size;
  std::fill_n(dq, B_ * TL * H * D, 0.0f);
  dq_part_.resize(static_cast<size_t>(Tc * H * D));
  dk_part_.resize(static_cast<size_t>(Tc * G * D));
  dv_part_.resize(static_cast<size_t>(Tc * G * D));
  lse_chunk_.resize(static_cast<size_t>(H * Tc));
  // The block in hand: k, v and the dk, dv it has gathered so far.
  for (auto& b : block_) b.resize(static_cast<size_t>(4 * kv));
  float* blk = block_[0].data();
  std::copy_n(k, kv, blk);
  std::copy_n(v, kv, blk + kv);
  std::fill_n(blk + 2 * kv, 2 * kv, 0.0f);
  int cur = 0;
  for (int s = 0; s < size; ++s) {
    const int src = (chunks_.rank + size - s) % size;
    blk = block_[cur].data();
    const float *bk = blk, *bv = blk + kv;
    float *bdk = blk + 2 * kv, *bdv = blk + 3 * kv;
    each_pair(src, [&](int64_t b, int qi, int ki, int64_t qc, int64_t kc) {
      const int64_t q0 = b * TL + qi * Tc, k0 = b * TL + ki * Tc;
      for (int64_t h = 0; h < H; ++h)  // the chunk's lse as [H, Tc]
        std::copy_n(lse + (b * H + h) * TL + qi * Tc, Tc, lse_chunk_.data() + h * Tc);
      const int32_t q_pos = static_cast<int32_t>(qc * Tc);
      const kernels::AttentionOffsets off{.q_pos = &q_pos, .k_pos0 = kc * Tc, .q_lo = q_lo ? q_lo + q0 : nullptr};
      kernels::attention_offset_backward(ctx, dq_part_.data(), dk_part_.data(), dv_part_.data(), dout + q0 * H * D,
                                         q + q0 * H * D, bk + k0 * G * D, bv + k0 * G * D, out + q0 * H * D,
                                         lse_chunk_.data(), 1, Tc, Tc, H, G, D, scale_, off);
      float* dqc = dq + q0 * H * D;
      for (int64_t i = 0; i < Tc * H * D; ++i) dqc[i] += dq_part_[static_cast<size_t>(i)];
      float *dkc = bdk + k0 * G * D, *dvc = bdv + k0 * G * D;
      for (int64_t i = 0; i < Tc * G * D; ++i) {
        dkc[i] += dk_part_[static_cast<size_t>(i)];
        dvc[i] += dv_part_[static_cast<size_t>(i)];
      }
    });
    // On to the next rank with what it gathered here; the last hop brings
    // every block home. (Not overlapped yet: the block's gradients are
    // final only after this rank's share.)
    if (group_) {
      start_hop(block_[cur].data(), block_[1 - cur].data(), 4 * kv);
      finish_hop();
      cur = 1 - cur;
    }
  }
  std::copy_n(block_[cur].data() + 2 * kv, kv, dk);
  std::copy_n(block_[cur].data() + 3 * kv, kv, dv);
}

}  // namespace claw::parallel
