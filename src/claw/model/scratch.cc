#include "claw/model/scratch.h"

namespace claw::model {

void Scratch::layout(ArenaLayout& L, const ModelConfig& cfg, int64_t N) {
  const int64_t C = cfg.hidden_size, HD = cfg.num_attention_heads * cfg.head_dim(),
                GD = cfg.kv_heads() * cfg.head_dim();
  tmp = L.take<float>("scratch.tmp", N * C);
  act = L.take<float>("scratch.act", N * cfg.ffn());
  dres = L.take<float>("scratch.dres", N * C);
  dnorm = L.take<float>("scratch.dnorm", N * C);
  dq = L.take<float>("scratch.dq", N * HD);
  dk = L.take<float>("scratch.dk", N * GD);
  dv = L.take<float>("scratch.dv", N * GD);
  datt = L.take<float>("scratch.datt", N * HD);
  logits = L.take<float>("scratch.logits", logits_chunk(N) * cfg.padded_vocab_size());
}

}  // namespace claw::model
