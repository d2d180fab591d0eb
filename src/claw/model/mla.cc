#include "claw/model/mla.h"

#include <algorithm>
#include <cmath>

#include "claw/core/error.h"
#include "claw/kernels/cpu/rmsnorm.h"

namespace claw::model {

void LatentProjections::Saved::layout(ArenaLayout& L, const std::string& p, const ModelConfig& cfg, int64_t N,
                                      TpDims tp) {
  const MlaConfig& m = cfg.mla;
  if (m.q_lora_rank > 0) {
    q_a = L.take<float>(p + ".q_a", N * m.q_lora_rank);
    q_a_rstd = L.take<float>(p + ".q_a_rstd", N);
    q_lat = L.take<float>(p + ".q_lat", N * m.q_lora_rank);
  }
  kv_a = L.take<float>(p + ".kv_a", N * (m.kv_lora_rank + m.qk_pos_emb_head_dim));
  c_pre = L.take<float>(p + ".c_pre", N * m.kv_lora_rank);
  c_rstd = L.take<float>(p + ".c_rstd", N);
  c = L.take<float>(p + ".c", N * m.kv_lora_rank);
  out_v = L.take<float>(p + ".out_v", N * tp.heads(cfg) * m.v_head_dim);
}

LatentProjections::LatentProjections(int l, const ModelConfig& cfg, const HfNames& hf, const TensorParallel& tp)
    : q_proj(attention_name(l, cfg.mla.q_lora_rank > 0 ? "q_b_proj" : "q_proj"),
             cfg.mla.q_lora_rank > 0 ? cfg.mla.q_lora_rank : cfg.hidden_size,
             cfg.num_attention_heads * cfg.head_dim(), false, cfg.init_method_std,
             hf.mla(l, cfg.mla.q_lora_rank > 0 ? "q_b_proj" : "q_proj"), HfRef{}, tp, {.kind = TpSplit::column}),
      kv_a_proj(attention_name(l, "kv_a_proj"), cfg.hidden_size, cfg.mla.kv_lora_rank + cfg.mla.qk_pos_emb_head_dim, false,
                cfg.init_method_std, hf.mla(l, "kv_a_proj_with_mqa"), HfRef{}, tp, {.kind = TpSplit::none}),
      kv_b_proj(attention_name(l, "kv_b_proj"), cfg.mla.kv_lora_rank,
                cfg.num_attention_heads * (cfg.mla.qk_head_dim + cfg.mla.v_head_dim), false, cfg.init_method_std,
                hf.mla(l, "kv_b_proj"), HfRef{}, tp, {.kind = TpSplit::column}),
      tp_(tp),
      C_(cfg.hidden_size),
      H_(tp.dims().heads(cfg)),
      D_(cfg.head_dim()),
      qk_(cfg.mla.qk_head_dim),
      r_(cfg.mla.qk_pos_emb_head_dim),
      v_(cfg.mla.v_head_dim),
      q_rank_(cfg.mla.q_lora_rank),
      kv_rank_(cfg.mla.kv_lora_rank),
      interleaved_(cfg.rotary_interleaved),
      eps_(kLatentNormEpsilon) {
  if (q_rank_ > 0) {
    q_a_proj.emplace(attention_name(l, "q_a_proj"), cfg.hidden_size, q_rank_, false, cfg.init_method_std,
                     hf.mla(l, "q_a_proj"), HfRef{}, tp, LinearSplit{.kind = TpSplit::none});
    q_a_norm.spec = {.name = attention_name(l, "q_a_norm.weight"), .shape = {q_rank_}, .weight_decay = false,
                     .init = Init::ones, .hf = hf.mla(l, "q_a_layernorm")};
  }
  kv_a_norm.spec = {.name = attention_name(l, "kv_a_norm.weight"), .shape = {kv_rank_}, .weight_decay = false,
                    .init = Init::ones, .hf = hf.mla(l, "kv_a_layernorm")};
  if (!cfg.lora.enabled()) return;
  // Megatron's MLA module names, and DeepSeek's.
  const std::pair<Linear*, std::pair<const char*, const char*>> targets[] = {
      {q_a_proj ? &*q_a_proj : nullptr, {"linear_q_down_proj", "q_a_proj"}},
      {&q_proj, q_a_proj ? std::pair{"linear_q_up_proj", "q_b_proj"} : std::pair{"linear_q_proj", "q_proj"}},
      {&kv_a_proj, {"linear_kv_down_proj", "kv_a_proj_with_mqa"}},
      {&kv_b_proj, {"linear_kv_up_proj", "kv_b_proj"}}};
  for (const auto& [linear, names] : targets)
    if (linear && cfg.lora.targets(names.first, names.second))
      linear->enable_lora(cfg.lora.rank, cfg.lora.scale(), cfg.lora.dropout);
}

namespace {
// A latent's RMSNorm backward: dx from dy, the weight's gradient accumulated
// where it trains.
void latent_norm_backward(const CpuCtx& cpu, const Param& w, float* dx, const float* dy, const float* x,
                          const float* rstd, int64_t N, int64_t width) {
  kernels::rmsnorm_backward(cpu, dx, w.grad.defined() ? w.gdata() : nullptr, dy, x, w.data(), rstd, N, width, false);
}
}  // namespace

int64_t LatentProjections::rope_source(int64_t j) const {
  if (!interleaved_) return j;
  const int64_t half = r_ / 2;
  return j < half ? 2 * j : 2 * (j - half) + 1;
}

void LatentProjections::to_kernel_layout(const CpuCtx& cpu, const float* proj, float* q, int64_t N) const {
  parallel_for(cpu, N * H_, std::max<int64_t>(1, 4096 / D_), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const float* src = proj + i * D_;
      float* dst = q + i * D_;
      for (int64_t j = 0; j < r_; ++j) dst[j] = src[qk_ + rope_source(j)];
      std::copy_n(src, qk_, dst + r_);
    }
  });
}

