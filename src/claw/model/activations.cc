// The activation plan of a GPT: the arenas a stage's forward saves for its
// backward (training) or reuses (inference), laid out by name.
#include "claw/model/gpt.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "claw/core/error.h"
#include "claw/kernels/cpu/bf16_gemm.h"
#include "claw/kernels/cpu/reduce.h"
#include "claw/model/tp_mappings.h"

namespace claw::model {

void Activations::layout(ArenaLayout& L, const ModelConfig& cfg, int64_t B, int64_t T, Recompute recompute,
                         TpDims tp, PipelineStage stage, const Activations* shared) {
  stage = stage.resolved(cfg);
  const int64_t N = B * T, R = tp.rows(N);
  input = L.take<float>(stage.pre_process ? "embedding.out" : "stage.input", R * cfg.hidden_size);
  if (recompute.layers > 0) {
    if (shared)
      recompute_region = shared->recompute_region;
    else
      recompute_region.layout_internal(L, "recompute", cfg, B, T, tp);
  }
  const bool pack = cfg.half_activations() && recompute.layers < stage.num_layers;
  if (pack) {
    if (shared)
      half_work = shared->half_work;
    else
      half_work.layout_internal(L, "half_work", cfg, B, T, tp);
  }
  // The large saved tensors a stored block keeps in bf16, by name within the block.
  const std::map<std::string, float*> to_pack = {
      {"input_norm.out", half_work.norm1.out}, {"attention.q", half_work.attn.q},
      {"attention.k", half_work.attn.k},       {"attention.v", half_work.attn.v},
      {"attention.out", half_work.attn.out},   {"x_mid", half_work.x_mid},
      {"post_attention_norm.out", half_work.norm2.out}, {"mlp.h", half_work.mlp.h},
      {"mlp.u", half_work.mlp.u},              {"mlp.experts.h", half_work.moe.h},
      {"mlp.experts.u", half_work.moe.u},      {"mlp.experts.out", half_work.moe.o}};
  blocks.resize(stage.num_layers);
  packed.assign(stage.num_layers, {});
  const float* x = input;
  for (int64_t k = 0; k < stage.num_layers; ++k) {
    const int64_t l = stage.first_layer + k;  // global index
    if (k < recompute.layers) {
      blocks[k] = recompute_region;
      blocks[k].out = L.take<float>("layers." + std::to_string(l) + ".out", R * cfg.hidden_size);
    } else if (pack) {
      // Those tensors point into the working region; each gets a bf16 copy here.
      const std::string p = "layers." + std::to_string(l) + ".";
      std::vector<PackedTensor>& list = packed[k];
      L.set_take_hook([&](const std::string& name, size_t bytes) -> std::optional<void*> {
        if (name.rfind(p, 0) != 0) return std::nullopt;
        const auto it = to_pack.find(name.substr(p.size()));
        if (it == to_pack.end()) return std::nullopt;
        const auto n = static_cast<int64_t>(bytes / sizeof(float));
        list.push_back({it->second, L.take<uint16_t>(name + ".half", n), n});
        return it->second;
      });
      blocks[k].layout(L, static_cast<int>(l), cfg, B, T, tp);
      L.set_take_hook(nullptr);
    } else {
      blocks[k].layout(L, static_cast<int>(l), cfg, B, T, tp);
    }
    blocks[k].x = x;
    x = blocks[k].out;
  }
  if (stage.post_process) {
    final_norm.layout(L, "final_norm", cfg, R);
    output.layout(L, cfg, N);
  }
  if (shared)
    scratch = shared->scratch;
  else
    scratch.layout(L, cfg, N, tp);
}

void Activations::layout_inference(ArenaLayout& L, const ModelConfig& cfg, int64_t B, int64_t T, TpDims tp) {
  const int64_t R = tp.rows(B * T);
  input = L.take<float>("embedding.out", R * cfg.hidden_size);
  recompute_region.layout_internal(L, "block", cfg, B, T, tp);
  float* outs[2] = {L.take<float>("block.out0", R * cfg.hidden_size), L.take<float>("block.out1", R * cfg.hidden_size)};
  blocks.assign(cfg.num_layers, recompute_region);
  const float* x = input;
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    blocks[l].x = x;
    blocks[l].out = outs[l % 2];
    x = blocks[l].out;
  }
  final_norm.layout(L, "final_norm", cfg, R);
  scratch.layout(L, cfg, B * T, tp);
}

ArenaPlan plan_activations(const ModelConfig& cfg, int64_t B, int64_t T, Recompute recompute, TpDims tp,
                           PipelineStage stage, int slots) {
  ArenaPlan plan("activations");
  ArenaLayout L = ArenaLayout::planning(plan);
  Activations first;
  first.layout(L, cfg, B, T, recompute, tp, stage);
  for (int k = 1; k < slots; ++k) {
    L.set_prefix("slot" + std::to_string(k) + ".");
    Activations a;
    a.layout(L, cfg, B, T, recompute, tp, stage, &first);
  }
  return plan;
}

}  // namespace claw::model
