#include "claw/model/attention.h"

#include "claw/kernels/cpu/bf16_gemm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "claw/core/error.h"
#include "claw/model/kv_cache.h"

#include "claw/kernels/cpu/attention.h"
#include "claw/kernels/cpu/attention_offset.h"
#include "claw/kernels/cpu/paged_attention.h"
#include "claw/kernels/cpu/rmsnorm.h"
#include "claw/model/norm.h"
#include "claw/kernels/cpu/rope.h"

namespace claw::model {

std::vector<float> rope_inv_freqs(const ModelConfig& cfg, bool long_factors) {
  const int64_t D = cfg.rotary_dim(), half = D / 2;  // the rotated dimensions' frequencies
  std::vector<float> inv(static_cast<size_t>(half));
  const RopeScaling& rs = cfg.rope_scaling;
  if (rs.longrope()) {  // 1 / (factor_i theta^(2i/D)), in fp32 as transformers computes it
    const std::vector<double>& ext = long_factors ? rs.long_factor : rs.short_factor;
    for (int64_t i = 0; i < half; ++i) {
      const float exponent = static_cast<float>(2 * i) / static_cast<float>(D);
      inv[i] = 1.0f / (static_cast<float>(ext[i]) * std::pow(static_cast<float>(cfg.rotary_base), exponent));
    }
    return inv;
  }
  for (int64_t i = 0; i < half; ++i) inv[i] = kernels::rope_inv_freq(i, D, cfg.rotary_base);
  const float factor = static_cast<float>(rs.factor);
  if (rs.type == "linear") {
    for (float& f : inv) f /= factor;
  } else if (rs.type == "llama3") {
    // Wavelengths longer than the original context / low_freq_factor are
    // stretched by the factor, shorter than it / high_freq_factor kept, and
    // those between interpolated by where the wavelength falls.
    const float two_pi = static_cast<float>(2 * M_PI), original = static_cast<float>(rs.original_max_position_embeddings);
    const float low_wavelen = static_cast<float>(rs.original_max_position_embeddings / rs.low_freq_factor);
    const float high_wavelen = static_cast<float>(rs.original_max_position_embeddings / rs.high_freq_factor);
    const float low = static_cast<float>(rs.low_freq_factor);
    const float span = static_cast<float>(rs.high_freq_factor - rs.low_freq_factor);
    for (float& f : inv) {
      const float wavelen = two_pi / f;
      if (wavelen > low_wavelen) {
        f = f / factor;
      } else if (!(wavelen < high_wavelen)) {
        const float smooth = (original / wavelen - low) / span;
        f = (1.0f - smooth) * f / factor + smooth * f;
      }
    }
  } else if (rs.type == "yarn") {
    // The dimension pair i turns original / (2 pi / inv_i) times over the
    // original context; the ramp runs from where that is beta_fast (kept)
    // to beta_slow (interpolated), in pair indices.
    const double base = cfg.rotary_base, original = static_cast<double>(rs.original_max_position_embeddings);
    const auto pair_of = [&](double rotations) {
      return D * std::log(original / (rotations * 2 * M_PI)) / (2 * std::log(base));
    };
    double lo = pair_of(rs.beta_fast), hi = pair_of(rs.beta_slow);
    if (rs.truncate) lo = std::floor(lo), hi = std::ceil(hi);
    lo = std::max(lo, 0.0);
    hi = std::min(hi, static_cast<double>(D - 1));
    if (lo == hi) hi += 0.001;
    for (int64_t i = 0; i < half; ++i) {
      const float ramp = static_cast<float>(std::clamp((static_cast<double>(i) - lo) / (hi - lo), 0.0, 1.0));
      const float keep = 1.0f - ramp, f = inv[i];
      inv[i] = f / factor * (1.0f - keep) + f * keep;
    }
  }
  return inv;
}

ModelConfig local_rope_config(const ModelConfig& cfg) {
  ModelConfig c = cfg;
  c.rotary_base = cfg.local_rotary_base;
  c.rope_scaling = {};
  return c;
}

RopeTables::RopeTables(const ModelConfig& cfg) {
  const int64_t P = cfg.max_position_embeddings, half = cfg.rotary_dim() / 2;
  const bool two = cfg.rope_scaling.longrope();
  cos.resize(static_cast<size_t>((two ? 2 : 1) * P * half));
  sin.resize(cos.size());
  const std::vector<float> inv = rope_inv_freqs(cfg);
  kernels::rope_table(cos.data(), sin.data(), P, cfg.rotary_dim(), inv.data());
  if (two) {
    const std::vector<float> inv_long = rope_inv_freqs(cfg, true);
    kernels::rope_table(cos.data() + P * half, sin.data() + P * half, P, cfg.rotary_dim(), inv_long.data());
    long_offset = P;
    original = cfg.rope_scaling.original_max_position_embeddings;
  }
  // YaRN's and LongRoPE's attention factor scales cos and sin (so q.k by its square), as transformers does.
  if (const auto m = static_cast<float>(cfg.rope_scaling.table_scale()); m != 1.0f) {
    for (float& c : cos) c *= m;
    for (float& s : sin) s *= m;
  }
}

void RopeTables::upload(const kernels::cuda::Device& device) {
  const size_t bytes = cos.size() * sizeof(float);
  device_ = Arena("rope tables", 2 * bytes, device.memory());
  float* c = device_.ptr<float>(0);
  float* s = device_.ptr<float>(bytes);
  kernels::cuda::copy_to_device(device.ctx(), c, cos.data(), bytes);
  kernels::cuda::copy_to_device(device.ctx(), s, sin.data(), bytes);
  device_cos_ = c;
  device_sin_ = s;
}

void Attention::Saved::layout(ArenaLayout& L, const std::string& prefix, const ModelConfig& cfg, int64_t B,
                              int64_t T, TpDims tp) {
  const int64_t N = B * T, HD = tp.heads(cfg) * cfg.head_dim(), GD = tp.kv_groups(cfg) * cfg.head_dim();
  q = L.take<float>(prefix + ".q", N * HD);
  k = L.take<float>(prefix + ".k", N * GD);
  v = L.take<float>(prefix + ".v", N * GD);
  out = L.take<float>(prefix + ".out", N * HD);
  lse = L.take<float>(prefix + ".lse", N * tp.heads(cfg));
  if (cfg.mla.enabled) mla.layout(L, prefix + ".mla", cfg, N, tp);
  if (!cfg.qk_layernorm) return;
  q_pre = L.take<float>(prefix + ".q_pre", N * HD);
  k_pre = L.take<float>(prefix + ".k_pre", N * GD);
  q_rstd = L.take<float>(prefix + ".q_rstd", N * tp.heads(cfg));
  k_rstd = L.take<float>(prefix + ".k_rstd", N * tp.kv_groups(cfg));
}

namespace {

// k/v: this rank's KV groups, or the one group it shares with TP/G - 1 others.
LinearSplit kv_split(const ModelConfig& cfg, const TensorParallel& tp) {
  const int replicas = tp.dims().kv_replicas(cfg);
  if (replicas == 1) return {.kind = TpSplit::column};
  return {.kind = TpSplit::column, .count = static_cast<int>(cfg.kv_heads()), .index = tp.rank() / replicas,
          .replicas = replicas};
}
}  // namespace

// Output projections (o_proj here, the MLP's down projection) start with a
// smaller std, init_std / sqrt(2 L), so the residual stream's variance does
// not grow with depth (GPT-2 paper sec. 2.3; Megatron's scaled_init_method).
Attention::Attention(int l, const ModelConfig& cfg, const HfNames& hf, const RopeTables* rope,
                     const TensorParallel& tp)
    : o_proj(attention_name(l, "o_proj"), cfg.num_attention_heads * cfg.value_dim(), cfg.hidden_size, cfg.add_bias_linear,
             cfg.init_method_std / std::sqrt(2.0 * cfg.num_layers), hf.attention(l, 'o', false),
             hf.attention(l, 'o', true), tp, {.kind = TpSplit::row}),
      layer_(l),
      tp_(tp),
      C_(cfg.hidden_size),
      H_(tp.dims().heads(cfg)),
      G_(tp.dims().kv_groups(cfg)),
      D_(cfg.head_dim()),
      window_(cfg.layer_window(l)),
      rotary_dim_(cfg.rotary_dim()),
      qk_norm_(cfg.qk_layernorm),
      full_width_(cfg.qk_layernorm_full_width),
      kv_copies_(tp.dims().kv_replicas(cfg)),
      one_plus_(cfg.apply_layernorm_1p),
      scale_(cfg.attention_scale(), cfg.attn_logit_softcapping),
      eps_(cfg.norm_epsilon),
      rope_(rope && !rope->empty() ? rope : nullptr) {
  if (cfg.mla.enabled) {
    mla.emplace(l, cfg, hf, tp);
    if (cfg.lora.enabled() && cfg.lora.targets("linear_proj", "o_proj"))
      o_proj.enable_lora(cfg.lora.rank, cfg.lora.scale(), cfg.lora.dropout);
    return;
  }
  q_proj.emplace(attention_name(l, "q_proj"), cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim(), cfg.qkv_bias(),
                 cfg.init_method_std, hf.attention(l, 'q', false), hf.attention(l, 'q', true), tp,
                 LinearSplit{.kind = TpSplit::column});
  k_proj.emplace(attention_name(l, "k_proj"), cfg.hidden_size, cfg.kv_heads() * cfg.head_dim(), cfg.qkv_bias(),
                 cfg.init_method_std, hf.attention(l, 'k', false), hf.attention(l, 'k', true), tp, kv_split(cfg, tp));
  v_proj.emplace(attention_name(l, "v_proj"), cfg.hidden_size, cfg.kv_heads() * cfg.head_dim(), cfg.qkv_bias(),
                 cfg.init_method_std, hf.attention(l, 'v', false), hf.attention(l, 'v', true), tp, kv_split(cfg, tp));
  if (qk_norm_) {
    const Init init = cfg.apply_layernorm_1p ? Init::zeros : Init::ones;
    const int64_t q_width = full_width_ ? cfg.num_attention_heads * D_ : D_;
    const int64_t k_width = full_width_ ? cfg.kv_heads() * D_ : D_;
    q_norm.spec = {.name = attention_name(l, "q_norm.weight"), .shape = {q_width}, .weight_decay = false, .init = init,
                   .hf = hf.qk_norm(l, 'q')};
    k_norm.spec = {.name = attention_name(l, "k_norm.weight"), .shape = {k_width}, .weight_decay = false, .init = init,
                   .hf = hf.qk_norm(l, 'k')};
    // Full width: each rank holds its heads' columns, split as the projection's rows are.
    const auto shard_like = [](ParamSpec& norm, const ParamSpec& proj) {
      if (proj.shard_dim < 0) return;
      norm.split(0, proj.shard_count, proj.shard_index, proj.shard_group);
      norm.primary = proj.primary;
    };
    if (full_width_) {
      shard_like(q_norm.spec, q_proj->weight.spec);
      shard_like(k_norm.spec, k_proj->weight.spec);
    }
  }
  if (!cfg.lora.enabled()) return;
  // Hugging Face's module names: GPT-2 fuses q, k, v into c_attn, Phi-3 into qkv_proj.
  const bool gpt2 = cfg.position_embedding_type == Position::learned, fused = gpt2 || hf.phi3();
  const char* qkv = gpt2 ? "c_attn" : "qkv_proj";
  const std::pair<Linear*, std::pair<const char*, const char*>> targets[] = {
      {&*q_proj, {"linear_qkv", fused ? qkv : "q_proj"}},
      {&*k_proj, {"linear_qkv", fused ? qkv : "k_proj"}},
      {&*v_proj, {"linear_qkv", fused ? qkv : "v_proj"}},
      {&o_proj, {"linear_proj", gpt2 ? "c_proj" : "o_proj"}}};
  for (const auto& [linear, names] : targets)
    if (cfg.lora.targets(names.first, names.second))
      linear->enable_lora(cfg.lora.rank, cfg.lora.scale(), cfg.lora.dropout);
  // One adapter on GPT-2's fused c_attn (Phi-3's qkv_proj), as PEFT makes
  // it: q, k and v read one A (named for the fused layer) and each has its
  // rows of B.
  if (fused && q_proj->has_lora()) {
    q_proj->lora_a.spec.name = attention_name(l, "linear_qkv") + ".lora_A.weight";
    k_proj->share_lora_a(*q_proj);
    v_proj->share_lora_a(*q_proj);
  }
}

// A sliding window is a document mask too (attention.h, context_parallel.h):
// the token at place t of its row sees keys [max(its document's start,
// t - W + 1), t]. Under context parallelism seg_start and positions are
// always given and t is their sum (the document's start in the full row plus
// the place within the document).
const int32_t* Attention::visible_from(const StepCtx& ctx) const {
  if (window_ == 0) return ctx.seg_start;
  window_lo_.resize(static_cast<size_t>(ctx.B * ctx.T));
  for (int64_t b = 0; b < ctx.B; ++b)
    for (int64_t t = 0; t < ctx.T; ++t) {
      const int64_t i = b * ctx.T + t;
      const int64_t start = ctx.seg_start ? ctx.seg_start[i] : 0;
      const int64_t place = ctx.cp_size > 1 ? start + ctx.positions[i] : t;
      window_lo_[i] = static_cast<int32_t>(std::max(start, place - window_ + 1));
    }
  return window_lo_.data();
}

const int32_t* Attention::rope_positions(const StepCtx& ctx) const {
  if (!rope_ || rope_->long_offset == 0) return ctx.positions;
  if (ctx.cpu.gpu) fail("--rope-scaling-type longrope runs on the CPU only for now");
  if (ctx.cp_size > 1) fail("--rope-scaling-type longrope with --context-parallel-size is not available yet");
  const int64_t B = ctx.B, T = ctx.T, N = B * T;
  rope_pos_.resize(static_cast<size_t>(N));
  seq_end_.resize(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) rope_pos_[i] = ctx.positions ? ctx.positions[i] : static_cast<int32_t>(i % T);
  if (ctx.kv_cache) {
    ctx.kv_cache->sequence_ends(B, T, seq_end_.data());
  } else {
    for (int64_t b = 0; b < B; ++b) {
      const int32_t end = *std::max_element(rope_pos_.begin() + b * T, rope_pos_.begin() + (b + 1) * T) + 1;
      std::fill(seq_end_.begin() + b * T, seq_end_.begin() + (b + 1) * T, end);
    }
  }
  for (int64_t i = 0; i < N; ++i)
    if (seq_end_[i] > rope_->original) rope_pos_[i] += static_cast<int32_t>(rope_->long_offset);
  return rope_pos_.data();
}

void Attention::forward(const StepCtx& ctx, const float* x_rows, float* y, Saved& s, Scratch& scratch) const {
  if (window_ > 0 && ctx.cpu.gpu) fail("--window-size (sliding-window attention) runs on the CPU only for now");
  const float* x = tp_.gather_rows(scratch.gathered, x_rows, ctx.B, ctx.T, C_);
  const bool round = activation_dtype_ != DType::f32 && !ctx.kv_cache && !ctx.batch_invariant;
  // MLA in inference runs the absorbed form; an RL learner's batch-invariant
  // forward (training: a backward follows) runs the expanded one first for
  // backward's saved tensors, then takes its output from the absorbed form,
  // as its generator did.
  const bool absorbed = mla && (ctx.kv_cache || ctx.row_kernels());
  if (absorbed && !ctx.training) return absorbed_forward(ctx, x, y, s);
  if (mla) {
    if (ctx.cpu.gpu) fail("--multi-latent-attention runs on the CPU only for now");
    mla->forward(ctx, x, s.mla, s.q, s.k, s.v);
  } else if (qk_norm_) {
    if (ctx.cpu.gpu) fail("--qk-layernorm runs on the CPU only for now");
    // Each head's row of D is a row of the norm; the un-normed projections are kept for backward.
    q_proj->forward(ctx, x, s.q_pre);
    k_proj->forward(ctx, x, s.k_pre);
    if (round) {
      kernels::round_half_values(ctx.cpu, activation_dtype_, s.q_pre, ctx.tokens() * H_ * D_);
      kernels::round_half_values(ctx.cpu, activation_dtype_, s.k_pre, ctx.tokens() * G_ * D_);
    }
    const float* wq = scale_weight(ctx.cpu, q_norm, one_plus_, q_scale_);
    const float* wk = scale_weight(ctx.cpu, k_norm, one_plus_, k_scale_);
    if (full_width_) {
      full_width_norm_forward(ctx, s.q, s.q_rstd, s.q_pre, wq, H_ * D_, 1);
      full_width_norm_forward(ctx, s.k, s.k_rstd, s.k_pre, wk, G_ * D_, kv_copies_);
    } else {
      kernels::rmsnorm_forward(ctx.cpu, s.q, s.q_rstd, s.q_pre, wq, ctx.tokens() * H_, D_, eps_);
      kernels::rmsnorm_forward(ctx.cpu, s.k, s.k_rstd, s.k_pre, wk, ctx.tokens() * G_, D_, eps_);
    }
  } else {
    q_proj->forward(ctx, x, s.q);
    k_proj->forward(ctx, x, s.k);
  }
  if (!mla) v_proj->forward(ctx, x, s.v);
  if (rope_) {
    const float *cos = rope_->cos_data(), *sin = rope_->sin_data();
    const int32_t* pos = rope_positions(ctx);
    kernels::rope_forward(ctx.cpu, s.q, cos, sin, ctx.B, ctx.T, H_, D_, pos, rotary_dim_);
    kernels::rope_forward(ctx.cpu, s.k, cos, sin, ctx.B, ctx.T, G_, D_, pos, rotary_dim_);
  }
  if (round) {
    kernels::round_half_values(ctx.cpu, activation_dtype_, s.q, ctx.tokens() * H_ * D_);
    kernels::round_half_values(ctx.cpu, activation_dtype_, s.k, ctx.tokens() * G_ * D_);
    kernels::round_half_values(ctx.cpu, activation_dtype_, s.v, ctx.tokens() * G_ * D_);
  }
  if (cp_)
    cp_->forward(ctx.cpu, s.out, s.lse, s.q, s.k, s.v, visible_from(ctx));
  else if (ctx.kv_cache)
    ctx.kv_cache->attend(ctx.cpu, layer_, s.q, s.k, s.v, s.out, s.lse, ctx.B, ctx.T, H_, G_, D_);
  else if (ctx.row_kernels())  // the engine's order: its log-probabilities to the bit
    kernels::fixed_order_attention_forward(ctx.cpu, s.out, s.lse, s.q, s.k, s.v, ctx.B, ctx.T, H_, G_, D_,
                                           scale_, ctx.seg_start, window_);
  else
    kernels::attention_forward(ctx.cpu, s.out, s.lse, s.q, s.k, s.v, ctx.B, ctx.T, H_, G_, D_,
                               scale_, visible_from(ctx));
  if (round) kernels::round_half_values(ctx.cpu, activation_dtype_, s.out, ctx.tokens() * H_ * D_);
  if (mla) mla->compact(ctx, s.out, s.mla);
  o_proj.forward(ctx, mla ? s.mla.out_v : s.out, y);
  if (absorbed) absorbed_forward(ctx, x, y, s);
}

// The caches (and the engine's batch-invariant steps, so that an RL
// learner's log-probabilities are its generator's) see MLA's absorbed form:
// H query heads of r + kv_lora over one latent head that is key and value.
void Attention::absorbed_forward(const StepCtx& ctx, const float* x, float* y, Saved& s) const {
  if (ctx.cpu.gpu) fail("--multi-latent-attention runs on the CPU only for now");
  const int64_t N = ctx.tokens(), A = mla->absorbed_dim();
  absorbed_q_.resize(static_cast<size_t>(N * H_ * A));
  absorbed_kv_.resize(static_cast<size_t>(N * A));
  absorbed_out_.resize(static_cast<size_t>(N * H_ * A));
  absorbed_lse_.resize(static_cast<size_t>(N * H_));  // its own: a learner's backward reads the expanded form's
  float *q = absorbed_q_.data(), *kv = absorbed_kv_.data(), *out = absorbed_out_.data(), *lse = absorbed_lse_.data();
  mla->absorbed_forward(ctx, x, s.mla, q, kv);
  const float *cos = rope_->cos_data(), *sin = rope_->sin_data();
  const int32_t* pos = rope_positions(ctx);
  kernels::rope_forward(ctx.cpu, q, cos, sin, ctx.B, ctx.T, H_, A, pos, rotary_dim_);
  kernels::rope_forward(ctx.cpu, kv, cos, sin, ctx.B, ctx.T, 1, A, pos, rotary_dim_);
  if (ctx.kv_cache)
    ctx.kv_cache->attend(ctx.cpu, layer_, q, kv, kv, out, lse, ctx.B, ctx.T, H_, 1, A);
  else
    kernels::fixed_order_attention_forward(ctx.cpu, out, lse, q, kv, kv, ctx.B, ctx.T, H_, 1, A, scale_,
                                           ctx.seg_start, window_);
  mla->absorbed_output(ctx, out, s.mla);
  o_proj.forward(ctx, s.mla.out_v, y);
}

void Attention::backward(const StepCtx& ctx, const Saved& s, const float* x_rows, const float* dy_rows, float* dx,
                         Scratch& scratch) {
  const float* dy = o_proj.output_grad(ctx, dy_rows, scratch.gathered);
  o_proj.backward_weight(ctx, dy, mla ? s.mla.out_v : s.out);
  if (mla) {  // the output gradient without padding in dq (free until the kernel's backward), then padded
    o_proj.backward_input(ctx, dy, scratch.dq, false);
    mla->expand(ctx, scratch.dq, scratch.datt);
  } else {
    o_proj.backward_input(ctx, dy, scratch.datt, false);
  }
  if (cp_)
    cp_->backward(ctx.cpu, scratch.dq, scratch.dk, scratch.dv, scratch.datt, s.q, s.k, s.v, s.out, s.lse,
                  visible_from(ctx));
  else
    kernels::attention_backward(ctx.cpu, scratch.dq, scratch.dk, scratch.dv, scratch.datt, s.q, s.k, s.v, s.out,
                                s.lse, ctx.B, ctx.T, H_, G_, D_, scale_, visible_from(ctx));
  if (rope_) {
    const float *cos = rope_->cos_data(), *sin = rope_->sin_data();
    const int32_t* pos = rope_positions(ctx);
    kernels::rope_backward(ctx.cpu, scratch.dq, cos, sin, ctx.B, ctx.T, H_, D_, pos, rotary_dim_);
    kernels::rope_backward(ctx.cpu, scratch.dk, cos, sin, ctx.B, ctx.T, G_, D_, pos, rotary_dim_);
  }
  if (mla) {
    const float* x = tp_.gather_rows(scratch.gathered, x_rows, ctx.B, ctx.T, C_);
    mla->backward(ctx, s.mla, x, scratch.dq, scratch.dk, scratch.dv, dx);
    tp_.reduce_rows(dx, ctx.B, ctx.T, C_);
    return;
  }
  // --qk-layernorm: the gradients before the norm (dq in datt, consumed by
  // the attention backward above).
  float* dq = scratch.dq;
  float* dk = scratch.dk;
  if (qk_norm_) {
    dq = scratch.datt;
    dk_pre_.resize(static_cast<size_t>(ctx.tokens() * G_ * D_));
    dk = dk_pre_.data();
    qk_norm_backward(ctx, s, scratch.dq, scratch.dk, dq, dk);
  }
  // The input gradient takes each rank's partial dk/dv (their sum over the
  // group is the whole); the weight gradients of a shared KV group need the
  // sum over the ranks holding it.
  q_proj->backward_input(ctx, dq, dx, false);
  k_proj->backward_input(ctx, dk, dx, true);
  v_proj->backward_input(ctx, scratch.dv, dx, true);
  if (tp_.kv_group && tp_.kv_group->size() > 1) {
    tp_.kv_group->all_reduce(dk, ctx.tokens() * G_ * D_, DType::f32);
    tp_.kv_group->all_reduce(scratch.dv, ctx.tokens() * G_ * D_, DType::f32);
  }
  const float* x = tp_.gather_rows(scratch.gathered, x_rows, ctx.B, ctx.T, C_);
  q_proj->backward_weight(ctx, dq, x);
  k_proj->backward_weight(ctx, dk, x);
  v_proj->backward_weight(ctx, scratch.dv, x);
  tp_.reduce_rows(dx, ctx.B, ctx.T, C_);
}

// The norm's backward is linear in its output gradient, so a rank's partial
// dk (its query heads' share when several ranks hold a KV group) gives the
// partial input gradient (summed over those ranks afterwards, as without the
// norm) and a partial weight gradient. Every rank holds other heads, so the
// weights' gradients are sums over the tensor-parallel group.
void Attention::qk_norm_backward(const StepCtx& ctx, const Saved& s, const float* dq_normed, const float* dk_normed,
                                 float* dq, float* dk) {
  const int64_t N = ctx.tokens();
  if (full_width_) {
    const float* wq = scale_weight(ctx.cpu, q_norm, one_plus_, q_scale_);
    const float* wk = scale_weight(ctx.cpu, k_norm, one_plus_, k_scale_);
    full_width_norm_backward(ctx, dq, q_norm.gdata(), dq_normed, s.q_pre, wq, s.q_rstd, H_ * D_, 1);
    full_width_norm_backward(ctx, dk, k_norm.gdata(), dk_normed, s.k_pre, wk, s.k_rstd, G_ * D_, kv_copies_);
    return;
  }
  const bool reduce = tp_.group && tp_.group->size() > 1;
  const bool trains = q_norm.grad.defined() || k_norm.grad.defined();
  dnorm_w_.assign(static_cast<size_t>(2 * D_), 0.0f);
  float* dwq = !q_norm.grad.defined() ? nullptr : reduce ? dnorm_w_.data() : q_norm.gdata();
  float* dwk = !k_norm.grad.defined() ? nullptr : reduce ? dnorm_w_.data() + D_ : k_norm.gdata();
  kernels::rmsnorm_backward(ctx.cpu, dq, dwq, dq_normed, s.q_pre, scale_weight(ctx.cpu, q_norm, one_plus_, q_scale_),
                            s.q_rstd, N * H_, D_, false);
  kernels::rmsnorm_backward(ctx.cpu, dk, dwk, dk_normed, s.k_pre, scale_weight(ctx.cpu, k_norm, one_plus_, k_scale_),
                            s.k_rstd, N * G_, D_, false);
  if (!reduce || !trains) return;
  tp_.group->all_reduce(dnorm_w_.data(), 2 * D_, DType::f32);
  if (float* g = q_norm.gdata())
    for (int64_t d = 0; d < D_; ++d) g[d] += dnorm_w_[d];
  if (float* g = k_norm.gdata())
    for (int64_t d = 0; d < D_; ++d) g[d] += dnorm_w_[D_ + d];
}

namespace {
// Per token n of N, the sum over its full row of term(n, d) (d over this
// rank's `width` columns, in double), summed over the TP group into sums.
template <typename Term>
void full_row_sums(const StepCtx& ctx, comm::Group* group, std::vector<float>& sums, int64_t width,
                   const Term& term) {
  const int64_t N = ctx.tokens();
  sums.resize(static_cast<size_t>(N));
  parallel_for(ctx.cpu, N, std::max<int64_t>(1, 4096 / width), [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      double sum = 0;
      for (int64_t d = 0; d < width; ++d) sum += term(n * width + d, d);
      sums[n] = static_cast<float>(sum);
    }
  });
  if (group && group->size() > 1) group->all_reduce(sums.data(), N, DType::f32);
}
}  // namespace