void LatentProjections::from_kernel_layout(const CpuCtx& cpu, const float* q, float* proj, int64_t N) const {
  parallel_for(cpu, N * H_, std::max<int64_t>(1, 4096 / D_), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const float* src = q + i * D_;
      float* dst = proj + i * D_;
      for (int64_t j = 0; j < r_; ++j) dst[qk_ + rope_source(j)] = src[j];
      std::copy_n(src + r_, qk_, dst);
    }
  });
}

void LatentProjections::queries_and_latent(const StepCtx& ctx, const float* x, Saved& s, float* q) const {
  const int64_t N = ctx.tokens(), A = kv_rank_ + r_;
  const float* q_in = x;
  if (q_a_proj) {
    q_a_proj->forward(ctx, x, s.q_a);
    kernels::rmsnorm_forward(ctx.cpu, s.q_lat, s.q_a_rstd, s.q_a, q_a_norm.data(), N, q_rank_, eps_);
    q_in = s.q_lat;
  }
  dq_proj_.resize(static_cast<size_t>(N * H_ * D_));
  q_proj.forward(ctx, q_in, dq_proj_.data());
  to_kernel_layout(ctx.cpu, dq_proj_.data(), q, N);
  kv_a_proj.forward(ctx, x, s.kv_a);
  for (int64_t n = 0; n < N; ++n) std::copy_n(s.kv_a + n * A, kv_rank_, s.c_pre + n * kv_rank_);
  kernels::rmsnorm_forward(ctx.cpu, s.c, s.c_rstd, s.c_pre, kv_a_norm.data(), N, kv_rank_, eps_);
}

