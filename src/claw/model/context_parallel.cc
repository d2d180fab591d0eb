#include "claw/model/context_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "claw/core/error.h"
#include "claw/kernels/cpu/attention.h"
#include "claw/kernels/cpu/attention_offset.h"

namespace claw::model {

CpCommType parse_cp_comm_type(std::string_view s) {
  if (s == "p2p") return CpCommType::p2p;
  if (s == "a2a") return CpCommType::a2a;
  fail("--cp-comm-type {}: expected p2p (ring attention) or a2a (heads swapped for sequence)", s);
}

const char* to_string(CpCommType t) { return t == CpCommType::p2p ? "p2p" : "a2a"; }

void validate_cp_heads(CpCommType type, int cp, int64_t H, int64_t G) {
  if (type != CpCommType::a2a || cp == 1) return;
  if (H % cp != 0)
    fail("--cp-comm-type a2a splits the attention heads over the CP group: --context-parallel-size {} must divide "
         "the {} heads each tensor-parallel rank holds (--num-attention-heads / --tensor-model-parallel-size); use "
         "--cp-comm-type p2p",
         cp, H);
  if (G % cp != 0 && cp % G != 0)
    fail("--cp-comm-type a2a: --context-parallel-size {} and the {} KV groups each tensor-parallel rank holds "
         "(--num-query-groups / --tensor-model-parallel-size) must divide one another; use --cp-comm-type p2p",
         cp, G);
}

std::unique_ptr<CpAttention> make_cp_attention(CpCommType type, comm::Group* group, int64_t B, int64_t T_local,
                                               int64_t H, int64_t G, int64_t D, kernels::ScoreScale scale) {
  if (type == CpCommType::a2a) return std::make_unique<AllToAllAttention>(group, B, T_local, H, G, D, scale);
  return std::make_unique<RingAttention>(group, B, T_local, H, G, D, scale);
}

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
                             kernels::ScoreScale scale)
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

// Backward. Rank r computes, at step s, its queries' share of the dK, dV of
// block src = r - s. The keys and values for step s + 1 are in flight during
// the step (as in forward), and so is the partial dK, dV of block src that
// ranks src .. r - 1 have gathered: rank r - 1 sent it at the end of its step
// s - 1. Rank r adds its share and sends the sum on; the last step's sum is
// complete and goes home to its owner, r + 1. Keys/values and gradients use
// their own tags, so the two streams between a pair of ranks never match each
// other's receives.
void RingAttention::backward(const CpuCtx& ctx, float* dq, float* dk, float* dv, const float* dout, const float* q,
                             const float* k, const float* v, const float* out, const float* lse,
                             const int32_t* q_lo) {
  const int64_t Tc = chunks_.chunk, TL = chunks_.local_tokens(), H = H_, G = G_, D = D_;
  const int64_t kv = B_ * TL * G * D;
  const int size = chunks_.size, rank = chunks_.rank;
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  constexpr int kKvTag = 1, kGradTag = 2;
  std::fill_n(dq, B_ * TL * H * D, 0.0f);
  dq_part_.resize(static_cast<size_t>(Tc * H * D));
  dk_part_.resize(static_cast<size_t>(Tc * G * D));
  dv_part_.resize(static_cast<size_t>(Tc * G * D));
  lse_chunk_.resize(static_cast<size_t>(H * Tc));
  if (group_) {
    for (auto& b : block_) b.resize(static_cast<size_t>(2 * kv));
    std::copy_n(k, kv, block_[0].data());
    std::copy_n(v, kv, block_[0].data() + kv);
    for (auto* b : {&grad_mine_, &grad_in_, &grad_out_}) b->resize(static_cast<size_t>(2 * kv));
  }
  comm::Work kv_send, kv_recv, grad_send, grad_recv;
  int cur = 0;
  for (int s = 0; s < size; ++s) {
    const int src = (rank + size - s) % size;
    const float *bk = k, *bv = v;
    float *bdk = dk, *bdv = dv;  // one rank: its own block's gradients directly
    if (group_) {
      bk = block_[cur].data();
      bv = bk + kv;
      bdk = grad_mine_.data();
      bdv = bdk + kv;
      if (s + 1 < size) {
        kv_recv = group_->recv_async(block_[1 - cur].data(), 2 * kv, DType::f32, prev, kKvTag);
        kv_send = group_->send_async(block_[cur].data(), 2 * kv, DType::f32, next, kKvTag);
      }
      if (s > 0) grad_recv = group_->recv_async(grad_in_.data(), 2 * kv, DType::f32, prev, kGradTag);
    }
    std::fill_n(bdk, kv, 0.0f);
    std::fill_n(bdv, kv, 0.0f);
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
    if (!group_) continue;
    if (s > 0) {  // what the ranks before this one gathered for block src
      grad_recv.wait();
      for (int64_t i = 0; i < 2 * kv; ++i) grad_mine_[static_cast<size_t>(i)] += grad_in_[static_cast<size_t>(i)];
    }
    if (grad_send.valid()) grad_send.wait();  // grad_out_ is free again
    grad_out_.swap(grad_mine_);
    grad_send = group_->send_async(grad_out_.data(), 2 * kv, DType::f32, next, kGradTag);
    if (s + 1 < size) {
      kv_recv.wait();
      kv_send.wait();
      cur = 1 - cur;
    }
  }
  if (!group_) return;
  // Home: this rank's own block, every rank's share in it.
  group_->recv(grad_in_.data(), 2 * kv, DType::f32, prev, kGradTag);
  grad_send.wait();
  std::copy_n(grad_in_.data(), kv, dk);
  std::copy_n(grad_in_.data() + kv, kv, dv);
}

