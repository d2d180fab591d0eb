// Data parallelism and ZeRO 0-3 equal the single-rank run.
//
// Every rank first trains the reference itself: one rank, the whole global
// batch cut into micro-batches, 20 AdamW steps. Then the group trains the
// same model from the same initialisation, each rank on its data-parallel
// slice (GlobalBatch's Megatron sampler order), with the ZeRO stage, overlap
// and bucket size under test. Per-step losses and the final parameters
// (gathered from the shards under ZeRO-3) must agree with the reference:
// only the order of additions differs (partial sums per rank, then the
// reduction). Losses: relative 2e-5 (seen: up to 7e-8). Parameters after 20
// steps at lr 1e-3 (a parameter moves up to 2e-2): RMS difference 5e-7
// (seen: below 5e-8) and largest difference 5e-4 (seen: up to 1.1e-4):
// AdamW divides by sqrt(v), so the few elements whose gradient is near zero
// turn rounding differences into differences of whole updates.
//
//   mpirun -np N test_data_parallel     (N = 1, 2, 4; oversubscribed is fine)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "claw/comm/world.h"
#include "claw/core/philox.h"
#include "claw/kernels/cpu/blas.h"
#include "claw/model/config.h"
#include "claw/model/gpt.h"
#include "claw/optim/adamw.h"
#include "claw/parallel/data_parallel.h"
#include "claw/runtime/model_chunks.h"
#include "claw/train/batch.h"
#include "claw/train/step.h"
#include "mpi_gtest.h"
#include "parity_batches.h"

