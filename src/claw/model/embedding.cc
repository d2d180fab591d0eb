#include "claw/model/embedding.h"

#include <algorithm>
#include <cmath>

#include "claw/core/error.h"
#include "claw/core/philox.h"
#include "claw/kernels/cpu/dropout.h"
#include "claw/kernels/cpu/embedding.h"

namespace claw::model {

namespace {
constexpr const char* kDropoutPurpose = "embedding.dropout";

// out[r] += wpe[pos(first + r)] for the rows [first, first + rows) of [B, T].
void add_positions(const StepCtx& ctx, float* out, const float* wpe, int64_t first, int64_t rows, int64_t C) {
  parallel_for(ctx.cpu, rows, std::max<int64_t>(1, 4096 / C), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t n = first + r;
      const float* p = wpe + (ctx.positions ? ctx.positions[n] : n % ctx.T) * C;
      float* o = out + r * C;
      for (int64_t c = 0; c < C; ++c) o[c] += p[c];
    }
  });
}
}  // namespace

Embedding::Embedding(const ModelConfig& cfg, const HfNames& hf, const TensorParallel& tp)
    : tp_(tp),
      vocab_(VocabShard::of(cfg.vocab_size, tp.dims().padded_vocab(cfg), tp.rank(), tp.size())),
      C_(cfg.hidden_size),
      learned_pos_(cfg.position_embedding_type == Position::learned),
      dropout_(cfg.hidden_dropout),
      // Gemma: sqrt(hidden) rounded to fp32, as transformers makes the normalizer.
      scale_(cfg.scale_embedding ? static_cast<float>(std::sqrt(static_cast<double>(cfg.hidden_size))) : 1.0f) {
  word.spec = {.name = "embedding.word_embeddings.weight",
               .shape = {vocab_.Vp, C_},
               .init_std = cfg.init_method_std,
               .init_rows = cfg.vocab_size,
               .hf = hf.word_embeddings()};
  if (tp.size() > 1) word.spec.split(0, tp.size(), tp.rank(), "tp");
  if (learned_pos_)
    position.spec = {.name = "embedding.position_embeddings.weight",
                     .shape = {cfg.max_position_embeddings, C_},
                     .init_std = cfg.init_method_std,
                     .hf = hf.position_embeddings()};
}

void Embedding::forward(const StepCtx& ctx, const int32_t* tokens, float* out, Scratch& scratch) const {
  const int64_t N = ctx.tokens(), R = tp_.rows(N), first = tp_.first_row(N);
  const float* wpe = learned_pos_ ? position.data() : nullptr;
  if (tp_.size() == 1) {
    kernels::embedding_forward(ctx.cpu, out, tokens, word.data(), wpe, ctx.B, ctx.T, C_, ctx.positions);
  } else {
    if (tp_.sp())
      vocab_parallel_embedding_forward_sp(ctx.cpu, *tp_.group, out, scratch.gathered, tokens, word.data(), vocab_, N,
                                          C_);
    else
      vocab_parallel_embedding_forward(ctx.cpu, *tp_.group, out, tokens, word.data(), vocab_, N, C_);
    if (wpe) add_positions(ctx, out, wpe, first, R, C_);
  }
  if (scale_ != 1.0f) scale_rows(ctx, out, R * C_);
  if (ctx.training && dropout_ > 0)
    kernels::dropout_forward(ctx.cpu, out, out, R * C_, dropout_, RandomStream(ctx.seed, hash_name(kDropoutPurpose)),
                             (ctx.first_token() + first) * C_);
}

void Embedding::backward(const StepCtx& ctx, const int32_t* tokens, float* dout, Scratch& scratch) {
  const int64_t N = ctx.tokens(), R = tp_.rows(N), first = tp_.first_row(N);
  float* dwpe = learned_pos_ ? position.gdata() : nullptr;
  if (!word.grad.defined() && !dwpe) return;  // frozen: the gradient ends here
  if (ctx.training && dropout_ > 0)
    kernels::dropout_backward(ctx.cpu, dout, dout, R * C_, dropout_, RandomStream(ctx.seed, hash_name(kDropoutPurpose)),
                              (ctx.first_token() + first) * C_);
  if (scale_ != 1.0f) scale_rows(ctx, dout, R * C_);
  if (tp_.size() == 1) {
    kernels::embedding_backward(ctx.cpu, word.gdata(), dwpe, dout, tokens, ctx.B, ctx.T, C_, ctx.positions);
    return;
  }
  const float* whole = dout;  // [N, C]
  if (tp_.sp()) {
    vocab_parallel_embedding_backward_sp(ctx.cpu, *tp_.group, word.gdata(), scratch.gathered, dout, tokens, vocab_, N,
                                         C_);
    whole = scratch.gathered;
  } else {
    vocab_parallel_embedding_backward(ctx.cpu, word.gdata(), dout, tokens, vocab_, N, C_);
  }
  if (dwpe)
    kernels::embedding_backward<float>(ctx.cpu, nullptr, dwpe, whole, tokens, ctx.B, ctx.T, C_, ctx.positions);
}

// x *= scale_ (--scale-embedding: forward's rows, and backward's gradient in place).
void Embedding::scale_rows(const StepCtx& ctx, float* x, int64_t n) const {
  if (ctx.cpu.gpu) fail("--scale-embedding runs on the CPU only for now");
  const float s = scale_;
  parallel_for(ctx.cpu, n, 1 << 14, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) x[i] *= s;
  });
}

void Embedding::collect(std::vector<Param*>& out) {
  out.push_back(&word);
  if (learned_pos_) out.push_back(&position);
}

}  // namespace claw::model