void LatentProjections::forward(const StepCtx& ctx, const float* x, Saved& s, float* q, float* k, float* v) const {
  const int64_t N = ctx.tokens(), A = kv_rank_ + r_, KV = qk_ + v_;
  queries_and_latent(ctx, x, s, q);
  kv_.resize(static_cast<size_t>(N * H_ * KV));
  kv_b_proj.forward(ctx, s.c, kv_.data());
  // Each head's key: the shared rotated part, then its own; its value padded to D.
  parallel_for(ctx.cpu, N, std::max<int64_t>(1, 4096 / (H_ * D_)), [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const float* rope = s.kv_a + n * A + kv_rank_;
      for (int64_t h = 0; h < H_; ++h) {
        const float* kv = kv_.data() + (n * H_ + h) * KV;
        float* kh = k + (n * H_ + h) * D_;
        float* vh = v + (n * H_ + h) * D_;
        for (int64_t j = 0; j < r_; ++j) kh[j] = rope[rope_source(j)];
        std::copy_n(kv, qk_, kh + r_);
        std::copy_n(kv + qk_, v_, vh);
        std::fill(vh + v_, vh + D_, 0.0f);
      }
    }
  });
}

// kv_b's weight is [Hl (qk + v), kv_lora]: head h's Wk_h rows first, then its Wv_h.
void LatentProjections::absorbed_forward(const StepCtx& ctx, const float* x, Saved& s, float* q, float* kv) const {
  const int64_t N = ctx.tokens(), A = kv_rank_ + r_, Qa = absorbed_dim(), KV = qk_ + v_;
  if (kv_b_proj.has_lora() && !kv_b_proj.lora_merged())
    fail("--multi-latent-attention: the absorbed inference form reads kv_b_proj's weight; merge its LoRA adapter "
         "first (generation merges adapters)");
  heads_.resize(static_cast<size_t>(N * H_ * D_));
  queries_and_latent(ctx, x, s, heads_.data());
  const float* w = kv_b_proj.weight.data();
  parallel_for(ctx.cpu, N * H_, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const float* qh = heads_.data() + i * D_;  // [rope | nope]
      float* out = q + i * Qa;
      std::copy_n(qh, r_, out);
      float* lat = out + r_;
      std::fill(lat, lat + kv_rank_, 0.0f);
      const float* wk = w + (i % H_) * KV * kv_rank_;  // Wk_h [qk, kv_lora]
      for (int64_t d = 0; d < qk_; ++d) {
        const float a = qh[r_ + d];
        const float* row = wk + d * kv_rank_;
        for (int64_t j = 0; j < kv_rank_; ++j) lat[j] += a * row[j];
      }
    }
  });
  for (int64_t n = 0; n < N; ++n) {
    const float* rope = s.kv_a + n * A + kv_rank_;
    for (int64_t j = 0; j < r_; ++j) kv[n * Qa + j] = rope[rope_source(j)];
    std::copy_n(s.c + n * kv_rank_, kv_rank_, kv + n * Qa + r_);
  }
}

void LatentProjections::absorbed_output(const StepCtx& ctx, const float* out, Saved& s) const {
  const int64_t Qa = absorbed_dim(), KV = qk_ + v_;
  const float* w = kv_b_proj.weight.data();
  parallel_for(ctx.cpu, ctx.tokens() * H_, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const float* lat = out + i * Qa + r_;
      const float* wv = w + ((i % H_) * KV + qk_) * kv_rank_;  // Wv_h [v, kv_lora]
      for (int64_t e = 0; e < v_; ++e) {
        float acc = 0.0f;
        for (int64_t j = 0; j < kv_rank_; ++j) acc += lat[j] * wv[e * kv_rank_ + j];
        s.out_v[i * v_ + e] = acc;
      }
    }
  });
}

void LatentProjections::compact(const StepCtx& ctx, const float* out, Saved& s) const {
  const int64_t rows = ctx.tokens() * H_;
  for (int64_t i = 0; i < rows; ++i) std::copy_n(out + i * D_, v_, s.out_v + i * v_);
}

void LatentProjections::expand(const StepCtx& ctx, const float* dout_v, float* dout) const {
  const int64_t rows = ctx.tokens() * H_;
  for (int64_t i = 0; i < rows; ++i) {
    std::copy_n(dout_v + i * v_, v_, dout + i * D_);
    std::fill(dout + i * D_ + v_, dout + (i + 1) * D_, 0.0f);
  }
}

