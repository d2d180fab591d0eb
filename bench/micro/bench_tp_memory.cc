// Activation memory per rank under tensor (+ sequence) parallelism, from the
// arena plan (model::plan_activations, the function the trainer allocates
// with), against closed forms:
//   - claw's own accounting, term by term (fp32; what each layer saves):
//       rows held R = s b (TP only) or s b / t (with SP)
//       replicated region, per row: the two norm outputs, x_mid and the block
//         output (4h floats) plus the norms' statistics (mean + rstd, or rstd)
//       split region, per token: q, attention output (H/t heads each), k, v
//         (this rank's KV groups), the log-sum-exp (H/t), the MLP
//         pre-activations (F/t; gate and up for SwiGLU)
//   - Korthikanti et al. 2022, Table 2 (fp16 activations, 1-byte dropout
//     masks, softmax saved): sbh(34 + 5as/h), TP sbh(10 + 24/t + 5as/(ht)),
//     TP+SP sbh(34/t + 5as/(ht)); with selective recompute (no s^2 terms,
//     which claw's flash-style attention never stores either) 34, 10 + 24/t
//     and 34/t.
// Per transformer layer, plus the whole arena of one rank (embedding output,
// final norm, loss buffers and the shared scratch).
//
//   build/bin/bench_tp_memory [preset] [micro-batch] [seq-length]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "claw/model/gpt.h"

using namespace claw;
using namespace claw::model;

namespace {

int64_t layer_bytes(const ArenaPlan& plan) {
  int64_t sum = 0;
  for (const ArenaPlan::Entry& e : plan.entries())
    if (e.name.rfind("layers.0.", 0) == 0) sum += static_cast<int64_t>(e.bytes);
  return sum;
}

int64_t closed_form(const ModelConfig& c, int64_t s, int64_t b, TpDims tp) {
  const int64_t h = c.hidden_size, D = c.head_dim(), Hl = tp.heads(c), Gl = tp.kv_groups(c), Fl = tp.ffn(c);
  const int64_t stats = c.normalization == Norm::layernorm ? 2 : 1;
  const int64_t R = tp.rows(s * b);
  const int64_t per_row = 4 * h + 2 * stats;
  const int64_t per_token = 2 * Hl * D + 2 * Gl * D + Hl + Fl * (c.mlp == Mlp::swiglu ? 2 : 1);
  return 4 * (R * per_row + s * b * per_token);
}

// Korthikanti et al. 2022, Table 2, bytes per layer.
double korthikanti(const ModelConfig& c, int64_t s, int64_t b, int t, bool sp, bool selective) {
  const double sbh = double(s) * b * c.hidden_size;
  const double attn = selective ? 0.0 : 5.0 * c.num_attention_heads * s / c.hidden_size;
  if (t == 1) return sbh * (34 + attn);
  if (!sp) return sbh * (10 + 24.0 / t + attn / t);
  return sbh * (34.0 / t + attn / t);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string preset = argc > 1 ? argv[1] : "gpt2-124m";
  const int64_t b = argc > 2 ? std::atoll(argv[2]) : 1;
  const ModelConfig c = model_preset(preset);
  const int64_t s = argc > 3 ? std::atoll(argv[3]) : c.max_position_embeddings;
  std::printf("%s, micro-batch %lld x %lld tokens (s b h = %lld x %lld x %lld, a = %lld)\n\n", preset.c_str(),
              static_cast<long long>(b), static_cast<long long>(s), static_cast<long long>(s),
              static_cast<long long>(b), static_cast<long long>(c.hidden_size),
              static_cast<long long>(c.num_attention_heads));
  std::printf("| TP | SP | per layer, plan | claw closed form | vs TP 1 | Korthikanti (fp16) | vs TP 1 | "
              "Korthikanti selective | vs TP 1 | whole arena per rank |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  const double base_plan = double(layer_bytes(plan_activations(c, b, s)));
  const double base_k = korthikanti(c, s, b, 1, false, false), base_ks = korthikanti(c, s, b, 1, false, true);
  for (int t : {1, 2, 4})
    for (bool sp : {false, true}) {
      if (t == 1 && sp) continue;
      try {
        validate_tensor_parallel(c, t, sp, s);
      } catch (const std::exception& e) {
        std::printf("| %d | %s | refused: %s |\n", t, sp ? "yes" : "no", e.what());
        continue;
      }
      const TpDims tp{t, sp};
      ModelConfig one = c;
      const ArenaPlan plan = plan_activations(c, b, s, {}, tp);
      const int64_t got = layer_bytes(plan), want = closed_form(c, s, b, tp);
      const double k = korthikanti(c, s, b, t, sp, false), ks = korthikanti(c, s, b, t, sp, true);
      std::printf("| %d | %s | %.2f MiB | %.2f MiB%s | %.3f | %.2f MiB | %.3f | %.2f MiB | %.3f | %.1f MiB |\n", t,
                  sp ? "yes" : "no", got / 1048576.0, want / 1048576.0, got == want ? "" : " (differs)",
                  got / base_plan, k / 1048576.0, k / base_k, ks / 1048576.0, ks / base_ks,
                  plan.total() / 1048576.0);
    }
  return 0;
}