AllToAllAttention::AllToAllAttention(comm::Group* group, int64_t B, int64_t T_local, int64_t H, int64_t G,
                                     int64_t D, kernels::ScoreScale scale)
    : group_(group && group->size() > 1 ? group : nullptr), B_(B), H_(H), G_(G), D_(D), scale_(scale) {
  const int size = group_ ? group_->size() : 1, rank = group_ ? group_->rank() : 0;
  CLAW_CHECK(T_local % 2 == 0, "a2a attention: {} local tokens are not two chunks", T_local);
  validate_cp_heads(CpCommType::a2a, size, H, G);
  chunks_ = CpChunks::of(T_local * size, rank, size);
  Hc_ = H / size;
  Gc_ = G >= size ? G / size : 1;
}

// The first KV group rank r's heads [r Hc, (r + 1) Hc) read.
int64_t AllToAllAttention::first_group(int r) const { return r * Hc_ / (H_ / G_); }

// send_ -> recv_: per_rank floats to and from each rank.
void AllToAllAttention::exchange(int64_t per_rank) {
  if (!group_) {
    recv_.swap(send_);
    return;
  }
  const std::vector<int64_t> counts(static_cast<size_t>(chunks_.size), per_rank);
  group_->all_to_all(send_.data(), counts, recv_.data(), counts, DType::f32);
}

void AllToAllAttention::to_heads(std::initializer_list<ToHeads> parts) {
  const int size = chunks_.size;
  const int64_t TL = chunks_.local_tokens(), T = TL * size, D = D_;
  int64_t per_rank = 0;
  for (const ToHeads& p : parts) per_rank += B_ * TL * (p.kv ? Gc_ : Hc_) * D;
  send_.resize(static_cast<size_t>(per_rank * size));
  recv_.resize(send_.size());
  for (int r = 0; r < size; ++r) {
    float* o = send_.data() + r * per_rank;
    for (const ToHeads& p : parts) {
      const int64_t take = p.kv ? Gc_ : Hc_, col = p.kv ? first_group(r) : r * Hc_;
      for (int64_t row = 0; row < B_ * TL; ++row, o += take * D)
        std::copy_n(p.local + (row * p.width + col) * D, take * D, o);
    }
  }
  exchange(per_rank);
  for (int j = 0; j < size; ++j) {
    const float* in = recv_.data() + j * per_rank;
    for (const ToHeads& p : parts) {
      const int64_t n = (p.kv ? Gc_ : Hc_) * D;
      for (int64_t b = 0; b < B_; ++b)
        for (int64_t t = 0; t < TL; ++t, in += n) {
          std::copy_n(in, n, p.full + (b * T + chunks_.position(t, j)) * n);
        }
    }
  }
}

