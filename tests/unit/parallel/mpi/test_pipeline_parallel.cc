// Pipeline parallelism equals the single-rank run.
//
// The reference is one rank training the whole model, 8 micro-batches per
// step, 6 AdamW steps (computed once, shared_reference.h: through the warmup
// to the peak learning rate, as many as a schedule's bugs need to show; the 20-step run of
// pipeline parallelism is the CLI's, mpi_train_pp_parity, and a dropped row
// of one send is caught within 4, mpi_mutation_pp). Then the ranks train the same
// model as a pipeline of world-size stages under each schedule, from the same
// initialisation (parameters are initialised by name and global element
// index, so a stage's layers equal the whole model's), and compare the
// per-step losses and gradient norms (relative 2e-5, as the data-parallel
// test) and, on every stage, the final values of the parameters it holds
// against the reference's (largest difference 1e-3, one update at the peak
// learning rate; RMS 5e-7). Tied embeddings: the first stage's word
// embeddings and the last stage's copy must also end equal.
//
//   mpirun -np P test_pipeline_parallel     (P = 2, 4)
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "claw/comm/parallel_state.h"
#include "claw/comm/world.h"
#include "claw/kernels/cpu/blas.h"
#include "claw/model/gpt.h"
#include "claw/parallel/pipeline_executor.h"
#include "claw/parallel/pipeline_layout.h"
#include "claw/runtime/model_chunks.h"
#include "claw/train/step.h"
#include "mpi_gtest.h"
#include "parity_batches.h"
#include "shared_reference.h"

