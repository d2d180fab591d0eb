#include "claw/model/scratch.h"

#include <algorithm>

namespace claw::model {

void Scratch::layout(ArenaLayout& L, const ModelConfig& cfg, int64_t N, TpDims tp) {
  const int64_t C = cfg.hidden_size, HD = tp.heads(cfg) * cfg.head_dim(), GD = tp.kv_groups(cfg) * cfg.head_dim();
  tmp = L.take<float>("scratch.tmp", N * C);
  act = L.take<float>("scratch.act", N * std::max(tp.ffn(cfg), cfg.moe.shared_expert_intermediate_size / tp.size));
  dres = L.take<float>("scratch.dres", tp.rows(N) * C);
  dnorm = L.take<float>("scratch.dnorm", N * C);
  dq = L.take<float>("scratch.dq", N * HD);
  dk = L.take<float>("scratch.dk", N * GD);
  dv = L.take<float>("scratch.dv", N * GD);
  datt = L.take<float>("scratch.datt", N * HD);
  logits = L.take<float>("scratch.logits", logits_chunk(N) * tp.vocab_rows(cfg));
  if (cfg.moe.enabled()) {
    // R tokens on this rank, M = R k dispatched rows, Rin = M EP received.
    const int64_t R = tp.rows(N), M = R * cfg.moe.router_topk, Rin = M * tp.ep, C2 = cfg.hidden_size;
    moe_rows = L.take<float>("scratch.moe_rows", Rin * C2);
    moe_act = L.take<float>("scratch.moe_act", Rin * cfg.moe_ffn());
    moe_drows = L.take<float>("scratch.moe_drows", Rin * C2);
    if (cfg.moe.shared_expert_intermediate_size > 0) moe_shared = L.take<float>("scratch.moe_shared", N * C2);
    moe_dlogits = L.take<float>("scratch.moe_dlogits", R * cfg.moe.num_experts);
    moe_dprob = L.take<float>("scratch.moe_dprob", M);
    if (tp.sp()) moe_drouter = L.take<float>("scratch.moe_drouter", cfg.moe.num_experts * C2);
  }
  if (cfg.post_sublayer_norm) dpost = L.take<float>("scratch.dpost", tp.rows(N) * C);
  if (tp.sp()) {
    gathered = L.take<float>("scratch.gathered", N * C);
    dnorm_w = L.take<float>("scratch.dnorm_w", 2 * C);
  }
}

}  // namespace claw::model
