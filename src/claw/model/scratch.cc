#include "claw/model/scratch.h"

namespace claw::model {

void Scratch::layout(ArenaLayout& L, const ModelConfig& cfg, int64_t N, TpDims tp) {
  const int64_t C = cfg.hidden_size, HD = tp.heads(cfg) * cfg.head_dim(), GD = tp.kv_groups(cfg) * cfg.head_dim();
  tmp = L.take<float>("scratch.tmp", N * C);
  act = L.take<float>("scratch.act", N * tp.ffn(cfg));
  dres = L.take<float>("scratch.dres", tp.rows(N) * C);
  dnorm = L.take<float>("scratch.dnorm", N * C);
  dq = L.take<float>("scratch.dq", N * HD);
  dk = L.take<float>("scratch.dk", N * GD);
  dv = L.take<float>("scratch.dv", N * GD);
  datt = L.take<float>("scratch.datt", N * HD);
  logits = L.take<float>("scratch.logits", logits_chunk(N) * tp.vocab_rows(cfg));
  if (tp.sp()) {
    gathered = L.take<float>("scratch.gathered", N * C);
    dnorm_w = L.take<float>("scratch.dnorm_w", 2 * C);
  }
}

}  // namespace claw::model
