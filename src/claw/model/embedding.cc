#include "claw/model/embedding.h"

#include "claw/core/philox.h"
#include "claw/kernels/cpu/dropout.h"
#include "claw/kernels/cpu/embedding.h"

namespace claw::model {

namespace {
constexpr const char* kDropoutPurpose = "embedding.dropout";
}

Embedding::Embedding(const ModelConfig& cfg, const HfNames& hf)
    : C_(cfg.hidden_size), learned_pos_(cfg.position_embedding_type == Position::learned), dropout_(cfg.hidden_dropout) {
  word.spec = {.name = "embedding.word_embeddings.weight",
               .shape = {cfg.padded_vocab_size(), C_},
               .init_std = cfg.init_method_std,
               .init_rows = cfg.vocab_size,
               .hf = hf.word_embeddings()};
  if (learned_pos_)
    position.spec = {.name = "embedding.position_embeddings.weight",
                     .shape = {cfg.max_position_embeddings, C_},
                     .init_std = cfg.init_method_std,
                     .hf = hf.position_embeddings()};
}

void Embedding::forward(const StepCtx& ctx, const int32_t* tokens, float* out) const {
  kernels::embedding_forward(ctx.cpu, out, tokens, word.data(), learned_pos_ ? position.data() : nullptr, ctx.B,
                             ctx.T, C_, ctx.positions);
  if (ctx.training && dropout_ > 0)
    kernels::dropout_forward(ctx.cpu, out, out, ctx.tokens() * C_, dropout_,
                             RandomStream(ctx.seed, hash_name(kDropoutPurpose)), ctx.sample0 * ctx.T * C_);
}

void Embedding::backward(const StepCtx& ctx, const int32_t* tokens, float* dout) {
  if (ctx.training && dropout_ > 0)
    kernels::dropout_backward(ctx.cpu, dout, dout, ctx.tokens() * C_, dropout_,
                              RandomStream(ctx.seed, hash_name(kDropoutPurpose)), ctx.sample0 * ctx.T * C_);
  kernels::embedding_backward(ctx.cpu, word.gdata(), learned_pos_ ? position.gdata() : nullptr, dout, tokens, ctx.B,
                              ctx.T, C_, ctx.positions);
}

void Embedding::collect(std::vector<Param*>& out) {
  out.push_back(&word);
  if (learned_pos_) out.push_back(&position);
}

}  // namespace claw::model