void LatentProjections::backward(const StepCtx& ctx, const Saved& s, const float* x, const float* dq, const float* dk,
                                 const float* dv, float* dx) {
  const int64_t N = ctx.tokens(), A = kv_rank_ + r_, KV = qk_ + v_;
  const bool group = tp_.size() > 1;
  // kv_b's output gradient (each head's un-rotated key and value), and
  // k_rope's: the sum over this rank's heads.
  dkv_.resize(static_cast<size_t>(N * H_ * KV));
  dlat_.assign(static_cast<size_t>(N * A), 0.0f);  // [dc (N kv_lora) | dk_rope (N r)]
  float* dk_rope = dlat_.data() + N * kv_rank_;
  parallel_for(ctx.cpu, N, std::max<int64_t>(1, 4096 / (H_ * D_)), [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n)
      for (int64_t h = 0; h < H_; ++h) {
        const float* kh = dk + (n * H_ + h) * D_;
        float* kv = dkv_.data() + (n * H_ + h) * KV;
        for (int64_t j = 0; j < r_; ++j) dk_rope[n * r_ + rope_source(j)] += kh[j];
        std::copy_n(kh + r_, qk_, kv);
        std::copy_n(dv + (n * H_ + h) * D_, v_, kv + qk_);
      }
  });
  kv_b_proj.backward_input(ctx, dkv_.data(), dlat_.data(), false);
  kv_b_proj.backward_weight(ctx, dkv_.data(), s.c);
  if (group) tp_.group->all_reduce(dlat_.data(), N * A, DType::f32);
  dc_.resize(static_cast<size_t>(N * kv_rank_));
  latent_norm_backward(ctx.cpu, kv_a_norm, dc_.data(), dlat_.data(), s.c_pre, s.c_rstd, N, kv_rank_);
  dkv_a_.resize(static_cast<size_t>(N * A));
  for (int64_t n = 0; n < N; ++n) {
    std::copy_n(dc_.data() + n * kv_rank_, kv_rank_, dkv_a_.data() + n * A);
    std::copy_n(dk_rope + n * r_, r_, dkv_a_.data() + n * A + kv_rank_);
  }
  // Queries.
  dq_proj_.resize(static_cast<size_t>(N * H_ * D_));
  from_kernel_layout(ctx.cpu, dq, dq_proj_.data(), N);
  const bool first_rank = tp_.rank() == 0;
  bool written = false;
  if (q_a_proj) {
    dq_lat_.resize(static_cast<size_t>(N * q_rank_));
    q_proj.backward_input(ctx, dq_proj_.data(), dq_lat_.data(), false);
    q_proj.backward_weight(ctx, dq_proj_.data(), s.q_lat);
    if (group) tp_.group->all_reduce(dq_lat_.data(), N * q_rank_, DType::f32);
    dq_a_.resize(static_cast<size_t>(N * q_rank_));
    latent_norm_backward(ctx.cpu, q_a_norm, dq_a_.data(), dq_lat_.data(), s.q_a, s.q_a_rstd, N, q_rank_);
    q_a_proj->backward_weight(ctx, dq_a_.data(), x);
    if (first_rank) q_a_proj->backward_input(ctx, dq_a_.data(), dx, false);
    written = first_rank;
  } else {
    q_proj.backward_input(ctx, dq_proj_.data(), dx, false);
    q_proj.backward_weight(ctx, dq_proj_.data(), x);
    written = true;
  }
  kv_a_proj.backward_weight(ctx, dkv_a_.data(), x);
  if (first_rank) {
    kv_a_proj.backward_input(ctx, dkv_a_.data(), dx, written);
    written = true;
  }
  if (!written) std::fill_n(dx, N * C_, 0.0f);
}

void LatentProjections::collect(std::vector<Param*>& out) {
  if (q_a_proj) {
    q_a_proj->collect(out);
    out.push_back(&q_a_norm);
  }
  q_proj.collect(out);
  kv_a_proj.collect(out);
  out.push_back(&kv_a_norm);
  kv_b_proj.collect(out);
}

void LatentProjections::linears(std::vector<Linear*>& out) {
  if (q_a_proj) out.push_back(&*q_a_proj);
  out.insert(out.end(), {&q_proj, &kv_a_proj, &kv_b_proj});
}

}  // namespace claw::model
