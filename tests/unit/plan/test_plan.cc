// The planner: memory formulas on hand-worked cases, the memory model equal
// to a real model's allocation, cost-model identities, the search (a model
// that fits only at TP 8 x PP 4 is found; an impossible request says what is
// missing) and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "claw/comm/group.h"
#include "claw/core/error.h"
#include "claw/model/gpt.h"
#include "claw/optim/adamw.h"
#include "claw/parallel/data_parallel.h"
#include "claw/plan/search.h"

namespace claw::plan {
namespace {

constexpr double GiB = 1024.0 * 1024.0 * 1024.0;

Job job_of(const std::string& preset, int64_t seq, int64_t gbs) {
  return {.model = model::model_preset(preset), .seq_length = seq, .global_batch_size = gbs};
}

Cluster cluster_of(const std::string& device, int n) {
  Cluster c;
  c.device = Catalog::builtin().device(device);
  c.num_devices = n;
  c.devices_per_node = c.device.devices_per_node;
  return c;
}

// GPT-2 124M with the vocabulary padded to 50304: wte 50304 x 768 + wpe 1024 x 768 + 12 blocks of
// 7,087,872 (ln 1536, qkv 768 x 2304 + 2304, proj 768 x 768 + 768, ln 1536, fc 768 x 3072 + 3072,
// proj 3072 x 768 + 768) + final ln 1536.
constexpr int64_t kGpt2Params = 50304 * 768 + 1024 * 768 + 12 * 7'087'872 + 1536;

TEST(PlanMemory, Gpt2ParametersGradientsAndAdamStateByHand) {
  ASSERT_EQ(kGpt2Params, 124'475'904);
  const Job job = job_of("gpt2-124m", 1024, 8);
  const StageMemory fp32 = stage_memory(job, Layout{}, 0, precision("fp32"));
  EXPECT_EQ(fp32.param_elements, kGpt2Params);
  EXPECT_EQ(fp32.arenas.values, kGpt2Params * 4);      // every tensor is a multiple of 16 floats
  EXPECT_EQ(fp32.arenas.grads, kGpt2Params * 4);
  EXPECT_EQ(fp32.arenas.optimizer, kGpt2Params * 8);   // exp_avg + exp_avg_sq
  // Megatron's mixed precision: 2 (bf16 weight) + 4 (fp32 main grad) + 12 (master + moments) bytes.
  const StageMemory bf16 = stage_memory(job, Layout{}, 0, precision("bf16"));
  EXPECT_DOUBLE_EQ(bf16.params + bf16.grads + bf16.optimizer, 18.0 * kGpt2Params);
  // The distributed optimizer over DP 8 shards the 12: 6 + 12 / 8 bytes per parameter (Megatron's
  // docs/distrib_optimizer.md table), up to the 16-float alignment of each shard's segments.
  Layout z1;
  z1.dp = 8;
  z1.zero_stage = 1;
  const StageMemory s = stage_memory(job, z1, 0, precision("bf16"));
  EXPECT_DOUBLE_EQ(s.params + s.grads, 6.0 * kGpt2Params);
  EXPECT_NEAR(s.optimizer, 12.0 * kGpt2Params / 8, 12.0 * 16 * 150);
  // ZeRO-3 shards the weights and gradients too: (2 + 4 + 12) / 8, plus the gathered units.
  Layout z3 = z1;
  z3.zero_stage = 3;
  const StageMemory s3 = stage_memory(job, z3, 0, precision("bf16"));
  EXPECT_NEAR(s3.params + s3.grads + s3.optimizer, 18.0 * kGpt2Params / 8, 18.0 * 16 * 150);
  EXPECT_GT(s3.zero_buffers, 0);
}

// The families' published sizes: each preset's parameters are its model
// card's count, the closed form of its shape (Llama's layers; Qwen 2.5 adds
// q/k/v biases, Qwen 3 the q/k norms' weights and a head dimension of its
// own), and the planner's fp32 weights, gradients and AdamW state
// are 4, 4 and 8 bytes of each. A sliding window caps the attention FLOPs'
// sequence length at the window.
TEST(PlanMemory, FamilyPresetsHoldTheirPublishedParameterCounts) {
  const auto closed_form = [](int64_t L, int64_t C, int64_t H, int64_t G, int64_t F, int64_t V, bool qkv_bias,
                              int64_t D = 0, bool qk_norm = false) {
    D = D > 0 ? D : C / H;
    const int64_t attn =
        C * H * D + 2 * C * G * D + H * D * C + (qkv_bias ? H * D + 2 * G * D : 0) + (qk_norm ? 2 * D : 0);
    return 2 * V * C + L * (attn + 3 * C * F + 2 * C) + C;  // untied embeddings and head, final norm
  };
  const struct {
    const char* preset;
    int64_t published, closed;
  } cases[] = {
      {"qwen2.5-7b", 7'615'616'512, closed_form(28, 3584, 28, 4, 18944, 152064, true)},
      {"qwen2.5-72b", 72'706'203'648, closed_form(80, 8192, 64, 8, 29568, 152064, true)},
      {"qwen3-8b", 8'190'735'360, closed_form(36, 4096, 32, 8, 12288, 151936, false, 128, true)},
      {"qwen3-32b", 32'762'123'264, closed_form(64, 5120, 64, 8, 25600, 151936, false, 128, true)},
      {"mistral-7b", 7'241'732'096, closed_form(32, 4096, 32, 8, 14336, 32000, false)},
      {"phi-3-mini", 3'821'079'552, closed_form(32, 3072, 32, 32, 8192, 32064, false)},
      // Gemma: tied embeddings (one V x C less) and four norms a layer (2 C more).
      {"gemma-2-9b", 9'241'705'984, closed_form(42, 3584, 16, 8, 14336, 256000, false, 256) - 256000 * 3584 + 42 * 2 * 3584},
      {"gemma-2-27b", 27'227'128'320,
       closed_form(46, 4608, 32, 16, 36864, 256000, false, 128) - 256000 * 4608 + 46 * 2 * 4608},
      // Gemma 3 27B's text model (the model card's 27.4B adds the vision tower).
      {"gemma-3-27b", 27'009'346'304,
       closed_form(62, 5376, 32, 16, 21504, 262208, false, 128, true) - 262208 * 5376 + 62 * 2 * 5376},
      // OLMo 2 7B: two norms a layer (after the sublayers, none before) and q/k norms over the full
      // width, 32 x 128 + 32 x 128 per layer.
      {"olmo-2-7b", 7'298'617'344, closed_form(32, 4096, 32, 32, 11008, 100352, false) + 32 * (4096 + 4096)},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(c.closed, c.published) << c.preset;
    const Job job = job_of(c.preset, 4096, 8);
    EXPECT_EQ(job.model.num_params(), c.published) << c.preset;
    const StageMemory m = stage_memory(job, Layout{}, 0, precision("fp32"));
    EXPECT_EQ(m.param_elements, c.published) << c.preset;
    EXPECT_EQ(m.arenas.values, 4 * c.published) << c.preset;
    EXPECT_EQ(m.arenas.grads, 4 * c.published) << c.preset;
    EXPECT_EQ(m.arenas.optimizer, 8 * c.published) << c.preset;
  }
  // Qwen3-235B-A22B: 94 layers of Qwen 3 attention (heads of 128, q/k norms)
  // and 128 experts of 3 x 4096 x 1536 plus the router; 8 experts run per
  // token, the "A22B": 22.2B active.
  const model::ModelConfig moe = model::model_preset("qwen3-235b-a22b");
  const int64_t moe_attn = 4096 * 64 * 128 * 2 + 2 * 4096 * 4 * 128 + 2 * 128, expert = 3 * 4096 * 1536;
  const int64_t layer = moe_attn + 2 * 4096 + 128 * 4096 + 128 * expert;
  EXPECT_EQ(moe.num_params(), 2 * 151936 * 4096 + 94 * layer + 4096);
  EXPECT_EQ(moe.num_params(), 235'093'634'560);
  EXPECT_EQ(moe.num_params() - 94 * (128 - 8) * expert, 22'190'763'520);
  const StageMemory mm = stage_memory(job_of("qwen3-235b-a22b", 4096, 8), Layout{}, 0, precision("fp32"));
  EXPECT_EQ(mm.param_elements, moe.num_params());
  // DeepSeek-V3: 61 layers of multi-head latent attention (q through a
  // 1536 latent, keys and values from a 512 one, heads of 128 + 64 rotated,
  // values of 128), 3 dense layers, 58 of 256 experts of 3 x 7168 x 2048
  // with a router, its bias and one shared expert: 671.0B, 37.5B of them
  // run per token. The caches hold its absorbed form's latent, 512 + 64
  // values per token and layer (key and value at once), not 2 x 128 x 192.
  const model::ModelConfig v3 = model::model_preset("deepseek-v3");
  const int64_t C = 7168, mla = C * 1536 + 1536 + 1536 * 128 * 192 + C * 576 + 512 + 512 * 128 * 256 + 128 * 128 * C;
  const int64_t ds_expert = 3 * C * 2048, dense_layer = mla + 2 * C + 3 * C * 18432,
                moe_layer = mla + 2 * C + 256 * C + 256 + 257 * ds_expert;
  EXPECT_EQ(v3.num_params(), 2 * 129280 * C + 3 * dense_layer + 58 * moe_layer + C);
  EXPECT_EQ(v3.num_params(), 671'026'419'200);
  EXPECT_EQ(v3.num_params() - 58 * (256 - 8) * ds_expert - 58 * 256, 37'552'282'624);
  const StageMemory dm = stage_memory(job_of("deepseek-v3", 4096, 8), Layout{}, 0, precision("fp32"));
  EXPECT_EQ(dm.param_elements, v3.num_params());
  EXPECT_EQ(model::TpDims{.size = 8}.cache_groups(v3) * v3.cache_head_dim(), 512 + 64);
  const model::ModelConfig mistral = model::model_preset("mistral-7b");
  const double attn = 12.0 * 32 * 32 * 128;  // 12 L H Q
  EXPECT_DOUBLE_EQ(mistral.flops_per_token(16384) - mistral.flops_per_token(4096), 0.0);
  EXPECT_DOUBLE_EQ(mistral.flops_per_token(4096) - mistral.flops_per_token(2048), attn * 2048);
}

// --freeze: the frozen parameters keep their values but lose their gradients
// and AdamW moments, exactly their elements' share of both.
TEST(PlanMemory, FrozenParametersDropTheirGradientsAndOptimizerState) {
  Job job = job_of("gpt2-124m", 1024, 8);
  job.freeze = {"embedding.*", "layers.*.attention.*"};
  // Frozen elements: wte + wpe + 12 x (qkv 768 x 2304 + 2304 + proj 768 x 768 + 768), each a multiple of 16.
  constexpr int64_t kFrozen = 50304 * 768 + 1024 * 768 + 12 * (768 * 2304 + 2304 + 768 * 768 + 768);
  int64_t counted = 0;
  model::GPT shape(job.model, {.allocate = false});
  for (const model::Param* p : shape.store().params())
    if (model::matches_any(job.freeze, p->spec.name)) counted += p->spec.local_shape().numel();
  ASSERT_EQ(counted, kFrozen);
  const StageMemory all = stage_memory(job_of("gpt2-124m", 1024, 8), Layout{}, 0, precision("fp32"));
  const StageMemory part = stage_memory(job, Layout{}, 0, precision("fp32"));
  EXPECT_EQ(part.param_elements, kGpt2Params);
  EXPECT_EQ(part.frozen_elements, kFrozen);
  EXPECT_EQ(part.arenas.values, all.arenas.values);
  EXPECT_EQ(all.arenas.grads - part.arenas.grads, kFrozen * 4);
  EXPECT_EQ(all.arenas.optimizer - part.arenas.optimizer, kFrozen * 8);
  EXPECT_EQ(part.arenas.activations, all.arenas.activations);
  // Under ZeRO the two regions (trainable, frozen) are each padded to 16 x DP
  // floats and split over DP: gradients and moments 1/8 of the trainable
  // ones, values 1/8 of both regions under ZeRO-3.
  const auto padded = [](int64_t n) { return (n + 127) / 128 * 128; };
  Layout z3;
  z3.dp = 8;
  z3.zero_stage = 3;
  const StageMemory s3 = stage_memory(job, z3, 0, precision("fp32"));
  EXPECT_EQ(s3.arenas.values, (padded(kGpt2Params - kFrozen) + padded(kFrozen)) / 8 * 4);
  EXPECT_EQ(s3.arenas.grads, padded(kGpt2Params - kFrozen) / 8 * 4);
  EXPECT_NEAR(static_cast<double>(s3.arenas.optimizer), (kGpt2Params - kFrozen) / 8.0 * 8, 8.0 * 16 * 150);
  EXPECT_NE(describe(s3).find("frozen"), std::string::npos) << describe(s3);
}

TEST(PlanMemory, TensorAndSequenceParallelActivationsFollowKorthikanti) {
  // Per-layer saved activations divide by t with TP + SP (Korthikanti et al. 2022, Table 2), so the
  // stored blocks of a 12-layer model scale by 1/t; the shared scratch does not need to.
  const Job job = job_of("gpt2-124m", 1024, 8);
  Layout l1, l4;
  l4.tp = 4;
  l4.sequence_parallel = true;
  const StageMemory a = stage_memory(job, l1, 0, precision("fp32"));
  const StageMemory b = stage_memory(job, l4, 0, precision("fp32"));
  EXPECT_LT(b.arenas.activations, a.arenas.activations / 3);
  // Parameters of one TP-4 rank by hand: the vocabulary padded to a multiple of 128 x 4 = 50688, 12672 rows
  // of it; positions and norms replicated; per block ln 1536 + qkv 768 x 576 + 576 + proj 192 x 768 + 768
  // (bias replicated) + ln 1536 + fc 768 x 768 + 768 + proj 768 x 768 + 768 = 1,775,424; final ln 1536.
  EXPECT_EQ(b.param_elements, 12672 * 768 + 1024 * 768 + 12 * 1'775'424 + 1536);
}

TEST(PlanMemory, PipelineStagesHoldTheSchedulesInFlightMicroBatches) {
  // 1F1B: stage s holds min(p - s, m) micro-batches (Narayanan et al. 2021, 2.2.1); GPipe all m.
  const Job job = job_of("gpt2-124m", 256, 8);
  Layout l;
  l.pp = 4;
  for (int s = 0; s < 4; ++s) EXPECT_EQ(stage_memory(job, l, s, precision("fp32")).slots, std::vector<int>{4 - s});
  l.schedule = parallel::ScheduleKind::gpipe;
  EXPECT_EQ(stage_memory(job, l, 0, precision("fp32")).slots, std::vector<int>{8});
  // Interleaved with 3 chunks of 1 layer: Megatron's warm-up (p - s - 1) x 2 + (v - 1) p + 1 on stage 0, spread
  // over the chunks.
  l.schedule = parallel::ScheduleKind::interleaved;
  l.virtual_stages = 3;
  const StageMemory il = stage_memory(job, l, 0, precision("fp32"));
  ASSERT_EQ(il.slots.size(), 3u);
  // Stage 0 of the pipeline (embedding + 3 layers, 4 micro-batches in flight) needs more activation
  // memory than the last (3 layers and the head, 1 micro-batch), and peak_memory finds it.
  l = Layout{};
  l.pp = 4;
  const StageMemory first = stage_memory(job, l, 0, precision("fp32"));
  const StageMemory last = stage_memory(job, l, 3, precision("fp32"));
  EXPECT_GT(first.arenas.activations, 3 * last.arenas.activations / 2);
  EXPECT_EQ(peak_memory(job, l, precision("fp32")).stage, first.total() > last.total() ? 0 : 3);
}

TEST(PlanMemory, EqualsTheAllocationOfARealModel) {
  // The trainer checks this on every run; here in-process on a one-rank model with recompute, at ZeRO-0
  // and ZeRO-3, with and without frozen parameters.
  for (const std::vector<std::string>& freeze :
       {std::vector<std::string>{}, std::vector<std::string>{"embedding.*", "layers.[02].*", "final_norm.*"}})
    for (int stage : {0, 3}) {
      Job job = job_of("llama-tiny", 64, 4);
      job.freeze = freeze;
      Layout l;
      l.micro_batch_size = 2;
      l.recompute_num_layers = 2;
      l.zero_stage = stage;
      const StageMemory planned = stage_memory(job, l, 0, precision("fp32"));
      model::StoreOptions storage = parallel::store_options(stage, 1, 0);
      storage.freeze = freeze;
      model::GPT gpt(job.model, storage);
      comm::SelfGroup dp("dp");
      parallel::DataParallel engine(gpt, dp, {.zero_stage = stage});
      gpt.reserve(2, 64, model::Recompute{2});
      optim::AdamW adam(engine.segments(), {});
      SCOPED_TRACE(testing::Message() << "ZeRO-" << stage << ", " << freeze.size() << " freeze patterns");
      EXPECT_EQ(planned.arenas.values, gpt.store().value_bytes());
      EXPECT_EQ(planned.arenas.grads, gpt.store().grad_bytes());
      EXPECT_EQ(planned.arenas.optimizer, adam.state_bytes());
      EXPECT_EQ(planned.arenas.gathered, engine.memory().gather_slots);
      EXPECT_EQ(planned.arenas.staging, engine.memory().staging_slots);
      EXPECT_EQ(planned.arenas.activations, gpt.activation_bytes());
      EXPECT_EQ(planned.frozen_elements, gpt.store().frozen_numel());
      if (!freeze.empty()) {
        EXPECT_LT(gpt.store().grad_bytes(), gpt.store().value_bytes() / 2);
      }
    }
}

TEST(PlanCost, FlopsAndMfuAreConsistent) {
  const Job job = job_of("llama3-8b", 8192, 128);
  const Cluster c = cluster_of("h100", 64);
  Layout l;
  l.tp = 2;
  l.sequence_parallel = true;
  l.dp = 32;
  l.zero_stage = 1;
  l.overlap_grad_reduce = true;
  const Estimate e = estimate(job, l, c, precision("bf16"));
  const double tokens = 128.0 * 8192;
  EXPECT_NEAR(e.tokens_per_s, tokens / e.time.total, 1e-6 * e.tokens_per_s);
  EXPECT_NEAR(e.model_tflops_per_device * 1e12 * 64 * e.time.total, model_flops_per_step(job), 1e-6 * model_flops_per_step(job));
  EXPECT_NEAR(e.mfu, e.model_tflops_per_device / 989.4, 1e-9);
  EXPECT_DOUBLE_EQ(e.hardware_tflops_per_device, e.model_tflops_per_device);  // no recompute
  // Full recompute: hardware FLOPs add one forward of the blocks, about a third of the model's
  // (Narayanan et al. 2021, eq. 3: 96 vs 72 B s l h^2 without the LM head).
  l.recompute_num_layers = job.model.num_layers;
  const Estimate r = estimate(job, l, c, precision("bf16"));
  EXPECT_GT(r.hardware_tflops_per_device / r.model_tflops_per_device, 1.28);
  EXPECT_LT(r.hardware_tflops_per_device / r.model_tflops_per_device, 4.0 / 3);
  EXPECT_GT(r.time.total, e.time.total);
  EXPECT_LT(r.memory.activations, e.memory.activations / 4);
}

TEST(PlanCost, PipelineBubbleComesFromTheSchedule) {
  // Equal stages (the head is small next to 8 llama-70B layers): the simulated idle time of 1F1B is about
  // (p - 1) / (m + p - 1) of the step, and interleaving with v chunks divides the bubble by about v.
  const Job job = job_of("llama3-70b", 4096, 64);
  const Cluster c = cluster_of("h100", 64);
  Layout l;
  l.tp = 8;
  l.sequence_parallel = true;
  l.pp = 8;
  l.dp = 1;
  const Estimate e = estimate(job, l, c, precision("bf16"));
  const double m = 64, p = 8;
  const double pipeline = e.time.total - e.time.dp_comm - e.time.optimizer;
  EXPECT_NEAR(e.time.bubble / pipeline, (p - 1) / (m + p - 1), 0.02);
  l.virtual_stages = 2;
  l.schedule = parallel::ScheduleKind::interleaved;
  const Estimate v = estimate(job, l, c, precision("bf16"));
  EXPECT_NEAR(v.time.bubble / e.time.bubble, 0.5, 0.1);
}

TEST(PlanCost, DataCentresAddTheInterDcLinkToTheReduction) {
  const Job job = job_of("llama3-8b", 4096, 256);
  Cluster one = cluster_of("h100", 128);
  Cluster two = one;
  two.data_centers = 2;
  two.inter_dc_bandwidth = 400e9 / 8;  // 400 Gbit/s shared by a data centre's 64 ranks
  two.inter_dc_rtt = 21e-3;
  Layout l;
  l.tp = 2;
  l.sequence_parallel = true;
  l.dp = 64;
  l.zero_stage = 1;
  const Estimate a = estimate(job, l, one, precision("bf16"));
  const Estimate b = estimate(job, l, two, precision("bf16"));
  // Hierarchical: each rank sends 2 (n-1)/n of its 1/32 shard of the gradients over the shared link,
  // and the ring pays one RTT per step.
  const double grads = static_cast<double>(b.memory.param_elements) * 4;
  const double inter = 64 * (grads / 32) / two.inter_dc_bandwidth + 21e-3;
  EXPECT_GT(b.time.dp_comm_total - a.time.dp_comm_total, 0.9 * inter);
  EXPECT_LT(b.time.dp_comm_total - a.time.dp_comm_total, 1.1 * inter + 1e-3);
  two.inter_dc_bandwidth *= 4;
  EXPECT_LT(estimate(job, l, two, precision("bf16")).time.dp_comm_total, b.time.dp_comm_total);
}

// The advice across data centres: hierarchical reduction when it keeps 90%
// of one data centre's step, else the smallest DiLoCo H (10, 50, 100, 500)
// that keeps 95% with the long haul once per H steps.
TEST(PlanCost, DataCentreAdviceChoosesHierarchicalOrDiloco) {
  Cluster c = cluster_of("h100", 16);
  c.data_centers = 2;
  c.inter_dc_bandwidth = 10e9 / 8;
  c.inter_dc_rtt = 21e-3;
  Estimate e;
  e.time.total = 1.0;
  e.time.inter_dc = 0.5;
  e.time.dp_comm = 0.05;  // the long haul hides behind backward but for 50 ms
  DataCenterAdvice a = advise_data_centers(e, c);
  EXPECT_DOUBLE_EQ(a.one_dc_step, 0.95);
  EXPECT_EQ(a.diloco_inner_steps, 0);
  EXPECT_NE(a.summary.find("--data-centers 2 --overlap-grad-reduce"), std::string::npos) << a.summary;
  e.time.dp_comm = 0.3;  // exposed: 70% of one data centre's throughput
  a = advise_data_centers(e, c);
  EXPECT_DOUBLE_EQ(a.one_dc_step, 0.7);
  // H = 10: 0.7 / (0.7 + 0.05) = 93% < 95%; H = 50: 0.7 / 0.71 = 98.6%.
  EXPECT_EQ(a.diloco_inner_steps, 50);
  EXPECT_NEAR(a.diloco_fraction, 0.7 / 0.71, 1e-12);
  EXPECT_NE(a.summary.find("--diloco-inner-steps 50"), std::string::npos) << a.summary;
  EXPECT_NE(a.summary.find("21 ms round trip, 10 Gbit/s"), std::string::npos) << a.summary;
}

// The ways across data centres for one layout: flat data parallelism's ring
// sends over twice the hierarchical bytes across,
// overlap hides part of the hierarchical reduction, DiLoCo pays the long
// haul once per H steps (less with packed deltas), and one data centre pays
// none of it.
TEST(PlanCost, DataCentreStrategiesOrderAsTheirLongHaulBytes) {
  const Job job = job_of("gpt2-124m", 1024, 64);
  Cluster c = cluster_of("h100", 16);
  c.data_centers = 2;
  c.inter_dc_bandwidth = 10e9 / 8;
  c.inter_dc_rtt = 21e-3;
  Layout l;
  l.dp = 16;
  l.zero_stage = 1;
  l.micro_batch_size = 4;
  const DataCenterStrategies s = data_center_strategies(job, l, c, precision("bf16"), {10, 100}, 32);
  const DataCenterStrategies s4 = data_center_strategies(job, l, c, precision("bf16"), {10, 100}, 4);
  EXPECT_LT(s.one_dc, s.hierarchical_overlapped);
  EXPECT_LE(s.hierarchical_overlapped, s.hierarchical);
  EXPECT_LT(s.hierarchical, s.flat);
  // Flat: 8 ranks per centre each send their whole gradient (hierarchical: 1/8 of it) each way.
  const double grads = static_cast<double>(estimate(job, l, c, precision("bf16")).memory.param_elements) * 4;
  Layout h = l;
  h.instances = 2;
  h.overlap_grad_reduce = false;
  const Estimate hier = estimate(job, h, c, precision("bf16"));
  EXPECT_NEAR(hier.time.inter_dc, 8 * grads / 8 / c.inter_dc_bandwidth + 21e-3, 1e-9);
  // Flat: claw's ring over the 16 ranks, by centre: a centre's last rank sends 15/16 of the buffer across per
  // pass, two passes of gradients (all-reduce) and one of ZeRO-1's parameters (all-gather), each pass's chunks
  // waiting 15 x 2 / 16 one-way delays.
  h.flat_across_data_centers = true;
  const Precision bf16 = precision("bf16");
  const double elems = static_cast<double>(estimate(job, l, c, bf16).memory.param_elements);
  const double flat_bytes = 15.0 / 16 * (2 * elems * bf16.grad_bytes + elems * bf16.param_bytes);
  EXPECT_NEAR(estimate(job, h, c, bf16).time.inter_dc,
              flat_bytes / c.inter_dc_bandwidth + 3 * 15.0 * 2 / 16 * 21e-3 / 2, 1e-9);
  EXPECT_GT(flat_bytes, 2 * 8 * grads / 8);  // over twice the hierarchical bytes
  ASSERT_EQ(s.diloco.size(), 2u);
  EXPECT_GT(s.diloco[0].second, s.diloco[1].second);  // H = 10 pays the haul more often than H = 100
  EXPECT_LT(s.diloco[1].second, s.hierarchical_overlapped);
  EXPECT_LT(s4.diloco[0].second, s.diloco[0].second);  // 4-bit deltas: (4 + 1/4) / 32 of the bytes
  h.flat_across_data_centers = false;
  h.overlap_grad_reduce = true;
  h.diloco_inner_steps = 10;
  const double outer32 = estimate(job, h, c, precision("bf16")).time.inter_dc;
  h.diloco_delta_bits = 4;
  EXPECT_NEAR(estimate(job, h, c, precision("bf16")).time.inter_dc / outer32,
              (8 * grads / 8 / c.inter_dc_bandwidth * 4.25 / 32 + 21e-3) / (8 * grads / 8 / c.inter_dc_bandwidth + 21e-3),
              1e-9);
}

// --overlap-grad-reduce hides only what the buckets let it (ZeRO 0-1): a
// bucket's reduction starts once backward has run its last unit, and a tied
// embedding's gradient is complete only at the end. gpt2-tiny is 79%
// embedding: one default bucket hides nothing, 1M-element buckets a little;
// gpt2-124m (31% embedding) hides more with them, never past the backward.
TEST(PlanCost, OverlapHidesOnlyWhatBucketsLet) {
  Cluster c = cluster_of("cpu", 4);
  c.devices_per_node = 1;
  const auto exposed = [&](const Job& job, bool overlap, int64_t bucket) {  // ZeRO-0: no parameter gather
    Layout l;
    l.dp = 4;
    l.overlap_grad_reduce = overlap;
    l.ddp_bucket_size = bucket;
    return estimate(job, l, c, precision("fp32")).time.dp_comm;
  };
  const Job tiny = job_of("gpt2-tiny", 128, 8), gpt2 = job_of("gpt2-124m", 256, 32);
  EXPECT_DOUBLE_EQ(exposed(tiny, true, 0), exposed(tiny, false, 0));
  EXPECT_LT(exposed(tiny, true, 1'000'000), exposed(tiny, false, 0));
  EXPECT_GT(exposed(tiny, true, 1'000'000), 0.7 * exposed(tiny, false, 0));
  EXPECT_LT(exposed(gpt2, true, 8'000'000), exposed(gpt2, true, 0));
  EXPECT_GT(exposed(gpt2, true, 8'000'000), 0.25 * exposed(gpt2, false, 0));
}

// CPU ranks that share their cores with the TCP stack: the bytes a rank
// sends between nodes cost compute time (Device::network_cpu_s_per_byte),
// none inside a node.
TEST(PlanCost, NetworkBytesCostCpuRanksComputeTime) {
  const Job job = job_of("gpt2-124m", 256, 8);
  Cluster c = cluster_of("cpu", 4);
  c.devices_per_node = 1;
  Layout l;
  l.dp = 4;
  l.zero_stage = 1;
  l.micro_batch_size = 2;
  const Estimate base = estimate(job, l, c, precision("fp32"));
  EXPECT_EQ(base.time.network_cpu, 0);
  c.device.network_cpu_s_per_byte = 2e-9;
  const Estimate e = estimate(job, l, c, precision("fp32"));
  // ZeRO-1 over 4 nodes of one rank: a reduce-scatter of the gradients and an all-gather of the parameters,
  // 3/4 of each sent by every rank.
  const double bytes = static_cast<double>(e.memory.param_elements) * 4 * 2 * 3 / 4;
  EXPECT_NEAR(e.time.network_cpu, bytes * 2e-9, 1e-9);
  EXPECT_NEAR(e.time.total - base.time.total, e.time.network_cpu, 1e-9);
  c.devices_per_node = 4;  // one node: shared memory, no network
  EXPECT_EQ(estimate(job, l, c, precision("fp32")).time.network_cpu, 0);

  // Two data centres of two one-rank nodes, hierarchical: the reduce-scatter and all-gather inside a
  // centre (1/2 of each sent) always cost; the long-haul bytes (each rank's half of the gradients, all-reduced
  // across: sent once) cost only what exceeds the wait on that link.
  c.devices_per_node = 1;
  c.data_centers = 2;
  c.inter_dc_rtt = 0;
  Layout h = l;
  h.instances = 2;
  const double grads = static_cast<double>(e.memory.param_elements) * 4, inside = grads * 2 / 2;
  c.inter_dc_bandwidth = 1e8;  // slow: the haul's CPU time hides in its wait
  EXPECT_NEAR(estimate(job, h, c, precision("fp32")).time.network_cpu, inside * 2e-9, 1e-9);
  c.inter_dc_bandwidth = 1e12;  // fast: the haul's CPU time is past its wait
  const Estimate fast = estimate(job, h, c, precision("fp32"));
  EXPECT_NEAR(fast.time.network_cpu, inside * 2e-9 + grads / 2 * 2e-9 - fast.time.inter_dc, 1e-9);
}

// Expert parallelism: each EP rank holds E / EP of every MoE layer's experts
// (the dense part unchanged), pays two all-to-alls per MoE layer forward and
// backward, and reduces the experts over E-DP = DP / EP ranks only.
TEST(PlanCost, ExpertParallelismSplitsExpertsAndPaysAllToAll) {
  const Job job = job_of("mixtral-8x7b", 4096, 256);
  const Cluster c = cluster_of("h100", 64);
  const model::ModelConfig& m = job.model;
  const double expert_params = static_cast<double>(m.moe.num_moe_layers(m.num_layers)) * m.moe.num_experts *
                               3.0 * m.moe_ffn() * m.hidden_size;
  Layout l;
  l.dp = 64;
  l.zero_stage = 1;
  const Estimate one = estimate(job, l, c, precision("bf16"));
  l.ep = 8;
  const Estimate eight = estimate(job, l, c, precision("bf16"));
  EXPECT_NEAR(static_cast<double>(one.memory.param_elements - eight.memory.param_elements), expert_params * 7 / 8,
              1e-6 * expert_params);
  EXPECT_EQ(one.time.ep_comm, 0);
  EXPECT_GT(eight.time.ep_comm, 0);
  EXPECT_LT(eight.memory.total(), one.memory.total());
  EXPECT_LT(eight.time.dp_comm_total, one.time.dp_comm_total);  // the experts reduce over 8 ranks, not 64
  EXPECT_NE(eight.layout.flags(job).find("--expert-model-parallel-size 8"), std::string::npos);
  // The search tries EP, and bad EP layouts are refused naming the flags.
  const SearchResult r = search(job, c, precision("bf16"), {.tp = 1, .pp = 1});
  EXPECT_TRUE(std::any_of(r.ranked.begin(), r.ranked.end(), [](const Estimate& e) { return e.layout.ep == 8; }));
  l.ep = 3;
  EXPECT_THROW(estimate(job, l, c, precision("bf16")), Error);
}

TEST(PlanSearch, AModelThatFitsOnlyAtTp8Pp4IsFound) {
  // 32 devices with the distributed optimizer and no recompute (Megatron's usual setting): a 30B-class
  // model whose weights and optimizer state need 32-way model parallelism and whose activations need TP 8.
  Job job;
  job.model = model::model_preset("gpt3-175b");
  job.model.num_layers = 32;
  job.model.hidden_size = 8192;
  job.model.num_attention_heads = 64;
  job.model.max_position_embeddings = 2048;
  job.seq_length = 2048;
  job.global_batch_size = 64;
  Cluster c = cluster_of("a100", 32);
  Constraints pins;
  pins.zero_stage = 1;
  pins.recompute = false;
  c.device.memory_bytes = 1e15;  // everything fits: find the two smallest needs
  SearchResult all = search(job, c, precision("bf16"), pins);
  ASSERT_FALSE(all.ranked.empty());
  double tp8pp4 = 1e30, others = 1e30;
  for (const Estimate& e : all.ranked) {
    double& slot = e.layout.tp == 8 && e.layout.pp == 4 ? tp8pp4 : others;
    slot = std::min(slot, e.memory.total());
  }
  ASSERT_LT(tp8pp4, others);
  c.device.memory_bytes = (tp8pp4 + others) / 2;
  const SearchResult r = search(job, c, precision("bf16"), pins);
  ASSERT_FALSE(r.ranked.empty());
  for (const Estimate& e : r.ranked) {
    EXPECT_EQ(e.layout.tp, 8) << e.layout.describe();
    EXPECT_EQ(e.layout.pp, 4) << e.layout.describe();
  }
  EXPECT_FALSE(r.rejected.empty());
  EXPECT_NE(r.rejected.front().why_not.find("GiB >"), std::string::npos);
}

TEST(PlanSearch, AnImpossibleRequestSaysWhatIsMissing) {
  const Job job = job_of("llama3-405b", 8192, 8);
  const Catalog cat = Catalog::builtin();
  const Cluster c = cluster_of("h100", 8);
  const SearchResult r = search(job, c, precision("bf16"), {}, &cat);
  EXPECT_TRUE(r.ranked.empty());
  EXPECT_NE(r.none_fit.find("needs at least"), std::string::npos) << r.none_fit;
  EXPECT_NE(r.none_fit.find("h100 has 80.0 GiB (largest in the catalog: b200, 180.0 GiB)"), std::string::npos)
      << r.none_fit;
  // 405B in bf16 with Adam is 18 B x 406e9 / 8 devices even at the most sharded layout.
  EXPECT_GT(r.rejected.front().memory.total(), 18.0 * 405e9 / 8 * 0.95);
}

TEST(PlanSearch, KnownRulesHold) {
  const Job job = job_of("llama3-70b", 4096, 512);
  const Cluster c = cluster_of("h100", 256);
  const SearchResult r = search(job, c, precision("bf16"), {});
  ASSERT_FALSE(r.ranked.empty());
  for (const Estimate& e : r.ranked) {
    EXPECT_LE(e.layout.tp, 8);  // TP within a node
    if (e.layout.tp > 1) {
      EXPECT_TRUE(e.layout.sequence_parallel);
    }
  }
  for (size_t k = 1; k < r.ranked.size(); ++k) EXPECT_GE(r.ranked[k - 1].tokens_per_s * 1.006, r.ranked[k].tokens_per_s);
  // Pinning evaluates exactly the given layout.
  Constraints pins;
  pins.tp = 4;
  pins.pp = 4;
  pins.virtual_stages = 1;
  pins.micro_batch_size = 1;
  pins.zero_stage = 1;
  pins.recompute = false;
  const SearchResult one = search(job, c, precision("bf16"), pins);
  EXPECT_EQ(one.considered, 1);
}

TEST(PlanInput, BadInputGetsClearErrors) {
  const Catalog cat = Catalog::builtin();
  try {
    cat.device("h800");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--device h800: not in the hardware catalog; known devices: a100, b200, cpu, h100, h200"),
              std::string::npos)
        << e.what();
  }
  const Job job = job_of("llama3-8b", 4096, 64);
  Cluster c = cluster_of("h100", 12);
  EXPECT_THROW(c.validate(), Error);  // 12 devices are not whole nodes of 8
  c = cluster_of("h100", 16);
  Constraints pins;
  pins.tp = 3;
  try {
    search(job, c, precision("bf16"), pins);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--tensor-model-parallel-size 3 does not divide --num-attention-heads 32"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(precision("fp4"), Error);
  EXPECT_THROW(Catalog::parse("[device.x]\nname = \"x\"\n", "t.toml"), Error);  // missing fields
  EXPECT_THROW(Catalog::parse("[device.x]\nmemory_gib = 1\nbogus = 2\n", "t.toml"), Error);
  c.data_centers = 2;
  EXPECT_THROW(c.validate(), Error);  // no inter-DC link given
}

TEST(PlanCatalog, UserEntriesParseAndOverride) {
  Catalog cat = Catalog::parse(R"(
[device.mygpu]
name = "test device"
memory_gib = 40
memory_gbs = 1000
peak_tflops = { bf16 = 100 }
gemm_efficiency = 0.5
gemm_knee = 64
runtime_overhead_gib = 1
devices_per_node = 4
intra_node_gbs = 100
intra_node_latency_us = 5
inter_node_gbs = 10
inter_node_latency_us = 10
)",
                               "user.toml");
  const Device& d = cat.device("mygpu");
  EXPECT_DOUBLE_EQ(d.memory_bytes, 40 * GiB);
  EXPECT_DOUBLE_EQ(d.peak_flops("bf16"), 100e12);
  EXPECT_THROW(d.peak_flops("fp8"), Error);
  EXPECT_NEAR(d.gemm_fraction(1e9, 1e9, 64), 0.25, 1e-6);
}

}  // namespace
}  // namespace claw::plan