// y = x w / rms(x) over the full row: this rank's sums of squares, summed
// over the TP group (each column counted `copies` times), in double.
void Attention::full_width_norm_forward(const StepCtx& ctx, float* y, float* rstd, const float* x, const float* w,
                                        int64_t width, int copies) const {
  full_row_sums(ctx, tp_.group, row_sums_, width,
                [&](int64_t i, int64_t) { return static_cast<double>(x[i]) * x[i]; });
  const int tp = tp_.group ? tp_.group->size() : 1;
  const double full = static_cast<double>(width) * tp / copies;
  parallel_for(ctx.cpu, ctx.tokens(), std::max<int64_t>(1, 4096 / width), [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const float r = static_cast<float>(1.0 / std::sqrt(row_sums_[n] / copies / full + eps_));
      rstd[n] = r;
      for (int64_t d = 0; d < width; ++d) y[n * width + d] = x[n * width + d] * r * w[d];
    }
  });
}

// dx = r w dy - x r^3 <x w, dy> / width, the dot product over the full row.
// With a KV group on several ranks, each holds a partial dy (their sum is
// the whole): the partial dots sum to the whole dot over the TP group, each
// rank takes 1/copies of the second term, and the weight's partial
// gradients are summed over the group's ranks.
void Attention::full_width_norm_backward(const StepCtx& ctx, float* dx, float* dw, const float* dy, const float* x,
                                         const float* w, const float* rstd, int64_t width, int copies) {
  const int64_t N = ctx.tokens();
  full_row_sums(ctx, tp_.group, row_sums_, width,
                [&](int64_t i, int64_t d) { return static_cast<double>(x[i]) * w[d] * dy[i]; });
  const int tp = tp_.group ? tp_.group->size() : 1;
  const double full = static_cast<double>(width) * tp / copies;
  parallel_for(ctx.cpu, N, std::max<int64_t>(1, 4096 / width), [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const double r = rstd[n], c = r * r * r * row_sums_[n] / full / copies;
      for (int64_t d = 0; d < width; ++d)
        dx[n * width + d] = static_cast<float>(r * w[d] * dy[n * width + d] - c * x[n * width + d]);
    }
  });
  if (!dw) return;
  // A fresh sum (the buffer may hold earlier micro-batches'), reduced over
  // the ranks sharing the KV group, then accumulated.
  dnorm_w_.assign(static_cast<size_t>(width), 0.0f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < width; ++d) dnorm_w_[d] += dy[n * width + d] * x[n * width + d] * rstd[n];
  if (copies > 1) tp_.kv_group->all_reduce(dnorm_w_.data(), width, DType::f32);
  for (int64_t d = 0; d < width; ++d) dw[d] += dnorm_w_[d];
}

void Attention::linears(std::vector<Linear*>& out) {
  if (mla)
    mla->linears(out);
  else
    out.insert(out.end(), {&*q_proj, &*k_proj, &*v_proj});
  out.push_back(&o_proj);
}

void Attention::collect(std::vector<Param*>& out) {
  if (mla) {
    mla->collect(out);
  } else {
    q_proj->collect(out);
    k_proj->collect(out);
    v_proj->collect(out);
  }
  o_proj.collect(out);
  if (qk_norm_) out.insert(out.end(), {&q_norm, &k_norm});
}

}  // namespace claw::model