namespace claw {
namespace {

using parity::Data;

comm::World* g_world = nullptr;
std::shared_ptr<comm::Group> g_dp;

constexpr int64_t kT = 32, kGB = 8, kSteps = 20;
constexpr double kLossTol = 2e-5, kParamTol = 5e-4, kParamRmsTol = 5e-7;

model::ModelConfig small(const char* preset, double dropout) {
  model::ModelConfig c = model::model_preset(preset);
  c.vocab_size = 1000;  // small head: the blocks dominate the buckets
  c.hidden_dropout = dropout;
  return c;
}

using parity::adam;
using parity::assign_slice;
using parity::lr_at;
Data batch_for_step(int64_t step) { return parity::batch_for_step(step, kGB, kT, 1000); }

struct Trajectory {
  std::vector<double> losses, norms;
  std::vector<float> params;
};

Trajectory reference(const model::ModelConfig& cfg, int64_t mbs) {
  // Cases share references (they differ in the parallel settings only).
  static std::map<std::tuple<std::string, double, int64_t>, Trajectory> done;
  const auto key = std::make_tuple(cfg.name, cfg.hidden_dropout, mbs);
  if (auto it = done.find(key); it != done.end()) return it->second;
  const CpuCtx cpu{1};
  model::GPT m(cfg);
  m.init_weights(cpu, 7);
  m.reserve(mbs, kT);
  optim::AdamW opt(m.store(), adam());
  train::GlobalBatch batch(kGB / mbs, mbs, kT, {});
  runtime::ModelChunks whole(m, nullptr, batch.micro_batches(), mbs, kT);
  Trajectory r;
  for (int64_t s = 0; s < kSteps; ++s) {
    Data d = batch_for_step(s);
    batch.assign(d.tokens, d.targets);
    train::StepResult res = train::train_step(whole, opt, cpu, batch, s, lr_at(s), 7, s * kGB);
    r.losses.push_back(res.loss);
    r.norms.push_back(res.grad_norm);
  }
  r.params.assign(m.store().values(), m.store().values() + m.store().total());
  done[key] = r;
  return r;
}

Trajectory data_parallel(const model::ModelConfig& cfg, int64_t mbs, parallel::DataParallelConfig dcfg) {
  const CpuCtx cpu{1};
  comm::Group& dp = *g_dp;
  model::GPT m(cfg, parallel::store_options(dcfg.zero_stage, dp.size(), dp.rank()));
  m.init_weights(cpu, 7);
  m.reserve(mbs, kT);
  parallel::DataParallel engine(m, dp, dcfg);
  optim::AdamW opt(engine.segments(), adam());
  train::GlobalBatch batch(kGB / (mbs * dp.size()), mbs, kT, {}, dp.size(), dp.rank());
  runtime::ModelChunks whole(m, &engine, batch.micro_batches(), mbs, kT);
  Trajectory r;
  for (int64_t s = 0; s < kSteps; ++s) {
    assign_slice(batch, batch_for_step(s));
    train::StepResult res = train::train_step(whole, opt, cpu, batch, s, lr_at(s), 7, s * kGB);
    r.losses.push_back(res.loss);
    r.norms.push_back(res.grad_norm);
  }
  r.params.resize(m.store().total());
  engine.gather_values(r.params.data());
  return r;
}

struct Case {
  const char* preset;
  int stage;
  bool overlap;
  int64_t mbs;          // micro-batch size (micro-batches per rank = 8 / (mbs x DP))
  int64_t bucket_size;  // elements (small: several buckets)
  double dropout;
};

class DataParallelEqualsSingleRank : public ::testing::TestWithParam<Case> {};

TEST_P(DataParallelEqualsSingleRank, LossesAndFinalParameters) {
  const Case c = GetParam();
  const int dp = g_dp->size();
  if (kGB % (c.mbs * dp) != 0) GTEST_SKIP() << "global batch " << kGB << " does not split into " << dp << " x " << c.mbs;
  const model::ModelConfig cfg = small(c.preset, c.dropout);
  const Trajectory ref = reference(cfg, c.mbs);
  const Trajectory got = data_parallel(cfg, c.mbs,
                                {.zero_stage = c.stage, .bucket_size = c.bucket_size,
                                 .overlap_grad_reduce = c.overlap, .overlap_param_gather = c.overlap});
  double worst_loss = 0, worst_param = 0;
  for (int64_t s = 0; s < kSteps; ++s) {
    const double d = std::abs(got.losses[s] - ref.losses[s]) / std::abs(ref.losses[s]);
    worst_loss = std::max(worst_loss, d);
    EXPECT_LE(d, kLossTol) << "step " << s + 1 << ": " << got.losses[s] << " vs " << ref.losses[s];
    EXPECT_NEAR(got.norms[s], ref.norms[s], 1e-4 * ref.norms[s]) << "grad norm, step " << s + 1;
  }
  ASSERT_EQ(got.params.size(), ref.params.size());
  double sq = 0;
  for (size_t i = 0; i < ref.params.size(); ++i) {
    const double d = std::abs(got.params[i] - ref.params[i]);
    worst_param = std::max(worst_param, d);
    sq += d * d;
  }
  const double rms = std::sqrt(sq / static_cast<double>(ref.params.size()));
  EXPECT_LE(worst_param, kParamTol);
  EXPECT_LE(rms, kParamRmsTol);
  if (g_world->rank() == 0)
    std::printf("dp %d zero %d overlap %d mbs %lld micro-batches/rank %lld: worst relative loss diff %.2e, worst "
                "parameter diff %.2e (rms %.1e), final loss %.6f\n",
                dp, c.stage, c.overlap, static_cast<long long>(c.mbs), static_cast<long long>(kGB / (c.mbs * dp)),
                worst_loss, worst_param, rms, got.losses.back());
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int stage = 0; stage <= 3; ++stage)
    for (bool overlap : {false, true}) {
      out.push_back({"gpt2-tiny", stage, overlap, 1, 300'000, 0.0});  // several micro-batches per rank
      out.push_back({"gpt2-tiny", stage, overlap, 2, 0, 0.1});        // default buckets, dropout
    }
  for (int stage : {0, 3}) out.push_back({"llama-tiny", stage, true, 1, 500'000, 0.0});  // untied head, GQA, SwiGLU
  return out;
}

INSTANTIATE_TEST_SUITE_P(All, DataParallelEqualsSingleRank, ::testing::ValuesIn(cases()));

// ZeRO memory: each rank holds 1/DP of the sharded buffers (plus slots).
TEST(DataParallelMemory, ShardsShrinkWithTheGroup) {
  const model::ModelConfig cfg = small("gpt2-tiny", 0.0);
  const int dp = g_dp->size();
  for (int stage = 0; stage <= 3; ++stage) {
    model::GPT m(cfg, parallel::store_options(stage, dp, g_dp->rank()));
    parallel::DataParallel engine(m, *g_dp, {.zero_stage = stage});
    const parallel::DataParallelMemory mem = engine.memory();
    const size_t full = m.store().bytes();
    EXPECT_EQ(mem.values, stage >= 3 ? full / dp : full);
    EXPECT_EQ(mem.grads, stage >= 2 ? full / dp : full);
    if (stage >= 1) {
      EXPECT_LE(mem.optimizer, 2 * full / dp + 2 * 64 * m.store().params().size());
    } else {
      EXPECT_GE(mem.optimizer, 2 * static_cast<size_t>(m.store().numel()) * sizeof(float));
    }
  }
}

}  // namespace
}  // namespace claw

int main(int argc, char** argv) {
  std::unique_ptr<claw::comm::World> world = claw::testing_mpi::init(argc, argv);
  claw::g_world = world.get();
  claw::g_dp = world->world_group();
  const int rc = claw::testing_mpi::run_all_tests_on_every_rank(*world);
  claw::g_dp.reset();
  return rc;
}
