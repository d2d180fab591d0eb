// Writes what moe_reference.py needs to check claw's MoE kernels
// (kernels/cpu/moe.h) against PyTorch: one MoE feed-forward over N tokens
// of width C with E SwiGLU experts of width F, top-k routing,
//   y = sum over kept choices j of prob_tj FFN_{e_tj}(x_t),
//   L = <y, dy> + aux + z,
// with aux the load-balancing loss (coeff E sum_i f_i P_i) and z the router
// z-loss (coeff mean_t lse_t^2). Inputs are seeded; the file holds them and
// claw's y, routing (experts, weights, kept), aux, z and the gradients of L
// with respect to x, the router weight and every expert weight; the
// expert bias after one update step (DeepSeek-V3: bias_i += rate x
// sign(mean load - load_i)).
//
//   moe_dump --out FILE [--score softmax|sigmoid] [--topk K] [--capacity F]
//            [--drop probs|position] [--bias] [--aux COEFF] [--z COEFF]
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "claw/ckpt/safetensors.h"
#include "claw/kernels/cpu/activations.h"
#include "claw/kernels/cpu/blas.h"
#include "claw/kernels/cpu/moe.h"

using namespace claw;

namespace {
std::vector<float> randn(size_t n, uint32_t seed, float scale) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app("dump claw's MoE kernels' results for moe_reference.py");
  std::string out, score_name = "softmax", drop_name = "probs";
  int64_t N = 24, C = 16, F = 12, E = 6, k = 2;
  double capacity = 0, aux_coeff = 0.01, z_coeff = 0.001, bias_rate = 0.001;
  bool bias = false;
  kernels::MoeTopK topk;
  app.add_option("--out", out)->required();
  app.add_option("--groups", topk.num_groups);
  app.add_option("--group-topk", topk.group_topk);
  app.add_option("--scaling", topk.scaling_factor);
  app.add_option("--score", score_name);
  app.add_option("--topk", k);
  app.add_option("--experts", E);
  app.add_option("--capacity", capacity);
  app.add_option("--drop", drop_name);
  app.add_flag("--bias", bias);
  app.add_option("--aux", aux_coeff);
  app.add_option("--z", z_coeff);
  CLI11_PARSE(app, argc, argv);
  const kernels::MoeScore score = kernels::parse_moe_score(score_name);
  const kernels::MoeDrop drop = kernels::parse_moe_drop(drop_name);
  const CpuCtx ctx{1};

  const auto x = randn(static_cast<size_t>(N * C), 1, 1.0f), wr = randn(static_cast<size_t>(E * C), 2, 0.5f),
             wg = randn(static_cast<size_t>(E * F * C), 3, 0.3f), wu = randn(static_cast<size_t>(E * F * C), 4, 0.3f),
             wd = randn(static_cast<size_t>(E * C * F), 5, 0.3f), dy = randn(static_cast<size_t>(N * C), 6, 1.0f);
  std::vector<float> expert_bias = bias ? randn(static_cast<size_t>(E), 7, 0.5f) : std::vector<float>();

  // Forward.
  std::vector<float> logits(static_cast<size_t>(N * E));
  kernels::gemm(ctx, false, true, N, E, C, 1.0f, x.data(), C, wr.data(), C, 0.0f, logits.data(), E);
  kernels::MoeRouting r;
  kernels::moe_route(logits.data(), bias ? expert_bias.data() : nullptr, N, E, k, score, capacity, drop, r, topk);
  const auto M = static_cast<int64_t>(r.order.size());
  std::vector<float> rows(static_cast<size_t>(M * C)), g(static_cast<size_t>(M * F)), u(g.size()), a(g.size()),
      o(static_cast<size_t>(M * C)), y(static_cast<size_t>(N * C));
  kernels::moe_gather(ctx, r, x.data(), C, rows.data());
  kernels::grouped_gemm(ctx, r.offsets.data(), E, F, C, rows.data(), wg.data(), 0.0f, g.data());
  kernels::grouped_gemm(ctx, r.offsets.data(), E, F, C, rows.data(), wu.data(), 0.0f, u.data());
  kernels::swiglu_forward(ctx, a.data(), g.data(), u.data(), M * F);
  kernels::grouped_gemm(ctx, r.offsets.data(), E, C, F, a.data(), wd.data(), 0.0f, o.data());
  kernels::moe_combine(ctx, r, o.data(), C, y.data(), false);
  std::vector<double> score_sum(static_cast<size_t>(E));
  const double z = kernels::moe_route_sums(r, score_sum.data()) * z_coeff / N;
  const double aux = kernels::moe_aux_loss(aux_coeff, r.routed.data(), score_sum.data(), N, E, k);