namespace claw {
namespace {

comm::World* g_world = nullptr;
std::unique_ptr<comm::ParallelState> g_ps;

constexpr int64_t kT = 32, kGB = 8, kSteps = 6, kV = 1000, kLayers = 8;
constexpr double kLossTol = 2e-5, kParamTol = 1e-3, kParamRmsTol = 5e-7;

model::ModelConfig small(const char* preset, double dropout) {
  model::ModelConfig c = model::model_preset(preset);
  c.vocab_size = kV;
  c.num_layers = kLayers;
  c.hidden_dropout = dropout;
  return c;
}

struct Trajectory {
  std::vector<double> losses, norms;
  std::map<std::string, std::vector<float>> params;  // final values by name (the reference's)
  void save(parity::RefWriter& w) const {
    w.put(losses);
    w.put(norms);
    w.put_u64(params.size());
    for (const auto& [name, v] : params) {
      w.put(name);
      w.put(v);
    }
  }
  static Trajectory load(parity::RefReader& r) {
    Trajectory t;
    t.losses = r.vec<double>();
    t.norms = r.vec<double>();
    for (uint64_t n = r.u64(); n > 0; --n) {
      std::string name = r.str();
      t.params[name] = r.vec<float>();
    }
    return t;
  }
};

// The single-rank run, once per model and dropout: the schedules and stage
// splits of a model all compare against the same one.
Trajectory compute_reference(const model::ModelConfig& cfg) {
  const CpuCtx cpu{1};
  model::GPT m(cfg);
  m.init_weights(cpu, 7);
  m.reserve(1, kT);
  optim::AdamW opt(m.store(), parity::adam());
  train::GlobalBatch batch(kGB, 1, kT, {});
  runtime::ModelChunks whole(m, nullptr, kGB, 1, kT);
  Trajectory r;
  for (int64_t s = 0; s < kSteps; ++s) {
    parity::assign_slice(batch, parity::batch_for_step(s, kGB, kT, kV));
    const train::StepResult res = train::train_step(whole, opt, cpu, batch, s, parity::lr_at(s), 7, s * kGB);
    r.losses.push_back(res.loss);
    r.norms.push_back(res.grad_norm);
  }
  for (const model::Param* p : m.store().params())
    r.params[p->spec.name].assign(p->data(), p->data() + p->spec.shape.numel());
  return r;
}

const Trajectory& reference(const model::ModelConfig& cfg) {
  static std::map<std::pair<std::string, double>, Trajectory> done;
  const auto key = std::make_pair(cfg.name, cfg.hidden_dropout);
  if (auto it = done.find(key); it != done.end()) return it->second;
  const std::string name = "test_pipeline_parallel " + cfg.name + " dropout " + std::to_string(cfg.hidden_dropout) +
                           " steps " + std::to_string(kSteps);
  return done[key] = parity::shared_reference<Trajectory>(*g_world->world_group(), name,
                                                           [&] { return compute_reference(cfg); });
}

struct Case {
  const char* preset;
  const char* schedule;
  int64_t layers_per_virtual_stage;  // 0: not interleaved
  bool uneven;                       // PP 2: stages of 3 + 5 layers; PP 4: 1 + 3 + 3 + 1
  double dropout;
};

std::string label(const Case& c) {
  std::string s = std::string(c.preset) + " " + c.schedule;
  if (c.layers_per_virtual_stage) s += " v-stage " + std::to_string(c.layers_per_virtual_stage) + " layers";
  if (c.uneven) s += " uneven stages";
  return s;
}

class PipelineEqualsSingleRank : public ::testing::TestWithParam<Case> {};

TEST_P(PipelineEqualsSingleRank, LossesAndFinalParameters) {
  const Case c = GetParam();
  comm::Group& pp = g_ps->pp();
  const int p = pp.size(), stage = pp.rank();
  const model::ModelConfig cfg = small(c.preset, c.dropout);
  const parallel::PipelineLayout layout =
      parallel::make_pipeline_layout({.num_layers = kLayers, .stages = p,
                                      .layers_per_virtual_stage = c.layers_per_virtual_stage,
                                      .first_stage_layers = c.uneven ? (p == 2 ? 3 : 1) : -1,
                                      .last_stage_layers = c.uneven && p > 2 ? 1 : -1});
  const parallel::ScheduleConfig schedule_config{.kind = parallel::parse_schedule_kind(c.schedule), .stages = p,
                                                 .microbatches = kGB, .chunks = layout.chunks};
  const parallel::Schedule schedule = parallel::make_schedule(schedule_config);

  const CpuCtx cpu{1};
  std::vector<std::unique_ptr<model::GPT>> owned;
  std::vector<model::GPT*> chunks;
  std::vector<model::Segment> segments;
  for (int ch = 0; ch < layout.chunks; ++ch) {
    const parallel::LayerRange r = layout.at(stage, ch);
    owned.push_back(std::make_unique<model::GPT>(
        cfg, model::StoreOptions{}, model::TensorParallel{},
        model::PipelineStage{.first_layer = r.first, .num_layers = r.count,
                             .pre_process = stage == 0 && ch == 0,
                             .post_process = stage == p - 1 && ch == layout.chunks - 1}));
    chunks.push_back(owned.back().get());
    chunks.back()->init_weights(cpu, 7);
    for (const model::Segment& s : chunks.back()->store().full_segments()) segments.push_back(s);
  }
  runtime::ModelChunks stage_chunks(chunks, {}, pp, g_ps->embedding(), schedule_config, 1, kT);
  optim::AdamW opt(segments, parity::adam());
  train::GlobalBatch batch(kGB, 1, kT, {});
  Trajectory got;
  for (int64_t s = 0; s < kSteps; ++s) {
    parity::assign_slice(batch, parity::batch_for_step(s, kGB, kT, kV));
    const train::StepResult res = train::train_step(stage_chunks, opt, cpu, batch, s, parity::lr_at(s), 7, s * kGB);
    got.losses.push_back(res.loss);
    got.norms.push_back(res.grad_norm);
  }

  const Trajectory& ref = reference(cfg);
  double worst_loss = 0;
  for (int64_t s = 0; s < kSteps; ++s) {
    const double d = std::abs(got.losses[s] - ref.losses[s]) / std::abs(ref.losses[s]);
    worst_loss = std::max(worst_loss, d);
    EXPECT_LE(d, kLossTol) << "step " << s + 1 << ": " << got.losses[s] << " vs " << ref.losses[s];
    EXPECT_NEAR(got.norms[s], ref.norms[s], 1e-4 * ref.norms[s]) << "grad norm, step " << s + 1;
  }
  double worst_param = 0, sq = 0;
  int64_t count = 0;
  for (model::GPT* m : chunks)
    for (const model::Param* p : m->store().params()) {
      const auto rp = ref.params.find(p->spec.name);
      ASSERT_TRUE(rp != ref.params.end()) << p->spec.name;
      ASSERT_EQ(static_cast<int64_t>(rp->second.size()), p->spec.shape.numel()) << p->spec.name;
      for (int64_t i = 0; i < p->spec.shape.numel(); ++i) {
        const double d = std::abs(double(p->data()[i]) - rp->second[i]);
        worst_param = std::max(worst_param, d);
        sq += d * d;
        ++count;
      }
    }
  worst_param = pp.all_reduce_value(worst_param, comm::ReduceOp::max);
  sq = pp.all_reduce_value(sq);
  count = pp.all_reduce_value(count);
  const double rms = std::sqrt(sq / static_cast<double>(count));
  EXPECT_LE(worst_param, kParamTol);
  EXPECT_LE(rms, kParamRmsTol);
  if (g_world->rank() == 0) {
    std::string slots;
    for (int ch = 0; ch < layout.chunks; ++ch)
      slots += (ch ? "," : "") + std::to_string(parallel::PipelineExecutor::slots_needed(schedule, 0)[ch]);
    std::printf("pp %d %s: %lld steps x %lld micro-batches, worst relative loss diff %.2e, worst parameter diff %.2e "
                "(rms %.1e), final loss %.6f; stage 0 activation slots per chunk %s\n",
                p, label(c).c_str(), static_cast<long long>(kSteps), static_cast<long long>(kGB), worst_loss, worst_param,
                rms, got.losses.back(),
                slots.c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, PipelineEqualsSingleRank,
    ::testing::Values(Case{"gpt2-tiny", "1f1b", 0, false, 0.1}, Case{"gpt2-tiny", "gpipe", 0, false, 0.0},
                      Case{"gpt2-tiny", "interleaved", 1, false, 0.1}, Case{"llama-tiny", "1f1b", 0, false, 0.0},
                      Case{"llama-tiny", "interleaved", 1, false, 0.0}, Case{"gpt2-tiny", "1f1b", 0, true, 0.0},
                      Case{"gpt2-tiny", "zb-h1", 0, false, 0.1}, Case{"llama-tiny", "zb-h1", 0, false, 0.0}));

}  // namespace
}  // namespace claw

int main(int argc, char** argv) {
  std::unique_ptr<claw::comm::World> world = claw::testing_mpi::init(argc, argv);
  claw::g_world = world.get();
  claw::g_ps = claw::comm::ParallelState::create(*world, {.pp = world->size()});
  const int rc = claw::testing_mpi::run_all_tests_on_every_rank(*world);
  claw::g_ps.reset();
  return rc;
}
