#include "claw/model/mlp.h"

#include <cmath>

#include "claw/kernels/cpu/activations.h"

namespace claw::model {

void MLP::Saved::layout(ArenaLayout& L, const std::string& prefix, const ModelConfig& cfg, int64_t N) {
  h = L.take<float>(prefix + ".h", N * cfg.ffn());
  if (cfg.mlp == Mlp::swiglu) u = L.take<float>(prefix + ".u", N * cfg.ffn());
}

namespace {
std::string mlp_name(int layer, const char* what) { return "layers." + std::to_string(layer) + ".mlp." + what; }
}  // namespace

MLP::MLP(int l, const ModelConfig& cfg, const HfNames& hf)
    : fc(mlp_name(l, cfg.mlp == Mlp::gelu ? "fc" : "gate_proj"), cfg.hidden_size, cfg.ffn(), cfg.add_bias_linear,
         cfg.init_method_std, hf.mlp(l, cfg.mlp == Mlp::gelu ? "fc" : "gate", false),
         hf.mlp(l, cfg.mlp == Mlp::gelu ? "fc" : "gate", true)),
      proj(mlp_name(l, cfg.mlp == Mlp::gelu ? "proj" : "down_proj"), cfg.ffn(), cfg.hidden_size, cfg.add_bias_linear,
           cfg.init_method_std / std::sqrt(2.0 * cfg.num_layers),
           hf.mlp(l, cfg.mlp == Mlp::gelu ? "proj" : "down", false),
           hf.mlp(l, cfg.mlp == Mlp::gelu ? "proj" : "down", true)),
      kind_(cfg.mlp),
      F_(cfg.ffn()) {
  if (kind_ == Mlp::swiglu)
    up.emplace(mlp_name(l, "up_proj"), cfg.hidden_size, F_, cfg.add_bias_linear, cfg.init_method_std,
               hf.mlp(l, "up", false), hf.mlp(l, "up", true));
}

void MLP::activate(const StepCtx& ctx, const Saved& s, float* a) const {
  const int64_t n = ctx.tokens() * F_;
  if (kind_ == Mlp::gelu)
    kernels::gelu_forward(ctx.cpu, a, s.h, n);
  else
    kernels::swiglu_forward(ctx.cpu, a, s.h, s.u, n);
}

void MLP::forward(const StepCtx& ctx, const float* x, float* y, Saved& s, Scratch& scratch) const {
  fc.forward(ctx, x, s.h);
  if (up) up->forward(ctx, x, s.u);
  activate(ctx, s, scratch.act);
  proj.forward(ctx, scratch.act, y);
}

void MLP::backward(const StepCtx& ctx, Saved& s, const float* x, const float* dy, float* dx, Scratch& scratch) {
  const int64_t n = ctx.tokens() * F_;
  float* a = scratch.act;
  activate(ctx, s, a);  // recompute
  proj.backward_weight(ctx, dy, a);
  float* da = a;  // a is dead once proj's weight gradient has it
  proj.backward_input(ctx, dy, da, false);
  if (kind_ == Mlp::gelu) {
    kernels::gelu_backward(ctx.cpu, s.h, da, s.h, n);  // dh over h
    fc.backward_weight(ctx, s.h, x);
    fc.backward_input(ctx, s.h, dx, false);
  } else {
    kernels::swiglu_backward(ctx.cpu, s.h, s.u, da, s.h, s.u, n);  // dgate over gate, dup over up
    fc.backward_weight(ctx, s.h, x);
    up->backward_weight(ctx, s.u, x);
    fc.backward_input(ctx, s.h, dx, false);
    up->backward_input(ctx, s.u, dx, true);
  }
}

void MLP::collect(std::vector<Param*>& out) {
  fc.collect(out);
  if (up) up->collect(out);
  proj.collect(out);
}

}  // namespace claw::model
