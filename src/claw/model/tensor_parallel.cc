#include "claw/model/tensor_parallel.h"

#include "claw/core/error.h"
#include "claw/model/tp_mappings.h"

namespace claw::model {

void validate_tensor_parallel(const ModelConfig& cfg, int tp, bool sequence_parallel, int64_t seq_length) {
  if (tp < 1) fail("--tensor-model-parallel-size must be at least 1, got {}", tp);
  if (sequence_parallel && tp == 1)
    fail("--sequence-parallel needs --tensor-model-parallel-size > 1 (it splits the sequence over the "
         "tensor-parallel ranks); drop --sequence-parallel or raise --tensor-model-parallel-size");
  if (tp == 1) return;
  const int64_t H = cfg.num_attention_heads, G = cfg.kv_heads(), F = cfg.ffn();
  if (H % tp != 0)
    fail("--tensor-model-parallel-size {} does not divide --num-attention-heads {}: each tensor-parallel rank holds "
         "whole attention heads; use a size that divides {}",
         tp, H, H);
  if (G % tp != 0 && tp % G != 0)
    fail("--tensor-model-parallel-size {} and --num-query-groups {} do not divide one another: each rank holds "
         "G/TP key/value groups, or one group replicated on TP/G ranks; use a size that divides {} or a multiple "
         "of it",
         tp, G, G);
  if (F % tp != 0)
    fail("--tensor-model-parallel-size {} does not divide --ffn-hidden-size {}: the MLP's columns are split "
         "evenly over the tensor-parallel ranks",
         tp, F);
  if (sequence_parallel && seq_length > 0) check_sequence_split(seq_length, tp);
}

std::vector<std::vector<int>> kv_replica_sets(int tp, int64_t kv_heads) {
  const int per = kv_heads >= tp ? 1 : tp / static_cast<int>(kv_heads);
  std::vector<std::vector<int>> sets;
  for (int r = 0; r < tp; r += per) {
    sets.emplace_back();
    for (int k = 0; k < per; ++k) sets.back().push_back(r + k);
  }
  return sets;
}

const float* TensorParallel::gather_rows(float* full, const float* x, int64_t B, int64_t T, int64_t C) const {
  if (!sp()) return x;
  gather_from_sp_forward(*group, full, x, B, T, C);
  return full;
}

void TensorParallel::reduce_rows(float* y, int64_t B, int64_t T, int64_t C) const {
  if (size() == 1) return;
  if (sp())
    reduce_scatter_to_sp_forward(*group, y, y, B, T, C);
  else
    reduce_from_tp_forward(*group, y, y, B * T * C);
}

void validate_moe_layout(const ModelConfig& cfg, int tp, int ep, int etp, bool sequence_parallel) {
  if (!cfg.moe.enabled()) {
    if (ep > 1) fail("--expert-model-parallel-size {} needs a Mixture-of-Experts model (--num-experts)", ep);
    return;
  }
  if (cfg.moe.num_experts % ep != 0)
    fail("--expert-model-parallel-size {} must divide --num-experts {} (each expert-parallel rank holds "
         "num-experts / EP experts)",
         ep, cfg.moe.num_experts);
  if (etp != 1)
    fail("--expert-tensor-parallel-size {}: experts run whole on each rank for now; add "
         "--expert-tensor-parallel-size 1 (its default is --tensor-model-parallel-size)",
         etp);
  if (tp > 1 && !sequence_parallel)
    fail("--num-experts with --tensor-model-parallel-size {} needs --sequence-parallel (each TP rank routes its own "
         "tokens)",
         tp);
}

TpGroups make_tensor_parallel(comm::World& world, comm::ParallelState& ps, const ModelConfig& cfg,
                              bool sequence_parallel) {
  const int tp = ps.grid().tp;
  validate_tensor_parallel(cfg, tp, sequence_parallel);
  std::vector<std::vector<int>> lists;
  for (const std::vector<int>& group : ps.grid().groups("tp"))
    for (const std::vector<int>& set : kv_replica_sets(tp, cfg.kv_heads())) {
      lists.emplace_back();
      for (int position : set) lists.back().push_back(group[position]);
    }
  TpGroups g;
  g.kv = world.split("tp_kv", lists);
  g.tp = {.group = &ps.tp(), .kv_group = g.kv.get(), .sequence_parallel = sequence_parallel};
  const comm::RankGrid& grid = ps.grid();
  if (cfg.moe.enabled()) {
    if (grid.ep > 1) g.tp.ep = &ps.ep();
    g.tp.expert_region = grid.ep > 1 || grid.etp != grid.tp;
  }
  if ((cfg.moe.enabled() || cfg.fp8.enabled()) && (grid.tp > 1 || grid.cp > 1)) {
    g.moe_tokens = world.split("moe_tokens", grid.groups("tp-cp"));
    g.tp.moe_tokens = g.moe_tokens.get();
  }
  return g;
}

}  // namespace claw::model
