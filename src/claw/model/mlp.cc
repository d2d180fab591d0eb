#include "claw/model/mlp.h"

#include "claw/kernels/cpu/bf16_gemm.h"

#include <cmath>

#include "claw/kernels/cpu/activations.h"

namespace claw::model {

void MLP::Saved::layout(ArenaLayout& L, const std::string& prefix, const ModelConfig& cfg, int64_t N, TpDims tp,
                        int64_t width) {
  const int64_t F = width > 0 ? width / tp.size : tp.ffn(cfg);
  h = L.take<float>(prefix + ".h", N * F);
  if (cfg.gated_mlp()) u = L.take<float>(prefix + ".u", N * F);
}

namespace {
std::string mlp_name(int layer, const char* what) { return "layers." + std::to_string(layer) + ".mlp." + what; }
}  // namespace

MLP::MLP(int l, const ModelConfig& cfg, const HfNames& hf, const TensorParallel& tp)
    : fc(mlp_name(l, cfg.mlp == Mlp::gelu ? "fc" : "gate_proj"), cfg.hidden_size, cfg.ffn(), cfg.add_bias_linear,
         cfg.init_method_std, hf.mlp(l, cfg.mlp == Mlp::gelu ? "fc" : "gate", false),
         hf.mlp(l, cfg.mlp == Mlp::gelu ? "fc" : "gate", true), tp, {.kind = TpSplit::column}),
      proj(mlp_name(l, cfg.mlp == Mlp::gelu ? "proj" : "down_proj"), cfg.ffn(), cfg.hidden_size, cfg.add_bias_linear,
           cfg.init_method_std / std::sqrt(2.0 * cfg.num_layers),
           hf.mlp(l, cfg.mlp == Mlp::gelu ? "proj" : "down", false),
           hf.mlp(l, cfg.mlp == Mlp::gelu ? "proj" : "down", true), tp, {.kind = TpSplit::row}),
      tp_(tp),
      kind_(cfg.mlp),
      C_(cfg.hidden_size),
      F_(tp.dims().ffn(cfg)) {
  if (kind_ != Mlp::gelu)
    up.emplace(mlp_name(l, "up_proj"), cfg.hidden_size, cfg.ffn(), cfg.add_bias_linear, cfg.init_method_std,
               hf.mlp(l, "up", false), hf.mlp(l, "up", true), tp, LinearSplit{.kind = TpSplit::column});
  if (!cfg.lora.enabled()) return;
  const bool gpt2 = kind_ == Mlp::gelu, phi3 = hf.phi3();
  auto adapt = [&](Linear& linear, const char* megatron, const char* hf_name) {
    if (cfg.lora.targets(megatron, hf_name)) linear.enable_lora(cfg.lora.rank, cfg.lora.scale(), cfg.lora.dropout);
  };
  adapt(fc, "linear_fc1", gpt2 ? "c_fc" : phi3 ? "gate_up_proj" : "gate_proj");
  if (up) adapt(*up, "linear_fc1", phi3 ? "gate_up_proj" : "up_proj");
  adapt(proj, "linear_fc2", gpt2 ? "c_proj" : "down_proj");
  // Phi-3's gate_up_proj: one A for gate and up, each its half of B's rows.
  if (phi3 && up && fc.has_lora()) {
    fc.lora_a.spec.name = mlp_name(l, "linear_fc1") + ".lora_A.weight";
    up->share_lora_a(fc);
  }
}

MLP::MLP(const std::string& prefix, int64_t width, const ModelConfig& cfg, const std::string& hf_prefix,
         const TensorParallel& tp)
    : fc(prefix + (cfg.mlp == Mlp::gelu ? ".fc" : ".gate_proj"), cfg.hidden_size, width, cfg.add_bias_linear,
         cfg.init_method_std,
         HfRef{hf_prefix.empty() ? "" : hf_prefix + (cfg.mlp == Mlp::gelu ? ".fc.weight" : ".gate_proj.weight")},
         HfRef{}, tp, {.kind = TpSplit::column}),
      proj(prefix + (cfg.mlp == Mlp::gelu ? ".proj" : ".down_proj"), width, cfg.hidden_size, cfg.add_bias_linear,
           cfg.init_method_std / std::sqrt(2.0 * cfg.num_layers),
           HfRef{hf_prefix.empty() ? "" : hf_prefix + (cfg.mlp == Mlp::gelu ? ".proj.weight" : ".down_proj.weight")},
           HfRef{}, tp, {.kind = TpSplit::row}),
      tp_(tp),
      kind_(cfg.mlp),
      C_(cfg.hidden_size),
      F_(width / tp.size()) {
  if (kind_ != Mlp::gelu)
    up.emplace(prefix + ".up_proj", cfg.hidden_size, width, cfg.add_bias_linear, cfg.init_method_std,
               HfRef{hf_prefix.empty() ? "" : hf_prefix + ".up_proj.weight"}, HfRef{}, tp,
               LinearSplit{.kind = TpSplit::column});
  if (!cfg.lora.enabled()) return;  // an MoE layer's shared expert: adapters as a dense MLP's
  const bool gpt2 = kind_ == Mlp::gelu;
  auto adapt = [&](Linear& linear, const char* megatron, const char* hf_name) {
    if (cfg.lora.targets(megatron, hf_name)) linear.enable_lora(cfg.lora.rank, cfg.lora.scale(), cfg.lora.dropout);
  };
  adapt(fc, "linear_fc1", gpt2 ? "fc" : "gate_proj");
  if (up) adapt(*up, "linear_fc1", "up_proj");
  adapt(proj, "linear_fc2", gpt2 ? "proj" : "down_proj");
}

void MLP::activate(const StepCtx& ctx, const Saved& s, float* a) const {
  const int64_t n = ctx.tokens() * F_;
  if (kind_ == Mlp::gelu)
    kernels::gelu_forward(ctx.cpu, a, s.h, n);
  else if (kind_ == Mlp::geglu)
    kernels::geglu_forward(ctx.cpu, a, s.h, s.u, n);
  else
    kernels::swiglu_forward(ctx.cpu, a, s.h, s.u, n);
}

void MLP::forward(const StepCtx& ctx, const float* x_rows, float* y, Saved& s, Scratch& scratch) const {
  const float* x = tp_.gather_rows(scratch.gathered, x_rows, ctx.B, ctx.T, C_);
  fc.forward(ctx, x, s.h);
  if (up) up->forward(ctx, x, s.u);
  if (activation_dtype_ != DType::f32 && !ctx.kv_cache && !ctx.batch_invariant) {
    kernels::round_half_values(ctx.cpu, activation_dtype_, s.h, ctx.tokens() * F_);
    if (up) kernels::round_half_values(ctx.cpu, activation_dtype_, s.u, ctx.tokens() * F_);
  }
  activate(ctx, s, scratch.act);
  proj.forward(ctx, scratch.act, y);
}

void MLP::backward(const StepCtx& ctx, Saved& s, const float* x_rows, const float* dy_rows, float* dx,
                   Scratch& scratch) {
  const int64_t n = ctx.tokens() * F_;
  const float* dy = proj.output_grad(ctx, dy_rows, scratch.gathered);
  float* a = scratch.act;
  activate(ctx, s, a);  // recompute
  proj.backward_weight(ctx, dy, a);
  float* da = a;  // a is dead once proj's weight gradient has it
  proj.backward_input(ctx, dy, da, false);
  if (kind_ == Mlp::gelu)
    kernels::gelu_backward(ctx.cpu, s.h, da, s.h, n);  // dh over h
  else if (kind_ == Mlp::geglu)
    kernels::geglu_backward(ctx.cpu, s.h, s.u, da, s.h, s.u, n);  // dgate over gate, dup over up
  else
    kernels::swiglu_backward(ctx.cpu, s.h, s.u, da, s.h, s.u, n);  // dgate over gate, dup over up
  const float* x = tp_.gather_rows(scratch.gathered, x_rows, ctx.B, ctx.T, C_);  // dy is dead
  fc.backward_weight(ctx, s.h, x);
  fc.backward_input(ctx, s.h, dx, false);
  if (up) {
    up->backward_weight(ctx, s.u, x);
    up->backward_input(ctx, s.u, dx, true);
  }
  tp_.reduce_rows(dx, ctx.B, ctx.T, C_);
}

void MLP::collect(std::vector<Param*>& out) {
  fc.collect(out);
  if (up) up->collect(out);
  proj.collect(out);
}

}  // namespace claw::model