void AllToAllAttention::to_tokens(std::initializer_list<ToTokens> parts) {
  const int size = chunks_.size;
  const int64_t TL = chunks_.local_tokens(), T = TL * size, D = D_;
  int64_t per_rank = 0;
  for (const ToTokens& p : parts) per_rank += B_ * TL * (p.kv ? Gc_ : Hc_) * D;
  send_.resize(static_cast<size_t>(per_rank * size));
  recv_.resize(send_.size());
  for (int j = 0; j < size; ++j) {  // rank j's tokens
    float* o = send_.data() + j * per_rank;
    for (const ToTokens& p : parts) {
      const int64_t n = (p.kv ? Gc_ : Hc_) * D;
      for (int64_t b = 0; b < B_; ++b)
        for (int64_t t = 0; t < TL; ++t, o += n) {
          std::copy_n(p.full + (b * T + chunks_.position(t, j)) * n, n, o);
        }
    }
  }
  exchange(per_rank);
  for (const ToTokens& p : parts)
    if (p.kv) std::fill_n(p.local, B_ * TL * p.width * D, 0.0f);
  for (int r = 0; r < size; ++r) {  // rank r's heads
    const float* in = recv_.data() + r * per_rank;
    for (const ToTokens& p : parts) {
      const int64_t take = p.kv ? Gc_ : Hc_, col = p.kv ? first_group(r) : r * Hc_;
      for (int64_t row = 0; row < B_ * TL; ++row, in += take * D) {
        float* dst = p.local + (row * p.width + col) * D;
        if (p.kv)
          for (int64_t i = 0; i < take * D; ++i) dst[i] += in[i];
        else
          std::copy_n(in, take * D, dst);
      }
    }
  }
}

const int32_t* AllToAllAttention::full_seg_start(const int32_t* q_lo) {
  if (!q_lo) return nullptr;
  const int size = chunks_.size;
  const int64_t TL = chunks_.local_tokens(), T = TL * size, n = B_ * TL;
  lo_all_.resize(static_cast<size_t>(n * size));
  if (group_)
    group_->all_gather(q_lo, lo_all_.data(), n, DType::i32);
  else
    std::copy_n(q_lo, n, lo_all_.data());
  seg_.resize(static_cast<size_t>(B_ * T));
  for (int j = 0; j < size; ++j)
    for (int64_t b = 0; b < B_; ++b)
      for (int64_t t = 0; t < TL; ++t)
        seg_[static_cast<size_t>(b * T + chunks_.position(t, j))] =
            lo_all_[static_cast<size_t>(j * n + b * TL + t)];
  return seg_.data();
}

void AllToAllAttention::forward(const CpuCtx& ctx, float* out, float* lse, const float* q, const float* k,
                                const float* v, const int32_t* q_lo) {
  const int64_t T = chunks_.local_tokens() * chunks_.size;
  q_.resize(static_cast<size_t>(B_ * T * Hc_ * D_));
  out_.resize(q_.size());
  k_.resize(static_cast<size_t>(B_ * T * Gc_ * D_));
  v_.resize(k_.size());
  to_heads({{q, H_, false, q_.data()}, {k, G_, true, k_.data()}, {v, G_, true, v_.data()}});
  kernels::attention_forward(ctx, out_.data(), lse, q_.data(), k_.data(), v_.data(), B_, T, Hc_, Gc_, D_, scale_,
                             full_seg_start(q_lo));
  to_tokens({{out_.data(), H_, false, out}});
}

void AllToAllAttention::backward(const CpuCtx& ctx, float* dq, float* dk, float* dv, const float* dout,
                                 const float* q, const float* k, const float* v, const float* out, const float* lse,
                                 const int32_t* q_lo) {
  const int64_t T = chunks_.local_tokens() * chunks_.size;
  for (auto* buf : {&q_, &out_, &dout_, &dq_}) buf->resize(static_cast<size_t>(B_ * T * Hc_ * D_));
  for (auto* buf : {&k_, &v_, &dk_, &dv_}) buf->resize(static_cast<size_t>(B_ * T * Gc_ * D_));
  to_heads({{q, H_, false, q_.data()},
            {k, G_, true, k_.data()},
            {v, G_, true, v_.data()},
            {out, H_, false, out_.data()},
            {dout, H_, false, dout_.data()}});
  kernels::attention_backward(ctx, dq_.data(), dk_.data(), dv_.data(), dout_.data(), q_.data(), k_.data(), v_.data(),
                              out_.data(), lse, B_, T, Hc_, Gc_, D_, scale_, full_seg_start(q_lo));
  to_tokens({{dq_.data(), H_, false, dq}, {dk_.data(), G_, true, dk}, {dv_.data(), G_, true, dv}});
}

}  // namespace claw::model