  // Backward of L = <y, dy> + aux + z.
  std::vector<float> drows(static_cast<size_t>(M * C)), dprob(static_cast<size_t>(N * k)), da(g.size()),
      dg(g.size()), du(g.size()), dxrows(static_cast<size_t>(M * C)), dx(static_cast<size_t>(N * C), 0.0f),
      dwg(wg.size()), dwu(wu.size()), dwd(wd.size()), dlogits(static_cast<size_t>(N * E)), dwr(wr.size());
  kernels::moe_combine_backward(ctx, r, dy.data(), o.data(), C, drows.data(), dprob.data());
  kernels::grouped_gemm_dw(ctx, r.offsets.data(), E, C, F, drows.data(), a.data(), 0.0f, dwd.data());
  kernels::grouped_gemm_dx(ctx, r.offsets.data(), E, C, F, drows.data(), wd.data(), 0.0f, da.data());
  kernels::swiglu_backward(ctx, dg.data(), du.data(), da.data(), g.data(), u.data(), M * F);
  kernels::grouped_gemm_dw(ctx, r.offsets.data(), E, F, C, dg.data(), rows.data(), 0.0f, dwg.data());
  kernels::grouped_gemm_dw(ctx, r.offsets.data(), E, F, C, du.data(), rows.data(), 0.0f, dwu.data());
  kernels::grouped_gemm_dx(ctx, r.offsets.data(), E, F, C, dg.data(), wg.data(), 0.0f, dxrows.data());
  kernels::grouped_gemm_dx(ctx, r.offsets.data(), E, F, C, du.data(), wu.data(), 1.0f, dxrows.data());
  kernels::moe_scatter_add(ctx, r, dxrows.data(), C, dx.data());
  std::vector<double> aux_dscore(static_cast<size_t>(E));
  kernels::moe_aux_dscore(aux_coeff, r.routed.data(), N, E, k, 1.0, aux_dscore.data());
  kernels::moe_route_backward(logits.data(), r, score, dprob.data(), aux_dscore.data(), z_coeff / N, dlogits.data());
  kernels::gemm(ctx, false, false, N, C, E, 1.0f, dlogits.data(), E, wr.data(), C, 1.0f, dx.data(), C);
  kernels::gemm(ctx, true, false, E, C, N, 1.0f, dlogits.data(), E, x.data(), C, 0.0f, dwr.data(), C);

  // The bias after one update from this batch's loads.
  std::vector<float> bias_next = expert_bias;
  if (bias) kernels::moe_update_expert_bias(bias_next.data(), r.load.data(), E, bias_rate);

  std::vector<float> kept(r.kept.begin(), r.kept.end());
  const double losses[2] = {aux, z};
  std::vector<ckpt::TensorView> t = {
      {"x", DType::f32, {N, C}, x.data()},         {"router", DType::f32, {E, C}, wr.data()},
      {"gate", DType::f32, {E, F, C}, wg.data()},  {"up", DType::f32, {E, F, C}, wu.data()},
      {"down", DType::f32, {E, C, F}, wd.data()},  {"dy", DType::f32, {N, C}, dy.data()},
      {"y", DType::f32, {N, C}, y.data()},         {"expert", DType::i32, {N, k}, r.expert.data()},
      {"prob", DType::f32, {N, k}, r.prob.data()}, {"kept", DType::f32, {N, k}, kept.data()},
      {"losses", DType::f64, {2}, losses},          {"grad.x", DType::f32, {N, C}, dx.data()},
      {"grad.router", DType::f32, {E, C}, dwr.data()}, {"grad.gate", DType::f32, {E, F, C}, dwg.data()},
      {"grad.up", DType::f32, {E, F, C}, dwu.data()},  {"grad.down", DType::f32, {E, C, F}, dwd.data()}};
  if (bias) {
    t.push_back({"bias", DType::f32, {E}, expert_bias.data()});
    t.push_back({"bias_next", DType::f32, {E}, bias_next.data()});
  }
  const nlohmann::json meta = {{"score", score_name}, {"topk", k}, {"capacity", capacity}, {"drop", drop_name},
                               {"aux_coeff", aux_coeff}, {"z_coeff", z_coeff}, {"bias_rate", bias_rate},
                               {"groups", topk.num_groups}, {"group_topk", topk.group_topk},
                               {"scaling", topk.scaling_factor}};
  ckpt::write_safetensors(out, t, {{"config", meta.dump()}});
  return 0;
}
